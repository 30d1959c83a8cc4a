"""Jobs of the data side: what sensors, the schedule, automation and the CLI (runner.py, through defs/data/runs.py)
launch by name."""

import dagster as dg

_TAGS = {"contam/side": "data"}


# Every step of a data run runs in the run's own process (in-process), one step after another.  The multiprocess
# executor would start a process per step (each scan partition, each asset check) that loads the code location
# again, seconds of CPU a step, for nothing these jobs use it for: their steps nearly form a chain (an asset, its
# checks, the next asset), the parallel work of a step has its own pool (executor/processes.py: scan and mix
# workers, each shard failing alone), and no asset has a step retry policy (the scan engine retries shards itself;
# the instance's run retries redo a failed run).  A run worker killed outright (out of memory) fails its run through
# run monitoring (deploy/dagster.yaml), as a killed step process failed its step.  The executor, not the jobs'
# default run config, says so: a run request with run config of its own (the sensors' scan mode, a partition range,
# the estimate's sample) replaces that default whole.  A run can still choose `execution: config: multiprocess: {}`
# (docs/automation.md, Executor).
DATA_EXECUTOR = dg.ExecutorDefinition(
    name="in_process_or_multiprocess",
    config_schema=dg.Field(dg.multi_or_in_process_executor.config_schema.as_field().config_type,
                           default_value={"in_process": {}}),
    executor_creation_fn=dg.multi_or_in_process_executor.executor_creation_fn,
    requirements=dg.multi_or_in_process_executor.get_requirements,
    description="Dagster's multi_or_in_process executor with in_process the default: every step in the run's process.",
)

reference_job = dg.define_asset_job(
    "build_reference", selection=dg.AssetSelection.assets("task_registry", "reference_set", "ngram_index"),
    description="Registry -> reference set -> n-gram index (launched by new_tasks_sensor, `contam detect`, the demo).",
    tags=_TAGS,
    executor_def=DATA_EXECUTOR,
)
scan_shards_job = dg.define_asset_job(
    "scan_shards", selection=dg.AssetSelection.assets("pool_listing", "shard_matches"),
    description="List the pool (sweep, door check, pool skips, retirement, run.json), then scan shards (one partition "
    "per shard, or a range of them) into the match tables; with shard_conservation.",
    tags=_TAGS,
    executor_def=DATA_EXECUTOR,
)
report_job = dg.define_asset_job(
    "apply_reviews", selection=dg.AssetSelection.assets("removals", "removal_report"),
    description="Apply review decisions and render the removal report (`contam apply`, the review page's Apply).",
    tags=_TAGS,
    executor_def=DATA_EXECUTOR,
)
mix_job = dg.define_asset_job(
    "write_mix", selection=dg.AssetSelection.assets("decontaminated_mix"),
    description="Write the decontaminated mix, shard by shard.",
    tags=_TAGS,
    executor_def=DATA_EXECUTOR,
)
publish_outputs = dg.define_asset_job(
    "publish_outputs", selection=dg.AssetSelection.assets("decon_reports", "pool_tables"),
    description="decon's report files (when a decon report folder is set) and the Parquet export of the tables.",
    tags=_TAGS,
    executor_def=DATA_EXECUTOR,
)
