"""Data side, before a full scan: `pool_estimate`, the pool's contamination estimated from a random sample of its
shards (docs/estimate.md), its job and the sensor that re-estimates a growing pool."""

import os

import dagster as dg
from pydantic import Field

from contam_assets.defs.data.assets import _DATA, ngram_index
from contam_assets.defs.data.engine import ScanEngine
from contam_assets.defs.data.jobs import RUN_CONFIG
from contam_assets.defs.data.scan_jobs import plan_jobs
from contam_assets.defs.meta import SCAN_VERSION
from contam_assets.defs.resources import ContamDB, ContamSettings, detect_config, sensor_default_status
from contam_assets.detector.matches import Reference
from contam_assets.detector.prefilter import ensure_prefilter
from contam_assets.estimate import pool as estimate_pool
from contam_assets.estimate.design import pool_units, stratified_sample
from contam_assets.rescan import state as scan_state
from contam_assets.rescan import watch
from contam_assets.rescan.outcomes import OutcomeWriter
from contam_assets.rescan.plan import load_task_hashes, scan_config_digest
from contam_assets.store import artifacts
from contam_assets.store import shards as shards_db
from contam_assets.store.pool import list_pool

DEFAULT_FRACTION = 0.026  # seed 003's sample


class EstimateConfig(dg.Config):
    fraction: float = Field(DEFAULT_FRACTION, description="share of the pool's shards to sample, in (0, 1]")
    seed: int = Field(0, description="seed of the sample (the same pool, fraction and seed give the same shards)")
    by_source: bool = Field(False, description="also estimate per document source")


def scan_sample(log, settings: ContamSettings, db: ContamDB, engine: ScanEngine, shards: list[str]) -> dict[str, str]:
    """Scan ``shards`` as `shard_matches` does (same plans, engine and writes, so their rows and scan state are a full
    run's and a later `contam detect` finds them current); shard -> why it failed."""
    cfg = detect_config(settings)
    index, records, digest = artifacts.load_index(settings.out_path)
    folder = artifacts.index_dir(settings.out_path, digest)
    if cfg.prefilter:
        ensure_prefilter(index, records, cfg, folder=folder)
    tasks_now = load_task_hashes(folder, records, cfg)
    cache_root = engine.cache_root(settings.out_path)
    with db.connect(read_only=True) as con:
        states = scan_state.load_states(con, shards)
    jobs, sigs, failed = plan_jobs(settings, shards, cfg, digest, tasks_now, cache_root, "auto", states)

    def done(job, out, stats) -> None:
        if isinstance(out, Exception):
            failed[job.shard] = str(out)
        else:
            log(f"{job.shard}: {job.plan.describe()} -> {out.mode}")

    writer = OutcomeWriter(db.connect, sigs, done, tasks_now=tasks_now, digest=digest,
                           scan_config=scan_config_digest(cfg, settings.content_key), records=records)
    for job, out in engine.run(jobs, index, Reference(records), idle=writer.idle, source=folder):
        if not isinstance(out, Exception) and out.rejects is not None:
            artifacts.write_rejects(settings.out_path, job.shard, out.rejects)
        writer.add(job, out)
    writer.flush()
    if failed:
        with db.connect() as con:
            for shard, why in failed.items():
                shards_db.record_error(con, shard, "scan", why)
    return failed


