"""The planted suite's truth is right: planted items are in their documents, clean documents hold none.

The checks here do not reuse the suite's own helpers where that would make them
circular: clean documents are compared with instance questions read straight
from the benchmark files, on plain word 8-gram sets.
"""

from __future__ import annotations

import gzip
import html
import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

from contam_assets.detector.config import preset
from contam_assets.detector.text import clean_text
from contam_assets.quality.items import items_from_records
from contam_assets.quality.leaks import LEAK_TYPES, VERBATIM_LIKE, change_numbers
from contam_assets.quality.suite import build_suite, write_suite
from contam_assets.sources.reference import build_reference_set
from contam_assets.sources.registry import load_registry
from contam_assets.store.pool import Document, list_shards, read_shard

TASKS = ["gsm8k", "gsm_hard", "humaneval", "arc_easy"]
TASKS_DIR = Path(__file__).resolve().parents[2] / "data" / "tasks"


def norm(text: str) -> str:
    return f" {clean_text(text)} "


def occurs(needle: str, haystack: str) -> bool:
    n = clean_text(needle)
    return bool(n) and f" {n} " in norm(haystack)


@pytest.fixture(scope="module")
def records(shared_data):
    recs, _ = build_reference_set(load_registry(TASKS_DIR, TASKS), shared_data, preset("default"))
    return recs


@pytest.fixture(scope="module")
def suite(records, shared_data):
    return build_suite(records, seed=7, per_type=4, clean_docs=400, hard_negatives=150, benchmarks_dir=shared_data)


@pytest.fixture(scope="module")
def items(records):
    return {it.key: it for it in items_from_records(records)}


def _doc(suite, doc_id):
    return next(d for d in suite.docs if d.doc_id == doc_id)


def test_every_leak_type_is_planted_for_the_tasks_it_applies_to(suite):
    planted = defaultdict(set)
    for t in suite.truth:
        if t.role == "planted":
            planted[t.leak_type].add(t.task)
    assert set(planted) == set(LEAK_TYPES)
    for leak in ("verbatim", "case", "whitespace", "line_breaks", "punctuation", "json_escaped", "python_escaped",
                 "html_wrapped", "question_only", "question_middle_cut", "benchmark_dump"):
        assert planted[leak] == set(TASKS), leak
    assert planted["solution_only"] == {"humaneval"}
    assert planted["mc_options_changed"] == {"arc_easy"}
    assert planted["answer_only"] == {"gsm8k"}  # gsm_hard answers are bare numbers
    assert planted["numbers_changed"] == {"gsm8k"}
    counts = defaultdict(int)
    for d in suite.docs:
        if d.doc_class == "planted" and not (d.kind == "numbers_changed" and d.variant == "gsm_hard"):
            counts[(d.kind, d.task)] += 1
    assert set(counts.values()) == {4}


def test_verbatim_like_items_are_whole_in_their_documents(suite, items):
    """Normalised question and answer (every option for multiple choice) occur in the normalised document and span."""
    checked = 0
    for t in suite.truth:
        if t.leak_type not in VERBATIM_LIKE:
            continue
        it = items[(t.task, t.split, t.instance_index, t.subject or "")]
        doc = _doc(suite, t.doc_id).text
        span = doc[t.char_start:t.char_end]
        parts = [it.question] + (list(it.choices) if it.kind == "multiple-choice" else [it.answer or ""])
        for part in parts:
            assert occurs(part, span), (t.doc_id, t.variant, part[:80])
        checked += 1
    assert checked >= len(VERBATIM_LIKE) * len(TASKS) * 4


def test_other_leak_types_hold_what_they_claim(suite, items):
    seen = defaultdict(int)
    for t in suite.truth:
        it = items[(t.task, t.split, t.instance_index, t.subject or "")]
        d = _doc(suite, t.doc_id)
        doc = d.text
        if t.leak_type == "html_wrapped":
            text = html.unescape(re.sub(r"<[^>]+>", " ", doc))
            assert occurs(it.question, text), t.doc_id
        elif t.leak_type == "question_only":
            assert occurs(it.question, doc)
            if it.kind != "multiple-choice" and it.answer and len(it.answer.split()) > 3:
                assert not occurs(it.answer, doc), t.doc_id
        elif t.leak_type == "answer_only":
            assert occurs(it.answer, doc) and not occurs(it.question, doc), t.doc_id
        elif t.leak_type == "solution_only":
            assert occurs(it.solution, doc), t.doc_id
            assert not occurs(it.question, doc), t.doc_id
        elif t.leak_type == "question_middle_cut":
            detail = json.loads(t.detail)
            a, b = detail["cut_words"]
            words = it.question.split(" ")
            assert 0.15 <= detail["cut_fraction"] <= 0.45
            assert occurs(" ".join(words[:a]), doc) and occurs(" ".join(words[b:]), doc)
            assert not occurs(it.question, doc), t.doc_id
        elif t.leak_type == "mc_options_changed":
            detail = json.loads(t.detail)
            assert occurs(it.question, doc) and all(occurs(c, doc) for c in it.choices)
            if "reordered" in t.variant:
                assert detail["order"] != sorted(detail["order"])
                positions = [doc.find(c) for c in it.choices]
                assert positions != sorted(positions) or len(set(it.choices)) < len(it.choices), t.doc_id
        elif t.leak_type == "benchmark_dump":
            text = html.unescape(doc.replace("<br>", "\n"))
            assert occurs(it.question, text), t.doc_id
        elif t.leak_type == "numbers_changed":
            if t.role == "contains":  # the GSM-Hard item itself is in the document, verbatim
                assert occurs(it.question, doc)
            else:  # the GSM8K source: same template, different numbers
                assert not occurs(it.question, doc), t.doc_id
                src_words = set(clean_text(it.question).split())
                assert len(src_words & set(clean_text(doc).split())) >= 0.6 * len(src_words)
        seen[t.leak_type] += 1
    assert seen["numbers_changed"] >= 8 and seen["benchmark_dump"] > 4 * len(TASKS)


