"""The quality assets on a small slice (GSM8K + HumanEval, default preset), checked against the targets.

The false-positive bound is loose at this size: 2,000 clean documents with no
false positive only say the rate is below ~1,500 per million (95 %); the
100-per-million target is really measured by benchmarks/quality_full.py.
"""

from __future__ import annotations

import json

import dagster as dg
import pytest

from contam_assets.core import store
from contam_assets.defs.quality.assets import detector_quality, planted_suite
from contam_assets.defs.quality.resources import QualitySettings
from contam_assets.defs.resources import ContamDB, ContamSettings


@pytest.fixture(scope="module")
def run(shared_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("quality")
    home = tmp_path_factory.mktemp("dagster_home")
    (home / "dagster.yaml").touch()
    instance = dg.DagsterInstance.local_temp(str(home))
    settings = ContamSettings(out_dir=str(out), benchmarks_dir=str(shared_data), tasks="gsm8k,humaneval")
    resources = {"contam_settings": settings, "contam_db": ContamDB(path=str(settings.db_path)),
                 "quality_settings": QualitySettings(seed=11, per_type=5, clean_docs=2000, hard_negatives=300)}
    suite = dg.materialize([planted_suite], resources=resources, instance=instance)
    scored = dg.materialize([detector_quality], resources=resources, instance=instance, partition_key="default")
    report = json.loads((out / "quality.json").read_text())
    return dict(out=out, settings=settings, resources=resources, instance=instance, suite=suite, scored=scored, report=report)


def test_targets_hold_on_the_default_preset(run):
    d = run["report"]["presets"]["default"]
    leaks = d["leak_types"]
    for leak in ("verbatim", "case", "whitespace", "line_breaks", "punctuation", "json_escaped", "python_escaped"):
        assert leaks[leak]["planted"] >= 10
        assert leaks[leak]["recall"] >= 0.99, (leak, leaks[leak])
        assert leaks[leak]["precision"] == 1.0, (leak, leaks[leak])
    sol = leaks["solution_only"]
    assert sol["planted"] == 5 and sol["recall"] >= 0.95
    assert sol["held_for_review"] == sol["flagged"]  # derived-suite matches wait for a reviewer
    assert d["clean"]["documents"] >= 2000 and d["clean"]["per_million"] <= 100
    assert d["clean"]["upper95_per_million"] > 1000  # the bound is loose at this size
    assert d["hard_negatives"]["total"]["documents"] >= 300
    assert d["hard_negatives"]["total"]["false_positives"] == 0
    assert all(t["passed"] for t in d["targets"]), d["targets"]


def test_known_blind_spots_are_reported_not_hidden(run):
    leaks = run["report"]["presets"]["default"]["leak_types"]
    # decon's known behaviour: a question without its answer tops out under the threshold, but is stored
    assert leaks["question_only"]["recall"] <= 0.2
    assert leaks["question_only"]["candidate_recall"] >= 0.8
    # an answer / worked solution alone never starts a cluster
    assert leaks["answer_only"]["recall"] == 0.0


def test_item_split_and_tables(run):
    split = run["report"]["presets"]["default"]["item_split"]["tasks"]
    assert set(split) == {"gsm8k", "humaneval"}
    for row in split.values():
        assert row["flagged_and_present"] <= min(row["flagged"], row["present"])
        assert row["present"] >= row["flagged_and_present"] > 0
    with store.connect(run["settings"].db_path, read_only=True) as con:
        n = {t: con.execute(f"select count(*) from {t}").fetchone()[0] for t in
             ("quality_truth", "quality_documents", "quality_scores", "quality_outcomes", "quality_item_split", "quality_runs")}
        planted = con.execute("select count(*) from quality_truth where role = 'planted'").fetchone()[0]
        outcomes = con.execute("select count(*) from quality_outcomes where preset = 'default'").fetchone()[0]
    assert all(v > 0 for v in n.values()), n
    assert outcomes == planted
    assert n["quality_item_split"] == 8792 + 164  # every instance of the two tasks


def test_metadata_page_and_check(run):
    mats = run["scored"].asset_materializations_for_node("detector_quality")
    meta = mats[0].metadata
    assert meta["quality_page"].value.endswith("quality.html")
    assert "verbatim" in meta["recall_per_leak_type"].value
    page = (run["out"] / "quality.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "Detector quality" in page and "<script" not in page
    assert "Item split" in page and "question_only" in page
    checks = run["scored"].get_asset_check_evaluations()
    assert [c.check_name for c in checks] == ["quality_targets"] and checks[0].passed


def test_rerun_replaces_rows(run):
    res = dg.materialize([detector_quality], resources=run["resources"], instance=run["instance"], partition_key="default")
    assert res.success
    with store.connect(run["settings"].db_path, read_only=True) as con:
        assert con.execute("select count(*) from quality_runs where preset = 'default'").fetchone()[0] == 1
        dup = con.execute("""select count(*) from (select leak_type, task, count(*) c from quality_scores
                             where preset = 'default' group by all having c > 1)""").fetchone()[0]
    assert dup == 0
