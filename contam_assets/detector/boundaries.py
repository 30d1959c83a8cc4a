"""Answer and passage proximity: is the answer just after the question, the passage just before it?

decon's src/detect/answer_boundary.rs and passage_boundary.rs.
"""

from __future__ import annotations

import numpy as np

from contam_assets.detector import compiled, walk_kernel
from contam_assets.detector.config import DetectConfig
from contam_assets.detector.index import NgramIndex
from contam_assets.detector.ngrams import ngram_hashes
from contam_assets.detector.scoring import overlap_ratio


def short_answer(index: NgramIndex, local: int, tokens: np.ndarray, q_end: int, window: int):
    ans = index.answer_tokens(local)
    L = len(ans)
    s0 = q_end + 1
    s1 = min(s0 + window, len(tokens))  # candidate start positions [s0, s1)
    last = min(s1, len(tokens) - L + 1)
    if L == 0 or last <= s0:
        return None, 0.0
    ok = np.ones(last - s0, dtype=bool)
    for j in range(L):
        ok &= tokens[s0 + j : last + j] == ans[j]
    hits = np.flatnonzero(ok)
    if len(hits) == 0:
        return None, 0.0
    s = s0 + int(hits[0])
    # decon rule: exact token sequence of a short answer; overlap = idf share of its tokens (1.0)
    return [(s, s + L - 1)], (1.0 if index.a_short_ok[local] else 0.0)


def long_answer(index: NgramIndex, local: int, tokens: np.ndarray, q_end: int, window: int, an: int):
    ws = q_end + 1
    we = min(ws + window, len(tokens))
    if we <= ws or we - ws < an:
        return None, 0.0
    keys, idf = index.answer_keys(local)
    total = float(index.a_idf_total[local])
    if total == 0.0:
        return None, 0.0
    if walk_kernel.AVAILABLE and compiled.enabled() and len(keys):  # the same hits and spans, compiled
        found, spans = walk_kernel.answer_hits(tokens, ws, we, an, keys)
        if not len(found):
            return None, 0.0
        return spans, overlap_ratio(float(idf[found].sum()), total)  # found: as np.unique gives the hits
    h = ngram_hashes(tokens[ws:we], an)
    pos = np.minimum(np.searchsorted(keys, h), len(keys) - 1)
    hit = keys[pos] == h
    if not hit.any():
        return None, 0.0
    matched = np.unique(pos[hit])
    overlap = overlap_ratio(float(idf[matched].sum()), total)  # decon rule: answer n-gram IDF overlap in the window
    starts = ws + np.flatnonzero(hit)
    spans: list[tuple[int, int]] = []
    cs, ce = int(starts[0]), int(starts[0]) + an - 1
    for s in starts[1:]:
        s = int(s)
        if s <= ce + an:  # decon: positions within ngram_size of the cluster merge
            ce = max(ce, s + an - 1)
        else:
            spans.append((cs, ce))
            cs, ce = s, s + an - 1
    spans.append((cs, ce))
    return spans, overlap


def passage(index: NgramIndex, local: int, tokens: np.ndarray, q_start: int, cfg: DetectConfig):
    pn = cfg.passage_ngram_size
    window = max(int(index.p_len[local]) * 2, cfg.min_passage_distance)
    w_end = max(q_start - 1, 0)
    w_start = max(w_end - window, 0)
    if w_start >= w_end or w_end - w_start < pn:
        return None, 0.0
    keys, idf = index.passage_keys(local)
    total = float(index.p_idf_total[local])
    if total == 0.0 or len(keys) == 0:
        return None, 0.0
    last_pos = max(w_end - pn, 0)
    h = ngram_hashes(tokens[w_start : last_pos + pn], pn)  # n-grams starting at w_start..last_pos
    pos = np.minimum(np.searchsorted(keys, h), len(keys) - 1)
    hit = keys[pos] == h
    matched: set[int] = set()
    total_idf = 0.0
    first = last = None
    misses = 0
    # decon rule: walk left from the question; stop after more than 2 consecutive misses once matching
    for i in range(len(h) - 1, -1, -1):
        if hit[i]:
            k = int(pos[i])
            if k not in matched:
                matched.add(k)
                total_idf += float(idf[k])
            if first is None:
                last = w_start + i + pn - 1
            first = w_start + i
            misses = 0
        elif first is not None:
            misses += 1
            if misses > cfg.passage_max_consecutive_misses:
                break
    if first is None:
        return None, overlap_ratio(total_idf, total)
    return (first, last), overlap_ratio(total_idf, total)
