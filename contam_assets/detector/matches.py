"""From candidates to match rows: what a reviewer sees of each (document, instance) pair.

``scan_documents`` is the detector end to end for a batch of documents: clean,
tokenize, (optionally) prefilter, scan, and turn the candidates into match rows with
the matched training text segmented into context / passage / question / answer.
A document is any object with ``line``, ``doc_id``, ``source`` and ``text``
(store.pool.Document is one).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import polars as pl

from contam_assets.detector.config import DetectConfig
from contam_assets.detector.index import NgramIndex, mapped_budget
from contam_assets.detector.prefilter import ensure_prefilter
from contam_assets.detector.scan import Candidate, scan_many
from contam_assets.detector.scoring import length_adjusted_score
from contam_assets.detector.text import join_words, split_translated, translate_bytes
from contam_assets.detector.thorough import ensure_extras, finish
from contam_assets.detector.tokenize import Tokenizer, get_tokenizer

CONTEXT_BEFORE = 30  # tokens of context shown before the first matched span (decon: 30 words)
CONTEXT_AFTER = 60  # and after the last one (decon: 60)
MAX_GAP = 40  # gaps between spans longer than this are shortened with an ellipsis


class DocumentLike(Protocol):
    line: int
    doc_id: str
    source: str | None
    text: str


@dataclass
class Reference:
    """Reference records by record_id (what a match row says about the eval instance).  ``records`` as read from an
    index folder is mapped (store/artifacts.read_records): a row is read from the file's pages when a match asks
    for it, so a scanning process holds the rows of its matches, not the table."""

    records: pl.DataFrame

    def __post_init__(self):
        # rows are made when a match asks for them: a run of one small shard meets a few records of ~80,000
        # a table already in record_id order (as saved with the index) is used as it is: a sorted copy of every text
        # would double what each scanning process holds of the reference set
        self._df = self.records if self.records["record_id"].is_sorted() else self.records.sort("record_id")
        ids = self._df["record_id"].to_numpy()
        self._pos = None if np.array_equal(ids, np.arange(len(ids))) else {int(r): i for i, r in enumerate(ids.tolist())}
        self._rows: dict[int, dict] = {}
        self._tasks: list[str] | None = None

    @property
    def tasks(self) -> list[str]:
        """The sorted tasks of the records (computed once: a per-shard `to_list` of ~80,000 strings cost 18 ms)."""
        if self._tasks is None:
            self._tasks = sorted(self.records["task"].unique().to_list())
        return self._tasks

    def get(self, record_id: int) -> dict:
        row = self._rows.get(record_id)
        if row is None:
            if self._pos is not None:
                pos = self._pos[record_id]  # KeyError for an unknown id, as a dict lookup gives
            elif 0 <= record_id < self._df.height:
                pos = record_id
            else:
                raise KeyError(record_id)
            row = self._rows[record_id] = self._df.row(pos, named=True)
        return row


_quoted = json.encoder.encode_basestring  # a JSON string as json.dumps(ensure_ascii=False) writes it


def _segments_json(segs: list[dict]) -> str:
    """json.dumps(segs, ensure_ascii=False) for segments' dicts ("kind", then "text"), written directly (rows
    make one each)."""
    return "[" + ", ".join(f'{{"kind": {_quoted(s["kind"])}, "text": {_quoted(s["text"])}}}' for s in segs) + "]"


def _spans_json(spans: list[tuple[int, int]]) -> str:
    """json.dumps of the spans as [[start, end], ...], written directly."""
    return "[" + ", ".join(f"[{int(a)}, {int(b)}]" for a, b in spans) + "]"


def match_id(shard: str, line: int, rec: dict, start: int) -> str:
    key = f"{shard}\x1f{line}\x1f{rec['suite']}\x1f{rec['split']}\x1f{rec['instance_index']}\x1f{rec['subject'] or ''}\x1f{start}"
    return hashlib.sha1(key.encode()).hexdigest()[:16]


def segments(tok: Tokenizer, cleaned: str, tokens: np.ndarray, c: Candidate, read=None) -> list[dict]:
    """The matched training text in document order: context, passage, question, answer spans.  ``read``: the
    document's ``tok.span_reader`` (one per document, for its many spans)."""
    read = read or tok.span_reader(cleaned, tokens)
    spans = [("question", c.cluster_start, c.question_end)]
    if c.passage_span:
        spans.append(("passage", *c.passage_span))
    spans += [("answer", s, e) for s, e in c.answer_spans]
    spans.sort(key=lambda x: (x[1], x[2]))
    out = []
    pos = max(0, spans[0][1] - CONTEXT_BEFORE)
    if pos < spans[0][1]:
        out.append({"kind": "context", "text": ("… " if pos > 0 else "") + read(pos, spans[0][1])})
    pos = spans[0][1]
    for kind, s, e in spans:
        s = max(s, pos)
        if e < s:
            continue
        if s > pos:
            gap = s - pos
            if gap > MAX_GAP:
                text = read(pos, pos + MAX_GAP // 2) + " … " + read(s - MAX_GAP // 2, s)
            else:
                text = read(pos, s)
            out.append({"kind": "context", "text": text})
        out.append({"kind": kind, "text": read(s, e + 1)})
        pos = e + 1
    end = min(len(tokens), pos + CONTEXT_AFTER)
    if end > pos:
        out.append({"kind": "context", "text": read(pos, end) + (" …" if end < len(tokens) else "")})
    return [s for s in out if s["text"]]


def _window(cands) -> tuple[int, int]:
    """The tokens every text `segments` reads for these candidates lies in: their spans, with the context around."""
    lo, hi = None, None
    for c in cands:
        spans = [(c.cluster_start, c.question_end), *c.answer_spans] + ([c.passage_span] if c.passage_span else [])
        a, b = min(s for s, _ in spans), max(e for _, e in spans)
        lo, hi = (a, b) if lo is None else (min(lo, a), max(hi, b))
    return lo - CONTEXT_BEFORE, hi + 1 + CONTEXT_AFTER


def _rank(c: Candidate, rec: dict) -> tuple:
    """Which expanded choice of a multiple-choice item a row reports: flagged first, then the
    higher score, then the choice whose answer is found, then the correct choice, then the first."""
    return (c.flagged, c.score, c.a_overlap or 0.0, rec["is_correct"] is True, -(rec["choice_index"] or 0))


def reason_of(c: Candidate, rec: dict) -> str:
    """Why the row was made: a thorough rule's name, else the derived suite's kind, else decon's question+answer."""
    if c.reason:
        return c.reason
    if rec["derived"]:
        return "answer_only" if rec["suite"].endswith("_answer") else "solution_only"
    return "question+answer"


def rows_for_doc(doc: DocumentLike, shard: str, cleaned: str | None, tokens: np.ndarray, cands: list[Candidate],
                  ref: Reference, tok: Tokenizer, preset: str, threshold: float) -> list[dict]:
    # ``cleaned`` may be None where ``tok.spans_from_ids``.  One row per (instance, span): of a multiple-choice item's expanded records, keep the best choice.
    best: dict[tuple, tuple[Candidate, dict]] = {}
    for c in cands:
        rec = ref.get(c.record_id)
        key = (rec["suite"], rec["split"], rec["instance_index"], rec["subject"], c.cluster_start)
        prev = best.get(key)
        if prev is None or _rank(c, rec) > _rank(*prev):
            best[key] = (c, rec)
    rows = []
    read = tok.span_reader(cleaned, tokens, *_window(c for c, _ in best.values())) if best else None
    line, doc_id, source, doc_tokens, doc_chars = doc.line, doc.doc_id, doc.source, len(tokens), len(doc.text)
    for c, rec in best.values():
        segs = segments(tok, cleaned, tokens, c, read)
        a_spans, p_span, a_overlap, p_overlap = c.answer_spans, c.passage_span, c.a_overlap, c.p_overlap
        rows.append({
            "match_id": match_id(shard, line, rec, c.cluster_start), "shard": shard, "line": line, "doc_id": doc_id,
            "source": source, "task": rec["task"], "suite": rec["suite"], "split": rec["split"],
            "instance_index": rec["instance_index"], "subject": rec["subject"], "choice_index": rec["choice_index"],
            "is_correct": rec["is_correct"], "record_id": c.record_id, "score": round(c.score, 6),
            "required_score": round(c.required, 6), "flagged": bool(c.flagged),
            "needs_review": bool(rec["derived"] or c.held), "question_overlap": round(c.q_overlap, 6),
            "answer_overlap": None if a_overlap is None else round(a_overlap, 6),
            "passage_overlap": None if p_overlap is None else round(p_overlap, 6),
            "question_start": c.cluster_start, "question_end": c.question_end,
            "answer_start": a_spans[0][0] if a_spans else None, "answer_end": a_spans[-1][1] if a_spans else None,
            "passage_start": p_span[0] if p_span else None, "passage_end": p_span[1] if p_span else None,
            "n_matched_ngrams": c.n_matched, "doc_tokens": doc_tokens, "doc_chars": doc_chars,
            "training_text": " ".join([s["text"] for s in segs]), "training_segments": _segments_json(segs),
            "eval_question": rec["question"], "eval_answer": rec["answer"], "eval_passage": rec["passage"],
            "preset": preset, "contamination_score": round(length_adjusted_score(c.score, c.required, threshold), 6),
            "answer_spans": _spans_json(a_spans) if a_spans else None, "cluster_end": c.cluster_end,
            "reason": reason_of(c, rec), "twins": rec.get("twins"), "evidence": None,
            "via_task": "",
        })
    return rows


MATCH_SCHEMA = {
    "match_id": pl.Utf8, "shard": pl.Utf8, "line": pl.Int32, "doc_id": pl.Utf8, "source": pl.Utf8,
    "task": pl.Utf8, "suite": pl.Utf8, "split": pl.Utf8, "instance_index": pl.Int32, "subject": pl.Utf8,
    "choice_index": pl.Int32, "is_correct": pl.Boolean, "record_id": pl.Int32, "score": pl.Float64,
    "required_score": pl.Float64, "flagged": pl.Boolean, "needs_review": pl.Boolean,
    "question_overlap": pl.Float64, "answer_overlap": pl.Float64, "passage_overlap": pl.Float64,
    "question_start": pl.Int32, "question_end": pl.Int32, "answer_start": pl.Int32, "answer_end": pl.Int32,
    "passage_start": pl.Int32, "passage_end": pl.Int32, "n_matched_ngrams": pl.Int32, "doc_tokens": pl.Int32,
    "doc_chars": pl.Int64, "training_text": pl.Utf8, "training_segments": pl.Utf8, "eval_question": pl.Utf8,
    "eval_answer": pl.Utf8, "eval_passage": pl.Utf8, "preset": pl.Utf8,
    # decon's reported contamination_score (length-adjusted), the answer spans, the cluster's last token
    "contamination_score": pl.Float64, "answer_spans": pl.Utf8, "cluster_end": pl.Int32,
    # beyond decon (thorough): why the row was made (reason_of) and its instance's twins (JSON, overlap.py)
    "reason": pl.Utf8, "twins": pl.Utf8,
    # beyond thorough: what a paraphrase row's verifier matched (JSON, contam_assets/paraphrase/stage.py), else null
    "evidence": pl.Utf8,
    # a translated task's row made from a match of the item it translates names the source task, else ""
    # (store/translated_matches.py)
    "via_task": pl.Utf8,
}


def scan_documents(docs: list[DocumentLike], shard: str, index: NgramIndex, ref: Reference, cfg: DetectConfig,
                   preset: str = "default") -> tuple[list[dict], dict]:
    """Match rows for a batch of documents plus counters (scanned, too_short, tokens, prefiltered).

    With ``cfg.prefilter``, documents the prefilter clears count as scanned, are not
    tokenized (their tokens are not in ``tokens``) and are counted in ``prefiltered``.
    """
    tok = get_tokenizer(cfg.tokenizer)
    rows: list[dict] = []
    counters = Counter()
    docs, encoded, words, skipped = tokenize_batch(docs, cfg, ensure_prefilter(index, ref.records, cfg) if cfg.prefilter else None)
    if cfg.prefilter:
        counters["prefiltered"] += skipped
        counters["scanned"] += skipped
    n_tokens = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    counters["tokens"] += int(n_tokens.sum())
    short = int((n_tokens < cfg.min_doc_tokens).sum())  # decon rule: documents under 10 tokens are not scanned
    counters["too_short"] += short
    counters["scanned"] += len(docs) - short
    for i, cands in enumerate(candidates(index, ref, encoded, words, cfg)):
        if cands:
            rows.extend(rows_for_doc(docs[i], shard, join_words(words[i]), encoded[i], cands, ref, tok, preset, cfg.threshold))
    return rows, counters


def tokenize_batch(docs: list, cfg: DetectConfig, prefilter=None) -> tuple[list, list[np.ndarray], "Words", int]:
    """(documents to scan, their token ids, their cleaned words, documents the prefilter cleared) of a batch.

    Cleaned once, as bytes (text.translate_bytes); with ``prefilter`` (a prefilter.Prefilter) the documents it
    clears are dropped before tokenizing; the words are split out of the bytes only where a row needs them."""
    parts = [translate_bytes(d.text, cfg.clean_options) for d in docs]
    skipped = 0
    if prefilter is not None:  # documents that provably hold no match row are not tokenized (prefilter.py)
        keep = prefilter.must_scan_translated(parts)
        skipped = len(docs) - int(keep.sum())
        kept = np.flatnonzero(keep).tolist()
        docs, parts = [docs[i] for i in kept], [parts[i] for i in kept]
    return docs, get_tokenizer(cfg.tokenizer).encode_translated(parts), Words(parts), skipped


class Words:
    """A batch's cleaned words (text.clean_words), split out of its translated bytes on first use, per document."""

    def __init__(self, parts: list[bytes]):
        self.parts, self.done = parts, {}

    def __len__(self) -> int:
        return len(self.parts)

    def __getitem__(self, i: int) -> list[bytes]:
        w = self.done.get(i)
        if w is None:
            w = self.done[i] = split_translated(self.parts[i])
        return w


def candidates(index: NgramIndex, ref: Reference, encoded: list[np.ndarray], words: list[list[bytes]],
               cfg: DetectConfig, only: np.ndarray | None = None) -> list[list[Candidate]]:
    """Every document's candidates: decon's scan (scan.scan_many), then the thorough rules of ``cfg`` (thorough.finish).

    ``only`` (a bool per record local) lets decon's scan skip work for other records' candidates; the
    caller still filters (with the thorough rules every candidate is made, they look at all of them)."""
    extras = ensure_extras(index, ref.records, cfg)
    budget = mapped_budget()  # a bad value named before the batch is scanned
    gated: dict = {}
    found = scan_many(index, encoded, cfg, extras, gated, only if extras is None else None)
    if extras is not None:
        found = [finish(extras, index, encoded[i], words[i], c, cfg, gated.get(i)) if (c or i in gated) else c
                 for i, c in enumerate(found)]
    index.release_mapped(budget)  # what the batch's lookups mapped of the index, past the budget: back to the page cache
    return found
