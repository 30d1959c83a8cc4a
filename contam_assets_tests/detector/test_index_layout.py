"""The index on disk: one .npy per array, mapped (not copied) by every process that loads it, equal to the built one."""

from __future__ import annotations

import dataclasses
import mmap
from dataclasses import fields

import numpy as np
import pytest

from contam_assets.detector import key_table
from contam_assets.detector.config import DetectConfig
from contam_assets.detector.index import NgramIndex
from contam_assets.detector.index_build import build_index
from contam_assets.sources.reference import build_reference_set
from contam_assets.sources.registry import decon_spec
from contam_assets.store import artifacts
from contam_assets_tests.support import decon_fixtures as fx


def _mapped(a: np.ndarray) -> bool:
    """Whether an array's memory is a file mapping (its base chain ends in a memmap or an mmap)."""
    while a is not None:
        if isinstance(a, (np.memmap, mmap.mmap)):
            return True
        a = getattr(a, "base", None)
    return False


def test_saved_index_is_mapped_and_equal(tmp_path):
    records, cfg = fx.toy_reference(tmp_path)
    built = build_index(records, cfg)
    folder = artifacts.save_index(tmp_path / "out", "d1", records, built)
    assert sorted(p.name for p in (folder / "index").iterdir() if p.suffix == ".npy")[:7] == [
        "_dir.npy", "_key_min_total.npy", "_record_max_idf.npy", "_tok_df.npy", "_tok_vocab.npy", "a_idf_total.npy",
        "a_len.npy"]
    assert artifacts.has_index(tmp_path / "out", "d1")
    loaded, recs, digest = artifacts.load_index(tmp_path / "out")
    assert digest == "d1" and recs.equals(records)
    for f in fields(NgramIndex):
        a, b = getattr(built, f.name), getattr(loaded, f.name)
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype and np.array_equal(a, b), f.name
            assert type(b) is np.ndarray and _mapped(b), f.name  # a plain array over the file's pages
        else:
            assert a == b, f.name
    if key_table.AVAILABLE:
        assert np.array_equal(loaded.__dict__["_dir"], key_table.directory_for(built.q_keys)) and _mapped(loaded.__dict__["_dir"])
    for name in ("key_min_total", "record_max_idf"):  # the scan's bounds: mapped from the folder, as computed
        got = loaded.__dict__[f"_{name}"]
        assert got is getattr(loaded, name)() and _mapped(got), name
        assert np.array_equal(got, getattr(dataclasses.replace(built), name)()), name
    h = built.q_keys[:5]
    assert np.array_equal(loaded.lookup(h), built.lookup(h)) and (loaded.lookup(h) >= 0).all()
    # saved again over itself: replaced whole, no temporary left
    artifacts.save_index(tmp_path / "out", "d1", records, loaded)
    assert [p.name for p in folder.iterdir() if p.name.startswith(".")] == []
    assert NgramIndex.load(folder / "index").keys_digest() == built.keys_digest()


def test_an_index_of_the_earlier_format_asks_for_a_rebuild(tmp_path):
    import json

    import pytest

    out = tmp_path / "out"
    d = artifacts.index_dir(out, "d0")
    d.mkdir(parents=True)
    (d / "index.npz").write_bytes(b"PK")
    (out / "index" / "current.json").write_text(json.dumps({"digest": "d0"}))
    with pytest.raises(ValueError, match=r"earlier format \(index\.npz\); rebuild it: run `contam detect`") as e:
        artifacts.load_index(out)
    assert "\n" not in str(e.value)


