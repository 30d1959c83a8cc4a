"""Near-duplicates: copies with words cut or inserted, and copies whose numbers changed (the `near_duplicates` part).

decon matches exact token 5-grams: a question with a fifth of its words cut out keeps
about 0.75 of its overlap and is not flagged; a GSM-Hard-style template (the same
problem with other numbers) is scored like a partial copy.  This stage works on the
normaliser's words (minhash.py) and runs after decon's scan of a document:

1. gate: only documents where some record holds non-hot question n-grams worth
   ``GATE_FLOOR`` of its idf total (scan.scan_many; prefilter.flag_bar lowers the
   prefilter's bar to it, so the prefilter never clears such a document);
2. windows: runs of *rare* masked item shingles (held by at most ``RARE_DF``
   items), hits less than ``GAP`` words apart, at least ``MIN_HITS`` of them; a
   window inside a flagged candidate's span is not looked at;
3. candidates: datasketch's MinHashLSHEnsemble over the masked shingles of every
   indexed item, asked for items that contain the window's
   shingles (containment >= ``ENSEMBLE_THRESHOLD``: a copy with words cut out is
   contained in its item); the item's text here is its question followed by its
   answers (a multiple-choice item's options), as a copy shows them.  MinHash is an
   estimate: a true candidate is lost when its estimated containment falls under the
   threshold, a false one costs a verification and nothing else;
4. verification, exact, on the words of the window widened by ``PAD`` plus the
   question's length (difflib's matching blocks of two words or more, in order):
   *coverage* = share of the question's words aligned, *run* = longest aligned run.
   decon's own candidates (stored or flagged) are verified the same way around their
   span, without the LSH: the n-gram index proposed them already.
   - ``same_template``: masked coverage >= ``TEMPLATE_COVERAGE`` and an aligned number
     differs.  Stored, never flagged nor held; it also unflags a decon match (the hard
     negatives of GSM-Hard stay clean).
   - ``near_duplicate``: coverage >= ``NEAR_COVERAGE``, run >= ``NEAR_RUN`` words, and the
     answer found after the question (as decon asks: a short answer's words within
     ``SHORT_ANSWER_WINDOW`` words, a long answer's shingles at ``ANSWER_SHARE`` within
     max(2 x its length, 100) words, half of a multiple-choice item's options).  Flagged.
"""

from __future__ import annotations

import difflib
import json
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
from contam_assets.detector.overlap import instance_name
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
NEAR_RUN = 6
ANSWER_SHARE = 0.5
SHORT_ANSWER_WORDS = 3
SHORT_ANSWER_WINDOW = 50


