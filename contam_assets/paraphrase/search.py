"""Candidates by meaning: the items' vectors, the gates that choose which documents are embedded
at all, the windows of a document, and exact search (a matrix product in numpy).

Gates, per document, before any embedding: a math item is a candidate only where the document
holds every number of its question, close together (within the longest window the item could be
in) and with no number between them that neither its question nor its solution holds (the verifier
refuses such a window), and one of the item's less common words (held by at most ``TOPIC_SHARE`` of the items; a
rewording keeps a few: 98 % of GSM-Plus's "problem understanding" rows keep one), two where the
item has at most ``FEW_NUMBERS`` distinct numbers; a code item where it holds the function's signature
(``def name(params)``, which the signature rule needs), or
(paraphrase_kinds ``code``) its less common words and example values close together; a multiple-choice
item (paraphrase_kinds ``mc``) where it holds its less common content words close together
(``WordGate``); any other item where it holds at least half
of the item's rare words, and at least ``MIN_RARE`` (words of at most ``RARE_SHARE`` of the items).  A
document with no candidate item is not tokenized for the embedder; one whose candidates came through a
word gate alone is embedded only around the words that let them through.

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
from scipy import sparse

from contam_assets.paraphrase.embed import StaticEmbedder, normalize
from contam_assets.paraphrase.quantities import SOFT, STEM, STEM_WORD, number_positions, signatures, string_positions
from contam_assets.paraphrase.verify import (
    CODE,
    CODE_LITERALS,
    CODE_MIN_LITERALS,
    MATH,
    MC,
    MC_COVER,
    MC_STEM_WEIGHT,
    Evidence,
    ItemFacts,
    check,
)

MAX_SENTENCES = 12
LENGTH_LOW, LENGTH_HIGH = 0.5, 2.0
RARE_SHARE = 0.002
TOPIC_SHARE = 0.03  # a math item's words held by at most this share of the items: one must be in the document
FEW_NUMBERS = 2  # an item with this few distinct numbers needs two such words (web documents through the gate: 42 % -> 19 %)
MIN_RARE = 3
MC_GATE_SHARE = 0.05  # a multiple-choice item's words held by at most this share of those items are its gate keys
MC_RARE_SHARE = 0.01  # ... and one of them held by at most this share
MC_GATE_WEIGHT = 14.0  # the least weight of them a document must hold (and MC_COVER of the item's)
MC_STEP, CODE_STEP = 250, 500  # ... within a stretch of one to two steps (characters)
RARE_MARK = 1e4  # more than any item's keys weigh together
GATE_SPAN = 0.5  # ... and the words reaching that weight within this share of the item's length
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"[a-z][a-z']{3,}")


@dataclass
class Hit:
    item: int  # position in ParaphraseIndex.records
    start: int  # character span of the window in the document
    end: int
    evidence: Evidence


class ParaphraseIndex:
    """One row per benchmark instance: its question, answer, vectors and gate keys."""

    def __init__(self, records: pl.DataFrame, embedder: StaticEmbedder, min_similarity: float,
                 kinds: frozenset = frozenset({MATH})):
        """``kinds``: the rules switched on (paraphrase_kinds): ``MC`` and ``CODE`` add the multiple-choice rule
        and the code-under-other-names rule, each with its ``WordGate``; without them those items take the
        generic and the signature rule."""
        self.kinds = frozenset(kinds)
        key = ["task", "split", "instance_index", "subject"]
        if MC in self.kinds:
            # a multiple-choice item too short for the n-gram index is still an item whose rewording can be verified
            short_mc = (pl.col("skip_reason") == "min_tokens") & (pl.col("kind") == "multiple-choice")
            recs = records.filter((pl.col("indexed") | short_mc.fill_null(False)) & ~pl.col("derived"))
            # a multiple-choice instance's options, in order (one record per option)
            options = {tuple(k): v for *k, v in recs.filter(pl.col("choice_index").is_not_null()).sort("choice_index")
                       .group_by(key).agg(pl.col("answer")).iter_rows()}
        else:
            recs, options = records.filter(pl.col("indexed") & ~pl.col("derived")), {}
        # one record per instance (a multiple-choice item: its correct choice, else its first)
        recs = (recs.with_columns(pl.col("is_correct").fill_null(False).alias("_c"))
                .sort(["_c", "record_id"], descending=[True, False])
                .unique(key, keep="first", maintain_order=True)
                .sort("record_id").drop("_c"))
        self.records = recs
        self.embedder, self.min_similarity = embedder, min_similarity
        qs, ans = recs["question"].fill_null("").to_list(), recs["answer"].fill_null("").to_list()
        kinds = recs["kind"].fill_null("qa").to_list()
        keys = recs.select(key).iter_rows()
        renamed = CODE in self.kinds
        self.items = [ItemFacts.of(k, q, a, options.get(tuple(kk)), renamed) for k, q, a, kk in zip(kinds, qs, ans, keys)]
        self.q_vec = embedder.embed(qs)
        self.qa_vec = embedder.embed([q + "\n" + a for q, a in zip(qs, ans)])
        # multiple choice and code: each item a bag of words weighted by rarity among the items of its kind
        self.q_len = np.array([len(q) for q in qs], dtype=np.int64)
        self.qa_len = np.array([len(q) + 1 + len(a) for q, a in zip(qs, ans)], dtype=np.int64)
        self.bags = {k: WordGate(self.items, k, self.q_vec, self.qa_vec, self.qa_len) for k in (MC, CODE) if k in self.kinds}
        self._gates(qs)

    def _gates(self, qs: list[str]) -> None:
        self.by_number: dict[float, list[int]] = defaultdict(list)
        self.by_word: dict[str, list[int]] = defaultdict(list)
        self.by_call: dict[tuple, list[int]] = defaultdict(list)  # a code item's signature, as `def name(params)`
        self.need = np.zeros(len(self.items), dtype=np.int64)  # keys a document must share with the item
        self.by_topic: dict[str, list[int]] = defaultdict(list)  # a math item's less common words
        self.need_topic = np.zeros(len(self.items), dtype=np.int64)
        # a math item's window holds no number outside its question's and its solution's (verify.check)
        self.allowed: list[frozenset | None] = [None] * len(self.items)
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
                self.allowed[i] = frozenset(round(v, 4) for v in set(it.numbers) | set(it.answer_numbers))
                topic = [w for w in words[i] if df[w] <= topic_max]
                for w in topic:
                    self.by_topic[w].append(i)
                # few numbers say little: an item with FEW_NUMBERS or fewer needs two such words
                self.need_topic[i] = min(len(topic), 2 if len(it.numbers) <= FEW_NUMBERS else 1)
            elif it.kind == CODE:
                self.by_call[it.signature].append(i)
                self.need[i] = 1
            elif it.kind == MC:
                self.need[i] = 0  # the multiple-choice gate (WordGate) alone
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
        if "def" in text:  # the signature rule needs the item's own signature in the window
            posts += [self.by_call[s] for s in signatures(text) if s in self.by_call]
        spans: dict[int, tuple[int, int]] = {}  # an item through a word gate: the stretch around its words
        at_stem: dict[str, list[int]] | None = None  # the document's content words (stems) and their offsets, read once
        for b in self.bags.values():
            if b.members.size:
                if at_stem is None:
                    at_stem = stem_offsets(low)
                for c, a, z in zip(*(x.tolist() for x in b.candidates(text, at_stem, occ))):
                    spans[c] = (a, z)
        bagged = np.array(sorted(spans), dtype=np.int64)
        if not posts:
            if not spans:
                return bagged, 0, 0
            return bagged, min(a for a, _ in spans.values()), max(z for _, z in spans.values())
        counts = np.bincount(np.concatenate(posts), minlength=len(self.items))
        ok = (counts >= self.need) & (self.need > 0)
        keyed = ok.copy()  # through the number, word or name gates: the whole document
        ok[bagged] = True
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
                a, z = spans[c] if c in spans and not keyed[c] else (0, len(text))
                lo, hi = min(lo, a), max(hi, z)
                continue
            span, a, b = min_span(seq, set(self.items[c].numbers), self.allowed[c])
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
        vec = normalize((sums[j] - sums[i]) / (count[:, None].astype(np.float32) if self.bags else count[:, None]))
        length = (w_end - w_start)[:, None]
        hits: dict[int, Hit] = {}
        for vecs, lens in ((self.q_vec, self.q_len), (self.qa_vec, self.qa_len)):
            todo = np.array([c for c in cand.tolist() if c not in hits], dtype=np.int64)
            if len(todo) == 0:
                break
            # einsum, not BLAS: OpenBLAS wakes its threads for these small products, and their spinning costs
            # more CPU than the products (twice the stage's time on code-heavy text)
            sim = np.einsum("wd,cd->wc", vec, vecs[todo])
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
                    it = self.items[item]
                    bag = self.bags.get(it.kind)
                    margin = bag.margin(item, vec[w], s) if it.kind == MC else 1.0
                    ev = check(it, text[w_start[w]:w_end[w]], s, self.min_similarity,
                               bag.weights if bag is not None else None, margin)
                    if ev is not None:
                        hits[item] = Hit(item, int(w_start[w]), int(w_end[w]), ev)
                        break
        return sorted(hits.values(), key=lambda h: (h.start, h.item))


class WordGate:
    """The items of one kind (multiple choice, or code) as bags of content words (code: and the literals of
    its examples), each word weighted by its rarity among them (log of items over items holding it).

    The gate, in three steps, each cheaper than the next is selective: (1) a stretch of the document (``step``
    to twice that in characters) holds at least ``MC_GATE_WEIGHT`` and ``MC_COVER`` of the weight of an item's
    less common words (held by at most ``MC_GATE_SHARE`` of the items), one of them rare (at most
    ``MC_RARE_SHARE``): one sparse product per document; (2) a code item (renamed rule) needs ``CODE_LITERALS``
    of its examples' values and every number of its prompt in the document: an item with fewer than
    ``CODE_MIN_LITERALS`` values is found by its signature only; (3) the words that reach that weight lie within
    ``GATE_SPAN`` of the item's length (question and answer): a rewording restates the item in about its
    own length, a document about the subject spreads the same words over paragraphs.  The stretch of
    characters handed to the embedder is the one around those words.  The margin: a window's similarity to
    the item less its best similarity to any other item of the kind."""

    def __init__(self, items: list, kind: str, q_vec: np.ndarray, qa_vec: np.ndarray, qa_len: np.ndarray):
        self.kind, self.n = kind, len(items)
        self.items, self.qa_len = items, qa_len
        self.step = CODE_STEP if kind == CODE else MC_STEP
        self.members = np.array([i for i, it in enumerate(items) if it.kind == kind], dtype=np.int64)
        self.vec = np.concatenate([q_vec[self.members], qa_vec[self.members]])
        df: dict[str, int] = defaultdict(int)
        for i in self.members.tolist():
            for w in items[i].stems | items[i].option_stems:
                df[w] += 1
        m = max(1, len(self.members))
        self.weights = {w: float(np.log(m / c)) for w, c in df.items()}
        gate_min = np.log(m / max(1, int(MC_GATE_SHARE * m)))
        self.rare = np.log(m / max(1, int(MC_RARE_SHARE * m)))
        by_word: dict[str, list[int]] = defaultdict(list)
        self.need = np.full(len(items), np.inf)
        self.keys: dict[int, frozenset] = {}
        for i in self.members.tolist():
            if kind == CODE and len(items[i].option_stems) < CODE_MIN_LITERALS:
                continue  # the renamed rule cannot hold it: its signature gate alone
            keys = [w for w in items[i].stems if self.weights[w] >= gate_min]
            for w in keys:
                by_word[w].append(i)
            self.keys[i] = frozenset(keys)
            self.need[i] = max(MC_GATE_WEIGHT, MC_COVER * sum(self.weights[w] for w in keys))
        # the keys as a sparse (word x item) matrix of weights, and one of rare keys
        self.words = list(by_word)
        self.word_id = {w: k for k, w in enumerate(self.words)}
        rows = np.concatenate([np.full(len(v), k) for k, v in enumerate(by_word.values())]) if by_word else np.zeros(0, int)
        cols = np.concatenate([np.asarray(v) for v in by_word.values()]) if by_word else np.zeros(0, int)
        wts = np.array([self.weights[w] for w, v in by_word.items() for _ in v])
        shape = (len(by_word), len(items))
        # a rare key adds RARE_MARK: a product's entry is (rare keys) * RARE_MARK + (their weight)
        self.matrix = sparse.csr_matrix((wts + RARE_MARK * (wts >= self.rare), (rows, cols)), shape=shape)
        self.by_word = {k: np.array(v, dtype=np.int64) for k, v in by_word.items()}
        # a key's weight is the same for every item holding it: a rare key is rare for all of them
        self.rare_word = np.array([self.weights[w] >= self.rare for w in self.words], dtype=bool)

    def candidates(self, text: str, at_stem: dict, occ: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(items, lo, hi): the items whose less common words lie close together in the document, and for each
        the stretch of characters its windows could lie in.  ``at_stem``: the offsets of each content word's stem
        (quantities.STEM_WORD on the lower-cased text)."""
        none = np.zeros(0, dtype=np.int64)
        wid = self.word_id
        found = [(at, k) for w, ats in at_stem.items() if (k := wid.get(w)) is not None for at in ats]
        found.sort()  # in the document's order, as weight_span reads them
        lits: list[tuple[int, str]] = []
        if self.kind == CODE:
            lits = [(at, _num_key(v)) for v, at in occ]
            lits += string_positions(text)
            found += [(at, k) for at, w in lits if (k := wid.get(w)) is not None]
        if not found:
            return none, none, none
        at, word = np.array(found, dtype=np.int64).T
        if not self.rare_word[word].any():
            return none, none, none  # an item needs one of its rare keys in the stretch
        bucket = at // self.step
        # stretch c spans buckets c and c + 1: a word counts once per stretch
        pairs = np.unique(np.concatenate([bucket, bucket - 1]) * len(wid) + np.concatenate([word, word]))
        stretch, word_of = pairs // len(wid), pairs % len(wid)
        ok = stretch >= 0
        stretch, word_of = stretch[ok], word_of[ok]
        # only a stretch holding a rare key can let an item through
        ok = np.isin(stretch, stretch[self.rare_word[word_of]])
        stretch, word_of = stretch[ok], word_of[ok]
        stretches, row = np.unique(stretch, return_inverse=True)
        # pairs are sorted by stretch, then word: the rows of a CSR matrix as they are
        indptr = np.zeros(len(stretches) + 1, dtype=np.int64)
        np.cumsum(np.bincount(row, minlength=len(stretches)), out=indptr[1:])
        pick = sparse.csr_matrix((np.ones(len(row)), word_of, indptr), shape=(len(stretches), len(wid)))
        got = (pick @ self.matrix).tocoo()
        hit = (got.data >= RARE_MARK) & (np.mod(got.data, RARE_MARK) >= self.need[got.col])
        cand = np.unique(got.col[hit])
        if len(cand) == 0:
            return none, none, none
        # the words reaching the weight lie close together: within GATE_SPAN of the item's length
        nums = {w for _, w in lits}
        keep, lo, hi = [], [], []
        for c in cand.tolist():
            it = self.items[c]
            if self.kind == CODE and (len(it.option_stems & nums) < CODE_LITERALS * len(it.option_stems)
                                      or any(_num_key(v) not in nums for v in it.numbers)):
                continue  # the examples' values are not in the document
            keys = self.keys[c]
            pts = [(a, self.words[k]) for a, k in found if self.words[k] in keys]
            if self.kind == MC and sum(self.weights[w] for w in {w for _, w in pts} & it.question_stems) < MC_STEM_WEIGHT:
                continue  # the verifier needs that much of the question's own words
            span, a, b = weight_span(pts, self.weights, self.need[c])
            reach = LENGTH_HIGH * self.qa_len[c]
            if span <= GATE_SPAN * self.qa_len[c]:
                keep.append(c)
                lo.append(max(0, int(b - reach)))
                hi.append(min(len(text), int(a + reach)))
        return np.array(keep, dtype=np.int64), np.array(lo, dtype=np.int64), np.array(hi, dtype=np.int64)

    def margin(self, item: int, vec: np.ndarray, similarity: float) -> float:
        """``similarity`` less the window's best similarity to any other item of the kind (its question, or
        its question and answer)."""
        if len(self.members) < 2:
            return 1.0
        sims = np.einsum("nd,d->n", self.vec, vec)  # no BLAS threads (search)
        own = np.flatnonzero(self.members == item)
        sims[own] = -1.0
        sims[own + len(self.members)] = -1.0
        return similarity - float(sims.max())


