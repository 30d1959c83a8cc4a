"""Candidates by meaning: the items' vectors, the gates that choose which documents are embedded
at all, the windows of a document, and exact search (a matrix product in numpy).

Gates, per document, before any embedding: a math item is a candidate only where the document
holds every number of its question, close together (within the longest window the item could be
in), and one of the item's less common words (held by at most ``TOPIC_SHARE`` of the items; a
rewording keeps a few: 98 % of GSM-Plus's "problem understanding" rows keep one), two where the
item has at most ``FEW_NUMBERS`` distinct numbers; a code item where it holds the function's name; any other
item where it holds at least half of the item's rare words, and at least ``MIN_RARE`` (words of at
most ``RARE_SHARE`` of the items).  A document with no candidate item is not tokenized for the embedder.

Windows are runs of whole sentences (and lines), of one to ``MAX_SENTENCES`` sentences, whose
length lies within ``[LENGTH_LOW, LENGTH_HIGH]`` times the item's (question, or question and
answer); each window's vector comes from the document's prefix sums (embed.StaticEmbedder).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import polars as pl

from contam_assets.paraphrase.embed import StaticEmbedder, normalize
from contam_assets.paraphrase.quantities import SOFT, number_positions
from contam_assets.paraphrase.verify import CODE, MATH, Evidence, Item, check

MAX_SENTENCES = 12
LENGTH_LOW, LENGTH_HIGH = 0.5, 2.0
RARE_SHARE = 0.002
TOPIC_SHARE = 0.03  # a math item's words held by at most this share of the items: one must be in the document
FEW_NUMBERS = 2  # an item with this few distinct numbers needs two such words (web documents through the gate: 42 % -> 19 %)
MIN_RARE = 3
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"[a-z][a-z']{3,}")
_CALL = re.compile(r"[a-z_][a-z0-9_]*(?=\s*\()")


@dataclass
class Hit:
    item: int  # position in ParaphraseIndex.records
    start: int  # character span of the window in the document
    end: int
    evidence: Evidence


class ParaphraseIndex:
    """One row per benchmark instance: its question, answer, vectors and gate keys."""

    def __init__(self, records: pl.DataFrame, embedder: StaticEmbedder, min_similarity: float):
        recs = records.filter(pl.col("indexed") & ~pl.col("derived"))
        # one record per instance (a multiple-choice item: its correct choice, else its first)
        recs = (recs.with_columns(pl.col("is_correct").fill_null(False).alias("_c"))
                .sort(["_c", "record_id"], descending=[True, False])
                .unique(["task", "split", "instance_index", "subject"], keep="first", maintain_order=True)
                .sort("record_id").drop("_c"))
        self.records = recs
        self.embedder, self.min_similarity = embedder, min_similarity
        qs, ans = recs["question"].fill_null("").to_list(), recs["answer"].fill_null("").to_list()
        kinds = recs["kind"].fill_null("qa").to_list()
        self.items = [Item.of(k, q, a) for k, q, a in zip(kinds, qs, ans)]
        self.q_vec = embedder.embed(qs)
        self.qa_vec = embedder.embed([q + "\n" + a for q, a in zip(qs, ans)])
        self.q_len = np.array([len(q) for q in qs], dtype=np.int64)
        self.qa_len = np.array([len(q) + 1 + len(a) for q, a in zip(qs, ans)], dtype=np.int64)
        self._gates(qs)

    def _gates(self, qs: list[str]) -> None:
        self.by_number: dict[float, list[int]] = defaultdict(list)
        self.by_word: dict[str, list[int]] = defaultdict(list)
        self.by_call: dict[str, list[int]] = defaultdict(list)  # a code item's function name, matched as `name(`
        self.need = np.zeros(len(self.items), dtype=np.int64)  # keys a document must share with the item
        self.by_topic: dict[str, list[int]] = defaultdict(list)  # a math item's less common words
        self.need_topic = np.zeros(len(self.items), dtype=np.int64)
        words = [set(_WORD.findall(q.lower())) for q in qs]
        df: dict[str, int] = defaultdict(int)
        for ws in words:
            for w in ws:
                df[w] += 1
        rare_max = max(1, int(RARE_SHARE * len(qs)))
        topic_max = max(1, int(TOPIC_SHARE * len(qs)))
        for i, it in enumerate(self.items):
            if it.kind == MATH:
                for v in it.numbers:
                    self.by_number[v].append(i)
                self.need[i] = len(it.numbers)
                topic = [w for w in words[i] if df[w] <= topic_max]
                for w in topic:
                    self.by_topic[w].append(i)
                # few numbers say little: an item with FEW_NUMBERS or fewer needs two such words
                self.need_topic[i] = min(len(topic), 2 if len(it.numbers) <= FEW_NUMBERS else 1)
            elif it.kind == CODE:
                self.by_call[it.signature[0].lower()].append(i)
                self.need[i] = 1
            else:
                rare = [w for w in words[i] if df[w] <= rare_max]
                if len(rare) >= MIN_RARE:
                    for w in rare:
                        self.by_word[w].append(i)
                    self.need[i] = max(MIN_RARE, (len(rare) + 1) // 2)
                else:
                    self.need[i] = 0  # too little to gate on: never a candidate
        self.by_number = {k: np.array(v, dtype=np.int64) for k, v in self.by_number.items()}
        self.by_word = {k: np.array(v, dtype=np.int64) for k, v in self.by_word.items()}
        self.by_call = {k: np.array(v, dtype=np.int64) for k, v in self.by_call.items()}
        self.by_topic = {k: np.array(v, dtype=np.int64) for k, v in self.by_topic.items()}

    def gate(self, text: str) -> tuple[np.ndarray, int, int]:
        """Items this document could hold a rewording of (positions, sorted), and the stretch of
        characters [lo, hi) every window that could hold one of them lies in."""
        occ = [(v, at) for v, at in number_positions(text) if v not in SOFT]
        values = {round(v, 4) for v, _ in occ}
        posts = [self.by_number[v] for v in values if v in self.by_number]
        low = text.lower()
        words = set(_WORD.findall(low))
        posts += [self.by_word[w] for w in words if w in self.by_word]
        if "(" in text:
            posts += [self.by_call[w] for w in set(_CALL.findall(low)) if w in self.by_call]
        if not posts:
            return np.zeros(0, dtype=np.int64), 0, 0
        counts = np.bincount(np.concatenate(posts), minlength=len(self.items))
        ok = (counts >= self.need) & (self.need > 0)
        if not ok.any():
            return np.zeros(0, dtype=np.int64), 0, 0
        topic = [self.by_topic[w] for w in words if w in self.by_topic]
        shared = np.bincount(np.concatenate(topic), minlength=len(self.items)) if topic else np.zeros_like(counts)
        cand = np.flatnonzero(ok & (shared >= self.need_topic))
        if len(cand) == 0:
            return cand, 0, 0
        # a math item's numbers must lie close together: within the longest window it could be in
        seq = [(round(v, 4), at) for v, at in occ]
        keep, lo, hi = [], len(text), 0
        for c in cand.tolist():
            if self.items[c].kind != MATH:
                keep.append(c)
                lo, hi = 0, len(text)
                continue
            span, a, b = min_span(seq, set(self.items[c].numbers))
            reach = LENGTH_HIGH * self.qa_len[c]
            if span <= reach:
                keep.append(c)
                lo, hi = min(lo, max(0, int(b - reach))), max(hi, min(len(text), int(a + reach)))
        return np.array(keep, dtype=np.int64), lo, hi

    def search(self, text: str, only: set[int] | None = None) -> list[Hit]:
        """The verified rewordings in ``text``: at most one hit per item, its best window."""
        cand, lo, hi = self.gate(text)
        if only is not None:
            cand = np.array([c for c in cand if c not in only], dtype=np.int64)
        if len(cand) == 0:
            return []
        # only the stretch the candidates' windows lie in is embedded, from the sentence start before it
        text = text[:hi]
        bounds = sentence_bounds(text)
        bounds = bounds[max(0, int(np.searchsorted(bounds, lo, side="right")) - 1):]
        lo = int(bounds[0])
        sums, tokens = self.embedder.prefix_sums(text[lo:], bounds - lo)
        i, j = windows(bounds)
        w_start, w_end = bounds[i], bounds[j]
        count = tokens[j] - tokens[i]
        # windows no candidate could be in (too short for the shortest, too long for the longest) are left out
        wl = w_end - w_start
        keep = (count > 0) & (wl >= LENGTH_LOW * self.q_len[cand].min()) & (wl <= LENGTH_HIGH * self.qa_len[cand].max())
        i, j, w_start, w_end, count = i[keep], j[keep], w_start[keep], w_end[keep], count[keep]
        if len(i) == 0:
            return []
        vec = normalize((sums[j] - sums[i]) / count[:, None])
        length = (w_end - w_start)[:, None]
        hits: dict[int, Hit] = {}
        for vecs, lens in ((self.q_vec, self.q_len), (self.qa_vec, self.qa_len)):
            todo = np.array([c for c in cand.tolist() if c not in hits], dtype=np.int64)
            if len(todo) == 0:
                break
            sim = vec @ vecs[todo].T
            ratio = length / np.maximum(lens[todo], 1)[None, :]
            sim[(ratio < LENGTH_LOW) | (ratio > LENGTH_HIGH)] = -1.0
            # only items some window comes close to reach the verifier (most documents stop here)
            for col in np.flatnonzero(sim.max(axis=0) >= self.min_similarity).tolist():
                item = int(todo[col])
                top = np.argpartition(-sim[:, col], 3)[:3] if len(i) > 3 else np.arange(len(i))
                for w in sorted(top.tolist(), key=lambda w: -sim[w, col]):
                    s = float(sim[w, col])
                    if s < self.min_similarity:
                        break
                    ev = check(self.items[item], text[w_start[w]:w_end[w]], s, self.min_similarity)
                    if ev is not None:
                        hits[item] = Hit(item, int(w_start[w]), int(w_end[w]), ev)
                        break
        return sorted(hits.values(), key=lambda h: (h.start, h.item))


def min_span(seq: list[tuple[float, int]], values: set) -> tuple[float, int, int]:
    """(length, start, end) of the shortest stretch of characters holding every value of ``values``
    (seq: (value, offset) in order); length inf where some value is missing."""
    need, have, best, lo = len(values), {}, (float("inf"), 0, 0), 0
    pts = [(v, at) for v, at in seq if v in values]
    for hi, (v, at) in enumerate(pts):
        have[v] = have.get(v, 0) + 1
        while len(have) == need:
            if at - pts[lo][1] < best[0]:
                best = (at - pts[lo][1], pts[lo][1], at)
            u = pts[lo][0]
            have[u] -= 1
            if not have[u]:
                del have[u]
            lo += 1
    return best


def sentence_bounds(text: str) -> np.ndarray:
    """Start of every sentence (and line), and the end of the text, as character offsets."""
    starts = [0] + [m.end() for m in _SENTENCE_END.finditer(text)]
    starts = sorted(set(s for s in starts if s < len(text)))
    return np.array(starts + [len(text)], dtype=np.int64)


def windows(bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(i, j) of every run of 1 to MAX_SENTENCES consecutive sentences: the window bounds[i]..bounds[j]."""
    n = len(bounds) - 1
    i = np.repeat(np.arange(n), MAX_SENTENCES)
    j = i + np.tile(np.arange(1, MAX_SENTENCES + 1), n)
    ok = j <= n
    return i[ok], j[ok]
