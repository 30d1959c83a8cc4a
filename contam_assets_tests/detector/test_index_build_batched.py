"""The index built in batches, with its n-grams spilled to disk by hash bucket and sorted a bucket at a time,
equals the index built from every record at once, array for array and bit for bit (idf sums included)."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import polars as pl
import pytest

from contam_assets.detector import index as ix
from contam_assets.detector import index_build as ixb
from contam_assets.detector.config import DetectConfig
from contam_assets.sources.reference import RECORD_SCHEMA
from contam_assets.testing.throughput_planted import build_detector


def assert_same_index(a: ix.NgramIndex, b: ix.NgramIndex) -> None:
    for f in fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape, f.name
            assert np.array_equal(x, y), f.name  # exact: float sums in the same order give the same bits
        else:
            assert x == y, f.name
    # the scan's bounds: written by the batched build, computed from the postings on the whole one
    for name in ("key_min_total", "record_max_idf"):
        x, y = getattr(a, name)(), getattr(b, name)()
        assert x.dtype == y.dtype == np.float64 and np.array_equal(x, y), name


def planted_records(base: pl.DataFrame) -> pl.DataFrame:
    """Real records, in a shuffled row order, plus records the real ones lack: passages, questions shorter than
    an n-gram, no answer, a record left out of the index, a question repeated across records (a hot n-gram)."""
    rng = np.random.default_rng(5)
    n0 = base.height
    extra = []
    texts = base.filter(pl.col("indexed"))["question"].to_list()
    for i in range(300):
        q = texts[i * 7 % len(texts)]
        extra.append(dict(record_id=n0 + i, task="planted", suite="planted", split="test", instance_index=i,
                          kind="qa", language="en", derived=False,
                          question=("short one" if i % 11 == 0 else "the same question for every planted record"
                                    if i % 5 == 0 else q),
                          answer=None if i % 3 == 0 else texts[(i * 13 + 1) % len(texts)],
                          passage=None if i % 2 else texts[(i * 17 + 2) % len(texts)] + " " + texts[i % len(texts)],
                          indexed=i % 23 != 0, skip_reason=None))
    rows = pl.concat([base, pl.DataFrame(extra, schema=RECORD_SCHEMA)], how="vertical_relaxed")
    return rows[rng.permutation(rows.height).tolist()]


@pytest.fixture(scope="module")
def real_records(shared_data):
    records, _, _ = build_detector(shared_data, DetectConfig())
    return records


def test_batched_build_equals_the_whole_build_on_real_benchmarks(real_records, monkeypatch):
    cfg = DetectConfig()
    whole = ixb.build_index_whole(real_records, cfg)
    monkeypatch.setattr(ixb, "SUM_STEP", 997)  # the idf totals summed in many chunks too
    monkeypatch.setattr(ixb, "KEY_STEP", 1_009)  # and the keys' smallest record totals
    batched = ixb.build_index(real_records, cfg, batch=1_000)
    assert batched.n_records == whole.n_records > 1_000
    assert_same_index(whole, batched)


def test_batched_build_equals_the_whole_build_with_passages_and_odd_records(real_records, monkeypatch):
    records = planted_records(real_records.head(4_000))
    cfg = DetectConfig()
    whole = ixb.build_index_whole(records, cfg)
    assert len(whole.p_ng_keys) and (whole.q_len < cfg.ngram_size).any() and not whole.has_answer.all()
    monkeypatch.setattr(ixb, "SUM_STEP", 101)
    for batch in (1, 37, 10_000):
        assert_same_index(whole, ixb.build_index(records, cfg, batch=batch))


def test_batched_build_with_the_compiled_steps_off(real_records, monkeypatch):
    """CONTAM_COMPILED=off: the per-record n-gram sets, the bucket split and the pair sort by numpy instead."""
    records = planted_records(real_records.head(3_000))
    cfg = DetectConfig()
    whole = ixb.build_index_whole(records, cfg)
    monkeypatch.setenv("CONTAM_COMPILED", "off")
    assert_same_index(whole, ixb.build_index(records, cfg, batch=700))


def test_batched_build_with_answers_and_passages_off(real_records):
    records = planted_records(real_records.head(1_500))
    cfg = DetectConfig().replace(index_answers=False, index_passages=False)
    assert_same_index(ixb.build_index_whole(records, cfg), ixb.build_index(records, cfg, batch=250))


def test_chunked_segment_sums_equal_the_whole_cumulative_sum():
    rng = np.random.default_rng(3)
    for _ in range(50):
        lens = rng.integers(0, 9, size=int(rng.integers(1, 400)))
        offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        values = rng.random(int(offsets[-1])) * 10.0 ** int(rng.integers(-3, 4))
        want = ix._segment_sums(values, offsets)
        for step in (1, 2, 7, 64, 10_000):
            assert np.array_equal(ixb._chunked_segment_sums(values, offsets, step), want)


def test_reference_digest_in_slices_equals_the_digest_of_one_csv(real_records, monkeypatch):
    import hashlib
    import json

    from contam_assets.store import artifacts

    cfg = DetectConfig()
    records = real_records.head(2_345)
    h = hashlib.sha256(json.dumps(cfg.reference_key(), sort_keys=True).encode())
    h.update(records.select(["record_id", "suite", "split", "instance_index", "question", "answer", "passage",
                             "indexed"]).write_csv().encode())
    monkeypatch.setattr(artifacts, "DIGEST_ROWS", 100)
    assert artifacts.reference_digest(records, cfg) == h.hexdigest()[:16]
    assert artifacts.reference_digest(records.head(0), cfg) != artifacts.reference_digest(records.head(1), cfg)


def test_index_written_into_its_folder_saves_the_same_files(real_records, tmp_path, monkeypatch):
    """Built with a spill folder, the index's arrays are written a bucket at a time into .npy files and mapped;
    saving it links those files into place: the saved folder holds the same bytes the whole build saves, and no
    temporary is left beside it."""
    from contam_assets.detector import key_table

    records = planted_records(real_records.head(3_000))
    cfg = DetectConfig()
    whole = ixb.build_index_whole(records, cfg)
    monkeypatch.setattr(ixb, "SUM_STEP", 211)
    monkeypatch.setattr(ixb, "KEY_STEP", 97)
    built = ixb.build_index(records, cfg, batch=400, spill_dir=tmp_path / "out" / "index")
    assert isinstance(built.q_keys.base, np.memmap)  # mapped, not read into memory
    for name in ix.NgramIndex.SAVED_EXTRAS[1:]:  # the scan's bounds, written by the build and mapped
        assert isinstance(built.__dict__[name].base, np.memmap), name
    assert_same_index(whole, built)
    built.save(tmp_path / "out" / "index" / "built")
    whole.save(tmp_path / "whole")
    assert sorted(p.name for p in (tmp_path / "out" / "index").iterdir()) == ["built"]
    names = sorted(p.name for p in (tmp_path / "whole").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "out" / "index" / "built").iterdir())
    assert ("_dir.npy" in names) == key_table.AVAILABLE
    for name in names:
        assert (tmp_path / "whole" / name).read_bytes() == (tmp_path / "out" / "index" / "built" / name).read_bytes(), name
    assert_same_index(whole, ix.NgramIndex.load(tmp_path / "out" / "index" / "built"))
    # the directory counted a chunk of keys at a time is the directory of all of them, and finds every key
    table = key_table.empty_directory(len(whole.q_keys))
    for a in range(0, len(whole.q_keys), 1_000):
        key_table.count_keys(table, whole.q_keys[a:a + 1_000])
    table = key_table.finish_directory(table)
    assert np.array_equal(table, key_table.directory_for(whole.q_keys))
    d = (len(table) - 1).bit_length() - 1
    buckets = (whole.q_keys >> np.uint64(64 - d)).astype(np.int64)
    assert (table[buckets] <= np.arange(len(whole.q_keys))).all() and (np.arange(len(whole.q_keys)) < table[buckets + 1]).all()


def records_file(records: pl.DataFrame, folder, table_rows: int):
    """``records`` (in record_id order) written as `reference_set` writes them, ``table_rows`` rows a record batch,
    and that file read a batch at a time."""
    from contam_assets.store import artifacts

    folder.mkdir(parents=True, exist_ok=True)
    with artifacts.RecordsWriter(folder, RECORD_SCHEMA) as w:
        for a in range(0, records.height, table_rows):
            w.write(records.slice(a, table_rows))
    return artifacts.RecordFile(folder / artifacts.RECORDS_MAPPED)


def test_build_from_a_records_file_read_a_batch_at_a_time_saves_the_same_files(real_records, tmp_path, monkeypatch):
    """The index step's path: the texts read from ``records.arrow`` a record batch at a time (not mapped), the
    batches of the file (777 rows) and of the build (500) out of step: the same arrays and saved bytes."""
    records = planted_records(real_records.head(3_000)).sort("record_id")
    source = records_file(records, tmp_path / "records", 777)
    assert [p.height for p in source.batches()][:2] == [777, 777] and source["indexed"].equals(records["indexed"])
    assert all(p.height <= 500 for p in source.batches(500))
    cfg = DetectConfig()
    whole = ixb.build_index_whole(records, cfg)
    monkeypatch.setattr(ixb, "SUM_STEP", 211)
    built = ixb.build_index(source, cfg, batch=500, spill_dir=tmp_path / "out" / "index")
    assert_same_index(whole, built)
    built.save(tmp_path / "out" / "index" / "built")
    whole.save(tmp_path / "whole")
    names = sorted(p.name for p in (tmp_path / "whole").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "out" / "index" / "built").iterdir())
    for name in names:
        assert (tmp_path / "whole" / name).read_bytes() == (tmp_path / "out" / "index" / "built" / name).read_bytes(), name


def test_digest_and_task_hashes_a_table_at_a_time_equal_those_of_the_whole(real_records, tmp_path, monkeypatch):
    """The digest and the task hashes of the records given a table at a time (a task's rows across tables, a
    table cut inside the digest's slices) equal those of the whole table; none of them: the empty table's."""
    from contam_assets.rescan import plan
    from contam_assets.store import artifacts

    cfg = DetectConfig()
    some = real_records.filter(pl.int_range(pl.len()).over("task") < 400)  # some records of every task
    rng = np.random.default_rng(7)  # and the tasks' records interleaved in record_id order
    records = some.with_columns(record_id=pl.Series(rng.permutation(some.height), dtype=pl.Int32)).sort("record_id")
    monkeypatch.setattr(artifacts, "DIGEST_ROWS", 300)
    want = artifacts.reference_digest(records, cfg), plan.task_hashes(records, cfg)
    assert len(want[1]) > 2
    for rows in (1_000, 451, records.height):
        digest, hasher = artifacts.RecordsDigest(cfg), plan.TaskHasher(cfg)
        for part in records_file(records, tmp_path / f"r{rows}", rows).batches():
            digest.add(part)
            hasher.add(part)
        assert (digest.hexdigest(), hasher.hashes()) == want
    assert artifacts.RecordsDigest(cfg).hexdigest() == artifacts.reference_digest(records.head(0), cfg)
    assert plan.TaskHasher(cfg).hashes() == plan.task_hashes(records.head(0), cfg) == {}
    assert artifacts.reference_digest(records.head(1), cfg) != artifacts.reference_digest(records.head(0), cfg)
