"""Overlap between evaluation items and the rows an experiment trained on.

Definitions (the report and docs/evaluation.md repeat them):

* **word**: a maximal run of non-space characters of
  ``clean_text(text, CleanOptions(unescape=False))``: lowercased, every
  punctuation character of the decon set (ASCII punctuation, curly quotes, em
  dash) replaced by a space.  ``"$18."`` gives the word ``18``.
* **8-gram** of a text: 8 consecutive words of that text (positions, so an
  item of ``w`` words has ``w - 7`` of them).  A training row's 8-grams never
  span two rows.
* **exact**: the item's text equals a training row's text after
  ``normalize_ws_case`` (lowercase, whitespace runs to one space, trimmed).
* **share** of an item: the fraction of its 8-grams that occur in at least one
  training row.  An item with fewer than 8 words has no 8-gram: its share is
  1.0 if it is exact and 0.0 otherwise.
* **near**: exact, or share >= 0.5 ("at least half").  Exact items are
  therefore always near, and an exact item of 8+ words has share 1.0.
* **share_mean**: the mean share over items.  **flagged**: the first
  ``MAX_FLAGGED`` near items, by source index.

How it is computed, exactly and in bounded memory: the items' 8-grams are
hashed to 64 bits (``detector.ngrams.ngram_hashes`` over ``detector.tokenize``'s word
ids; distinct 8-grams collide with probability about 2**-64) and kept as one
sorted array; that is the only large structure held.  Training rows arrive
from an iterator (``rows.iter_training_texts`` streams the file line by
line) in batches of a bounded number of characters; each batch's 8-gram
hashes are looked up in the sorted array (``searchsorted``) and matches are
marked in a boolean array, then the batch is dropped.  Candidate finding, exact
by construction: a training word that occurs in no item cannot be part of an
item 8-gram, so it gets the placeholder id 0 (a dict lookup instead of a
hash) and windows holding one are not looked up at all.  Exact matches are found
by a dict lookup of the row's cleaned text among the items' cleaned texts (two
texts equal under ``normalize_ws_case`` have equal cleaned texts), confirmed
with ``normalize_ws_case``.

datasketch (MinHash LSH) is deliberately not used on this path.  LSH finds
*probable* near-duplicate pairs with a tunable false-negative rate; here every
8-gram of every item must be decided, and a hashed-set lookup already costs
O(words) per row, the same as computing a row's MinHash.  LSH could only
skip rows, and a skipped row may hold an item's 8-gram, which would change
``share``/``near``.  So it would not speed anything up without changing the
result, and the brief allows it only where it does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat
from typing import Iterable, Sequence

import numpy as np

from contam_assets.detector.ngrams import ngram_hashes
from contam_assets.detector.text import CleanOptions, clean_text, normalize_ws_case
from contam_assets.detector.tokenize import get_tokenizer

NGRAM = 8
MAX_FLAGGED = 20
NEAR_SHARE = 0.5
WORD_CLEAN = CleanOptions(unescape=False)
# A batch of training rows is processed once it holds this many characters or rows.
BATCH_CHARS = 1_000_000
BATCH_ROWS = 4096


def words_of(text: str) -> list[str]:
    """The words of ``text`` as defined above (for tests and explanations)."""
    return clean_text(text, WORD_CLEAN).split()


@dataclass(frozen=True)
class ItemSet:
    """Items of one benchmark: names and (source index, text) pairs."""

    name: str
    items: Sequence[tuple[int, str]]


def _rate(count: int, total: int) -> float | None:
    return round(count / total, 6) if total else None


class Measurement:
    """Accumulates the overlap of a fixed set of items with streamed training rows."""

    def __init__(self, item_sets: Sequence[ItemSet], n: int = NGRAM):
        self.n = n
        self.item_sets = list(item_sets)
        self._tok = get_tokenizer("word")
        texts = [t for s in self.item_sets for _, t in s.items]
        self.n_items = len(texts)
        self._norm = [normalize_ws_case(t) for t in texts]
        self._by_clean: dict[str, list[int]] = {}
        hashes = []
        counts = np.zeros(self.n_items, dtype=np.int64)
        # Word -> token id of every word that occurs in some item (the items' vocabulary).
        self._vocab: dict[str, int] = {}
        for i, t in enumerate(texts):
            cleaned = clean_text(t, WORD_CLEAN)
            self._by_clean.setdefault(cleaned, []).append(i)
            ids = self._tok.encode(cleaned)
            self._vocab.update(zip(cleaned.split(), ids.tolist()))
            h = ngram_hashes(ids, n)
            counts[i] = len(h)
            hashes.append(h)
        # Id 0 marks a training word outside the vocabulary (a real word hashes to 0 with p ~ 2**-64).
        if 0 in self._vocab.values():  # pragma: no cover - astronomically unlikely
            raise RuntimeError("a word hashed to the reserved id 0")
        self.ngram_counts = counts
        all_h = np.concatenate(hashes) if hashes else np.zeros(0, dtype=np.uint64)
        # The only large structure: sorted unique item n-gram hashes (+ each position's slot).
        self.uniq, self._slot = np.unique(all_h, return_inverse=True)
        self.found = np.zeros(len(self.uniq), dtype=bool)
        self.exact = np.zeros(self.n_items, dtype=bool)

    # -- streaming -------------------------------------------------------
    def update(self, texts: Sequence[str]) -> None:
        """Check one batch of training rows."""
        words: list[str] = []
        lens: list[int] = []
        for t in texts:
            cleaned = clean_text(t, WORD_CLEAN)
            hits = self._by_clean.get(cleaned)
            if hits:
                norm = normalize_ws_case(t)
                for i in hits:
                    if self._norm[i] == norm:
                        self.exact[i] = True
            w = cleaned.split()
            words.extend(w)
            lens.append(len(w))
        n = self.n
        m = len(words) - n + 1
        if not len(self.uniq) or m <= 0:
            return
        # Token ids of the words; a word that occurs in no item gets 0 (see the module docstring).
        ids = np.fromiter(map(self._vocab.get, words, repeat(0)), dtype=np.uint64, count=len(words))
        # Candidate windows: inside one row, and every word in the items' vocabulary.
        row_of = np.repeat(np.arange(len(lens)), lens)
        unknown = np.concatenate(([0], np.cumsum(ids == 0)))
        cand = np.flatnonzero((unknown[n:] == unknown[:m]) & (row_of[:m] == row_of[n - 1 :]))
        if not cand.size:
            return
        h = ngram_hashes(ids, n)[cand]
        pos = np.searchsorted(self.uniq, h)
        pos[pos == len(self.uniq)] = 0
        self.found[pos[self.uniq[pos] == h]] = True

    def consume(self, texts: Iterable[str], batch_chars: int = BATCH_CHARS, batch_rows: int = BATCH_ROWS) -> int:
        """Check every text of an iterator, holding at most one batch; returns rows seen."""
        batch: list[str] = []
        chars = seen = 0
        for t in texts:
            batch.append(t)
            chars += len(t)
            seen += 1
            if chars >= batch_chars or len(batch) >= batch_rows:
                self.update(batch)
                batch, chars = [], 0
        if batch:
            self.update(batch)
        return seen

    # -- results ---------------------------------------------------------
    def found_counts(self) -> np.ndarray:
        """Per item: how many of its 8-gram positions occur in the training rows."""
        item_of = np.repeat(np.arange(self.n_items), self.ngram_counts)
        hit = self.found[self._slot].astype(np.int64)
        return np.bincount(item_of, weights=hit, minlength=self.n_items).round().astype(np.int64)

    def shares(self, found: np.ndarray | None = None) -> np.ndarray:
        """Share of found 8-grams per item (items under 8 words: 1.0 if exact else 0.0)."""
        found = self.found_counts() if found is None else found
        return np.where(self.ngram_counts > 0, found / np.maximum(self.ngram_counts, 1), self.exact.astype(np.float64))

    def near(self, found: np.ndarray | None = None) -> np.ndarray:
        found = self.found_counts() if found is None else found
        # "at least half" decided on integers (2 * found >= total): exactly 50% is near.
        return self.exact | ((self.ngram_counts > 0) & (2 * found >= self.ngram_counts))

    def result(self) -> dict:
        found = self.found_counts()
        shares, near = self.shares(found), self.near(found)
        per: dict[str, dict] = {}
        flagged_all: list[dict] = []
        start = 0
        for s in self.item_sets:
            end = start + len(s.items)
            idx = [s.items[k][0] for k in range(len(s.items))]
            near_k = np.flatnonzero(near[start:end])
            flagged = [idx[k] for k in near_k[:MAX_FLAGGED]]
            per[s.name] = _summary(
                len(s.items),
                int(self.exact[start:end].sum()),
                int(near_k.size),
                float(shares[start:end].sum()),
                int((self.ngram_counts[start:end] == 0).sum()),
            ) | {"flagged": flagged}
            flagged_all += [{"benchmark": s.name, "index": i} for i in flagged]
            start = end
        total = _summary(
            self.n_items,
            int(self.exact.sum()),
            int(near.sum()),
            float(shares.sum()),
            int((self.ngram_counts == 0).sum()),
        )
        return total | {"flagged": flagged_all[:MAX_FLAGGED], "benchmarks": per}


def _summary(items: int, exact: int, near: int, share_sum: float, short: int) -> dict:
    return {
        "items": items,
        "exact": exact,
        "exact_rate": _rate(exact, items),
        "near": near,
        "near_rate": _rate(near, items),
        "share_mean": round(share_sum / items, 6) if items else None,
        "short_items": short,
    }


def measure(item_sets: Sequence[ItemSet], training_texts: Iterable[str], **batch) -> dict:
    """Contamination of ``item_sets`` by the (streamed) training texts."""
    m = Measurement(item_sets)
    rows = m.consume(training_texts, **batch)
    return {"ngram": NGRAM, "near_share": NEAR_SHARE, "rows_checked": rows} | m.result()
