"""Scan one tokenized document against the index: cluster discovery, then scoring.

Follows AI2 decon's detector (src/detect/{detection,cluster,contamination_entry,
answer_boundary,passage_boundary,scoring}.rs).  Beyond decon, every candidate
whose score reaches `report_floor` is returned (flagged or not), so near misses
can be reviewed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from contam_assets.core.config import DetectConfig
from contam_assets.core.index import NgramIndex
from contam_assets.core.ngrams import ngram_hashes

# decon scoring weights
W_QAP = (0.7, 0.2, 0.1)
W_QA = (0.75, 0.25)
W_QP = (0.85, 0.15)


@dataclass
class Candidate:
    local: int
    record_id: int
    cluster_start: int  # first token of the question match
    question_end: int  # last token of the question match (inclusive)
    n_matched: int
    q_overlap: float
    a_overlap: float | None = None
    p_overlap: float | None = None
    answer_spans: list[tuple[int, int]] = field(default_factory=list)
    passage_span: tuple[int, int] | None = None
    score: float = 0.0
    required: float = 1.0
    flagged: bool = False


# -- scoring (scoring.rs) --------------------------------------------------------

def interpolate_threshold(length: int, start: int | None, end: int | None, target: float) -> float:
    # decon rule: perfect match (1.0) up to `start` tokens, `target` from `end`, linear between
    if start is None:
        return target
    if end is None:
        return 1.0 if length <= start else target
    if length <= start:
        return 1.0
    if length >= end or start == end:
        return target
    return 1.0 - (1.0 - target) * (length - start) / (end - start)


def combined_score(q: float, q_unique: int, a: float | None, a_len: int | None, p: float | None) -> float:
    """decon calculate_combined_contamination_score, before the length adjustment (capped at 1)."""
    # decon rule: question confidence 0.5 + 0.5*n/20 below 20 unique n-grams
    qc = 0.5 + 0.5 * q_unique / 20.0 if q_unique < 20 else 1.0
    has_a, has_p = a is not None, p is not None
    a, p = a or 0.0, p or 0.0
    if has_a and has_p:
        # decon rule: answer confidence 0.5 + 0.5*n/4 below 4 unique answer tokens
        ac = 0.5 + 0.5 * a_len / 4.0 if (a_len is not None and a_len < 4) else 1.0
        if qc < 1.0 or ac < 1.0:
            qw = W_QAP[0] * qc
            q_red = W_QAP[0] * (1.0 - qc)
            aw_after = W_QAP[1] + q_red * 0.5  # lost question weight split between answer and passage
            pw_after = W_QAP[2] + q_red * 0.5
            aw = aw_after * ac
            pw = pw_after + aw_after * (1.0 - ac)  # lost answer weight moves to the passage
            base = q * qw + a * aw + p * pw
        else:
            base = q * W_QAP[0] + a * W_QAP[1] + p * W_QAP[2]
    elif has_a:
        if qc < 1.0:
            base = q * W_QA[0] * qc + a * (W_QA[1] + W_QA[0] * (1.0 - qc))
        else:
            base = q * W_QA[0] + a * W_QA[1]
    elif has_p:
        if qc < 1.0:
            base = q * W_QP[0] * qc + p * (W_QP[1] + W_QP[0] * (1.0 - qc))
        else:
            base = q * W_QP[0] + p * W_QP[1]
    else:
        base = q
    return _unit(base)


# Sums of the same IDF values added in another order differ in the last bits (the index sums
# with np.add.at, the scan in key order), so a complete match can come out as 0.9999999999999998.
# decon sums in one fixed order and gets exactly 1.0; treat anything within 1e-9 of 1 as 1.
EPS = 1e-9


def _unit(x: float) -> float:
    return 1.0 if x >= 1.0 - EPS else x


def overlap_ratio(matched: float, total: float) -> float:
    """matched / total in [0, 1], exactly 1.0 for a complete match."""
    return _unit(matched / total) if total > 0 else 0.0


def passes_threshold(score: float, required: float, threshold: float) -> bool:
    """decon's length-adjusted comparison: the score is scaled by threshold/required; 1.0 stays 1.0."""
    if required > threshold:
        scale = threshold / required
        adjusted = score * scale + (1.0 - scale) * (1.0 if score == 1.0 else 0.0)
        return adjusted >= threshold
    return score >= threshold


# -- cluster discovery (detection.rs / cluster.rs) ----------------------------

