"""An index grown by a task (added, removed or changed) from the saved index equals the index built from every
record, array for array, file for file, and gives the same match rows on planted documents."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from contam_assets.detector import index as ix
from contam_assets.detector import index_build as ixb
from contam_assets.detector import index_grow as ixg
from contam_assets.detector.config import DetectConfig
from contam_assets.detector.matches import Reference
from contam_assets.rescan.plan import task_hashes
from contam_assets.testing.throughput_planted import as_documents, build_detector, planted_documents, scan_rows
from contam_assets_tests.detector.test_index_build_batched import assert_same_index


def assert_same_grown(want: ix.NgramIndex, got: ix.NgramIndex) -> None:
    assert_same_index(want, got)
    for name in ix.NgramIndex.SAVED_EXTRAS:  # the lookup table and the token frequencies too
        x, y = want.__dict__.get(name), got.__dict__.get(name)
        if name == "_dir" and x is None:
            continue
        assert x is not None and y is not None, name
        assert x.dtype == y.dtype and np.array_equal(x, y), name


def renumbered(records: pl.DataFrame) -> pl.DataFrame:
    """The records as a reference build gives them: record ids 0.. in order (a task left out moves the later ones)."""
    return records.sort("record_id").with_columns(record_id=pl.int_range(0, records.height, dtype=pl.Int32))


@pytest.fixture(scope="module")
def real_records(shared_data):
    records, _, _ = build_detector(shared_data, DetectConfig())
    return records


def middle_task(records: pl.DataFrame) -> str:
    tasks = records["task"].unique(maintain_order=True).to_list()
    assert len(tasks) >= 3
    return tasks[len(tasks) // 2]


def grow(old_records, new_records, cfg, **kw):
    old = ixb.build_index(old_records, cfg)
    return ixg.grow_index(old, old_records, task_hashes(old_records, cfg), new_records, task_hashes(new_records, cfg),
                          cfg, max_share=1.0, **kw)


def test_adding_a_task_in_the_middle_equals_the_full_build(real_records, monkeypatch):
    cfg = DetectConfig()
    task = middle_task(real_records)
    base = renumbered(real_records.filter(pl.col("task") != task))
    monkeypatch.setattr(ixg, "PAIR_STEP", 1_003)  # many ranges of keys, and of values
    monkeypatch.setattr(ixg, "VALUE_STEP", 997)
    grown = grow(base, real_records, cfg)
    assert grown is not None and grown.n_records == int(real_records["indexed"].sum()) > base["indexed"].sum()
    assert_same_grown(ixb.build_index(real_records, cfg), grown)


def test_removing_and_changing_a_task_equal_the_full_build(real_records):
    cfg = DetectConfig()
    task = middle_task(real_records)
    fewer = renumbered(real_records.filter(pl.col("task") != task))
    assert_same_grown(ixb.build_index(fewer, cfg), grow(real_records, fewer, cfg))
    # a changed task: some of its questions edited, one record left out of the index
    ids = real_records.filter(pl.col("task") == task)["record_id"].to_list()
    edited = real_records.with_columns(
        question=pl.when(pl.col("record_id").is_in(ids[::5])).then(pl.col("question") + " and then some more words")
        .otherwise(pl.col("question")),
        indexed=pl.when(pl.col("record_id") == ids[1]).then(False).otherwise(pl.col("indexed")))
    assert_same_grown(ixb.build_index(edited, cfg), grow(real_records, edited, cfg))


def test_grown_index_saves_the_same_files_and_finds_the_same_matches(real_records, shared_data, tmp_path):
    cfg = DetectConfig()
    task = middle_task(real_records)
    base = renumbered(real_records.filter(pl.col("task") != task))
    grown = grow(base, real_records, cfg, spill_dir=tmp_path / "out" / "index")
    assert grown is not None and "_staging" in grown.__dict__  # written into files there and mapped
    full = ixb.build_index(real_records, cfg, spill_dir=tmp_path / "full")
    grown.save(tmp_path / "out" / "index" / "grown")
    full.save(tmp_path / "built")
    assert sorted(p.name for p in (tmp_path / "out" / "index").iterdir()) == ["grown"]  # no temporary left
    names = sorted(p.name for p in (tmp_path / "built").iterdir())
    assert "_tok_df.npy" in names and names == sorted(p.name for p in (tmp_path / "out" / "index" / "grown").iterdir())
    for name in names:
        assert (tmp_path / "built" / name).read_bytes() == (tmp_path / "out" / "index" / "grown" / name).read_bytes(), name
    ref = Reference(real_records)
    docs = as_documents([text for _, text in planted_documents(real_records, shared_data, n=120)])
    rows_full, _ = scan_rows(docs, ix.NgramIndex.load(tmp_path / "built"), ref, cfg)
    rows_grown, _ = scan_rows(docs, ix.NgramIndex.load(tmp_path / "out" / "index" / "grown"), ref, cfg)
    assert rows_full and any(r["task"] == task for r in rows_full)
    assert rows_grown == rows_full


def test_grow_declines_what_it_cannot_do_exactly(real_records):
    cfg = DetectConfig()
    task = middle_task(real_records)
    base = renumbered(real_records.filter(pl.col("task") != task))
    old = ixb.build_index(base, cfg)
    hashes = task_hashes(real_records, cfg)
    old_hashes = task_hashes(base, cfg)
    # another config, an index saved without its token frequencies, too large a change, tasks reordered
    assert ixg.grow_index(old, base, old_hashes, real_records, hashes, cfg.replace(ngram_size=7), max_share=1.0) is None
    bare = ix.NgramIndex(**{f: v for f, v in old.__dict__.items() if f in ix.NgramIndex.__dataclass_fields__})
    assert ixg.grow_index(bare, base, old_hashes, real_records, hashes, cfg, max_share=1.0) is None
    assert ixg.grow_index(old, base, old_hashes, real_records, hashes, cfg, max_share=0.0) is None
    swapped = base.sort(pl.col("task") == base["task"][0], "record_id").with_columns(
        record_id=pl.int_range(0, base.height, dtype=pl.Int32))  # the first task moved to the end
    assert ixg.plan_change(base, old_hashes, swapped, task_hashes(swapped, cfg)) is None
