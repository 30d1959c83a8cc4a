"""Arms on the data side's contract: inputs, `contam arms`, and the Dagster assets."""

import json

import pytest

from contam_assets.model.arms.inputs import load_arm_inputs, read_removals
from contam_assets_tests.support.arms import build_tiny_contract, table_rows

TINY_ARGS = ["--budget-tokens", "6144", "--block-size", "32", "--batch-size", "4", "--n-layer", "1", "--n-embd", "32",
             "--n-head", "2", "--vocab-size", "400", "--checkpoints", "2", "--threads", "1", "--warmup-steps", "5"]


@pytest.fixture
def contract(shared_data, tmp_path):
    return build_tiny_contract(shared_data, tmp_path, n_train=120, n_planted=4)


def test_inputs_follow_the_contract(contract):
    inputs = load_arm_inputs(contract["pool"], contract["out"] / "mix", contract["db"])
    assert {d.key for d in inputs.removed} == contract["removed"]
    assert inputs.missing_removed == 0 and not inputs.skipped_mix
    assert all(d.shard.startswith("mix/") for d in inputs.decontaminated)
    assert not any(d.text.startswith("Worked problems") for d in inputs.decontaminated)
    sources = {d.source for d in inputs.decontaminated}
    assert sources == {"math", "web", "other"}  # web from the shard's folder, other from the source field
    assert {d.source for d in inputs.removed} == {"math", "instruct"}
    lines = sum(1 for p in (contract["out"] / "mix").rglob("*.jsonl") for _ in open(p))
    assert len(inputs.decontaminated) == lines


def test_removal_missing_from_the_pool_is_counted(contract):
    from contam_assets import store

    with store.connect(contract["db"]) as con:
        con.execute("insert into removals values ('math/part-0000.jsonl', 99999, 'x', 'math', 1, 'flagged')")
        con.execute("insert into removals values ('gone/part-9.jsonl', 0, 'y', 'web', 1, 'flagged')")
    inputs = load_arm_inputs(contract["pool"], contract["out"] / "mix", contract["db"])
    assert inputs.missing_removed == 2
    assert sum(inputs.skipped_removed.values()) == 2


def test_missing_inputs_are_clear_errors(contract, tmp_path):
    with pytest.raises(FileNotFoundError, match="contam detect"):
        read_removals(tmp_path / "nowhere.duckdb")
    with pytest.raises(FileNotFoundError, match="no decontaminated mix"):
        load_arm_inputs(contract["pool"], tmp_path / "no_mix", contract["db"])
    from contam_assets import store

    with store.connect(tmp_path / "empty.duckdb") as con:
        con.execute("create table other (x int)")
    with pytest.raises(LookupError, match="no `removals` table"):
        read_removals(tmp_path / "empty.duckdb")


def test_cli_trains_arms_and_writes_exposure(contract, tmp_path, capsys):
    from contam_assets.cli import main

    rc = main(["arms", "--pool", str(contract["pool"]), "--out", str(contract["out"]), "--arms", "full,target_exposure",
               "--seed", "0,1", *TINY_ARGS])
    assert rc == 0
    exp = contract["out"] / "experiments"
    assert sorted(p.name for p in exp.iterdir()) == ["full", "full-seed1", "target_exposure", "target_exposure-seed1"]
    for name in ("full", "target_exposure-seed1"):
        assert (exp / name / "data" / "train.jsonl").is_file()
        stages = sorted(p.name for p in (exp / name / "checkpoints").iterdir())
        assert stages == ["step-000024", "step-000048"]
        meta = json.loads((exp / name / "checkpoints" / "step-000048" / "contam_checkpoint.json").read_text())
        assert meta["experiment"] == name and meta["recipe"] == name.split("-seed")[0] and meta["is_base"] is False
    rows = table_rows(contract["db"], "select source, removed_docs, target_exposure from exposure order by source")
    assert [r[0] for r in rows] == ["instruct", "math", "other", "web"]
    assert {r[0]: r[1] for r in rows} == {"instruct": 2, "math": 2, "other": 0, "web": 0}
    assert {r[0]: r[2] for r in rows}["math"] == pytest.approx(1.6)
    # target exposure: math documents (1.6) are re-added once or twice, instruct documents (1.0) exactly once
    summary = json.loads((exp / "target_exposure" / "data" / "mix.json").read_text())
    by = {s["source"]: s for s in summary["by_source"]}
    assert by["instruct"]["readded_copies"] == 2 and 2 <= by["math"]["readded_copies"] <= 4
    out = capsys.readouterr().out
    assert "full-seed1" in out and "target exposure" in out.lower()
    # a second run replaces the exposure table instead of adding rows
    assert main(["arms", "--pool", str(contract["pool"]), "--out", str(contract["out"]), "--arms", "full", *TINY_ARGS]) == 0
    assert len(table_rows(contract["db"], "select * from exposure")) == 4


