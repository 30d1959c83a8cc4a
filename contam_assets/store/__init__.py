"""Files and tables of the data side: the pool it reads, the DuckDB file and the artefacts it writes.

    files.py      atomic file writes (temp file beside the target, then rename)
    pool.py       shard discovery and reading with counted rejects; writers per compression
    db.py         DuckDB connections under a cross-process lock (``store.connect``)
    tables.py     table schemas and the delete-then-insert writes that keep re-runs idempotent
    artifacts.py  the index folder, rejected lines and the decontaminated mix files

May import the detector (to persist its objects); never Dagster.
"""

from contam_assets.store.db import connect, query_df, table_exists

__all__ = ["connect", "query_df", "table_exists"]
