"""Recall-safe prefilter: skip, before tokenizing, documents that hold no candidate worth keeping.

The check reads the document's cleaned bytes only (no tokenizer, no n-gram hashing)
and passes every document that *could* hold a flagged match or a stored candidate
(one scoring at least the report floor): a document it clears provably holds neither,
so the match rows -- flags, removals and near misses -- are the same with and without
it.  The anchors it looks for, and why each test is safe, are in anchors.py.

Document side.  The text is unescaped, lowercased and its punctuation and whitespace
become spaces (text.translate_bytes, as for the scan); runs of spaces collapse and a
space goes in front.  Every window that starts at a space is hashed at the LEVELS and
SHORT lengths and looked up.
A document passes when, for some group, the weights of the distinct anchors it shows
reach the group's need; when it holds one of the fallback 4-byte windows; or when its
bytes may differ from what the tokenizer sees: a lone surrogate (tiktoken replaces
it) or a run of more than 256 bytes between spaces (clean_text cuts long words).

Why that is enough.  A candidate of record r has question overlap q = idf(M) / T (scan.py),
M being the n-gram keys its cluster matched.  A key in M is the hash of 5 of the document's
tokens, so (up to a 64-bit hash collision, the assumption the scan itself makes) those
tokens are the question's and their bytes -- the n-gram's bytes -- occur in the bytes the
tokenizer encoded, which are the collapsed bytes above.  Every anchor of such an n-gram lies
inside those bytes and is tested at its position, so it is among the hits; anchors.py bounds
idf(M) by the anchors hit.  Anchor hashes are 64-bit: a collision can only add a hit.
"""

from __future__ import annotations

import hashlib
import json
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from contam_assets.detector.anchors import (
    LEVELS,
    N_TABLES,
    SHORT,
    build_anchors,
    flag_bar,
    keep_bar,
    quad_slots,
    rule_floor,
    short_hashes,
    table_bits,
    u64_view,
    window_hashes,
)
from contam_assets.detector.config import DetectConfig
from contam_assets.detector.index import NgramIndex, encode_texts, write_npz
from contam_assets.detector.text import CleanOptions, translate_bytes

__all__ = ["Prefilter", "ensure_prefilter", "flag_bar", "keep_bar", "rule_floor"]
# a lone surrogate in translate_bytes' output (surrogatepass): ED A0-BF never occurs in valid UTF-8
_SURROGATE = re.compile(rb"\xed[\xa0-\xbf]")
MAX_RUN = 256  # text.MAX_WORD_CHARS: longer runs are cut by clean_text, so such documents always pass


def params_of(cfg: DetectConfig) -> dict:
    """Everything the anchors depend on besides the index itself."""
    out = dict(tokenizer=cfg.tokenizer, ngram_size=cfg.ngram_size, threshold=cfg.threshold,
               decay_start=cfg.decay_start, decay_end=cfg.decay_end, levels=list(LEVELS), short=list(SHORT),
               keeps="stored", candidate_question_floor=cfg.candidate_question_floor)
    if rule_floor(cfg) < 1.0:
        out["rule_floor"] = rule_floor(cfg)
    return out


FORMAT_VERSION = 1  # of the anchors and of the saved file: a change of either makes the saved ones stale
ARRAYS = ("keys", "level_off", "offsets", "groups", "weights", "need", "tables", "table_off")


