"""The paraphrase part on multiple-choice and code items (docs/paraphrase.md): a reworded stem, with or without
its options, and a code task rewritten under other names are held with their evidence; same-subject questions
that are not in the reference set, and code tasks with other examples, are not."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from contam_assets.detector.config import PRESETS
from contam_assets.detector.matches import Reference
from contam_assets.paraphrase.quantities import literals, stems
from contam_assets.paraphrase.stage import paraphrase_rows
from contam_assets.paraphrase.verify import MC_MARGIN, MC_SIMILARITY
from contam_assets.sources.reference import build_reference_set
from contam_assets.sources.registry import load_registry
from contam_assets.store.pool import Document

ROOT = Path(__file__).resolve().parents[2]
DATA = Path("/work/shared/data")
HOST = ("The town council met on Tuesday to discuss the new library. Residents asked about parking and opening "
        "hours, and the mayor promised an answer next month.")
pytestmark = pytest.mark.skipif(not (DATA / "mmlu_test" / "sociology_test.csv").is_file(), reason="shared data not present")
SUBJECTS = ["sociology", "high_school_macroeconomics", "high_school_psychology", "us_foreign_policy"]

# hand-written rewordings (not from any data set)
ECOLOGY = ("In urban sociology, what was the ecological approach about? It looked at how social groups colonised "
           "the different parts of a city and competed with one another for resources.")
ECOLOGY_OPTIONS = ("Urban sociology's ecological approach was concerned with which of these?\n"
                   "A. competition between social groups colonizing the city's areas for resources\n"
                   "B. wildlife and natural habitats at the city's edges\nC. collective protests about the environment\n"
                   "D. how men and women use public space differently")
RENAMED = '''def any_pair_nearer_than(values: list, limit: float) -> bool:
    """Report whether some two entries of values lie nearer to each other than limit does.
    >>> any_pair_nearer_than([1.0, 2.0, 3.0], 0.5)
    False
    >>> any_pair_nearer_than([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3)
    True
    """
    ordered = sorted(values)
    return any(b - a < limit for a, b in zip(ordered, ordered[1:]))
'''
# the same style and topic, other examples: another task
OTHER_TASK = '''def any_pair_farther_than(values: list, limit: float) -> bool:
    """Report whether some two entries of values lie farther from each other than limit does.
    >>> any_pair_farther_than([1.5, 7.25], 4.0)
    True
    >>> any_pair_farther_than([6.5, 7.75, 8.0], 9.0)
    False
    """
    return max(values) - min(values) > limit
'''


def doc(i: int, body: str) -> Document:
    text = f"{HOST}\n\n{body}\n\nThanks for reading."
    return Document(line=i, doc_id=f"d{i}", source="web", text=text, n_bytes=len(text.encode()), raw=b"", offset=0)


@pytest.fixture(scope="module")
def mc_code():
    """MMLU (four subjects, even rows of sociology left out of the reference set) and HumanEval."""
    cfg = PRESETS["paraphrase"].replace(paraphrase_kinds="all")  # the multiple-choice and code rules are opt-in
    records, _ = build_reference_set(load_registry(ROOT / "data" / "tasks", ["mmlu", "humaneval"]), DATA, cfg)
    keep = (pl.col("task") == "humaneval") | (pl.col("subject").is_in(SUBJECTS) & ~(
        (pl.col("subject") == "sociology") & (pl.col("instance_index") % 2 == 0)))
    return cfg, Reference(records.filter(keep))


def sociology(row: int) -> list[str]:
    import csv

    with (DATA / "mmlu_test" / "sociology_test.csv").open() as f:
        return list(csv.reader(f))[1 + row]


def test_content_words_and_literals():
    assert stems("The ecological approach to urban sociology involved studying:") == \
        {"ecolog", "approa", "urban", "sociol", "involv", "studyi"}
    assert literals("f('abc', [1.5, 2]) == \"x y\"; f('') is None") == {"s:abc", "s:x y", "n:1.5", "n:2"}


def test_a_reworded_stem_is_held_with_its_gold_answer_as_evidence(mc_code):
    cfg, ref = mc_code
    out = paraphrase_rows([doc(0, ECOLOGY), doc(1, ECOLOGY_OPTIONS)], "web/a.jsonl", ref, cfg, "paraphrase", [])
    assert sorted((r["line"], r["task"], r["subject"], r["instance_index"]) for r in out) == \
        [(0, "mmlu", "sociology", 1), (1, "mmlu", "sociology", 1)]
    for r in out:
        ev = json.loads(r["evidence"])
        assert r["reason"] == "paraphrase" and r["needs_review"] and ev["rule"] == "mc"
        assert ev["gold_answer"] == sociology(1)[1] and ev["answer_in_window"] is (r["line"] == 1)
        assert ev["margin"] >= MC_MARGIN and ev["similarity"] >= MC_SIMILARITY and "ecolog" in ev["words"]
        assert HOST not in r["training_text"]


def test_same_subject_questions_outside_the_reference_set_are_not_held(mc_code):
    cfg, ref = mc_code
    texts = []
    for row in (0, 2, 4, 6, 8, 10, 12, 14, 16, 18):  # left out of the reference set: look-alikes of its subject
        q, *choices, _ = sociology(row)
        texts += [q, q + "\n" + "\n".join(f"{'ABCD'[k]}. {c}" for k, c in enumerate(choices))]
    texts.append("In urban sociology, what did the Chicago school say about how commuters travel from the suburbs?")
    out = paraphrase_rows([doc(i, t) for i, t in enumerate(texts)], "web/a.jsonl", ref, cfg, "paraphrase", [])
    assert out == []


def test_a_code_task_renamed_and_rewritten_is_held_and_another_task_is_not(mc_code):
    cfg, ref = mc_code
    out = paraphrase_rows([doc(0, RENAMED), doc(1, OTHER_TASK)], "web/a.jsonl", ref, cfg, "paraphrase", [])
    assert [(r["line"], r["task"], r["instance_index"]) for r in out] == [(0, "humaneval", 0)]
    ev = json.loads(out[0]["evidence"])
    assert ev["rule"] == "code" and ev["renamed"] is True and ev["cover"] >= 0.3
    assert {"n:2.8", "n:0.3", "n:0.5"} <= set(ev["literals"])
