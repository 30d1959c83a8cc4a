"""The cluster walk (clusters._traverse) equals decon's step-by-step walk.

decon's cluster expansion (src/detect/cluster.rs) moves one n-gram at a time and adds a miss to
every record still followed at every step.  clusters.py keeps, per record, the step at which it
would be dropped and jumps from one position that may hit to the next.  `step_by_step` below is
decon's rule written out again, step by step; both walks must give the same matched keys (in
the same insertion order: the scoring sums their idf in that order), the same bounds and the
same end, on random documents whose n-grams come from a small vocabulary with overlapping
postings: repeats, hits right at the miss limit, walks that reach either edge of the document.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from contam_assets.detector.clusters import expand_cluster
from contam_assets.detector.config import preset


def step_by_step(lk, d0, hit: int, key: int, max_misses: int):
    """decon's expansion: left then right from the hit, every record's misses counted at every step."""
    matches = {d: {key} for d in d0}
    bounds = {d: [hit, hit] for d in d0}
    end = hit
    for side, step in ((0, -1), (1, +1)):
        active, misses, idx = set(d0), dict.fromkeys(d0, 0), hit
        while active:
            if (step < 0 and idx <= 0) or (step > 0 and idx + 1 >= len(lk.hashes)):
                break
            idx += step
            k = lk.key_at(idx)
            docs = lk.docs(k) if k >= 0 else frozenset()
            for d in list(active):
                if d in docs:
                    if k not in matches[d]:
                        matches[d].add(k)
                        misses[d] = 0
                    bounds[d][side] = idx
                else:
                    misses[d] += 1
                    if misses[d] >= max_misses:
                        active.discard(d)
        end = idx
    return matches, bounds, end


class FakeLookup:
    """What the walk reads of a document: a key (or -1) per position, and each key's records."""

    def __init__(self, keys: list[int], postings: dict[int, frozenset], hide: float, rng: random.Random):
        self.hashes = np.zeros(len(keys), dtype=np.uint64)
        self._keys = keys
        self._postings = postings
        # `maybe` is a superset of the hits (a Bloom filter's false positives among the misses)
        self.maybe = np.array([k >= 0 or rng.random() < hide for k in keys], dtype=bool)

    def candidates(self) -> list[int]:
        return np.flatnonzero(self.maybe).tolist()

    def key_at(self, pos: int) -> int:
        return self._keys[pos] if self.maybe[pos] else -1

    def docs(self, key: int) -> frozenset:
        return self._postings[key]


def random_case(rng: random.Random):
    n_keys, n_records = rng.randint(2, 30), rng.randint(1, 12)
    postings = {k: frozenset(rng.sample(range(n_records), rng.randint(1, n_records))) for k in range(n_keys)}
    length = rng.randint(1, 400)
    density = rng.choice([0.02, 0.1, 0.3, 0.7, 1.0])
    keys = [rng.randrange(n_keys) if rng.random() < density else -1 for _ in range(length)]
    # stretches of exactly the miss limit (and one more) between two hits
    for _ in range(rng.randint(0, 3)):
        at, gap = rng.randrange(length), rng.choice([10, 11, 12])
        for p in range(at, min(at + gap, length)):
            keys[p] = -1
    return FakeLookup(keys, postings, rng.choice([0.0, 0.05, 0.5]), rng), keys


@pytest.mark.parametrize("seed", range(8))
def test_walk_equals_step_by_step(seed):
    cfg = preset("default")
    max_misses = cfg.question_max_consecutive_misses
    rng = random.Random(seed)
    walks = 0
    for _ in range(300):
        lk, keys = random_case(rng)
        hits = [p for p, k in enumerate(keys) if k >= 0]
        if not hits:
            continue
        hit = rng.choice(hits)
        key = keys[hit]
        want_m, want_b, want_end = step_by_step(lk, lk.docs(key), hit, key, max_misses)
        got = expand_cluster(lk, hit, key, cfg)
        assert got.end == want_end
        assert got.bounds == want_b
        assert list(got.matches) == list(want_m)
        for d, m in want_m.items():
            assert list(got.matches[d]) == list(m)  # same keys, same iteration order (the idf sum's order)
        walks += 1
    assert walks > 200


def test_walk_reaches_each_edge_and_stops_at_the_miss_limit():
    cfg = preset("default")
    max_misses = cfg.question_max_consecutive_misses
    postings = {0: frozenset({0}), 1: frozenset({0}), 2: frozenset({1})}
    # record 0 hit at 5 and 15 (9 misses between: still followed); 20 repeats key 0, which is no miss
    # but resets nothing: 4 misses before it and 7 after make 11 at position 27
    keys = [-1] * 40
    keys[5], keys[15], keys[20] = 0, 1, 0
    lk = FakeLookup(keys, postings, 0.0, random.Random(0))
    cl = expand_cluster(lk, 5, 0, cfg)
    assert cl.bounds[0] == [5, 20]
    assert cl.end == 15 + max_misses + 1  # dropped at its 11th miss after its last new n-gram
    assert cl.matches[0] == {0, 1}
    # a walk that reaches the last position stops there; the left walk stops at position 0
    lk = FakeLookup([0, -1, 0, -1, 1], postings, 0.0, random.Random(0))
    cl = expand_cluster(lk, 2, 0, cfg)
    assert cl.end == 4 and cl.bounds[0] == [0, 4]
    # a gap of 11 misses drops the record before the next hit
    keys = [-1] * 40
    keys[3], keys[3 + max_misses + 1] = 0, 1
    lk = FakeLookup(keys, postings, 0.0, random.Random(0))
    cl = expand_cluster(lk, 3, 0, cfg)
    assert cl.matches[0] == {0} and cl.end == 3 + max_misses
