"""The tables a user queries, also written as Parquet: ``OUT/tables/<table>/part-0.parquet``.

``contam.duckdb`` is written by DuckDB 2.x (storage ``v2.0.0+``) and opens in DuckDB 2.0 or later only; these
Parquet copies open in DuckDB 1.x, polars, pandas, Spark and anything else that reads Parquet.  Each table's
folder is replaced whole (written beside it, then renamed), so a reader never sees half of one.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import duckdb

from contam_assets.store.db import table_exists

USER_TABLES = ("instances", "matches", "removals", "shard_stats", "mix_stats", "cuts", "review_decisions",
               "detect_settings", "pool_skips", "shard_errors", "retired_shards", "pool_estimates")


def export_tables(con: duckdb.DuckDBPyConnection, out_dir: Path, tables: tuple[str, ...] = USER_TABLES) -> dict[str, int]:
    """Write each table that exists as OUT/tables/<table>/part-0.parquet (zstd); table -> rows written."""
    root = Path(out_dir) / "tables"
    root.mkdir(parents=True, exist_ok=True)
    done = {}
    for t in tables:
        if not table_exists(con, t):
            continue
        tmp = root / f".{t}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            part = tmp / "part-0.parquet"
            con.execute(f"copy (select * from {t}) to '{part.as_posix()}' (format parquet, compression zstd)")
            dst = root / t
            old = root / f".{t}.old-{uuid.uuid4().hex[:8]}"
            if dst.exists():
                dst.rename(old)
            tmp.rename(dst)
            shutil.rmtree(old, ignore_errors=True)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        done[t] = con.execute(f"select count(*) from {t}").fetchone()[0]
    return done