class _DocLookup:
    """Per-document lookups of question n-grams, with a cache of posting sets.

    Without ``keys`` a position is tested against the bit filter and searched on
    demand; with ``keys`` (the exact key of every position, -1 for none, from
    NgramIndex.lookup) the answers are read off.
    """

    def __init__(self, index: NgramIndex, hashes: np.ndarray, keys: np.ndarray | None = None):
        self.index = index
        self.hashes = hashes
        self._keys: dict[int, int] = {}
        self._sets: dict[int, frozenset] = {}
        if keys is None:
            self.maybe = index.bloom_test(hashes)
        else:
            self.maybe = keys >= 0
            self._keys = dict(zip(np.flatnonzero(self.maybe).tolist(), keys[self.maybe].tolist()))

    def key_at(self, pos: int) -> int:
        if not self.maybe[pos]:
            return -1
        k = self._keys.get(pos)
        if k is None:
            k = self.index.key_of(self.hashes[pos])
            self._keys[pos] = k
        return k

    def docs(self, key: int) -> frozenset:
        s = self._sets.get(key)
        if s is None:
            s = frozenset(self.index.postings(key).tolist())
            self._sets[key] = s
        return s


@dataclass
class Cluster:
    matches: dict[int, set[int]]  # record local -> unique matched question keys
    bounds: dict[int, list[int]]  # record local -> [first n-gram position, last n-gram position]
    end: int  # last position visited by the right traversal


def _traverse(lk: _DocLookup, start: int, step: int, limit: int, active: set, matches, misses, bounds, side: int, max_misses: int) -> int:
    idx = start
    while active:
        if (step < 0 and idx <= 0) or (step > 0 and idx + 1 >= limit):
            break
        idx += step
        k = lk.key_at(idx)
        if k >= 0:
            docs = lk.docs(k)
            inter = active & docs
            if inter:
                for d in inter:
                    m = matches[d]
                    if k not in m:
                        m.add(k)
                        misses[d] = 0  # decon rule: a new unique matched n-gram resets the miss count
                    bounds[d][side] = idx
                for d in active - docs:
                    misses[d] += 1
                    if misses[d] >= max_misses:
                        active.discard(d)
                continue
        for d in list(active):
            misses[d] += 1
            if misses[d] >= max_misses:  # decon rule: drop a candidate after 11 consecutive misses
                active.discard(d)
    return idx


def expand_cluster(lk: _DocLookup, hit: int, key: int, cfg: DetectConfig) -> Cluster:
    m = len(lk.hashes)
    d0 = lk.docs(key)
    matches = {d: {key} for d in d0}
    bounds = {d: [hit, hit] for d in d0}
    misses = {d: 0 for d in d0}
    # decon rule: expand left first, then right, each from the hit with fresh miss counts
    _traverse(lk, hit, -1, m, set(d0), matches, misses, bounds, 0, cfg.question_max_consecutive_misses)
    misses = {d: 0 for d in d0}
    end = _traverse(lk, hit, +1, m, set(d0), matches, misses, bounds, 1, cfg.question_max_consecutive_misses)
    return Cluster(matches=matches, bounds=bounds, end=end)


def find_clusters(index: NgramIndex, tokens: np.ndarray, cfg: DetectConfig, hashes: np.ndarray | None = None,
                  keys: np.ndarray | None = None) -> tuple[list[Cluster], _DocLookup | None]:
    n = cfg.ngram_size
    if len(tokens) < n:
        return [], None
    if hashes is None:
        hashes = ngram_hashes(tokens, n)
    lk = _DocLookup(index, hashes, keys)
    m = len(hashes)
    cand = np.flatnonzero(lk.maybe)  # positions that may hit; every other position is a sure miss
    clusters: list[Cluster] = []
    step = cfg.sample_every
    i, ci = 0, 0
    while i < m:
        # decon rule: look up every `sample_every`-th n-gram; a miss moves `sample_every` tokens
        while ci < len(cand) and cand[ci] < i:
            ci += 1
        hit, key = -1, -1
        j = ci
        while j < len(cand):
            p = int(cand[j])
            if (p - i) % step == 0:
                k = lk.key_at(p)
                if k >= 0:
                    hit, key = p, k
                    break
            j += 1
        if hit < 0:
            break
        i = hit
        if index.hot[key]:
            i += 1  # decon rule: a hot n-gram moves one token and starts no cluster
            continue
        cluster = expand_cluster(lk, i, key, cfg)
        clusters.append(cluster)
        i = max(i, cluster.end + 1)  # decon rule: resume after the cluster's end
    return clusters, lk