def test_cli_user_errors(contract, tmp_path, capsys):
    from contam_assets.cli import main

    assert main(["arms", "--pool", str(contract["pool"]), "--out", str(contract["out"]), "--arms", "half"]) == 2
    assert main(["arms", "--pool", str(contract["pool"]), "--out", str(tmp_path / "fresh")]) == 2
    assert main(["arms", "--pool", str(contract["pool"]), "--out", str(contract["out"]), "--weights", "math"]) == 2
    assert main(["arms", "--pool", str(contract["pool"]), "--out", str(contract["out"]), "--budget-tokens", "10"]) == 2
    small = [a if a != "6144" else "1024" for a in TINY_ARGS]  # 8 steps: less than the removed documents hold
    assert main(["arms", "--pool", str(contract["pool"]), "--out", str(contract["out"]), "--arms",
                 "decontaminated,full", *small]) == 2
    assert not (contract["out"] / "experiments").exists()  # checked before any arm trains
    err = capsys.readouterr().err
    assert "unknown arm" in err and "contam detect" in err and "SOURCE=NUMBER" in err and "less than one step" in err
    assert "arm full re-adds about" in err


def test_dagster_assets_materialize(contract, dagster_home):
    import dagster as dg

    from contam_assets.defs.arms import assets
    from contam_assets.defs.arms.resources import ArmsSettings
    from contam_assets.defs.resources import ContamDB, ContamSettings

    resources = {
        "contam_settings": ContamSettings(out_dir=str(contract["out"]), pool_dir=str(contract["pool"])),
        "contam_db": ContamDB(path=str(contract["db"])),
        "arms_settings": ArmsSettings(budget_tokens=6144, block_size=32, batch_size=4, n_layer=1, n_embd=32, n_head=2,
                                      vocab_size=400, n_checkpoints=2, num_threads=1, warmup_steps=5),
    }
    instance = dg.DagsterInstance.ephemeral()
    res = dg.materialize([assets.arms_tokenizer, assets.exposure], resources=resources, instance=instance)
    assert res.success
    meta = res.asset_materializations_for_node("exposure")[0].metadata
    assert meta["removed_docs"].value == 4 and "target exposure" in meta["exposure"].value
    for arm in ("decontaminated", "full"):
        res = dg.materialize([assets.arm_mix, assets.arm_checkpoints], partition_key=arm, resources=resources,
                             instance=instance)
        assert res.success
        mix_meta = res.asset_materializations_for_node("arm_mix")[0].metadata
        assert mix_meta["readded_copies"].value == (4 if arm == "full" else 0)
        ck = res.asset_materializations_for_node("arm_checkpoints")[0].metadata
        assert ck["tokens_seen"].value == 6144 and ck["steps"].value == 48
        assert ck["loss_curve"].value.startswith("![loss curve](data:image/png;base64,")
        assert len(ck["checkpoints"].value) == 2
    assert (contract["out"] / "experiments" / "full" / "checkpoints" / "step-000048" / "model.safetensors").is_file()
