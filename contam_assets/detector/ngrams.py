"""The one n-gram helper: 64-bit hashes of token n-grams.

``ngram_hashes`` is vectorised with numpy; ``ngram_hashes_reference`` is the
plain-Python definition it must equal (tests compare them on random input).

Hash of ``(t0, ..., t{n-1})``: start with ``h = SEED``; for each token
``h = (h ^ mix(t)) * PRIME`` (mod 2**64); finally ``h = mix(h ^ n)``.  ``mix`` is
the splitmix64 finaliser.  Distinct n-grams collide with probability ~2**-64.
"""

from __future__ import annotations

import numpy as np

SEED = np.uint64(0x9E3779B97F4A7C15)
PRIME = np.uint64(0x100000001B3)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_MASK = (1 << 64) - 1


def _mix(x: np.ndarray) -> np.ndarray:
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


def ngram_hashes(tokens: np.ndarray, n: int) -> np.ndarray:
    """Hashes of every n-gram ``tokens[i:i+n]`` (length ``len(tokens)-n+1``, or 0)."""
    tokens = np.asarray(tokens, dtype=np.uint64)
    m = len(tokens) - n + 1
    if m <= 0:
        return np.zeros(0, dtype=np.uint64)
    mixed = _mix(tokens)
    with np.errstate(over="ignore"):
        h = np.full(m, SEED, dtype=np.uint64)
        for j in range(n):
            h = (h ^ mixed[j : j + m]) * PRIME
        return _mix(h ^ np.uint64(n))


def ngram_hash(tokens) -> int:
    """Hash of one n-gram (all of ``tokens``)."""
    arr = np.asarray(tokens, dtype=np.uint64)
    return int(ngram_hashes(arr, len(arr))[0]) if len(arr) else 0


def _mix_int(x: int) -> int:
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _MASK
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def ngram_hashes_reference(tokens: list[int], n: int) -> list[int]:
    """Plain-Python reference of :func:`ngram_hashes`."""
    out = []
    for i in range(len(tokens) - n + 1):
        h = 0x9E3779B97F4A7C15
        for t in tokens[i : i + n]:
            h = ((h ^ _mix_int(int(t))) * 0x100000001B3) & _MASK
        out.append(_mix_int(h ^ n))
    return out


def word_ngrams(words: list[str], n: int) -> list[tuple[str, ...]]:
    """Word n-grams of a word list (texts shorter than n give no n-gram)."""
    return [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]


# -- many arrays at once (index build) ---------------------------------------------

def segment_ngram_hashes(arrays: list[np.ndarray], n: int, use: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Hashes of the n-grams inside each array (never across two) and the array each came from.

    Equals ``concatenate([ngram_hashes(a, n) for a in arrays])`` with the matching array
    indices; ``use`` (bool per array) leaves arrays out.  One numpy pass over all tokens.
    """
    lens = np.fromiter(map(len, arrays), dtype=np.int64, count=len(arrays))
    take = lens >= n if use is None else (lens >= n) & use
    idx = np.flatnonzero(take)
    if not len(idx):
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
    flat = np.concatenate([np.asarray(arrays[i], dtype=np.uint64) for i in idx.tolist()])
    L = lens[idx]
    starts = np.concatenate(([0], np.cumsum(L)[:-1]))
    count = L - n + 1
    ends = np.cumsum(count)
    pos = np.repeat(starts - (ends - count), count) + np.arange(int(ends[-1]))
    return ngram_hashes(flat, n)[pos], np.repeat(idx, count)


def unique_per_segment(values: np.ndarray, seg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct values of each segment, segments in ascending order, and their segment ids.

    Equals concatenating ``np.unique(values[seg == s])`` over the segments s in order.  One sort of
    (segment, value) packed into a uint64 key: the value itself when both fit (token ids), else its
    rank among the distinct values (n-gram hashes) — numpy sorts uint64 far faster than it lexsorts.
    """
    if not len(values):
        return values[:0].copy(), seg[:0].copy()
    if values.dtype.kind not in "ui" or seg.dtype.kind not in "ui" or int(values.min()) < 0 or int(seg.min()) < 0:
        order = np.lexsort((values, seg))
        v, s = values[order], seg[order]
        keep = np.ones(len(v), dtype=bool)
        keep[1:] = (v[1:] != v[:-1]) | (s[1:] != s[:-1])
        return v[keep], s[keep]
    seg_bits = int(seg.max()).bit_length()
    distinct = None
    low = values.astype(np.uint64)
    if int(values.max()).bit_length() + seg_bits > 64:  # a hash: its rank stands for it
        by_value = np.argsort(low)
        ranked = low[by_value]
        first = np.ones(len(ranked), dtype=bool)
        first[1:] = ranked[1:] != ranked[:-1]
        distinct = ranked[first]
        low = np.empty(len(values), dtype=np.uint64)
        low[by_value] = np.cumsum(first) - 1
    bits = np.uint64(max(1, int(low.max()).bit_length()))
    key = (seg.astype(np.uint64) << bits) | low
    key.sort()
    keep = np.ones(len(key), dtype=bool)
    keep[1:] = key[1:] != key[:-1]
    key = key[keep]
    low = key & (np.uint64(_MASK) >> (np.uint64(64) - bits))  # the low ``bits`` bits (all 64 of them too)
    v = distinct[low.astype(np.int64)] if distinct is not None else low
    return v.astype(values.dtype), (key >> bits).astype(seg.dtype)
