"""The `checkpoints` asset (one row per checkpoint folder) and the sensor that finds new folders."""

import json
import time
from pathlib import Path

import dagster as dg

from contam_assets.defs.meta import MODEL_OWNERS, tags
from contam_assets.defs.model.common import resolve_checkpoint
from contam_assets.defs.model.resources import CheckpointLoader
from contam_assets.defs.partitions import checkpoints_partitions
from contam_assets.defs.resources import ContamDB, ContamSettings, sensor_default_status
from contam_assets.model.checkpoint import CheckpointError, check_complete, discover, newest_mtime
from contam_assets.model.tables import upsert_checkpoint


@dg.asset(
    partitions_def=checkpoints_partitions,
    group_name="model",
    kinds={"duckdb", "huggingface"},
    owners=MODEL_OWNERS,
    tags=tags("model", "probes"),
    description="One row per checkpoint folder in the DuckDB `checkpoints` table: experiment, stage, step, "
    "base or not. Fails for a folder that lacks config, weights or tokenizer.",
)
def checkpoints(
    context: dg.AssetExecutionContext, contam_settings: ContamSettings, contam_db: ContamDB, checkpoint_loader: CheckpointLoader
) -> dg.MaterializeResult:
    info = resolve_checkpoint(context.partition_key, contam_settings, checkpoint_loader, contam_db)
    try:
        check_complete(info.path)
    except CheckpointError as exc:
        raise dg.Failure(description=str(exc), metadata={"path": info.path}) from exc
    with contam_db.connect() as con:
        upsert_checkpoint(con, info)
    files = sorted(p.name for p in Path(info.path).iterdir() if p.is_file())
    return dg.MaterializeResult(
        metadata={
            "path": dg.MetadataValue.path(info.path),
            "experiment": info.experiment,
            "stage": info.stage,
            "step": info.step if info.step is not None else -1,
            "is_base": info.is_base,
            "recipe": info.recipe or "",
            "files": ", ".join(files),
        }
    )


PROBE_ASSETS = ["checkpoints", "sequence_scores", "ppl_probe", "bits_per_byte", "membership_scores", "recitation_rate", "fresh_set_gap"]

# In-process: the probes of one checkpoint share one loaded model and never compete for the GPU.
checkpoint_probes_job = dg.define_asset_job(
    "checkpoint_probes",
    selection=dg.AssetSelection.assets(*PROBE_ASSETS),
    executor_def=dg.in_process_executor,
    description="Every model-side probe for one checkpoint partition (launched by new_checkpoints_sensor; "
    "`dagster job backfill -j checkpoint_probes --all` for every checkpoint).",
    tags={"contam/side": "model"},
)


@dg.sensor(job=checkpoint_probes_job, minimum_interval_seconds=60, default_status=sensor_default_status(),
           description="A new or rewritten checkpoint folder under <experiments>/*/checkpoints/ becomes a `checkpoints` "
           "partition and its probes run once. STOPPED unless the automation setting is on.")
def new_checkpoints_sensor(
    context: dg.SensorEvaluationContext, contam_settings: ContamSettings, checkpoint_loader: CheckpointLoader
):
    """Adds a `checkpoints` partition for every new checkpoint folder and requests its probe run once.

    Watches ``<experiments>/*/checkpoints/*`` and the loader's extra folder.  A
    folder still changing (newer than ``settle_seconds``) waits for a later
    tick; a folder rewritten later (its files changed) is probed again.
    The cursor maps partition key -> modification time of the probed folder;
    folders that disappeared are dropped from it, so it tracks what exists.
    Starts STOPPED unless the automation setting is on (like the data-side sensors).
    """
    seen: dict[str, float] = json.loads(context.cursor) if context.cursor else {}
    now = time.time()
    fresh = []
    found = list(discover(contam_settings.experiments_path, checkpoint_loader.extra_path))
    present = {i.key for i in found}
    pruned = {k: v for k, v in seen.items() if k in present}
    if len(pruned) != len(seen):
        context.log.info(f"{len(seen) - len(pruned)} checkpoint folder(s) disappeared; forgotten by the cursor")
        seen = pruned
        context.update_cursor(json.dumps(seen, sort_keys=True))
    for info in found:
        mtime = newest_mtime(Path(info.path))
        if info.key in seen and mtime <= seen[info.key]:
            continue
        if now - mtime < checkpoint_loader.settle_seconds:
            context.log.info(f"{info.key}: still being written, next tick")
            continue
        fresh.append((info, mtime))
    if not fresh:
        return dg.SkipReason(f"no new checkpoint folders ({len(seen)} known)")
    known = set(context.instance.get_dynamic_partitions(checkpoints_partitions.name))
    to_add = sorted({i.key for i, _ in fresh} - known)
    return dg.SensorResult(
        run_requests=[
            dg.RunRequest(run_key=f"{i.key}@{m:.0f}", partition_key=i.key, tags={"checkpoint_path": i.path}) for i, m in fresh
        ],
        dynamic_partitions_requests=[checkpoints_partitions.build_add_request(to_add)] if to_add else [],
        cursor=json.dumps({**seen, **{i.key: m for i, m in fresh}}, sort_keys=True),
    )
