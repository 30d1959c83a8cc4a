"""The index build's compiled steps (detector/index_kernel.py) equal their numpy paths, and the tokens the build
takes from the scan's cleaning path equal encode_texts' on texts of every kind."""

from __future__ import annotations

import random

import numpy as np
import polars as pl
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


def ufunc_at_totals(idf, df, docs, sums, largest):
    """The definition ``idf_totals`` equals: ``np.add.at`` and ``np.maximum.at`` of each posting's key idf."""
    pair_idf = np.repeat(idf, df)
    np.add.at(sums, docs, pair_idf)
    np.maximum.at(largest, docs, pair_idf)


@pytest.mark.filterwarnings("ignore:invalid value encountered in maximum")  # the planted NaN idf
def test_idf_totals_equal_ufunc_at_bit_for_bit(monkeypatch):
    # sums whose value depends on the order of addition: 1e16 + 1.0 - 1e16 is 0.0 in postings order, 1.0 in another
    idf = np.array([1e16, 1.0, -1e16, 0.1, 0.2, 0.3, -0.0, 0.0, np.nan, 2.5])
    df = np.array([1, 1, 1, 3, 2, 2, 1, 1, 1, 2], dtype=np.int64)
    docs = np.array([0, 0, 0, 1, 2, 1, 1, 2, 1, 2, 3, 3, 4, 5, 5], dtype=np.int32)
    rng = np.random.default_rng(6)
    cases = [(idf, df, docs, 6)]
    for size in (0, 1, 50, 20_000):  # many postings on few records: long chains of additions per record
        k_idf = rng.choice([1e16, -1e16, 1.0, 1e-3, 3.7], size) * rng.random(size)
        k_df = rng.integers(1, 6, size).astype(np.int64)
        cases.append((k_idf, k_df, rng.integers(0, 40, int(k_df.sum())).astype(np.int32), 40))
    for c_idf, c_df, c_docs, n in cases:
        want_sums, want_largest = rng.random(n), np.zeros(n)  # sums start non-zero: added to, not overwritten
        start = want_sums.copy()
        ufunc_at_totals(c_idf, c_df, c_docs, want_sums, want_largest)
        for mode in ("on", "off"):
            monkeypatch.setenv("CONTAM_COMPILED", mode)
            sums, largest = start.copy(), np.zeros(n)
            ik.idf_totals(c_idf, c_df, c_docs, sums, largest)
            assert np.array_equal(sums.view(np.uint64), want_sums.view(np.uint64)), mode
            assert np.array_equal(largest.view(np.uint64), want_largest.view(np.uint64)), mode
    sums = np.zeros(6)
    ik.idf_totals(idf, df, docs, sums, np.zeros(6))
    assert sums[0] == 0.0  # the planted record: its three additions made in postings order


def planted_records(k: int) -> pl.DataFrame:
    """Records of a small vocabulary (n-grams shared by many records: keys with many postings), short and empty
    questions among them, some left out of the index."""
    from contam_assets.sources.reference import RECORD_SCHEMA

    rng = random.Random(8)
    words = [f"w{i}" for i in range(12)]
    text = lambda n: " ".join(rng.choice(words) for _ in range(n))  # noqa: E731
    rows = [dict(record_id=i, task="t", suite="s", split="test", instance_index=i, kind="qa", language="en",
                 derived=False, question=text(rng.choice([0, 1, 3, 8, 20, 60])), answer=text(rng.randint(0, 12)),
                 passage=text(40) if i % 3 == 0 else None, indexed=i % 17 != 5, skip_reason=None) for i in range(k)]
    return pl.DataFrame(rows, schema=RECORD_SCHEMA)


def test_index_built_compiled_equals_the_numpy_build(monkeypatch):
    """The compiled idf totals and the bucket read-ahead give the index the numpy steps give, array for array."""
    from contam_assets.detector import index_build as ixb
    from contam_assets.detector.config import DetectConfig
    from contam_assets_tests.detector.test_index_build_batched import assert_same_index

    records, cfg = planted_records(3_000), DetectConfig()
    built = both(monkeypatch, lambda: ixb.build_index(records, cfg, batch=400))
    assert_same_index(*built)
    assert_same_index(built[0], ixb.build_index_whole(records, cfg))
    assert built[0].q_docs.size > built[0].q_keys.size > 64  # keys with several postings, in many buckets
    assert built[0].record_max_idf().max() > 0


def test_bucket_read_ahead_reads_each_bucket_once_in_order_and_raises_its_errors(monkeypatch):
    from contam_assets.detector import index_build as ixb
    from contam_assets.detector.config import DetectConfig

    records, cfg, read = planted_records(500), DetectConfig(), []
    sorted_bucket = ixb._sorted_bucket
    monkeypatch.setattr(ixb, "_sorted_bucket", lambda spill, b: read.append(b) or sorted_bucket(spill, b))
    ixb.build_index(records, cfg)
    assert read == list(range(1 << ixb.BUCKET_BITS))

    def failing(spill, b):
        if b == 5:
            raise OSError("bucket 5 unreadable")
        return sorted_bucket(spill, b)

    monkeypatch.setattr(ixb, "_sorted_bucket", failing)
    with pytest.raises(OSError, match="bucket 5"):
        ixb.build_index(records, cfg)
