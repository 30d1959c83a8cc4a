"""Near-duplicates: copies with words cut or inserted, and copies whose numbers changed (the `near_duplicates` part).

decon matches exact token 5-grams: a question with a fifth of its words cut out keeps
about 0.75 of its overlap and is not flagged; a GSM-Hard-style template (the same
problem with other numbers) is scored like a partial copy.  This stage works on the
normaliser's words (minhash.py) and runs after decon's scan of a document:

1. gate: only documents where some record holds non-hot question n-grams worth
   ``GATE_FLOOR`` of its idf total (scan.scan_many; prefilter.flag_bar lowers the
   prefilter's bar to it, so the prefilter never clears such a document);
2. windows: runs of *rare* masked question shingles (held by at most ``RARE_DF``
   questions), hits less than ``GAP`` words apart, at least ``MIN_HITS`` of them; a
   window inside a flagged candidate's span is not looked at;
3. candidates: datasketch's MinHashLSHEnsemble over the masked shingles of every
   distinct indexed question, asked for questions that contain the window's
   shingles (containment >= ``ENSEMBLE_THRESHOLD``: a copy with words cut out is
   contained in its question).  MinHash is an estimate: a true candidate is lost
   when its estimated containment falls under the threshold, a false one costs a
   verification and nothing else;
4. verification, exact, on the words of the window widened by ``PAD`` (difflib's
   matching blocks, in order): *coverage* = share of the question's words aligned,
   *run* = longest aligned run.
   - ``same_template``: masked coverage >= ``TEMPLATE_COVERAGE`` and a number of the
     question missing from the window.  Stored, never flagged nor held; it also unflags a decon match (the
     hard negatives of GSM-Hard stay clean).
   - ``near_duplicate``: coverage >= ``NEAR_COVERAGE``, run >= ``NEAR_RUN`` words, and the
     answer found after the question (as decon asks: a short answer's words within
     ``SHORT_ANSWER_WINDOW`` words, a long answer's shingles at ``ANSWER_SHARE`` within
     max(2 x its length, 100) words, half of a multiple-choice item's options).  Flagged.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

import numpy as np
import polars as pl

from contam_assets.detector.config import DetectConfig
from contam_assets.detector.index import NgramIndex
from contam_assets.detector.minhash import (
    containment,
    masked_word_ids,
    minhashes,
    shingle_hashes,
    shingle_set,
    shingle_sets,
)
from contam_assets.detector.scan import Candidate
from contam_assets.detector.text import clean_words

GATE_FLOOR = 0.3
RARE_DF = 25
GAP = 8
MIN_HITS = 4
PAD = 8
ENSEMBLE_THRESHOLD = 0.5
ENSEMBLE_PARTS = 8
TEMPLATE_COVERAGE = 0.9
NEAR_COVERAGE = 0.55
NEAR_RUN = 8
ANSWER_SHARE = 0.5
SHORT_ANSWER_WORDS = 3
SHORT_ANSWER_WINDOW = 50


@dataclass
class Unit:
    """One distinct indexed question and the records (choices) that share it."""

    ids: np.ndarray  # word ids
    masked: np.ndarray  # word ids, numbers masked
    numbers: np.ndarray  # bool per word
    locals: list[int]
    answers: list[np.ndarray]  # word ids of each record's answer (empty: no answer)
    correct: list[bool]
    multiple_choice: bool


@dataclass
class Verdict:
    unit: int
    reason: str  # near_duplicate | same_template
    local: int
    start: int  # first and last word of the question's copy
    end: int
    coverage: float
    answer: tuple[int, int] | None
    answer_share: float | None


def _blocks(a: np.ndarray, b: np.ndarray) -> list:
    """difflib's matching blocks of two word-id sequences, in order, empty ones left out."""
    return [m for m in difflib.SequenceMatcher(None, a.tolist(), b.tolist(), autojunk=False).get_matching_blocks() if m.size]


def _find_run(hay: np.ndarray, needle: np.ndarray, lo: int, hi: int) -> int:
    """First start s in [lo, hi) with hay[s:s+len(needle)] == needle, or -1."""
    k = len(needle)
    hi = min(hi, len(hay) - k + 1)
    if k == 0 or hi <= lo:
        return -1
    win = np.lib.stride_tricks.sliding_window_view(hay[lo : hi + k - 1], k)
    hit = np.flatnonzero((win == needle).all(axis=1))
    return lo + int(hit[0]) if len(hit) else -1


