"""The index build's per-record and per-bucket steps compiled (numba), each beside the plain numpy path it equals.

``encode_flat``: a batch's texts cleaned and tokenized as the scan does it (text.translate_bytes, then the word
walk of tokenize.encode_translated: the ids clean_text and encode_many give), as one array and offsets.
``ngram_sets``: every record's distinct n-gram hashes (ngrams.py's hash), sorted, in one walk over the tokens: a
record's n-grams are sorted alone (a few dozen values) instead of every n-gram of the batch at once.
``group_order``: a stable counting sort by a small group number (the spill's hash buckets, the idf's ranges).
``sort_pairs``: keys sorted with a payload, equal keys in their order of arrival (an LSD radix sort of the key's low
bits: the bits above them are one bucket's, all equal).
``idf_totals``: per record, the sum and the largest of its question keys' idf, one pass over the postings in order
(what ``np.add.at`` and ``np.maximum.at`` of the repeated idf give, without the per-posting array).  The compiled
setting off (or no numba) takes the numpy paths (ngrams.segment_ngram_hashes and unique_per_segment, argsort, ufunc.at);
`test_index_kernel.py` holds both equal.
"""

from __future__ import annotations

import numpy as np

from contam_assets.detector import compiled
from contam_assets.detector.ngrams import PRIME, SEED, ngram_hash, segment_ngram_hashes, unique_per_segment
from contam_assets.detector.ngrams import _mix as _ngram_mix

AVAILABLE = compiled.numba_installed()
_mix = _ngram_mix
RADIX_BITS = 11  # bits of the key sorted per pass of sort_pairs


def _sorted_distinct(buf, cnt, out, w):
    """``buf[:cnt]`` sorted and its distinct values appended to ``out`` at ``w``: (new w, how many)."""
    part = buf[:cnt]
    part.sort()
    out[w] = part[0]
    u = 1
    for i in range(1, cnt):
        if part[i] != part[i - 1]:
            out[w + u] = part[i]
            u += 1
    return w + u, u


def _ngram_sets(tokens, offsets, n, short, use, hashed, out, counts):
    m = len(offsets) - 1
    longest = 1
    for r in range(m):
        longest = max(longest, offsets[r + 1] - offsets[r])
    mixed = np.empty(longest, dtype=np.uint64)
    buf = np.empty(longest, dtype=np.uint64)
    w = 0
    for r in range(m):
        a, b = offsets[r], offsets[r + 1]
        size = b - a
        cnt = 0
        if len(use) and not use[r]:
            pass
        elif not hashed:
            for p in range(size):
                buf[p] = tokens[a + p]
            cnt = size
        elif size >= n:
            for p in range(size):
                mixed[p] = _mix(np.uint64(tokens[a + p]))
            cnt = size - n + 1
            for p in range(cnt):  # ngrams.py: h = SEED; h = (h ^ mix(t)) * PRIME per token; mix(h ^ n)
                h = SEED
                for j in range(n):
                    h = (h ^ mixed[p + j]) * PRIME
                buf[p] = _mix(h ^ np.uint64(n))
        elif short and size > 0:  # decon rule: a question shorter than n tokens is one n-gram of all its tokens
            h = SEED
            for j in range(size):
                h = (h ^ _mix(np.uint64(tokens[a + j]))) * PRIME
            buf[0] = _mix(h ^ np.uint64(size))
            cnt = 1
        counts[r] = 0
        if cnt:
            w, counts[r] = _sorted_distinct(buf, cnt, out, w)
    return w


def _group_order(group, n_groups, starts, order):
    counts = np.zeros(n_groups + 1, dtype=np.int64)
    for i in range(len(group)):
        counts[group[i] + 1] += 1
    for g in range(n_groups):
        counts[g + 1] += counts[g]
    starts[:] = counts
    for i in range(len(group)):
        g = group[i]
        order[counts[g]] = i
        counts[g] += 1


def _bucket_scatter(keys, payload, shift, n_groups, starts, keys_out, payload_out):
    counts = np.zeros(n_groups + 1, dtype=np.int64)
    for i in range(len(keys)):
        counts[np.int64(keys[i] >> shift) + 1] += 1
    for g in range(n_groups):
        counts[g + 1] += counts[g]
    starts[:] = counts
    for i in range(len(keys)):
        g = np.int64(keys[i] >> shift)
        keys_out[counts[g]] = keys[i]
        payload_out[counts[g]] = payload[i]
        counts[g] += 1


