"""The reference set read into columns (a bounded number of records as Python dicts at once) is the table the
plain whole-list build gives: real benchmarks, and a decon folder with a same-answer suite, duplicates by
fingerprint and content, records too short to index, and chunks smaller than a task."""

from __future__ import annotations

import pytest
from polars.testing import assert_frame_equal

from contam_assets.defs.resources import DEFAULT_TASKS_DIR
from contam_assets.detector.config import DECON_MODE, preset
from contam_assets.sources import reference
from contam_assets.sources.registry import decon_spec, load_registry
from contam_assets_tests.support.decon_fixtures import same_answer_and_duplicates


def both(monkeypatch, specs, bench, cfg, chunk: int):
    monkeypatch.setattr(reference, "COLUMNS_CHUNK", chunk)
    monkeypatch.setattr(reference, "FILTER_CHUNK", max(1, chunk // 3))
    ours, s1 = reference.build_reference_set(specs, bench, cfg)
    whole, s2 = reference.build_reference_set_whole(specs, bench, cfg)
    assert_frame_equal(ours, whole)
    assert (s1.same_answer_suites, s1.availability, s1.bad_rows, s1.row_skips, s1.notes) == (
        s2.same_answer_suites, s2.availability, s2.bad_rows, s2.row_skips, s2.notes)
    return ours, s1


@pytest.mark.parametrize("chunk", [97, 50_000])
def test_columns_equal_the_whole_list_on_real_benchmarks(shared_data, monkeypatch, chunk):
    specs = load_registry(DEFAULT_TASKS_DIR, ["gsm8k", "mmlu", "mbpp", "humaneval", "arc_easy"])
    recs, _ = both(monkeypatch, specs, shared_data, preset("default"), chunk)
    assert recs.height > 10_000 and recs["derived"].any() and not recs["indexed"].all()


def test_columns_equal_the_whole_list_on_a_decon_folder(tmp_path, monkeypatch):
    evals = same_answer_and_duplicates(tmp_path / "evals")
    for cfg in (preset("default"), preset("default", **DECON_MODE)):
        recs, stats = both(monkeypatch, [decon_spec(str(evals))], None, cfg, 37)
        assert recs.height == 240 and set(recs["skip_reason"].drop_nulls()) >= {"duplicate"}
        assert stats.same_answer_suites == (["same"] if cfg.same_answer_rule else [])
