"""The jobs of a scan run: one ShardWork per shard, with its plan (full, incremental or current), what a scan engine
is handed.  Plain planning, no Dagster: defs/data/scan_plan.py's step config and wrapper call it."""

from __future__ import annotations

from pathlib import Path

from contam_assets.detector.config import DetectConfig
from contam_assets.executor.shard_work import ShardWork
from contam_assets.rescan.plan import plan_shard, scan_config_digest, shard_identity
from contam_assets.store import token_cache
from contam_assets.store.pool import check_shard, unit_stat

# In a run of more shards than this, a shard under STREAM_MIN_BYTES gets no cached token stream: writing its four
# files costs more than tokenizing it again when a task changes (a pool of thousands of one-document files).
STREAM_ALL_MAX_SHARDS = 256
STREAM_MIN_BYTES = 64 << 10


class PlanError(ValueError):
    """A shard's plan cannot be made (e.g. an incremental mode its state does not allow); one line for the user."""


def plan_work(settings, shards: list[str], cfg: DetectConfig, digest: str, tasks_now: dict[str, str],
              cache_root: Path | None, mode: str, states: dict) -> tuple[list[ShardWork], dict[str, tuple[int, int]], dict[str, str]]:
    """One job per shard (with its plan), the (size, mtime_ns) each plan saw, and shard -> why it cannot be scanned.

    ``settings``: the run's settings (defs' ContamSettings: pool_path, pool_location, follow_links, content_key,
    preset, out_path).  A shard that is gone, unreadable, not a regular file or a symlink out of the pool is not
    scanned, and only that shard fails; PlanError when a plan cannot be made.
    """
    scan_cfg = scan_config_digest(cfg, settings.content_key)
    jobs, sigs, failed = [], {}, {}
    many = len(shards) > STREAM_ALL_MAX_SHARDS
    loc = settings.pool_location
    remote = None if loc.is_local else loc  # a remote pool: every worker reads its shard from the store, in place
    for shard in shards:
        path, why = check_shard(settings.pool_path, shard, settings.follow_links)
        if path is None:
            failed[shard] = why
            continue
        try:
            size, mtime_ns = unit_stat(path)  # a remote object: its listed size and version, read in place
            fp, identity = shard_identity(path)
        except OSError as exc:
            failed[shard] = f"fingerprint: {type(exc).__name__}: {exc.strerror or exc}"
            continue
        key = token_cache.cache_key(identity, cfg, settings.content_key)
        # a shard this output folder never scanned takes only a stream that holds its rejected lines
        stream_ok = cache_root is not None and token_cache.exists(cache_root, shard, key, with_rejects=shard not in states)
        try:
            plan = plan_shard(states.get(shard), identity, scan_cfg, tasks_now, key, stream_ok, mode, text_rescan=cfg.prefilter)
        except ValueError as exc:
            raise PlanError(str(exc)) from exc
        keep_stream = cache_root is not None and not (many and size < STREAM_MIN_BYTES)
        jobs.append(ShardWork(shard=shard, path=str(path), plan=plan, cfg=cfg, content_key=settings.content_key,
                              preset=settings.preset, digest=digest, cache_root=str(cache_root) if keep_stream else None,
                              fingerprint=fp, identity=identity, parts_dir=str(settings.out_path / "parts"),
                              source=remote, size=size))
        sigs[shard] = (size, mtime_ns)
    return jobs, sigs, failed