def test_benchmark_dumps_hold_several_items_of_one_split(suite):
    by_doc = defaultdict(list)
    for t in suite.truth:
        if t.leak_type == "benchmark_dump":
            by_doc[t.doc_id].append(t)
    assert by_doc
    for rows in by_doc.values():
        assert len(rows) >= 5
        assert len({(r.task, r.split) for r in rows}) == 1
        spans = sorted((r.char_start, r.char_end) for r in rows)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # items do not overlap


def _raw_questions(shared: Path) -> list[str]:
    qs = []
    for name in ("gsm8k_train.jsonl", "gsm8k_test.jsonl"):
        qs += [json.loads(l)["question"] for l in open(shared / name)]
    qs += [json.loads(l)["input"] for l in open(shared / "gsmhard_v2.jsonl")]
    qs += [json.loads(l)["query"].removeprefix("Question: ") for l in open(shared / "arc_easy_llmfoundry.jsonl")]
    with gzip.open(shared / "HumanEval.jsonl.gz", "rt") as fh:
        for l in fh:
            row = json.loads(l)
            qs += [row["prompt"], row["canonical_solution"]]
    return qs


def test_clean_documents_contain_no_benchmark_item(suite, shared_data):
    """No instance question (or HumanEval solution) shares half of its word 8-grams with a clean document."""
    owners = defaultdict(list)
    sizes = []
    for i, q in enumerate(_raw_questions(shared_data)):
        w = clean_text(q).split()
        grams = {tuple(w[j:j + 8]) for j in range(len(w) - 7)}
        sizes.append(len(grams))
        for g in grams:
            owners[g].append(i)
    clean = [d for d in suite.docs if d.doc_class in ("clean", "hard_negative")]
    assert sum(d.doc_class == "clean" for d in clean) == 400
    assert sum(d.doc_class == "hard_negative" for d in clean) > 100  # Skywork's mock GSM8K problems
    worst = 0.0
    for d in clean:
        w = clean_text(d.text).split()
        hits = defaultdict(int)
        for g in {tuple(w[j:j + 8]) for j in range(len(w) - 7)}:
            for i in owners.get(g, ()):
                hits[i] += 1
        for i, c in hits.items():
            if sizes[i] >= 3:
                worst = max(worst, c / sizes[i])
    assert worst < 0.5


def test_gsm_hard_hard_negatives_differ_from_their_gsm8k_source(suite, items):
    natural = [t for t in suite.truth if t.leak_type == "numbers_changed" and t.variant == "gsm_hard"]
    assert natural
    for t in natural:
        doc = _doc(suite, t.doc_id).text
        if t.role == "planted":
            assert t.task == "gsm8k" and t.split == "test"
            assert not occurs(items[(t.task, t.split, t.instance_index, "")].question, doc)


def test_change_numbers_keeps_the_template():
    q = "Janet has 16 eggs and eats 3. She sells the rest for $2 each. How much does she make?"
    a = "16 - 3 = <<16-3=13>>13 eggs. 13 * 2 = <<13*2=26>>26 dollars.\n#### 26"
    import random

    nq, na, mapping = change_numbers(q, a, random.Random(0))
    assert set(mapping) == {"16", "3", "2"} and all(mapping[k] != k for k in mapping)
    assert re.sub(r"\d+", "#", nq) == re.sub(r"\d+", "#", q)
    assert na.startswith(f"{mapping['16']} - {mapping['3']} = ")


def test_suite_is_deterministic_by_seed(records, shared_data):
    a = build_suite(records, seed=3, per_type=2, clean_docs=30, hard_negatives=10, benchmarks_dir=shared_data, tasks=["humaneval", "arc_easy"])
    b = build_suite(records, seed=3, per_type=2, clean_docs=30, hard_negatives=10, benchmarks_dir=shared_data, tasks=["humaneval", "arc_easy"])
    c = build_suite(records, seed=4, per_type=2, clean_docs=30, hard_negatives=10, benchmarks_dir=shared_data, tasks=["humaneval", "arc_easy"])
    assert [(d.doc_id, d.text) for d in a.docs] == [(d.doc_id, d.text) for d in b.docs]
    assert [d.text for d in a.docs] != [d.text for d in c.docs]


def test_written_suite_is_a_pool_and_truth_points_at_it(suite, tmp_path):
    meta = write_suite(suite, tmp_path)
    pool = tmp_path / "pool"
    shards = list_shards(pool)
    assert "planted/verbatim.jsonl" in shards and any(s.startswith("clean/part-") for s in shards)
    docs = {}
    for shard in shards:
        for doc in read_shard(pool / shard, shard):
            assert isinstance(doc, Document)
            docs[(shard, doc.line)] = doc
    assert len(docs) == len(suite.docs) == sum(meta["documents"].values())
    truth = [json.loads(l) for l in (tmp_path / "truth.jsonl").read_text().splitlines()]
    assert len(truth) == len(suite.truth)
    for t in truth:
        doc = docs[(t["shard"], t["line"])]
        assert doc.doc_id == t["doc_id"]
        assert 0 <= t["char_start"] < t["char_end"] <= len(doc.text)
    # re-writing replaces the pool: no stale shard survives
    (pool / "planted" / "stale.jsonl").write_text('{"text": "left over from an older suite"}\n')
    write_suite(suite, tmp_path)
    assert list_shards(pool) == shards
