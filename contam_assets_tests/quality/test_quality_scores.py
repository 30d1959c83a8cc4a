"""What counts as caught, correct, a false positive and present: scoring on a hand-made case with known answers."""

from __future__ import annotations

import polars as pl
import pytest

from contam_assets.quality.items import PlantedItem
from contam_assets.quality.overlap import PresenceIndex
from contam_assets.quality.scores import Targets, evaluate, fp_upper_bound
from contam_assets.quality.suite import DOCUMENT_SCHEMA, TRUTH_SCHEMA

QA = "Tom has 12 apples and gives 5 of them to his sister Mary. How many apples does Tom have left now?"
QB = "A train leaves the station at 3 pm and travels 60 miles per hour for 2 hours. How far has it travelled?"
ANS_A = "Tom has 12 - 5 = <<12-5=7>>7 apples left.\n#### 7"
SOL = "    return sorted(set(values), reverse=True)[:k]\n"

A = PlantedItem("gsm8k", "qa", "test", 0, None, QA, ANS_A, indexed=True)
B = PlantedItem("gsm8k", "qa", "test", 1, None, QB, "120 miles\n#### 120", indexed=True)
C = PlantedItem("gsm_hard", "qa", "test", 5, None, QA, "7", indexed=True)  # identical question: a twin of A
D = PlantedItem("humaneval", "code", "test", 0, None, "def top_k(values, k):\n    \"\"\"Largest k distinct values.\"\"\"\n",
         SOL, solution=SOL, indexed=True, solution_indexed=True)

DOCS = [
    ("verbatim/gsm8k/0", "planted", "verbatim", "gsm8k", "planted/verbatim.jsonl", 0, f"Some host text.\n\n{QA}\n{ANS_A}\n\nMore host text."),
    ("verbatim/gsm8k/1", "planted", "verbatim", "gsm8k", "planted/verbatim.jsonl", 1, f"Intro.\n\n{QB}\n120 miles\n#### 120"),
    ("solution_only/humaneval/0", "planted", "solution_only", "humaneval", "planted/solution_only.jsonl", 0, f"# snippet\n{SOL}"),
    ("clean/0", "clean", "web", None, "clean/part-000.jsonl.gz", 0, "A clean page about bicycles and rivers."),
    ("clean/1", "clean", "code", None, "clean/part-000.jsonl.gz", 1, "def f(x):\n    return x\n"),
]
TRUTH = [  # (doc index, item)
    (0, A), (1, B), (2, D),
]
MATCHES = [  # (doc index, item, suite, score, flagged, needs_review)
    (0, A, "gsm8k", 0.97, True, False),
    (0, C, "gsm_hard", 0.81, True, False),
    (0, B, "gsm8k", 0.83, True, False),  # flagged, but B is not in that document: stray
    (1, B, "gsm8k", 0.71, False, False),  # stored candidate only
    (2, D, "humaneval_solution", 1.0, True, True),  # derived suite: held for review
    (3, B, "gsm8k", 0.9, True, False),  # a clean document flagged: false positive
]


def _frames():
    docs = pl.DataFrame([dict(doc_id=d[0], doc_class=d[1], kind=d[2], variant="v", source="web", task=d[3], shard=d[4],
                              line=d[5], n_chars=len(d[6])) for d in DOCS], schema=DOCUMENT_SCHEMA)
    texts = {(d[4], d[5]): d[6] for d in DOCS}
    truth = pl.DataFrame([dict(doc_id=DOCS[i][0], leak_type=DOCS[i][2], variant="v", task=it.task, split=it.split,
                               instance_index=it.instance_index, subject=it.subject, choice_index=None, role="planted",
                               char_start=0, char_end=len(DOCS[i][6]), detail="{}", shard=DOCS[i][4], line=DOCS[i][5])
                          for i, it in TRUTH], schema=TRUTH_SCHEMA)
    matches = pl.DataFrame([dict(shard=DOCS[i][4], line=DOCS[i][5], task=it.task, suite=suite, split=it.split,
                                 instance_index=it.instance_index, subject=it.subject, score=score, flagged=fl, needs_review=nr)
                            for i, it, suite, score, fl, nr in MATCHES])
    return truth, docs, matches, texts


