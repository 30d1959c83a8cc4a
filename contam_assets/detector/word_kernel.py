"""The word cache's lookups compiled (numba): a batch of cleaned documents to token ids in one walk.

tokenize._WordCache keeps every distinct word's cl100k ids back to back and a dict from
word to slot; looking a document's words up in that dict needs one Python bytes object
per word (split, the dict, the gather), which is most of what tokenizing costs.  This
module keeps a second index over the same slots -- an open-addressing table of the
64-bit FNV-1a hashes of the words' bytes, each hit checked against the word's stored
bytes, so a hash collision can never hand out another word's ids -- and walks a batch of
documents in text.translate_bytes form (words separated by spaces) once: split, hash,
look up, copy the ids.  The words it does not find are handed back to the cache, which
encodes them (tiktoken) and adds them here; the documents that held them are walked again.
A word longer than ``max_word`` bytes sends its document back to the Python path (the
word rule cuts such words, text.MAX_WORD_CHARS).

The ids are those of the word rule (tokenize.py): a document's ids are its words' ids,
back to back; `test_scan_kernels.py` holds them equal to tiktoken on the whole text.
"""

from __future__ import annotations

import numpy as np

from contam_assets.detector import compiled

AVAILABLE = compiled.numba_installed()
_OFFSET = np.uint64(0xCBF29CE484222325)  # FNV-1a 64
_PRIME = np.uint64(0x100000001B3)
_SHIFT = np.uint64(29)  # the table's slot: bits from 29 on of the hash
SPACE = 32


def _fnv(buf, a, b):
    """FNV-1a 64 of ``buf[a:b]``."""
    h = _OFFSET
    for p in range(a, b):
        h = (h ^ np.uint64(buf[p])) * _PRIME
    return h


def _find(table, w_hash, w_off, w_len, arena, buf, p, n, h):
    """Slot of the word ``buf[p:p+n]`` (hash ``h``), or -1."""
    mask = len(table) - 1
    s = np.int64(h >> _SHIFT) & mask
    while True:
        k = table[s]
        if k < 0:
            return -1
        if w_hash[k] == h and w_len[k] == n:
            o = w_off[k]
            same = True
            for j in range(n):
                if arena[o + j] != buf[p + j]:
                    same = False
                    break
            if same:
                return k
        s = (s + 1) & mask


def _place(table, h, k):
    mask = len(table) - 1
    s = np.int64(h >> _SHIFT) & mask
    while table[s] >= 0:
        s = (s + 1) & mask
    table[s] = k


def _insert(table, w_hash, w_off, w_len, arena, used, words, bounds, slot_ids):
    """Add words (``words[bounds[i]:bounds[i+1]]`` goes to slot ``slot_ids[i]``); their bytes go to the arena from
    ``used`` on.  Returns the arena's new end."""
    for i in range(len(slot_ids)):
        a, b = bounds[i], bounds[i + 1]
        h = _fnv(words, a, b)
        arena[used : used + b - a] = words[a:b]
        k = slot_ids[i]
        w_hash[k], w_off[k], w_len[k] = h, used, b - a
        used += b - a
        _place(table, h, k)
    return used


def _rehash(table, w_hash, slot_ids):
    table[:] = -1
    for k in slot_ids:
        _place(table, w_hash[k], k)


def _encode(buf, starts, ends, docs, table, w_hash, w_off, w_len, arena, t_start, t_len, flat, max_word,
            out, n_tok, status, miss_at, miss_len):
    """Token ids of documents ``docs`` (bytes ``buf[starts[i]:ends[i]]``), back to back in ``out``, their counts in
    ``n_tok``; ``status`` per document: 0 done, 1 a word not in the index (recorded in ``miss_at``/``miss_len``),
    2 a word longer than ``max_word`` bytes.  Returns (ids written, misses recorded, words seen)."""
    o = 0
    nm = 0
    nw = 0
    for d in range(len(docs)):
        i = docs[d]
        p, end = starts[i], ends[i]
        o0 = o
        st = 0
        while p < end:
            if buf[p] == SPACE:
                p += 1
                continue
            q = p
            h = _OFFSET  # _fnv, computed while the word's end is found (one pass over its bytes)
            while q < end and buf[q] != SPACE:
                h = (h ^ np.uint64(buf[q])) * _PRIME
                q += 1
            n = q - p
            nw += 1
            if n > max_word:
                st = 2
                break
            k = _find(table, w_hash, w_off, w_len, arena, buf, p, n, h)
            if k < 0:
                st = 1
                miss_at[nm], miss_len[nm] = p, n
                nm += 1
            elif st == 0:
                a = t_start[k]
                for j in range(t_len[k]):
                    out[o] = flat[a + j]
                    o += 1
            p = q
        if st != 0:
            o = o0
        n_tok[d] = o - o0
        status[d] = st
    return o, nm, nw