def test_a_build_spills_into_a_swept_temporary_folder_of_spill_dir(tmp_path, monkeypatch):
    """spill_dir: the spill files sit in a folder named as store/files.py names temporaries (so a killed build's
    leftovers are swept), removed after the build; the index's arrays, written there too, are removed once it is
    saved; the index equals one spilled to $TMPDIR."""
    from contam_assets.detector import index_build
    from contam_assets.store.files import _TEMP

    evals = tmp_path / "evals"
    evals.mkdir()
    (evals / "toy.jsonl").write_text("\n".join(fx.reference_lines()) + "\n")
    cfg = DetectConfig()
    records, _ = build_reference_set([decon_spec(str(evals))], None, cfg)
    seen = []
    real = index_build._Spill

    class Recording(real):
        def __init__(self, folder):
            seen.append(folder)
            super().__init__(folder)

    monkeypatch.setattr(index_build, "_Spill", Recording)
    spill = tmp_path / "out" / "index"
    built = build_index(records, cfg, spill_dir=spill)
    assert len(seen) == 1 and seen[0].parent == spill and _TEMP.match(seen[0].name), seen
    # the spill removed; the index's own arrays in one more swept temporary folder there, until it is saved
    staged = list(spill.iterdir())
    assert not seen[0].exists() and len(staged) == 1 and _TEMP.match(staged[0].name), staged
    built.save(tmp_path / "saved")
    assert list(spill.iterdir()) == []
    plain = build_index(records, cfg)
    assert seen[1].parent != spill
    for f in fields(NgramIndex):
        a, b = getattr(built, f.name), getattr(plain, f.name)
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype and np.array_equal(a, b), f.name


def test_the_keys_digest_of_a_folder_is_read_not_mapped(tmp_path):
    """The digest a scan worker checks: the same value from meta.json, from the files' data read in chunks (a folder
    saved without it) and from the arrays in memory; neither way maps a page of the keys."""
    import json
    import os

    from contam_assets.detector import index as index_mod

    records, cfg = fx.toy_reference(tmp_path)
    built = build_index(records, cfg)
    folder = artifacts.save_index(tmp_path / "out", "d1", records, built) / "index"
    want = built.keys_digest()
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["keys_digest"] == want
    assert NgramIndex.load(folder).keys_digest() == want
    del meta["keys_digest"]
    (folder / "meta.json").write_text(json.dumps(meta))
    loaded = NgramIndex.load(folder)
    chunks = []
    real = index_mod._hash_npy_data
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(index_mod, "_hash_npy_data", lambda path, h, chunk=4096: (chunks.append(path.name), real(path, h, chunk)))
        assert loaded.keys_digest() == want  # read from the files, a few KB at a time
    assert chunks == ["q_keys.npy", "record_ids.npy"]
    maps = open(f"/proc/{os.getpid()}/smaps").read().split("\n")
    mine = [i for i, line in enumerate(maps) if line.endswith(str(folder / "q_keys.npy"))]
    rss = [next(line.split()[1] for line in maps[i + 1:] if line.startswith("Rss:")) for i in mine]
    assert mine and rss == ["0"] * len(mine)  # its mappings hold no page: nothing was read through them
    # a file that is not the array (another length): the arrays in memory are hashed
    np.save(folder / "record_ids.npy", np.zeros(3, dtype=np.int32))
    assert NgramIndex.load(folder).keys_digest() != want
    # a file replaced since the index was loaded (another inode): not read, the arrays in memory are hashed
    stale = NgramIndex.load(folder)
    keys = np.load(folder / "q_keys.npy")
    (folder / "q_keys.npy").unlink()
    np.save(folder / "q_keys.npy", keys[::-1].copy())
    assert stale.keys_digest() == NgramIndex(**{f.name: getattr(stale, f.name) for f in fields(NgramIndex)}).keys_digest()
    moved = NgramIndex.load(folder)
    moved.__dict__["_folder_files"] = index_mod._stamped(folder / "q_keys.npy", folder / "missing.npy")
    assert moved.keys_digest() == NgramIndex(**{f.name: getattr(moved, f.name) for f in fields(NgramIndex)}).keys_digest()


def _rss_of(path) -> list[int]:
    import os

    maps = open(f"/proc/{os.getpid()}/smaps").read().split("\n")
    mine = [i for i, line in enumerate(maps) if line.endswith(str(path))]
    return [int(next(line.split()[1] for line in maps[i + 1:] if line.startswith("Rss:"))) for i in mine]


