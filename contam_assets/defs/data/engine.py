"""Where the shard scans of a run execute: in the step's process and its worker processes, or on a Ray cluster.

Resource key `contam_scan_engine` (data domain).  Either way the step process is the
only one that writes: workers return each shard's rows and counters, and the step
merges them into DuckDB (rescan.state) as they arrive, so a Ray worker never needs
the database file, only the pool and the token cache (shared storage on a cluster).

Chosen at load time by the scan room of contam_assets/settings.py (docs/settings.md): scan_engine (local or
ray), scan_workers, ray_address, ray_num_cpus, ray_temp_dir, ray_cpus_per_shard, ray_shard_retries, ray_scheduling,
ray_shared_folder, token_cache and tokenize_ahead.  ray_address may also be the GCS address of a cluster started with `ray start` (host:6379): the
step then joins it as a driver, without Ray Client (docs/automation.md, Multi-node Ray).
"""

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import dagster as dg
from dagster_ray import LocalRay, RayResource
from pydantic import Field

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


class ScanEngine(dg.ConfigurableResource):
    """Scans a run's shards on this machine: in a pool of ``workers`` processes, or one after another in the
    step's own process (one worker, or a run of one shard).  Either way the outcomes come back in the
    jobs' order, so the tables are the same."""

    token_cache_dir: str = Field("", description="token stream cache; '' = <out>/token_cache, 'off' = no cache")
    workers: int = Field(0, description="scan processes per run; 0 = every core this process may use, 1 = in-process")

    def processes(self, n_jobs: int) -> int:
        """Worker processes a run of ``n_jobs`` shards uses (1: the step's own process)."""
        return max(1, min(self.workers if self.workers > 0 else available_cpus(), n_jobs))

    def cache_root(self, out_path: Path) -> Path | None:
        if self.token_cache_dir.strip().lower() in ("off", "none", "0", "false"):
            return None
        return Path(self.token_cache_dir).resolve() if self.token_cache_dir else Path(out_path) / "token_cache"

    def describe(self, n_jobs: int = 1) -> str:
        n = self.processes(n_jobs)
        return f"{n} local processes" if n > 1 else "in-process"

    def run(self, jobs: list[ShardWork], index: NgramIndex, ref: Reference, idle: Callable[[], None] | None = None,
            source: Path | None = None) -> Iterator[tuple[ShardWork, ShardOutcome | Exception]]:
        """(job, outcome or exception) in the jobs' order; ``idle()`` is called while the step waits for the next.
        ``source``: the index folder ``index`` and ``ref.records`` were read from (workers read it themselves)."""
        if self.processes(len(jobs)) > 1:
            # a current shard's outcome is made here, not sent to a worker (an unchanged rerun starts no pool)
            todo = [j for j in jobs if j.plan.mode != "current"]
            n = self.processes(len(todo))
            scanned = (scan_in_processes(todo, index, ref.records, n, idle=idle, source=source) if n > 1
                       else self._in_process(todo, index, ref))
            for job in jobs:
                yield (job, current_outcome(job)) if job.plan.mode == "current" else next(scanned)
            return
        yield from self._in_process(jobs, index, ref)

    @staticmethod
    def _in_process(jobs: list[ShardWork], index: NgramIndex, ref: Reference) -> Iterator[tuple[ShardWork, ShardOutcome | Exception]]:
        for job in jobs:
            try:
                with frozen_heap():
                    outcome = run_shard_work(job, index, ref)
            except Exception as exc:  # one bad shard does not lose the others' results
                yield job, exc
                continue
            yield job, outcome


