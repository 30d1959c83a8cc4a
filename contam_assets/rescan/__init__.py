"""Keeping a pool's match tables current: scan what changed, remember what each shard was scanned with.

    shard.py        a full scan of one shard from its text; the outcome every scan path returns
    plan.py         what a shard needs (full / incremental / current) and the task hashes behind it
    incremental.py  scan a cached token stream for some tasks only
    jobs.py         one shard start to end, as a scan engine's worker runs it (no database access)
    token_cache.py  cached token streams per shard
    state.py        the shard_scans / shard_task_scans tables and the merge of an outcome into DuckDB
    watch.py        cheap change detection for sensors and the nightly check

May import the detector and the store; never Dagster.
"""
