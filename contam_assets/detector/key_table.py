"""Sorted 64-bit keys looked up without a binary search over all of them (numba): the scan's and the prefilter's.

The index keeps its question n-grams as a sorted array (q_keys) and the prefilter its
anchors likewise; a binary search of a million keys per n-gram of the pool was most of
the scan's lookup step.  The index's lookup table is a *directory* of the keys' top bits
(``directory_for``: int64, 2**d + 1 entries, four to eight keys a bucket, 1 to 2 bytes a
key): a lookup reads its bucket's bounds and binary-searches the few keys between them.
It is built in one pass over the keys in order, so a registry of hundreds of millions of
keys never holds more than the directory itself.  ``positions`` walks a batch's hashes
through the index's key filter (``key_filter``: a word-blocked Bloom filter, three bits of
one 64-bit word per key, about 1 % false hits at 16 bits a key), then the directory.
The prefilter, whose keys are sorted within each of its levels, keeps an open-addressing
table (``slots_for``: int32, a power of two at least twice the keys, -1 empty, linear
probing from bits 18 on of the key; ``_probe`` takes a level's range).
The answer is the sorted array's own position, so nothing downstream changes;
`test_scan_kernels.py` holds it equal to the binary search.  ``docs_with_key`` hashes
a cached token stream's n-grams (ngrams.py's hash) and finds the documents that hold one
of the keys: the first step of an incremental rescan.  With a ``lead`` gate (a bit filter of
the first three tokens of each key's n-gram, ``lead_values``) it hashes only the positions
whose first three tokens pass it: about one in seventy for one task's keys on host text.
"""

from __future__ import annotations

import math

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


# -- the lookup table of a sorted key array: a directory of its top bits ------------------------------------------------
# ``table[b]`` is the first position in the sorted keys of a key whose top d bits are >= b (2**d + 1 entries, about
# four to eight keys a bucket): a lookup reads two entries of the directory and binary-searches the few keys between them,
# all in one or two cache lines of the keys.  Built in one pass over the keys in order (counts, then their sums), it
# needs no memory but itself (1 to 2 bytes a key), and a process that maps it touches a page of it and a
# page of the keys a lookup.


def _dir_shift(table):
    """64 - d for a directory of 2**d + 1 entries."""
    n, s = len(table) - 1, 64
    while n > 1:
        n >>= 1
        s -= 1
    return np.uint64(s)


def _find(keys, table, h, dshift):
    """Index of ``h`` in the sorted ``keys`` through their directory ``table`` (``dshift``: `_dir_shift`), or -1."""
    b = np.int64(h >> dshift)
    lo, hi = table[b], table[b + 1]
    end = hi
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid] < h:
            lo = mid + 1
        else:
            hi = mid
    if lo < end and keys[lo] == h:
        return lo
    return -1


# the key filter (the index's ``bloom``): a word-blocked Bloom filter, three bits of one 64-bit word per key; the
# word: the key's top bits (``h >> shift >> 6``, shift = 64 - bits), the bits: its bits 0-5, 6-11 and 12-17
_B1, _B2, _B63 = np.uint64(6), np.uint64(12), np.uint64(63)


def _key_mask(h):
    one = np.uint64(1)
    return (one << (h & _B63)) | (one << ((h >> _B1) & _B63)) | (one << ((h >> _B2) & _B63))


def _may_hold(bloom, h, shift):
    """Whether the key filter ``bloom`` may hold ``h``: all three of its bits set in its word (no false miss)."""
    m = _key_mask(h)
    return (bloom[np.int64((h >> shift) >> _B1)] & m) == m


def _positions(hashes, keys, table, bloom, shift, out):
    dshift = _dir_shift(table)
    for i in range(len(hashes)):
        h = hashes[i]
        if _may_hold(bloom, h, shift):
            out[i] = _find(keys, table, h, dshift)
        else:
            out[i] = -1


# the lead gate's value of three tokens (a, b, c): a*_L1 + b*_L2 + c*_L3 mod 2**64 (any odd constants: a filter)
_L1, _L2, _L3 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9)


