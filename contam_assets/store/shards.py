"""What happened to each shard beyond its rows: errors per step, quarantine decisions, skipped pool entries, retirement.

    shard_errors(shard, step, message, recorded_at)     a step (listing, fingerprint, scan, write, mix) that failed
    shard_decisions(shard, shard_fingerprint, decision, ...)  "accept": mix an incomplete shard's readable lines
    pool_skips(path, reason, listed_at)                 pool entries the last listing did not read, and why
    retired_shards(shard, retired_at, matches, removals, files)   shards that left the pool, and what was removed

Every write is one short transaction under the store's writer lock (callers hold a connection).
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path

import duckdb
import polars as pl

from contam_assets.store import tables
from contam_assets.store.artifacts import remove_outputs
from contam_assets.store.db import table_exists

# every table whose rows belong to one shard (retiring a shard deletes them all)
SHARD_TABLES = ("matches", "shard_stats", "removals", "mix_stats", "shard_errors", "shard_decisions", "shard_scans",
                "shard_task_scans", "cuts")


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


def record_error(con: duckdb.DuckDBPyConnection, shard: str, step: str, message: str) -> None:
    tables.ensure_schema(con)
    con.execute("delete from shard_errors where shard = ? and step = ?", [shard, step])
    con.execute("insert into shard_errors values (?, ?, ?, ?)", [shard, step, message[:2000], _now()])


def clear_errors(con: duckdb.DuckDBPyConnection, shard: str, steps: tuple[str, ...]) -> None:
    if table_exists(con, "shard_errors"):
        con.execute("delete from shard_errors where shard = ? and step in (select unnest(?::varchar[]))", [shard, list(steps)])


def errors(con: duckdb.DuckDBPyConnection) -> list[dict]:
    if not table_exists(con, "shard_errors"):
        return []
    cur = con.execute("select shard, step, message from shard_errors order by shard, step")
    return [dict(shard=s, step=st, message=m) for s, st, m in cur.fetchall()]


def record_pool_skips(con: duckdb.DuckDBPyConnection, skipped: list) -> None:
    """Replace the list of pool entries the listing did not read (PoolEntry items)."""
    tables.ensure_schema(con)
    now = _now()
    df = pl.DataFrame([dict(path=e.path, reason=e.reason, listed_at=now) for e in skipped],
                      schema={"path": pl.Utf8, "reason": pl.Utf8, "listed_at": pl.Datetime("us")})
    tables.replace_table(con, "pool_skips", df)


def accepted(con: duckdb.DuckDBPyConnection, shard: str, fingerprint: str | None) -> bool:
    """True when a reviewer accepted this shard, as it is now, for the mix although its stream broke."""
    if not table_exists(con, "shard_decisions"):
        return False
    row = con.execute("""select decision from shard_decisions where shard = ? and shard_fingerprint is not distinct from ?
                         order by decided_at desc limit 1""", [shard, fingerprint]).fetchone()
    return bool(row and row[0] == "accept")


def decide(con: duckdb.DuckDBPyConnection, shard: str, decision: str, reviewer: str, note: str = "") -> str | None:
    """Record a reviewer's decision on an incomplete shard (for its current fingerprint); the fingerprint."""
    tables.ensure_schema(con)
    row = con.execute("select shard_fingerprint from shard_stats where shard = ?", [shard]).fetchone()
    if row is None:
        raise KeyError(shard)
    con.execute("insert into shard_decisions values (?, ?, ?, ?, ?, ?)", [shard, row[0], decision, reviewer, note, _now()])
    return row[0]


def retire(con: duckdb.DuckDBPyConnection, out_dir: Path, shards: list[str]) -> list[dict]:
    """Remove every trace of shards that left the pool: their rows, mix, rejected file and token cache.

    Returns one row per retired shard (also kept in `retired_shards` for the report)."""
    if not shards:
        return []
    tables.ensure_schema(con)
    done = []
    for shard in shards:
        counts = {}
        for t in ("matches", "removals"):
            counts[t] = con.execute(f"select count(*) from {t} where shard = ?", [shard]).fetchone()[0] \
                if table_exists(con, t) else 0
        files = remove_outputs(out_dir, shard)
        (Path(out_dir) / "mix_state" / f"{shard}.json").unlink(missing_ok=True)
        cache = Path(out_dir) / "token_cache" / shard
        if cache.is_dir():
            shutil.rmtree(cache, ignore_errors=True)
            files.append(f"token_cache/{shard}/")
        con.execute("begin transaction")
        try:
            for t in SHARD_TABLES:
                if table_exists(con, t):
                    con.execute(f"delete from {t} where shard = ?", [shard])
            con.execute("delete from retired_shards where shard = ?", [shard])
            con.execute("insert into retired_shards values (?, ?, ?, ?, ?)",
                        [shard, _now(), counts["matches"], counts["removals"], json.dumps(files)])
            con.execute("commit")
        except Exception:
            con.execute("rollback")
            raise
        done.append(dict(shard=shard, matches=counts["matches"], removals=counts["removals"], files=files))
    return done


def unretire(con: duckdb.DuckDBPyConnection, shards: list[str]) -> None:
    """A shard back in the pool is no longer retired."""
    if shards and table_exists(con, "retired_shards"):
        con.execute("delete from retired_shards where shard in (select unnest(?::varchar[]))", [shards])
