"""A run's shard scans on the cores of this machine: a pool of worker processes (no database access).

Each worker receives the index and the reference records once, when it starts, and then
scans whole shards (`run_shard_job_shared`: it reads the shard itself, writes its match rows
to a Parquet part and returns the outcome).  Results are handed back **in the order of the
jobs** (processes.map_in_order), so the caller (the step process, the only DuckDB writer)
writes exactly what the serial engine writes, in the same order.  At most ``4 x workers``
shards are in flight (a slow shard does not idle the others), so memory stays bounded by
the workers, not by the run.

A shard whose scan raises yields its exception; the others go on.  A worker that dies
(OOM killer, SIGKILL) breaks the pool: the shards it broke are tried again one at a time
in a fresh pool, and only the one that kills its worker again fails (``WorkerDied``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import polars as pl

from contam_assets.detector.index import NgramIndex
from contam_assets.rescan.jobs import ShardJob, run_shard_job_shared
from contam_assets.rescan.processes import WorkerDied, available_cpus, map_in_order
from contam_assets.rescan.shard import ShardOutcome

__all__ = ["WorkerDied", "available_cpus", "scan_in_processes"]

_WORKER: dict = {}


def _init(index: NgramIndex, records: pl.DataFrame) -> None:
    _WORKER["index"], _WORKER["records"] = index, records


def _scan(job: ShardJob) -> ShardOutcome:
    return run_shard_job_shared(job, _WORKER["index"], _WORKER["records"])


def scan_in_processes(jobs: list[ShardJob], index: NgramIndex, records: pl.DataFrame, workers: int,
                      idle: Callable[[], None] | None = None) -> Iterator[tuple[ShardJob, ShardOutcome | Exception]]:
    """(job, outcome or exception) for every job, in the jobs' order, scanned by ``workers`` processes;
    ``idle()`` is called while the next outcome is not back yet."""
    yield from map_in_order(_scan, jobs, workers, preload=["contam_assets.rescan.pool_scan"], init=_init,
                            initargs=(index, records), label=lambda j: f"scanning {j.shard}", idle=idle)
