"""The paraphrase part's match rows: after the n-gram detector has scanned a batch of documents,
each document is searched for rewordings of the instances it has no row for yet.

A row has ``reason = paraphrase``, is flagged and held for review (``needs_review``; not for the tasks the knob
``paraphrase_remove`` names: their rows remove the document), scores the
window's similarity, and carries its evidence as JSON (``evidence``: rule, similarity, the
quantities, names or signature that matched, whether the window holds the gold answer).  It has
no token spans: a span removal of an approved paraphrase removes the whole document.
"""

from __future__ import annotations

import json

from contam_assets.detector.config import DetectConfig, paraphrase_kinds, paraphrase_removes
from contam_assets.detector.matches import Reference, match_id
from contam_assets.paraphrase.embed import load_embedder
from contam_assets.paraphrase.search import ParaphraseIndex

_INDEXES: dict[tuple, ParaphraseIndex] = {}


def paraphrase_index(ref: Reference, cfg: DetectConfig) -> ParaphraseIndex:
    """The instances' vectors and gates, built once per process and reference set."""
    kinds = paraphrase_kinds(cfg)
    key = (id(ref.records), ref.records.height, cfg.paraphrase_model, cfg.paraphrase_min_similarity, kinds)
    px = _INDEXES.get(key)
    if px is None:
        _INDEXES.clear()
        px = _INDEXES[key] = ParaphraseIndex(ref.records, load_embedder(cfg.paraphrase_model),
                                             cfg.paraphrase_min_similarity, kinds)
    return px


def paraphrase_rows(docs: list, shard: str, ref: Reference, cfg: DetectConfig, preset: str, rows: list[dict],
                    tasks: set[str] | None = None) -> list[dict]:
    """Rows for rewordings in ``docs`` of instances that ``rows`` (the n-gram rows of these documents) lack."""
    px = paraphrase_index(ref, cfg)
    removes = paraphrase_removes(cfg)
    have: dict[int, set[tuple]] = {}
    for r in rows:
        have.setdefault(r["line"], set()).add((r["task"], r["split"], r["instance_index"], r["subject"]))
    # the instances' keys, read only where the n-gram rows name some
    keys = list(zip(px.records["task"], px.records["split"], px.records["instance_index"], px.records["subject"])) if have else []
    out = []
    skips = []
    for doc in docs:
        seen = have.get(doc.line, set())
        skips.append({i for i, k in enumerate(keys) if k in seen} if seen else None)
    # the gates read the whole batch at once (one pass for its words, one sparse product per word gate)
    for doc, hits in zip(docs, px.search_many([doc.text for doc in docs], skips)):
        for hit in hits:
            rec = px.records.row(hit.item, named=True)
            if tasks is not None and rec["task"] not in tasks:
                continue
            out.append(row(doc, shard, rec, hit, preset, cfg.paraphrase_min_similarity,
                           held=not ({"all", rec["task"]} & removes)))
    return out


def row(doc, shard: str, rec: dict, hit, preset: str, required: float, held: bool = True) -> dict:
    window = doc.text[hit.start:hit.end].strip()
    sim = round(hit.evidence.similarity, 6)
    required = hit.evidence.extra.get("bar", required)  # a multiple-choice row: the bar its window met
    return {
        "match_id": match_id(shard, doc.line, rec, -1 - hit.start), "shard": shard, "line": doc.line,
        "doc_id": doc.doc_id, "source": doc.source, "task": rec["task"], "suite": rec["suite"], "split": rec["split"],
        "instance_index": rec["instance_index"], "subject": rec["subject"], "choice_index": rec["choice_index"],
        "is_correct": rec["is_correct"], "record_id": rec["record_id"], "score": sim, "required_score": required,
        "flagged": True, "needs_review": held, "question_overlap": None, "answer_overlap": None,
        "passage_overlap": None, "question_start": None, "question_end": None, "answer_start": None,
        "answer_end": None, "passage_start": None, "passage_end": None, "n_matched_ngrams": 0,
        "doc_tokens": 0, "doc_chars": len(doc.text), "training_text": window,
        "training_segments": json.dumps([{"kind": "question", "text": window}], ensure_ascii=False),
        "eval_question": rec["question"], "eval_answer": rec["answer"], "eval_passage": rec["passage"],
        "preset": preset, "contamination_score": sim, "answer_spans": None, "cluster_end": None,
        "reason": "paraphrase", "twins": rec.get("twins"),
        "evidence": json.dumps(hit.evidence.as_dict() | {"window_chars": [hit.start, hit.end]}, ensure_ascii=False),
        "via_task": "",
    }
