"""Candidates by meaning: the items' vectors, the gates that choose which documents are embedded
at all, the windows of a document, and exact search (a matrix product in numpy).

Gates, per document, before any embedding: a math item is a candidate only where the document
holds every number of its question, close together (within the longest window the item could be
in) and with no number between them that neither its question nor its solution holds (the verifier
refuses such a window; nor in a stretch between two such numbers shorter than the item's shortest window), in a run
of the document's numbers that holds each of them exactly as often as the question (``exact_run``: a number seen
more often is a new one to the verifier; code repeats GSM8K's small numbers), and one
of the item's less common words (held by at most ``TOPIC_SHARE`` of the items; a
rewording keeps a few: 98 % of GSM-Plus's "problem understanding" rows keep one), two where the
item has at most ``FEW_NUMBERS`` distinct numbers; a code item where it holds the function's signature
(``def name(params)``, which the signature rule needs), or
(paraphrase_kinds ``code``) its less common words and example values close together; a multiple-choice
item (paraphrase_kinds ``mc``) where it holds its less common content words close together
(``WordGate``); any other item where it holds at least half
of the item's rare words, and at least ``MIN_RARE`` (words of at most ``RARE_SHARE`` of the items).  A
document with no candidate item is not tokenized for the embedder; one whose candidates came through a
word gate alone is embedded only around the words that let them through; a multiple-choice item whose document
lacks the words the verifier asks of any window of it (``verify.mc_may_hold``: a window's words are some of its
document's) is left out before then, the stretch embedded staying what the gates gave.  The gates take a batch of documents
at once (``gates``, ``search_many``): its content words in one numpy pass (``DocStems``), one sparse product per
word gate; each document gets what it would alone.

Windows are runs of whole sentences (and lines), of one to ``MAX_SENTENCES`` sentences, whose
length lies within ``[LENGTH_LOW, LENGTH_HIGH]`` times the item's (question, or question and
answer); each window's vector comes from the document's prefix sums (embed.StaticEmbedder).  A window's
similarity to each candidate is first taken from the sums at the sentence bounds (float64); the windows'
own vectors are made, and the float32 similarities the verifier is given, only where one comes within
``SIM_SLACK`` of the bar.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import polars as pl

from contam_assets.paraphrase.embed import StaticEmbedder, normalize
from contam_assets.paraphrase.gates import (
    LENGTH_HIGH,
    LENGTH_LOW,
    DocStems,
    NumberIndex,
    WordGate,
)
from contam_assets.paraphrase.quantities import SOFT, number_positions, signatures, stem_set, word_char
from contam_assets.paraphrase.verify import (
    CODE,
    MATH,
    MC,
    Evidence,
    ItemFacts,
    check,
    mc_lower_bar,
    mc_word_bars,
    mc_words_met,
)

MAX_SENTENCES = 12
RARE_SHARE = 0.002
TOPIC_SHARE = 0.03  # a math item's words held by at most this share of the items: one must be in the document
FEW_NUMBERS = 2  # an item with this few distinct numbers needs two such words (web documents through the gate: 42 % -> 19 %)
MIN_RARE = 3
SIM_SLACK = 1e-3  # a window's similarity from the sums at the bounds (float64) and the verifier's (float32) differ by less
LOSSY = 1e7  # a window's squared norm this many times under its bounds' (float64 keeps about 16 digits): from its own vector
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"[a-z][a-z']{3,}")
# the name after every "def" (quantities.signatures: the rest); the pattern opens with its literal (found in C), the
# \b before it is checked on the match (def_names)
_DEF_NAME = re.compile(r"def\s+(?=([A-Za-z_]\w*))")
FEW_CANDIDATES = 64  # a document with this few items through the gates counts their shared words item by item


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
        # the similarity a window needs to reach the verifier: a multiple-choice item's is lower (verify.mc_lower_bar)
        self.bar = np.where([it.kind == MC for it in self.items], mc_lower_bar(min_similarity), min_similarity).astype(np.float64)
        self.q_vec = embedder.embed(qs)
        self.qa_vec = embedder.embed([q + "\n" + a for q, a in zip(qs, ans)])
        # multiple choice and code: each item a bag of words weighted by rarity among the items of its kind
        self.q_len = np.array([len(q) for q in qs], dtype=np.int64)
        self.qa_len = np.array([len(q) + 1 + len(a) for q, a in zip(qs, ans)], dtype=np.int64)
        self.is_mc = np.array([it.kind == MC for it in self.items], dtype=bool)
        self.mc_bars: dict[int, tuple] = {}  # _mc_bars
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
        self.number_set = [frozenset(it.numbers) for it in self.items]  # a math item's distinct numbers
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
        self.topic_words = [frozenset() for _ in self.items]
        for w, its in self.by_topic.items():
            for i in its:
                self.topic_words[i] |= {w}
        self.call_names = frozenset(name for name, _ in self.by_call)
        self.by_number = {k: np.array(v, dtype=np.int64) for k, v in self.by_number.items()}
        self.by_word = {k: np.array(v, dtype=np.int64) for k, v in self.by_word.items()}
        self.by_call = {k: np.array(v, dtype=np.int64) for k, v in self.by_call.items()}
        self.by_topic = {k: np.array(v, dtype=np.int64) for k, v in self.by_topic.items()}

    def gate(self, text: str) -> tuple[np.ndarray, int, int]:
        """Items this document could hold a rewording of (positions, sorted), and the stretch of
        characters [lo, hi) every window that could hold one of them lies in."""
        return self.gates([text])[0]

    def gates(self, texts: list[str]) -> list[tuple[np.ndarray, int, int]]:
        """``gate`` of each document of a batch: the word gates read the batch's content words in one numpy
        pass (DocStems) and take one sparse product for the whole batch."""
        occs = [[(v, at) for v, at in number_positions(t) if v not in SOFT] for t in texts]
        lows = [t.lower() for t in texts]
        # an item through a word gate: the stretch around its words, per document
        spans: list[dict[int, tuple[int, int]]] = [{} for _ in texts]
        bags = [b for b in self.bags.values() if b.members.size]
        if bags:
            stems = DocStems.of(lows)  # the documents' content words (stems) and their offsets, read once
            for b in bags:
                for d, (cs, los, his) in enumerate(b.candidates(texts, stems, occs)):
                    for c, a, z in zip(cs.tolist(), los.tolist(), his.tolist()):
                        spans[d][c] = (a, z)
        return [self._gate(*args) for args in zip(texts, lows, occs, spans)]

    def _gate(self, text: str, low: str, occ: list, spans: dict[int, tuple[int, int]]) -> tuple[np.ndarray, int, int]:
        """The number, word and name gates of one document, joined with what the word gates let through
        (``spans``); ``occ``: its numbers that are data, with their offsets."""
        values = {round(v, 4) for v, _ in occ}
        posts = [self.by_number[v] for v in values if v in self.by_number]
        words = set(_WORD.findall(low))
        posts += [self.by_word[w] for w in words if w in self.by_word]
        if "def" in text and not self.call_names.isdisjoint(def_names(text)):
            # the signature rule needs the item's own signature in the window (read where one of the names is)
            posts += [self.by_call[s] for s in signatures(text) if s in self.by_call]
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
        cand = np.flatnonzero(ok)
        if len(cand) <= FEW_CANDIDATES:  # the less common words each shares with the document, item by item
            shared = np.array([len(self.topic_words[c] & words) for c in cand.tolist()], dtype=np.int64)
            cand = cand[shared >= self.need_topic[cand]]
        else:
            topic = [self.by_topic[w] for w in words if w in self.by_topic]
            shared = np.bincount(np.concatenate(topic), minlength=len(self.items)) if topic else np.zeros_like(counts)
            cand = np.flatnonzero(ok & (shared >= self.need_topic))
        if len(cand) == 0:
            return cand, 0, 0
        # a math item's numbers must lie close together: within the longest window it could be in
        numbers = NumberIndex([(round(v, 4), at) for v, at in occ])
        keep, lo, hi = [], len(text), 0
        for c in cand.tolist():
            if self.items[c].kind != MATH:
                keep.append(c)
                a, z = spans[c] if c in spans and not keyed[c] else (0, len(text))
                lo, hi = min(lo, a), max(hi, z)
                continue
            # min_span, in the stretches between two numbers the verifier refuses (outside the item's question and
            # solution) that are longer than the shortest window the search looks at for the item
            span, a, b = numbers.span(self.number_set[c], self.allowed[c], LENGTH_LOW * self.q_len[c])
            reach = LENGTH_HIGH * self.qa_len[c]
            if span <= reach and exact_run(numbers, self.items[c].numbers, self.allowed[c], reach):
                keep.append(c)
                lo, hi = min(lo, max(0, int(b - reach))), max(hi, min(len(text), int(a + reach)))
        return np.array(keep, dtype=np.int64), lo, hi

    def _mc_bars(self, item: int) -> tuple:
        """verify.mc_word_bars of a multiple-choice item, made on first use and kept."""
        bars = self.mc_bars.get(item)
        if bars is None:
            bars = self.mc_bars[item] = mc_word_bars(self.items[item], self.bags[MC].weights, self.bags[MC].top)
        return bars

    def search(self, text: str, only: set[int] | None = None) -> list[Hit]:
        """The verified rewordings in ``text``: at most one hit per item, its best window."""
        return self.search_many([text], [only])[0]

    def search_many(self, texts: list[str], skips: list[set[int] | None] | None = None) -> list[list[Hit]]:
        """``search`` of each document of a batch, the gates taken for the whole batch at once (``skips``: per
        document, the items left out, or None)."""
        skips = skips if skips is not None else [None] * len(texts)
        return [self._search(t, g, only) for t, g, only in zip(texts, self.gates(texts), skips)]

    def _search(self, text: str, gated: tuple[np.ndarray, int, int], only: set[int] | None) -> list[Hit]:
        cand, lo, hi = gated
        if only is not None:
            cand = np.array([c for c in cand if c not in only], dtype=np.int64)
        if MC in self.bags and len(cand) and self.is_mc[cand].any():
            # a multiple-choice item whose words the document lacks (verify.mc_may_hold) is left out before anything
            # is embedded; the stretch [lo, hi) stays as the gates gave it (the same windows for the others)
            ws, weights, top = stem_set(text[:hi]), self.bags[MC].weights, self.bags[MC].top
            cand = cand[[not m or mc_words_met(self._mc_bars(c), ws, weights, top)
                         for c, m in zip(cand.tolist(), self.is_mc[cand].tolist())]]
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
        vec = None  # the windows' unit vectors: made only where some item comes close (below)
        # every window's similarity to every candidate, first from the products of the sums at the sentence
        # bounds with the items' vectors (bounds x items, not windows x items x dimensions); in float64, within
        # SIM_SLACK of the float32 figure the verifier is given
        s64 = sums.astype(np.float64)
        size = window_norms(sums, s64, i, j)
        size[size == 0] = np.inf
        length = (w_end - w_start)[:, None]
        hits: dict[int, Hit] = {}
        for vecs, lens in ((self.q_vec, self.q_len), (self.qa_vec, self.qa_len)):
            # an item held under the part's bar (a multiple-choice lower tier) may still find a window over it here
            todo = np.array([c for c in cand.tolist() if c not in hits or _below(hits[c].evidence, self.min_similarity)], dtype=np.int64)
            if len(todo) == 0:
                break
            ratio = length / np.maximum(lens[todo], 1)[None, :]
            off = (ratio < LENGTH_LOW) | (ratio > LENGTH_HIGH)
            # einsum, not BLAS: OpenBLAS wakes its threads for these small products, and their spinning costs
            # more CPU than the products (twice the stage's time on code-heavy text)
            dots = np.einsum("bd,cd->bc", s64, vecs[todo], dtype=np.float64)
            near = (dots[j] - dots[i]) / size[:, None]
            near[off] = -1.0
            if (near.max(axis=0) < self.bar[todo] - SIM_SLACK).all():
                continue  # no window comes close to any of them (most documents stop here)
            if vec is None:
                raw = sums[j] - sums[i]
                vec = normalize(raw / (count[:, None].astype(np.float32) if self.bags else count[:, None]))
            sim = np.einsum("wd,cd->wc", vec, vecs[todo])
            sim[off] = -1.0
            # only items some window comes close to reach the verifier (most documents stop here)
            for col in np.flatnonzero(sim.max(axis=0) >= self.bar[todo]).tolist():
                item = int(todo[col])
                top = np.argpartition(-sim[:, col], 3)[:3] if len(i) > 3 else np.arange(len(i))
                for w in sorted(top.tolist(), key=lambda w: -sim[w, col]):
                    s = float(sim[w, col])
                    if s < self.bar[item]:
                        break
                    it = self.items[item]
                    bag = self.bags.get(it.kind)
                    margin = bag.margin(item, vec[w], s) if it.kind == MC else 1.0
                    ev = check(it, text[w_start[w]:w_end[w]], s, self.min_similarity,
                               bag.weights if bag is not None else None, margin)
                    if ev is not None:
                        if item not in hits or not _below(ev, self.min_similarity):
                            hits[item] = Hit(item, int(w_start[w]), int(w_end[w]), ev)
                        break
        return sorted(hits.values(), key=lambda h: (h.start, h.item))


def _below(ev: Evidence, bar: float) -> bool:
    """Whether ``ev`` was accepted on a bar under ``bar`` (the multiple-choice rule's lower tier, verify.mc_lower_bar)."""
    return ev.extra.get("bar", bar) < bar - 1e-4  # the evidence's bar is rounded to 4 places


def window_norms(sums: np.ndarray, s64: np.ndarray, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """The norm of each window's sum ``sums[j] - sums[i]`` (float64; ``s64``: ``sums`` as float64), from products of
    the sums at its bounds (|s_j - s_i|^2 = |s_j|^2 + |s_i|^2 - 2 s_i.s_j; bounds at most MAX_SENTENCES apart), not
    from the windows' own vectors; where that difference would lose digits (a short window far into a long text),
    from its own vector."""
    sq = np.einsum("bd,bd->b", s64, s64)
    cross = np.zeros((MAX_SENTENCES + 1, len(sums)))
    for k in range(1, min(MAX_SENTENCES, len(sums) - 1) + 1):
        cross[k, :-k] = np.einsum("bd,bd->b", s64[:-k], s64[k:])
    size2 = sq[j] + sq[i] - 2 * cross[j - i, i]
    lossy = sq[i] + sq[j] > LOSSY * size2
    if lossy.any():
        own = sums[j[lossy]] - sums[i[lossy]]
        size2[lossy] = np.einsum("wd,wd->w", own, own, dtype=np.float64)
    return np.sqrt(size2)


def exact_run(numbers: NumberIndex, need: dict, allowed: frozenset, reach: float) -> bool:
    """Whether the document's numbers hold a run, within ``reach`` characters, that holds each of a math item's
    numbers exactly as often as its question (``need``) and no number outside ``allowed``: a window the verifier
    holds has such a run (a number of the question seen more often in it than in the question is a new one)."""
    seq, where = numbers.seq, numbers.where
    for start in sorted(k for v in need for k in where.get(v, ())):
        have: dict = {}
        for k in range(start, len(seq)):  # (not a slice: a copy of the rest for each start)
            v, at = seq[k]
            if v not in allowed or at - seq[start][1] > reach:
                break
            if v in need:
                have[v] = have.get(v, 0) + 1
                if have[v] > need[v]:
                    break
                if len(have) == len(need) and all(have[u] == n for u, n in need.items()):
                    return True
    return False


def def_names(text: str) -> list[str]:
    """The name after every "def" that is a word of its own (``\\bdef\\s+name``)."""
    return [m.group(1) for m in _DEF_NAME.finditer(text) if not m.start() or not word_char(text[m.start() - 1])]


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
