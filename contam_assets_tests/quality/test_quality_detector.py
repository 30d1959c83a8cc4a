"""The quality assets on a CI slice (GSM8K, HumanEval, ARC-Easy, MMLU; default preset), checked against the targets.

Targets (default preset): recall >= 0.99 for verbatim, formatting-changed and
escaped question+answer; >= 0.95 for solution-only code through the derived suites;
<= 100 false positives per million clean documents; none on the hard negatives.

- Verbatim-like recall: decon looks up every 10th question 5-gram, so a question
  under ngram_size + sample_every - 1 = 14 tokens (fewer than ten 5-grams) can be
  stepped over, depending on where it sits in the document (docs/quality.md: every
  verbatim-like miss of the full run is such a question; ARC and MMLU have them,
  GSM8K and HumanEval do not).  The slice checks >= 0.99 per task on GSM8K and
  HumanEval, >= 0.99 on every copy whose question has at least 14 tokens, that every
  miss is a short question with no stored candidate, and that the report's target
  rows and the `quality_targets` check say exactly what the figures say (so a short
  question the sampling stepped over shows as a failed target, as in the full run).
- The false-positive bound is loose at this size: 2,300 clean and hard-negative
  documents with no false positive only bound the rate below ~1,300 per million
  (95 %); at this size "<= 100 per million" means none at all.  The 100-per-million
  target is really measured by benchmarks/quality_full.py (102,125 documents).
"""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest

from contam_assets import store
from contam_assets.defs.quality.assets import detector_quality, planted_suite
from contam_assets.defs.quality.resources import QualitySettings
from contam_assets.defs.resources import ContamDB, ContamSettings
from contam_assets.detector.config import preset
from contam_assets.detector.text import clean_text
from contam_assets.detector.tokenize import get_tokenizer
from contam_assets.quality.items import item_key, items_from_records
from contam_assets.quality.leaks import VERBATIM_LIKE
from contam_assets.sources.reference import build_reference_set
from contam_assets.sources.registry import load_registry

TASKS = ("gsm8k", "humaneval", "arc_easy", "mmlu")
TASKS_DIR = Path(__file__).resolve().parents[2] / "data" / "tasks"
PER_TYPE = 8
CLEAN_DOCS, HARD_NEGATIVES = 2000, 300


