"""What each shard was scanned with, and the writes that merge a shard scan into the tables.

Two tables beside the data side's (docs/tables.md):

    shard_scans(shard, shard_fingerprint, size, mtime_ns, scan_config, stream_key,
                index_digest, mode, scanned_at)
        one row per shard: the bytes, detector settings and token stream of its last scan
    shard_task_scans(shard, task, task_hash, index_digest, scanned_at)
        one row per (shard, task): the task content its rows cover, and the index
        (IDF) their scores were computed with

A full scan replaces all of a shard's rows; an incremental scan deletes the rows of the
dropped tasks and inserts the rows of the added ones, and of every task in the documents
it walked again (ShardOutcome.lines), leaving every other row alone.  Each write is one
transaction, taken under contam_assets.store's writer lock.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import duckdb
import polars as pl

from contam_assets import store
from contam_assets.rescan.plan import ShardState
from contam_assets.rescan.shard import ShardOutcome
from contam_assets.store import tables
from contam_assets.store.faults import fault_point
from contam_assets.store.translated_matches import DIRECT

STATE_SCHEMA = {
    "shard_scans": """
        shard VARCHAR, shard_fingerprint VARCHAR, size BIGINT, mtime_ns BIGINT, scan_config VARCHAR,
        stream_key VARCHAR, index_digest VARCHAR, mode VARCHAR, scanned_at TIMESTAMP
    """,
    "shard_task_scans": """
        shard VARCHAR, task VARCHAR, task_hash VARCHAR, index_digest VARCHAR, scanned_at TIMESTAMP
    """,
}

TASK_SCAN_SCHEMA = {"shard": pl.Utf8, "task": pl.Utf8, "task_hash": pl.Utf8, "index_digest": pl.Utf8,
                    "scanned_at": pl.Datetime("us")}
SCAN_SCHEMA = {"shard": pl.Utf8, "shard_fingerprint": pl.Utf8, "size": pl.Int64, "mtime_ns": pl.Int64, "scan_config": pl.Utf8,
               "stream_key": pl.Utf8, "index_digest": pl.Utf8, "mode": pl.Utf8, "scanned_at": pl.Datetime("us")}


def ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
    tables.ensure_schema(con)
    tables.ensure_schema(con, STATE_SCHEMA)


def has_state(con: duckdb.DuckDBPyConnection) -> bool:
    return store.table_exists(con, "shard_scans") and store.table_exists(con, "shard_task_scans")


def load_states(con: duckdb.DuckDBPyConnection, shards: list[str] | None = None) -> dict[str, ShardState]:
    if not has_state(con):
        return {}
    where, params = ("where shard in (select unnest(?::varchar[]))", [shards]) if shards is not None else ("where true", [])
    # a state without its shard_stats row is void (e.g. `contam detect` dropped the shard's rows)
    where += " and shard in (select shard from shard_stats)"
    out: dict[str, ShardState] = {}
    for r in store.query_df(con, f"select * from shard_scans {where}", params).to_dicts():
        out[r["shard"]] = ShardState(identity=f"{r['shard_fingerprint']}@{r['mtime_ns']}", scan_config=r["scan_config"],
                                     stream_key=r["stream_key"], index_digest=r["index_digest"])
    for r in store.query_df(con, f"select * from shard_task_scans {where}", params).to_dicts():
        st = out.get(r["shard"])
        if st is not None:
            st.tasks[r["task"]] = r["task_hash"]
            st.task_digests[r["task"]] = r["index_digest"]
    return out


def stat_signatures(con: duckdb.DuckDBPyConnection) -> dict[str, tuple[int, int]]:
    """shard -> (size, mtime_ns) of the file its last scan read (what sensors compare with)."""
    if not has_state(con):
        return {}
    return {r[0]: (r[1], r[2]) for r in con.execute("select shard, size, mtime_ns from shard_scans").fetchall()}


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)


def _insert(con: duckdb.DuckDBPyConnection, table: str, df: pl.DataFrame) -> None:
    if df.height:
        con.register("_rows", df.to_arrow())
        con.execute(f"insert into {table} ({', '.join(df.columns)}) select {', '.join(df.columns)} from _rows")
        con.unregister("_rows")


def _insert_matches(con: duckdb.DuckDBPyConnection, out: ShardOutcome) -> None:
    """The outcome's match rows: its frame, or its Parquet part (read by DuckDB, not through Python)."""
    if out.matches is not None:
        _insert(con, "matches", out.matches)
    elif out.matches_path:
        cols = ", ".join(tables.MATCH_COLUMNS)
        con.execute(f"insert into matches ({cols}) select {cols} from read_parquet(?)", [out.matches_path])


