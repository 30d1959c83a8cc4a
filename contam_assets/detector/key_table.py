"""Sorted 64-bit keys in an open-addressing table (numba): the lookups of the scan and of the prefilter.

The index keeps its question n-grams as a sorted array (q_keys) and the prefilter its
anchors likewise; a binary search of a million keys per n-gram of the pool was most of
the scan's lookup step.  ``slots`` (int32, a power of two at least twice the keys, -1
empty) holds key indices by linear probing from bits 18 on of the key; ``positions``
walks a batch's hashes through the index's one-bit Bloom filter, then the table.
The answer is the sorted array's own position, so nothing downstream changes;
`test_scan_kernels.py` holds it equal to the binary search.
"""

from __future__ import annotations

import numpy as np

from contam_assets.detector import compiled

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


def _fill(keys, slots):
    mask = len(slots) - 1
    for k in range(len(keys)):
        s = np.int64(keys[k] >> _HT) & mask
        while slots[s] >= 0:
            s = (s + 1) & mask
        slots[s] = k


def _positions(hashes, keys, slots, bloom, shift, out):
    n = len(keys)
    for i in range(len(hashes)):
        h = hashes[i]
        b = h >> shift
        if (bloom[np.int64(b >> np.uint64(6))] >> (b & np.uint64(63))) & np.uint64(1):
            out[i] = _probe(keys, slots, h, 0, n)
        else:
            out[i] = -1


if AVAILABLE:
    _probe = compiled.njit(inline="always")(_probe)
    _fill = compiled.njit()(_fill)
    _positions = compiled.njit(nogil=True)(_positions)


def slots_for(keys: np.ndarray) -> np.ndarray:
    """The table of ``keys`` (filled where numba is installed)."""
    slots = np.full(1 << max(4, int(np.ceil(np.log2(2 * max(1, len(keys)))))), -1, dtype=np.int32)
    if AVAILABLE:
        _fill(keys, slots)
    return slots


def positions(hashes: np.ndarray, keys: np.ndarray, slots: np.ndarray, bloom: np.ndarray, bloom_bits: int) -> np.ndarray:
    """Position in ``keys`` of every hash, -1 where absent (int64); ``bloom``: one bit per top-``bloom_bits`` value."""
    out = np.empty(len(hashes), dtype=np.int64)
    _positions(np.ascontiguousarray(hashes, dtype=np.uint64), keys, slots, bloom, np.uint64(64 - bloom_bits), out)
    return out
