"""Data side of the graph (issue: decontamination asset graph; automation: issue 5)."""

import dagster as dg

from contam_assets.defs.data import assets
from contam_assets.defs.data.jobs import mix_job, reference_job, report_job, scan_shards_job
from contam_assets.defs.data.sensors import (
    new_shards_sensor,
    new_tasks_sensor,
    nightly_rescan_schedule,
    tasks_rescan_sensor,
)

defs = dg.Definitions(
    assets=[assets.task_registry, assets.reference_set, assets.ngram_index, assets.shard_matches,
            assets.removals, assets.removal_report, assets.decontaminated_mix],
    asset_checks=[assets.shard_conservation, assets.scan_state_current, assets.mix_conservation],
    jobs=[reference_job, scan_shards_job, report_job, mix_job],
    sensors=[new_shards_sensor, new_tasks_sensor, tasks_rescan_sensor],
    schedules=[nightly_rescan_schedule],
)