def write_outcome(con: duckdb.DuckDBPyConnection, out: ShardOutcome, *, tasks_now: dict[str, str], digest: str,
                  scan_config: str, size: int, mtime_ns: int, records: pl.DataFrame | None = None) -> None:
    """Merge one shard's outcome into matches / shard_stats / state and refresh its removals, in one transaction."""
    write_outcomes(con, [(out, size, mtime_ns)], tasks_now=tasks_now, digest=digest, scan_config=scan_config,
                   records=records)


def write_outcomes(con: duckdb.DuckDBPyConnection, outs: list[tuple[ShardOutcome, int, int]], *, tasks_now: dict[str, str],
                   digest: str, scan_config: str, records: pl.DataFrame | None = None,
                   clear_errors: tuple[str, ...] = (), bulk: bool = True) -> None:
    """Several shards' outcomes, each with the (size, mtime_ns) its plan saw, merged in order in **one** transaction
    (all or none: a kill mid-way leaves the tables as they were), each shard's removals refreshed; with
    ``clear_errors``, the shard's errors of those steps are cleared too.  The rows are those of one
    ``write_outcome`` per shard, in the same order; the Parquet parts merged are deleted after the commit.
    Consecutive full scans are merged in bulk (``_merge_full``); ``bulk=False`` merges them shard by shard,
    the reference the bulk merge is checked against (benchmarks/table_writes.py, test_table_writes.py)."""
    if all(out.mode == "current" for out, _, _ in outs) and not clear_errors:
        return
    ensure_schema(con)
    con.execute("begin transaction")
    try:
        for run in _runs(outs):
            if bulk and run[0][0].mode == "full":
                _merge_full(con, run, tasks_now=tasks_now, digest=digest, scan_config=scan_config)
            else:
                for out, size, mtime_ns in run:
                    if out.mode != "current":
                        _merge(con, out, tasks_now=tasks_now, digest=digest, scan_config=scan_config, size=size,
                               mtime_ns=mtime_ns, records=records)
                        fault_point("table_write")
                        tables.recompute_removals(con, out.shard, transaction=False)
            if clear_errors:
                con.execute("delete from shard_errors where shard in (select unnest(?::varchar[])) "
                            "and step in (select unnest(?::varchar[]))", [[o.shard for o, _, _ in run], list(clear_errors)])
        con.execute("commit")
    except Exception:
        con.execute("rollback")
        raise
    for out, _, _ in outs:
        if out.mode != "current" and out.matches_path:  # merged: the part is not needed any more
            Path(out.matches_path).unlink(missing_ok=True)


def _runs(outs: list[tuple[ShardOutcome, int, int]]) -> list[list[tuple[ShardOutcome, int, int]]]:
    """The outcomes cut into stretches of one mode and distinct shards, in order."""
    runs: list[list] = []
    for item in outs:
        last = runs[-1] if runs else None
        if last and last[0][0].mode == item[0].mode and all(o.shard != item[0].shard for o, _, _ in last):
            last.append(item)
        else:
            runs.append([item])
    return runs


def _merge_full(con: duckdb.DuckDBPyConnection, run: list[tuple[ShardOutcome, int, int]], *, tasks_now: dict[str, str],
                digest: str, scan_config: str) -> None:
    """Full scans of several shards (inside the caller's transaction): each table's rows of all of them are
    deleted and inserted with one statement, in the outcomes' order, and their removals recomputed at once.
    The tables are those of ``_merge`` shard by shard; the writer holds its lock for a few statements per
    batch instead of a dozen per shard (benchmarks/table_writes.py)."""
    shards, now = [out.shard for out, _, _ in run], _now()
    in_run = "shard in (select unnest(?::varchar[]))"
    con.execute(f"delete from matches where {in_run}", [shards])
    rowful = [out for out, _, _ in run if out.matches is None or out.matches.height]  # a shard without a match adds none
    paths = [out.matches_path for out in rowful if out.matches is None and out.matches_path]
    if len(paths) == len(rowful):  # every shard's rows are in a Parquet part: one read of all of them
        cols = ", ".join(tables.MATCH_COLUMNS)
        if paths:
            con.execute(f"insert into matches ({cols}) select {cols} from read_parquet(?)", [paths])
    else:
        for out, _, _ in run:
            _insert_matches(con, out)
    for table in ("shard_stats", "shard_task_scans", "shard_scans"):
        con.execute(f"delete from {table} where {in_run}", [shards])
    _insert(con, "shard_stats", pl.DataFrame([out.stats for out, _, _ in run], infer_schema_length=None))
    _insert(con, "shard_task_scans", pl.DataFrame(
        [dict(shard=out.shard, task=t, task_hash=tasks_now[t], index_digest=digest, scanned_at=now)
         for out, _, _ in run for t in out.tasks if t in tasks_now], schema=TASK_SCAN_SCHEMA))
    _insert(con, "shard_scans", pl.DataFrame(
        [dict(shard=out.shard, shard_fingerprint=out.stats["shard_fingerprint"], size=size, mtime_ns=mtime_ns,
              scan_config=scan_config, stream_key=out.stream_key, index_digest=digest, mode="full", scanned_at=now)
         for out, size, mtime_ns in run], schema=SCAN_SCHEMA))
    for _ in run:
        fault_point("table_write")
    tables.recompute_removals(con, shards, transaction=False)


