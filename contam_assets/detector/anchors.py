"""The index side of the prefilter (prefilter.py): byte windows ("anchors") of every indexed question.

Records with the same cleaned question form a *group* (an MMLU question and its four
choices share their n-grams and bar).  A question n-gram stands for the bytes its
tokens decode to, a substring of " " + cleaned question.  Its anchor is one window
of those bytes that a document showing the n-gram surely shows too:

- after a space, of the longest of 24, 16 or 8 bytes that fits (LEVELS; among several,
  the one fewest n-grams of the reference set could produce);
- for an n-gram without one (numbers, formulas, a long word): the 4 bytes after its first
  space when they fit (SHORT); else it is *bare*, and its rarest 4-byte window at any
  position (_quad_of) makes every document holding it pass where the cold-start test needs it.

The n-grams of a group sharing an anchor form one *unit* whose idf is the sum of theirs.
With R the group's reachable n-grams, T its question idf total and
``need = keep_bar(q_len) * T * (1 - 1e-9)`` (the question overlap every stored candidate
reaches), each group gets one test of the document's distinct anchors, the first that holds:

1. count (decon's cold n-grams only): the first units (longest windows, rarest, largest idf)
   such that ``idf(R) - idf(taken) + (m-1 largest taken unit idfs) < need`` for the largest
   m <= 3; the document passes with m distinct anchors of them.  With fewer, at most m-1
   taken units meet the candidate's matched keys M, so idf(M) < need.
2. weighted (every n-gram, hot ones too): every unit weighs its idf; the document passes
   when the weights of its anchors reach ``need - idf(bare n-grams)``.  idf(M) is at most
   the idf of the units it meets plus the bare ones.
3. cold start: decon's walk starts a cluster only at a non-hot n-gram (clusters.find_clusters),
   so every candidate's M holds one; the document passes with one anchor of the group's
   non-hot n-grams (or one of their 4-byte windows).  This holds whatever the bar.

A group with no non-hot n-gram has no candidate at all; a group none of the three can
cover makes the prefilter pass every document (``always_pass``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from contam_assets.detector.config import DetectConfig
from contam_assets.detector.ngrams import ngram_hashes
from contam_assets.detector.scoring import interpolate_threshold
from contam_assets.detector.tokenize import get_tokenizer

LEVELS = (24, 16, 8)  # anchor window lengths after a space, longest (most specific) first (tables 0-2)
SHORT = (4,)  # fallback: the 4 bytes from an n-gram's first space (table 3)
N_TABLES = len(LEVELS) + len(SHORT)
WEIGHTED_COLD = True
DROP_SHARE = 0.5
MAX_M = 3  # distinct anchors a document must show for one group (_cover tracks the two largest units)
# odd multipliers of the window hashes (multiply-xorshift; both sides use these functions)
_C = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9))
_LEVEL = {8: np.uint64(0x27D4EB2F165667C5), 16: np.uint64(0x85EBCA77C2B2AE63), 24: np.uint64(0xFF51AFD7ED558CCD)}
_SHORT = {W: (np.uint64((1 << (8 * W)) - 1), np.uint64(0xD6E8FEB86659FD93 + 2 * W)) for W in SHORT}
_S = np.uint64(29)


def u64_view(buf: bytes) -> np.ndarray:
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


def short_hashes(view: np.ndarray, starts: np.ndarray, W: int) -> np.ndarray:
    """64-bit hash of the W-byte window (W in SHORT) at each of ``starts``."""
    mask, mult = _SHORT[W]
    with np.errstate(over="ignore"):
        x = (view[starts] & mask) * _C[0]
        x = (x ^ (x >> _S)) * mult
        return x ^ (x >> _S)


# -- bars -----------------------------------------------------------------------------

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


def keep_bar(cfg: DetectConfig, q_len: np.ndarray) -> np.ndarray:
    """The question overlap every *stored* candidate reaches: scan.question_floor (score_clusters drops a
    cluster under it before scoring), at most flag_bar.  The anchors are chosen at this bar, so a cleared
    document holds neither a flagged match nor a candidate above the report floor."""
    floor = min(cfg.min_question_overlap, cfg.candidate_question_floor)  # scan.question_floor
    return np.minimum(flag_bar(cfg, q_len), floor)


# -- the build --------------------------------------------------------------------------

@dataclass
class Anchors:
    hashes: np.ndarray  # uint64, one per (anchor, group) entry
    tables: np.ndarray  # int64: which table (LEVELS, SHORT, FREE) each entry's hash is looked up in
    groups: np.ndarray  # int32
    weights: np.ndarray  # float64: what the entry adds to its group's sum
    need: np.ndarray  # float64 per group: the sum a document must reach (0: the group can never pass)
    pairs: np.ndarray | None  # uint8 bit set over quad_slots of the fallback 4-byte windows, or None
    always_pass: bool


@dataclass
class _Units:
    grp: np.ndarray
    table: np.ndarray
    hash: np.ndarray
    idf: np.ndarray
    regular: np.ndarray  # bool: a LEVELS window (the count test uses only these)
    df: np.ndarray  # n-grams of the reference set that could put the unit's window in a document
    seg: np.ndarray  # units of group g: [seg[g], seg[g+1])
    bare_grp: np.ndarray  # n-grams without an anchor: group, idf, 4-byte fallback slot (-1: none)
    bare_idf: np.ndarray
    bare_pair: np.ndarray  # quad_slots value, -1: none
    bare_seg: np.ndarray


def build_anchors(q_tokens: list[np.ndarray], q_cleaned: list[str], keys_of: callable, hot: np.ndarray,
                  idf: np.ndarray, q_idf_sum: np.ndarray, q_len: np.ndarray, cfg: DetectConfig) -> Anchors:
    """Anchors of every indexed record's question (``q_tokens`` / ``q_cleaned`` in index order;
    ``keys_of(hashes)``: NgramIndex.lookup; ``hot``, ``idf``: per key; ``q_idf_sum``, ``q_len``: per record)."""
    tok = get_tokenizer(cfg.tokenizer)
    n = cfg.ngram_size
    bar = keep_bar(cfg, q_len)
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
    need = np.zeros(n_groups, dtype=np.float64)
    if not blobs:
        return Anchors(np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0), need, None, False)
    buf = b"".join(blobs)
    start, end, grp = np.concatenate(g_start), np.concatenate(g_end), np.concatenate(g_grp)
    lens = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
    tok_start = np.concatenate([[0], np.cumsum(lens)[:-1]])
    inside = np.concatenate([np.arange(L - n + 1) + s for L, s in zip(lens.tolist(), tok_start.tolist())])
    key = keys_of(ngram_hashes(np.concatenate(tokens), n))[inside]
    # each (group, key) once: the reachable n-grams
    order = np.lexsort((np.arange(len(key)), key, grp))
    distinct = np.ones(len(order), dtype=bool)
    distinct[1:] = (grp[order][1:] != grp[order][:-1]) | (key[order][1:] != key[order][:-1])
    grams = order[distinct & (key[order] >= 0)]
    reach_idf = np.bincount(grp[grams], weights=idf[key[grams]], minlength=n_groups)
    cold = grams[~hot[key[grams]]]
    n_cold = np.bincount(grp[cold], minlength=n_groups)
    ctx = (buf, start, end, grp, key, idf, n_groups)
    cu = _units(cold, *ctx)
    limits = np.array([float(bar[i]) * float(q_idf_sum[i]) * (1 - 1e-9) for i in first])
    weak = np.zeros(n_groups, dtype=bool)
    picks: list[tuple[_Units, np.ndarray, np.ndarray]] = []  # (units, unit indices, weights)
    pair_values: list[int] = []
    always_pass = False
    regular_idf = cu.idf.tolist()
    for g in range(n_groups):
        if reach_idf[g] < limits[g] or n_cold[g] == 0:
            continue  # never reaches the bar, or no non-hot n-gram to start a cluster: no candidate
        a, b = int(cu.seg[g]), int(cu.seg[g + 1])
        if WEIGHTED_COLD:
            cold_reach = float(cu.idf[a:b].sum()) + float(cu.bare_idf[cu.bare_seg[g] : cu.bare_seg[g + 1]].sum())
            thr = limits[g] - (float(reach_idf[g]) - cold_reach) - float(cu.bare_idf[cu.bare_seg[g] : cu.bare_seg[g + 1]].sum())
            if thr > 0:
                # the rarest units first; the commonest are left out while the need stays above half of thr
                o = np.argsort(cu.df[a:b], kind="stable")
                left = np.cumsum(cu.idf[a:b][o][::-1])[::-1]  # idf of the units from position j on
                k = int(np.searchsorted(-left, -DROP_SHARE * thr))  # first j whose tail is at most the share
                k = max(1, min(k, b - a))
                left_out = float(left[k]) if k < b - a else 0.0
                need[g] = (thr - left_out) * (1 - 1e-9)
                picks.append((cu, a + o[:k], cu.idf[a:b][o[:k]]))
                continue
        reg = [j for j in range(a, b) if cu.regular[j]]
        chosen = _cover([regular_idf[j] for j in reg], float(reach_idf[g]), float(limits[g]))
        if chosen is not None:
            need[g] = chosen[0]
            picks.append((cu, np.array(reg[: chosen[1]], dtype=np.int64), np.ones(chosen[1])))
        else:
            weak[g] = True
    if weak.any():  # tests 2 and 3 for the groups the count test cannot cover
        au = _units(grams[weak[grp[grams]]], *ctx)
        for g in np.flatnonzero(weak).tolist():
            a, b = int(au.seg[g]), int(au.seg[g + 1])
            bare = float(au.bare_idf[au.bare_seg[g] : au.bare_seg[g + 1]].sum())
            if limits[g] - bare > 0:
                need[g] = (limits[g] - bare) * (1 - 1e-9)
                picks.append((au, np.arange(a, b), au.idf[a:b]))
                continue
            ca, cb = int(cu.bare_seg[g]), int(cu.bare_seg[g + 1])
            if (cu.bare_pair[ca:cb] < 0).any():
                always_pass = True  # a non-hot n-gram with no anchor and no pair: nothing to test
                continue
            need[g] = 1.0
            picks.append((cu, np.arange(int(cu.seg[g]), int(cu.seg[g + 1])), np.ones(int(cu.seg[g + 1] - cu.seg[g]))))
            pair_values += cu.bare_pair[ca:cb].tolist()
    hashes = np.concatenate([u.hash[j] for u, j, _ in picks]) if picks else np.zeros(0, np.uint64)
    tables = np.concatenate([u.table[j] for u, j, _ in picks]) if picks else np.zeros(0, np.int64)
    groups = np.concatenate([u.grp[j] for u, j, _ in picks]).astype(np.int32) if picks else np.zeros(0, np.int32)
    weights = np.concatenate([w for _, _, w in picks]).astype(np.float64) if picks else np.zeros(0)
    pairs = None
    if pair_values:
        pairs = np.zeros(1 << (QUAD_BITS - 3), dtype=np.uint8)
        v = np.array(pair_values, dtype=np.int64)
        np.bitwise_or.at(pairs, v >> 3, np.left_shift(1, v & 7).astype(np.uint8))
    return Anchors(hashes, tables, groups, weights, need, pairs, always_pass)


def _units(grams: np.ndarray, buf: bytes, start, end, grp, key, idf, n_groups: int) -> _Units:
    """Anchor units of the n-grams ``grams`` (indices into start/end/grp/key), sorted by group in greedy order."""
    view = u64_view(buf)
    spaces = np.flatnonzero(np.frombuffer(buf, dtype=np.uint8) == 32)
    level, lo, hi = (np.zeros(len(grams), dtype=np.int64) for _ in range(3))
    for W in reversed(LEVELS):  # shortest first, so the longest that fits wins
        l_, h_ = np.searchsorted(spaces, start[grams]), np.searchsorted(spaces, end[grams] - W, side="right")
        ok = h_ > l_
        level[ok], lo[ok], hi[ok] = W, l_[ok], h_[ok]
    has = level > 0
    # fallback anchors of the n-grams without a LEVELS window
    loose = grams[~has]
    at = np.searchsorted(spaces, start[loose])
    first_space = spaces[np.minimum(at, len(spaces) - 1)] if len(spaces) else np.full(len(loose), len(buf))
    inner = (at < len(spaces)) & (first_space < end[loose])
    l_table = np.full(len(loose), -1, dtype=np.int64)
    l_hash = np.zeros(len(loose), dtype=np.uint64)
    m = inner & (end[loose] - first_space >= SHORT[0])
    l_table[m], l_hash[m] = len(LEVELS), short_hashes(view, first_space[m], SHORT[0])
    bare = loose[l_table < 0]
    # a bare n-gram's fallback: the bit-set slot of its rarest 4-byte window (any position), -1: none
    q_at = np.array([_quad_of(bytes(buf[int(start[k]) : int(end[k])])) for k in bare.tolist()], dtype=np.int64)
    bare_pair = np.full(len(bare), -1, dtype=np.int64)
    ok = q_at >= 0
    bare_pair[ok] = quad_slots(view, start[bare][ok] + q_at[ok]).astype(np.int64)
    # LEVELS candidates: every window after a space inside the n-gram, of its longest length
    grams, level, lo, hi = grams[has], level[has], lo[has], hi[has]
    count = hi - lo
    ends = np.cumsum(count)
    c_idx = np.repeat(lo - (ends - count), count) + np.arange(int(ends[-1]) if len(ends) else 0)
    c_gram = np.repeat(np.arange(len(grams)), count)
    c_level = level[c_gram]
    wh = window_hashes(view, spaces)
    c_hash = np.where(c_level == 24, wh[24][c_idx], np.where(c_level == 16, wh[16][c_idx], wh[8][c_idx]))
    # df of a window: how many distinct n-grams could put it in a document (rarer windows pass fewer documents)
    c_key = key[grams][c_gram]
    o = np.lexsort((c_key, c_hash, c_level))
    lv, hs, ky = c_level[o], c_hash[o], c_key[o]
    new_pair = np.ones(len(o), dtype=bool)
    new_pair[1:] = (lv[1:] != lv[:-1]) | (hs[1:] != hs[:-1]) | (ky[1:] != ky[:-1])
    new_win = np.ones(len(o), dtype=bool)
    new_win[1:] = (lv[1:] != lv[:-1]) | (hs[1:] != hs[:-1])
    win_id = np.cumsum(new_win) - 1
    c_df = np.empty(len(o), dtype=np.int64)
    c_df[o] = np.bincount(win_id, weights=new_pair).astype(np.int64)[win_id]
    # among an n-gram's windows: the one whose bytes ordinary text holds least (digits, other bytes and rare
    # letters before common ones: " for ch3" rather than " name fo"), then the rarest in the reference set
    rare = np.concatenate(([0], np.cumsum(_RARITY[np.frombuffer(buf, dtype=np.uint8)], dtype=np.int64)))
    c_pos = spaces[c_idx]
    c_rare = rare[c_pos + c_level] - rare[c_pos]
    o = np.lexsort((c_hash, c_df, -c_rare, c_gram))
    best = o[np.concatenate(([True], c_gram[o][1:] != c_gram[o][:-1]))] if len(o) else o
    # one unit per (group, table, hash): LEVELS windows, then the fallback anchors (df 0: tested last by count)
    table_of = {W: j for j, W in enumerate(LEVELS)}
    u_grp = np.concatenate([grp[grams][c_gram[best]], grp[loose][l_table >= 0]])
    u_table = np.concatenate([np.array([table_of[int(W)] for W in c_level[best]], dtype=np.int64), l_table[l_table >= 0]])
    u_hash = np.concatenate([c_hash[best], l_hash[l_table >= 0]])
    u_df = np.concatenate([c_df[best], np.full(int((l_table >= 0).sum()), 1 << 40)])
    u_idf = np.concatenate([idf[key[grams][c_gram[best]]], idf[key[loose][l_table >= 0]]])
    o = np.lexsort((u_hash, u_table, u_grp))
    new_unit = np.ones(len(o), dtype=bool)
    new_unit[1:] = (u_grp[o][1:] != u_grp[o][:-1]) | (u_table[o][1:] != u_table[o][:-1]) | (u_hash[o][1:] != u_hash[o][:-1])
    heads = o[new_unit]
    unit_idf = np.add.reduceat(u_idf[o], np.flatnonzero(new_unit)) if len(o) else np.zeros(0)
    u_grp, u_table, u_hash, u_df = u_grp[heads], u_table[heads], u_hash[heads], u_df[heads]
    # greedy order inside a group: longest windows, then rarest, then largest idf
    o = np.lexsort((-unit_idf, u_df, u_table, u_grp))
    u_grp, u_table, u_hash, unit_idf, u_df = u_grp[o], u_table[o], u_hash[o], unit_idf[o], u_df[o]
    b_order = np.argsort(grp[bare], kind="stable")
    b_grp = grp[bare][b_order]
    return _Units(grp=u_grp, table=u_table, hash=u_hash, idf=unit_idf, regular=u_table < len(LEVELS), df=u_df,
                  seg=np.searchsorted(u_grp, np.arange(n_groups + 1)), bare_grp=b_grp,
                  bare_idf=idf[key[bare]][b_order], bare_pair=bare_pair[b_order],
                  bare_seg=np.searchsorted(b_grp, np.arange(n_groups + 1)))


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


_COMMON = frozenset(b"etaoinshrdlu")
# how unlike ordinary text a byte of cleaned text is: space 0, common letter 1, other letter 2, anything else 3
_RARITY = np.full(256, 3, dtype=np.int64)
_RARITY[32] = 0
_RARITY[np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)] = 2
_RARITY[np.frombuffer(bytes(sorted(_COMMON)), dtype=np.uint8)] = 1
QUAD_BITS = 20  # bit set of the fallback 4-byte windows: 2**20 bits (128 KB)
_QUAD_MULT = np.uint64(0x9FB21C651E98DF25)


def quad_slots(view: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Bit-set slot of the 4-byte window at each of ``starts`` (any byte)."""
    with np.errstate(over="ignore"):
        return ((view[starts] & np.uint64(0xFFFFFFFF)) * _QUAD_MULT) >> np.uint64(64 - QUAD_BITS)


def _quad_of(gram: bytes) -> int:
    """Start of the 4-byte window of ``gram`` least likely in ordinary text (digits and symbols, then rare
    letters, never common letters or spaces first); -1 when the gram is under 4 bytes."""
    def rarity(c: int) -> int:
        return 0 if c == 32 else 1 if c in _COMMON else 2 if 97 <= c <= 122 else 3
    best, at = -1, -1
    for i in range(len(gram) - 3):
        r = sum(rarity(c) for c in gram[i : i + 4])
        if r > best:
            best, at = r, i
    return at


def table_bits(n_keys: int) -> int:
    """Bits of a table's bit set: about 64 per anchor, so one non-anchor window in 64 reaches the search."""
    return int(min(30, max(12, math.ceil(math.log2(max(1, n_keys) * 64)))))
