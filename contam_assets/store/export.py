"""The tables a user queries, also written as Parquet: ``OUT/tables/<table>/part-0.parquet``.

``contam.duckdb`` is written by DuckDB 2.x (storage ``v2.0.0+``) and opens in DuckDB 2.0 or later only; these
Parquet copies open in DuckDB 1.x, polars, pandas, Spark and anything else that reads Parquet.  Each table's
folder is replaced whole (written beside it, then renamed), so a reader never sees half of one.

A part carries its table's content key in its Parquet footer (key-value metadata ``contam_export_key``): the
DuckDB version, the copy's options, the columns' names and types, the row count and the sum of a hash of every
row with its rowid (the copy writes the rows in rowid order, so equal keys mean equal rows in the same order).
A table whose key equals its part's, with the part's row count, is not written again: the part stays as it was.
The key costs one scan of the table, a tenth of the copy's time on a 6 M-row ``instances`` (docs/scale.md).
DuckDB's memory is bounded meanwhile (tables.EXPORT_MEMORY; its default is 80 % of the machine's).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path

import duckdb

from contam_assets.store.db import table_exists
from contam_assets.store.tables import EXPORT_MEMORY, memory_held

USER_TABLES = ("instances", "matches", "removals", "shard_stats", "mix_stats", "cuts", "review_decisions",
               "detect_settings", "pool_skips", "shard_errors", "retired_shards", "pool_estimates")


COPY_OPTIONS = "format parquet, compression zstd"
KEY_NAME = "contam_export_key"


def export_tables(con: duckdb.DuckDBPyConnection, out_dir: Path, tables: tuple[str, ...] = USER_TABLES) -> dict[str, int]:
    """Write each table that exists as OUT/tables/<table>/part-0.parquet (zstd), in the table's row order, unless
    its part already holds these rows (same content key); table -> rows in the table."""
    root = Path(out_dir) / "tables"
    root.mkdir(parents=True, exist_ok=True)
    ordered = con.execute("select current_setting('preserve_insertion_order')").fetchone()[0]
    con.execute("set preserve_insertion_order = true")
    try:
        with memory_held(con, EXPORT_MEMORY):
            return {t: _export(con, root, t) for t in tables if table_exists(con, t)}
    finally:
        con.execute(f"set preserve_insertion_order = {str(bool(ordered)).lower()}")


def content_key(con: duckdb.DuckDBPyConnection, table: str) -> tuple[int, str | None]:
    """(rows, key) of a table in one scan; key None where the table has no rowid (a view): always written."""
    cols = con.execute("select column_name, data_type from information_schema.columns where table_name = ? "
                       "order by ordinal_position", [table]).fetchall()
    try:
        rows, total = con.execute(f"select count(*), sum(hash(rowid, _row)::hugeint) from {table} as _row").fetchone()
    except duckdb.BinderException:
        return con.execute(f"select count(*) from {table}").fetchone()[0], None
    about = {"duckdb": duckdb.__version__, "copy": COPY_OPTIONS, "columns": [list(c) for c in cols],
             "rows": rows, "hash_sum": str(total or 0)}
    return rows, hashlib.sha256(json.dumps(about, sort_keys=True).encode()).hexdigest()


def part_key(con: duckdb.DuckDBPyConnection, part: Path) -> tuple[int, str] | None:
    """(rows, key) a part was written with; None when it is missing, unreadable (truncated) or has no key."""
    if not part.is_file():
        return None
    try:
        meta = con.execute("select key, value from parquet_kv_metadata(?)", [str(part)]).fetchall()
        rows = con.execute("select num_rows from parquet_file_metadata(?)", [str(part)]).fetchone()[0]
    except duckdb.Error:
        return None
    key = next((bytes(v).decode() for k, v in meta if bytes(k).decode() == KEY_NAME), None)
    return (rows, key) if key else None


def _export(con: duckdb.DuckDBPyConnection, root: Path, t: str) -> int:
    rows, key = content_key(con, t)
    dst = root / t
    if key is not None and part_key(con, dst / "part-0.parquet") == (rows, key):
        return rows
    tmp = root / f".{t}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        part = tmp / "part-0.parquet"
        meta = f", kv_metadata {{{KEY_NAME}: '{key}'}}" if key else ""
        con.execute(f"copy (select * from {t}) to '{part.as_posix()}' ({COPY_OPTIONS}{meta})")
        old = root / f".{t}.old-{uuid.uuid4().hex[:8]}"
        if dst.exists():
            dst.rename(old)
        tmp.rename(dst)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows
