"""Jobs of the data side: what sensors, the schedule, the CLI (runner.py) and the demo launch by name."""

import dagster as dg

_TAGS = {"contam/side": "data"}
# The multiprocess executor starts each step from a forkserver that has imported the code location
# once per run: a run per shard otherwise spent ~3.4 s of CPU starting each of its step processes
# (the scan and its two checks: 10 of a run's 25 s, docs/scale.md).  Defaults: a run's config can set
# another start method, or `execution: config: in_process: {}`.
RUN_CONFIG = {"execution": {"config": {"multiprocess": {"start_method": {
    "forkserver": {"preload_modules": ["contam_assets.definitions"]}}}}}}

reference_job = dg.define_asset_job(
    "build_reference", selection=dg.AssetSelection.assets("task_registry", "reference_set", "ngram_index"),
    description="Registry -> reference set -> n-gram index (launched by new_tasks_sensor, `contam detect`, the demo).",
    tags=_TAGS,
    config=RUN_CONFIG,
)
scan_shards_job = dg.define_asset_job(
    "scan_shards", selection=dg.AssetSelection.assets("shard_matches"),
    description="Scan shards (one partition per shard, or a range of them) into the match tables; with "
    "shard_conservation.",
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
