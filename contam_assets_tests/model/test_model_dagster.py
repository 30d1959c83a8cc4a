"""Model side in Dagster: the sensor, per-checkpoint partitions that fail alone, the tables, the correlation asset."""

import json
import os
import shutil
import time

import dagster as dg
import pytest

from contam_assets.defs.model import defs as model_defs
from contam_assets.defs.model.checkpoints import checkpoints, new_checkpoints_sensor
from contam_assets.defs.model.correlation import loglik_gap_correlation
from contam_assets.defs.model.probes import (
    bits_per_byte,
    fresh_set_gap,
    membership_scores,
    ppl_probe,
    recitation_rate,
    sequence_scores,
)
from contam_assets.defs.model.resources import CheckpointLoader, ProbeSettings
from contam_assets.defs.resources import ContamDB, ContamSettings
from contam_assets.store import connect
from contam_assets.testing import model_tiny as mt

PROBES = [checkpoints, sequence_scores, ppl_probe, bits_per_byte, membership_scores, recitation_rate, fresh_set_gap]


def _resources(out, benchmarks="", fresh=""):
    settings = ContamSettings(out_dir=str(out), benchmarks_dir=str(benchmarks))
    return {
        "contam_settings": settings,
        "contam_db": ContamDB(path=str(settings.db_path)),
        "checkpoint_loader": CheckpointLoader(settle_seconds=0),
        "probe_settings": ProbeSettings(limit=3, n_shot=1, gsm_max_new_tokens=8, code_max_new_tokens=8, fresh_file=str(fresh)),
    }


@pytest.fixture
def experiments(tmp_path, dagster_home, shared_data):
    """<out>/experiments/demo/checkpoints/{step-000100 (good), step-000200 (config only), step-000300 (bad weights)}."""
    ckpts = tmp_path / "out" / "experiments" / "demo" / "checkpoints"
    good = mt.untrained_checkpoint(ckpts / "step-000100")
    half = ckpts / "step-000200"
    half.mkdir()
    shutil.copy(good / "config.json", half / "config.json")
    corrupt = shutil.copytree(good, ckpts / "step-000300")
    (corrupt / "model.safetensors").write_bytes(b"\0" * 64)
    return tmp_path / "out"


def _age(folder, seconds):
    """Set the modification time of the folder and its files ``seconds`` into the past."""
    t = time.time() - seconds
    for p in [folder, *folder.iterdir()]:
        os.utime(p, (t, t))
    return folder


def _tick(instance, resources, cursor=None):
    ctx = dg.build_sensor_context(instance=instance, cursor=cursor, resources=resources)
    return new_checkpoints_sensor(ctx)


def test_sensor_adds_partitions_and_requests_each_checkpoint_once(experiments, shared_data):
    instance = dg.DagsterInstance.get()
    res = _resources(experiments, shared_data)
    first = _tick(instance, res)
    keys = ["demo/step-000100", "demo/step-000200", "demo/step-000300"]
    assert sorted(r.partition_key for r in first.run_requests) == keys
    assert sorted(first.dynamic_partitions_requests[0].partition_keys) == keys
    instance.add_dynamic_partitions("checkpoints", keys)

    second = _tick(instance, res, first.cursor)
    assert isinstance(second, dg.SkipReason)  # a repeated tick requests nothing

    new = _age(mt.untrained_checkpoint(experiments / "experiments" / "other" / "checkpoints" / "base"), 1000)
    third = _tick(instance, res, first.cursor)
    assert [r.partition_key for r in third.run_requests] == ["other/base"]
    assert third.dynamic_partitions_requests[0].partition_keys == ["other/base"]
    instance.add_dynamic_partitions("checkpoints", ["other/base"])  # what the daemon does with the request

    _age(new, 10)  # the folder is rewritten: probed again, under a new run key
    fourth = _tick(instance, res, third.cursor)
    assert [r.partition_key for r in fourth.run_requests] == ["other/base"]
    assert fourth.run_requests[0].run_key != third.run_requests[0].run_key
    assert not fourth.dynamic_partitions_requests  # the partition exists already

    waiting = dict(res, checkpoint_loader=CheckpointLoader(settle_seconds=3600))
    mt.untrained_checkpoint(experiments / "experiments" / "other" / "checkpoints" / "step-1")
    assert isinstance(_tick(instance, waiting, fourth.cursor), dg.SkipReason)  # still being written


def _failure(result) -> str:
    """The failure messages of the failed steps, joined."""
    messages = []
    for event in result.get_step_failure_events():
        data = event.step_failure_data
        messages.append(data.user_failure_data.description if data.user_failure_data else data.error.message)
    return "\n".join(messages)


