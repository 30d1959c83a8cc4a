"""A remote output's per-shard tables, as Parquet parts written as the run goes.

With a remote ``--out`` the rows of each shard in the tables that are kept per shard (``PER_SHARD``: matches,
removals, shard_stats, shard_errors, mix_stats, cuts) go to the store as one Parquet part per table and shard,
``OUT/tables/<table>/shards/<shard>.parquet`` (the shard's bounded local name, ``mirror.local_rel``), when that
shard's mix is recorded (executor/mix.py), beside its mix object.  The other tables (instances, detect_settings,
pool_skips, ...) are small and whole: ``OUT/tables/<table>/part-0.parquet`` at the commit, as for a local output.
A reader takes ``OUT/tables/<table>/**/*.parquet``, which is every row of the table whatever the output.

What was uploaded is recorded in the run's local database (``table_parts``: table, shard, a digest of the shard's
rows, their count), so a part is uploaded again only when its rows changed, and the commit (``sync``) checks every
shard in one grouped query per table: a part whose rows changed since (a review decision, a rescan) is uploaded
again, the part of a shard that has no rows any more is deleted.  At the commit the parts on the store are the
database's rows, shard for shard, whether the run ran through or was killed and rerun.

A shard with no rows in a table has no part there.  The digest is the sum of DuckDB's ``hash`` of each row (and
the column count), so it does not depend on the rows' order.
"""

from __future__ import annotations

import fcntl
import shutil
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow.compute as pc
import pyarrow.parquet as pq

from contam_assets.store import outbox
from contam_assets.store.db import table_exists
from contam_assets.store.location import Location, redact, retrying
from contam_assets.store.mirror import local_rel

PER_SHARD = ("matches", "removals", "shard_stats", "shard_errors", "mix_stats", "cuts")
PART_FOLDERS = tuple(f"tables/{t}/shards/" for t in PER_SHARD)
LOCK = ".table_parts.lock"  # in the output's local folder: one sync (stage, push, record) at a time per output
STATE_DDL = "create table if not exists table_parts (tbl VARCHAR, shard VARCHAR, digest VARCHAR, rows BIGINT)"
_IN = "shard in (select unnest(?::varchar[]))"


def part_rel(table: str, shard: str) -> str:
    """The shard's part of ``table``, relative to the output."""
    return f"tables/{table}/shards/{local_rel(shard)}.parquet"


@dataclass
class Staged:
    """The parts to upload (written under ``folder``) and to delete, and what to record once that is done."""

    folder: Path
    upload: list[tuple[str, str, str, int]] = field(default_factory=list)  # (table, shard, digest, rows)
    delete: list[tuple[str, str]] = field(default_factory=list)  # (table, shard)
    kept: set[str] = field(default_factory=set)  # every part's path relative to the output, current after this

    def local(self, table: str, shard: str) -> Path:
        return self.folder / part_rel(table, shard)


def _digests(con: duckdb.DuckDBPyConnection, table: str, shards: list[str] | None) -> dict[str, tuple[str, int]]:
    if not table_exists(con, table):
        return {}
    ncols = len(con.execute(f"select * from {table} limit 0").description)
    where, params = (f"where {_IN}", [shards]) if shards is not None else ("", [])
    got = con.execute(f"select shard, count(*), sum(hash(t))::varchar from {table} t {where} group by shard",
                      params).fetchall()
    return {s: (f"{ncols}:{h}", n) for s, n, h in got if s is not None}


def _recorded(con: duckdb.DuckDBPyConnection, shards: list[str] | None) -> dict[tuple[str, str], str]:
    con.execute(STATE_DDL)
    where, params = (f"where {_IN}", [shards]) if shards is not None else ("", [])
    return {(t, s): d for t, s, d in con.execute(f"select tbl, shard, digest from table_parts {where}", params).fetchall()}


def stage(con: duckdb.DuckDBPyConnection, work: Path, shards: list[str] | None = None) -> Staged:
    """Compare the rows of ``shards`` (None: every shard) with what was uploaded; write the parts that changed under
    ``work/.table_parts-<id>/`` and list the parts to delete.  Needs a connection that may write (the record table)."""
    staged = Staged(Path(work) / f".table_parts-{uuid.uuid4().hex[:8]}")
    before = _recorded(con, shards)
    for table in PER_SHARD:
        now = _digests(con, table, shards)
        changed = [s for s, (d, _) in sorted(now.items()) if before.get((table, s)) != d]
        staged.kept |= {part_rel(table, s) for s in now}
        staged.delete += [(table, s) for (t, s) in sorted(before) if t == table and s not in now]
        if not changed:
            continue
        rows = con.sql(f"select * from {table} where {_IN}", params=[changed]).to_arrow_table()
        for s in changed:
            dst = staged.local(table, s)
            dst.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(rows.filter(pc.equal(rows["shard"], s)), dst, compression="zstd")
            staged.upload.append((table, s, *now[s]))
    return staged


def push(loc: Location, staged: Staged) -> int:
    """The staged parts uploaded (each local copy removed as it goes) and the gone ones deleted; UploadError (one
    line naming the object) on the first the store refuses.  The number of parts uploaded."""
    try:
        for table, shard, _, _ in staged.upload:
            outbox.upload(loc, staged.local(table, shard), part_rel(table, shard), remove=True)
        fs = loc.filesystem()
        for table, shard in staged.delete:
            url = loc.url(part_rel(table, shard))
            try:
                retrying(fs.rm_file, url)
            except FileNotFoundError:
                pass
            except Exception as exc:  # noqa: BLE001 - the store's error, in one line
                raise outbox.UploadError(f"delete of {redact(url)} failed: {outbox._store_error(exc)}") from None
    finally:
        shutil.rmtree(staged.folder, ignore_errors=True)
    return len(staged.upload)


def record(con: duckdb.DuckDBPyConnection, staged: Staged) -> None:
    """What ``push`` put on the store, in the run's database."""
    con.execute(STATE_DDL)
    done = staged.upload + [(t, s, None, 0) for t, s in staged.delete]
    if not done:
        return
    con.execute("begin transaction")
    try:
        for table, shard, digest, rows in done:
            con.execute("delete from table_parts where tbl = ? and shard = ?", [table, shard])
            if digest is not None:
                con.execute("insert into table_parts values (?, ?, ?, ?)", [table, shard, digest, rows])
        con.execute("commit")
    except Exception:
        con.execute("rollback")
        raise


def sync(connect, loc: Location, work: Path, shards: list[str] | None = None) -> Staged:
    """``stage``, ``push`` and ``record`` for ``shards`` (None: all; the commit's check), ``connect(read_only=...)``
    opening the run's database; the upload runs with no connection open.  The Staged (its ``kept``: the parts on
    the store now).  One sync at a time per output (an exclusive lock on ``work/LOCK``): a mix run's and the
    commit's syncs of the same shard cannot interleave, so the part on the store is the one ``table_parts`` records."""
    Path(work).mkdir(parents=True, exist_ok=True)
    with open(Path(work) / LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with connect() as con:
            staged = stage(con, work, shards)
        push(loc, staged)
        with connect() as con:
            record(con, staged)
    return staged
