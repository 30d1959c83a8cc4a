"""The reference set written to its records files a table at a time (`write_reference_set`, what `reference_set`
runs) holds the table the plain whole-list build gives; DuckDB's `instances` filled from that Parquet file equals
the table; and the index step that maps those files gives the digest, the index files and the task hashes that
reading the records back from DuckDB gives, with the records files linked into the index's folder."""

from __future__ import annotations

import os
from contextlib import contextmanager
from datetime import datetime

import duckdb
import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from contam_assets import store
from contam_assets.defs.data.index_step import index_step
from contam_assets.defs.resources import DEFAULT_TASKS_DIR
from contam_assets.detector.config import DECON_MODE, preset
from contam_assets.sources import reference
from contam_assets.sources.registry import decon_spec, load_registry
from contam_assets.store import artifacts, tables
from contam_assets_tests.support.decon_fixtures import same_answer_and_duplicates


def written_and_whole(monkeypatch, tmp_path, specs, bench, cfg, chunk: int):
    monkeypatch.setattr(reference, "COLUMNS_CHUNK", chunk)
    monkeypatch.setattr(reference, "FILTER_CHUNK", max(1, chunk // 3))
    folder = tmp_path / f"written-{chunk}"
    n, s1 = reference.write_reference_set(specs, bench, cfg, folder)
    whole, s2 = reference.build_reference_set_whole(specs, bench, cfg)
    assert n == whole.height
    assert_frame_equal(artifacts.read_records(folder), whole)  # records.arrow, mapped
    assert_frame_equal(pl.read_parquet(folder / artifacts.RECORDS_FILE), whole)
    assert (s1.same_answer_suites, s1.answer_suites, s1.availability, s1.bad_rows, s1.row_skips, s1.notes) == (
        s2.same_answer_suites, s2.answer_suites, s2.availability, s2.bad_rows, s2.row_skips, s2.notes)
    assert not [p.name for p in folder.iterdir() if p.name.startswith(".")]  # the spill and temporaries gone
    return folder, whole, s1


def test_written_equals_the_whole_list_on_real_benchmarks(shared_data, monkeypatch, tmp_path):
    specs = load_registry(DEFAULT_TASKS_DIR, ["gsm8k", "arc_easy", "mbpp", "humaneval"])
    folder, recs, _ = written_and_whole(monkeypatch, tmp_path, specs, shared_data, preset("default"), 997)
    assert recs.height > 10_000 and recs["choice_index"].max() == 3 and recs["derived"].any() and not recs["indexed"].all()
    assert artifacts.read_records(folder).n_chunks() > 10  # a record batch per table written


def test_written_equals_the_whole_list_on_a_decon_folder(tmp_path, monkeypatch):
    evals = same_answer_and_duplicates(tmp_path / "evals")
    for cfg in (preset("default"), preset("default", **DECON_MODE)):
        # tables of 37 records: the same-answer suite and the duplicates span several of them
        _, recs, stats = written_and_whole(monkeypatch, tmp_path / cfg.dedup_by, [decon_spec(str(evals))], None, cfg, 37)
        assert recs.height == 240 and {"duplicate", "min_tokens"} <= set(recs["skip_reason"].drop_nulls())
        assert stats.same_answer_suites == (["same"] if cfg.same_answer_rule else [])
        assert recs.filter(pl.col("suite") == "same")["answer"].null_count() == (120 if cfg.same_answer_rule else 0)


def test_written_whole_where_every_record_is_needed_and_when_empty(shared_data, monkeypatch, tmp_path):
    specs = load_registry(DEFAULT_TASKS_DIR, ["gsm8k"])
    _, recs, stats = written_and_whole(monkeypatch, tmp_path, specs, shared_data, preset("default", answer_suites=True), 500)
    assert stats.answer_suites == ["gsm8k_answer"] and (recs["suite"] == "gsm8k_answer").any()
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "none.jsonl").write_text("")
    folder, recs, _ = written_and_whole(monkeypatch, tmp_path / "e", [decon_spec(str(empty))], None, preset("default"), 50)
    assert recs.height == 0 and artifacts.record_columns(folder).columns == list(artifacts.SUMMARY_COLUMNS)


class DB:
    def __init__(self, path):
        self.path = path

    @contextmanager
    def connect(self, read_only: bool = False):
        with duckdb.connect(str(self.path), read_only=read_only) as con:
            yield con


@pytest.fixture()
def written(shared_data, tmp_path):
    """An output folder whose DuckDB tables and records files hold a reference set, as `reference_set` leaves it."""
    specs = load_registry(DEFAULT_TASKS_DIR, ["gsm8k", "humaneval"])
    out, cfg = tmp_path / "out", preset("default")
    out.mkdir()
    n, stats = reference.write_reference_set(specs, shared_data, cfg, artifacts.reference_records_dir(out))
    db = DB(out / "contam.duckdb")
    state = pl.DataFrame([dict(inputs="in-1", records=n, bad_rows=0, bad_row_examples="[]", same_answer_suites="",
                               seconds=1.0, built_at=datetime.now())])
    with db.connect() as con:
        tables.ensure_schema(con)
        tables.replace_many(con, [("instances", "true", [], artifacts.reference_records_dir(out) / artifacts.RECORDS_FILE),
                                  ("reference_state", "true", [], state)])
    artifacts.mark_reference_records(out, "in-1", n)
    return out, db, cfg, n


def test_instances_from_the_written_file_equal_the_records(written):
    out, db, _, n = written
    with db.connect(read_only=True) as con:
        got = store.query_df(con, "select * from instances order by record_id")
    assert got.height == n > 5_000
    assert_frame_equal(got, artifacts.read_records(artifacts.reference_records_dir(out)))


def test_index_step_maps_the_written_records_as_duckdb_gives_them(written, tmp_path):
    out, db, cfg, n = written
    assert artifacts.reference_records(out, "in-1", n) is not None
    assert artifacts.reference_records(out, "in-2", n) is None and artifacts.reference_records(out, "in-1", n + 1) is None
    mapped = index_step(out, cfg, db, lambda line: None)
    # the same set read back from DuckDB: another output folder without the written files
    other = tmp_path / "other"
    other.mkdir()
    os.link(out / "contam.duckdb", other / "contam.duckdb")
    read = index_step(other, cfg, DB(other / "contam.duckdb"), lambda line: None)
    assert (mapped.how, read.how) == ("built", "built") and mapped.digest == read.digest and mapped.hashes == read.hashes
    assert_frame_equal(mapped.records, read.records)
    a, b = artifacts.index_dir(out, mapped.digest), artifacts.index_dir(other, read.digest)
    names = sorted(p.name for p in (b / "index").iterdir())
    assert names == sorted(p.name for p in (a / "index").iterdir()) and len(names) > 10
    for name in names:
        if name.endswith(".npy"):
            assert np.array_equal(np.load(a / "index" / name), np.load(b / "index" / name)), name
        else:
            assert (a / "index" / name).read_bytes() == (b / "index" / name).read_bytes(), name
    for name in (artifacts.RECORDS_FILE, artifacts.RECORDS_MAPPED):  # linked from the written folder, not written again
        assert (a / name).stat().st_ino == (artifacts.reference_records_dir(out) / name).stat().st_ino
    assert_frame_equal(artifacts.read_records(a), artifacts.read_records(b))
    assert_frame_equal(pl.read_parquet(a / artifacts.RECORDS_FILE), pl.read_parquet(b / artifacts.RECORDS_FILE))
