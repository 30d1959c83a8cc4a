"""Sorted 64-bit keys in an open-addressing table (numba): the lookups of the scan and of the prefilter.

The index keeps its question n-grams as a sorted array (q_keys) and the prefilter its
anchors likewise; a binary search of a million keys per n-gram of the pool was most of
the scan's lookup step.  ``slots`` (int32, a power of two at least twice the keys, -1
empty) holds key indices by linear probing from bits 18 on of the key; ``positions``
walks a batch's hashes through the index's one-bit Bloom filter, then the table.
The answer is the sorted array's own position, so nothing downstream changes;
`test_scan_kernels.py` holds it equal to the binary search.  ``docs_with_key`` hashes
a cached token stream's n-grams (ngrams.py's hash) and finds the documents that hold one
of the keys: the first step of an incremental rescan.  With a ``lead`` gate (a bit filter of
the first three tokens of each key's n-gram, ``lead_values``) it hashes only the positions
whose first three tokens pass it: about one in seventy for one task's keys on host text.
"""

from __future__ import annotations

import numpy as np

from contam_assets.detector import compiled
from contam_assets.detector.ngrams import PRIME, SEED
from contam_assets.detector.ngrams import _mix as _ngram_mix

_mix = _ngram_mix  # compiled below with the kernels

AVAILABLE = compiled.numba_installed()
_HT = np.uint64(18)  # the slot: bits from 18 on of the key (the prefilter's block filters use bits 0-17)


def _probe(keys, slots, h, a, b):
    """Index of ``h`` in ``keys[a:b]`` (sorted, distinct keys), or -1."""
    mask = len(slots) - 1
    s = np.int64(h >> _HT) & mask
    while slots[s] >= 0:
        k = slots[s]
        if keys[k] == h and a <= k < b:
            return k
        s = (s + 1) & mask
    return -1


def _fill(keys, slots, start):
    mask = len(slots) - 1
    for k in range(len(keys)):
        s = np.int64(keys[k] >> _HT) & mask
        while slots[s] >= 0:
            s = (s + 1) & mask
        slots[s] = k + start


def _positions(hashes, keys, slots, bloom, shift, out):
    n = len(keys)
    for i in range(len(hashes)):
        h = hashes[i]
        b = h >> shift
        if (bloom[np.int64(b >> np.uint64(6))] >> (b & np.uint64(63))) & np.uint64(1):
            out[i] = _probe(keys, slots, h, 0, n)
        else:
            out[i] = -1


# the lead gate's value of three tokens (a, b, c): a*_L1 + b*_L2 + c*_L3 mod 2**64 (any odd constants: a filter)
_L1, _L2, _L3 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9)


