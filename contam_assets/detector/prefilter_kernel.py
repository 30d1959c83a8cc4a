"""The prefilter's byte pass compiled (numba): one walk over a batch's cleaned bytes.

`Prefilter.must_scan_reference` (prefilter.py) does the same in numpy, about thirty passes
over byte- and word-sized temporaries; this kernel reads every byte once and every space
once, with the same hash functions (anchors.py), so its hits and forced documents are
the reference's exactly (`test_prefilter_kernel.py` holds them side by side).

What it does, per batch (documents joined as b"\\0 " + cleaned bytes, as prefilter.py):
collapse runs of spaces; mark documents with a run of more than ``max_run`` bytes between
spaces; at every space hash the 24-, 16- and 8-byte windows (and the 4-byte one) and look
each up in its table's blocked Bloom filter, then in the hash table of the keys; with ``pairs``, mark documents
holding a fallback 4-byte window at any byte.  The group sums stay in prefilter.py.
"""

from __future__ import annotations

import numpy as np

from contam_assets.detector import compiled
from contam_assets.detector.anchors import _C, _LEVEL, _QUAD_MULT, _S, _SHORT, LEVELS, QUAD_BITS, SHORT
from contam_assets.detector.key_table import _probe, slots_for

AVAILABLE = compiled.numba_installed()
# the same constants as anchors.window_hashes / short_hashes / quad_slots, in table order (LEVELS, then SHORT)
_C0, _C1, _C2 = _C
_L24, _L16, _L8 = (_LEVEL[W] for W in LEVELS)
_SMASK, _SMULT = _SHORT[SHORT[0]]
_QMASK = np.uint64(0xFFFFFFFF)
_QSHIFT = np.uint64(64 - QUAD_BITS)
_B, _B1, _B2 = np.uint64(63), np.uint64(6), np.uint64(12)  # the three bits of a key in its block
BITS_PER_KEY = 16  # filter size: 1.3 MB for the 670,000 anchors of every task, where the bit sets take 6.8 MB
assert LEVELS == (24, 16, 8) and SHORT == (4,), "the kernel hard-codes the anchor tables"


def _word(buf, p):
    """Little-endian 64-bit word of the 8 bytes at ``p`` (an unsigned index: numba then adds no negative-index
    wraparound, and the eight byte loads become one)."""
    q = np.uint64(p)
    v = np.uint64(0)
    for k in range(8):
        v |= np.uint64(buf[q + np.uint64(k)]) << np.uint64(8 * k)
    return v


def _mix(x, mult):
    x = (x ^ (x >> _S)) * mult
    return x ^ (x >> _S)


def _maybe(h, j, blocks, block_off, shifts):
    """Whether table ``j``'s filter may hold hash ``h``: three bits of one 64-bit block (no false miss; a false
    hit for about one window in 200)."""
    m = (np.uint64(1) << (h & _B)) | (np.uint64(1) << ((h >> _B1) & _B)) | (np.uint64(1) << ((h >> _B2) & _B))
    return (blocks[block_off[j] + np.int64(h >> shifts[j])] & m) == m


