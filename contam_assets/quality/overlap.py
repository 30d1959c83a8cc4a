"""Independent checks of the suite's truth, on normalised words (not the detector's tokens).

- :class:`ShingleIndex`: word 8-gram shingles of every instance question; a document
  "contains" an instance when it holds at least ``CONTAINS`` of that question's
  shingles.  Clean documents must contain no instance.
- :class:`PresenceIndex`: which instances' normalised questions occur verbatim (as a
  contiguous run of normalised words) in a document?  Used for the item split
  (seed 003: is the item anywhere in the removed documents?) and to tell a stray
  match from one of an instance the document really holds.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable

import numpy as np

from contam_assets.detector.ngrams import ngram_hashes
from contam_assets.detector.text import CleanOptions, clean_text
from contam_assets.detector.tokenize import get_tokenizer

SHINGLE = 8  # words
CONTAINS = 0.5  # share of an instance's shingles that makes a document "contain" it
MIN_SHINGLES = 3  # questions under SHINGLE + 2 words are too generic to call a document contaminated


def _member(values: np.ndarray, sorted_keys: np.ndarray) -> np.ndarray:
    """values in sorted_keys (binary search; np.isin would re-sort the large key array on every call)."""
    if not len(sorted_keys):
        return np.zeros(len(values), dtype=bool)
    pos = np.minimum(np.searchsorted(sorted_keys, values), len(sorted_keys) - 1)
    return sorted_keys[pos] == values


def word_ids(text: str, opts: CleanOptions = CleanOptions()) -> np.ndarray:
    return get_tokenizer("word").encode(clean_text(text, opts))


def shingles(text: str, n: int = SHINGLE) -> np.ndarray:
    return np.unique(ngram_hashes(word_ids(text), n))


class ShingleIndex:
    """Word 8-gram shingles of instance questions, for 'does this text contain an instance?'."""

    def __init__(self, questions: Iterable[tuple[object, str]]):
        owners: dict[int, list[int]] = defaultdict(list)
        self.keys: list[object] = []
        self.sizes: list[int] = []
        for key, q in questions:
            sh = shingles(q)
            if len(sh) < MIN_SHINGLES:
                continue
            i = len(self.keys)
            self.keys.append(key)
            self.sizes.append(len(sh))
            for h in sh.tolist():
                owners[h].append(i)
        self._owners = owners
        self._all = np.array(sorted(owners), dtype=np.uint64)

    def overlaps(self, text: str) -> list[tuple[object, float]]:
        """(instance key, share of its shingles in ``text``) for every instance sharing a shingle, best first."""
        sh = shingles(text)
        if not len(sh) or not len(self._all):
            return []
        hit = sh[_member(sh, self._all)]
        if not len(hit):
            return []
        counts: dict[int, int] = defaultdict(int)
        for h in hit.tolist():
            for i in self._owners[h]:
                counts[i] += 1
        out = [(self.keys[i], c / self.sizes[i]) for i, c in counts.items()]
        return sorted(out, key=lambda kv: -kv[1])

    def max_overlap(self, text: str, ignore: set | None = None) -> tuple[object | None, float]:
        for key, share in self.overlaps(text):
            if ignore is None or key not in ignore:
                return key, share
        return None, 0.0

    def contains_any(self, text: str, ignore: set | None = None) -> bool:
        return self.max_overlap(text, ignore)[1] >= CONTAINS


class PresenceIndex:
    """Instance questions, found verbatim (as a run of normalised words) in documents.

    Built once from the instances; :meth:`found_in` scans one document and returns
    the keys of every instance whose whole normalised question occurs in it.
    """

    ANCHOR = 6  # words hashed to find a candidate start position

    def __init__(self, questions: Iterable[tuple[object, str]], opts: CleanOptions = CleanOptions()):
        self.opts = opts
        self._by_len: dict[int, dict[int, list[tuple[object, np.ndarray]]]] = defaultdict(lambda: defaultdict(list))
        for key, q in questions:
            w = word_ids(q, opts)
            if not len(w):
                continue
            n = min(len(w), self.ANCHOR)
            self._by_len[n][int(ngram_hashes(w[:n], n)[0])].append((key, w))
        self._arrays = {n: np.array(sorted(d), dtype=np.uint64) for n, d in self._by_len.items()}

    def found_in(self, text: str) -> set:
        d = word_ids(text, self.opts)
        out: set = set()
        for n, table in self._by_len.items():
            if len(d) < n:
                continue
            h = ngram_hashes(d, n)
            for i in np.flatnonzero(_member(h, self._arrays[n])).tolist():
                for key, w in table[int(h[i])]:
                    if key not in out and len(w) <= len(d) - i and np.array_equal(d[i:i + len(w)], w):
                        out.add(key)
        return out