def test_a_scanning_process_gives_the_index_pages_back_past_its_budget(tmp_path):
    """release_mapped: under the budget nothing happens; over it, the pages of every mapped array are given back
    (the process's mappings hold none, the page cache keeps them) and the arrays read the same afterwards."""
    records, cfg = fx.toy_reference(tmp_path)
    built = build_index(records, cfg)
    folder = artifacts.save_index(tmp_path / "out", "d1", records, built) / "index"
    loaded = NgramIndex.load(folder)
    for f in fields(NgramIndex):  # every page of every array read through the mapping
        a = getattr(loaded, f.name)
        if isinstance(a, np.ndarray) and len(a):
            a.view(np.uint8).sum()
    assert sum(_rss_of(folder / "q_keys.npy")) > 0 and sum(_rss_of(folder / "q_docs.npy")) > 0
    assert not loaded.release_mapped(budget=1 << 50)
    assert sum(_rss_of(folder / "q_keys.npy")) > 0
    assert loaded.release_mapped(budget=1)
    for name in ("q_keys.npy", "q_docs.npy", "q_idf.npy", "bloom.npy", "_key_min_total.npy"):
        assert sum(_rss_of(folder / name)) == 0, name
    for f in fields(NgramIndex):
        a, b = getattr(built, f.name), getattr(loaded, f.name)
        if isinstance(a, np.ndarray):
            assert np.array_equal(a, b), f.name
    h = built.q_keys[:5]
    assert np.array_equal(loaded.lookup(h), built.lookup(h))
    assert not built.release_mapped(budget=1)  # an index in memory maps nothing


def test_the_mapped_budget_is_a_setting(tmp_path, monkeypatch):
    """scan_mapped_budget: a size (its default 4GB), 0 for never, and a bad value named in one error."""
    from contam_assets.detector import index as index_mod
    from contam_assets.settings import var

    records, cfg = fx.toy_reference(tmp_path)
    folder = artifacts.save_index(tmp_path / "out", "d1", records, build_index(records, cfg)) / "index"
    loaded = NgramIndex.load(folder)
    loaded.q_keys.view(np.uint8).sum()
    monkeypatch.delenv(var("scan_mapped_budget"), raising=False)
    assert index_mod.mapped_budget() == 4 * 10**9
    monkeypatch.setenv(var("scan_mapped_budget"), "0")
    assert not loaded.release_mapped() and sum(_rss_of(folder / "q_keys.npy")) > 0
    monkeypatch.setenv(var("scan_mapped_budget"), "1kb")
    assert loaded.release_mapped() and sum(_rss_of(folder / "q_keys.npy")) == 0
    monkeypatch.setenv(var("scan_mapped_budget"), "lots")
    with pytest.raises(ValueError, match=f"{var('scan_mapped_budget')} must be a size such as 4GB, not 'lots'"):
        loaded.release_mapped()


def test_only_the_current_index_and_the_one_before_it_are_kept(tmp_path):
    """Each index that becomes current leaves the one before it in place (a run may still scan with it) and removes
    older ones; the reference folder, a folder not named as an index and an unchanged rerun's mark keep theirs."""
    import json

    records, cfg = fx.toy_reference(tmp_path)
    built = build_index(records, cfg)
    out = tmp_path / "out"
    a, b, c = "a" * 16, "b" * 16, "c" * 16
    artifacts.save_index(out, a, records, built)
    (out / "index" / "reference").mkdir()
    (out / "index" / "mine").mkdir()
    names = lambda: sorted(p.name for p in (out / "index").iterdir() if p.is_dir())  # noqa: E731
    artifacts.save_index(out, b, records, built)
    assert names() == [a, b, "mine", "reference"]
    artifacts.mark_current(out, b, "inputs-b")  # the same index marked again: the one before it stays
    assert names() == [a, b, "mine", "reference"]
    assert json.loads((out / "index" / "current.json").read_text()) == {"digest": b, "inputs": "inputs-b", "previous": a}
    artifacts.save_index(out, c, records, built)
    assert names() == [b, c, "mine", "reference"]
    assert artifacts.has_index(out, b) and artifacts.has_index(out, c)
    artifacts.mark_current(out, b, "inputs-b")  # back to b: c is the one before it
    assert names() == [b, c, "mine", "reference"]
    loaded, _, digest = artifacts.load_index(out)
    assert digest == b and loaded.keys_digest() == built.keys_digest()
