"""The word gates of the paraphrase search: which documents of a batch hold an item's less common words (and,
for code, its example values) close together, before anything is embedded.

``DocStems`` finds a batch's content words in one numpy pass (a word is its first ``STEM`` letters, packed
into an integer key); ``WordGate`` holds the items' gate keys as a sparse matrix and does one sparse product
per batch; ``weight_span`` and ``min_span`` find the shortest stretch of a document that holds enough of an
item's weight or every one of its numbers (``_NumberRuns`` rules out, in numpy, the math items whose numbers
cannot lie together in a document with many numbers).  Each document gets what it would get alone.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from contam_assets.paraphrase.quantities import STEM, STEM_WORD, string_positions
from contam_assets.paraphrase.verify import CODE, CODE_LITERALS, CODE_MIN_LITERALS, MC, MC_COVER, MC_STEM_WEIGHT

LENGTH_LOW, LENGTH_HIGH = 0.5, 2.0  # a window's length, in times the item's (question, or question and answer)
MC_GATE_SHARE = 0.05  # a multiple-choice item's words held by at most this share of those items are its gate keys
MC_RARE_SHARE = 0.01  # ... and one of them held by at most this share
MC_GATE_WEIGHT = 14.0  # the least weight of them a document must hold (and MC_COVER of the item's)
MC_STEP, CODE_STEP = 250, 500  # ... within a stretch of one to two steps (characters)
GATE_SPAN = 0.5  # ... and the words reaching that weight within this share of the item's length
RARE_MARK = 1e4  # more than any item's keys weigh together
STEM_CHUNK = 1 << 22  # DocStems reads a batch this many characters at a time


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
        # the keys that are stems (not literals), by their integer form (stem_key), sorted: a batch's stems are
        # looked up in one searchsorted
        stem_of = sorted((stem_key(w), k) for k, w in enumerate(self.words) if is_stem(w))
        self.stem_keys = np.array([x for x, _ in stem_of], dtype=np.int64)
        self.stem_ids = np.array([k for _, k in stem_of], dtype=np.int64)
        self.key_ids = {i: np.array(sorted(self.word_id[w] for w in ks), dtype=np.int64) for i, ks in self.keys.items()}

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
        lits: list[list[tuple[int, str]]] = [[] for _ in texts]
        if self.kind == CODE:  # and the literals of the examples: numbers and strings
            extra = []
            for d, (text, occ) in enumerate(zip(texts, occs)):
                lits[d] = [(a, _num_key(v)) for v, a in occ] + string_positions(text)
                extra += [(d, a, k) for a, w in lits[d] if (k := wid.get(w)) is not None]
            if extra:
                d_, a_, k_ = np.array(extra, dtype=np.int64).T
                doc, at, word = np.concatenate([doc, d_]), np.concatenate([at, a_]), np.concatenate([word, k_])
        if len(doc) == 0:
            return out
        # in each document's order (offset, then word), as weight_span reads them
        order = np.lexsort((word, at, doc))
        doc, at, word = doc[order], at[order], word[order]
        # a document needs one of an item's rare keys (in the stretch, below)
        rare_doc = np.zeros(len(texts), dtype=bool)
        rare_doc[doc[self.rare_word[word]]] = True
        if not rare_doc.any():
            return out
        keep = rare_doc[doc]
        doc, at, word = doc[keep], at[keep], word[keep]
        bucket = at // self.step
        n_words, per_doc = len(wid), int(bucket.max()) + 1
        # stretch c of a document spans buckets c and c + 1: a word counts once per stretch; a row per
        # (document, stretch) of the batch, numbered document * per_doc + stretch
        stretch, d2, w2 = np.concatenate([bucket, bucket - 1]), np.concatenate([doc, doc]), np.concatenate([word, word])
        ok = stretch >= 0
        pairs = np.unique((d2[ok] * per_doc + stretch[ok]) * n_words + w2[ok])
        row_of, word_of = pairs // n_words, pairs % n_words
        # only a stretch holding a rare key can let an item through
        ok = np.isin(row_of, row_of[self.rare_word[word_of]])
        row_of, word_of = row_of[ok], word_of[ok]
        rows, row = np.unique(row_of, return_inverse=True)
        # pairs are sorted by row, then word: the rows of a CSR matrix as they are
        indptr = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(np.bincount(row, minlength=len(rows)), out=indptr[1:])
        pick = sparse.csr_matrix((np.ones(len(row)), word_of, indptr), shape=(len(rows), n_words))
        got = (pick @ self.matrix).tocoo()
        hit = (got.data >= RARE_MARK) & (np.mod(got.data, RARE_MARK) >= self.need[got.col])
        found = np.unique(rows[got.row[hit]] // per_doc * self.n + got.col[hit])  # (document, item), in order
        if len(found) == 0:
            return out
        first = np.searchsorted(doc, np.arange(len(texts) + 1))  # each document's words: first[d]:first[d + 1]
        for d in np.unique(found // self.n).tolist():
            cand = found[(found >= d * self.n) & (found < (d + 1) * self.n)] - d * self.n
            at_d, word_d = at[first[d]:first[d + 1]], word[first[d]:first[d + 1]]
            out[d] = self._near(cand, texts[d], at_d, word_d, {w for _, w in lits[d]})
        return out

    def _near(self, cand: np.ndarray, text: str, at: np.ndarray, word: np.ndarray, nums: set) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Of the items ``cand`` through the sparse step in a document (its keys: ``at``, ``word``, in order; ``nums``:
        its literals), those whose words reaching the weight lie close together: within GATE_SPAN of the
        item's length; and the stretch of characters around them."""
        keep, lo, hi = [], [], []
        for c in cand.tolist():
            it = self.items[c]
            if self.kind == CODE and (len(it.option_stems & nums) < CODE_LITERALS * len(it.option_stems)
                                      or any(_num_key(v) not in nums for v in it.numbers)):
                continue  # the examples' values are not in the document
            mine = np.isin(word, self.key_ids[c])
            pts = list(zip(at[mine].tolist(), [self.words[k] for k in word[mine].tolist()]))
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


class _NumberRuns:
    """A document's numbers (``min_span``'s seq) as arrays, to tell in numpy whether a math item's numbers all lie in
    one stretch free of numbers outside ``allowed``: where none does, ``min_span`` is inf and need not run (code
    is full of numbers, most of them another problem's)."""

    def __init__(self, seq: list[tuple[float, int]]):
        self.ids: dict[float, int] = {}
        for v, _ in seq:
            self.ids.setdefault(v, len(self.ids))
        self.inv = np.array([self.ids[v] for v, _ in seq], dtype=np.int64)

    def any_holds(self, values: set, allowed: frozenset) -> bool:
        ids = self.ids
        if any(v not in ids for v in values):
            return False
        state = np.zeros(len(ids), dtype=np.int64)  # 0: another problem's number, 1: allowed, 2 + k: the k-th value
        state[[ids[v] for v in allowed if v in ids]] = 1
        state[[ids[v] for v in values]] = 2 + np.arange(len(values))
        st = state[self.inv]
        inside = st >= 2
        run = np.cumsum(st == 0)[inside]  # the stretch between two of another problem's numbers
        found = np.unique(run * len(values) + st[inside] - 2) // len(values)
        return bool(len(found)) and int(np.bincount(found).max()) >= len(values)


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
