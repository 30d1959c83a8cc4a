"""Data side, before a full scan: `pool_estimate`, the pool's contamination estimated from a random sample of its
shards or of blocks of its shards (docs/estimate.md), its job and the sensor that re-estimates a growing pool."""

import os
import shutil

import dagster as dg
from pydantic import Field

from contam_assets import settings
from contam_assets.defs.data.assets import _DATA, ngram_index
from contam_assets.defs.data.engine import ScanEngine
from contam_assets.defs.data.jobs import DATA_EXECUTOR
from contam_assets.defs.data.scan_plan import plan_work
from contam_assets.defs.meta import SCAN_VERSION
from contam_assets.defs.resources import ContamDB, ContamSettings, detect_config, sensor_default_status
from contam_assets.detector.matches import Reference
from contam_assets.detector.prefilter import ensure_prefilter
from contam_assets.estimate import blocks
from contam_assets.estimate import pool as estimate_pool
from contam_assets.estimate.design import Sample, choose_units, stratified_sample
from contam_assets.rescan import state as scan_state
from contam_assets.rescan import watch
from contam_assets.rescan.outcomes import OutcomeWriter
from contam_assets.rescan.plan import load_task_hashes, scan_config_digest
from contam_assets.store import artifacts
from contam_assets.store import db as store_db
from contam_assets.store import shards as shards_db
from contam_assets.store.door import DoorError, check_units
from contam_assets.store.pool import list_pool

DEFAULT_FRACTION = 0.026  # seed 003's sample


class EstimateConfig(dg.Config):
    fraction: float = Field(DEFAULT_FRACTION, description="share of the pool's shards to sample, in (0, 1]")
    seed: int = Field(0, description="seed of the sample (the same pool, fraction and seed give the same shards)")
    by_source: bool = Field(False, description="also estimate per document source")
    unit: str = Field("auto", description="what the sample draws: auto (whole shards when the sample holds at least "
                      "100 of them, else blocks of shards), shard or block")


SAMPLE_DIR = "estimate_sample"  # under OUT: a block sample's blocks/ and contam.duckdb


def scan_sample(log, settings: ContamSettings, db: ContamDB, engine: ScanEngine, shards: list[str],
                index_out=None) -> dict[str, str]:
    """Scan ``shards`` as `shard_matches` does (same plans, engine and writes, so their rows and scan state are a full
    run's and a later `contam detect` finds them current); shard -> why it failed.  ``index_out``: the output folder
    whose index is used (default the settings' own; a block sample's folder has none, and no token cache)."""
    cfg = detect_config(settings)
    index, records, digest = artifacts.load_index(index_out or settings.out_path)
    folder = artifacts.index_dir(index_out or settings.out_path, digest)
    if cfg.prefilter:
        ensure_prefilter(index, records, cfg, folder=folder)
    tasks_now = load_task_hashes(folder, records, cfg)
    cache_root = None if index_out else engine.cache_root(settings.out_path, not settings.pool_location.is_local)
    with db.connect(read_only=True) as con:
        states = scan_state.load_states(con, shards)
    jobs, sigs, failed = plan_work(settings, shards, cfg, digest, tasks_now, cache_root, "auto", states)

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


def scan_blocks(log, settings: ContamSettings, db: ContamDB, engine: ScanEngine, sample: Sample, listing
                ) -> tuple[ContamDB, dict[str, str]]:
    """A block sample: its blocks cut into OUT/estimate_sample/blocks/ (estimate/blocks.py) and scanned there as
    shards, with OUT's index and settings, into OUT/estimate_sample/contam.duckdb (which also gets OUT's `instances`
    and `review_decisions`, so the estimate reads it as it reads OUT's own); (that database, block -> why it failed).
    The folder is made anew for each estimate; OUT's own tables are not touched."""
    folder = settings.out_path / SAMPLE_DIR
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "blocks").mkdir(parents=True)
    failed: dict[str, str] = {}
    for u in sample.units:
        try:
            blocks.cut(u, listing.paths[u.shard], folder / "blocks")
        except (OSError, ValueError) as exc:
            failed[u.key] = f"cut: {type(exc).__name__}: {exc}"
    with db.connect(read_only=True) as con:
        copied = {name: con.sql(f"select * from {name}").to_arrow_table() for name in ("instances", "review_decisions")
                  if store_db.table_exists(con, name)}
    block_db = ContamDB(path=str(folder / "contam.duckdb"))
    with block_db.connect() as con:
        scan_state.ensure_schema(con)
        for name, rows in copied.items():
            con.register("copied", rows)
            con.execute(f"insert into {name} by name select * from copied")
            con.unregister("copied")
    block_settings = settings.model_copy(update={"pool_dir": str(folder / "blocks"), "out_dir": str(folder)})
    scanned = [u.key for u in sample.units if u.key not in failed]
    failed |= scan_sample(log, block_settings, block_db, engine, scanned, index_out=settings.out_path)
    return block_db, failed


