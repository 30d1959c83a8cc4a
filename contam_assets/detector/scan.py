"""Scan one tokenized document against the index: clusters, then scored candidates.

Follows AI2 decon's detector (src/detect/contamination_entry.rs), with the cluster
discovery in clusters.py, answer/passage proximity in boundaries.py and the scoring
rules in scoring.py.  Beyond decon, every candidate whose score reaches `report_floor`
is returned (flagged or not), so near misses can be reviewed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from contam_assets.detector import boundaries, compiled, walk_kernel
from contam_assets.detector.clusters import Cluster, find_clusters
from contam_assets.detector.config import DetectConfig
from contam_assets.detector.index import NgramIndex
from contam_assets.detector.ngrams import ngram_hashes
from contam_assets.detector.scoring import combined_score, interpolate_threshold, overlap_ratio, passes_threshold


@dataclass
class Candidate:
    local: int
    record_id: int
    cluster_start: int  # first token of the question match
    question_end: int  # last token of the question match (inclusive), cut before an answer it ran into
    n_matched: int
    q_overlap: float
    a_overlap: float | None = None
    p_overlap: float | None = None
    answer_spans: list[tuple[int, int]] = field(default_factory=list)
    passage_span: tuple[int, int] | None = None
    score: float = 0.0
    required: float = 1.0
    flagged: bool = False
    cluster_end: int = -1  # last token of the cluster as expanded (before the answer cut)
    question_check: bool = False  # decon's question pre-check passed (overlap >= min_q and its length-adjusted bar)
    reason: str = ""  # beyond decon: the rule that made the row ("" = decon's; rules.py names the others)
    held: bool = False  # beyond decon: flagged for review only (question_only), removes nothing until accepted


# -- candidate scoring (contamination_entry.rs) ---------------------------------

def score_clusters(index: NgramIndex, tokens: np.ndarray, clusters: list[Cluster], cfg: DetectConfig,
                   only: np.ndarray | None = None) -> list[Candidate]:
    """Candidates of the clusters (with ``only``, a bool per record local: those records' candidates only)."""
    n = cfg.ngram_size
    min_q, threshold, report_floor = cfg.min_question_overlap, cfg.threshold, cfg.report_floor
    decay_start, decay_end = cfg.decay_start, cfg.decay_end
    out: dict[tuple[int, int], Candidate] = {}
    q_floor = question_floor(cfg)
    floor = q_floor * (1 - 1e-9)  # the slack keeps the bound below on the safe side of rounding
    max_idf = index.record_max_idf()
    q_idf, q_idf_sums, q_lens, a_lens, p_lens = index.q_idf, index.q_idf_sum, index.q_len, index.a_len, index.p_len
    for cl in clusters:
        for local, keys in cl.matches.items():
            if only is not None and not only[local]:
                continue
            q_idf_sum = float(q_idf_sums[local])
            if len(keys) * max_idf[local] < floor * q_idf_sum:
                continue  # even at its largest idf per matched key the record stays under the floor below
            q = overlap_ratio(float(q_idf[list(keys)].sum()), q_idf_sum)
            # decon rule: Σ idf(matched unique n-grams) / Σ idf(all unique n-grams)
            if q < q_floor:
                continue
            q_len = int(q_lens[local])
            q_required = interpolate_threshold(q_len, decay_start, decay_end, min_q)
            decon_prefilter = q >= min_q and q >= q_required
            start, end_pos = cl.bounds[local]
            cluster_len = (end_pos + n - 1) - start + 1
            excess = max(0, cluster_len - q_len)
            q_end_for_answer = max((end_pos + n - 1) - excess, 0)
            cand = Candidate(local, int(index.record_ids[local]), start, end_pos + n - 1, len(keys), q,
                             cluster_end=end_pos + n - 1)
            p_len = int(p_lens[local])
            if p_len > 0:
                cand.passage_span, cand.p_overlap = boundaries.passage(index, local, tokens, start, cfg)
            a_unique = None
            a_len = int(a_lens[local])
            if a_len > 0:
                a_unique = int(index.a_unique[local])
                if a_len <= cfg.short_answer_token_threshold:
                    spans, cand.a_overlap = boundaries.short_answer(index, local, tokens, q_end_for_answer, cfg.short_answer_window)
                else:
                    window = max(a_len * 2, cfg.min_long_answer_window)
                    spans, cand.a_overlap = boundaries.long_answer(index, local, tokens, q_end_for_answer, window, cfg.answer_ngram_size)
                cand.answer_spans = spans or []
                if spans and spans[0][0] <= cand.question_end and cluster_len > q_len:
                    cand.question_end = max(spans[0][0] - 1, 0)
            score = cand.score = combined_score(q, int(index.q_unique[local]), cand.a_overlap, a_unique, cand.p_overlap)
            # decon rule: L = question + answer (unique tokens) + passage tokens sets the required score
            L = q_len + (a_unique or 0) + (p_len if p_len > 0 else 0)
            required = cand.required = interpolate_threshold(L, decay_start, decay_end, threshold)
            cand.question_check = decon_prefilter
            flagged = cand.flagged = decon_prefilter and passes_threshold(score, required, threshold)
            if score < report_floor and not flagged:
                continue
            key = (local, start)
            prev = out.get(key)
            if prev is None or (flagged, score) > (prev.flagged, prev.score):
                out[key] = cand
    return sorted(out.values(), key=lambda c: (c.cluster_start, c.record_id))


def scan_tokens(index: NgramIndex, tokens: np.ndarray, cfg: DetectConfig, short=None) -> list[Candidate]:
    """All candidates in one document (empty when the document is under `min_doc_tokens`).

    The plain per-document path; :func:`scan_many` gives the same result for many documents.
    ``short``: short.ShortQuestions (the `short_questions` part).
    """
    if len(tokens) < cfg.min_doc_tokens:
        return []
    clusters, _ = find_clusters(index, tokens, cfg, short=short)
    if not clusters:
        return []
    return score_clusters(index, tokens, clusters, cfg)


# -- many documents at once --------------------------------------------------------

def question_floor(cfg: DetectConfig) -> float:
    """Question overlap below which score_clusters drops a cluster without scoring it."""
    return min(cfg.min_question_overlap, cfg.candidate_question_floor)


def can_reach_floor(index: NgramIndex, keys: np.ndarray, floor: float, hot: bool = True,
                    only: np.ndarray | None = None) -> bool:
    """False only when no record (of ``only``, a bool per record local) can reach question overlap ``floor``
    with these n-gram keys.

    ``keys`` are the index keys found anywhere in a document.  A cluster starts at a
    non-hot key and only collects records in that key's postings, and a record's
    overlap counts matched keys of the document only, so a record's overlap is at
    most (idf of the document's non-hot keys it holds + idf of all the document's hot
    keys) / its idf total.  If that bound is under ``floor`` for every record of every
    non-hot key, score_clusters would drop every cluster of the document.
    With ``hot=False`` the hot keys count for nobody: True exactly when some record
    holds non-hot keys of the document worth ``floor`` of its idf total (the gate of
    the near-duplicate stage, which the prefilter's bound then covers).
    Compiled where numba runs (walk_kernel.reach); :func:`can_reach_floor_numpy` is the plain path.
    """
    if walk_kernel.AVAILABLE and compiled.enabled():
        return walk_kernel.reach(index, keys, floor, hot=hot, only=only)
    return can_reach_floor_numpy(index, keys, floor, hot, only)


def can_reach_floor_numpy(index: NgramIndex, keys: np.ndarray, floor: float, hot: bool = True,
                          only: np.ndarray | None = None) -> bool:
    """:func:`can_reach_floor` in numpy."""
    if floor <= 0:
        return True
    u = np.unique(keys)
    cold = u[~index.hot[u]]
    if len(cold) == 0:
        return False  # decon rule: a hot n-gram starts no cluster
    hot_idf = float(index.q_idf[u[index.hot[u]]].sum()) if hot else 0.0
    first, count = index.q_offsets[cold], index.q_offsets[cold + 1] - index.q_offsets[cold]
    ends = np.cumsum(count)
    recs = index.q_docs[np.repeat(first - (ends - count), count) + np.arange(int(ends[-1]))]
    records, inverse = np.unique(recs, return_inverse=True)
    idf = np.bincount(inverse, weights=np.repeat(index.q_idf[cold], count))
    # a relative slack of 1e-9 keeps the bound on the safe side of float rounding
    reach = idf + hot_idf >= floor * index.q_idf_sum[records] * (1 - 1e-9)
    return bool(np.any(reach if only is None else reach & only[records]))


def scan_many(index: NgramIndex, docs: list[np.ndarray], cfg: DetectConfig, extras=None,
              gated: dict | None = None, only: np.ndarray | None = None) -> list[list[Candidate]]:
    """``[scan_tokens(index, t, cfg) for t in docs]``, with the per-document numpy work batched.

    The n-gram hashes of all documents are computed in one pass over their
    concatenation (a window that crosses two documents is never read) and looked
    up exactly in one pass; a document is walked only when it holds a non-hot index
    key and can reach the question floor (a coarse bound for all documents at once,
    then :func:`can_reach_floor`).

    ``extras`` (thorough.Extras, the `thorough` parts): short questions join the walk,
    and every document that passes the near-duplicate gate goes into ``gated`` (position
    -> the non-hot index keys it holds; thorough.finish verifies it on its words).

    ``only`` (a bool per record local; without ``extras``): the candidates of those records only,
    as filtering the full result would give.  The walk itself is decon's over every record (where
    clusters start depends on where the others end), but a document none of whose ``only`` records
    can reach the floor is not walked, and only their candidates are scored: an incremental rescan.
    """
    if only is not None and extras is not None:
        raise ValueError("only= is for decon's scan; the thorough rules look at every candidate")
    short = extras.short if extras is not None else None
    near_floor = extras.near_floor if extras is not None and gated is not None else None
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
    coarse = floor if near_floor is None else min(floor, near_floor)
    # a cheaper bound first, for all documents at once: the idf of every hit (repeats included) must
    # reach floor * the smallest idf total of any record a non-hot hit could start a cluster for
    hk, hd = keys[hit[inside]], doc_of[inside]
    total = np.bincount(hd, weights=index.q_idf[hk], minlength=len(docs))
    smallest = np.full(len(docs), np.inf)
    cold = ~index.hot[hk]
    np.minimum.at(smallest, hd[cold], index.key_min_total()[hk[cold]])
    has_cold = np.isfinite(smallest)  # decon rule: only a non-hot n-gram starts a cluster
    if coarse > 0:
        has_cold &= total * (1 + 1e-9) >= coarse * np.where(has_cold, smallest, 0.0) * (1 - 1e-9)
    maybe = np.flatnonzero(has_cold)
    fast_walk = short is None and walk_kernel.AVAILABLE and compiled.enabled()
    if fast_walk and near_floor is None:  # the loop below in one compiled call: the bound, then the walk
        for i, clusters in walk_kernel.clusters_many(index, keys, starts, lens, maybe, cfg, floor, only).items():
            out[i] = score_clusters(index, docs[i], clusters, cfg, only=only)
        return out
    for i in maybe.tolist():
        L = int(lens[i])
        if L < cfg.min_doc_tokens:
            continue
        s, m = int(starts[i]), L - n + 1
        doc_keys = keys[s : s + m]
        present = doc_keys[doc_keys >= 0]
        if near_floor is not None and can_reach_floor(index, present, near_floor, hot=False):
            gated[i] = np.unique(present[~index.hot[present]])
        if not can_reach_floor(index, present, floor, only=only):
            continue
        if fast_walk:  # the same walk compiled, handing on only the records that may reach the floor
            clusters = walk_kernel.clusters(index, doc_keys, cfg, floor, only)
        else:
            clusters, _ = find_clusters(index, docs[i], cfg, hashes=hashes[s : s + m], keys=doc_keys, short=short)
        if clusters:
            out[i] = score_clusters(index, docs[i], clusters, cfg, only=only)
    return out
