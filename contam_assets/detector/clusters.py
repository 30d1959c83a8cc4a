"""Cluster discovery: where in a document a question match starts and how far it reaches.

decon's src/detect/detection.rs (sampled lookup) and cluster.rs (expansion).  A cluster
is the set of reference records whose question n-grams a run of the document hits,
with each record's matched n-grams and first/last matched position.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass

import numpy as np

from contam_assets.detector.config import DetectConfig
from contam_assets.detector.index import NgramIndex
from contam_assets.detector.ngrams import ngram_hashes


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
        self._cand: list[int] | None = None
        if keys is None:
            self.maybe = index.bloom_test(hashes)
        else:
            self.maybe = keys >= 0
            self._keys = dict(zip(np.flatnonzero(self.maybe).tolist(), keys[self.maybe].tolist()))

    def candidates(self) -> list[int]:
        """Positions that may hit (ascending); every other position is a sure miss."""
        if self._cand is None:
            self._cand = np.flatnonzero(self.maybe).tolist()
        return self._cand

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


@dataclass
class _Walk:
    """One direction of a cluster's expansion: the records followed and what each has matched."""

    records: frozenset  # the cluster's records (no other record joins it)
    matches: dict[int, set[int]]  # shared with the Cluster
    bounds: dict[int, list[int]]  # shared with the Cluster
    side: int  # 0: walking left (updates the first position), 1: walking right (the last)
    step: int  # -1 or +1


def _traverse(lk: _DocLookup, walk: _Walk, start: int, max_misses: int) -> int:
    """Walk from ``start`` one n-gram at a time; return the last position visited.

    decon counts every record's consecutive misses at every step.  Here each record keeps the step
    at which those misses would reach ``max_misses`` (its ``drop`` step), moved only where it is hit,
    and the walk jumps from one position that may hit to the next: the same records, matches,
    bounds and end as the step-by-step walk (test_cluster_walk.py holds them equal), without a
    Python step per position and record.
    """
    records, matches, bounds, side, step = walk.records, walk.matches, walk.bounds, walk.side, walk.step
    if not records:
        return start
    limit = len(lk.hashes)
    drop = dict.fromkeys(records, max_misses)  # record -> the step (1, 2, ...) at which it is dropped
    last = max_misses  # the last step of the walk: every record is dropped after it
    cand = lk.candidates()
    j = bisect_right(cand, start) if step > 0 else bisect_left(cand, start) - 1
    idx, t = start, 0
    while t < last:
        room = limit - 1 - idx if step > 0 else idx  # steps before the document's edge stops the walk
        nxt = cand[j] if 0 <= j < len(cand) else None
        gap = abs(nxt - idx) if nxt is not None else room + 1
        if gap > room or t + gap > last:  # only misses until every record is dropped, or the edge
            idx += step * min(last - t, room)
            break
        idx, t, j = nxt, t + gap, j + step
        k = lk.key_at(idx)
        if k < 0:
            continue
        for d in records & lk.docs(k):
            if drop[d] < t:
                continue  # dropped before this step
            m = matches[d]
            if k not in m:
                m.add(k)
                drop[d] = t + max_misses  # decon rule: a new unique matched n-gram resets the miss count
            else:
                drop[d] += 1  # a repeated n-gram is not a miss
            bounds[d][side] = idx
            if drop[d] > last:
                last = drop[d]
    # decon rule: a record is dropped after 11 consecutive misses; the walk ends when none is left
    return idx


def expand_cluster(lk: _DocLookup, hit: int, key: int, cfg: DetectConfig, only: frozenset | None = None) -> Cluster:
    """The cluster a hit at ``hit`` starts: every record of the key's postings (or only those in ``only``)."""
    d0 = lk.docs(key) if only is None else lk.docs(key) & only
    matches = {d: {key} for d in d0}
    bounds = {d: [hit, hit] for d in d0}
    max_misses = cfg.question_max_consecutive_misses
    # decon rule: expand left first, then right, each from the hit with fresh miss counts
    records = frozenset(d0)
    _traverse(lk, _Walk(records, matches, bounds, side=0, step=-1), hit, max_misses)
    end = _traverse(lk, _Walk(records, matches, bounds, side=1, step=+1), hit, max_misses)
    return Cluster(matches=matches, bounds=bounds, end=end)


def find_clusters(index: NgramIndex, tokens: np.ndarray, cfg: DetectConfig, hashes: np.ndarray | None = None,
                  keys: np.ndarray | None = None, short=None) -> tuple[list[Cluster], _DocLookup | None]:
    """decon's sampled walk; with ``short`` (short.ShortQuestions), also the clusters of short questions
    started at every position (beyond decon, the `short_questions` part)."""
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
    if short is not None:
        clusters += short.clusters(lk, clusters, cfg)
    return clusters, lk
