"""The scan's compiled steps equal their plain definitions: the word-cache walk (word_kernel.py) gives
tiktoken's ids whatever the batch holds, and the key table (key_table.py) the binary search's positions.

Reference: tiktoken cl100k ``encode_ordinary(" " + cleaned text)`` on the whole text
(tokenize.BPETokenizer.encode_reference), for random text under random cleaning options,
for the benchmark files' own text, and for the cases the walk hands back or repeats: words
longer than MAX_WORD_CHARS, lone surrogates, a cache too small for one batch (cleared
mid-batch), a hash that two words share.
"""

from __future__ import annotations

import gzip
import json
import random

import numpy as np
import pytest

from contam_assets.detector.text import MAX_WORD_CHARS, CleanOptions, clean_text, clean_words, translate_bytes
from contam_assets_tests.detector.test_throughput_reference_paths import random_options, random_text

word_kernel = pytest.importorskip("contam_assets.detector.word_kernel")
pytestmark = pytest.mark.skipif(not word_kernel.AVAILABLE, reason="numba not installed")


def _fresh(max_words: int = 1 << 17):
    from contam_assets.detector.tokenize import BPETokenizer, _word_index, _WordCache

    tok = BPETokenizer()
    tok.cache = _WordCache(tok._encode_word, max_words=max_words, encode_batch=tok._encode_word_batch, index=_word_index())
    return tok


