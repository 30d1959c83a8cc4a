"""Short questions, looked up at every position (beyond decon: the `short_questions` part of `thorough`).

decon looks up every ``sample_every``-th question n-gram and moves ``sample_every``
tokens after a miss (clusters.find_clusters).  A question of T tokens has T - n + 1
n-grams; under ``sample_every`` of them (T < n + sample_every - 1 = 14 with decon's
defaults), some placements in a document put no sampled position inside it, and a
verbatim copy is never looked at (docs/quality.md: every verbatim-like miss of the
default preset is such a question).

Rule: every n-gram of a document that is a (non-hot) question n-gram of a short
question's record starts a cluster for the short records of its postings, unless
that record's cluster already reaches past it.  The walk itself is unchanged; the
extra clusters are expanded, scored and flagged by decon's own rules.  The
scanner already knows the index key of every position (NgramIndex.lookup), so the
cost is a mask over the keys and the expansions themselves.

Not reached: questions under ``ngram_size`` tokens, which decon indexes as one
shorter n-gram no document n-gram equals.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from contam_assets.detector.clusters import Cluster, _DocLookup, expand_cluster
from contam_assets.detector.config import DetectConfig
from contam_assets.detector.index import NgramIndex


@dataclass
class ShortQuestions:
    records: frozenset  # index locals of records whose question has n <= tokens < short_question_tokens
    key_mask: np.ndarray  # bool per question key: not hot and held by one of `records`

    @classmethod
    def build(cls, index: NgramIndex, cfg: DetectConfig) -> "ShortQuestions":
        short = (index.q_len >= cfg.ngram_size) & (index.q_len < cfg.short_question_tokens)
        key_of_pair = np.repeat(np.arange(len(index.q_keys)), np.diff(index.q_offsets))
        mask = np.zeros(len(index.q_keys), dtype=bool)
        mask[key_of_pair[short[index.q_docs]]] = True
        return cls(records=frozenset(np.flatnonzero(short).tolist()), key_mask=mask & ~index.hot)

    def clusters(self, lk: _DocLookup, found: list[Cluster], cfg: DetectConfig) -> list[Cluster]:
        """Clusters of short records started at every position the walk's clusters do not already cover."""
        reach: dict[int, int] = {}  # short record -> last n-gram position of a cluster already holding it
        for cl in found:
            for d, (_, last) in cl.bounds.items():
                if d in self.records:
                    reach[d] = max(reach.get(d, -1), last)
        out: list[Cluster] = []
        for p in np.flatnonzero(lk.maybe).tolist():
            k = lk.key_at(p)
            if k < 0 or not self.key_mask[k]:
                continue
            # beyond decon rule: a short question's n-gram starts a cluster at any position
            only = frozenset(d for d in lk.docs(k) & self.records if reach.get(d, -1) < p)
            if not only:
                continue
            cl = expand_cluster(lk, p, k, cfg, only=only)
            for d, (_, last) in cl.bounds.items():
                reach[d] = max(reach.get(d, -1), last)
            out.append(cl)
        return out
