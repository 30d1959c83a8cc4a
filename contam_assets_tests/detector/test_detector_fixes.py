"""Regressions found by the quality suite: exact 1.0 for complete matches, escape depth, deep JSON."""

from __future__ import annotations

import json

import polars as pl

from contam_assets.defs.resources import DEFAULT_TASKS_DIR
from contam_assets.detector.config import preset
from contam_assets.detector.index_build import build_index
from contam_assets.detector.matches import Reference, scan_documents
from contam_assets.detector.text import clean_text, clean_text_reference
from contam_assets.sources.reference import build_reference_set
from contam_assets.sources.registry import load_registry
from contam_assets.store.pool import Document, Reject, parse_line


def _detector(shared_data, tasks):
    cfg = preset("default")
    records, _ = build_reference_set(load_registry(DEFAULT_TASKS_DIR, tasks), shared_data, cfg)
    return cfg, records, build_index(records, cfg), Reference(records)


def _scan(det, texts):
    cfg, _, index, ref = det
    docs = [Document(line=i, doc_id=str(i), source=None, text=t, n_bytes=len(t), raw=b"") for i, t in enumerate(texts)]
    rows, _ = scan_documents(docs, "t.jsonl", index, ref, cfg)
    return pl.DataFrame(rows) if rows else pl.DataFrame()


def test_complete_match_of_a_short_instance_is_exactly_one_and_flagged(shared_data):
    det = _detector(shared_data, ["arc_easy"])
    rows = [json.loads(l) for l in open(shared_data / "arc_easy_llmfoundry.jsonl")]
    texts = []
    for r in rows[:60]:
        q = r["query"].removeprefix("Question: ")
        opts = "\n".join(f"{'ABCD'[i]}. {c}" for i, c in enumerate(r["choices"]))
        texts.append(f"Some host text before the quiz item.\n\n{q}\n{opts}\nAnswer: {'ABCD'[r['gold']]}\n\nMore text.")
    out = _scan(det, texts)
    full = out.filter(pl.col("question_overlap") == 1.0)
    assert full.height > 0
    # every complete question match with its answer found reaches exactly 1.0 and is flagged
    perfect = full.filter(pl.col("answer_overlap") == 1.0)
    assert perfect.height > 0 and (perfect["score"] == 1.0).all() and perfect["flagged"].all()


def test_escaping_depth_does_not_change_the_cleaned_words():
    text = 'Let \\norm{x} be "the norm".\nC:\\\\temp\\new and \\u00e9t\u00e9'
    once, twice = json.dumps(text), json.dumps(json.dumps(text))
    assert clean_text(text) == clean_text(once) == clean_text(twice) == clean_text_reference(twice)


def test_json_escaped_copy_of_latex_text_matches(shared_data):
    det = _detector(shared_data, ["mmlu"])
    _, records, _, _ = det
    latex = records.filter(pl.col("indexed") & pl.col("question").str.contains(r"\\[a-z]") & pl.col("is_correct")).head(5)
    assert latex.height > 0
    texts = [json.dumps({"q": r["question"], "a": r["answer"]}) for r in latex.iter_rows(named=True)]
    out = _scan(det, texts)
    for line, r in enumerate(latex.iter_rows(named=True)):
        hit = out.filter((pl.col("line") == line) & (pl.col("subject") == r["subject"]) & (pl.col("instance_index") == r["instance_index"]))
        assert hit.height >= 1 and hit["question_overlap"].max() == 1.0


def test_deeply_nested_json_is_a_counted_reject():
    raw = b"[" * 100000 + b"]" * 100000
    got = parse_line(raw, 7, "s.jsonl", "text", 8 << 20)
    assert isinstance(got, Reject) and got.reason.startswith("malformed_json")