def bit_filter(values: np.ndarray, bits: int) -> np.ndarray:
    """One bit per top-``bits`` value of ``values`` (uint64 words): the lead gate's filter, without false negatives
    (a lead value's low bits are poor hash bits, so it takes one bit of its top ones, not the key filter's three)."""
    words = np.zeros(max(1, (1 << bits) // 64), dtype=np.uint64)
    b = np.asarray(values, dtype=np.uint64) >> np.uint64(64 - bits)
    np.bitwise_or.at(words, (b >> np.uint64(6)).astype(np.int64), np.left_shift(np.uint64(1), b & np.uint64(63)))
    return words


def filter_bits(n_keys: int, low: int = 16, high: int = 32) -> int:
    """The key filter's size for ``n_keys`` keys: 2**bits bits, about 16 a key (ceil(log2(keys * 16))), within
    [low, high] (32: 512 MB)."""
    return int(min(high, max(low, math.ceil(math.log2(max(1, n_keys) * 16)))))


def empty_filter(bits: int) -> np.ndarray:
    """The key filter of no key: 2**bits bits (uint64 words, at least one)."""
    return np.zeros(max(1, (1 << bits) // 64), dtype=np.uint64)


def add_to_filter(words: np.ndarray, keys: np.ndarray, bits: int) -> None:
    """Set the three bits of each of ``keys`` in the key filter ``words`` of 2**``bits`` bits: called on the keys a
    chunk at a time, it gives the filter ``key_filter`` gives them all."""
    h = np.asarray(keys, dtype=np.uint64)
    np.bitwise_or.at(words, (h >> np.uint64(64 - bits) >> _B1).astype(np.int64), key_mask(h))


def key_filter(keys: np.ndarray, bits: int) -> np.ndarray:
    """The key filter of ``keys`` in 2**``bits`` bits: a word-blocked Bloom filter, three bits of one 64-bit word
    per key (``may_hold`` tests it; the compiled kernels test it as ``_may_hold``)."""
    words = empty_filter(bits)
    add_to_filter(words, keys, bits)
    return words


def key_mask(hashes: np.ndarray) -> np.ndarray:
    """The three bits of each hash in its word of the key filter (uint64)."""
    h = np.asarray(hashes, dtype=np.uint64)
    one = np.uint64(1)
    return (one << (h & _B63)) | (one << ((h >> _B1) & _B63)) | (one << ((h >> _B2) & _B63))


def may_hold(words: np.ndarray, bits: int, hashes: np.ndarray) -> np.ndarray:
    """True where the key filter ``words`` of 2**``bits`` bits may hold a hash (numpy; no false negatives)."""
    h = np.asarray(hashes, dtype=np.uint64)
    if len(h) == 0:
        return np.zeros(0, dtype=bool)
    m = key_mask(h)
    return (words[(h >> np.uint64(64 - bits) >> _B1).astype(np.int64)] & m) == m


def lead_values(tokens: np.ndarray, n: int) -> np.ndarray:
    """The lead gate's value of every n-gram ``tokens[i:i+n]`` (its first three tokens; n >= 3)."""
    t = np.asarray(tokens, dtype=np.uint64)
    m = len(t) - n + 1
    if m <= 0:
        return np.zeros(0, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return t[:m] * _L1 + t[1 : m + 1] * _L2 + t[2 : m + 2] * _L3


def _docs_with_key(tokens, offsets, n, min_tokens, keys, table, bloom, shift, skip, out):
    dshift = _dir_shift(table)
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
            if _may_hold(bloom, h, shift):
                k = _find(keys, table, h, dshift)
                if k >= 0 and (len(skip) == 0 or not skip[k]):
                    out[found] = d
                    found += 1
                    break
    return found


def _docs_with_key_gated(tokens, offsets, n, min_tokens, keys, table, bloom, shift, skip, lead, lead_shift, out):
    dshift = _dir_shift(table)
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
            if _may_hold(bloom, h, shift):
                k = _find(keys, table, h, dshift)
                if k >= 0 and (len(skip) == 0 or not skip[k]):
                    out[found] = d
                    found += 1
                    break
    return found


if AVAILABLE:
    _probe = compiled.njit(inline="always")(_probe)
    _dir_shift = compiled.njit(inline="always")(_dir_shift)
    _find = compiled.njit(inline="always")(_find)
    _key_mask = compiled.njit(inline="always")(_key_mask)
    _may_hold = compiled.njit(inline="always")(_may_hold)
    _fill = compiled.njit()(_fill)
    _positions = compiled.njit(nogil=True)(_positions)
    _mix = compiled.njit(inline="always")(_ngram_mix)
    _docs_with_key = compiled.njit(nogil=True)(_docs_with_key)
    _docs_with_key_gated = compiled.njit(nogil=True)(_docs_with_key_gated)


def empty_slots(n_keys: int) -> np.ndarray:
    """The empty open-addressing table for ``n_keys`` keys (the prefilter's): a power of two at least twice as many
    slots, -1 each."""
    return np.full(1 << max(4, int(np.ceil(np.log2(2 * max(1, n_keys))))), -1, dtype=np.int32)


def slots_for(keys: np.ndarray) -> np.ndarray:
    """The open-addressing table of ``keys`` (filled where numba is installed): the prefilter's, whose keys are sorted
    within each of its levels (``_probe`` takes a level's range)."""
    slots = empty_slots(len(keys))
    if AVAILABLE:
        _fill(keys, slots, 0)
    return slots


def directory_bits(n_keys: int) -> int:
    """d of the directory of ``n_keys`` sorted keys: 2**d buckets, four to eight keys each (at least 2, at most 2**30)."""
    return int(min(30, max(1, math.ceil(math.log2(max(1, n_keys))) - 3)))


def empty_directory(n_keys: int) -> np.ndarray:
    """The counts a directory of ``n_keys`` keys starts from (int64, 2**d + 1 zeros): `count_keys` then
    `finish_directory`."""
    return np.zeros((1 << directory_bits(n_keys)) + 1, dtype=np.int64)


def count_keys(table: np.ndarray, keys: np.ndarray) -> None:
    """Count ``keys`` (a chunk of the sorted array, any order of chunks) into their buckets of ``table``."""
    d = (len(table) - 1).bit_length() - 1
    h = np.asarray(keys, dtype=np.uint64)
    table[1:] += np.bincount((h >> np.uint64(64 - d)).astype(np.int64), minlength=len(table) - 1)


def finish_directory(table: np.ndarray) -> np.ndarray:
    """The counts summed in place: ``table[b]``, the first position of bucket ``b`` in the sorted keys."""
    np.cumsum(table, out=table)
    return table


def directory_for(keys: np.ndarray) -> np.ndarray:
    """The lookup table of the sorted ``keys`` (`positions`, `docs_with_key`): the directory of their top bits."""
    table = empty_directory(len(keys))
    count_keys(table, keys)
    return finish_directory(table)


def positions(hashes: np.ndarray, keys: np.ndarray, table: np.ndarray, bloom: np.ndarray, bloom_bits: int) -> np.ndarray:
    """Position in the sorted ``keys`` of every hash, -1 where absent (int64); ``table``: their directory
    (``directory_for``); ``bloom``: the key filter of ``keys`` in 2**``bloom_bits`` bits (``key_filter``)."""
    out = np.empty(len(hashes), dtype=np.int64)
    _positions(np.ascontiguousarray(hashes, dtype=np.uint64), keys, table, bloom, np.uint64(64 - bloom_bits), out)
    return out


def docs_with_key(tokens: np.ndarray, offsets: np.ndarray, n: int, min_tokens: int, keys: np.ndarray, table: np.ndarray,
                  bloom: np.ndarray, bloom_bits: int, lead: tuple[np.ndarray, int] | None = None,
                  skip: np.ndarray | None = None) -> np.ndarray:
    """Documents (``tokens[offsets[d]:offsets[d+1]]``, at least ``min_tokens`` long) holding an n-gram whose hash is
    in ``keys`` (ascending; ``table``: their directory, ``directory_for``); n-grams never span two documents.  ``lead``: (bit filter, its bits) of the
    ``lead_values`` of every key's n-gram (n >= 3), or None; ``skip``: a bool per key, True for one that is not
    looked for (an index's hot keys), or None.  Needs numba."""
    out = np.empty(max(0, len(offsets) - 1), dtype=np.int64)
    args = (np.asarray(tokens), np.ascontiguousarray(offsets, dtype=np.int64), np.int64(n), np.int64(min_tokens), keys,
            table, bloom, np.uint64(64 - bloom_bits), np.zeros(0, dtype=np.bool_) if skip is None else skip)
    if lead is not None and n >= 3:
        found = _docs_with_key_gated(*args, lead[0], np.uint64(64 - lead[1]), out)
    else:
        found = _docs_with_key(*args, out)
    return out[:found]
