"""`contam quality` end to end on HumanEval, and the suite pool scanned by `contam detect`."""

from __future__ import annotations

import json

import pytest

from contam_assets import store
from contam_assets.cli import main


@pytest.fixture(scope="module")
def quality_out(shared_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("quality_cli")
    rc = main(["quality", "--out", str(out), "--benchmarks", str(shared_data), "--tasks", "humaneval", "--per-type", "3",
               "--clean-docs", "60", "--hard-negatives", "0", "--seed", "5", "--preset", "olmo-synth",
               "--dagster-home", str(out / "home")])
    assert rc == 0
    return out


def test_quality_json(quality_out):
    report = json.loads((quality_out / "quality.json").read_text())
    assert report["suite"]["tasks"] == ["humaneval"] and report["suite"]["seed"] == 5
    assert list(report["presets"]) == ["olmo-synth"]
    p = report["presets"]["olmo-synth"]
    verb = p["leak_types"]["verbatim"]
    assert set(verb) >= {"planted", "flagged", "candidates", "recall", "candidate_recall", "precision", "tasks"}
    assert verb["planted"] == 3 and verb["tasks"]["humaneval"]["planted"] == 3
    assert p["leak_types"]["solution_only"]["planted"] == 3
    assert p["clean"]["documents"] == 60 and p["clean"]["false_positives"] is not None
    assert "humaneval" in p["item_split"]["tasks"]
    assert p["targets"] == []  # targets are set for the default preset
    assert (quality_out / "quality.html").read_text().count("olmo-synth") >= 2


def test_suite_pool_scans_with_contam_detect(quality_out, shared_data, tmp_path):
    pool = quality_out / "quality_suite" / "pool"
    rc = main(["detect", "--pool", str(pool), "--out", str(tmp_path / "det"), "--benchmarks", str(shared_data),
               "--tasks", "humaneval", "--dagster-home", str(tmp_path / "home")])
    assert rc == 0
    truth = [json.loads(l) for l in (quality_out / "quality_suite" / "truth.jsonl").read_text().splitlines()]
    verbatim = {(t["shard"], t["line"]) for t in truth if t["leak_type"] == "verbatim"}
    with store.connect(tmp_path / "det" / "contam.duckdb", read_only=True) as con:
        removed = {(s, l) for s, l in con.execute("select shard, line from removals").fetchall()}
        pending = con.execute("select count(distinct line) from matches where shard = 'planted/solution_only.jsonl' and flagged and needs_review").fetchone()[0]
    assert verbatim <= removed
    assert not any(s.startswith("clean/") for s, _ in removed)
    assert pending == 3  # solution-only copies are held for review, not removed


def test_bad_arguments_exit_2(tmp_path, capsys):
    assert main(["quality", "--out", str(tmp_path), "--preset", "nope"]) == 2
    assert "unknown preset" in capsys.readouterr().err
    assert main(["quality", "--out", str(tmp_path), "--benchmarks", str(tmp_path / "missing")]) == 2
    assert main(["quality", "--out", str(tmp_path), "--per-type", "0"]) == 2
