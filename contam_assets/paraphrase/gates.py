"""The word gates of the paraphrase search: which documents of a batch hold an item's less common words (and,
for code, its example values) close together, before anything is embedded.

``DocStems`` finds a batch's content words in one numpy pass (a word is its first ``STEM`` letters, packed
into an integer key); ``WordGate`` holds the items' gate keys as a sparse matrix and does one sparse product
per batch (code); for multiple choice it first pairs each document with the items whose rarest stem words it
holds (one small sparse product) and weighs the stretches of those pairs alone; ``weight_span`` and ``min_span``
find the shortest stretch of a document that holds enough of an item's weight or every one of its numbers
(``NumberIndex`` gives ``min_span`` from the offsets of the item's own numbers alone, in the stretches between
two other numbers long enough for a window).  Each document gets what it would get alone.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from contam_assets.paraphrase.quantities import STEM, STEM_WORD, string_positions
from contam_assets.paraphrase.verify import (
    CODE,
    CODE_LITERALS,
    CODE_MIN_LITERALS,
    MC,
    MC_COVER,
    MC_RARE_KEYS,
    MC_STEM_COVER,
    MC_STEM_WEIGHT,
    mc_word_bars,
)

LENGTH_LOW, LENGTH_HIGH = 0.5, 2.0  # a window's length, in times the item's (question, or question and answer)
MC_GATE_SHARE = 0.05  # a multiple-choice item's words held by at most this share of those items are its gate keys
MC_RARE_SHARE = 0.01  # ... and one of them held by at most this share
MC_GATE_WEIGHT = 12.0  # the least weight of them a document must hold (and MC_COVER of the item's) ...
MC_GATE_MIN = 8.0  # ... or, less, what its stem's MC_RARE_KEYS rarest keys weigh, not under this
CODE_GATE_WEIGHT = 14.0  # a code item's least weight of words and values (and MC_COVER of the item's)
MC_STEP, CODE_STEP = 250, 500  # ... within a stretch of one to two steps (characters)
GATE_SPAN = 0.5  # ... and the words reaching that weight within this share of the item's length
MC_SPAN_MIN = 100  # ... or, for a multiple-choice item, within this many characters (a rewording lengthens a short stem)
NEED_SLACK = 1e-6  # a stretch's weight, summed in floating point, may fall this short of the item's need
RARE_MARK = 1e4  # more than any item's keys weigh together
STEM_CHUNK = 1 << 22  # DocStems reads a batch this many characters at a time
PRESENT_MAX = 1 << 25  # a batch's (document, key) table of this many entries at most (bytes)
SLOTS_MAX = 1 << 22  # WordGate._through counts in a slot per stretch of each pair up to this many slots


class WordGate:
    """The items of one kind (multiple choice, or code) as bags of content words (code: and the literals of
    its examples), each word weighted by its rarity among them (log of items over items holding it).

    The gate, in three steps, each cheaper than the next is selective: (1) a stretch of the document (``step``
    to twice that in characters) holds at least ``MC_GATE_WEIGHT`` (or what its stem's ``MC_RARE_KEYS`` rarest
    keys weigh, not under ``MC_GATE_MIN``; code: ``CODE_GATE_WEIGHT``) and ``MC_COVER`` of the weight of an item's
    less common words (held by at most ``MC_GATE_SHARE`` of the items), one of them rare (at most
    ``MC_RARE_SHARE``): one sparse product per batch (multiple choice: for the items whose document holds one of
    the stem's ``MC_RAREST`` rarest words, which the verifier asks of every window, their stretches weighed pair
    by pair); (2) a code item (renamed rule) needs ``CODE_LITERALS``
    of its examples' values and every number of its prompt in the document: an item with fewer than
    ``CODE_MIN_LITERALS`` values is found by its signature only; (3) the words that reach that weight lie within
    ``GATE_SPAN`` of the item's length (question and answer; multiple choice: or ``MC_SPAN_MIN`` characters): a rewording restates the item in about its
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
        self.top = max(self.weights.values(), default=1.0)  # the verifier's weight of a word no item holds
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
            floor, share = CODE_GATE_WEIGHT, MC_COVER * sum(self.weights[w] for w in keys)
            if kind == MC:  # a short stem has little weight to give: its rarest words, as the verifier asks
                own = sorted((self.weights[w] for w in keys if w in items[i].question_stems), reverse=True)
                floor = min(MC_GATE_WEIGHT, max(MC_GATE_MIN, sum(own[:MC_RARE_KEYS])))
                share = min(share, MC_STEM_COVER * sum(own))
            self.need[i] = max(floor, share)
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
        # the keys that are stems (not literals), by their integer form (stem_key), sorted: a batch's stems are
        # looked up in one searchsorted
        stem_of = sorted((stem_key(w), k) for k, w in enumerate(self.words) if is_stem(w))
        self.stem_keys = np.array([x for x, _ in stem_of], dtype=np.int64)
        self.stem_ids = np.array([k for _, k in stem_of], dtype=np.int64)
        self.key_ids = {i: np.array(sorted(self.word_id[w] for w in ks), dtype=np.int64) for i, ks in self.keys.items()}
        # (item, key) pairs as sorted codes item * len(words) + word: all of them, and those of the question's own words
        n_w = len(self.words)
        self.item_word = np.array(sorted(i * n_w + self.word_id[w] for i, ks in self.keys.items() for w in ks), dtype=np.int64)
        self.item_qword = np.array(sorted(i * n_w + self.word_id[w] for i, ks in self.keys.items()
                                          for w in ks & items[i].question_stems), dtype=np.int64)
        self.word_weight = np.array([self.weights[w] for w in self.words], dtype=np.float64)
        # each item's keys (CSR: key_list[key_ptr[i]:key_ptr[i + 1]])
        self.key_ptr = np.zeros(len(items) + 1, dtype=np.int64)
        for i, ks in self.key_ids.items():
            self.key_ptr[i + 1] = len(ks)
        self.key_ptr = np.cumsum(self.key_ptr)
        self.key_list = np.concatenate([self.key_ids.get(i, np.zeros(0, np.int64)) for i in range(len(items))] or [[]]).astype(np.int64)
        # (word x item): a multiple-choice item's MC_RAREST rarest stem words (verify.mc_word_bars); where one of
        # them is not a key (a document holding it is not seen here), all of its keys
        lead: list[tuple[int, int]] = []
        for i in self.keys if kind == MC else ():
            ws = mc_word_bars(items[i], self.weights, self.top)[0]
            ids = self.key_ids[i].tolist() if any(w not in self.word_id for w in ws) else [self.word_id[w] for w in ws]
            lead += [(k, i) for k in ids]
        r, c = np.array(lead, dtype=np.int64).reshape(-1, 2).T
        self.lead = sparse.csr_matrix((np.ones(len(r)), (r, c)), shape=(len(self.words), len(items)))
        # the keys that are numbers (_num_key), by value: a document's numbers are looked up without their keys
        self.num_id = {float(w[2:]): k for k, w in enumerate(self.words) if w.startswith("n:") and _num_key(float(w[2:])) == w}

    def candidates(self, texts: list[str], stems: "DocStems", occs: list[list]) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per document of a batch, (items, lo, hi): the items whose less common words lie close together in the
        document, and for each the stretch of characters its windows could lie in.  ``stems``: the batch's content
        words (DocStems of the lower-cased texts); ``occs``: each document's numbers that are data, with offsets."""
        none = np.zeros(0, dtype=np.int64)
        out: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = [(none, none, none)] * len(texts)
        wid = self.word_id
        # the batch's stems that are keys of this gate, as (document, offset, word)
        j = np.minimum(np.searchsorted(self.stem_keys, stems.key), max(0, len(self.stem_keys) - 1))
        hit = self.stem_keys[j] == stems.key if len(self.stem_keys) else np.zeros(len(stems.key), dtype=bool)
        doc, at, word = stems.doc[hit], stems.at[hit], self.stem_ids[j[hit]]
        if self.kind == CODE:  # and the literals of the examples that are keys: numbers (by value) and strings
            extra, num_id = [], self.num_id
            for d, (text, occ) in enumerate(zip(texts, occs)):
                extra += [(d, a, k) for v, a in occ if (k := num_id.get(v)) is not None]
                extra += [(d, a, k) for a, w in string_positions(text) if (k := wid.get(w)) is not None]
            if extra:
                d_, a_, k_ = np.array(extra, dtype=np.int64).T
                doc, at, word = np.concatenate([doc, d_]), np.concatenate([at, a_]), np.concatenate([word, k_])
        if len(doc) == 0:
            return out
        if self.kind == CODE and extra:  # in each document's order (offset, then word), as weight_span reads them
            order = np.lexsort((word, at, doc))  # (DocStems gives the stems in that order, one at an offset)
            doc, at, word = doc[order], at[order], word[order]
        # a document needs one of an item's rare keys (in the stretch, below)
        rare_doc = np.zeros(len(texts), dtype=bool)
        rare_doc[doc[self.rare_word[word]]] = True
        if not rare_doc.any():
            return out
        keep = rare_doc[doc]
        doc, at, word = doc[keep], at[keep], word[keep]
        if self.kind == MC:
            found = self._through(len(texts), doc, at, word)
        else:
            found = self._product(doc, at, word)
        if len(found) == 0:
            return out
        for d, cand, lo, hi in self._near(found // self.n, found % self.n, texts, doc, at, word, occs):
            out[d] = (cand, lo, hi)
        return out

    def _product(self, doc: np.ndarray, at: np.ndarray, word: np.ndarray) -> np.ndarray:
        """The (document, item) pairs (as document * n + item, sorted) of the gate's step (1): one sparse product
        of the batch's stretches (those holding a rare key) with the keys' matrix."""
        wid = self.word_id
        bucket = at // self.step
        n_words, per_doc = len(wid), int(bucket.max()) + 1
        # stretch c of a document spans buckets c and c + 1: a word counts once per stretch; a row per
        # (document, stretch) of the batch, numbered document * per_doc + stretch
        stretch, d2, w2 = np.concatenate([bucket, bucket - 1]), np.concatenate([doc, doc]), np.concatenate([word, word])
        ok = stretch >= 0
        pairs = np.unique((d2[ok] * per_doc + stretch[ok]) * n_words + w2[ok])
        row_of, word_of = pairs // n_words, pairs % n_words
        # pairs are sorted by row, then word: each row's run of pairs is a row of a CSR matrix as it is; only a
        # stretch holding a rare key can let an item through
        start = np.flatnonzero(np.concatenate(([True], row_of[1:] != row_of[:-1])))
        rare_row = np.logical_or.reduceat(self.rare_word[word_of], start)
        size = np.diff(np.append(start, len(pairs)))
        rows, word_of = row_of[start[rare_row]], word_of[np.repeat(rare_row, size)]
        indptr = np.concatenate(([0], np.cumsum(size[rare_row])))
        pick = sparse.csr_matrix((np.ones(len(word_of)), word_of, indptr), shape=(len(rows), n_words))
        got = pick @ self.matrix
        # the entries with a rare key first (a compare), then their weight (read in place: no COO copy)
        at_rare = np.flatnonzero(got.data >= RARE_MARK)
        col = got.indices[at_rare]
        hit = at_rare[np.mod(got.data[at_rare], RARE_MARK) >= self.need[col] - NEED_SLACK]
        row_hit = np.searchsorted(got.indptr, hit, side="right") - 1
        return np.unique(rows[row_hit] // per_doc * self.n + got.indices[hit])  # (document, item), in order

    def _through(self, n_docs: int, doc: np.ndarray, at: np.ndarray, word: np.ndarray) -> np.ndarray:
        """``_product``'s pairs of a multiple-choice item whose document holds one of its ``MC_RAREST`` rarest
        stem words (verify.mc_words_met's first test: every window the verifier holds has one), read pair by pair:
        the documents' (``lead``, one small sparse product), then each stretch's weight of the item's own keys."""
        n_w = len(self.words)
        bucket = at // self.step
        n_st = np.zeros(n_docs, dtype=np.int64)  # each document's stretches: c spans buckets c and c + 1
        np.maximum.at(n_st, doc, bucket + 1)
        per = int(n_st.max())
        stretch, d2, w2 = np.concatenate([bucket, bucket - 1]), np.concatenate([doc, doc]), np.concatenate([word, word])
        ok = stretch >= 0
        trip = np.unique((d2[ok] * n_w + w2[ok]) * per + stretch[ok])  # (document, key, stretch), each once
        dk = trip // per
        start = np.flatnonzero(np.concatenate(([True], dk[1:] != dk[:-1])))
        have, end = dk[start], np.append(start[1:], len(dk))  # (document, key) pairs; their stretches
        by_doc = np.searchsorted(have // n_w, np.arange(n_docs + 1))
        pairs = sparse.csr_matrix((np.ones(len(have)), have % n_w, by_doc), shape=(n_docs, n_w)) @ self.lead
        p_doc = np.repeat(np.arange(n_docs), np.diff(pairs.indptr))
        p_item = pairs.indices.astype(np.int64)
        # every key of each pair's item that its document holds (a table of the batch's (document, key) pairs)
        n_keys = self.key_ptr[p_item + 1] - self.key_ptr[p_item]
        pk = np.repeat(np.arange(len(p_item)), n_keys)
        want = p_doc[pk] * n_w + self.key_list[_ranges(self.key_ptr[p_item], n_keys)]
        if n_docs * n_w <= PRESENT_MAX:
            present = np.zeros(n_docs * n_w, dtype=bool)
            present[have] = True
            pk, want = pk[present[want]], want[present[want]]
        j = np.minimum(np.searchsorted(have, want), max(0, len(have) - 1))
        mine = have[j] == want if len(have) else np.zeros(len(want), dtype=bool)
        pk, j = pk[mine], j[mine]
        count = end[j] - start[j]
        at3 = trip[_ranges(start[j], count)]
        pk = np.repeat(pk, count)
        # the weight of each (pair, stretch) and whether it holds a rare key: a slot per stretch of each pair's
        # document, or (long documents) per (pair, stretch) met
        size = n_st[p_doc]
        base = np.concatenate(([0], np.cumsum(size)))
        w = at3 // per % n_w
        if base[-1] <= max(SLOTS_MAX, 4 * len(at3)):
            slot, owner = base[pk] + at3 % per, np.repeat(np.arange(len(p_item)), size)
        else:
            met, slot = np.unique(pk * per + at3 % per, return_inverse=True)
            owner = met // per
        weight = np.bincount(slot, weights=self.word_weight[w], minlength=len(owner))
        rare = np.bincount(slot, weights=self.rare_word[w], minlength=len(owner)) > 0
        hit = np.unique(owner[rare & (weight >= self.need[p_item[owner]] - NEED_SLACK)])
        return np.sort(p_doc[hit] * self.n + p_item[hit])  # (document, item), in order

    def _near(self, docs: np.ndarray, items: np.ndarray, texts: list[str], doc: np.ndarray, at: np.ndarray,
              word: np.ndarray, occs: list[list]) -> list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
        """Of the (document, item) pairs through the sparse step (``docs``, ``items``, sorted; the batch's keys:
        ``doc``, ``at``, ``word``, in each document's order; ``occs``: each document's numbers), those whose words
        reaching the weight lie close together: within GATE_SPAN of the item's length; per document, (document, items,
        lo, hi): the items and the stretch of characters around their words."""
        first = np.searchsorted(doc, np.arange(len(texts) + 1))  # each document's keys: first[d]:first[d + 1]
        # every pair with every key of its document, and which of those keys are the item's (all pairs at once)
        count = first[docs + 1] - first[docs]
        end = np.cumsum(count)
        pair = np.repeat(np.arange(len(docs)), count)
        take = np.repeat(first[docs] - (end - count), count) + np.arange(int(end[-1]) if len(end) else 0)
        code = items[pair] * len(self.words) + word[take]
        mine = _member(self.item_word, code)
        pair, take, code = pair[mine], take[mine], code[mine]
        ok = np.ones(len(docs), dtype=bool)
        if self.kind == MC:  # the verifier needs MC_STEM_WEIGHT of the question's own words
            q = _member(self.item_qword, code)
            own = np.unique(pair[q] * len(self.words) + word[take[q]])  # each pair's distinct words of its question
            got = np.bincount(own // len(self.words), weights=self.word_weight[own % len(self.words)], minlength=len(docs))
            ok = got >= MC_STEM_WEIGHT
        bounds = np.searchsorted(pair, np.arange(len(docs) + 1))
        at_l, word_l = at[take].tolist(), word[take].tolist()
        weights, out, d_prev = self.word_weight.tolist(), [], -1
        for k, (d, c) in enumerate(zip(docs.tolist(), items.tolist())):
            if d != d_prev:
                out.append((d, [], [], []))
                d_prev = d
                if self.kind == CODE:  # the document's literals, numbers and strings (read for these documents alone)
                    nums = {_num_key(v) for v, _ in occs[d]} | {w for _, w in string_positions(texts[d])}
            if not ok[k]:
                continue
            it = self.items[c]
            if self.kind == CODE and (len(it.option_stems & nums) < CODE_LITERALS * len(it.option_stems)
                                      or any(_num_key(v) not in nums for v in it.numbers)):
                continue  # the examples' values are not in the document
            pts = list(zip(at_l[bounds[k]:bounds[k + 1]], word_l[bounds[k]:bounds[k + 1]]))
            span, a, b = weight_span(pts, weights, self.need[c] - NEED_SLACK)
            reach = LENGTH_HIGH * self.qa_len[c]
            if span <= max(GATE_SPAN * self.qa_len[c], MC_SPAN_MIN if self.kind == MC else 0):
                out[-1][1].append(c)
                out[-1][2].append(max(0, int(b - reach)))
                out[-1][3].append(min(len(texts[d]), int(a + reach)))
        return [(d, *(np.array(x, dtype=np.int64) for x in rest)) for d, *rest in out]

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


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The concatenated ranges starts[k] .. starts[k] + counts[k]."""
    total = int(counts.sum())
    return np.repeat(starts - np.cumsum(counts) + counts, counts) + np.arange(total)


def _member(sorted_codes: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Whether each of ``codes`` is in ``sorted_codes`` (one searchsorted)."""
    if len(sorted_codes) == 0:
        return np.zeros(len(codes), dtype=bool)
    j = np.minimum(np.searchsorted(sorted_codes, codes), len(sorted_codes) - 1)
    return sorted_codes[j] == codes


def stem_offsets(low: str) -> dict[str, list[int]]:
    """The offsets of each content word's stem (quantities.STEM_WORD, cut to STEM letters) in ``low``, lower-cased
    text (DocStems finds the same, for a batch, in numpy)."""
    out: dict[str, list[int]] = defaultdict(list)
    for m in STEM_WORD.finditer(low):
        out[m.group(0).strip("'-")[:STEM]].append(m.start())
    return out


# a stem's letters as 5-bit codes (a-z 1..26, ' 27, - 28; 0 past its end): a stem of STEM letters is one integer
_CODE = np.zeros(256, dtype=np.uint8)
_CODE[ord("a"):ord("z") + 1] = np.arange(1, 27)
_CODE[ord("'")], _CODE[ord("-")] = 27, 28
_SHIFT = 5 * np.arange(STEM - 1, -1, -1, dtype=np.int64)


def is_stem(w: str) -> bool:
    """Whether ``w`` can be a stem (``stem_offsets``): at most STEM of a-z, ' and -."""
    return 0 < len(w) <= STEM and w.isascii() and all(_CODE[ord(ch)] for ch in w)


def stem_key(w: str) -> int:
    """A stem (``is_stem``) as one integer, as DocStems computes it."""
    return int(sum(int(_CODE[ord(ch)]) << int(s) for ch, s in zip(w, _SHIFT)))


@dataclass
class DocStems:
    """The content words of a batch of lower-cased documents, as ``stem_offsets`` reads them (a match of
    quantities.STEM_WORD, trailing ' and - stripped, cut to STEM letters), found in numpy over the batch
    at once: for each word its document, its offset there and its stem as an integer (``stem_key``)."""

    doc: np.ndarray
    at: np.ndarray
    key: np.ndarray

    @classmethod
    def of(cls, lows: list[str]) -> "DocStems":
        """The stems of ``lows``, read about STEM_CHUNK characters at a time (a byte a character, and the
        positions of its letters: a few times the text, not more, however large the batch)."""
        parts, group, size = [], [], 0
        for k, low in enumerate(lows):
            group.append(low)
            size += len(low) + 1
            if size >= STEM_CHUNK or k == len(lows) - 1:
                doc, at, key = _stems(group)
                parts.append((doc + k + 1 - len(group), at, key))
                group, size = [], 0
        if not parts:
            return cls(*(np.zeros(0, dtype=np.int64) for _ in range(3)))
        return cls(*(np.concatenate(x) for x in zip(*parts)))


def _stems(lows: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    none = np.zeros(0, dtype=np.int64)
    # one character a byte: a-z, ' and - are ASCII, anything else only ends a word ("\n" between documents)
    code = _CODE[np.frombuffer("\n".join(lows).encode("latin-1", errors="replace"), dtype=np.uint8)]
    starts = np.cumsum([0] + [len(x) + 1 for x in lows[:-1]])
    # a run of [a-z'-] holds one match: from its first letter to its end, where that leaves two characters
    edge = np.diff(np.concatenate(([0], (code > 0).astype(np.int8), [0])))
    run_start, run_end = np.flatnonzero(edge == 1), np.flatnonzero(edge == -1)
    letters = np.flatnonzero((code > 0) & (code <= 26))
    if len(letters) == 0:
        return none, none, none
    first = letters[np.minimum(np.searchsorted(letters, run_start), len(letters) - 1)]
    ok = (first >= run_start) & (first + 2 <= run_end)
    first, run_end = first[ok], run_end[ok]
    last = letters[np.searchsorted(letters, run_end) - 1]  # its last letter: trailing ' and - stripped
    n = np.minimum(last + 1 - first, STEM)
    k = np.arange(STEM)
    chars = code[np.minimum(first[:, None] + k, len(code) - 1)].astype(np.int64) * (k < n[:, None])
    doc = np.searchsorted(starts, first, side="right") - 1
    return doc, first - starts[doc], (chars << _SHIFT).sum(axis=1)


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


_GAP = (float("nan"), -1)  # a value no item holds or allows: min_span starts a new stretch after it


class NumberIndex:
    """A document's numbers (``min_span``'s seq) by value, so that ``span`` reads only the offsets of an item's own
    numbers and of those it allows: any other number between two of them ends a stretch, as it does in ``min_span``,
    whose answer ``span`` gives (code is full of numbers, most of them another problem's)."""

    def __init__(self, seq: list[tuple[float, int]]):
        self.seq = seq
        self.where: dict[float, list[int]] = {}
        for k, (v, _) in enumerate(seq):
            self.where.setdefault(v, []).append(k)

    def span(self, values: frozenset, allowed: frozenset, room: float = 0.0) -> tuple[float, int, int]:
        """``min_span(seq, values, allowed)``, read only in the stretches between two numbers outside ``allowed``
        (the text's ends: no number) that are more than ``room`` characters apart, from the first number's
        offset to the second's (a window holding no such number lies strictly between them)."""
        where, seq = self.where, self.seq
        if not values or any(v not in where for v in values):
            return float("inf"), 0, 0
        sub: list[tuple[float, int]] = []
        ks = sorted(k for v in values | allowed if v in where for k in where[v])
        ends = [n for n, (a, b) in enumerate(zip(ks, ks[1:])) if b != a + 1]  # a stretch ends at ks[n]
        first = 0
        for last in ends + [len(ks) - 1]:
            k0, k1 = ks[first], ks[last]
            before = seq[k0 - 1][1] if k0 else -1
            after = seq[k1 + 1][1] if k1 + 1 < len(seq) else float("inf")
            if after - before > room:  # a number neither the item's nor allowed lies between: a new stretch
                sub.append(_GAP)
                sub += seq[k0:k1 + 1]
            first = last + 1
        return min_span(sub, values, allowed)


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