def bit_filter(values: np.ndarray, bits: int) -> np.ndarray:
    """One bit per top-``bits`` value of ``values`` (uint64 words): a membership filter without false negatives."""
    words = np.zeros(max(1, (1 << bits) // 64), dtype=np.uint64)
    b = np.asarray(values, dtype=np.uint64) >> np.uint64(64 - bits)
    np.bitwise_or.at(words, (b >> np.uint64(6)).astype(np.int64), np.left_shift(np.uint64(1), b & np.uint64(63)))
    return words


def lead_values(tokens: np.ndarray, n: int) -> np.ndarray:
    """The lead gate's value of every n-gram ``tokens[i:i+n]`` (its first three tokens; n >= 3)."""
    t = np.asarray(tokens, dtype=np.uint64)
    m = len(t) - n + 1
    if m <= 0:
        return np.zeros(0, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return t[:m] * _L1 + t[1 : m + 1] * _L2 + t[2 : m + 2] * _L3


def _docs_with_key(tokens, offsets, n, min_tokens, keys, slots, bloom, shift, skip, out):
    nk = len(keys)
    longest = 0
    for d in range(len(offsets) - 1):
        longest = max(longest, offsets[d + 1] - offsets[d])
    mixed = np.empty(max(longest, 1), dtype=np.uint64)
    found = 0
    for d in range(len(offsets) - 1):
        a, b = offsets[d], offsets[d + 1]
        if b - a < min_tokens or b - a < n:
            continue
        for p in range(b - a):
            mixed[p] = _mix(np.uint64(tokens[a + p]))  # ngrams._mix, the splitmix64 finaliser
        for p in range(b - a - n + 1):
            # ngrams.py: h = SEED; h = (h ^ mix(t)) * PRIME per token; mix(h ^ n)
            h = SEED
            for j in range(n):
                h = (h ^ mixed[p + j]) * PRIME
            h = _mix(h ^ np.uint64(n))
            bit = h >> shift
            if (bloom[np.int64(bit >> np.uint64(6))] >> (bit & np.uint64(63))) & np.uint64(1):
                k = _probe(keys, slots, h, 0, nk)
                if k >= 0 and (len(skip) == 0 or not skip[k]):
                    out[found] = d
                    found += 1
                    break
    return found


def _docs_with_key_gated(tokens, offsets, n, min_tokens, keys, slots, bloom, shift, skip, lead, lead_shift, out):
    nk = len(keys)
    found = 0
    for d in range(len(offsets) - 1):
        a, b = offsets[d], offsets[d + 1]
        if b - a < min_tokens or b - a < n:
            continue
        for p in range(a, b - n + 1):
            g = (np.uint64(tokens[p]) * _L1 + np.uint64(tokens[p + 1]) * _L2 + np.uint64(tokens[p + 2]) * _L3) >> lead_shift
            if not (lead[np.int64(g >> np.uint64(6))] >> (g & np.uint64(63))) & np.uint64(1):
                continue  # no key's n-gram starts with these three tokens
            h = SEED  # ngrams.py's hash of tokens[p:p+n]
            for j in range(n):
                h = (h ^ _mix(np.uint64(tokens[p + j]))) * PRIME
            h = _mix(h ^ np.uint64(n))
            bit = h >> shift
            if (bloom[np.int64(bit >> np.uint64(6))] >> (bit & np.uint64(63))) & np.uint64(1):
                k = _probe(keys, slots, h, 0, nk)
                if k >= 0 and (len(skip) == 0 or not skip[k]):
                    out[found] = d
                    found += 1
                    break
    return found


if AVAILABLE:
    _probe = compiled.njit(inline="always")(_probe)
    _fill = compiled.njit()(_fill)
    _positions = compiled.njit(nogil=True)(_positions)
    _mix = compiled.njit(inline="always")(_ngram_mix)
    _docs_with_key = compiled.njit(nogil=True)(_docs_with_key)
    _docs_with_key_gated = compiled.njit(nogil=True)(_docs_with_key_gated)


def empty_slots(n_keys: int) -> np.ndarray:
    """The empty table for ``n_keys`` keys: a power of two at least twice as many slots, -1 each."""
    return np.full(1 << max(4, int(np.ceil(np.log2(2 * max(1, n_keys))))), -1, dtype=np.int32)


def slots_for(keys: np.ndarray) -> np.ndarray:
    """The table of ``keys`` (filled where numba is installed)."""
    slots = empty_slots(len(keys))
    if AVAILABLE:
        _fill(keys, slots, 0)
    return slots


def fill_slots(keys: np.ndarray, start: int, slots: np.ndarray) -> None:
    """Put ``keys``, the keys ``start:start + len(keys)`` of the sorted array, into ``slots``: called on the keys a
    chunk at a time in order, it gives the table ``slots_for`` gives the whole array (needs numba)."""
    _fill(np.ascontiguousarray(keys, dtype=np.uint64), slots, start)


def positions(hashes: np.ndarray, keys: np.ndarray, slots: np.ndarray, bloom: np.ndarray, bloom_bits: int) -> np.ndarray:
    """Position in ``keys`` of every hash, -1 where absent (int64); ``bloom``: one bit per top-``bloom_bits`` value."""
    out = np.empty(len(hashes), dtype=np.int64)
    _positions(np.ascontiguousarray(hashes, dtype=np.uint64), keys, slots, bloom, np.uint64(64 - bloom_bits), out)
    return out


def docs_with_key(tokens: np.ndarray, offsets: np.ndarray, n: int, min_tokens: int, keys: np.ndarray, slots: np.ndarray,
                  bloom: np.ndarray, bloom_bits: int, lead: tuple[np.ndarray, int] | None = None,
                  skip: np.ndarray | None = None) -> np.ndarray:
    """Documents (``tokens[offsets[d]:offsets[d+1]]``, at least ``min_tokens`` long) holding an n-gram whose hash is
    in ``keys`` (int64, ascending); n-grams never span two documents.  ``lead``: (bit filter, its bits) of the
    ``lead_values`` of every key's n-gram (n >= 3), or None; ``skip``: a bool per key, True for one that is not
    looked for (an index's hot keys), or None.  Needs numba."""
    out = np.empty(max(0, len(offsets) - 1), dtype=np.int64)
    args = (np.asarray(tokens), np.ascontiguousarray(offsets, dtype=np.int64), np.int64(n), np.int64(min_tokens), keys,
            slots, bloom, np.uint64(64 - bloom_bits), np.zeros(0, dtype=np.bool_) if skip is None else skip)
    if lead is not None and n >= 3:
        found = _docs_with_key_gated(*args, lead[0], np.uint64(64 - lead[1]), out)
    else:
        found = _docs_with_key(*args, out)
    return out[:found]