@pytest.fixture(scope="module")
def run(shared_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("quality")
    home = tmp_path_factory.mktemp("dagster_home")
    (home / "dagster.yaml").touch()
    instance = dg.DagsterInstance.local_temp(str(home))
    settings = ContamSettings(out_dir=str(out), benchmarks_dir=str(shared_data), tasks=",".join(TASKS))
    resources = {"contam_settings": settings, "contam_db": ContamDB(path=str(settings.db_path)),
                 "quality_settings": QualitySettings(seed=11, per_type=PER_TYPE, clean_docs=CLEAN_DOCS,
                                                     hard_negatives=HARD_NEGATIVES)}
    suite = dg.materialize([planted_suite], resources=resources, instance=instance)
    scored = dg.materialize([detector_quality], resources=resources, instance=instance, partition_key="default")
    report = json.loads((out / "quality.json").read_text())
    return dict(out=out, settings=settings, resources=resources, instance=instance, suite=suite, scored=scored, report=report)


@pytest.fixture(scope="module")
def records(shared_data):
    recs, _ = build_reference_set(load_registry(TASKS_DIR, list(TASKS)), shared_data, preset("default"))
    return recs


@pytest.fixture(scope="module")
def verbatim_like(run, records):
    """Default-preset outcomes of verbatim-like and option-changed copies, with each question's length in tokens
    as the detector indexes it (its cleaning, its tokenizer)."""
    cfg = preset("default")
    tok = get_tokenizer(cfg.tokenizer)
    items = {it.key: it for it in items_from_records(records)}
    types = VERBATIM_LIKE + ("mc_options_changed",)
    with store.connect(run["settings"].db_path, read_only=True) as con:
        rows = store.query_df(con, f"""select * from quality_outcomes where preset = 'default'
                                       and leak_type in ({', '.join('?' for _ in types)})""", list(types)).to_dicts()
    for r in rows:
        q = items[item_key(r["task"], r["split"], r["instance_index"], r["subject"])].question
        r["q_tokens"] = len(tok.encode(clean_text(q, cfg.clean_options)))
    return rows, cfg.ngram_size + cfg.sample_every - 1


def test_verbatim_like_recall_where_decon_samples_the_question(run, verbatim_like):
    rows, short_below = verbatim_like
    leaks = run["report"]["presets"]["default"]["leak_types"]
    for leak in VERBATIM_LIKE:
        assert leaks[leak]["planted"] == len(TASKS) * PER_TYPE
        for task in ("gsm8k", "humaneval"):  # no question under 14 tokens: the target holds per task
            assert leaks[leak]["tasks"][task]["recall"] >= 0.99, (leak, task, leaks[leak]["tasks"][task])
        assert leaks[leak]["precision"] >= 0.95, (leak, leaks[leak])
    assert leaks["mc_options_changed"]["planted"] == 2 * PER_TYPE
    long = [r for r in rows if r["q_tokens"] >= short_below]
    assert len(long) >= 0.8 * len(rows) and {r["task"] for r in long} == set(TASKS)
    assert sum(r["caught"] for r in long) / len(long) >= 0.99
    for r in rows:
        if not r["caught"]:  # decon's every-10th lookup stepped over a short question: nothing is stored
            assert r["q_tokens"] < short_below and not r["candidate"], r


def test_targets_are_checked_on_the_default_preset(run):
    d = run["report"]["presets"]["default"]
    leaks, targets = d["leak_types"], {t["name"]: t for t in d["targets"]}
    for leak in VERBATIM_LIKE:  # the target rows report the figures as measured
        t = targets[f"recall {leak}"]
        assert t["value"] == leaks[leak]["recall"] and t["passed"] == (leaks[leak]["recall"] >= 0.99)
    sol = leaks["solution_only"]
    assert sol["planted"] == PER_TYPE and sol["recall"] >= 0.95
    assert sol["held_for_review"] == sol["flagged"]  # derived-suite matches wait for a reviewer
    assert targets["recall solution_only (held for review counts)"]["passed"]
    clean, hard = d["clean"], d["hard_negatives"]["total"]
    assert clean["documents"] == CLEAN_DOCS + HARD_NEGATIVES and hard["documents"] == HARD_NEGATIVES
    assert clean["per_million"] <= 100 and targets["false positives per million clean documents"]["passed"]
    assert clean["upper95_per_million"] > 1000  # the bound is loose at this size (see the module docstring)
    assert hard["false_positives"] == 0 and targets["false positives on hard negatives"]["passed"]
    checks = run["scored"].get_asset_check_evaluations()
    assert [c.check_name for c in checks] == ["quality_targets"]
    assert checks[0].passed == all(t["passed"] for t in d["targets"])


def test_multiple_choice_rows_report_the_gold_option(run, records):
    """ARC-Easy verbatim-like copies hold every option and the answer: all options tie, so the row reports the
    correct one (when its record is indexed: decon skips a choice record under 20 tokens)."""
    indexed = {(r["instance_index"], r["choice_index"]) for r in records.filter(records["task"] == "arc_easy")
               .select("instance_index", "choice_index", "indexed").to_dicts() if r["indexed"]}
    with store.connect(run["settings"].db_path, read_only=True) as con:
        rows = con.execute(f"""select t.instance_index, t.choice_index, m.choice_index from quality_truth t
                               join quality_matches m on m.preset = 'default' and m.shard = t.shard and m.line = t.line
                                and m.task = t.task and m.instance_index = t.instance_index and m.flagged
                               where t.task = 'arc_easy' and t.role = 'planted'
                                and t.leak_type in ({', '.join('?' for _ in VERBATIM_LIKE)})""", list(VERBATIM_LIKE)).fetchall()
    checked = [(gold, got) for i, gold, got in rows if (i, gold) in indexed]
    assert len(checked) >= 0.8 * len(VERBATIM_LIKE) * PER_TYPE
    assert all(gold == got for gold, got in checked), checked


def test_known_blind_spots_are_reported_not_hidden(run):
    leaks = run["report"]["presets"]["default"]["leak_types"]
    # decon's known behaviour: a question without its answer tops out under the threshold, but is stored
    assert leaks["question_only"]["recall"] <= 0.2
    assert leaks["question_only"]["candidate_recall"] >= 0.8
    # an answer / worked solution alone never starts a cluster
    assert leaks["answer_only"]["recall"] == 0.0


def test_item_split_and_tables(run):
    split = run["report"]["presets"]["default"]["item_split"]["tasks"]
    assert set(split) == set(TASKS)
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
    assert n["quality_item_split"] == 8792 + 164 + 2376 + 14042  # every instance of the four tasks


def test_metadata_page_and_check(run):
    mats = run["scored"].asset_materializations_for_node("detector_quality")
    meta = mats[0].metadata
    assert meta["quality_page"].value.endswith("quality.html")
    assert "verbatim" in meta["recall_per_leak_type"].value
    page = (run["out"] / "quality.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "Detector quality" in page and "<script" not in page
    assert "Item split" in page and "question_only" in page
    check = run["scored"].get_asset_check_evaluations()[0]
    failed = [t["name"] for t in run["report"]["presets"]["default"]["targets"] if not t["passed"]]
    assert check.metadata["failed"].value == (", ".join(failed) or "none")


def test_rerun_replaces_rows(run):
    res = dg.materialize([detector_quality], resources=run["resources"], instance=run["instance"], partition_key="default")
    assert res.success
    with store.connect(run["settings"].db_path, read_only=True) as con:
        assert con.execute("select count(*) from quality_runs where preset = 'default'").fetchone()[0] == 1
        dup = con.execute("""select count(*) from (select leak_type, task, count(*) c from quality_scores
                             where preset = 'default' group by all having c > 1)""").fetchone()[0]
    assert dup == 0


# -- the thorough preset on the same slice ----------------------------------------------------------

@pytest.fixture(scope="module")
def thorough(run):
    scored = dg.materialize([detector_quality], resources=run["resources"], instance=run["instance"], partition_key="thorough")
    report = json.loads((run["out"] / "quality.json").read_text())
    return dict(scored=scored, report=report["presets"]["thorough"], default=report["presets"]["default"])


def test_thorough_meets_the_verbatim_like_html_and_dump_targets(thorough):
    leaks = thorough["report"]["leak_types"]
    for leak in VERBATIM_LIKE + ("mc_options_changed",):
        assert leaks[leak]["recall"] >= 0.995, (leak, leaks[leak])
    for leak in ("html_wrapped", "benchmark_dump"):
        assert leaks[leak]["recall"] >= 0.98, (leak, leaks[leak])
    for leak in ("question_middle_cut", "answer_only"):
        assert leaks[leak]["recall"] >= 0.80, (leak, leaks[leak])
    assert leaks["answer_only"]["held_for_review"] == leaks["answer_only"]["flagged"]  # held, never removed
    assert leaks["solution_only"]["recall"] >= 0.95


def test_thorough_question_only_misses_are_the_rules_own_limit(run, thorough, records):
    """The rule holds a question of at least question_only_min_tokens tokens found whole (and a shorter, distinctive
    one: test_thorough_rules.py); every miss is shorter than question_only_min_tokens."""
    cfg = preset("thorough")
    tok = get_tokenizer(cfg.tokenizer)
    items = {it.key: it for it in items_from_records(records)}
    with store.connect(run["settings"].db_path, read_only=True) as con:
        rows = store.query_df(con, """select * from quality_outcomes where preset = 'thorough'
                                      and leak_type = 'question_only'""").to_dicts()
    for r in rows:
        q = items[item_key(r["task"], r["split"], r["instance_index"], r["subject"])].question
        if not r["caught"]:
            assert len(tok.encode(clean_text(q, cfg.clean_options))) < cfg.question_only_min_tokens, r
        else:
            assert r["held_for_review"], r  # held for a reviewer, not removed
    leak = thorough["report"]["leak_types"]["question_only"]
    target = next(t for t in thorough["report"]["targets"] if t["name"].startswith("recall question_only"))
    assert target["value"] == leak["recall"] and target["passed"] == (leak["recall"] >= 0.90)


def test_thorough_templates_and_false_positives(thorough):
    r = thorough["report"]
    nc = r["leak_types"]["numbers_changed"]
    assert nc["flagged"] == 0 and nc["same_template"] == nc["planted"] > 0
    assert r["clean"]["false_positives"] == 0 and r["hard_negatives"]["total"]["false_positives"] == 0
    checks = thorough["scored"].get_asset_check_evaluations()
    assert checks[0].passed == all(t["passed"] for t in r["targets"])
    by = {t["name"]: t for t in r["targets"]}
    assert by["false positives per million clean documents"]["target"] == "<= 10"
    assert by["numbers_changed flagged"]["passed"] and by["numbers_changed reported as same_template"]["passed"]