def test_a_bad_checkpoint_fails_only_its_own_partition(experiments, shared_data):
    instance = dg.DagsterInstance.ephemeral()
    keys = ["demo/step-000100", "demo/step-000200", "demo/step-000300"]
    instance.add_dynamic_partitions("checkpoints", keys)
    res = _resources(experiments, shared_data, shared_data / "gsmhard_v2.jsonl")

    half = dg.materialize(PROBES, partition_key=keys[1], resources=res, instance=instance, raise_on_error=False)
    assert not half.success
    msg = _failure(half)
    assert "step-000200" in msg and "incomplete" in msg and "weights" in msg

    corrupt = dg.materialize(PROBES, partition_key=keys[2], resources=res, instance=instance, raise_on_error=False)
    assert not corrupt.success and "failed to load" in _failure(corrupt) and "step-000300" in _failure(corrupt)
    # The folder is complete, so its `checkpoints` row exists; every probe that loads the model failed.
    failed = {e.step_key for e in corrupt.get_step_failure_events()}
    assert failed == {"sequence_scores", "recitation_rate", "fresh_set_gap"}

    good = dg.materialize(PROBES, partition_key=keys[0], resources=res, instance=instance)
    assert good.success
    again = dg.materialize(PROBES, partition_key=keys[0], resources=res, instance=instance)
    assert again.success

    with connect(experiments / "contam.duckdb", read_only=True) as con:
        rows = con.execute("select checkpoint, step, is_base from checkpoints order by checkpoint").fetchall()
        assert rows == [("demo/step-000100", 100, False), ("demo/step-000300", 300, False)]
        metrics = dict(con.execute("select metric, value from probe_metrics where checkpoint = ?", [keys[0]]).fetchall())
        per_metric = con.execute("select max(n) from (select count(*) n from probe_metrics group by checkpoint, probe, metric)").fetchone()[0]
        items = con.execute("select count(*) from probe_items where checkpoint = ? and probe = 'sequence_scores' and metric = 'nll'", [keys[0]]).fetchone()[0]
        others = con.execute("select count(*) from probe_metrics where checkpoint <> ?", [keys[0]]).fetchone()[0]
    for key in ("gsm8k-train-ppl", "gsm8k-test-ppl", "gsm8k-ref-ppl", "delta1", "delta2", "bpb/gsm8k-test", "llpc/gsm8k-test",
                "mink/auc", "minkpp/auc", "recitation/humaneval/exact", "recitation/mbpp/similar", "fresh/gap"):
        assert key in metrics, key
    assert per_metric == 1  # the re-run replaced its rows
    assert items == 3 * 6  # limit 3, six sets (train, test, ref, humaneval, mbpp, fresh)
    assert others == 0

    mats = instance.get_latest_materialization_event(dg.AssetKey("ppl_probe"))
    assert mats.asset_materialization.partition == keys[0]
    assert "metrics" in mats.asset_materialization.metadata


def test_without_a_benchmark_folder_probes_skip_and_their_checks_say_why(experiments):
    """No row of dashes: a probe without its inputs materializes nothing; its inputs_present check fails (WARN) with the reason."""
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("checkpoints", ["demo/step-000100"])
    res = _resources(experiments)  # embedded default: HumanEval only, no fresh set
    result = dg.materialize(PROBES, partition_key="demo/step-000100", resources=res, instance=instance)
    assert result.success
    mats = [e.event_specific_data.materialization for e in result.get_asset_materialization_events()]
    meta = {m.asset_key.to_user_string(): m.metadata for m in mats}
    assert set(meta) == {"checkpoints", "sequence_scores", "bits_per_byte", "recitation_rate"}
    assert meta["recitation_rate"]["rows_written"].value > 0
    checks = {(c.asset_key.to_user_string(), c.check_name): c for c in result.get_asset_check_evaluations()}
    for probe in ("ppl_probe", "membership_scores", "fresh_set_gap"):
        check = checks[(probe, "inputs_present")]
        assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
    assert "gsm8k" in checks[("ppl_probe", "inputs_present")].metadata["reason"].value
    assert "no fresh set" in checks[("fresh_set_gap", "inputs_present")].metadata["reason"].value
    assert all(checks[(p, "inputs_present")].passed for p in ("sequence_scores", "bits_per_byte", "recitation_rate"))
    # asked for alone, a probe without its inputs fails with the reason instead of skipping
    alone = dg.materialize([fresh_set_gap], partition_key="demo/step-000100", resources=res, instance=instance,
                           raise_on_error=False)
    assert not alone.success and "no fresh set" in _failure(alone)
    with connect(experiments / "contam.duckdb", read_only=True) as con:
        sets = {r[0] for r in con.execute("select distinct dataset from probe_items where probe = 'sequence_scores'").fetchall()}
    assert sets == {"humaneval"}


