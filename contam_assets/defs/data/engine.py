"""Where the shard scans of a run execute: in the step's process and its worker processes, or on a Ray cluster.

Resource key `contam_scan_engine` (data domain).  The resources hold the settings; the scheduling (worker
processes, Ray tasks, retries, placement) is executor/engines.py's, which has no Dagster in it.

Chosen at load time by the scan room of contam_assets/settings.py (docs/settings.md): scan_engine (local or
ray), scan_workers, ray_address, ray_num_cpus, ray_temp_dir, ray_cpus_per_shard, ray_shard_retries, ray_scheduling,
ray_shared_folder, token_cache and tokenize_ahead.  ray_address may also be the GCS address of a cluster started with `ray start` (host:6379): the
step then joins it as a driver, without Ray Client (docs/automation.md, Multi-node Ray).
"""

import os
from collections.abc import Callable
from pathlib import Path

import dagster as dg
from dagster_ray import LocalRay, RayResource
from pydantic import Field

from contam_assets import settings
from contam_assets.detector.index import NgramIndex
from contam_assets.detector.matches import Reference
from contam_assets.executor import engines
from contam_assets.executor.engines import Scanned
from contam_assets.executor.shard_work import ShardWork


class ScanEngine(dg.ConfigurableResource):
    """Scans a run's shards on this machine: in a pool of ``workers`` processes, or one after another in the
    step's own process (one worker, or a run of one shard).  Either way the outcomes come back in the
    jobs' order, so the tables are the same (executor/engines.py does the work)."""

    token_cache_dir: str = Field("", description="token stream cache; '' = <out>/token_cache (none for a remote "
                                 "pool), 'on' = <out>/token_cache, 'off' = no cache, else that folder")
    workers: int = Field(0, description="scan processes per run; 0 = every core this process may use, 1 = in-process")

    def processes(self, n_jobs: int) -> int:
        """Worker processes a run of ``n_jobs`` shards uses (1: the step's own process)."""
        return engines.local_processes(self.workers, n_jobs)

    def cache_root(self, out_path: Path, remote_pool: bool = False) -> Path | None:
        """The token cache's folder (None: none); ``remote_pool``: the pool is read from a store."""
        return engines.token_cache_root(self.token_cache_dir, out_path, remote_pool)

    def describe(self, n_jobs: int = 1) -> str:
        n = self.processes(n_jobs)
        return f"{n} local processes" if n > 1 else "in-process"

    def run(self, jobs: list[ShardWork], index: NgramIndex, ref: Reference, idle: Callable[[], None] | None = None,
            source: Path | None = None) -> Scanned:
        """(job, outcome or exception) in the jobs' order; ``idle()`` is called while the step waits for the next.
        ``source``: the index folder ``index`` and ``ref.records`` were read from (workers read it themselves)."""
        yield from engines.scan_local(jobs, index, ref, self.workers, idle=idle, source=source)


class RayScanEngine(ScanEngine):
    """Fans a run's shard scans out to a Ray cluster; results come back to the step as they finish.

    `ray_cluster` is a dagster-ray resource (LocalRay, RayClusterAddress, or
    dagster_ray.kuberay.KubeRayCluster), which connects with `ray.init` for the run.
    The index and the reference records go into Ray's object store once per run;
    workers on one node share the index's arrays without copies (executor/engines.py's scan_on_ray).
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
            source: Path | None = None) -> Scanned:
        """Results as they finish (``idle()`` is called every second while none is).  A task lost with its worker process or its node (not an error of the
        scan itself) is submitted again, up to `shard_retries` times; the outcome counts its attempts."""
        scans = engines.scan_on_ray(jobs, index, ref, cpus_per_shard=self.num_cpus_per_shard, shard_retries=self.shard_retries,
                                    scheduling=self.scheduling_strategy, shared_folder=self.shared_folder, idle=idle,
                                    warn=lambda msg: dg.get_dagster_logger().warning(msg))
        try:
            yield from scans
        except engines.ScanSetupError as exc:
            raise dg.Failure(str(exc)) from exc


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
