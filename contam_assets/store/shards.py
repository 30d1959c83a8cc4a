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
from contam_assets.store.files import atomic_write_text
from contam_assets.store.mirror import local_rel

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


def record_failed(con: duckdb.DuckDBPyConnection, shard: str, step: str, message: str,
                  out_dir: Path | None = None) -> None:
    """A listed shard that could not be scanned (its scan raised, or it could not be opened): its error, and one
    `shard_stats` row with status ``failed`` (counts 0, ``status_reason`` '<step>: <message>') in place of the rows
    of an earlier scan (matches, removals, scan state: the next run scans it again; with ``out_dir``, its mix file
    and mix state too, as a failed shard has none)."""
    tables.ensure_schema(con)
    row = dict.fromkeys(tables.STATS_COLUMNS) | {
        "shard": shard, "status": "failed", "status_reason": f"{step}: {message}"[:2000], "seconds": 0.0,
        **{c: 0 for c in ("read", "scanned", "too_short", "rejected", "flagged", "pending_review", "removed", "kept",
                          "bytes", "tokens", "candidates", "prefiltered")}}
    con.execute("begin transaction")
    try:
        for t in ("matches", "shard_stats", "shard_scans", "shard_task_scans", "mix_stats"):
            if table_exists(con, t):
                con.execute(f"delete from {t} where shard = ?", [shard])
        cols = ", ".join(tables.STATS_COLUMNS)
        con.execute(f"insert into shard_stats ({cols}) values ({', '.join('?' * len(tables.STATS_COLUMNS))})",
                    [row[c] for c in tables.STATS_COLUMNS])
        tables.recompute_removals(con, shard, transaction=False)
        con.execute("commit")
    except Exception:
        con.execute("rollback")
        raise
    record_error(con, shard, step, message)
    if out_dir is not None:
        remove_outputs(out_dir, shard, rejected=False)
        (Path(out_dir) / "mix_state" / f"{local_rel(shard)}.json").unlink(missing_ok=True)


FILE_CLASSES = ("ok", "incomplete", "failed", "skipped")


def file_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Every pool file of the last listing in exactly one class: ``skipped`` (a `pool_skips` row), ``failed`` (status
    failed, or a step failed for it: `shard_errors`), ``incomplete``, ``ok``; ``listed`` is their sum.  The run
    summary, run.json, the report and the report's Dagster metadata all show these numbers."""
    status: dict[str, str] = {}
    if table_exists(con, "shard_stats"):
        status = dict(con.execute("select shard, coalesce(status, 'ok') from shard_stats").fetchall())
    for e in errors(con):
        status[e["shard"]] = "failed"
    counts = dict.fromkeys(FILE_CLASSES, 0)
    for st in status.values():
        counts[st if st in counts else "failed"] += 1
    if table_exists(con, "pool_skips"):
        counts["skipped"] = con.execute("select count(*) from pool_skips").fetchone()[0]
    return {"listed": sum(counts.values()), **counts}


def file_counts_line(counts: dict[str, int]) -> str:
    return ", ".join([f"{counts['listed']} pool file(s) listed"] + [f"{counts[k]} {k}" for k in FILE_CLASSES])


def record_counts(out_dir: Path, files: dict[str, int]) -> None:
    """A run's :func:`file_counts` added to its run.json (under ``files``), beside the settings it records."""
    p = Path(out_dir) / "run.json"
    try:
        rec = json.loads(p.read_text())
    except (OSError, ValueError):
        return
    atomic_write_text(p, json.dumps(rec | {"files": files}, indent=2))


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
            direct = " and coalesce(via_task, '') = ''" if t == "matches" else ""  # not a translation's rows
            counts[t] = con.execute(f"select count(*) from {t} where shard = ?{direct}", [shard]).fetchone()[0] \
                if table_exists(con, t) else 0
        files = remove_outputs(out_dir, shard)
        (Path(out_dir) / "mix_state" / f"{local_rel(shard)}.json").unlink(missing_ok=True)
        cache = Path(out_dir) / "token_cache" / local_rel(shard)
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
