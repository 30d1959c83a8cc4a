"""Evaluation reports: contents, determinism, base checkpoints, the Dagster assets and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest

from contam_assets import store
from contam_assets.cli import main as cli_main
from contam_assets.evaluation.checkpoint_report import ReportError, evaluate, flatten_numbers
from contam_assets.evaluation.config import ConfigError, load_config, parse_config
from contam_assets.evaluation.run_comparison import comparison, report_problems
from contam_assets.testing.experiments import add_checkpoint, gsm8k_rows, write_jsonl, write_probe_metrics


@pytest.fixture
def experiments(tmp_path, shared_data) -> Path:
    """Two runs: `leaky` trained on 25 GSM8K test items verbatim, `clean` on none."""
    exp = tmp_path / "out" / "experiments"
    test = gsm8k_rows(shared_data)
    filler = [{"text": f"an unrelated training document number {i} about cooking and gardening"} for i in range(200)]
    write_jsonl(exp / "leaky" / "data" / "train.jsonl", filler + test[:25] + ["{broken"])
    write_jsonl(exp / "clean" / "data" / "train.jsonl", filler)
    add_checkpoint(exp, "leaky", "base", 0, is_base=True, recipe="leaky-mix")
    add_checkpoint(exp, "leaky", "step-000100", 100, recipe="leaky-mix")
    add_checkpoint(exp, "leaky", "step-000200", 200, recipe="leaky-mix")
    add_checkpoint(exp, "clean", "step-000200", 200, recipe="clean-mix")
    cfg = tmp_path / "evaluation.yaml"
    cfg.write_text(
        f"benchmarks:\n"
        f"  - {{name: gsm8k-test, path: {shared_data / 'gsm8k_test.jsonl'}}}\n"
        f"  - {{name: humaneval, path: {shared_data / 'HumanEval.jsonl.gz'}, format: humaneval}}\n"
        f"  - {{name: sts, format: mteb}}\n"
    )
    write_probe_metrics(tmp_path / "out" / "contam.duckdb", [
        ("leaky/step-000200", "ppl_probe", "gsm8k-test-ppl", 1.25),
        ("leaky/step-000200", "ppl_probe", "loss/gsm8k-test", 0.5),
        ("leaky/step-000200", "bits_per_byte", "bpb/gsm8k-test", 0.18),
        ("leaky/step-000200", "recitation_rate", "recitation/humaneval/pass@1", 0.25),
        ("leaky/step-000200", "membership_scores", "n", 10.0),
        ("leaky/step-000200", "recitation_rate", "n", 164.0),
        ("leaky/step-000200", "fresh_set_gap", "gap", float("nan")),
        ("leaky/step-000100", "ppl_probe", "gsm8k-test-ppl", 1.5),
    ])
    return exp


def _evaluate(experiments: Path, key: str, **kw):
    experiment, stage = key.split("/")
    db = experiments.parent / "contam.duckdb"
    return evaluate(experiments, experiment, stage, config=load_config(experiments.parent.parent / "evaluation.yaml"),
                    benchmarks_dir=None, connect=lambda: store.connect(db, read_only=True), **kw)


def test_report_contents(experiments):
    ev = _evaluate(experiments, "leaky/step-000200")
    assert ev.path == experiments / "leaky" / "eval" / "step-000200" / "report.json" and ev.changed
    r = json.loads(ev.path.read_text())
    assert r == ev.report
    assert r["schema"] == "contam-eval-report/1"
    assert r["model"] == {"checkpoint": "leaky/step-000200", "path": str(experiments / "leaky" / "checkpoints" / "step-000200"),
                          "experiment": "leaky", "stage": "step-000200", "step": 200, "is_base": False}
    assert r["recipe"] == "leaky-mix"
    assert r["scores"] == {"bpb/gsm8k-test": 0.18, "gap": None, "gsm8k-test-ppl": 1.25, "loss/gsm8k-test": 0.5,
                           "membership_scores/n": 10.0, "recitation/humaneval/pass@1": 0.25, "recitation_rate/n": 164.0}
    assert r["probes"]["recitation_rate"] == ["recitation/humaneval/pass@1", "recitation_rate/n"]
    b = r["benchmarks"]
    assert (b["gsm8k-test"]["metric"], b["gsm8k-test"]["value"]) == ("bpb/gsm8k-test", 0.18)
    assert (b["humaneval"]["metric"], b["humaneval"]["value"]) == ("recitation/humaneval/pass@1", 0.25)
    assert b["gsm8k-test"]["item_text"] == "{question} {answer}" and b["gsm8k-test"]["items"] == 1319
    assert b["gsm8k-test"]["sha256"] == "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14"
    assert b["sts"]["format"] == "mteb" and b["sts"]["items"] is None
    c = r["contamination"]
    assert (c["items"], c["exact"], c["near"]) == (1319 + 164, 25, 25)
    assert c["exact_rate"] == round(25 / 1483, 6)
    assert c["benchmarks"]["gsm8k-test"]["flagged"] == list(range(20))
    assert c["benchmarks"]["gsm8k-test"]["exact"] == 25 and c["benchmarks"]["humaneval"]["near"] == 0
    assert c["benchmarks"]["sts"] is None  # MTEB: not measured
    assert c["train"] == {"file": "data/train.jsonl", "bytes": (experiments / "leaky" / "data" / "train.jsonl").stat().st_size,
                          "rows": 226, "rows_used": 225, "rows_skipped": {"invalid_json": 1}}
    assert report_problems(r) == []
    flat = flatten_numbers(r)
    assert flat["contamination/exact"] == 25 and flat["benchmarks/gsm8k-test/value"] == 0.18
    assert flat["scores/loss/gsm8k-test"] == 0.5 and flat["contamination/flagged/3/index"] == 3
    assert "model/is_base" not in flat  # booleans are not numbers


def test_report_is_deterministic_and_base_is_null(experiments):
    first = _evaluate(experiments, "leaky/step-000200")
    text = first.path.read_text()
    again = _evaluate(experiments, "leaky/step-000200", use_cache=False)  # measured afresh
    assert not again.changed and again.path.read_text() == text
    base = _evaluate(experiments, "leaky/base")
    assert base.report["model"]["is_base"] is True and base.report["contamination"] is None
    assert report_problems(base.report) == []
    other = _evaluate(experiments, "leaky/step-000100")
    # the same experiment's rows: the same contamination, different scores
    assert other.report["contamination"] == first.report["contamination"]
    assert other.report["scores"] == {"gsm8k-test-ppl": 1.5}


def test_missing_rows_and_checkpoint_are_clear_errors(experiments, tmp_path):
    (experiments / "leaky" / "data" / "train.jsonl").unlink()
    with pytest.raises(ReportError, match="no training rows: .*train.jsonl not found"):
        _evaluate(experiments, "leaky/step-000200")
    with pytest.raises(ReportError, match="no folder .* and no row in the checkpoints table"):
        _evaluate(experiments, "clean/step-999")
    # a checkpoint known only from the model side's checkpoints table
    with store.connect(experiments.parent / "contam.duckdb") as con:
        con.execute("create table checkpoints(checkpoint varchar, path varchar, experiment varchar, stage varchar, "
                    "step bigint, is_base boolean, recipe varchar, added_at timestamp)")
        con.execute("insert into checkpoints values ('clean/step-300', '/models/x', 'clean', 'step-300', 300, false, 'clean-mix', now())")
    ev = _evaluate(experiments, "clean/step-300")
    assert ev.report["model"]["path"] == "/models/x" and ev.report["model"]["step"] == 300
    assert ev.report["recipe"] == "clean-mix" and ev.report["contamination"]["exact"] == 0


def test_config_validation(tmp_path):
    with pytest.raises(ConfigError, match="unknown top-level keys"):
        parse_config({"benchmark": []}, tmp_path)
    with pytest.raises(ConfigError, match="tracker.enabled needs tracker.project"):
        parse_config({"tracker": {"enabled": True}}, tmp_path)
    with pytest.raises(ConfigError, match="`path` is required"):
        parse_config({"benchmarks": [{"name": "x"}]}, tmp_path)
    cfg = parse_config({"benchmarks": [{"name": "x", "path": "rel.jsonl"}], "tracker": {"enabled": True, "project": "p"}}, tmp_path)
    assert cfg.benchmarks[0].path == str(tmp_path / "rel.jsonl") and cfg.tracker.project == "p"
    bad = tmp_path / "bad.yaml"
    bad.write_text("benchmarks: [unclosed")
    with pytest.raises(ConfigError, match="not valid YAML/JSON"):
        load_config(bad)


def test_dagster_assets(experiments, tmp_path, dagster_home):
    from contam_assets.defs.evaluation import EvaluationSettings, evaluation_comparison, evaluation_report
    from contam_assets.defs.resources import ContamDB, ContamSettings

    out = experiments.parent
    resources = {
        "contam_settings": ContamSettings(out_dir=str(out), experiments_dir=str(experiments)),
        "contam_db": ContamDB(path=str(out / "contam.duckdb")),
        "contam_evaluation": EvaluationSettings(config_file=str(tmp_path / "evaluation.yaml")),
    }
    instance = dg.DagsterInstance.get()
    keys = ["clean/step-000200", "leaky/base", "leaky/step-000200"]
    instance.add_dynamic_partitions("checkpoints", keys)
    for key in keys + ["leaky/step-000200"]:  # the last one twice: a re-run
        res = dg.materialize([evaluation_report], partition_key=key, resources=resources, instance=instance)
        assert res.success
        checks = res.get_asset_check_evaluations()
        assert [c.passed for c in checks] == [True]
    mat = res.asset_materializations_for_node("evaluation_report")[0]
    assert mat.metadata["changed"].value is False and mat.metadata["exact"].value == 25
    assert "| gsm8k\\-test | 1319 | 25 | 25 |" in mat.metadata["benchmarks"].value  # escaped: report/inert.md_text
    # a malformed report elsewhere is counted, not fatal
    bad = experiments / "broken" / "eval" / "s1" / "report.json"
    bad.parent.mkdir(parents=True)
    bad.write_text("{ not json")
    res = dg.materialize([evaluation_comparison], resources=resources, instance=instance)
    assert res.success
    md = res.asset_materializations_for_node("evaluation_comparison")[0].metadata
    assert md["reports"].value == 3 and md["runs"].value == 2 and md["unreadable_reports"].value == 1
    assert "| leaky | step\\-000200 | leaky\\-mix | 1483 | 25 |" in md["per_run"].value
    comp = json.loads((out / "evaluation" / "comparison.json").read_text())
    assert comp == comparison(experiments)
    assert comp["runs"]["clean"]["exact"] == 0 and comp["runs"]["leaky"]["near"] == 25
    assert [(r["experiment"], r["stage"]) for r in comp["reports"]] == [
        ("clean", "step-000200"), ("leaky", "base"), ("leaky", "step-000200")]
    assert comp["errors"][0]["path"] == "broken/eval/s1/report.json"


def test_missing_training_rows_fail_the_partition_clearly(experiments, tmp_path, dagster_home):
    from contam_assets.defs.evaluation import EvaluationSettings, evaluation_report
    from contam_assets.defs.resources import ContamDB, ContamSettings

    (experiments / "clean" / "data" / "train.jsonl").unlink()
    instance = dg.DagsterInstance.get()
    instance.add_dynamic_partitions("checkpoints", ["clean/step-000200"])
    res = dg.materialize(
        [evaluation_report], partition_key="clean/step-000200", instance=instance, raise_on_error=False,
        resources={"contam_settings": ContamSettings(out_dir=str(experiments.parent), experiments_dir=str(experiments)),
                   "contam_db": ContamDB(path=str(experiments.parent / "contam.duckdb")),
                   "contam_evaluation": EvaluationSettings(config_file=str(tmp_path / "evaluation.yaml"))},
    )
    assert not res.success
    failure = [e for e in res.all_events if e.is_step_failure][0]
    assert "no training rows" in str(failure.step_failure_data.error.message)


def test_cli_evaluate(experiments, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CONTAM_OUT", str(experiments.parent))
    monkeypatch.delenv("CONTAM_EXPERIMENTS", raising=False)
    rc = cli_main(["evaluate", "--config", str(tmp_path / "evaluation.yaml"), "leaky/step-000200", "leaky/base"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "leaky/step-000200:" in out and "exact 25 near 25" in out and "tracker: disabled" in out
    assert "base (contamination null)" in out
    assert cli_main(["evaluate", "--config", str(tmp_path / "nope.yaml")]) == 2


def test_mteb_only_report_has_null_contamination(experiments, tmp_path):
    (experiments / "clean" / "data" / "train.jsonl").unlink()  # not needed: nothing to measure
    cfg = parse_config({"benchmarks": [{"name": "sts", "format": "mteb"}]}, tmp_path)
    ev = evaluate(experiments, "clean", "step-000200", config=cfg, benchmarks_dir=None)
    assert ev.report["contamination"] is None and ev.report["model"]["is_base"] is False
    assert ev.report["scores"] == {} and report_problems(ev.report) == []