class RayScanEngine(ScanEngine):
    """Fans a run's shard scans out to a Ray cluster; results come back to the step as they finish.

    `ray_cluster` is a dagster-ray resource (LocalRay, RayClusterAddress, or
    dagster_ray.kuberay.KubeRayCluster), which connects with `ray.init` for the run.
    The index and the reference records go into Ray's object store once per run;
    workers on one node share the index's arrays without copies.
    """

    shard_retries: int = Field(2, description="resubmissions of a shard whose Ray worker or node died mid-task")
    ray_cluster: RayResource
    num_cpus_per_shard: float = Field(1.0, description="Ray CPUs reserved per shard task")
    scheduling_strategy: str = Field("SPREAD", description="Ray's placement of the shard tasks: SPREAD over the "
                                     "cluster's nodes (default), or DEFAULT (Ray's: fill the driver's node first)")
    shared_folder: bool = Field(True, description="the nodes see the driver's output folder and pool (default); "
                                "False: a remote pool's shards are fetched by the node that scans them and their rows "
                                "come back to the driver in the task's result, with no token cache")

    def processes(self, n_jobs: int) -> int:
        return 1  # the Ray cluster decides

    def describe(self, n_jobs: int = 1) -> str:
        return f"ray ({self.ray_cluster.name})"

    def run(self, jobs: list[ShardWork], index: NgramIndex, ref: Reference, idle: Callable[[], None] | None = None,
            source: Path | None = None) -> Iterator[tuple[ShardWork, ShardOutcome | Exception]]:
        """Results as they finish (``idle()`` is called every second while none is).  A task lost with its worker process or its node (not an error of the
        scan itself) is submitted again, up to `shard_retries` times; the outcome counts its attempts."""
        import ray
        from ray.exceptions import NodeDiedError, ObjectLostError, OwnerDiedError, WorkerCrashedError

        if not jobs:
            return
        if not ray.is_initialized():
            raise dg.Failure("Ray is not connected: the ray_cluster resource did not run ray.init()")
        log = dg.get_dagster_logger()
        entry = run_shard_work_shared
        if not self.shared_folder:
            local = [j for j in jobs if j.source is None]
            if local:
                raise dg.Failure(f"{settings.var('ray_shared_folder')}=0: the nodes share no folder with the driver, so the pool "
                                 f"must be a URL they can read (s3://, gs://, ...), not a local folder ({local[0].shard})")
            entry = run_shard_work_detached
        index_ref, records_ref = ray.put(index), ray.put(ref.records)
        # Ray's own retries are off: a lost shard is resubmitted here, where it is counted and logged
        task = ray.remote(num_cpus=self.num_cpus_per_shard, max_retries=0,
                          scheduling_strategy=self.scheduling_strategy)(entry)
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
                    if attempt > self.shard_retries:
                        yield job, RuntimeError(f"{lost}; no retries left ({self.shard_retries})")
                        continue
                    log.warning(f"{lost}; submitting it again (retry {attempt} of {self.shard_retries})")
                    pending[task.remote(job, index_ref, records_ref)] = (job, attempt + 1)
                    continue
                except Exception as exc:
                    yield job, exc
                    continue
                out.attempts = attempt
                yield job, out


class RayClusterAddress(RayResource):
    """An existing Ray cluster: `host:port` of its GCS (the step process joins it as a driver, so it must reach
    every node) or `ray://host:10001` (Ray Client, e.g. a KubeRay RayCluster's head service)."""

    address: str = Field(description="127.0.0.1:6379 or ray://<head-service>:10001")

    @property
    def host(self) -> str:
        return self.address.split("://", 1)[-1].rsplit(":", 1)[0]

    @property
    def ray_address(self) -> str:  # type: ignore[override]
        return self.address

    @property
    def name(self) -> str:
        return f"Ray cluster at {self.address}"

    @property
    def created(self) -> bool:
        return True

    @property
    def ready(self) -> bool:
        return True


def local_ray(num_cpus: int | None = None, temp_dir: str | None = None) -> LocalRay:
    """A Ray cluster on this machine, started for the run and stopped after it (loopback only)."""
    opts = {"include_dashboard": False, "_node_ip_address": "127.0.0.1", "log_to_driver": False}
    if num_cpus:
        opts["num_cpus"] = num_cpus
    if temp_dir:
        opts["_temp_dir"] = temp_dir
    return LocalRay(ray_init_options=opts)


def engine_from_env(env=os.environ) -> ScanEngine:
    """The scan engine of the scan room's settings (contam_assets/settings.py); ValueError naming a bad variable."""
    kind = settings.env_value("scan_engine", env)
    cache = settings.env_value("token_cache", env)
    if kind == "local":
        return ScanEngine(token_cache_dir=cache, workers=settings.env_value("scan_workers", env))
    address = settings.env_value("ray_address", env)
    cpus = settings.env_value("ray_num_cpus", env) or None
    cluster = RayClusterAddress(address=address) if address else local_ray(cpus, settings.env_value("ray_temp_dir", env) or None)
    return RayScanEngine(token_cache_dir=cache, ray_cluster=cluster,
                         num_cpus_per_shard=settings.env_value("ray_cpus_per_shard", env),
                         shard_retries=settings.env_value("ray_shard_retries", env),
                         scheduling_strategy=settings.env_value("ray_scheduling", env),
                         shared_folder=settings.env_value("ray_shared_folder", env))
