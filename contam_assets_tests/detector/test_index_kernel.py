"""The index build's compiled steps (detector/index_kernel.py) equal their numpy paths, and the tokens the build
takes from the scan's cleaning path equal encode_texts' on texts of every kind."""

from __future__ import annotations

import random

import numpy as np
import pytest

from contam_assets.detector import index_kernel as ik
from contam_assets.detector.config import DetectConfig
from contam_assets.detector.index import encode_texts
from contam_assets.detector.ngrams import ngram_hash, ngram_hashes
from contam_assets_tests.detector.test_throughput_reference_paths import random_text

pytestmark = pytest.mark.skipif(not ik.AVAILABLE, reason="numba is not installed")


def both(monkeypatch, fn, *args, **kw):
    """``fn`` with the compiled steps on, then off (the numpy paths)."""
    out = []
    for mode in ("on", "off"):
        monkeypatch.setenv("CONTAM_COMPILED", mode)
        out.append(fn(*args, **kw))
    return out


def random_records(rng, k: int) -> tuple[np.ndarray, np.ndarray]:
    lens = rng.choice([0, 1, 2, 3, 4, 5, 6, 9, 40, 300], size=k)
    small = rng.random(k) < 0.5  # few distinct tokens: repeated n-grams within a record
    parts = [rng.integers(0, 4 if s else 2**63, size=n, dtype=np.uint64) for n, s in zip(lens, small)]
    offsets = np.zeros(k + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    return (np.concatenate(parts) if k else np.zeros(0, dtype=np.uint64)), offsets


def test_ngram_sets_equal_the_numpy_path_and_the_definition(monkeypatch):
    rng = np.random.default_rng(3)
    for trial in range(150):
        tokens, offsets = random_records(rng, int(rng.integers(0, 30)))
        m = len(offsets) - 1
        n = int(rng.integers(1, 7))
        short = bool(trial % 2)
        use = None if trial % 3 else rng.random(m) < 0.6
        for hashed in (True, False):
            (h1, c1), (h2, c2) = both(monkeypatch, ik.ngram_sets, tokens, offsets, n, short=short, use=use, hashed=hashed)
            assert h1.dtype == h2.dtype == np.uint64 and np.array_equal(h1, h2) and np.array_equal(c1, c2)
            want = []  # per record: its distinct n-grams (or tokens), sorted
            for r in range(m):
                t = tokens[offsets[r]:offsets[r + 1]]
                if use is not None and not use[r]:
                    continue
                if not hashed:
                    want.append(np.unique(t))
                elif len(t) >= n:
                    want.append(np.unique(ngram_hashes(t, n)))
                elif short and len(t):
                    want.append(np.array([ngram_hash(t)], dtype=np.uint64))
            assert h1.tolist() == (np.concatenate(want).tolist() if want else [])
            assert c1.sum() == len(h1) and len(c1) == m


def test_bucket_order_and_pair_sort_equal_the_stable_argsort(monkeypatch):
    rng = np.random.default_rng(4)
    for size in (0, 1, 7, 5_000, 60_000):
        keys = rng.integers(0, 2**64 - 1, size=size, dtype=np.uint64)
        if size > 10:
            keys[rng.integers(0, size, size // 3)] = keys[rng.integers(0, 8, size // 3)]  # repeated keys
        payload = np.arange(size, dtype=np.int32)[::-1].copy()
        (k1, p1, s1), (k2, p2, s2) = both(monkeypatch, ik.by_bucket, keys, payload, 6)
        assert np.array_equal(k1, k2) and np.array_equal(p1, p2) and np.array_equal(s1, s2) and s1[-1] == size
        o1, o2 = both(monkeypatch, ik.group_order, (keys % np.uint64(13)).astype(np.int64), 13)
        assert np.array_equal(o1[0], o2[0]) and np.array_equal(o1[1], o2[1])
        # one bucket's keys (the top bits equal) sorted by their low bits; equal keys keep their order of arrival
        one = (keys >> np.uint64(6)) | np.uint64(5 << 58)
        for bits, k in ((58, one), (64, keys)):
            (a1, b1), (a2, b2) = both(monkeypatch, lambda: ik.sort_pairs(k.copy(), payload.copy(), bits))
            order = np.argsort(k, kind="stable")
            assert np.array_equal(a1, k[order]) and np.array_equal(b1, payload[order])
            assert np.array_equal(a1, a2) and np.array_equal(b1, b2)
            first, counts = ik.runs(a1)
            want = np.unique(a1, return_index=True, return_counts=True)
            assert np.array_equal(a1[first], want[0]) and np.array_equal(first, want[1]) and np.array_equal(counts, want[2])


@pytest.mark.parametrize("tokenizer", ["cl100k", "word", "bytes"])
def test_encode_flat_equals_encode_texts(tokenizer, monkeypatch):
    rng = random.Random(12)
    texts = [random_text(rng) for _ in range(700)]
    texts += ["", None, "   ", "Ünïcödé “quoted” — text\u00a0with\u2003wide spaces", "lone \ud800 surrogate", "a\x1cb\x1fc",
              "&amp; <b>tag</b> &#233;", "tab\tand\nnew\\nline \\\"q\\\"", "x" * 900, texts[3], texts[3]]
    for cfg in (DetectConfig(tokenizer=tokenizer), DetectConfig(tokenizer=tokenizer, markup=True, unescape=False)):
        want = encode_texts([t or "" for t in texts], cfg)
        for mode in ("on", "off"):
            monkeypatch.setenv("CONTAM_COMPILED", mode)
            tokens, offsets = ik.encode_flat(texts, cfg)
            assert tokens.dtype == np.uint64 and len(offsets) == len(texts) + 1
            got = [tokens[offsets[i]:offsets[i + 1]] for i in range(len(texts))]
            assert all(np.array_equal(np.asarray(w, dtype=np.uint64), g) for w, g in zip(want, got))


def test_vocabulary_flags_and_value_counts():
    rng = np.random.default_rng(5)
    for high in (50, 2**40):
        vocab = np.unique(rng.integers(0, high, 300, dtype=np.uint64))
        flags = rng.random(len(vocab)) < 0.5
        tokens = vocab[rng.integers(0, len(vocab), 2_000)]
        assert np.array_equal(ik.vocabulary_flags(vocab, flags, tokens), flags[np.searchsorted(vocab, tokens)])
        v, c = ik.value_counts(tokens)
        w = np.unique(tokens, return_counts=True)
        assert v.dtype == np.uint64 and np.array_equal(v, w[0]) and np.array_equal(c, w[1])
