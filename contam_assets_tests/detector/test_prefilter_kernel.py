"""The compiled byte pass (detector/prefilter_kernel.py) finds exactly what the numpy reference pass finds.

Held side by side on real benchmark items and host text, on the edges of the byte pass (a run of exactly
MAX_RUN bytes and longer ones, at a document's start, end and across a batch's end; runs of spaces across
documents; empty documents; lone surrogates; non-ASCII text), on a synthetic prefilter whose anchors are
windows of the documents themselves (so every table hits), and with a fallback 4-byte bit set: the
anchor hits (document, anchor), the forced documents and the final answer must all be equal.
A prefilter saved beside its index is read back equal, and one cut short is built and written again.
"""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest

from contam_assets.demo import HostText
from contam_assets.detector import prefilter
from contam_assets.detector.anchors import LEVELS, N_TABLES, SHORT, quad_slots, short_hashes, u64_view, window_hashes
from contam_assets.detector.config import DetectConfig
from contam_assets.detector.prefilter import MAX_RUN, compiled_pass, ensure_prefilter, pack
from contam_assets.detector.text import translate_bytes
from contam_assets.testing.throughput_planted import build_detector, planted_documents
from contam_assets_tests.detector.test_prefilter_recall import adversarial_documents

CFG = DetectConfig()
pytestmark = pytest.mark.skipif(compiled_pass() is None, reason="numba is not installed")


@pytest.fixture(scope="module")
def detector(shared_data):
    return build_detector(shared_data, CFG)


def edge_documents() -> list[str]:
    host = HostText(11)
    return [
        "",
        " ",
        "   \t\n  ",
        "x" * (MAX_RUN - 1),  # with the next document's "\0", a run of exactly MAX_RUN bytes: not forced
        "x" * (MAX_RUN + 1),  # over it: forced
        "word " + "y" * (MAX_RUN + 1),  # at a document's end
        "z" * (MAX_RUN + 1) + " word",  # at its start
        host.paragraph() + "   ,,,   ;;; " + host.paragraph(),  # runs of spaces (punctuation becomes spaces)
        "a lone surrogate \udc80 here " + host.paragraph(),
        "caf\u00e9 na\u00efve \u4e2d\u6587 \u00c9COLE " + host.paragraph(),
        "numbers 12 345 6789 0.5 1/2 3x+4=5 " * 3,
        "&amp; &lt;b&gt; escaped " + host.paragraph(),
    ]


def both(pf, texts: list[str]) -> None:
    d0, a0, f0 = pf.hits(texts, CFG.clean_options, compiled=False)
    d1, a1, f1 = pf.hits(texts, CFG.clean_options, compiled=True)
    assert np.array_equal(f0, f1), np.flatnonzero(f0 != f1)
    assert sorted(zip(d0.tolist(), a0.tolist())) == sorted(zip(d1.tolist(), a1.tolist()))
    assert np.array_equal(pf.must_scan(texts, CFG.clean_options, compiled=False),
                          pf.must_scan(texts, CFG.clean_options, compiled=True))


def test_real_documents_every_task_and_one_task(detector, shared_data):
    records, index, _ = detector
    host = HostText(5)
    texts = (adversarial_documents(records, n=300, seed=31) + [t for _, t in planted_documents(records, shared_data, n=120, seed=8)]
             + [host.document() for _ in range(200)] + edge_documents())
    random.Random(3).shuffle(texts)
    pf = ensure_prefilter(index, records, CFG.replace(prefilter=True))
    d, _, _ = pf.hits(texts, CFG.clean_options, compiled=True)
    assert len(d) > 1000  # the documents do hold anchors
    both(pf, texts)
    both(ensure_prefilter(index, records, CFG.replace(prefilter=True), ["gsm8k"]), texts)
    for k in (1, 2, 7):  # small batches: the batch's first and last documents at every position
        for i in range(0, 40, k):
            both(pf, texts[i : i + k])


def test_edges_alone_and_across_batch_ends(detector):
    records, index, _ = detector
    pf = ensure_prefilter(index, records, CFG.replace(prefilter=True))
    edges = edge_documents()
    both(pf, edges)
    for doc in edges:  # each one alone: the run after a batch's last space
        both(pf, [doc])
    _, _, forced = pf.hits(edges, CFG.clean_options)
    assert forced.tolist()[3:9] == [False, True, True, True, False, True]