@pytest.fixture(scope="module")
def result():
    truth, docs, matches, texts = _frames()
    items = [A, B, C, D]
    return evaluate("default", truth, docs, matches, texts, items, PresenceIndex((i.key, i.question) for i in items),
                    Targets(recall_types=("verbatim",)))


def _row(df, **kw):
    rows = df.filter(pl.all_horizontal(*[pl.col(k) == v for k, v in kw.items()])).to_dicts()
    assert len(rows) == 1, (kw, rows)
    return rows[0]


def test_pair_verdicts(result):
    v = {(r["doc_id"], r["task"], r["instance_index"]): r["verdict"] for r in result.pairs.to_dicts()}
    assert v[("verbatim/gsm8k/0", "gsm8k", 0)] == "truth"
    assert v[("verbatim/gsm8k/0", "gsm_hard", 5)] == "twin"
    assert v[("verbatim/gsm8k/0", "gsm8k", 1)] == "stray"
    assert v[("clean/0", "gsm8k", 1)] == "false_positive"


def test_recall_candidates_and_precision(result):
    verb = _row(result.scores, leak_type="verbatim", task="ALL")
    assert (verb["planted"], verb["flagged"], verb["candidates"]) == (2, 1, 2)
    assert verb["recall"] == 0.5 and verb["candidate_recall"] == 1.0
    assert (verb["flagged_pairs"], verb["correct_pairs"]) == (3, 2)
    assert verb["precision"] == pytest.approx(2 / 3, abs=1e-4)
    assert verb["documents_removed"] == 1
    sol = _row(result.scores, leak_type="solution_only", task="humaneval")
    assert sol["recall"] == 1.0 and sol["held_for_review"] == 1 and sol["documents_removed"] == 0


def test_false_positives_and_bound(result):
    fp = result.summary["false_positives"]
    assert (fp["documents"], fp["flagged_documents"]) == (2, 1)
    assert fp["per_million"] == 500000.0
    assert _row(result.clean, kind="web")["flagged_documents"] == 1
    assert _row(result.clean, kind="code")["flagged_documents"] == 0
    # the bound: zero events in n documents gives about 3/n (rule of three), loose for small n
    assert fp_upper_bound(0, 2000) * 1e6 == pytest.approx(1497, rel=0.01)
    assert fp_upper_bound(0, 100_000) * 1e6 == pytest.approx(30, rel=0.01)


def test_targets_are_checked(result):
    t = {x["name"]: x["passed"] for x in result.summary["targets"]}
    assert t["recall verbatim"] is False
    assert t["recall solution_only (held for review counts)"] is True
    assert t["false positives per million clean documents"] is False


def test_item_split(result):
    split = {(r["task"], r["instance_index"]): r for r in result.item_split.to_dicts()}
    # removed documents: verbatim/gsm8k/0 (A, and its twin C, verbatim) and the flagged clean document
    assert split[("gsm8k", 0)]["present"] and split[("gsm8k", 0)]["flagged"]
    assert split[("gsm_hard", 5)]["present"]
    assert not split[("gsm8k", 1)]["present"] and split[("gsm8k", 1)]["flagged"]
    assert not split[("humaneval", 0)]["present"]  # only held for review: its document is not removed
    summ = {r["task"]: r for r in result.item_split_summary.to_dicts()}
    assert summ["gsm8k"]["present"] == 1 and summ["gsm8k"]["recall_given_presence"] == 1.0
    assert summ["humaneval"]["recall_given_presence"] is None


def test_presence_index_finds_whole_questions_only():
    idx = PresenceIndex([("a", QA), ("short", "Capital of France?")])
    assert idx.found_in("Intro. " + QA.upper() + " trailing") == {"a"}
    assert idx.found_in(QA[: len(QA) // 2]) == set()
    assert idx.found_in("what is the capital of france") == {"short"}
