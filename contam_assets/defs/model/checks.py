"""Checks of the model side that are not about one probe run: is there anything to probe at all?

Before the first checkpoint folder exists the model group's partitioned assets have no
partitions, which the UI draws as "0 partitions" — complete, as far as it can tell.
``checkpoints_found`` says what is true instead: no checkpoint folder yet, or folders the
sensor has not turned into partitions (is `new_checkpoints_sensor` running?).
"""

import dagster as dg

from contam_assets.defs.automation import on_schedule
from contam_assets.defs.meta import MODEL_OWNERS, check_metadata
from contam_assets.defs.model.resources import CheckpointLoader
from contam_assets.defs.partitions import checkpoints_partitions
from contam_assets.defs.resources import ContamSettings
from contam_assets.model.checkpoint import discover


@dg.asset_check(
    asset="checkpoints", blocking=False, automation_condition=on_schedule("45 2 * * *", at_start=True),
    description="at least one checkpoint folder exists under <experiments>/*/checkpoints/ (or the checkpoints setting's folder), and "
    "each is a `checkpoints` partition (WARN: nothing to probe yet, or new_checkpoints_sensor is not running)",
    metadata=check_metadata(MODEL_OWNERS, "checkpoint folders against the checkpoints partitions"),
)
def checkpoints_found(context: dg.AssetCheckExecutionContext, contam_settings: ContamSettings,
                      checkpoint_loader: CheckpointLoader) -> dg.AssetCheckResult:
    folders = sorted({i.key for i in discover(contam_settings.experiments_path, checkpoint_loader.extra_path)})
    known = set(context.instance.get_dynamic_partitions(checkpoints_partitions.name))
    unregistered = [k for k in folders if k not in known]
    watched = ", ".join(str(p) for p in (contam_settings.experiments_path, checkpoint_loader.extra_path) if p)
    if not folders:
        why = f"no checkpoint folder under {watched}: the model side has nothing to probe yet"
    elif unregistered:
        why = f"{len(unregistered)} checkpoint folder(s) are not partitions yet (start new_checkpoints_sensor)"
    else:
        why = f"{len(folders)} checkpoint folder(s), each a partition"
    return dg.AssetCheckResult(passed=bool(folders) and not unregistered, severity=dg.AssetCheckSeverity.WARN,
                               description=why, metadata={"folders": len(folders), "partitions": len(known),
                                                          "not_partitions_yet": dg.MetadataValue.json(unregistered[:20]),
                                                          "watched": watched, "summary": why})