def _merge(con: duckdb.DuckDBPyConnection, out: ShardOutcome, *, tasks_now: dict[str, str], digest: str,
           scan_config: str, size: int, mtime_ns: int, records: pl.DataFrame | None) -> None:
    """One outcome's rows (inside the caller's transaction)."""
    shard, now = out.shard, _now()
    if out.mode == "full":
        con.execute("delete from matches where shard = ?", [shard])
        _insert_matches(con, out)
        con.execute("delete from shard_stats where shard = ?", [shard])
        _insert(con, "shard_stats", pl.DataFrame([out.stats]))
        con.execute("delete from shard_task_scans where shard = ?", [shard])
    elif out.mode == "incremental":
        gone = sorted(set(out.drop) | set(out.tasks))
        con.execute("delete from matches where shard = ? and task in (select unnest(?::varchar[]))", [shard, gone])
        if out.lines:  # documents walked again: their rows of every task are the new walk's
            con.execute("delete from matches where shard = ? and line in (select unnest(?::integer[]))", [shard, out.lines])
        _insert_matches(con, out)
        if records is not None:
            _rekey(con, shard, records)
        con.execute(f"""update shard_stats set
                flagged = (select count(distinct line) from matches m where m.shard = ? and m.flagged and {DIRECT}),
                candidates = (select count(*) from matches m where m.shard = ? and {DIRECT})
            where shard = ?""", [shard, shard, shard])  # a translated task's rows repeat a direct match
        con.execute("delete from shard_task_scans where shard = ? and task in (select unnest(?::varchar[]))", [shard, gone])
    task_rows = pl.DataFrame(
        [dict(shard=shard, task=t, task_hash=tasks_now[t], index_digest=digest, scanned_at=now) for t in out.tasks if t in tasks_now],
        schema=TASK_SCAN_SCHEMA)
    _insert(con, "shard_task_scans", task_rows)
    prev = con.execute("select shard_fingerprint, scan_config, stream_key, index_digest, mode from shard_scans where shard = ?",
                       [shard]).fetchall()
    con.execute("delete from shard_scans where shard = ?", [shard])
    if out.mode == "full":
        fp, cfg_digest, key, idx, mode = out.stats["shard_fingerprint"], scan_config, out.stream_key, digest, "full"
    else:
        fp, cfg_digest, key, idx, _ = prev[0] if prev else (None, scan_config, None, digest, None)
        key, mode = out.stream_key or key, "incremental"
    _insert(con, "shard_scans", pl.DataFrame([dict(shard=shard, shard_fingerprint=fp, size=size, mtime_ns=mtime_ns,
                                                   scan_config=cfg_digest, stream_key=key, index_digest=idx, mode=mode,
                                                   scanned_at=now)], schema=SCAN_SCHEMA))


def _rekey(con: duckdb.DuckDBPyConnection, shard: str, records: pl.DataFrame) -> None:
    """Point the shard's untouched rows at the record ids of the rebuilt reference set."""
    ids = records.filter(pl.col("indexed")).select("record_id", "suite", "split", "instance_index", "subject", "choice_index")
    con.register("_ids", ids.to_arrow())
    con.execute("""update matches m set record_id = i.record_id from _ids i
        where m.shard = ? and i.suite = m.suite and i.split = m.split and i.instance_index = m.instance_index
          and coalesce(i.subject, '') = coalesce(m.subject, '') and coalesce(i.choice_index, -1) = coalesce(m.choice_index, -1)
          and m.record_id is distinct from i.record_id""", [shard])
    con.unregister("_ids")

