"""A run's shard scans on the cores of this machine: a pool of worker processes (no database access).

Each worker receives the index and the reference records once, when it starts, and then
scans whole shards (`run_shard_job_shared`: it reads the shard itself, writes its match rows
to a Parquet part and returns the outcome).  Results are handed back **in the order of the
jobs**, so the caller (the step process, the only DuckDB writer) writes exactly what the
serial engine writes, in the same order.  At most ``4 x workers`` shards are in flight (a slow shard does not idle the others), so
memory stays bounded by the workers, not by the run.

A shard whose scan raises yields its exception; the others go on.  A worker that dies
(OOM killer, SIGKILL) breaks the pool: the shards it broke are tried again one at a time
in a fresh pool, and only the one that kills its worker again fails (``WorkerDied``).
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import polars as pl

from contam_assets.detector.index import NgramIndex
from contam_assets.rescan.jobs import ShardJob, run_shard_job_shared
from contam_assets.rescan.shard import ShardOutcome
from contam_assets.store import faults

_WORKER: dict = {}


class WorkerDied(RuntimeError):
    """The process scanning a shard died (killed, out of memory) twice in a row."""


def available_cpus() -> int:
    """Cores this process may run on (its affinity mask, else the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _init(index: NgramIndex, records: pl.DataFrame, step_pid: int) -> None:
    _WORKER["index"], _WORKER["records"] = index, records
    faults.in_scan_worker(step_pid)


def _scan(job: ShardJob) -> ShardOutcome:
    return run_shard_job_shared(job, _WORKER["index"], _WORKER["records"])


def _context():
    # forkserver: workers never fork a step process's threads (Dagster's, DuckDB's); the server
    # imports the scan code once, so each worker starts in a fraction of a second
    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["contam_assets.rescan.pool_scan"])
        return ctx
    return mp.get_context("spawn")


def _pool(n: int, index: NgramIndex, records: pl.DataFrame) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=n, mp_context=_context(), initializer=_init, initargs=(index, records, os.getpid()))


def _alone(job: ShardJob, index: NgramIndex, records: pl.DataFrame) -> ShardOutcome | Exception:
    """One shard in a pool of its own (after its worker died once)."""
    pool = _pool(1, index, records)
    try:
        return pool.submit(_scan, job).result()
    except BrokenProcessPool:
        return WorkerDied(f"the worker scanning {job.shard} died twice (killed or out of memory)")
    except Exception as exc:  # noqa: BLE001 - the shard's own error
        return exc
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _finished(fut: Future) -> bool:
    return fut.done() and not fut.cancelled() and not isinstance(fut.exception(), BrokenProcessPool)


def scan_in_processes(jobs: list[ShardJob], index: NgramIndex, records: pl.DataFrame,
                      workers: int) -> Iterator[tuple[ShardJob, ShardOutcome | Exception]]:
    """(job, outcome or exception) for every job, in the jobs' order, scanned by ``workers`` processes."""
    todo = deque(jobs)
    window: deque[tuple[ShardJob, Future]] = deque()
    pool = _pool(workers, index, records)
    try:
        while todo or window:
            while todo and len(window) < 4 * workers:
                job = todo.popleft()
                window.append((job, pool.submit(_scan, job)))
            job, fut = window.popleft()
            try:
                yield job, fut.result()
                continue
            except BrokenProcessPool:
                pass
            except Exception as exc:  # noqa: BLE001 - one bad shard does not lose the others' results
                yield job, exc
                continue
            # a worker died: the shards in flight with it are lost with the pool; this one runs alone,
            # the others (except those already done) are scanned again by a fresh pool, in place
            pool.shutdown(wait=True, cancel_futures=True)
            yield job, _alone(job, index, records)
            pool = _pool(workers, index, records)
            window = deque((j, f) if _finished(f) else (j, pool.submit(_scan, j)) for j, f in window)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