@dataclass
class NeardupInstance:
    """One indexed instance: its question and its records (a multiple-choice item's choices)."""

    ids: np.ndarray  # word ids
    masked: np.ndarray  # word ids, numbers masked
    numbers: np.ndarray  # bool per word
    locals: list[int]
    answers: list[np.ndarray]  # word ids of each record's answer (empty: no answer)
    correct: list[bool]
    multiple_choice: bool
    derived: bool = False  # a derived suite's record (`<task>_answer`): checked for other numbers only


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
    """difflib's matching blocks of two word-id sequences, in order; blocks of one word (a shared "the") left out."""
    return [m for m in difflib.SequenceMatcher(None, a.tolist(), b.tolist(), autojunk=False).get_matching_blocks()
            if m.size >= 2 or (m.size and len(a) < 2)]


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
    """One unit per indexed instance (its records: the choices of a multiple-choice item), shingled with its answers."""

    def __init__(self, index: NgramIndex, records: pl.DataFrame, cfg: DetectConfig):
        from datasketch import MinHashLSHEnsemble

        recs = records.filter(pl.col("indexed")).sort("record_id").to_dicts()
        opts = cfg.clean_options
        by_instance: dict[tuple, int] = {}
        self.unit_of = np.full(index.n_records, -1, dtype=np.int64)
        raw: list[tuple[list[bytes], list[int], list[str], list[bool], bool, bool]] = []
        for local, r in enumerate(recs):
            if r["derived"] and not r["suite"].endswith("_answer"):
                continue  # a reference solution: code, whose numbers are no template
            key = (r["suite"], r["split"], r["instance_index"], r["subject"])
            u = by_instance.get(key)
            if u is None:
                u = by_instance[key] = len(raw)
                raw.append((clean_words(r["question"] or "", opts), [], [], [], r["kind"] == "multiple-choice",
                            bool(r["derived"])))
            raw[u][1].append(local)
            raw[u][2].append(r["answer"] or "")
            raw[u][3].append(bool(r["is_correct"]))
            self.unit_of[local] = u
        # beyond decon: every unit's twins in the reference set (reference_overlap), looked for inside its flagged copy
        name_of = {instance_name(*key): u for key, u in by_instance.items()}
        self.twins: dict[int, list[int]] = {}
        for r in recs:
            u = by_instance.get((r["suite"], r["split"], r["instance_index"], r["subject"]))
            if u is not None and u not in self.twins and r.get("twins"):
                self.twins[u] = sorted({name_of[t["instance"]] for t in json.loads(r["twins"])
                                        if t["relation"] != "identical" and t["instance"] in name_of} - {u})
        ids, masked = masked_word_ids([w for w, *_ in raw])
        answer_words = [[clean_words(a, opts) for a in ans] for _, _, ans, _, _, _ in raw]
        flat_answers = masked_word_ids([a for ans in answer_words for a in ans])
        self.units, k = [], 0
        for (words, locals_, _, correct, mc, derived), i, m, ans in zip(raw, ids, masked, answer_words):
            self.units.append(NeardupInstance(i, m, m != i, locals_, flat_answers[0][k : k + len(ans)], correct, mc, derived))
            k += len(ans)
        # what the LSH and the windows look for: a primary item's question and its answers (options), as copies show them
        starts = np.cumsum([0] + [len(a) for a in answer_words])[:-1].tolist()
        primary = [u for u, unit in enumerate(self.units) if not unit.derived]
        whole = [np.concatenate([masked[u]] + flat_answers[1][starts[u] : starts[u] + len(answer_words[u])]) for u in primary]
        sets = shingle_sets(whole)
        self.sets = dict(zip(primary, sets))
        vals, counts = np.unique(np.concatenate(sets) if sets else np.zeros(0, np.uint64), return_counts=True)
        self.rare = vals[counts <= RARE_DF]  # sorted
        self.ensemble = MinHashLSHEnsemble(threshold=ENSEMBLE_THRESHOLD, num_perm=64, num_part=ENSEMBLE_PARTS, m=2)
        self.ensemble.index([(u, mh, len(s)) for u, mh, s in zip(primary, minhashes(sets), sets) if len(s)])

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
        proposed = sorted(self.ensemble.query(minhashes([s])[0], len(s)))
        if not proposed:
            return []
        # containment(s, sets[u]) of every proposed unit at once: its shingles that are in s, counted per unit
        sets = [self.sets[u] for u in proposed]
        unit_of = np.repeat(np.arange(len(proposed)), [len(x) for x in sets])
        shared = np.bincount(unit_of[np.isin(np.concatenate(sets), s)], minlength=len(proposed))
        return [u for u, k in zip(proposed, (shared / len(s)).tolist()) if k >= ENSEMBLE_THRESHOLD]

    def verify(self, u: int, ids: np.ndarray, masked: np.ndarray, lo: int, hi: int) -> Verdict | None:
        """Exact check of unit ``u`` against words[lo:hi] (see the module docstring)."""
        unit = self.units[u]
        lo, hi = max(0, lo), min(len(ids), hi)
        w_ids, w_masked = ids[lo:hi], masked[lo:hi]
        # coverage counts aligned words, so it is at most the share of the question's words the window holds
        present = float(np.isin(unit.masked, w_masked).mean())
        near_possible = present >= NEAR_COVERAGE and float(np.isin(unit.ids, w_ids).mean()) >= NEAR_COVERAGE
        # a template copy misses a number of the question
        if present >= TEMPLATE_COVERAGE and unit.numbers.any():
            blocks = _blocks(unit.masked, w_masked)
            m_cov = sum(b.size for b in blocks) / len(unit.ids)
            # a template copy: the question once numbers are masked, with one of its numbers changed
            changed = any(unit.numbers[b.a + j] and unit.ids[b.a + j] != w_ids[b.b + j] for b in blocks for j in range(b.size))
            if blocks and m_cov >= TEMPLATE_COVERAGE and changed:
                start, end = lo + blocks[0].b, lo + blocks[-1].b + blocks[-1].size - 1
                # beyond decon rule: the item with other numbers is a template copy, never flagged nor held
                return Verdict(u, "same_template", unit.locals[0], start, end, m_cov, None, None)
        if not near_possible or unit.derived:
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

    def _answer(self, unit: NeardupInstance, ids: np.ndarray, after: int):
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
                    cands: list[Candidate], cfg: DetectConfig, tok, present: np.ndarray | None = None) -> list[Candidate]:
    """Candidates after the near-duplicate stage: template copies unflagged, near-duplicates added or flagged.

    ``present``: the non-hot question keys the document holds when it passed the gate (else only decon's
    candidates are verified).  Only an item holding one of them is looked for, so a rescan of some tasks
    (rescan/incremental.py, which looks only at documents holding their keys) finds what a full scan finds.
    One place is one copy: a near-duplicate verdict counts only where no flagged match and no better
    verdict lies (two MMLU items that share a stem and their options, HumanEval's two filter functions).
    """
    counts = tok.word_token_counts(words)
    if int(counts.sum()) != len(tokens):  # the words do not give these tokens (a stale stream): leave the document
        return cands
    off = np.concatenate([[0], np.cumsum(counts)])
    word_of = lambda t: int(np.searchsorted(off, t, side="right") - 1)  # noqa: E731
    ids_l, masked_l = masked_word_ids([words])
    ids, masked = ids_l[0], masked_l[0]

    def check(u: int, ws: int, we: int) -> Verdict | None:
        reach = PAD + len(ndx.units[u].ids)
        return ndx.verify(u, ids, masked, ws - reach, we + reach + 1)

    verdicts: list[tuple[Verdict, Candidate | None]] = []
    covered: list[tuple[int, int]] = []  # word spans of flagged matches
    flagged_at: list[tuple[int, int, int]] = []  # (unit, first word, last word) of every flagged match
    by_unit: dict[int, list[Candidate]] = {}
    for c in cands:  # decon's own candidates first: the n-gram index proposed them, the words decide
        u = int(ndx.unit_of[c.local])
        ws, we = word_of(c.cluster_start), word_of(c.question_end)
        if c.flagged and not c.held and u >= 0:
            flagged_at.append((u, ws, we))
        if u < 0 or (c.flagged and not c.held and not ndx.units[u].numbers.any()):
            if c.flagged and not c.held:
                covered.append((ws, we))  # flagged, and no number to change: nothing to add
            continue
        by_unit.setdefault(u, []).append(c)
        v = check(u, ws, we)
        if v is not None and v.reason == "same_template":
            c.flagged, c.held, c.reason = False, False, "same_template"
        elif c.flagged and not c.held:
            covered.append((ws, we))
        elif v is not None:
            verdicts.append((v, c))
    if present is not None and len(present):
        allowed = set(ndx.unit_of[np.concatenate([index.postings(int(k)) for k in present])].tolist())
        # beyond decon rule: a flagged item's twins are looked for inside its copy, as template copies only
        # (a GSM-Hard item is its GSM8K twin with other numbers; the windows below skip flagged spans)
        spans = [((ws, we), [t]) for u, ws, we in flagged_at for t in ndx.twins.get(u, ()) if t in allowed]
        spans += [((ws, we), None) for ws, we in ndx.windows(masked) if not any(a <= ws and we <= b for a, b in covered)]
        for (ws, we), units in spans:
            for u in units if units is not None else ndx.candidates(masked, ws, we):
                v = check(u, ws, we) if u in allowed else None
                if v is None or (units is not None and v.reason != "same_template"):
                    continue
                t0, t1 = int(off[v.start]), int(off[v.end + 1]) - 1
                same = [c for c in by_unit.get(u, []) if c.cluster_start <= t1 and t0 <= c.question_end]
                if v.reason == "same_template":
                    for c in same:
                        c.flagged, c.held, c.reason = False, False, "same_template"
                    if not same:
                        new = _candidate(v, index, off, cfg)
                        cands.append(new)
                        by_unit.setdefault(u, []).append(new)
                else:
                    verdicts.append((v, same[0] if same else None))
    # near-duplicates, best first: each flags where nothing flagged or better lies
    taken: list[tuple[int, int, float]] = []
    for v, c in sorted(verdicts, key=lambda x: -x[0].coverage):
        if c is not None and c.reason == "same_template":
            continue
        if any(a <= v.end and v.start <= b for a, b in covered):
            continue
        if any(a <= v.end and v.start <= b and cov > v.coverage + 1e-9 for a, b, cov in taken):
            continue
        taken.append((v.start, v.end, v.coverage))
        if c is None:
            cands.append(_candidate(v, index, off, cfg))
        else:
            c.flagged, c.held, c.reason = True, False, "near_duplicate"
    return sorted(cands, key=lambda c: (c.cluster_start, c.record_id))


def _candidate(v: Verdict, index: NgramIndex, off: np.ndarray, cfg: DetectConfig) -> Candidate:
    """A new candidate from a verdict (its spans in tokens: ``off`` is the first token of every word)."""
    c = Candidate(local=v.local, record_id=int(index.record_ids[v.local]), cluster_start=int(off[v.start]),
                  question_end=int(off[v.end + 1]) - 1, n_matched=0, q_overlap=round(v.coverage, 6),
                  a_overlap=v.answer_share,
                  answer_spans=[(int(off[v.answer[0]]), int(off[v.answer[1] + 1]) - 1)] if v.answer else [],
                  required=cfg.threshold, flagged=v.reason == "near_duplicate", question_check=True, reason=v.reason)
    c.score = round(0.75 * v.coverage + 0.25 * (v.answer_share or 0.0), 6) if v.answer else round(v.coverage, 6)
    return c
