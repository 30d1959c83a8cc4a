"""DuckDB access shared by every part of contam-assets.

DuckDB allows one writing process per database file.  Shard scans run in
several processes at once (Dagster's multiprocess executor, backfills, the
CLI), so every connection is taken under an advisory file lock beside the
database: exclusive for writers, shared for readers.  Writers therefore queue
instead of failing on DuckDB's own lock, and no rows are lost.

A wait is never silent: one line on stderr names the file and the process that holds it, at once for DuckDB's own
lock (a notebook or the duckdb shell holding the file open: DuckDB's message names it) and after ``WAIT_NOTICE_S``
for ours (``/proc/locks`` names it; another contam process's write takes milliseconds); after the db_wait_s setting's
seconds (default 600) the wait ends in a TimeoutError of one line that names them again.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import sys
import time
from pathlib import Path
from typing import Iterator

import duckdb

from contam_assets import settings


def _lock_path(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + ".lock")


WAIT_NOTICE_S = 1.0  # a wait for the database longer than this is announced, once
DEFAULT_WAIT_S = settings.get("db_wait_s").default  # how long a wait for the database lasts before the run gives up


def wait_limit(env=os.environ) -> float:
    """The db_wait_s setting (seconds, default 600): how long a connection waits for another process's lock."""
    try:
        return max(0.0, settings.env_value("db_wait_s", env))
    except ValueError:
        return DEFAULT_WAIT_S


def _printable(text: str, limit: int = 200) -> str:
    text = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _process(pid: int, fallback: str = "") -> str:
    """``process N (its command line)``: the command line from /proc where it can be read."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        cmd = fallback
    return f"process {pid}" + (f" ({_printable(cmd)})" if cmd.strip() else "")


def _flock_holder(lock_path: Path) -> str:
    """Who holds the flock on ``lock_path`` (Linux's /proc/locks), else "another process"."""
    try:
        st = os.stat(lock_path)
        dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        with open("/proc/locks") as fh:
            for line in fh:
                parts = line.split()
                if "->" not in parts and len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == dev:
                    if int(parts[4]) != os.getpid():
                        return _process(int(parts[4]))
    except (OSError, ValueError):
        pass
    return "another process"


def _duckdb_holder(message: str) -> str:
    """Who holds DuckDB's own lock, from its message ("Conflicting lock is held in /usr/bin/python3 (PID 1234)")."""
    m = re.search(r"held in (.*?) \(PID (\d+)\)", message)
    return _process(int(m.group(2)), m.group(1)) if m else "another process"


def _is_lock_conflict(exc: Exception) -> bool:
    return "Could not set lock" in str(exc) or "Conflicting lock" in str(exc)


class _Wait:
    """One wait for the database: announced once after WAIT_NOTICE_S, a TimeoutError of one line at its end."""

    def __init__(self, db_path: Path, timeout_s: float):
        self.db_path, self.timeout_s = db_path, timeout_s
        self.start = time.monotonic()
        self.deadline = self.start + timeout_s
        self.told = False

    def check(self, holder, at_once: bool = False) -> None:
        """Called between tries; ``holder()`` names the process that holds the lock.  ``at_once``: announced at
        the first try (DuckDB's own lock, which no process of ours holds while we hold ours, is a foreign one)."""
        now = time.monotonic()
        if now > self.deadline:
            raise TimeoutError(f"gave up after {self.timeout_s:.0f} s waiting for {self.db_path}: held by "
                               f"{holder()}; set {settings.var('db_wait_s')} to wait longer")
        if not self.told and (at_once or now - self.start >= WAIT_NOTICE_S):
            self.told = True
            print(f"waiting for {self.db_path}: held by {holder()} (waiting up to {self.timeout_s:.0f} s, "
                  f"{settings.var('db_wait_s')})", file=sys.stderr, flush=True)


@contextlib.contextmanager
def connect(db_path: str | os.PathLike, read_only: bool = False,
            timeout_s: float | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """Open ``db_path`` under the cross-process lock and close it afterwards (``timeout_s``: default
    the db_wait_s setting, else 600 s)."""
    db_path = Path(db_path)
    wait = _Wait(db_path, wait_limit() if timeout_s is None else timeout_s)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    if read_only and not db_path.exists():
        read_only = False  # a fresh database must be created by someone
    lock_file = open(_lock_path(db_path), "a+")
    try:
        mode = fcntl.LOCK_SH if read_only else fcntl.LOCK_EX
        while True:
            try:
                fcntl.flock(lock_file.fileno(), mode | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                wait.check(lambda: _flock_holder(_lock_path(db_path)))
                time.sleep(0.05)
        con = _open_with_retry(db_path, read_only, wait)
        try:
            if read_only:  # an older database, read as it is: the columns a newer version reads, shown empty
                from contam_assets.store.translated_matches import read_only_view

                read_only_view(con)
            yield con
        finally:
            con.close()
    finally:
        fcntl.flock(lock_file.fileno(), fcntl.LOCK_UN)
        lock_file.close()


def _open_with_retry(db_path: Path, read_only: bool, wait: _Wait) -> duckdb.DuckDBPyConnection:
    # Our own lock serialises contam-assets processes; a foreign process (a
    # notebook holding the file open) can still hold DuckDB's lock, so retry.
    while True:
        try:
            return duckdb.connect(str(db_path), read_only=read_only)
        except duckdb.IOException as exc:
            if not _is_lock_conflict(exc):  # an unreadable or broken file: no wait makes it readable
                raise
            message = str(exc)
        wait.check(lambda: _duckdb_holder(message), at_once=True)  # outside the except: a timeout is one line
        time.sleep(0.2)


def table_exists(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    rows = con.execute("select count(*) from information_schema.tables where table_name = ?", [name]).fetchall()
    return bool(rows[0][0])


def query_df(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None):
    """Run a query and return a polars DataFrame (the whole result is consumed)."""
    import warnings

    import polars as pl

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # duckdb 2 notes the extra copy of a DB-API result
        return pl.from_arrow(con.execute(sql, params or []).to_arrow_table())
