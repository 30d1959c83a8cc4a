"""Honest states: nothing materializes a row of dashes; a skip logs why and its check says so.

Data side before any scan (removals, removal_report), and the model side before the first
checkpoint folder (checkpoints_found).  The probes' skips are in test_model_dagster.py.
"""

from __future__ import annotations

import dagster as dg

from contam_assets.defs.data import assets as A
from contam_assets.defs.data import outputs
from contam_assets.defs.model.checkpoints import checkpoints
from contam_assets.defs.model.checks import checkpoints_found
from contam_assets.defs.model.resources import CheckpointLoader
from contam_assets.defs.resources import ContamDB, ContamSettings
from contam_assets.testing import model_tiny as mt


def _resources(out):
    s = ContamSettings(out_dir=str(out))
    return {"contam_settings": s, "contam_db": ContamDB(path=str(s.db_path)), "checkpoint_loader": CheckpointLoader()}


def _failures(result) -> str:
    return "\n".join((e.step_failure_data.user_failure_data.description if e.step_failure_data.user_failure_data
                      else e.step_failure_data.error.message) for e in result.get_step_failure_events())


def test_removals_and_report_skip_before_any_scan_and_fail_when_asked_alone(tmp_path):
    res = {k: v for k, v in _resources(tmp_path / "out").items() if k != "checkpoint_loader"}
    with dg.instance_for_test() as inst:
        r = dg.materialize([A.removals, outputs.removal_report], resources=res, instance=inst)
        assert r.success and not r.get_asset_materialization_events()
        checks = {(c.asset_key.to_user_string(), c.check_name): c for c in r.get_asset_check_evaluations()}
        skipped = checks[("removals", "inputs_present")]
        assert not skipped.passed and skipped.severity == dg.AssetCheckSeverity.WARN
        assert "no shard has been scanned" in skipped.metadata["reason"].value
        assert ("removal_report", "inputs_present") not in checks  # its step was skipped with its upstream
        logged = [e.user_message for e in inst.all_logs(r.run_id) if e.level >= 30]  # warnings of the run
        assert any("removals skipped, nothing materialized: no shard has been scanned" in m for m in logged), logged
        alone = dg.materialize([outputs.removal_report], resources=res, instance=inst, raise_on_error=False)
        assert not alone.success and "nothing to report" in _failures(alone)
        tagged = dg.materialize([A.removals, outputs.removal_report], resources=res, instance=inst, raise_on_error=False,
                                tags={"contam/missing_inputs": "fail"})
        assert not tagged.success and "removals: cannot run" in _failures(tagged)
        assert inst.get_latest_materialization_event(dg.AssetKey("removals")) is None


def test_checkpoints_found_says_there_is_nothing_to_probe_yet(tmp_path):
    out = tmp_path / "out"
    res = _resources(out)
    with dg.instance_for_test() as inst:
        def run():
            r = dg.materialize([checkpoints, checkpoints_found], selection=dg.AssetSelection.checks(checkpoints_found),
                               resources=res, instance=inst)
            return r.get_asset_check_evaluations()[0]

        none = run()
        assert not none.passed and none.severity == dg.AssetCheckSeverity.WARN and "nothing to probe" in none.description
        mt.untrained_checkpoint(out / "experiments" / "e" / "checkpoints" / "base")
        waiting = run()
        assert not waiting.passed and "not partitions yet" in waiting.description
        inst.add_dynamic_partitions("checkpoints", ["e/base"])
        assert run().passed