def _real_texts(shared_data, n: int = 600) -> list[str]:
    texts = []
    with open(shared_data / "gsm8k_test.jsonl") as fh:
        for line in fh:
            row = json.loads(line)
            texts.append(row["question"] + "\n\n" + row["answer"])
            if len(texts) >= n // 2:
                break
    with gzip.open(shared_data / "HumanEval.jsonl.gz", "rt") as fh:
        texts += [json.loads(line)["prompt"] + json.loads(line)["canonical_solution"] for line in fh]
    with open(shared_data / "mbpp.jsonl") as fh:
        texts += [json.loads(line)["text"] + "\n" + json.loads(line)["code"] for line in fh][: n // 2]
    return texts


def _check(tok, texts: list[str], options: CleanOptions, batch: int = 97) -> int:
    """Asserts every document's ids equal tiktoken's on the whole cleaned text; returns the ids compared."""
    n = 0
    for i in range(0, len(texts), batch):
        chunk = texts[i : i + batch]
        got = tok.encode_translated([translate_bytes(t, options) for t in chunk])
        assert len(got) == len(chunk)
        for t, g in zip(chunk, got):
            want = tok.encode_reference(clean_text(t, options))
            assert g.dtype == np.uint64 and np.array_equal(g, want), t[:200]
            n += len(want)
    return n


def test_walk_equals_tiktoken_on_random_text_and_options():
    rng = random.Random(21)
    texts = [random_text(rng) for _ in range(1200)]
    for max_words in (1 << 17, 60):  # 60: the cache starts over inside a batch, the walk goes again
        tok = _fresh(max_words)
        for i in range(0, len(texts), 200):
            options = random_options(rng)
            assert _check(tok, texts[i : i + 200], options) > 0
        if max_words == 60:
            assert tok.cache.encoded > len(tok.cache.ids)  # it did start over


def test_walk_equals_tiktoken_on_the_benchmark_files(shared_data):
    texts = _real_texts(shared_data)
    tok = _fresh()
    n = _check(tok, texts, CleanOptions())
    assert n > 50_000
    # the second time every word is in the index: one walk, nothing encoded again
    encoded = tok.cache.encoded
    _check(tok, texts, CleanOptions())
    assert tok.cache.encoded == encoded


def test_long_words_surrogates_and_empty_documents():
    long_ascii = "x" * (MAX_WORD_CHARS + 1)
    long_multibyte = "\u00e9" * (MAX_WORD_CHARS // 2 + 10)  # over MAX_WORD_CHARS bytes, under it in characters
    texts = ["", "   ", "\n\t", f"a {long_ascii} b", f"before {long_multibyte} after", "lone \ud800 surrogate \udfff end",
             "x" * (3 * MAX_WORD_CHARS + 5), "\u0130stanbul \u03a3\u039f\u03a6\u039f\u03a3 STRASSE \u1e9e", "<|endoftext|> special"]
    tok = _fresh()
    _check(tok, texts, CleanOptions(), batch=len(texts))
    parts = [translate_bytes(t) for t in texts]
    got = tok.encode_translated(parts)
    assert [len(g) for g in got[:3]] == [0, 0, 0]


def test_python_path_without_the_index_is_the_same(shared_data):
    texts = _real_texts(shared_data, n=200)
    parts = [translate_bytes(t) for t in texts]
    with_index = _fresh().encode_translated(parts)
    tok = _fresh()
    tok.cache.index = None
    tok.cache.clear()
    without = tok.encode_translated(parts)
    assert all(np.array_equal(a, b) for a, b in zip(with_index, without))
    assert without == [] or tok.encode_words([clean_words(t) for t in texts[:1]])[0].tolist() == without[0].tolist()


def test_a_shared_hash_never_hands_out_another_words_ids():
    idx = word_kernel.WordIndex()
    idx.add(range(0, 1), [b"abc"])
    # pretend "abd" hashed like "abc": the stored bytes must tell them apart
    idx.w_hash[0] = word_kernel.fnv1a(b"abd")
    word_kernel._rehash(idx.table, idx.w_hash, np.array([0], dtype=np.int64))
    buf = np.frombuffer(b"abd abc", dtype=np.uint8)
    ids, n_tok, status, miss_at, miss_len, n_words = idx.encode(
        buf, np.array([0, 4]), np.array([3, 7]), np.array([0, 1]), np.array([0], dtype=np.int64),
        np.array([1], dtype=np.int64), np.array([42], dtype=np.uint64), MAX_WORD_CHARS)
    # "abd": its hash finds slot 0, whose bytes differ -> a miss; "abc": its own hash finds nothing -> a miss too
    assert status.tolist() == [1, 1] and miss_at.tolist() == [0, 4] and n_words == 2
    idx.w_hash[0] = word_kernel.fnv1a(b"abc")
    word_kernel._rehash(idx.table, idx.w_hash, np.array([0], dtype=np.int64))
    ids, n_tok, status, *_ = idx.encode(buf, np.array([0, 4]), np.array([3, 7]), np.array([1]), np.array([0], dtype=np.int64),
                                       np.array([1], dtype=np.int64), np.array([42], dtype=np.uint64), MAX_WORD_CHARS)
    assert status.tolist() == [0] and ids.tolist() == [42]


def test_key_table_equals_the_binary_search(shared_data):
    from contam_assets.detector.config import DetectConfig
    from contam_assets.testing.throughput_planted import build_detector, planted_documents

    key_table = pytest.importorskip("contam_assets.detector.key_table")
    _, index, _ = build_detector(shared_data, DetectConfig())
    rng = np.random.default_rng(5)
    # every key, keys with one bit flipped (near misses), random hashes, and the n-grams of real documents
    hashes = np.concatenate([index.q_keys, index.q_keys[::7] ^ np.uint64(1 << 40),
                             rng.integers(0, 2**63, size=200_000, dtype=np.int64).astype(np.uint64) * np.uint64(2)])
    from contam_assets.detector.ngrams import ngram_hashes
    from contam_assets.detector.text import clean_text
    from contam_assets.detector.tokenize import get_tokenizer

    records, _, _ = build_detector(shared_data, DetectConfig())
    tok = get_tokenizer("cl100k")
    docs = tok.encode_many([clean_text(t) for _, t in planted_documents(records, shared_data, n=60, seed=2)])
    hashes = np.concatenate([hashes, ngram_hashes(np.concatenate(docs), 5)])
    got, want = index.lookup(hashes), index.lookup_reference(hashes)
    assert np.array_equal(got, want)
    assert (want >= 0).sum() > len(index.q_keys)  # every key found, and the documents' n-grams hit some
    assert np.array_equal(want[: len(index.q_keys)], np.arange(len(index.q_keys)))
    # an empty batch, and a table of no keys
    assert index.lookup(np.zeros(0, dtype=np.uint64)).tolist() == []
    empty = key_table.directory_for(np.zeros(0, dtype=np.uint64))
    assert key_table.positions(hashes[:10], np.zeros(0, dtype=np.uint64), empty, index.bloom, index.bloom_bits).tolist() == [-1] * 10


def test_scan_rows_equal_with_the_compiled_steps_off(shared_data, monkeypatch):
    """CONTAM_COMPILED=off (the plain paths) and the compiled steps give the same match rows and counters."""
    from contam_assets.detector.config import DetectConfig
    from contam_assets.detector.matches import Reference, scan_documents
    from contam_assets.testing.throughput_planted import build_detector, planted_documents
    from contam_assets_tests.detector.test_prefilter_recall import adversarial_documents

    records, index, _ = build_detector(shared_data, DetectConfig())
    ref = Reference(records)
    texts = [t for _, t in planted_documents(records, shared_data, n=80, seed=4)] + adversarial_documents(records, n=60, seed=6)
    texts += ["Ünïcödé “quoted” — text\u00a0with\u2003wide spaces " * 20, "x" * 600 + " tail", "lone \ud800 surrogate"]

    class Doc:
        def __init__(self, i, t):
            self.line, self.doc_id, self.source, self.text = i, f"d:{i}", None, t

    docs = [Doc(i, t) for i, t in enumerate(texts)]
    out = {}
    for mode in ("on", "off"):
        monkeypatch.setenv("CONTAM_COMPILED", mode)
        for cfg in (DetectConfig(), DetectConfig(prefilter=True)):
            rows, counters = scan_documents(docs, "s", index, ref, cfg)
            out[mode, cfg.prefilter] = (sorted(rows, key=lambda r: r["match_id"]), dict(counters))
    assert out["on", False] == out["off", False] and out["on", True] == out["off", True]
    assert sum(r["flagged"] for r in out["on", False][0]) >= 40


def test_encode_many_by_the_walk_equals_tiktoken():
    """encode_many (the reference set's path): texts in cleaned form by the walk -- long words kept whole, the
    word rule does not cut them -- and every other text by tiktoken on the whole text."""
    rng = random.Random(33)
    texts = []
    for _ in range(800):
        raw = random_text(rng)
        texts.append(clean_text(raw, random_options(rng)))
        if rng.random() < 0.3:
            texts.append(raw)  # not in cleaned form
    texts += ["y" * (MAX_WORD_CHARS + 40), "a " + "\u00e9" * (MAX_WORD_CHARS + 3) + " b", " lead", "trail ", "two  spaces",
              "tab\there", "nb\u00a0sp", "", "x"]
    for max_words in (1 << 17, 40):
        tok = _fresh(max_words)
        assert tok.cache.index is not None
        for i in range(0, len(texts), 150):
            chunk = texts[i : i + 150]
            for t, g in zip(chunk, tok.encode_many(chunk)):
                assert g.dtype == np.uint64 and np.array_equal(g, tok.encode_reference(t)), t[:120]


def test_a_read_only_install_with_no_writable_cache_still_scans(tmp_path):
    """numba refuses cache=True where neither the package folder nor the user's cache folder can be written
    (a read-only install, an unwritable home); the kernels then compile in the process instead of failing to
    import.  As root the process drops its capabilities (setpriv), so the folders are read-only to it too."""
    import os
    import shutil
    import stat
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    ro = tmp_path / "ro"
    shutil.copytree(root / "contam_assets", ro / "contam_assets", ignore=shutil.ignore_patterns("__pycache__"))
    code = """
import numpy as np
from contam_assets.detector.text import clean_text, clean_text_reference, translate_bytes
from contam_assets.detector.tokenize import get_tokenizer
from contam_assets.detector import key_table, prefilter_kernel, text_kernel, word_kernel
texts = ["Ünïcödé “quoted” — text\\u00a0here", "plain words, twice: plain words", "x" * 300]
tok = get_tokenizer("cl100k")
assert tok.cache.index is not None
got = tok.encode_translated([translate_bytes(t) for t in texts])
assert all(np.array_equal(g, tok.encode_reference(clean_text(t))) for g, t in zip(got, texts))
assert clean_text(texts[0]) == clean_text_reference(texts[0])
keys = np.array([3, 9, 27], dtype=np.uint64) << np.uint64(40)
bloom = np.full(4, np.uint64(2**64 - 1), dtype=np.uint64)
pos = key_table.positions(np.concatenate([keys, keys + np.uint64(1)]), keys, key_table.directory_for(keys), bloom, 8)
assert pos.tolist() == [0, 1, 2, -1, -1, -1]
print("ok", prefilter_kernel.AVAILABLE and word_kernel.AVAILABLE and text_kernel.AVAILABLE)
"""
    cmd = [sys.executable, "-c", code]
    if os.geteuid() == 0:
        if not shutil.which("setpriv"):
            pytest.skip("setpriv (util-linux) is needed to drop root's capabilities")
        cmd = ["setpriv", "--inh-caps=-all", "--bounding-set=-all"] + cmd
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env.update(HOME=str(ro), XDG_CACHE_HOME=str(ro / "cache"), PYTHONPATH=str(ro))
    modes = {}
    for p in [ro, *ro.rglob("*")]:
        modes[p] = p.stat().st_mode
        p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        r = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    finally:
        for p, m in modes.items():
            p.chmod(m)
    assert r.returncode == 0 and r.stdout.strip() == "ok True", r.stdout + r.stderr
    assert not list(ro.rglob("*.nbi")) and not (ro / "cache").exists()  # nothing could be written, and nothing was


def test_the_cleaning_walk_lowercases_every_code_point_as_str_lower():
    """text_kernel's walk against the plain path (str.lower, the regex, bytes.translate) on every code point,
    each alone and between letters, and on final sigma and dotted I, which take the plain path."""
    from contam_assets.detector import text as text_mod
    from contam_assets.detector import text_kernel

    opts = CleanOptions()
    _, utf8_table, wide = text_mod._fast_tables(opts.punctuation)
    kernel = text_mod._wide_kernel(opts.punctuation)

    def plain(t: str) -> bytes:
        return wide.sub(" ", t.lower()).encode("utf-8", "surrogatepass").translate(utf8_table)

    cps = [c for c in range(0x80, 0x110000) if not 0xD800 <= c <= 0xDFFF]
    for i in range(0, len(cps), 4096):  # many characters per call; every one also between two letters
        chunk = cps[i : i + 4096]
        t = "".join("A" + chr(c) + "b " for c in chunk)
        got = kernel[0](t.encode("utf-8", "surrogatepass"), *kernel[1:])
        if got is None:  # the chunk holds U+0130 or U+03A3: the plain path; check the rest without them
            assert {0x130, 0x3A3} & set(chunk)
            t = "".join("A" + chr(c) + "b " for c in chunk if c not in text_kernel.PLAIN_PATH)
            got = kernel[0](t.encode("utf-8", "surrogatepass"), *kernel[1:])
        assert got == plain(t), hex(chunk[0])
    for t in ("ΟΔΟΣ ΣΑΣ", "İstanbul", "lone \ud800 \udfff", "Ⱥ Ⱦ \u212a \u2126"):
        assert translate_bytes(t) == plain(t)