# -- answer and passage proximity (answer_boundary.rs / passage_boundary.rs) --

def _short_answer(index: NgramIndex, local: int, tokens: np.ndarray, q_end: int, window: int):
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


def _long_answer(index: NgramIndex, local: int, tokens: np.ndarray, q_end: int, window: int, an: int):
    ws = q_end + 1
    we = min(ws + window, len(tokens))
    if we <= ws or we - ws < an:
        return None, 0.0
    keys, idf = index.answer_keys(local)
    total = float(index.a_idf_total[local])
    if total == 0.0:
        return None, 0.0
    h = ngram_hashes(tokens[ws:we], an)
    pos = np.searchsorted(keys, h)
    pos = np.minimum(pos, len(keys) - 1)
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


def _passage(index: NgramIndex, local: int, tokens: np.ndarray, q_start: int, cfg: DetectConfig):
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


# -- candidate scoring (contamination_entry.rs) ---------------------------------

def score_clusters(index: NgramIndex, tokens: np.ndarray, clusters: list[Cluster], cfg: DetectConfig) -> list[Candidate]:
    n = cfg.ngram_size
    min_q = cfg.min_question_overlap
    out: dict[tuple[int, int], Candidate] = {}
    for cl in clusters:
        for local, keys in cl.matches.items():
            q_idf_sum = float(index.q_idf_sum[local])
            q = overlap_ratio(float(index.q_idf[list(keys)].sum()), q_idf_sum)
            # decon rule: Σ idf(matched unique n-grams) / Σ idf(all unique n-grams)
            if q < min(min_q, cfg.candidate_question_floor):
                continue
            q_len = int(index.q_len[local])
            q_required = interpolate_threshold(q_len, cfg.decay_start, cfg.decay_end, min_q)
            decon_prefilter = q >= min_q and q >= q_required
            start, end_pos = cl.bounds[local]
            cluster_len = (end_pos + n - 1) - start + 1
            excess = max(0, cluster_len - q_len)
            q_end_for_answer = max((end_pos + n - 1) - excess, 0)
            cand = Candidate(local=local, record_id=int(index.record_ids[local]), cluster_start=start,
                             question_end=end_pos + n - 1, n_matched=len(keys), q_overlap=q)
            if index.p_len[local] > 0:
                cand.passage_span, cand.p_overlap = _passage(index, local, tokens, start, cfg)
            a_unique = None
            if index.a_len[local] > 0:
                a_len = int(index.a_len[local])
                a_unique = int(index.a_unique[local])
                if a_len <= cfg.short_answer_token_threshold:
                    spans, cand.a_overlap = _short_answer(index, local, tokens, q_end_for_answer, cfg.short_answer_window)
                else:
                    window = max(a_len * 2, cfg.min_long_answer_window)
                    spans, cand.a_overlap = _long_answer(index, local, tokens, q_end_for_answer, window, cfg.answer_ngram_size)
                cand.answer_spans = spans or []
                if spans and spans[0][0] <= cand.question_end and cluster_len > q_len:
                    cand.question_end = max(spans[0][0] - 1, 0)
            cand.score = combined_score(q, int(index.q_unique[local]), cand.a_overlap, a_unique, cand.p_overlap)
            # decon rule: L = question + answer (unique tokens) + passage tokens sets the required score
            L = q_len + (a_unique or 0) + (int(index.p_len[local]) if index.p_len[local] > 0 else 0)
            cand.required = interpolate_threshold(L, cfg.decay_start, cfg.decay_end, cfg.threshold)
            cand.flagged = decon_prefilter and passes_threshold(cand.score, cand.required, cfg.threshold)
            if cand.score < cfg.report_floor and not cand.flagged:
                continue
            key = (local, start)
            prev = out.get(key)
            if prev is None or (cand.flagged, cand.score) > (prev.flagged, prev.score):
                out[key] = cand
    return sorted(out.values(), key=lambda c: (c.cluster_start, c.record_id))


def scan_tokens(index: NgramIndex, tokens: np.ndarray, cfg: DetectConfig) -> list[Candidate]:
    """All candidates in one document (empty when the document is under `min_doc_tokens`).

    The plain per-document path; :func:`scan_many` gives the same result for many documents.
    """
    if len(tokens) < cfg.min_doc_tokens:
        return []
    clusters, _ = find_clusters(index, tokens, cfg)
    if not clusters:
        return []
    return score_clusters(index, tokens, clusters, cfg)