def test_correlation_asset_over_checkpoints_of_an_experiment(tmp_path, dagster_home):
    out = tmp_path / "out"
    from contam_assets.model.checkpoint import CheckpointInfo
    from contam_assets.model.tables import replace_probe_rows, upsert_checkpoint

    with connect(out / "contam.duckdb") as con:
        for step, (llpc, gap) in enumerate([(-1.4, 0.00), (-1.2, 0.05), (-1.1, 0.04), (-0.9, 0.12)]):
            info = CheckpointInfo("exp", f"step-{step}", str(tmp_path), step)
            upsert_checkpoint(con, info)
            replace_probe_rows(con, info.key, "bits_per_byte", {"llpc/gsm8k-test": llpc})
            replace_probe_rows(con, info.key, "fresh_set_gap", {"fresh/gap": gap})
    res = _resources(out)
    result = dg.materialize([loglik_gap_correlation], resources={k: res[k] for k in ("contam_settings", "contam_db")})
    assert result.success
    with connect(out / "contam.duckdb", read_only=True) as con:
        (row,) = con.execute("select experiment, n, spearman, kendall from probe_correlations where scope = 'within-run'").fetchall()
        (across,) = con.execute("select experiment, n, spearman, note from probe_correlations where scope = 'across-experiments'").fetchall()
    assert row[:2] == ("exp", 4) and row[2] == pytest.approx(0.8) and row[3] == pytest.approx(2 / 3)
    assert across[:3] == ("*", 1, None) and "at least 3" in across[3]  # one experiment is one model
    assert (out / "probes" / "loglik_gap_correlation.png").is_file() and (out / "probes" / "loglik_gap_within_run.png").is_file()


def test_model_definitions_load():
    from contam_assets.definitions import build_definitions

    repo = build_definitions().get_repository_def()
    assert repo.has_sensor_def("new_checkpoints_sensor")
    assert repo.get_job("checkpoint_probes") is not None
    assert {"checkpoint_loader", "probe_settings"} <= set(model_defs.resources)


def test_sensor_forgets_deleted_checkpoints_and_starts_stopped(experiments, shared_data):
    instance = dg.DagsterInstance.get()
    res = _resources(experiments, shared_data)
    first = _tick(instance, res)
    assert len(json.loads(first.cursor)) == 3
    shutil.rmtree(experiments / "experiments" / "demo" / "checkpoints" / "step-000300")
    ctx = dg.build_sensor_context(instance=instance, cursor=first.cursor, resources=res)
    assert isinstance(new_checkpoints_sensor(ctx), dg.SkipReason)
    assert sorted(json.loads(ctx.cursor)) == ["demo/step-000100", "demo/step-000200"]  # the cursor stays bounded
    assert new_checkpoints_sensor.default_status == dg.DefaultSensorStatus.STOPPED  # CONTAM_AUTOMATION=1 turns it on


def test_probes_calibrate_against_a_baseline_checkpoint(experiments, shared_data, tmp_path):
    """A baseline identical to the target (same weights) calibrates Δ to 0 and every calibrated AUC to 0.5."""
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("checkpoints", ["demo/step-000100"])
    twin = mt.untrained_checkpoint(tmp_path / "twin")  # seed 0, as the target
    res = _resources(experiments, shared_data, shared_data / "gsmhard_v2.jsonl")
    res["probe_settings"] = ProbeSettings(limit=3, n_shot=1, gsm_max_new_tokens=8, code_max_new_tokens=8,
                                          baseline_checkpoint=str(twin))
    assets = [checkpoints, sequence_scores, ppl_probe, membership_scores]
    assert dg.materialize(assets, partition_key="demo/step-000100", resources=res, instance=instance).success
    with connect(experiments / "contam.duckdb", read_only=True) as con:
        m = dict(con.execute("select metric, value from probe_metrics where checkpoint = 'demo/step-000100'").fetchall())
        calibrated_items = con.execute("select count(*) from probe_items where probe = 'membership_scores' "
                                       "and metric = 'calibrated-mink'").fetchone()[0]
    assert m["calibrated/delta1"] == pytest.approx(0, abs=1e-9) and m["baseline/delta1"] == pytest.approx(m["delta1"])
    assert m["calibrated/mink/auc"] == 0.5 and m["calibrated/llr/auc"] == 0.5 and m["baseline/same-tokenizer"] == 1.0
    assert calibrated_items == 6  # limit 3: three test and three reference items
    assert list((experiments / "probes" / "baseline").glob("*.json"))  # cached for the next checkpoint