def _radix_pairs(keys, payload, bits, k2, p2):
    """Sorted by ``keys``' low ``bits`` bits, stable; the result in (keys, payload) or (k2, p2): True for the
    second."""
    n = len(keys)
    width = np.uint64(RADIX_BITS)
    mask = np.uint64((1 << RADIX_BITS) - 1)
    counts = np.zeros((1 << RADIX_BITS) + 1, dtype=np.int64)
    src_k, src_p, dst_k, dst_p = keys, payload, k2, p2
    swapped = False
    shift = np.uint64(0)
    while shift < bits:
        counts[:] = 0
        for i in range(n):
            counts[np.int64((src_k[i] >> shift) & mask) + 1] += 1
        if counts.max() < n:  # (one digit value for every key: nothing to move)
            for d in range(1 << RADIX_BITS):
                counts[d + 1] += counts[d]
            for i in range(n):
                d = np.int64((src_k[i] >> shift) & mask)
                dst_k[counts[d]] = src_k[i]
                dst_p[counts[d]] = src_p[i]
                counts[d] += 1
            src_k, dst_k = dst_k, src_k
            src_p, dst_p = dst_p, src_p
            swapped = not swapped
        shift += width
    return swapped


def _idf_totals(idf, df, docs, sums, largest):
    """Each key's idf added into ``sums`` and taken as the max into ``largest`` for its ``df`` postings (``docs``, key
    after key), one posting at a time in their order: the additions happen in the order ``np.add.at`` makes them, so
    every sum is the same float, bit for bit; the max is ``np.maximum``'s (the value held unless it is below the
    idf; a NaN, held or met, kept)."""
    p = 0
    for k in range(len(idf)):
        v = idf[k]
        for _ in range(df[k]):
            d = docs[p]
            sums[d] += v
            held = largest[d]
            largest[d] = held if (held >= v) | (held != held) else v  # a select, not a branch: no mispredictions
            p += 1


if AVAILABLE:
    _mix = compiled.njit(inline="always")(_ngram_mix)
    _sorted_distinct = compiled.njit(inline="always")(_sorted_distinct)
    _ngram_sets = compiled.njit(nogil=True)(_ngram_sets)
    _group_order = compiled.njit(nogil=True)(_group_order)
    _bucket_scatter = compiled.njit(nogil=True)(_bucket_scatter)
    _radix_pairs = compiled.njit(nogil=True)(_radix_pairs)
    _idf_totals = compiled.njit(nogil=True)(_idf_totals)


def _fast() -> bool:
    return AVAILABLE and compiled.enabled()