@dataclass
class Prefilter:
    keys: np.ndarray  # uint64 anchor hashes: one sorted unique run per table (LEVELS, SHORT)
    level_off: np.ndarray  # int64, N_TABLES+1: table j's anchors are keys[level_off[j]:level_off[j+1]]
    offsets: np.ndarray  # int64 CSR: anchor i belongs to groups[offsets[i]:offsets[i+1]]
    groups: np.ndarray  # int32
    weights: np.ndarray  # float64 per CSR entry: what the anchor adds to that group's sum
    need: np.ndarray  # float64 per group: the sum a document must reach (0: never)
    tables: np.ndarray  # uint8 bit sets, one per table (table_off), over the top bits of the anchor hashes
    table_off: np.ndarray  # int64, N_TABLES+1
    params_json: str
    always_pass: bool = False
    pairs: np.ndarray | None = None  # uint8 bit set over anchors.quad_slots: a document holding one is scanned

    def _lookup(self, j: int, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(indices into h, anchor ids) of the hashes that are table-j anchors."""
        a, b = int(self.level_off[j]), int(self.level_off[j + 1])
        if b == a:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        table = self.tables[self.table_off[j] : self.table_off[j + 1]]
        slot = h >> np.uint64(64 - int(np.log2(len(table) * 8)))
        maybe = np.flatnonzero((table[(slot >> np.uint64(3)).astype(np.int64)] >> (slot & np.uint64(7)).astype(np.uint8)) & 1)
        cand = h[maybe]
        keys = self.keys[a:b]
        i = np.minimum(np.searchsorted(keys, cand), len(keys) - 1)
        found = keys[i] == cand
        return maybe[found], a + i[found]

    def matches(self, cfg: DetectConfig) -> bool:
        return {k: v for k, v in json.loads(self.params_json).items() if k != "tasks"} == params_of(cfg)

    def nbytes(self) -> int:
        arrays = (self.keys, self.level_off, self.offsets, self.groups, self.weights, self.need, self.tables, self.table_off)
        return sum(a.nbytes for a in arrays) + (self.pairs.nbytes if self.pairs is not None else 0)

    def save(self, path: Path) -> None:
        """All arrays and the key in one .npz, written whole under a temporary name (two savers never collide)."""
        arrays = {k: getattr(self, k) for k in ARRAYS}
        if self.pairs is not None:
            arrays["pairs"] = self.pairs
        write_npz(path, dict(params_json=self.params_json, always_pass=self.always_pass), arrays)

    @classmethod
    def load(cls, path: Path) -> "Prefilter":
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(bytes(z["__meta__"]).decode())
            return cls(**{k: z[k] for k in ARRAYS}, params_json=meta["params_json"], always_pass=meta["always_pass"],
                       pairs=z["pairs"] if "pairs" in z.files else None)

    # -- the document side ---------------------------------------------------------
    def must_scan(self, texts: list[str], options: CleanOptions, compiled: bool | None = None) -> np.ndarray:
        """Per document: True when it may hold a flagged match or a stored candidate (scan it), False when it
        provably holds neither.  ``compiled``: the byte pass of prefilter_kernel.py (default, where numba is
        installed) or the numpy reference pass (False); both give the same answer."""
        if self.always_pass or not texts:
            return np.ones(len(texts), dtype=bool)
        return self.must_scan_translated([translate_bytes(t, options) for t in texts], compiled)

    def must_scan_translated(self, parts: list[bytes], compiled: bool | None = None) -> np.ndarray:
        """``must_scan`` of documents given as text.translate_bytes output (what the scan tokenizes)."""
        if self.always_pass or not parts:
            return np.ones(len(parts), dtype=bool)
        return self._passing(*self.hits_translated(parts, compiled))

    def hits(self, texts: list[str], options: CleanOptions, compiled: bool | None = None
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(document, anchor id) of every anchor found in ``texts``, and the documents forced to a scan."""
        return self.hits_translated([translate_bytes(t, options) for t in texts], compiled)

    def hits_translated(self, parts: list[bytes], compiled: bool | None = None
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``hits`` of documents given as text.translate_bytes output."""
        n = len(parts)
        forced = np.zeros(n, dtype=bool)
        for i, p in enumerate(parts):
            if not p.isascii() and _SURROGATE.search(p):  # lone surrogates: tiktoken sees other bytes
                forced[i] = True
        if forced.any():
            parts = [b"" if f else p for p, f in zip(parts, forced.tolist())]
        # "\0 " before every document: the space the tokenizer puts in front; \0 keeps documents apart
        lens = np.fromiter(map(len, parts), dtype=np.int64, count=n) + 2
        starts = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lens, out=starts[1:])
        raw = np.frombuffer(b"\0 " + b"\0 ".join(parts) + bytes(24), dtype=np.uint8)
        kernel = compiled_pass() if compiled is not False else None
        if kernel is None:
            doc, anchor = self._byte_pass_reference(raw, starts, forced)
        else:
            filt = self.__dict__.get("_filters")
            if filt is None:
                filt = self.__dict__["_filters"] = kernel.filters(self.keys, self.level_off)
            doc, anchor = kernel.byte_pass(raw, starts, self.keys, self.level_off, filt, self.pairs, MAX_RUN, forced)
        return doc, anchor, forced

    def _byte_pass_reference(self, raw: np.ndarray, starts: np.ndarray, forced: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The byte pass in numpy (the reference of prefilter_kernel.byte_pass): (document, anchor id) of every
        anchor hit; sets ``forced`` for long runs and fallback windows."""
        space = raw == 32
        drop = space[1:] & space[:-1]  # a space right after a space: collapse runs of spaces
        keep = np.concatenate(([True], ~drop))
        buf = raw[keep].tobytes()
        # a document's "\0" is kept; it moves left by the number of bytes dropped before it
        doc_start = starts[:-1] - np.searchsorted(np.flatnonzero(drop) + 1, starts[:-1])
        arr = np.frombuffer(buf, dtype=np.uint8)
        spaces = np.flatnonzero(arr == 32)
        # a run of more than MAX_RUN bytes between spaces is cut by clean_text: scan such documents
        # (every document starts with a space, so a run never hides behind a document boundary)
        seps = np.append(spaces, len(buf) - 24)
        long_run = seps[:-1][np.diff(seps) - 1 > MAX_RUN]
        forced[np.searchsorted(doc_start, long_run, side="right") - 1] = True
        # every space is followed by at least 24 bytes (the zero padding), so all three windows can be read
        starts_ok = spaces
        hashes = window_hashes(u64_view(buf), starts_ok)
        hit_pos, hit_anchor = [], []
        for j, W in enumerate(LEVELS):
            where, anchor = self._lookup(j, hashes[W])
            hit_pos.append(starts_ok[where])
            hit_anchor.append(anchor)
        view = u64_view(buf)
        for j, W in enumerate(SHORT, start=len(LEVELS)):
            if self.level_off[j + 1] > self.level_off[j]:
                where, anchor = self._lookup(j, short_hashes(view, starts_ok, W))
                hit_pos.append(starts_ok[where])
                hit_anchor.append(anchor)
        if self.pairs is not None:  # the last fallback: a document holding one of these 4-byte windows is scanned
            v = quad_slots(view, np.arange(len(buf) - 24, dtype=np.int64))
            at = np.flatnonzero((self.pairs[v >> np.uint64(3)] >> (v & np.uint64(7)).astype(np.uint8)) & 1)
            forced[np.unique(np.searchsorted(doc_start, at, side="right") - 1)] = True
        p = np.concatenate(hit_pos)
        return np.searchsorted(doc_start, p, side="right") - 1, np.concatenate(hit_anchor)

    def _passing(self, doc: np.ndarray, a: np.ndarray, forced: np.ndarray) -> np.ndarray:
        """Documents forced, or whose distinct anchors reach some group's need."""
        passing = forced.copy()
        if len(doc):
            count = self.offsets[a + 1] - self.offsets[a]
            ends = np.cumsum(count)
            entry = np.repeat(self.offsets[a] - (ends - count), count) + np.arange(int(ends[-1]) if len(ends) else 0)
            grp = self.groups[entry]
            doc_r, anchor_r = np.repeat(doc, count), np.repeat(a, count)
            n_groups, n_anchors = len(self.need), len(self.keys)
            # distinct (document, group, anchor); their weights summed per (document, group) against its need
            trip, first = np.unique((doc_r * n_groups + grp) * n_anchors + anchor_r, return_index=True)
            pair, inverse = np.unique(trip // n_anchors, return_inverse=True)
            total = np.bincount(inverse, weights=self.weights[entry[first]], minlength=len(pair))
            need = self.need[pair % n_groups]
            ok = (need > 0) & (total >= need)
            passing[np.unique(pair[ok] // n_groups)] = True
        return passing


def compiled_pass():
    """The module prefilter_kernel, imported on first use (numba loads in ~0.3 s, and its compiled code from the
    cache in ~0.5 s more on the first call of a process); None where numba is not installed."""
    from contam_assets.detector import compiled, prefilter_kernel

    return prefilter_kernel if prefilter_kernel.AVAILABLE and compiled.enabled() else None


def ensure_prefilter(index: NgramIndex, records: pl.DataFrame, cfg: DetectConfig,
                     tasks: list[str] | None = None, folder: Path | None = None) -> Prefilter:
    """The prefilter of ``index`` for ``cfg`` (and, with ``tasks``, for those tasks' records only: the
    per-task rescan): built beside the index on first use and kept with it, one per config and task list.
    With ``folder`` (the index's own folder) it is read from there when saved before, else built and saved
    there: building the anchors of every task takes seconds, reading them milliseconds."""
    cache = index.__dict__.setdefault("_prefilters", {})
    key = json.dumps(params_of(cfg) | {"tasks": sorted(tasks) if tasks is not None else None}, sort_keys=True)
    pf = cache.get(key)
    if pf is not None:
        return pf
    name = f"prefilter-v{FORMAT_VERSION}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.npz"
    path = Path(folder) / name if folder else None
    if path is not None and path.exists():
        try:
            pf = Prefilter.load(path)
        except (OSError, ValueError, KeyError, zipfile.BadZipFile):
            pf = None  # unreadable (a disk error, a file cut short by hand): built and written again
        if pf is not None and pf.params_json != key:
            pf = None
    if pf is None:
        pf = build_prefilter(index, records, cfg, tasks, key)
        if path is not None:
            pf.save(path)
    cache[key] = pf
    pf.must_scan(["warm up"], cfg.clean_options)  # the compiled pass loaded here, once per process, not in a shard
    return pf


def build_prefilter(index: NgramIndex, records: pl.DataFrame, cfg: DetectConfig, tasks: list[str] | None,
                    key: str) -> Prefilter:
    """The anchors of the indexed records' questions (of ``tasks`` only, when given), packed."""
    recs = records.filter(pl.col("indexed")).sort("record_id")
    if not np.array_equal(recs["record_id"].to_numpy(), index.record_ids):
        raise ValueError("records do not match the index (rebuild the index)")
    locals_ = np.arange(recs.height) if tasks is None else np.flatnonzero(recs["task"].is_in(list(tasks)).to_numpy())
    q_cleaned: list[str] = []
    q_tokens = encode_texts(recs["question"].gather(locals_).to_list(), cfg, q_cleaned)
    a = build_anchors(q_tokens, q_cleaned, index.lookup, index.hot, index.q_idf, index.q_idf_sum[locals_],
                      index.q_len[locals_], cfg)
    return pack(a.hashes, a.tables, a.groups, a.weights, a.need, key, a.always_pass, a.pairs)


def pack(hashes: np.ndarray, levels: np.ndarray, groups: np.ndarray, weights: np.ndarray, need: np.ndarray,
         params_json: str, always_pass: bool, pairs: np.ndarray | None = None) -> Prefilter:
    """The lookup structure of (anchor hash, table, group, weight) entries."""
    order = np.lexsort((groups, hashes, levels))
    hashes, levels, groups, weights = hashes[order], levels[order], groups[order], weights[order]
    # unique (table, hash) pairs, in table order
    new = np.ones(len(hashes), dtype=bool)
    new[1:] = (hashes[1:] != hashes[:-1]) | (levels[1:] != levels[:-1])
    first = np.flatnonzero(new)
    keys, key_level = hashes[first], levels[first]
    offsets = np.append(first, len(hashes)).astype(np.int64)
    level_off = np.searchsorted(key_level, np.arange(N_TABLES + 1)).astype(np.int64)
    tables, table_off = [], [0]
    for j in range(N_TABLES):
        k = keys[level_off[j] : level_off[j + 1]]
        bits = table_bits(len(k))
        slot = k >> np.uint64(64 - bits)
        t = np.zeros(1 << (bits - 3), dtype=np.uint8)
        np.bitwise_or.at(t, (slot >> np.uint64(3)).astype(np.int64), np.left_shift(1, (slot & np.uint64(7)).astype(np.uint8)).astype(np.uint8))
        tables.append(t)
        table_off.append(table_off[-1] + len(t))
    return Prefilter(keys=keys, level_off=level_off, offsets=offsets, groups=groups.astype(np.int32),
                     weights=weights.astype(np.float64), need=need.astype(np.float64),
                     tables=np.concatenate(tables), table_off=np.array(table_off, dtype=np.int64),
                     params_json=params_json, always_pass=always_pass, pairs=pairs)
