"""Jobs of the data side: what sensors, the schedule, automation and the CLI (runner.py, through defs/data/runs.py)
launch by name."""

from pathlib import Path

import dagster as dg

_TAGS = {"contam/side": "data"}


def defs_modules() -> list[str]:
    """Every module under contam_assets/defs/, the ones `load_from_defs_folder` imports when a step loads the location."""
    root = Path(__file__).resolve().parents[1]
    names = []
    for f in sorted(root.rglob("*.py")):
        parts = f.relative_to(root.parent.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


# The multiprocess executor starts each step from a forkserver that has imported the code location once per run,
# its definitions' modules included (importing `contam_assets.definitions` alone imports dagster; the modules under
# defs/ and what they import, ~2 s, would otherwise be imported again by every step): a run per shard otherwise spent
# ~3.4 s of CPU starting each of its step processes (the scan and its two checks, docs/scale.md).  Defaults: a run's
# config can set another start method, or `execution: config: in_process: {}`.
RUN_CONFIG = {"execution": {"config": {"multiprocess": {"start_method": {
    "forkserver": {"preload_modules": ["contam_assets.definitions", *defs_modules()]}}}}}}

reference_job = dg.define_asset_job(
    "build_reference", selection=dg.AssetSelection.assets("task_registry", "reference_set", "ngram_index"),
    description="Registry -> reference set -> n-gram index (launched by new_tasks_sensor, `contam detect`, the demo).",
    tags=_TAGS,
    config=RUN_CONFIG,
)
scan_shards_job = dg.define_asset_job(
    "scan_shards", selection=dg.AssetSelection.assets("pool_listing", "shard_matches"),
    description="List the pool (sweep, door check, pool skips, retirement, run.json), then scan shards (one partition "
    "per shard, or a range of them) into the match tables; with shard_conservation.",
    tags=_TAGS,
    config=RUN_CONFIG,
)
report_job = dg.define_asset_job(
    "apply_reviews", selection=dg.AssetSelection.assets("removals", "removal_report"),
    description="Apply review decisions and render the removal report (`contam apply`, the review page's Apply).",
    tags=_TAGS,
    config=RUN_CONFIG,
)
mix_job = dg.define_asset_job(
    "write_mix", selection=dg.AssetSelection.assets("decontaminated_mix"),
    description="Write the decontaminated mix, shard by shard.",
    tags=_TAGS,
    config=RUN_CONFIG,
)
publish_outputs = dg.define_asset_job(
    "publish_outputs", selection=dg.AssetSelection.assets("decon_reports", "pool_tables"),
    description="decon's report files (when a decon report folder is set) and the Parquet export of the tables.",
    tags=_TAGS,
    config=RUN_CONFIG,
)