class NearDupIndex:
    def __init__(self, index: NgramIndex, records: pl.DataFrame, cfg: DetectConfig):
        from datasketch import MinHashLSHEnsemble

        recs = records.filter(pl.col("indexed")).sort("record_id").to_dicts()
        opts = cfg.clean_options
        by_q: dict[str, int] = {}
        self.unit_of = np.full(index.n_records, -1, dtype=np.int64)
        raw: list[tuple[list[bytes], list[int], list[str], list[bool], bool]] = []
        for local, r in enumerate(recs):
            if r["derived"]:
                continue
            q = b" ".join(clean_words(r["question"] or "", opts))
            u = by_q.get(q)
            if u is None:
                u = by_q[q] = len(raw)
                raw.append((q.split(), [], [], [], r["kind"] == "multiple-choice"))
            raw[u][1].append(local)
            raw[u][2].append(r["answer"] or "")
            raw[u][3].append(bool(r["is_correct"]))
            self.unit_of[local] = u
        ids, masked = masked_word_ids([w for w, *_ in raw])
        answer_words = [[clean_words(a, opts) for a in ans] for _, _, ans, _, _ in raw]
        flat_answers = masked_word_ids([a for ans in answer_words for a in ans])[0]
        self.units, k = [], 0
        for (words, locals_, _, correct, mc), i, m, ans in zip(raw, ids, masked, answer_words):
            self.units.append(Unit(i, m, m != i, locals_, flat_answers[k : k + len(ans)], correct, mc))
            k += len(ans)
        sets = self.sets = shingle_sets([u.masked for u in self.units])
        vals, counts = np.unique(np.concatenate(sets) if sets else np.zeros(0, np.uint64), return_counts=True)
        self.rare = vals[counts <= RARE_DF]  # sorted
        self.ensemble = MinHashLSHEnsemble(threshold=ENSEMBLE_THRESHOLD, num_perm=64, num_part=ENSEMBLE_PARTS, m=2)
        self.ensemble.index([(u, mh, max(1, len(s))) for u, (mh, s) in enumerate(zip(minhashes(sets), sets)) if len(s)])

    # -- document side -------------------------------------------------------------
    def windows(self, masked: np.ndarray) -> list[tuple[int, int]]:
        """[first, last] word of every run of rare masked shingles."""
        h = shingle_hashes(masked)
        if not len(h) or not len(self.rare):
            return []
        pos = np.minimum(np.searchsorted(self.rare, h), len(self.rare) - 1)
        hits = np.flatnonzero(self.rare[pos] == h)
        out = []
        if len(hits):
            cuts = np.flatnonzero(np.diff(hits) > GAP) + 1
            for run in np.split(hits, cuts):
                if len(run) >= MIN_HITS:
                    out.append((int(run[0]), int(run[-1]) + min(3, len(masked)) - 1))
        return out

    def candidates(self, masked: np.ndarray, start: int, end: int) -> list[int]:
        """Units whose masked shingles contain (by MinHash estimate) those of words[start:end+1]."""
        s = shingle_set(masked[start : end + 1])
        if not len(s):
            return []
        # the LSH proposes, the exact containment of the window's shingles in the question's decides
        return [u for u in sorted(self.ensemble.query(minhashes([s])[0], len(s)))
                if containment(s, self.sets[u]) >= ENSEMBLE_THRESHOLD]

    def verify(self, u: int, ids: np.ndarray, masked: np.ndarray, lo: int, hi: int) -> Verdict | None:
        """Exact check of unit ``u`` against words[lo:hi] (see the module docstring)."""
        unit = self.units[u]
        lo, hi = max(0, lo), min(len(ids), hi)
        w_ids, w_masked = ids[lo:hi], masked[lo:hi]
        # coverage counts aligned words, so it is at most the share of the question's words the window holds
        present = float(np.isin(unit.masked, w_masked).mean())
        near_possible = present >= NEAR_COVERAGE and float(np.isin(unit.ids, w_ids).mean()) >= NEAR_COVERAGE
        # a template copy misses a number of the question
        template_possible = present >= TEMPLATE_COVERAGE and not np.isin(unit.ids[unit.numbers], w_ids).all()
        if template_possible:
            blocks = _blocks(unit.masked, w_masked)
            m_cov = sum(b.size for b in blocks) / len(unit.ids)
            if m_cov >= TEMPLATE_COVERAGE:
                start, end = lo + blocks[0].b, lo + blocks[-1].b + blocks[-1].size - 1
                # beyond decon rule: the item with other numbers is a template copy, never flagged nor held
                return Verdict(u, "same_template", unit.locals[0], start, end, m_cov, None, None)
        if not near_possible:
            return None
        plain = _blocks(unit.ids, w_ids)
        cov = sum(b.size for b in plain) / len(unit.ids)
        if not plain or cov < NEAR_COVERAGE or max(b.size for b in plain) < NEAR_RUN:
            return None
        start, end = lo + plain[0].b, lo + plain[-1].b + plain[-1].size - 1
        found = self._answer(unit, ids, end + 1)
        if found is None:
            return None
        local, span, share = found
        # beyond decon rule: most of the question in order, a long exact run and the answer after it
        return Verdict(u, "near_duplicate", local, start, end, cov, span, share)

    def _answer(self, unit: Unit, ids: np.ndarray, after: int):
        """(record, answer word span or None, share) when the unit's answer follows ``after``; None when absent."""
        if unit.multiple_choice:
            found = []
            reach = after + SHORT_ANSWER_WINDOW + sum(len(a) for a in unit.answers)
            for local, a, ok in zip(unit.locals, unit.answers, unit.correct):
                s = _find_run(ids, a, after, reach)
                if s >= 0:
                    found.append((not ok, s, local, len(a)))
            if 2 * len(found) < len(unit.answers) or not found:
                return None
            _, s, local, k = min(found)
            return local, (s, s + k - 1), len(found) / len(unit.answers)
        a = unit.answers[0]
        if len(a) == 0:
            return unit.locals[0], None, None  # a question-only record: the question is the evidence
        if len(a) <= SHORT_ANSWER_WORDS:
            s = _find_run(ids, a, after, after + SHORT_ANSWER_WINDOW)
            return (unit.locals[0], (s, s + len(a) - 1), 1.0) if s >= 0 else None
        window = ids[after : after + max(2 * len(a), 100)]
        share = containment(shingle_set(a), shingle_set(window))
        if share < ANSWER_SHARE:
            return None
        return unit.locals[0], (after, min(len(ids), after + max(2 * len(a), 100)) - 1), share


