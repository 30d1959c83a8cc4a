"""Batched n-gram helpers equal their per-array definitions, and the index built with them
equals the per-record construction."""

from __future__ import annotations

import numpy as np
import polars as pl

from contam_assets.detector.config import DetectConfig
from contam_assets.detector.index import encode_texts
from contam_assets.detector.ngrams import ngram_hashes, ngram_hashes_reference, segment_ngram_hashes, unique_per_segment
from contam_assets.testing.throughput_planted import build_detector


def random_arrays(rng, k):
    out = []
    for _ in range(k):
        L = int(rng.choice([0, 1, 2, 4, 5, 6, 9, 30, 200]))
        out.append(rng.integers(0, 50 if rng.random() < 0.5 else 2**63, size=L, dtype=np.uint64))
    return out


def test_segment_ngram_hashes_equals_per_array_hashes():
    rng = np.random.default_rng(0)
    for _ in range(200):
        arrays = random_arrays(rng, int(rng.integers(0, 12)))
        n = int(rng.integers(1, 7))
        use = rng.random(len(arrays)) < 0.7
        h, seg = segment_ngram_hashes(arrays, n, use)
        want = [(ngram_hashes(a, n), i) for i, a in enumerate(arrays) if use[i]]
        want_h = np.concatenate([w for w, _ in want]) if want else np.zeros(0, dtype=np.uint64)
        want_s = np.concatenate([np.full(len(w), i) for w, i in want]) if want else np.zeros(0, dtype=np.int64)
        assert np.array_equal(h, want_h) and np.array_equal(seg, want_s)
        for i, a in enumerate(arrays):  # and the vectorised hash is the plain definition
            if use[i] and len(a) >= n:
                assert h[seg == i].tolist() == ngram_hashes_reference(a.tolist(), n)


def test_unique_per_segment_equals_np_unique_per_segment():
    rng = np.random.default_rng(1)
    for trial in range(300):
        m = int(rng.integers(0, 300))
        if trial % 3 == 2:  # 64-bit values (n-gram hashes), a few repeated: packed by their rank
            values = rng.choice(rng.integers(0, 2**63, size=40, dtype=np.int64).astype(np.uint64) * np.uint64(2), size=m)
        else:  # small values (token ids): packed as themselves
            values = rng.integers(0, 20, size=m).astype(np.uint64)
        seg = np.sort(rng.integers(0, 8, size=m)) if rng.random() < 0.5 else rng.integers(0, 8, size=m)
        v, s = unique_per_segment(values, seg)
        want = [(np.unique(values[seg == k]), k) for k in range(8)]
        assert np.array_equal(v, np.concatenate([u for u, _ in want]).astype(values.dtype))
        assert np.array_equal(s, np.concatenate([np.full(len(u), k) for u, k in want]))


def test_index_postings_equal_the_per_record_construction(shared_data):
    cfg = DetectConfig()
    records, index, _ = build_detector(shared_data, cfg)
    recs = records.filter(pl.col("indexed")).sort("record_id")
    q_tokens = encode_texts(recs["question"].to_list(), cfg)
    a_tokens = encode_texts([a or "" for a in recs["answer"].to_list()], cfg)
    rng = np.random.default_rng(2)
    for i in rng.choice(index.n_records, size=400, replace=False).tolist():
        t = q_tokens[i]
        want = np.unique(ngram_hashes(t, cfg.ngram_size)) if len(t) >= cfg.ngram_size else None
        if want is not None:
            assert index.q_unique[i] == len(want)
            assert (index.lookup(want) >= 0).all()
            assert all(i in set(index.postings(int(k)).tolist()) for k in index.lookup(want))
        a = a_tokens[i]
        assert index.a_unique[i] == len(np.unique(a))
        if len(a) > cfg.short_answer_token_threshold and len(a) >= cfg.answer_ngram_size:
            keys, _ = index.answer_keys(i)
            assert np.array_equal(keys, np.unique(ngram_hashes(a, cfg.answer_ngram_size)))