def stem_offsets(low: str) -> dict[str, list[int]]:
    """The offsets of each content word's stem (quantities.STEM_WORD, cut to STEM letters) in ``low``, lower-cased
    text: the words every word gate reads, found once per document."""
    out: dict[str, list[int]] = defaultdict(list)
    for m in STEM_WORD.finditer(low):
        out[m.group(0).strip("'-")[:STEM]].append(m.start())
    return out


def _num_key(v: float) -> str:
    return "n:" + (str(int(v)) if float(v).is_integer() else str(v))


def weight_span(pts: list[tuple[int, str]], weights: dict, need: float) -> tuple[float, int, int]:
    """(length, start, end) of the shortest stretch of characters whose distinct words (pts: (offset, word) in
    order) weigh at least ``need``; length inf where they never do."""
    have: dict[str, int] = {}
    best, lo, total = (float("inf"), 0, 0), 0, 0.0
    for at, w in pts:
        have[w] = have.get(w, 0) + 1
        if have[w] == 1:
            total += weights[w]
        while total >= need:
            start, u = pts[lo]
            if at - start < best[0]:
                best = (at - start, start, at)
            have[u] -= 1
            if not have[u]:
                del have[u]
                total -= weights[u]
            lo += 1
    return best


def min_span(seq: list[tuple[float, int]], values: set, allowed: frozenset | None = None) -> tuple[float, int, int]:
    """(length, start, end) of the shortest stretch of characters holding every value of ``values``
    (seq: (value, offset) in order) and no value outside ``allowed`` (None: any); length inf where there is none."""
    need, have, best, lo = len(values), {}, (float("inf"), 0, 0), 0
    pts: list[tuple[float, int]] = []
    for v, at in seq:
        if v in values:
            pts.append((v, at))
        elif allowed is not None and v not in allowed:  # a stretch past this value holds another problem's number
            have, pts, lo = {}, [], 0
            continue
        else:
            continue
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