def near_duplicates(ndx: NearDupIndex, index: NgramIndex, tokens: np.ndarray, words: list[bytes],
                    cands: list[Candidate], cfg: DetectConfig, tok) -> list[Candidate]:
    """Candidates after the near-duplicate stage: template copies unflagged, near-duplicates added or flagged."""
    counts = tok.word_token_counts(words)
    if int(counts.sum()) != len(tokens):  # the words do not give these tokens (a stale stream): leave the document
        return cands
    off = np.concatenate([[0], np.cumsum(counts)])
    word_of = lambda t: int(np.searchsorted(off, t, side="right") - 1)  # noqa: E731
    ids_l, masked_l = masked_word_ids([words])
    ids, masked = ids_l[0], masked_l[0]
    by_unit: dict[int, list[Candidate]] = {}
    for c in cands:
        u = int(ndx.unit_of[c.local])
        if u >= 0:
            by_unit.setdefault(u, []).append(c)
    covered: list[tuple[int, int]] = []
    # decon's flagged matches of questions with numbers: is the copy a template with other numbers?
    for u, cs in by_unit.items():
        for c in cs:
            if not c.flagged:
                continue
            ws, we = word_of(c.cluster_start), word_of(c.question_end)
            v = ndx.verify(u, ids, masked, ws - PAD, we + PAD + 1) if ndx.units[u].numbers.any() else None
            if v is not None and v.reason == "same_template":
                c.flagged, c.reason = False, "same_template"
            else:
                covered.append((ws, we))
    out = list(cands)
    for ws, we in ndx.windows(masked):
        if any(a <= ws and we <= b for a, b in covered):
            continue
        for u in ndx.candidates(masked, ws, we):
            v = ndx.verify(u, ids, masked, ws - PAD, we + PAD + 1)
            if v is None:
                continue
            t0, t1 = int(off[v.start]), int(off[v.end + 1]) - 1
            same = [c for c in by_unit.get(u, []) if c.cluster_start <= t1 and t0 <= c.question_end]
            if same:
                for c in same:
                    if v.reason == "same_template":
                        c.flagged, c.reason = False, "same_template"
                    elif not c.flagged:
                        c.flagged, c.held, c.reason = True, False, "near_duplicate"
                continue
            c = Candidate(local=v.local, record_id=int(index.record_ids[v.local]), cluster_start=t0, question_end=t1,
                          n_matched=0, q_overlap=round(v.coverage, 6), a_overlap=v.answer_share,
                          answer_spans=[(int(off[v.answer[0]]), int(off[v.answer[1] + 1]) - 1)] if v.answer else [],
                          required=cfg.threshold, flagged=v.reason == "near_duplicate", question_check=True,
                          reason=v.reason)
            c.score = round(0.75 * v.coverage + 0.25 * (v.answer_share or 0.0), 6) if v.answer else v.coverage
            out.append(c)
            by_unit.setdefault(u, []).append(c)
            if c.flagged:
                covered.append((v.start, v.end))
    return sorted(out, key=lambda c: (c.cluster_start, c.record_id))