# -- many documents at once --------------------------------------------------------

def question_floor(cfg: DetectConfig) -> float:
    """Question overlap below which score_clusters drops a cluster without scoring it."""
    return min(cfg.min_question_overlap, cfg.candidate_question_floor)


def can_reach_floor(index: NgramIndex, keys: np.ndarray, floor: float) -> bool:
    """False only when no record can reach question overlap ``floor`` with these n-gram keys.

    ``keys`` are the index keys found anywhere in a document.  A cluster starts at a
    non-hot key and only collects records in that key's postings, and a record's
    overlap counts matched keys of the document only, so a record's overlap is at
    most (idf of the document's non-hot keys it holds + idf of all the document's hot
    keys) / its idf total.  If that bound is under ``floor`` for every record of every
    non-hot key, score_clusters would drop every cluster of the document.
    """
    if floor <= 0:
        return True
    u = np.unique(keys)
    hot = index.hot[u]
    cold = u[~hot]
    if len(cold) == 0:
        return False  # decon rule: a hot n-gram starts no cluster
    hot_idf = float(index.q_idf[u[hot]].sum())
    first, count = index.q_offsets[cold], index.q_offsets[cold + 1] - index.q_offsets[cold]
    ends = np.cumsum(count)
    recs = index.q_docs[np.repeat(first - (ends - count), count) + np.arange(int(ends[-1]))]
    records, inverse = np.unique(recs, return_inverse=True)
    idf = np.bincount(inverse, weights=np.repeat(index.q_idf[cold], count))
    # a relative slack of 1e-9 keeps the bound on the safe side of float rounding
    return bool(np.any(idf + hot_idf >= floor * index.q_idf_sum[records] * (1 - 1e-9)))


def scan_many(index: NgramIndex, docs: list[np.ndarray], cfg: DetectConfig) -> list[list[Candidate]]:
    """``[scan_tokens(index, t, cfg) for t in docs]``, with the per-document numpy work batched.

    The n-gram hashes of all documents are computed in one pass over their
    concatenation (a window that crosses two documents is never read) and looked
    up exactly in one pass; a document is walked only when it holds a non-hot index
    key and can reach the question floor (a coarse bound for all documents at once,
    then :func:`can_reach_floor`).
    """
    n = cfg.ngram_size
    out: list[list[Candidate]] = [[] for _ in docs]
    lens = np.fromiter(map(len, docs), dtype=np.int64, count=len(docs))
    if not len(docs) or lens.max(initial=0) < max(cfg.min_doc_tokens, n):
        return out
    starts = np.zeros(len(docs) + 1, dtype=np.int64)
    np.cumsum(lens, out=starts[1:])
    flat = np.concatenate(docs)
    hashes = ngram_hashes(flat, n)
    keys = index.lookup(hashes)
    hit = np.flatnonzero(keys >= 0)
    doc_of = np.searchsorted(starts, hit, side="right") - 1
    inside = hit + n <= starts[doc_of + 1]  # the window ends inside its document
    floor = question_floor(cfg)
    # a cheaper bound first, for all documents at once: the idf of every hit (repeats included) must
    # reach floor * the smallest idf total of any record a non-hot hit could start a cluster for
    hk, hd = keys[hit[inside]], doc_of[inside]
    total = np.bincount(hd, weights=index.q_idf[hk], minlength=len(docs))
    smallest = np.full(len(docs), np.inf)
    cold = ~index.hot[hk]
    np.minimum.at(smallest, hd[cold], index.key_min_total()[hk[cold]])
    has_cold = np.isfinite(smallest)  # decon rule: only a non-hot n-gram starts a cluster
    if floor > 0:
        has_cold &= total * (1 + 1e-9) >= floor * np.where(has_cold, smallest, 0.0) * (1 - 1e-9)
    maybe = np.flatnonzero(has_cold)
    for i in maybe.tolist():
        L = int(lens[i])
        if L < cfg.min_doc_tokens:
            continue
        s, m = int(starts[i]), L - n + 1
        doc_keys = keys[s : s + m]
        if not can_reach_floor(index, doc_keys[doc_keys >= 0], floor):
            continue
        clusters, _ = find_clusters(index, docs[i], cfg, hashes=hashes[s : s + m], keys=doc_keys)
        if clusters:
            out[i] = score_clusters(index, docs[i], clusters, cfg)
    return out
