"""The step config of a shard_matches run, and its jobs (executor/scan_plan.py plans them: one per shard)."""

from pathlib import Path

import dagster as dg
from pydantic import Field

from contam_assets.defs.resources import ContamSettings
from contam_assets.detector.config import DetectConfig
from contam_assets.executor import scan_plan
from contam_assets.executor.scan_plan import STREAM_ALL_MAX_SHARDS, STREAM_MIN_BYTES  # noqa: F401
from contam_assets.executor.shard_work import ShardWork


class ShardScanConfig(dg.Config):
    mode: str = Field("auto", description=(
        "auto: scan what changed (full scan of new or changed shards, incremental scan of added or changed "
        "tasks, nothing when current); full: rescan every shard of the run in full (from its cached token "
        "stream when valid)"))


def plan_work(settings: ContamSettings, shards: list[str], cfg: DetectConfig, digest: str, tasks_now: dict[str, str],
              cache_root: Path | None, mode: str, states: dict) -> tuple[list[ShardWork], dict[str, tuple[int, int]], dict[str, str]]:
    """executor/scan_plan.py's plan_work, a plan that cannot be made failing the step (dg.Failure, one line)."""
    try:
        return scan_plan.plan_work(settings, shards, cfg, digest, tasks_now, cache_root, mode, states)
    except scan_plan.PlanError as exc:
        raise dg.Failure(str(exc)) from exc