@dg.asset(**_DATA, deps=[ngram_index], kinds={"python", "duckdb"}, code_version=SCAN_VERSION)
def pool_estimate(context: dg.AssetExecutionContext, config: EstimateConfig, contam_settings: ContamSettings,
                  contam_db: ContamDB, contam_scan_engine: ScanEngine) -> dg.MaterializeResult:
    """The pool's contamination estimated from a seeded stratified sample of whole shards (docs/estimate.md): removed
    and held documents and tokens, copies per item and the share of items present, with 95 % intervals.  Only the
    sampled shards are read, with the scan of a full run; their rows stay, so a full run does not scan them again."""
    listing = list_pool(contam_settings.pool_path, contam_settings.follow_symlinks)
    if not listing.shards:
        raise dg.Failure(f"no shards in the pool {contam_settings.pool_path}: nothing to estimate")
    try:
        sample = stratified_sample(pool_units(listing.shards, listing.paths), config.fraction, config.seed)
    except ValueError as exc:
        raise dg.Failure(str(exc)) from exc
    context.log.info(f"sample: {len(sample.units)} of {len(listing.shards)} shard(s), {sample.bytes:,} of "
                     f"{sample.pool_bytes:,} bytes")
    failed = scan_sample(context.log.info, contam_settings, contam_db, contam_scan_engine, sample.shards)
    for shard, why in failed.items():
        context.log.warning(f"{shard}: not scanned, left out of the estimate: {why}")
    tasks = list(contam_settings.task_filter or []) or None
    with contam_db.connect() as con:
        result = estimate_pool.estimate(con, sample, by_source=config.by_source, tasks=tasks)
        estimate_pool.write(con, contam_settings.out_path, result)
    if not result["sampled"]["units"]:
        raise dg.Failure(f"none of the {len(sample.units)} sampled shard(s) could be scanned: "
                         + "; ".join(f"{k}: {v}" for k, v in list(failed.items())[:5]))
    return dg.MaterializeResult(metadata={
        "fraction": config.fraction, "seed": config.seed, "units_sampled": result["sampled"]["units"],
        "units_total": result["pool"]["units"], "bytes_sampled": result["sampled"]["bytes"],
        "documents_sampled": result["sampled"]["documents"], "not_scanned": len(result["not_scanned"]),
        "estimate": dg.MetadataValue.json({t: {m: e[m] for m in ("removed_documents", "copies_per_item",
                                                                 "items_present_share")}
                                           for t, e in result["tasks"].items()}),
        "sentences": dg.MetadataValue.text("\n".join(estimate_pool.sentences(result))),
        "path": dg.MetadataValue.path(str(contam_settings.out_path / "estimate.json")),
    })


estimate_job = dg.define_asset_job(
    "estimate_pool", selection=dg.AssetSelection.assets("pool_estimate"),
    description="Estimate the pool's contamination from a sample of its shards (`contam estimate`, "
    "pool_estimate_sensor).", tags={"contam/side": "data"}, config=RUN_CONFIG)


def sensor_config(env=os.environ) -> dict:
    """The estimate a sensor-launched run makes: CONTAM_ESTIMATE_FRACTION (default 0.026), CONTAM_ESTIMATE_SEED (0)."""
    return {"fraction": float(env.get("CONTAM_ESTIMATE_FRACTION", DEFAULT_FRACTION)),
            "seed": int(env.get("CONTAM_ESTIMATE_SEED", "0"))}


@dg.sensor(job=estimate_job, minimum_interval_seconds=300, default_status=sensor_default_status(),
           description="A pool whose listing changed (shards added, changed or removed) is estimated again from a new "
           "sample (CONTAM_ESTIMATE_FRACTION, CONTAM_ESTIMATE_SEED). STOPPED unless CONTAM_AUTOMATION=1.")
def pool_estimate_sensor(context: dg.SensorEvaluationContext, contam_settings: ContamSettings) -> dg.SensorResult:
    """Cursor: a digest of the pool listing and the estimate's settings; run_key the same digest, so one run per
    state of the pool."""
    listing = watch.pool_listing(contam_settings.pool_path, contam_settings.follow_symlinks)
    conf = sensor_config()
    cursor = watch.digest(sorted(listing.items()) + [("config", (conf["fraction"], conf["seed"]))])
    if not listing:
        return dg.SensorResult(skip_reason="the pool has no shards", cursor=context.cursor)
    if context.cursor == cursor:
        return dg.SensorResult(skip_reason="pool listing unchanged", cursor=cursor)
    return dg.SensorResult(run_requests=[dg.RunRequest(
        run_key=f"estimate:{cursor}", run_config={"ops": {"pool_estimate": {"config": conf}}},
        tags={"contam/trigger": "pool_changed", "contam/shards": str(len(listing))})], cursor=cursor)

