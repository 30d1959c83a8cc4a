"""A full scan from a cached token stream looks for every usable question key (`incremental.start_keys(index,
None)`) over the index's own arrays (`KeySet.of_index`): the keys, Bloom filter, lookup table and hot mask a process
maps from the index folder, never a copy of its own per scan worker.  Here: it finds exactly the documents the copy
found, hot keys left out, and a second process that loads the index gets those files' pages."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest

from contam_assets.detector import key_table
from contam_assets.rescan import incremental
from contam_assets.rescan.incremental import KeySet, docs_containing, start_keys
from contam_assets_tests.rescan.test_rescan_steps import _host_stream


def _gsm8k_only_usable(two_tasks):
    """The two-task index with every question key that no GSM8K record holds marked hot (the planted case: the
    documents that hold only MBPP items hold no usable key)."""
    cfg, records, index = two_tasks
    gsm = incremental.task_locals(index, records, ["gsm8k"])
    mine = np.zeros(index.n_records, dtype=bool)
    mine[gsm] = True
    key_of_pair = np.repeat(np.arange(len(index.q_keys)), np.diff(index.q_offsets))
    held = np.bincount(key_of_pair[mine[index.q_docs]], minlength=len(index.q_keys)) > 0
    return dataclasses.replace(index, hot=index.hot | ~held)


@pytest.mark.parametrize("compiled", ["on", "off"])
def test_the_index_keys_find_what_a_copy_of_the_start_keys_finds(two_tasks, shared_data, monkeypatch, compiled):
    cfg, records, _ = two_tasks
    if compiled == "on" and not key_table.AVAILABLE:
        pytest.skip("numba not installed")
    monkeypatch.setenv("CONTAM_COMPILED", compiled)
    index = _gsm8k_only_usable(two_tasks)
    stream = _host_stream(two_tasks, shared_data)
    incremental._SELECTIONS.clear()
    _, keys = incremental.selection(index, records, None, cfg)
    assert keys.keys is index.q_keys and keys.filter is index.bloom and keys.skip is index.hot
    assert (keys.slots is not None) == key_table.AVAILABLE
    got = docs_containing(stream, keys, cfg.ngram_size, cfg.min_doc_tokens)
    want = docs_containing(stream, KeySet(start_keys(index, None)), cfg.ngram_size, cfg.min_doc_tokens)
    every = docs_containing(stream, KeySet(index.q_keys), cfg.ngram_size, cfg.min_doc_tokens)
    assert np.array_equal(got, want)
    assert 10 < len(got) < len(every)  # GSM8K items found; documents with only MBPP's (now hot) keys left out
    incremental._SELECTIONS.clear()


_CHILD = """
import json, sys
import numpy as np, polars as pl
from contam_assets.detector.index import NgramIndex
from contam_assets.rescan import incremental

def mapped_file(a):
    while a is not None:
        if isinstance(a, np.memmap) and a.filename:
            return str(a.filename)
        a = getattr(a, "base", None)
    return None

index = NgramIndex.load(sys.argv[1])
_, keys = incremental.selection(index, pl.DataFrame(), None)
same = bool(np.array_equal(keys.keys[~keys.skip], incremental.start_keys(index, None)))
print(json.dumps(dict(same=same, **{name: mapped_file(getattr(keys, name)) for name in ("keys", "filter", "slots", "skip")})))
"""


def test_a_second_process_maps_the_index_files(two_tasks, tmp_path):
    index = _gsm8k_only_usable(two_tasks)
    folder = tmp_path / "index"
    index.save(folder)
    out = subprocess.run([sys.executable, "-c", _CHILD, str(folder)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got.pop("same") is True
    want = dict(keys="q_keys.npy", filter="bloom.npy", skip="hot.npy", slots="_dir.npy" if key_table.AVAILABLE else None)
    assert got == {k: str(folder / v) if v else None for k, v in want.items()}
