"""Recall-safe prefilter: skip documents that cannot be flagged, before tokenizing them.

The check reads the document's cleaned bytes only (no tokenizer, no n-gram hashing)
and passes every document that *could* hold a flagged match.  A document that does
not pass provably has no flagged candidate, so removal decisions (flags) are the
same with and without the prefilter.  Stored near misses (candidates above the
report floor that are not flagged) of skipped documents are not kept: the bound
below is taken at the flag bar, not at the report floor.

Index side (built with the index, or on first use).  Records with the same cleaned
question form a *group* (an MMLU question and its four choices share their
question n-grams and flag bar).  A question n-gram g stands for the bytes its
tokens decode to, a substring of " " + cleaned question.  Its *anchor* is one
window inside those bytes that starts at a space, of the longest of 24, 16 or 8
bytes that fits (among several, the one fewest n-grams of the reference set
could produce).  The non-hot n-grams of a group that share an anchor form one
*unit*, whose idf is the sum of theirs.  With R the group's reachable n-grams
(all of them, for a question of at least n tokens), T its question idf total and

    need = max(min_q, q_required(q_len)) * T * (1 - 1e-9),

the build takes units (longest windows, rarest, largest idf first) until

    idf(R) - idf(taken units) + (sum of the m-1 largest taken unit idfs)  <  need

for the largest m <= 3 it can reach; the group keeps the anchors of the taken
units and ``m``.

Document side.  The text is unescaped, lowercased and its punctuation and
whitespace become spaces (text.translate_bytes, as for the scan); runs of spaces
collapse and a space goes in front.  Every window that starts at a space is
hashed at the three lengths and looked up.  The document passes when some group
has at least m distinct anchors among the hits, or when its bytes may differ from
what the tokenizer sees: a lone surrogate (tiktoken replaces it) or a run of more
than 256 bytes between spaces (clean_text cuts long words with spaces).

Why a cleared document has no flagged candidate.  A flagged candidate of record r
has question overlap q = idf(M) / T >= max(min_q, q_required(q_len)) (scan.py,
``decon_prefilter``), M being the n-gram keys its cluster matched.  A key in M is
the hash of 5 of the document's tokens, so (up to a 64-bit hash collision, the
assumption the scan itself makes) those tokens are the question's and their
bytes -- the n-gram's bytes -- occur in the bytes the tokenizer encoded, which
are the collapsed bytes above.  So every taken unit with an n-gram in M has its
anchor among the hits: the anchor lies inside the n-gram and starts at one of its
spaces, and every window after a space is tested.  Taken units of a group have
distinct anchors; with fewer than m of them hit, at most m-1 taken units meet M,
and idf(M) <= idf(R) - idf(taken) + (m-1 largest taken unit idfs) < need: q is
under the flag bar for every record of the group.  A group whose reachable
n-grams cannot reach ``need`` is never flagged and has no anchors; if a group
cannot be covered even with m = 1, the prefilter passes every document.  Anchor
hashes are 64-bit: a collision can only add a hit, never remove one.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import polars as pl

from contam_assets.detector.config import DetectConfig
from contam_assets.detector.index import NgramIndex, encode_texts
from contam_assets.detector.ngrams import ngram_hashes
from contam_assets.detector.scoring import interpolate_threshold
from contam_assets.detector.text import CleanOptions, translate_bytes
from contam_assets.detector.tokenize import get_tokenizer

LEVELS = (24, 16, 8)  # anchor window lengths in bytes, longest (most specific) first
MAX_M = 3  # distinct anchors a document must show for one group (_cover tracks the two largest units)
MAX_RUN = 256  # text.MAX_WORD_CHARS: longer runs are cut by clean_text, so such documents always pass
# odd multipliers of the window hashes (multiply-xorshift; both sides use window_hashes)
_C = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9))
_LEVEL = {8: np.uint64(0x27D4EB2F165667C5), 16: np.uint64(0x85EBCA77C2B2AE63), 24: np.uint64(0xFF51AFD7ED558CCD)}
_S = np.uint64(29)


def _u64_view(buf: bytes) -> np.ndarray:
    """Little-endian 64-bit word starting at every byte of ``buf`` (which must end with 24 spare bytes)."""
    return np.ndarray(shape=(len(buf) - 7,), dtype="<u8", buffer=buf, strides=(1,))


def window_hashes(view: np.ndarray, starts: np.ndarray) -> dict[int, np.ndarray]:
    """64-bit hash of the window of each length in LEVELS starting at each of ``starts``."""
    with np.errstate(over="ignore"):
        a = view[starts] * _C[0]
        b = a ^ (view[starts + 8] * _C[1])
        c = b ^ (view[starts + 16] * _C[2])
        out = {}
        for W, x in ((8, a), (16, b), (24, c)):
            x = (x ^ (x >> _S)) * _LEVEL[W]
            out[W] = x ^ (x >> _S)
    return out


def rule_floor(cfg: DetectConfig) -> float:
    """The lowest question overlap at which a thorough rule of ``cfg`` can flag (1.0: none can go below decon's bar).

    The dump rule flags stored candidates (question overlap >= scan.question_floor); the near-duplicate
    stage flags only in documents where some record's own non-hot n-grams reach neardup.GATE_FLOOR of
    its idf total.  question_only needs decon's question pre-check, short questions are scored by decon's
    rules: both stay above the bar.
    """
    floor = 1.0
    if cfg.dump_min_items > 0:
        floor = min(floor, cfg.min_question_overlap, cfg.candidate_question_floor)
    if cfg.near_duplicates:
        from contam_assets.detector.neardup import GATE_FLOOR

        floor = min(floor, GATE_FLOOR)
    return floor


def flag_bar(cfg: DetectConfig, q_len: np.ndarray) -> np.ndarray:
    """max(min_q, q_required(q_len)): the question overlap every flagged candidate reaches (scan.score_clusters),
    lowered to rule_floor(cfg) when a thorough rule can flag below it."""
    min_q = cfg.min_question_overlap
    bar = np.array([max(min_q, interpolate_threshold(int(L), cfg.decay_start, cfg.decay_end, min_q)) for L in q_len])
    return np.minimum(bar, rule_floor(cfg))


def params_of(cfg: DetectConfig) -> dict:
    """Everything the anchors depend on besides the index itself."""
    out = dict(tokenizer=cfg.tokenizer, ngram_size=cfg.ngram_size, threshold=cfg.threshold,
               decay_start=cfg.decay_start, decay_end=cfg.decay_end, levels=list(LEVELS), max_m=MAX_M)
    if rule_floor(cfg) < 1.0:
        out["rule_floor"] = rule_floor(cfg)
    return out


@dataclass
class Prefilter:
    keys: np.ndarray  # uint64 anchor hashes: one sorted unique run per level of LEVELS
    level_off: np.ndarray  # int64, len(LEVELS)+1: level j's anchors are keys[level_off[j]:level_off[j+1]]
    offsets: np.ndarray  # int64 CSR: anchor i belongs to groups[offsets[i]:offsets[i+1]]
    groups: np.ndarray  # int32
    need: np.ndarray  # int32 per group: distinct anchors a document must show
    tables: np.ndarray  # uint8 bit sets, one per level (table_off), over the top bits of the anchor hashes
    table_off: np.ndarray  # int64, len(LEVELS)+1
    params_json: str
    always_pass: bool = False

    def _lookup(self, j: int, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(indices into h, anchor ids) of the hashes that are level-j anchors."""
        a, b = int(self.level_off[j]), int(self.level_off[j + 1])
        if b == a:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        table = self.tables[self.table_off[j] : self.table_off[j + 1]]
        slot = h >> np.uint64(64 - int(math.log2(len(table) * 8)))
        maybe = np.flatnonzero((table[(slot >> np.uint64(3)).astype(np.int64)] >> (slot & np.uint64(7)).astype(np.uint8)) & 1)
        cand = h[maybe]
        keys = self.keys[a:b]
        i = np.minimum(np.searchsorted(keys, cand), len(keys) - 1)
        found = keys[i] == cand
        return maybe[found], a + i[found]

    def matches(self, cfg: DetectConfig) -> bool:
        return json.loads(self.params_json) == params_of(cfg)

    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.keys, self.level_off, self.offsets, self.groups, self.need, self.tables, self.table_off))

    # -- the document side ---------------------------------------------------------
    def must_scan(self, texts: list[str], options: CleanOptions) -> np.ndarray:
        """Per document: True when it may hold a flagged match (scan it), False when it provably does not."""
        n = len(texts)
        forced = np.zeros(n, dtype=bool)
        if self.always_pass or n == 0:
            return np.ones(n, dtype=bool)
        parts = []
        for i, t in enumerate(texts):
            try:
                parts.append(translate_bytes(t, options, errors="strict"))
            except UnicodeEncodeError:  # lone surrogates: tiktoken sees other bytes
                forced[i] = True
                parts.append(b"")
        # "\0 " before every document: the space the tokenizer puts in front; \0 keeps documents apart
        lens = np.fromiter(map(len, parts), dtype=np.int64, count=n) + 2
        starts = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lens, out=starts[1:])
        raw = np.frombuffer(b"\0 " + b"\0 ".join(parts) + bytes(24), dtype=np.uint8)
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
        hashes = window_hashes(_u64_view(buf), starts_ok)
        hit_pos, hit_anchor = [], []
        for j, W in enumerate(LEVELS):
            where, anchor = self._lookup(j, hashes[W])
            hit_pos.append(starts_ok[where])
            hit_anchor.append(anchor)
        passing = forced.copy()
        p, a = np.concatenate(hit_pos), np.concatenate(hit_anchor)
        if len(p):
            doc = np.searchsorted(doc_start, p, side="right") - 1
            count = self.offsets[a + 1] - self.offsets[a]
            ends = np.cumsum(count)
            grp = self.groups[np.repeat(self.offsets[a] - (ends - count), count) + np.arange(int(ends[-1]) if len(ends) else 0)]
            doc_r, anchor_r = np.repeat(doc, count), np.repeat(a, count)
            n_groups, n_anchors = len(self.need), len(self.keys)
            # distinct (document, group, anchor), then distinct anchors per (document, group)
            trip = np.unique((doc_r * n_groups + grp) * n_anchors + anchor_r)
            pair, per_pair = np.unique(trip // n_anchors, return_counts=True)
            ok = per_pair >= self.need[pair % n_groups]
            passing[np.unique(pair[ok] // n_groups)] = True
        return passing


# -- the index side ---------------------------------------------------------------

def ensure_prefilter(index: NgramIndex, records: pl.DataFrame, cfg: DetectConfig) -> Prefilter:
    """The prefilter of ``index`` for ``cfg``: built beside the index on first use and kept with it
    (one per index object and config; a config with other flag bars builds another)."""
    cache = index.__dict__.setdefault("_prefilters", {})
    key = json.dumps(params_of(cfg), sort_keys=True)
    pf = cache.get(key)
    if pf is not None:
        return pf
    recs = records.filter(pl.col("indexed")).sort("record_id")
    if not np.array_equal(recs["record_id"].to_numpy(), index.record_ids):
        raise ValueError("records do not match the index (rebuild the index)")
    q_cleaned: list[str] = []
    q_tokens = encode_texts(recs["question"].to_list(), cfg, q_cleaned)
    pf = cache[key] = build_prefilter(q_tokens, q_cleaned, index.lookup, index.hot, index.q_idf, index.q_idf_sum,
                                      index.q_len, cfg)
    return pf


def build_prefilter(q_tokens: list[np.ndarray], q_cleaned: list[str], keys_of: callable, hot: np.ndarray,
                    idf: np.ndarray, q_idf_sum: np.ndarray, q_len: np.ndarray, cfg: DetectConfig) -> Prefilter:
    """Anchors of every indexed record's question.

    ``q_tokens`` / ``q_cleaned``: question tokens and cleaned text per indexed record
    (index order); ``keys_of(hashes)``: NgramIndex.lookup; ``hot``, ``idf``: per key;
    ``q_idf_sum``, ``q_len``: per record.
    """
    tok = get_tokenizer(cfg.tokenizer)
    n = cfg.ngram_size
    bar = flag_bar(cfg, q_len)
    # groups: records with the same cleaned question have the same n-grams and flag bar
    group_of: dict[str, int] = {}
    first: list[int] = []
    for i, q in enumerate(q_cleaned):
        if q not in group_of:
            group_of[q] = len(first)
            first.append(i)
    n_groups = len(first)
    # every group's bytes back to back (24 zero bytes after each), and its n-grams' byte spans
    blobs, g_start, g_end, g_grp, tokens = [], [], [], [], []
    base = 0
    for g, i in enumerate(first):
        t = q_tokens[i]
        if len(t) < n:
            continue  # a question under n tokens is one n-gram of another length: no document n-gram hits it
        b, off = tok.byte_spans(q_cleaned[i], t)
        blobs.append(b + bytes(24))
        g_start.append(off[: len(t) - n + 1] + base)
        g_end.append(off[n:] + base)
        g_grp.append(np.full(len(t) - n + 1, g, dtype=np.int64))
        tokens.append(np.asarray(t, dtype=np.uint64))
        base += len(b) + 24
    if not blobs:
        return _pack(np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(n_groups, np.int32),
                     json.dumps(params_of(cfg), sort_keys=True), False)
    buf = b"".join(blobs)
    start, end, grp = np.concatenate(g_start), np.concatenate(g_end), np.concatenate(g_grp)
    # n-gram keys: hash all tokens at once and keep the windows inside one question
    lens = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
    tok_start = np.concatenate([[0], np.cumsum(lens)[:-1]])
    inside = np.concatenate([np.arange(L - n + 1) + s for L, s in zip(lens.tolist(), tok_start.tolist())])
    key = keys_of(ngram_hashes(np.concatenate(tokens), n))[inside]
    # reachable idf per group: each distinct key once
    order = np.lexsort((np.arange(len(key)), key, grp))
    distinct = np.ones(len(order), dtype=bool)
    distinct[1:] = (grp[order][1:] != grp[order][:-1]) | (key[order][1:] != key[order][:-1])
    first_gram = order[distinct & (key[order] >= 0)]  # first occurrence of each (group, key)
    reach_idf = np.bincount(grp[first_gram], weights=idf[key[first_gram]], minlength=n_groups)
    cold = first_gram[~hot[key[first_gram]]]
    # anchor candidates: windows that start at a space inside the n-gram, of the longest length that fits
    spaces = np.flatnonzero(np.frombuffer(buf, dtype=np.uint8) == 32)
    level = np.zeros(len(cold), dtype=np.int64)
    lo = np.zeros(len(cold), dtype=np.int64)
    hi = np.zeros(len(cold), dtype=np.int64)
    for W in reversed(LEVELS):  # shortest first, so the longest that fits wins
        l_, h_ = np.searchsorted(spaces, start[cold]), np.searchsorted(spaces, end[cold] - W, side="right")
        ok = h_ > l_
        level[ok], lo[ok], hi[ok] = W, l_[ok], h_[ok]
    has = level > 0
    cold, level, lo, hi = cold[has], level[has], lo[has], hi[has]
    count = hi - lo
    ends = np.cumsum(count)
    c_idx = np.repeat(lo - (ends - count), count) + np.arange(int(ends[-1]) if len(ends) else 0)  # index into spaces
    c_gram = np.repeat(np.arange(len(cold)), count)
    c_level = level[c_gram]
    hashes = window_hashes(_u64_view(buf), spaces)
    c_hash = np.where(c_level == 24, hashes[24][c_idx], np.where(c_level == 16, hashes[16][c_idx], hashes[8][c_idx]))
    # df of a window: how many distinct n-grams could put it in a document (rarer windows pass fewer documents)
    c_key = key[cold][c_gram]
    o = np.lexsort((c_key, c_hash, c_level))
    lv, hs, ky = c_level[o], c_hash[o], c_key[o]
    new_trip = np.ones(len(o), dtype=bool)
    new_trip[1:] = (lv[1:] != lv[:-1]) | (hs[1:] != hs[:-1]) | (ky[1:] != ky[:-1])
    new_win = np.ones(len(o), dtype=bool)
    new_win[1:] = (lv[1:] != lv[:-1]) | (hs[1:] != hs[:-1])
    win_id = np.cumsum(new_win) - 1
    df_win = np.bincount(win_id, weights=new_trip).astype(np.int64)
    c_df = np.empty(len(o), dtype=np.int64)
    c_df[o] = df_win[win_id]
    # each n-gram's rarest candidate; n-grams of a group sharing a window form one unit (their idf adds up)
    o = np.lexsort((c_hash, c_df, c_gram))
    best = o[np.concatenate(([True], c_gram[o][1:] != c_gram[o][:-1]))]
    u_grp, u_level, u_hash, u_df = grp[cold][c_gram[best]], c_level[best], c_hash[best], c_df[best]
    u_idf = idf[key[cold][c_gram[best]]]
    o = np.lexsort((u_hash, u_level, u_grp))
    new_unit = np.ones(len(o), dtype=bool)
    new_unit[1:] = (u_grp[o][1:] != u_grp[o][:-1]) | (u_level[o][1:] != u_level[o][:-1]) | (u_hash[o][1:] != u_hash[o][:-1])
    heads = o[new_unit]
    unit_idf = np.add.reduceat(u_idf[o], np.flatnonzero(new_unit)) if len(o) else np.zeros(0)
    u_grp, u_level, u_hash, u_df = u_grp[heads], u_level[heads], u_hash[heads], u_df[heads]
    # greedy order inside a group: longest windows, then rarest, then largest idf
    o = np.lexsort((-unit_idf, u_df, -u_level, u_grp))
    u_grp, u_level, u_hash, unit_idf = u_grp[o], u_level[o], u_hash[o], unit_idf[o]
    seg = np.searchsorted(u_grp, np.arange(n_groups + 1))
    need = np.zeros(n_groups, dtype=np.int32)
    take = np.zeros(len(u_grp), dtype=bool)
    always_pass = False
    unit_list = unit_idf.tolist()
    for g, i in enumerate(first):
        limit = float(bar[i]) * float(q_idf_sum[i]) * (1 - 1e-9)
        if reach_idf[g] < limit:
            continue  # even every reachable n-gram stays under the flag bar: never flagged
        a, b = int(seg[g]), int(seg[g + 1])
        chosen = _cover(unit_list[a:b], float(reach_idf[g]), limit)
        if chosen is None:
            always_pass = True  # cannot be covered: the prefilter must pass every document
            continue
        need[g], take[a : a + chosen[1]] = chosen[0], True
    level_index = np.select([u_level[take] == W for W in LEVELS], list(range(len(LEVELS))))
    return _pack(u_hash[take], level_index.astype(np.int64), u_grp[take].astype(np.int32), need,
                 json.dumps(params_of(cfg), sort_keys=True), always_pass)


def _cover(units: list[float], reach: float, limit: float) -> tuple[int, int] | None:
    """Largest m <= MAX_M and shortest prefix of ``units`` (idf of each) with reach - covered + top(m-1) < limit.

    Returns (m, prefix length)."""
    for m in range(MAX_M, 0, -1):
        covered, top1, top2 = 0.0, 0.0, 0.0
        for j, w in enumerate(units):
            covered += w
            if w > top1:
                top1, top2 = w, top1
            elif w > top2:
                top2 = w
            top = 0.0 if m == 1 else (top1 if m == 2 else top1 + top2)
            if reach - covered + top < limit:
                return m, j + 1
    return None


def _pack(hashes: np.ndarray, levels: np.ndarray, groups: np.ndarray, need: np.ndarray, params_json: str,
          always_pass: bool) -> Prefilter:
    order = np.lexsort((groups, hashes, levels))
    hashes, levels, groups = hashes[order], levels[order], groups[order]
    # unique (level, hash) pairs, in level order
    new = np.ones(len(hashes), dtype=bool)
    new[1:] = (hashes[1:] != hashes[:-1]) | (levels[1:] != levels[:-1])
    first = np.flatnonzero(new)
    keys, key_level = hashes[first], levels[first]
    offsets = np.append(first, len(hashes)).astype(np.int64)
    level_off = np.searchsorted(key_level, np.arange(len(LEVELS) + 1)).astype(np.int64)
    tables, table_off = [], [0]
    for j in range(len(LEVELS)):
        k = keys[level_off[j] : level_off[j + 1]]
        # about 64 bits per anchor: one non-anchor window in 64 reaches the search
        bits = int(min(30, max(12, math.ceil(math.log2(max(1, len(k)) * 64)))))
        slot = k >> np.uint64(64 - bits)
        t = np.zeros(1 << (bits - 3), dtype=np.uint8)
        np.bitwise_or.at(t, (slot >> np.uint64(3)).astype(np.int64), np.left_shift(1, (slot & np.uint64(7)).astype(np.uint8)).astype(np.uint8))
        tables.append(t)
        table_off.append(table_off[-1] + len(t))
    return Prefilter(keys=keys, level_off=level_off, offsets=offsets, groups=groups, need=need,
                     tables=np.concatenate(tables), table_off=np.array(table_off, dtype=np.int64),
                     params_json=params_json, always_pass=always_pass)
