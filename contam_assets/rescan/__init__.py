"""Keeping a pool's match tables current: scan what changed, remember what each shard was scanned with.

    shard.py        a full scan of one shard from its text; the outcome every scan path returns
    plan.py         what a shard needs (full / incremental / current) and the task hashes behind it
    incremental.py  scan a cached token stream for some tasks only
    state.py        the shard_scans / shard_task_scans tables and the merge of an outcome into DuckDB
    watch.py        cheap change detection for sensors and the nightly check

The work itself runs in contam_assets/executor (shard_work.py: one shard start to end); the token cache is
the store's (store/token_cache.py).  May import the detector and the store; never Dagster.
"""
