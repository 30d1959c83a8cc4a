"""DuckDB access shared by every part of contam-assets.

DuckDB allows one writing process per database file.  Shard scans run in
several processes at once (Dagster's multiprocess executor, backfills, the
CLI), so every connection is taken under an advisory file lock beside the
database: exclusive for writers, shared for readers.  Writers therefore queue
instead of failing on DuckDB's own lock, and no rows are lost.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path
from typing import Iterator

import duckdb


def _lock_path(db_path: Path) -> Path:
    return db_path.with_name(db_path.name + ".lock")


@contextlib.contextmanager
def connect(db_path: str | os.PathLike, read_only: bool = False, timeout_s: float = 600.0) -> Iterator[duckdb.DuckDBPyConnection]:
    """Open ``db_path`` under the cross-process lock and close it afterwards."""
    db_path = Path(db_path)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    if read_only and not db_path.exists():
        read_only = False  # a fresh database must be created by someone
    lock_file = open(_lock_path(db_path), "a+")
    try:
        mode = fcntl.LOCK_SH if read_only else fcntl.LOCK_EX
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(lock_file.fileno(), mode | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"waited {timeout_s:.0f}s for the lock on {db_path}")
                time.sleep(0.05)
        con = _open_with_retry(db_path, read_only, deadline)
        try:
            yield con
        finally:
            con.close()
    finally:
        fcntl.flock(lock_file.fileno(), fcntl.LOCK_UN)
        lock_file.close()


def _open_with_retry(db_path: Path, read_only: bool, deadline: float) -> duckdb.DuckDBPyConnection:
    # Our own lock serialises contam-assets processes; a foreign process (a
    # notebook holding the file open) can still hold DuckDB's lock, so retry.
    while True:
        try:
            return duckdb.connect(str(db_path), read_only=read_only)
        except duckdb.IOException:
            if time.monotonic() > deadline:
                raise
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
