"""Where a run's shard scans execute: in the step's process, in its worker processes, or as Ray tasks.

Plain functions, no Dagster: defs/data/engine.py's resources (ScanEngine, RayScanEngine) hold the scan room's
settings and call these.  Either way the step process is the only one that writes: the scans return each shard's
rows and counters, and the step merges them into DuckDB (rescan.state) as they arrive, so a Ray worker never needs
the database file, only the pool and the token cache (shared storage on a cluster).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from contam_assets import settings
from contam_assets.detector.index import NgramIndex
from contam_assets.detector.matches import Reference
from contam_assets.executor.pool_scan import available_cpus, scan_in_processes
from contam_assets.executor.processes import frozen_heap
from contam_assets.executor.shard_work import (
    ShardWork,
    current_outcome,
    run_shard_work,
    run_shard_work_detached,
    run_shard_work_shared,
)
from contam_assets.rescan.shard import ShardOutcome
from contam_assets.store import artifacts, token_cache

Scanned = Iterator[tuple[ShardWork, ShardOutcome | Exception]]


class ScanSetupError(RuntimeError):
    """The scans cannot start at all (no Ray connection, a local pool on nodes that share no folder); one line for the user."""


def local_processes(workers: int, n_jobs: int) -> int:
    """Worker processes a run of ``n_jobs`` shards uses (1: the step's own process); ``workers`` 0 = every core this
    process may use."""
    return max(1, min(workers if workers > 0 else available_cpus(), n_jobs))


def token_cache_root(token_cache_dir: str, out_path: Path, remote_pool: bool = False) -> Path | None:
    """The token stream cache's folder, None for none (store/token_cache.cache_root: '' = <out>/token_cache for a
    local pool and none for a remote one, 'on' = <out>/token_cache, 'off' = none, else that folder)."""
    return token_cache.cache_root(token_cache_dir, out_path, remote_pool)


def scan_in_step(jobs: list[ShardWork], index: NgramIndex, ref: Reference) -> Scanned:
    """The jobs one after another in this process, with its heap frozen while each runs; a shard's error is yielded
    in its place, so one bad shard does not lose the others' results."""
    for job in jobs:
        try:
            with frozen_heap():
                outcome = run_shard_work(job, index, ref)
        except Exception as exc:
            yield job, exc
            continue
        yield job, outcome


def scan_local(jobs: list[ShardWork], index: NgramIndex, ref: Reference, workers: int,
               idle: Callable[[], None] | None = None, source: Path | None = None) -> Scanned:
    """(job, outcome or exception) in the jobs' order: in a pool of processes (``workers``, see local_processes), or in
    this process for one worker or one shard to scan.  A current shard's outcome is made here, never sent to a worker
    (an unchanged rerun starts no pool).  ``source``: the index folder the workers read the index from."""
    if local_processes(workers, len(jobs)) < 2:
        yield from scan_in_step(jobs, index, ref)
        return
    todo = [j for j in jobs if j.plan.mode != "current"]
    n = local_processes(workers, len(todo))
    scanned = (scan_in_processes(todo, index, ref.records, n, idle=idle, source=source) if n > 1
               else scan_in_step(todo, index, ref))
    for job in jobs:
        yield (job, current_outcome(job)) if job.plan.mode == "current" else next(scanned)


def ray_records(ref: Reference):
    """The reference records as Ray's object store keeps them: the bytes of an Arrow IPC file (texts as string views,
    as polars holds them) in one numpy array, which pickles out of band, so a task on a node reads them from that
    node's one copy instead of unpickling a copy of every text (run_shard_work_shared takes the table over them)."""
    return artifacts.records_to_ipc(ref.records)


def scan_on_ray(jobs: list[ShardWork], index: NgramIndex, ref: Reference, *, cpus_per_shard: float = 1.0,
                shard_retries: int = 2, scheduling: str = "SPREAD", shared_folder: bool = True,
                idle: Callable[[], None] | None = None, warn: Callable[[str], None] = print) -> Scanned:
    """The jobs as Ray tasks on the cluster this process is connected to (ray.init), results as they finish (``idle()``
    is called every second while none is).  The index and the reference records go into Ray's object store once.
    A task lost with its worker process or its node (not an error of the scan itself) is submitted again, up to
    ``shard_retries`` times, said through ``warn``; the outcome counts its attempts.  ``shared_folder`` False: the
    nodes fetch a remote pool's shards themselves and send the rows back (no token cache).
    ScanSetupError when the scans cannot start."""
    import ray
    from ray.exceptions import NodeDiedError, ObjectLostError, OwnerDiedError, WorkerCrashedError

    if not jobs:
        return
    if not ray.is_initialized():
        raise ScanSetupError("Ray is not connected: the ray_cluster resource did not run ray.init()")
    entry = run_shard_work_shared
    if not shared_folder:
        local = [j for j in jobs if j.source is None]
        if local:
            raise ScanSetupError(f"{settings.var('ray_shared_folder')}=0: the nodes share no folder with the driver, so the pool "
                                 f"must be a URL they can read (s3://, gs://, ...), not a local folder ({local[0].shard})")
        entry = run_shard_work_detached
    index_ref, records_ref = ray.put(index), ray.put(ray_records(ref))
    # Ray's own retries are off: a lost shard is resubmitted here, where it is counted and said
    task = ray.remote(num_cpus=cpus_per_shard, max_retries=0, scheduling_strategy=scheduling)(entry)
    pending = {task.remote(job, index_ref, records_ref): (job, 1) for job in jobs}
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1, timeout=None if idle is None else 1.0)
        if not done and idle is not None:
            idle()
        for obj in done:
            job, attempt = pending.pop(obj)
            try:
                out = ray.get(obj)
            except (WorkerCrashedError, NodeDiedError, ObjectLostError, OwnerDiedError) as exc:
                lost = f"{job.shard}: attempt {attempt} lost ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"
                if attempt > shard_retries:
                    yield job, RuntimeError(f"{lost}; no retries left ({shard_retries})")
                    continue
                warn(f"{lost}; submitting it again (retry {attempt} of {shard_retries})")
                pending[task.remote(job, index_ref, records_ref)] = (job, attempt + 1)
                continue
            except Exception as exc:
                yield job, exc
                continue
            out.attempts = attempt
            yield job, out
