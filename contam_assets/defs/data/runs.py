"""How a pool becomes runs, decided once for the sensors, the nightly schedule and `contam detect`.

- ``pool_plan``: the work units of the pool (store/units.py) and the `shards` partitions to add and to delete
  (one rule: new units are added; the partitions of this pool's groups (the first file a group key names is in the
  pool or was scanned into this output folder) the pool no longer holds as such, of files that now sit
  in a group, and of files of this output folder that left the pool are deleted; partitions another pool or output
  folder owns in a shared instance are left alone);
- ``cut_runs``: runs over consecutive partitions, cut at a number of bytes and of files (the sensors' limits and the
  CLI's are arguments of the same function); ``detect_runs``: whether `contam detect` runs ranges or a run per partition;
- the RunRequest builders of every data job, so a daemon tick and the CLI ask for the same runs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import dagster as dg
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from contam_assets import settings as setting
from contam_assets import store
from contam_assets.defs.partitions import shards_partitions
from contam_assets.defs.resources import ContamSettings
from contam_assets.rescan import watch
from contam_assets.store.units import Units, group_first

# A sensor-launched run covers consecutive shards up to these limits (small shards share a run).
RUN_MAX_SHARDS = setting.env_value("run_max_shards")
RUN_MAX_BYTES = setting.env_value("run_max_bytes")
POOL_LISTING = dg.AssetKey("pool_listing")
SHARD_MATCHES = dg.AssetKey("shard_matches")


def known_files(settings: ContamSettings) -> set[str]:
    """The pool files this output folder's tables hold rows for (read only; empty before the first scan)."""
    if not settings.db_path.exists():
        return set()
    with store.connect(settings.db_path, read_only=True) as con:
        known: set[str] = set()
        for t in ("shard_stats", "mix_stats", "matches", "shard_scans"):
            if store.table_exists(con, t):
                known |= {r[0] for r in con.execute(f"select distinct shard from {t}").fetchall()}
        return known


def gone_files(settings: ContamSettings, listing) -> list[str]:
    """The files of this output folder that left the pool: the one retirement rule (pool_listing retires them)."""
    return sorted(known_files(settings) - set(listing))


@dataclass
class PoolPlan:
    """The pool as units and the partition changes it implies."""

    listing: dict[str, tuple[int, int]]  # file -> (size, mtime_ns)
    units: Units
    known: list[str]  # the instance's partitions, in their order, before the changes
    add: list[str] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)  # files of this output folder that left the pool

    @property
    def order(self) -> list[str]:
        """The partitions in the instance's order once the changes are applied."""
        dropped = set(self.delete)
        return [k for k in self.known if k not in dropped] + self.add

    def sizes(self) -> dict[str, int]:
        return {k: sum(self.listing[f][0] for f in files if f in self.listing) for k, files in self.units.files.items()}

    def counts(self) -> dict[str, int]:
        return {k: len(files) for k, files in self.units.files.items()}

    def partition_requests(self) -> list:
        """What a sensor returns (dynamic_partitions_requests) and the CLI applies (``apply``)."""
        out = [shards_partitions.build_add_request(self.add)] if self.add else []
        if self.delete:
            out.append(shards_partitions.build_delete_request(self.delete))
        return out

    def apply(self, instance: dg.DagsterInstance) -> None:
        """The partition requests applied to an instance, as the daemon applies a sensor's."""
        if self.add:
            instance.add_dynamic_partitions(shards_partitions.name, self.add)
        for key in self.delete:
            if instance.has_dynamic_partition(shards_partitions.name, key):
                instance.delete_dynamic_partition(shards_partitions.name, key)


def _ours(key: str, listing, left: set[str]) -> bool:
    """Whether a group-shaped key belongs to this pool: the file it names first is in this pool's listing or among
    the files this output folder scanned that left it (another pool sharing the instance keeps its groups)."""
    first = group_first(key)
    return first is not None and (first in listing or first in left)


def plan_for(listing: dict[str, tuple[int, int]], known: list[str], gone: list[str]) -> PoolPlan:
    units = watch.pool_units(listing)
    have, left = set(known), set(gone)
    add = [k for k in units.keys if k not in have]
    delete = [k for k in known if k not in units.files
              and (_ours(k, listing, left) or units.is_group(units.unit_of.get(k, "")) or k in left)]
    return PoolPlan(listing=listing, units=units, known=list(known), add=add, delete=delete, gone=list(gone))


def pool_plan(settings: ContamSettings, instance: dg.DagsterInstance, listing=None) -> PoolPlan:
    """The plan of the pool as it is now (``listing``: watch.pool_listing, when the caller has it already)."""
    if listing is None:
        listing = watch.pool_listing(settings.pool_path, settings.follow_links, settings.pool_pattern)
    return plan_for(listing, instance.get_dynamic_partitions(shards_partitions.name), gone_files(settings, listing))


