"""The index's key filter (key_table.key_filter: three bits of one 64-bit word per key): no false negatives, about
1 % false positives at 16 bits a key where one bit a key (the earlier layout, still the lead gate's bit_filter)
gives about 6 %, the same answer compiled and in numpy, the same filter built whole or a chunk at a time; and an
index folder saved in the earlier layout counts as no index (the index step builds it again)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from contam_assets.detector import key_table
from contam_assets.detector.index import FORMAT_VERSION, NgramIndex
from contam_assets.detector.index_build import build_index
from contam_assets.store import artifacts
from contam_assets_tests.support import decon_fixtures as fx

N_KEYS = 1 << 20  # about a million keys, 16 bits a key in a filter of 2**24 bits
BITS = 24


@pytest.fixture(scope="module")
def planted():
    rng = np.random.default_rng(7)
    keys = np.unique(rng.integers(0, 2**64 - 1, N_KEYS + 1000, dtype=np.uint64, endpoint=True))[:N_KEYS]
    rng.shuffle(keys)
    others = rng.integers(0, 2**64 - 1, 1_000_000, dtype=np.uint64, endpoint=True)
    others = others[~np.isin(others, keys)]
    return np.sort(keys), others


def test_no_false_negatives_and_about_one_percent_false_positives(planted):
    keys, others = planted
    assert key_table.filter_bits(len(keys)) == BITS and (1 << BITS) / len(keys) == 16
    words = key_table.key_filter(keys, BITS)
    assert words.dtype == np.uint64 and len(words) == (1 << BITS) // 64
    assert key_table.may_hold(words, BITS, keys).all()
    new = key_table.may_hold(words, BITS, others).mean()
    # the earlier layout: one bit a key, at its top BITS bits, in the same memory
    one = key_table.bit_filter(keys, BITS)
    b = others >> np.uint64(64 - BITS)
    old = ((one[(b >> np.uint64(6)).astype(np.int64)] >> (b & np.uint64(63))) & np.uint64(1)).mean()
    # one bit: 1 - exp(-1/16) = 6.1 %; three bits of a word holding Poisson(4) keys: about 0.9 %
    assert abs(old - (1 - np.exp(-1 / 16))) < 0.002
    assert 0.004 < new < 0.015 and new < old / 4, (new, old)


def test_built_in_chunks_equals_built_whole(planted):
    keys, _ = planted
    words = key_table.empty_filter(BITS)
    for a in range(0, len(keys), 300_001):
        key_table.add_to_filter(words, keys[a : a + 300_001], BITS)
    assert np.array_equal(words, key_table.key_filter(keys, BITS))


@pytest.mark.skipif(not key_table.AVAILABLE, reason="numba not installed")
def test_the_compiled_test_equals_numpys_bit_for_bit(planted):
    """Every hash made a key of the table, so ``positions`` finds it exactly where the compiled filter passes it."""
    keys, others = planted
    words = key_table.key_filter(keys, BITS)
    hashes = np.concatenate([keys[:50_000], others[:200_000]])
    table_keys = np.unique(hashes)
    found = key_table.positions(hashes, table_keys, key_table.directory_for(table_keys), words, BITS) >= 0
    want = key_table.may_hold(words, BITS, hashes)
    assert np.array_equal(found, want) and want[:50_000].all() and not want.all()
    # and the lookup of the keys themselves: their positions, -1 for the others
    got = key_table.positions(hashes, keys, key_table.directory_for(keys), words, BITS)
    assert np.array_equal(got[:50_000], np.searchsorted(keys, keys[:50_000])) and (got[50_000:] == -1).all()


def test_small_filters_and_empty_input():
    keys = np.array([5, 2**63 + 9, 2**64 - 1], dtype=np.uint64)
    for bits in (1, 6, 7, 12):
        words = key_table.key_filter(keys, bits)
        assert len(words) == max(1, (1 << bits) // 64) and key_table.may_hold(words, bits, keys).all()
    assert key_table.may_hold(key_table.empty_filter(16), 16, np.zeros(0, dtype=np.uint64)).shape == (0,)
    assert not key_table.may_hold(key_table.empty_filter(16), 16, keys).any()


def test_an_index_saved_in_the_earlier_filter_layout_counts_as_none(tmp_path):
    records, cfg = fx.toy_reference(tmp_path)
    index = build_index(records, cfg)
    assert np.array_equal(index.bloom, key_table.key_filter(index.q_keys, index.bloom_bits))
    assert index.bloom_test(index.q_keys).all()
    out = tmp_path / "out"
    folder = artifacts.save_index(out, "d1", records, index)
    assert artifacts.has_index(out, "d1")
    meta = json.loads((folder / "index" / "meta.json").read_text())
    (folder / "index" / "meta.json").write_text(json.dumps(meta | {"version": FORMAT_VERSION - 1}))
    assert not artifacts.has_index(out, "d1") and not NgramIndex.is_saved(folder / "index")
    with pytest.raises(ValueError, match=rf"index format {FORMAT_VERSION - 1} != {FORMAT_VERSION}; rebuild it") as e:
        artifacts.load_index(out)
    assert "\n" not in str(e.value)
    artifacts.save_index(out, "d1", records, index)  # what the index step then does: built again, saved over it
    assert artifacts.has_index(out, "d1") and NgramIndex.load(folder / "index").keys_digest() == index.keys_digest()


def test_contam_detect_builds_an_index_of_the_earlier_format_again(tmp_path, shared_data):
    """A user's output folder whose index was saved in the earlier format: the next `contam detect` (nothing else
    changed) builds the index again instead of failing to load it, and finds the same matches."""
    import os
    import subprocess
    import sys

    import duckdb

    bench, pool = tmp_path / "bench", tmp_path / "pool"
    bench.mkdir()
    pool.mkdir()
    for name, n in (("gsm8k_train.jsonl", 200), ("gsm8k_test.jsonl", 40)):
        (bench / name).write_text("".join((shared_data / name).read_text().splitlines(keepends=True)[:n]))
    test = [json.loads(line) for line in (bench / "gsm8k_test.jsonl").read_text().splitlines()]
    docs = [{"text": f"Homework.\n{g['question']}\n{g['answer']}\nThe end."} for g in test[:3]]
    docs += [{"text": "A clean note about tomatoes and the rain in the garden this week. " * 3} for _ in range(4)]
    (pool / "shard.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    out = tmp_path / "out"
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path / "home")}
    cmd = [sys.executable, "-m", "contam_assets.cli", "detect", "--pool", str(pool), "--out", str(out),
           "--benchmarks", str(bench), "--tasks", "gsm8k"]

    def run_and_matches():
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
        with duckdb.connect(str(out / "contam.duckdb"), read_only=True) as con:
            return con.execute("select * exclude (record_id) from matches order by match_id").fetchall()

    first = run_and_matches()
    assert len(first) >= 3
    meta_path = artifacts.index_dir(out, artifacts.current_digest(out)) / "index" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps(meta | {"version": FORMAT_VERSION - 1}))
    assert run_and_matches() == first
    assert json.loads(meta_path.read_text())["version"] == FORMAT_VERSION


@pytest.mark.skipif(not key_table.AVAILABLE, reason="numba not installed")
@pytest.mark.parametrize("n_keys", [0, 1, 7, 1_000, 300_000])
def test_the_directory_finds_exactly_the_keys(n_keys):
    """The lookup table of sorted keys (the directory of their top bits) finds each key at its position in the sorted
    array and nothing else, the smallest and largest 64-bit values and the buckets' edges included."""
    rng = np.random.default_rng(n_keys)
    keys = np.unique(np.concatenate([rng.integers(0, 2**64 - 1, n_keys, dtype=np.uint64, endpoint=True),
                                     np.array([0, 2**64 - 1], dtype=np.uint64)[: min(n_keys, 2)]]))
    table = key_table.directory_for(keys)
    assert len(table) == (1 << key_table.directory_bits(len(keys))) + 1 and table[-1] == len(keys)
    d = key_table.directory_bits(len(keys))
    edges = (np.arange(1 << d, dtype=np.uint64) << np.uint64(64 - d)) if d < 64 else np.zeros(0, np.uint64)
    others = np.concatenate([keys + np.uint64(1), keys - np.uint64(1), edges, edges - np.uint64(1),
                             rng.integers(0, 2**64 - 1, 50_000, dtype=np.uint64, endpoint=True)])
    hashes = np.concatenate([keys, others])
    everything = np.full(1, np.uint64(2**64 - 1), dtype=np.uint64)  # a filter that passes every hash
    got = key_table.positions(hashes, keys, table, everything, 6)
    pos = np.minimum(np.searchsorted(keys, hashes), max(len(keys) - 1, 0))
    want = np.where((len(keys) > 0) & (keys[pos] == hashes if len(keys) else False), pos, -1)
    assert np.array_equal(got, want) and np.array_equal(got[: len(keys)], np.arange(len(keys)))