def ngram_sets(tokens: np.ndarray, offsets: np.ndarray, n: int, short: bool = False, use: np.ndarray | None = None,
               hashed: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Every record's (``tokens[offsets[r]:offsets[r+1]]``) distinct n-gram hashes, ascending, records in order, and
    how many each record has (int64).  ``short``: a record of 1..n-1 tokens is one n-gram of all of them (decon's
    question rule); ``use`` (bool per record): the others have none; ``hashed`` False: the distinct tokens instead.
    Equals ``unique_per_segment`` of ``segment_ngram_hashes`` (with the short n-grams added)."""
    m = len(offsets) - 1
    tokens = np.ascontiguousarray(tokens, dtype=np.uint64)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    if _fast():
        out = np.empty(len(tokens) + m, dtype=np.uint64)
        counts = np.zeros(m, dtype=np.int64)
        w = _ngram_sets(tokens, offsets, np.int64(n), short, np.zeros(0, np.bool_) if use is None else use, hashed,
                        out, counts)
        return out[:w], counts
    lens = np.diff(offsets)
    if not hashed:
        seg = np.repeat(np.arange(m), lens)
        keep = np.ones(len(tokens), dtype=bool) if use is None else np.repeat(use, lens)
        vals, seg = unique_per_segment(tokens[keep], seg[keep])
        return vals, np.bincount(seg, minlength=m).astype(np.int64)
    arrays = np.split(tokens, offsets[1:-1]) if m else []
    h, seg = segment_ngram_hashes(arrays, n, use)
    if short:
        few = np.flatnonzero((lens > 0) & (lens < n) if use is None else (lens > 0) & (lens < n) & use)
        h = np.concatenate([h, np.array([ngram_hash(arrays[i]) for i in few.tolist()], dtype=np.uint64)])
        seg = np.concatenate([seg, few.astype(np.int64)])
    h, seg = unique_per_segment(h, seg)
    return h.astype(np.uint64), np.bincount(seg, minlength=m).astype(np.int64)


def group_order(group: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """The order that sorts ``group`` (ints in [0, n_groups)) stably, and where each group starts in it (n_groups + 1
    values)."""
    group = np.ascontiguousarray(group, dtype=np.int64)
    if _fast():
        order, starts = np.empty(len(group), dtype=np.int64), np.empty(n_groups + 1, dtype=np.int64)
        _group_order(group, np.int64(n_groups), starts, order)
        return order, starts
    order = np.argsort(group, kind="stable")
    return order, np.searchsorted(group[order], np.arange(n_groups + 1), side="left")


def by_bucket(keys: np.ndarray, payload: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``keys`` (uint64) and ``payload`` in the order of the keys' top ``bits`` bits, stable, and where each of the
    2**bits buckets starts (2**bits + 1 values)."""
    if _fast():
        starts = np.empty((1 << bits) + 1, dtype=np.int64)
        k2, p2 = np.empty_like(keys), np.empty_like(payload)
        _bucket_scatter(keys, payload, np.uint64(64 - bits), np.int64(1 << bits), starts, k2, p2)
        return k2, p2, starts
    order, starts = group_order((keys >> np.uint64(64 - bits)).astype(np.int64), 1 << bits)
    return keys[order], payload[order], starts


def sort_pairs(keys: np.ndarray, payload: np.ndarray, bits: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """``keys`` (uint64) sorted and ``payload`` in the same order, equal keys in their order of arrival;
    ``bits``: the low bits that can differ (the others equal in every key).  Both arrays may be overwritten."""
    if _fast():
        k2, p2 = np.empty_like(keys), np.empty_like(payload)
        second = _radix_pairs(keys, payload, np.uint64(bits), k2, p2)
        return (k2, p2) if second else (keys, payload)
    order = np.argsort(keys, kind="stable")
    return keys[order], payload[order]


def idf_totals(idf: np.ndarray, df: np.ndarray, docs: np.ndarray, sums: np.ndarray, largest: np.ndarray) -> None:
    """``np.add.at(sums, docs, pair_idf)`` and ``np.maximum.at(largest, docs, pair_idf)`` in place, with ``pair_idf =
    np.repeat(idf, df)``: the postings ``docs`` of each key in turn, ``df`` of them (int64), with its ``idf`` (float64).
    The sums are added in the postings' order either way, so both paths give the same bits."""
    if _fast():
        _idf_totals(idf, df, docs, sums, largest)
        return
    pair_idf = np.repeat(idf, df)
    np.add.at(sums, docs, pair_idf)
    np.maximum.at(largest, docs, pair_idf)


def runs(sorted_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The first position of each distinct value of a sorted array and how many times it occurs (int64 each): what
    ``np.unique(..., return_index=True, return_counts=True)`` gives for sorted input, without sorting it again."""
    if not len(sorted_keys):
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    first = np.flatnonzero(np.concatenate(([True], sorted_keys[1:] != sorted_keys[:-1]))).astype(np.int64)
    return first, np.diff(np.append(first, len(sorted_keys))).astype(np.int64)


def vocabulary_flags(vocab: np.ndarray, flags: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """``flags[searchsorted(vocab, tokens)]``: the flag of every token (each one of the sorted ``vocab``), looked up
    in a table by id where the ids are small (token ids)."""
    if len(vocab) and int(vocab[-1]) < 1 << 24:
        table = np.zeros(int(vocab[-1]) + 1, dtype=flags.dtype)
        table[vocab.astype(np.int64)] = flags
        return table[tokens.astype(np.int64)]
    return flags[np.searchsorted(vocab, tokens)]


def value_counts(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(values, return_counts=True)`` of uint64 values (token ids: counted by bincount when small)."""
    if len(values) and int(values.max()) < 1 << 22:
        counts = np.bincount(values.astype(np.int64))
        v = np.flatnonzero(counts)
        return v.astype(np.uint64), counts[v].astype(np.int64)
    return np.unique(values, return_counts=True)


def encode_flat(texts: list, cfg) -> tuple[np.ndarray, np.ndarray]:
    """The ids ``index.encode_texts`` gives each text (None as ""), back to back (uint64), and offsets: the texts
    cleaned into bytes (text.translate_bytes) and their words looked up in one walk (tokenize.encode_translated),
    each distinct text once, as the scan tokenizes its documents."""
    from contam_assets.detector.index import ENCODE_CHUNK
    from contam_assets.detector.text import translate_bytes
    from contam_assets.detector.tokenize import get_tokenizer

    tok, opts = get_tokenizer(cfg.tokenizer), cfg.clean_options
    parts, lens = [], np.zeros(len(texts), dtype=np.int64)
    for start in range(0, len(texts), ENCODE_CHUNK):  # bounded: a chunk's cleaned texts at a time
        chunk = [t or "" for t in texts[start:start + ENCODE_CHUNK]]
        distinct = list(dict.fromkeys(chunk))
        enc = dict(zip(distinct, tok.encode_translated([translate_bytes(t, opts) if t else b"" for t in distinct])))
        ids = [enc[t] for t in chunk]
        lens[start:start + len(chunk)] = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        parts.append(np.concatenate(ids).astype(np.uint64) if ids else np.zeros(0, dtype=np.uint64))
    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    return (np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)), offsets