def cut_runs(order: list[str], wanted, sizes: dict[str, int] | None = None, counts: dict[str, int] | None = None,
             max_bytes: int | None = None, max_files: int | None = None) -> list[list[str]]:
    """Runs of consecutive partitions of ``order`` that are all in ``wanted``, each cut before it would pass
    ``max_bytes`` (``sizes``: bytes a key stands for) or ``max_files`` (``counts``: files a key stands for, 1 when not
    given); a key over a limit alone is a run of its own.  No limit: the whole stretches (a ranged run covers only
    wanted keys: an instance shared with another pool holds partitions a run must not touch)."""
    keep, sizes, counts = set(wanted), sizes or {}, counts or {}
    runs: list[list[str]] = []
    cur: list[str] = []
    cur_bytes = cur_files = 0
    for key in order:
        if key not in keep:
            if cur:
                runs.append(cur)
            cur, cur_bytes, cur_files = [], 0, 0
            continue
        b, n = sizes.get(key, 0), counts.get(key, 1)
        if cur and ((max_files is not None and cur_files + n > max_files)
                    or (max_bytes is not None and cur_bytes + b > max_bytes)):
            runs.append(cur)
            cur, cur_bytes, cur_files = [], 0, 0
        cur.append(key)
        cur_bytes += b
        cur_files += n
    if cur:
        runs.append(cur)
    return runs


def detect_runs(processes: int, env=None) -> bool:
    """True: `contam detect` scans in one ranged run and mixes in ranged runs; False: one run per partition.
    The detect_runs setting: ranged, per-shard or auto (default auto: ranged when the engine has more than one process)."""
    how = (setting.env_raw("detect_runs", os.environ if env is None else env) or "auto").strip().lower() or "auto"
    if how not in ("auto", "ranged", "per-shard"):
        raise ValueError(f"{setting.var('detect_runs')} must be auto, ranged or per-shard, got {how!r}")
    return how == "ranged" or (how == "auto" and processes > 1)


def sensor_runs(plan: PoolPlan, keys) -> list[list[str]]:
    """The sensors' cut: RUN_MAX_BYTES / RUN_MAX_SHARDS files a run."""
    return cut_runs(plan.order, keys, plan.sizes(), plan.counts(), RUN_MAX_BYTES, RUN_MAX_SHARDS)


def file_runs(plan: PoolPlan, files) -> list[list[str]]:
    """The sensors' cut of the units holding ``files`` (each file stands in its unit)."""
    return sensor_runs(plan, set(plan.units.keys_of(f for f in files if f in plan.listing)))


def _ranged(group: list[str], run_config: dict | None, tags: dict, run_key: str | None, job: str,
            asset_selection=None) -> dg.RunRequest:
    if len(group) == 1:
        return dg.RunRequest(run_key=run_key, partition_key=group[0], run_config=run_config or {}, tags=tags,
                             job_name=job, asset_selection=asset_selection)
    return dg.RunRequest(run_key=run_key, run_config=run_config or {}, job_name=job, asset_selection=asset_selection,
                         tags={**tags, ASSET_PARTITION_RANGE_START_TAG: group[0], ASSET_PARTITION_RANGE_END_TAG: group[-1]})


def scan_request(group: list[str], run_key: str | None = None, mode: str = "auto", tags: dict | None = None,
                 listed: bool = False) -> dg.RunRequest:
    """One run of `scan_shards` (pool_listing, then the scan) over consecutive partitions group[0]..group[-1];
    ``listed``: the launcher ran `listing_request` just before, so the run scans only (shard_matches)."""
    run_config = {"ops": {"shard_matches": {"config": {"mode": mode}}}}
    return _ranged(group, run_config, {"contam/scan_mode": mode, "contam/shards": str(len(group)), **(tags or {})},
                   run_key, "scan_shards", asset_selection=[SHARD_MATCHES] if listed else None)


def listing_request(run_key: str | None = None, tags: dict | None = None) -> dg.RunRequest:
    """pool_listing alone (sweep, door check, pool skips, retirement, run.json): a pool that only lost files."""
    return dg.RunRequest(run_key=run_key, job_name="scan_shards", asset_selection=[POOL_LISTING], tags=tags or {})


def mix_request(group: list[str], run_key: str | None = None, tags: dict | None = None) -> dg.RunRequest:
    """One run of `write_mix` over consecutive partitions group[0]..group[-1]."""
    return _ranged(group, None, {"contam/shards": str(len(group)), **(tags or {})}, run_key, "write_mix")


def job_request(job: str, run_key: str | None = None, tags: dict | None = None) -> dg.RunRequest:
    """A run of an unpartitioned job: build_reference, apply_reviews, publish_outputs."""
    return dg.RunRequest(run_key=run_key, job_name=job, tags=tags or {})