def _pass(raw, starts, keys, level_off, blocks, block_off, shifts, slots, pairs, use_pairs, max_run, forced):
    """(hit documents, hit anchor ids) of a batch; sets ``forced`` for long runs and fallback windows."""
    n = len(starts) - 1
    buf = np.empty(len(raw), dtype=np.uint8)
    doc_start = np.empty(n + 1, dtype=np.int64)
    w = 0
    n_spaces = 0
    prev = np.uint8(0)
    for i in range(n):  # collapse runs of spaces (across the whole batch, as the reference does)
        doc_start[i] = w
        for p in range(starts[i], starts[i + 1]):
            c = raw[np.uint64(p)]
            if c == 32:
                if prev == 32:
                    continue
                n_spaces += 1
            buf[np.uint64(w)] = c
            w += 1
            prev = c
    end = doc_start[n] = w  # the 24 zero bytes of padding follow
    for p in range(starts[n], len(raw)):
        buf[w] = raw[p]
        w += 1
    # 1. every space: its four window hashes through the tables' bit sets; what passes is kept for step 2
    #    (room for all four at every space: untouched pages of np.empty cost no memory)
    cand_doc = np.empty(4 * n_spaces, dtype=np.int64)
    cand_hash = np.empty(4 * n_spaces, dtype=np.uint64)
    cand_table = np.empty(4 * n_spaces, dtype=np.int64)
    nc = 0
    # an empty table has no bit set
    on0, on1, on2, on3 = level_off[1] > level_off[0], level_off[2] > level_off[1], level_off[3] > level_off[2], level_off[4] > level_off[3]
    last_space = -1
    for i in range(n):
        lo, hi = doc_start[i], doc_start[i + 1]
        if use_pairs:  # a fallback 4-byte window at any byte of the document (or across its end)
            x = _word(buf, lo) & _QMASK  # the window at p, rolled one byte at a time
            for p in range(lo, hi):
                slot = np.int64((x * _QUAD_MULT) >> _QSHIFT)
                if (pairs[slot >> 3] >> (slot & 7)) & 1:
                    forced[i] = True
                    break
                x = (x >> np.uint64(8)) | (np.uint64(buf[np.uint64(p + 4)]) << np.uint64(24))
        for p in range(lo, hi):
            if buf[np.uint64(p)] != 32:
                continue
            if p - last_space - 1 > max_run and last_space >= 0:
                forced[i if last_space >= lo else i - 1] = True
            last_space = p
            v0, v1, v2 = _word(buf, p), _word(buf, p + 8), _word(buf, p + 16)
            a = v0 * _C0
            b = a ^ (v1 * _C1)
            c = b ^ (v2 * _C2)
            h = _mix(c, _L24)
            if on0 and _maybe(h, 0, blocks, block_off, shifts):
                cand_doc[nc], cand_hash[nc], cand_table[nc] = i, h, 0
                nc += 1
            h = _mix(b, _L16)
            if on1 and _maybe(h, 1, blocks, block_off, shifts):
                cand_doc[nc], cand_hash[nc], cand_table[nc] = i, h, 1
                nc += 1
            h = _mix(a, _L8)
            if on2 and _maybe(h, 2, blocks, block_off, shifts):
                cand_doc[nc], cand_hash[nc], cand_table[nc] = i, h, 2
                nc += 1
            h = _mix((v0 & _SMASK) * _C0, _SMULT)
            if on3 and _maybe(h, 3, blocks, block_off, shifts):
                cand_doc[nc], cand_hash[nc], cand_table[nc] = i, h, 3
                nc += 1
    if last_space >= 0 and end - last_space - 1 > max_run:  # the run after a batch's last space
        forced[n - 1] = True
    # 2. the few windows that passed a bit set: looked up in the hash table of the keys
    hit_doc = np.empty(nc, dtype=np.int64)
    hit_anchor = np.empty(nc, dtype=np.int64)
    nh = 0
    for m in range(nc):
        j = cand_table[m]
        k = _probe(keys, slots, cand_hash[m], level_off[j], level_off[j + 1])
        if k >= 0:
            hit_doc[nh], hit_anchor[nh] = cand_doc[m], k
            nh += 1
    return hit_doc[:nh], hit_anchor[:nh]


if AVAILABLE:
    _word = compiled.njit(inline="always")(_word)
    _mix = compiled.njit(inline="always")(_mix)
    _maybe = compiled.njit(inline="always")(_maybe)
    _pass = compiled.njit(nogil=True)(_pass)


def filters(keys: np.ndarray, level_off: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The kernel's lookup structures (blocks, block_off, shifts, slots).  Blocked Bloom filters of the anchor
    tables: a key sets three bits of the 64-bit block its top bits pick (smaller than the prefilter's one-bit
    sets, and fewer false hits go on); then an open-addressing table of every key (slots: key indices) in
    place of a binary search of the sorted keys."""
    blocks, block_off, shifts = [], [0], []
    for j in range(len(level_off) - 1):
        k = keys[level_off[j] : level_off[j + 1]]
        bits = max(1, int(np.ceil(np.log2(max(1, len(k)) * BITS_PER_KEY / 64))))
        b = np.zeros(1 << bits, dtype=np.uint64)
        m = (np.uint64(1) << (k & _B)) | (np.uint64(1) << ((k >> _B1) & _B)) | (np.uint64(1) << ((k >> _B2) & _B))
        np.bitwise_or.at(b, (k >> np.uint64(64 - bits)).astype(np.int64), m)
        blocks.append(b)
        block_off.append(block_off[-1] + len(b))
        shifts.append(64 - bits)
    return np.concatenate(blocks), np.array(block_off, dtype=np.int64), np.array(shifts, dtype=np.uint64), slots_for(keys)


def byte_pass(raw: np.ndarray, starts: np.ndarray, keys: np.ndarray, level_off: np.ndarray,
              filt: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray], pairs: np.ndarray | None, max_run: int,
              forced: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hits (document, anchor id) of the batch ``raw`` (documents at ``starts``, 24 zero bytes after the last),
    ``filt`` from :func:`filters`; ``forced`` is set for the documents that must be scanned whatever their anchors."""
    use_pairs = pairs is not None
    p = pairs if use_pairs else np.zeros(1, dtype=np.uint8)
    blocks, block_off, shifts, slots = filt
    return _pass(raw, starts, keys, level_off, blocks, block_off, shifts, slots, p, use_pairs, max_run, forced)