@dg.asset(**_DATA, deps=[ngram_index], kinds={"python", "duckdb"}, code_version=SCAN_VERSION)
def pool_estimate(context: dg.AssetExecutionContext, config: EstimateConfig, contam_settings: ContamSettings,
                  contam_db: ContamDB, contam_scan_engine: ScanEngine) -> dg.MaterializeResult:
    """The pool's contamination estimated from a seeded stratified sample of whole shards, or of blocks of shards when
    a pool has too few shards for a sample of whole ones (docs/estimate.md): removed and held documents and tokens,
    copies per item and the share of items present, with 95 % intervals.  Only the sampled units are read, with the
    scan of a full run; sampled shards keep their rows, so a full run does not scan them again."""
    listing = list_pool(contam_settings.pool_path, contam_settings.follow_symlinks)
    if not listing.shards:
        raise dg.Failure(f"no shards in the pool {contam_settings.pool_path}: nothing to estimate")
    try:
        units, kind, block_bytes = choose_units(listing.shards, listing.paths, config.fraction, config.unit)
        sample = stratified_sample(units, config.fraction, config.seed, unit=kind, block_bytes=block_bytes)
    except ValueError as exc:
        raise dg.Failure(str(exc)) from exc
    try:  # the door of `contam detect`, for the sampled shards only: no sample whose every document is rejected
        check_units({s: listing.paths[s] for s in sorted({u.shard for u in sample.units})}, contam_settings.content_key)
    except DoorError as exc:
        raise dg.Failure(str(exc)) from exc
    what = "shard(s)" if kind == "shard" else f"block(s) of {block_bytes:,} bytes of {len(listing.shards)} shard(s)"
    context.log.info(f"sample: {len(sample.units)} of {len(units)} {what}, {sample.bytes:,} of "
                     f"{sample.pool_bytes:,} bytes")
    if kind == "shard":
        db, failed = contam_db, scan_sample(context.log.info, contam_settings, contam_db, contam_scan_engine,
                                            sample.shards)
    else:
        db, failed = scan_blocks(context.log.info, contam_settings, contam_db, contam_scan_engine, sample, listing)
    for unit, why in failed.items():
        context.log.warning(f"{unit}: not scanned, left out of the estimate: {why}")
    tasks = list(contam_settings.task_filter or []) or None
    with db.connect() as con:
        result = estimate_pool.estimate(con, sample, by_source=config.by_source, tasks=tasks)
        if not result["sampled"]["units"]:  # why each failed, as its scan recorded it
            failed |= dict(con.execute("""select shard, status_reason from shard_stats where status = 'failed'
                                          and shard in (select unnest(?::varchar[]))""",
                                       [[u.key for u in sample.units]]).fetchall())
    if not result["sampled"]["units"]:  # no estimate is written from nothing
        raise dg.Failure(f"none of the {len(sample.units)} sampled {what} could be scanned: "
                         + "; ".join(f"{k}: {v}" for k, v in sorted(failed.items())[:5]))
    if not result["sampled"]["documents"]:
        hint = ("every sampled block lies inside a line longer than a block: pass a larger --fraction or --unit shard"
                if kind == "block" else "the sampled shards hold no document: pass a larger --fraction")
        raise dg.Failure(f"the sample of {result['sampled']['units']} {what} holds no document ({hint})")
    with contam_db.connect() as con:
        estimate_pool.write(con, contam_settings.out_path, result)
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
    "pool_estimate_sensor).", tags={"contam/side": "data"}, executor_def=DATA_EXECUTOR)


def sensor_config(env=os.environ) -> dict:
    """The estimate a sensor-launched run makes: the estimate_fraction and estimate_seed settings."""
    return {"fraction": settings.env_value("estimate_fraction", env),
            "seed": settings.env_value("estimate_seed", env)}


@dg.sensor(job=estimate_job, minimum_interval_seconds=300, default_status=sensor_default_status(),
           description="A pool whose listing changed (shards added, changed or removed) is estimated again from a new "
           "sample (settings estimate_fraction, estimate_seed). STOPPED unless the automation setting is on.")
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