def fnv1a(word: bytes) -> int:
    """The hash the index keeps of a word (64-bit FNV-1a of its bytes)."""
    return int(_fnv(np.frombuffer(word, dtype=np.uint8), 0, len(word)))


if AVAILABLE:
    _fnv = compiled.njit(inline="always")(_fnv)
    _find = compiled.njit(inline="always")(_find)
    _place = compiled.njit(inline="always")(_place)
    _insert = compiled.njit()(_insert)
    _rehash = compiled.njit()(_rehash)
    _encode = compiled.njit(nogil=True)(_encode)


class WordIndex:
    """The compiled index of a word cache's bytes words (slot ids are the cache's)."""

    def __init__(self):
        self.clear()

    def clear(self) -> None:
        self.table = np.full(1 << 12, -1, dtype=np.int32)
        self.w_hash = np.zeros(1 << 11, dtype=np.uint64)
        self.w_off = np.zeros(1 << 11, dtype=np.int64)
        self.w_len = np.zeros(1 << 11, dtype=np.int64)
        self.arena = np.zeros(1 << 16, dtype=np.uint8)
        self.used = 0
        self.slot_ids: list[np.ndarray] = []
        self.count = 0

    def add(self, slots: range, words: list) -> None:
        """Index the bytes words among ``words`` (the cache put them at ``slots``; str words are left out)."""
        pairs = [(k, w) for k, w in zip(slots, words) if isinstance(w, bytes)]
        if not pairs:
            return
        ids = np.fromiter((k for k, _ in pairs), dtype=np.int64, count=len(pairs))
        data = b"".join(w for _, w in pairs)
        bounds = np.zeros(len(pairs) + 1, dtype=np.int64)
        np.cumsum(np.fromiter((len(w) for _, w in pairs), dtype=np.int64, count=len(pairs)), out=bounds[1:])
        top = int(ids.max()) + 1
        if top > len(self.w_hash):
            size = max(top, 2 * len(self.w_hash))
            self.w_hash, self.w_off, self.w_len = (np.resize(a, size) for a in (self.w_hash, self.w_off, self.w_len))
        if self.used + len(data) > len(self.arena):
            self.arena = np.resize(self.arena, max(self.used + len(data), 2 * len(self.arena)))
        self.slot_ids.append(ids)
        self.count += len(ids)
        if 2 * self.count > len(self.table):  # at most half full: short probes
            size = len(self.table)
            while 2 * self.count > size:
                size *= 2
            self.table = np.full(size, -1, dtype=np.int32)
            self.slot_ids = [np.concatenate(self.slot_ids)]
            old = self.slot_ids[0][: -len(ids)]
            _rehash(self.table, self.w_hash, old)
        self.used = _insert(self.table, self.w_hash, self.w_off, self.w_len, self.arena, self.used,
                            np.frombuffer(data, dtype=np.uint8), bounds, ids)

    def encode(self, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, docs: np.ndarray, t_start: np.ndarray,
               t_len: np.ndarray, flat: np.ndarray, max_word: int):
        """(ids, counts, status, miss_at, miss_len, words) of documents ``docs`` (see ``_encode``)."""
        n = len(docs)
        span = int((ends[docs] - starts[docs]).sum()) if n else 0
        # a word of m bytes has at most m + 1 ids (" " + word, every token at least one byte): at most span + words ids
        out = np.empty(2 * span + 1, dtype=np.uint64)
        n_tok = np.empty(n, dtype=np.int64)
        status = np.empty(n, dtype=np.int8)
        miss_at = np.empty(span + 1, dtype=np.int64)  # at most one word per byte
        miss_len = np.empty(span + 1, dtype=np.int64)
        o, nm, nw = _encode(buf, starts, ends, docs, self.table, self.w_hash, self.w_off, self.w_len, self.arena,
                        t_start, t_len, flat, max_word, out, n_tok, status, miss_at, miss_len)
        return out[:o], n_tok, status, miss_at[:nm], miss_len[:nm], nw