def synthetic_prefilter(texts: list[str], seed: int, with_pairs: bool):
    """Anchors taken from the documents' own windows in every table (so each table hits), random groups and needs."""
    rng = np.random.default_rng(seed)
    parts = [translate_bytes(t, CFG.clean_options) for t in texts]
    raw = np.frombuffer(b"\0 " + b"\0 ".join(parts) + bytes(24), dtype=np.uint8)
    space = raw == 32
    buf = raw[np.concatenate(([True], ~(space[1:] & space[:-1])))].tobytes()
    spaces = np.flatnonzero(np.frombuffer(buf, dtype=np.uint8) == 32)
    view = u64_view(buf)
    wh = window_hashes(view, spaces)
    per_table = [wh[W] for W in LEVELS] + [short_hashes(view, spaces, W) for W in SHORT]
    hashes, levels = [], []
    for j, h in enumerate(per_table):
        pick = rng.choice(len(h), size=min(len(h), 60), replace=False)
        hashes.append(np.concatenate([h[pick], rng.integers(0, 2**63, 40, dtype=np.uint64)]))  # and keys no text holds
        levels.append(np.full(100, j, dtype=np.int64))
    hashes, levels = np.concatenate(hashes), np.concatenate(levels)
    n_groups = 25
    groups = rng.integers(0, n_groups, len(hashes))
    weights = rng.uniform(0.2, 2.0, len(hashes))
    need = rng.uniform(0.0, 3.0, n_groups)
    pairs = None
    if with_pairs:
        pairs = np.zeros(1 << 17, dtype=np.uint8)
        at = rng.choice(len(buf) - 24, size=5, replace=False)
        v = quad_slots(view, at.astype(np.int64)).astype(np.int64)
        np.bitwise_or.at(pairs, v >> 3, np.left_shift(1, v & 7).astype(np.uint8))
    pf = pack(hashes.astype(np.uint64), levels, groups, weights, need, "{}", False, pairs)
    assert len(pf.level_off) == N_TABLES + 1
    return pf


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_synthetic_anchors_in_every_table_and_fallback_windows(seed):
    host = HostText(seed)
    texts = [host.document() for _ in range(60)] + edge_documents()
    random.Random(seed).shuffle(texts)
    for with_pairs in (False, True):
        pf = synthetic_prefilter(texts, seed, with_pairs)
        d, a, f = pf.hits(texts, CFG.clean_options, compiled=True)
        tables = np.searchsorted(pf.level_off, a, side="right") - 1
        assert set(tables.tolist()) == set(range(N_TABLES))  # every table was hit
        if with_pairs:
            assert f.sum() >= 1
        both(pf, texts)


def fresh(index):
    """The same index without the prefilters built on it."""
    other = copy.copy(index)
    other.__dict__.pop("_prefilters", None)
    return other


def test_a_saved_prefilter_is_read_back_and_a_broken_one_is_built_again(detector, tmp_path, monkeypatch):
    records, index, _ = detector
    cfg = CFG.replace(prefilter=True)
    built = ensure_prefilter(fresh(index), records, cfg, folder=tmp_path)
    (saved,) = tmp_path.glob("prefilter-v*.npz")
    texts = adversarial_documents(records, n=120, seed=41) + edge_documents()
    calls = []
    real_build = prefilter.build_prefilter
    monkeypatch.setattr(prefilter, "build_prefilter", lambda *a, **k: calls.append(1) or real_build(*a, **k))
    read = ensure_prefilter(fresh(index), records, cfg, folder=tmp_path)
    assert not calls  # read, not built
    for name in prefilter.ARRAYS:
        assert np.array_equal(getattr(read, name), getattr(built, name)), name
    assert read.params_json == built.params_json and np.array_equal(read.must_scan(texts, cfg.clean_options),
                                                                     built.must_scan(texts, cfg.clean_options))
    saved.write_bytes(saved.read_bytes()[:1000])  # cut short
    again = ensure_prefilter(fresh(index), records, cfg, folder=tmp_path)
    assert calls == [1] and np.array_equal(again.keys, built.keys)
    assert np.array_equal(prefilter.Prefilter.load(saved).keys, built.keys)  # written whole again
    per_task = ensure_prefilter(fresh(index), records, cfg, ["gsm8k"], folder=tmp_path)  # another key, another file
    assert len(list(tmp_path.glob("prefilter-v*.npz"))) == 2 and len(per_task.keys) < len(built.keys)
