"""The prefilter on the real path (the shard_matches asset, as `contam detect` runs it): with `prefilter`
on, every match row -- flagged or only stored -- equals the run without it, no token stream is cached,
and an added task is rescanned from the text with that task's own prefilter, equal to a full rescan."""

from __future__ import annotations

import polars as pl
import pytest

from contam_assets.defs.resources import DetectorKnobs
from contam_assets.detector.config import DetectConfig
from contam_assets.detector.index_build import build_index
from contam_assets.detector.matches import Reference
from contam_assets.detector.prefilter import ensure_prefilter
from contam_assets.sources.reference import build_reference_set
from contam_assets.sources.registry import load_registry
from contam_assets_tests.support.automation import (
    add_mbpp,
    build_reference,
    instance,
    make_tasks_dir,
    matches,
    scan,
    settings,
    table,
    write_pool,
)

SHARDS = ["part-000.jsonl", "part-001.jsonl", "part-002.jsonl"]
ON = DetectorKnobs(prefilter=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, shared_data):
    root = tmp_path_factory.mktemp("prefilter_path")
    pool, tasks = root / "pool", make_tasks_dir(root / "tasks")
    write_pool(pool, shared_data)
    with_pf = settings(root / "pf", pool, tasks, shared_data, knobs=ON)
    inst = instance(root / "home_pf")
    build_reference(with_pf, inst)
    first = scan(with_pf, inst, SHARDS)
    plain = settings(root / "plain", pool, tasks, shared_data)
    inst_plain = instance(root / "home_plain")
    build_reference(plain, inst_plain)
    scan(plain, inst_plain, SHARDS)
    out = dict(first=first, first_rows=matches(with_pf), plain_rows=matches(plain),
               prefiltered=table(with_pf, "select sum(prefiltered) n, sum(read) r from shard_stats").row(0),
               cache=sorted(p.name for p in (with_pf.out_path / "token_cache").rglob("*") if p.is_file())
               if (with_pf.out_path / "token_cache").exists() else [])
    add_mbpp(tasks)  # the registry grows
    build_reference(with_pf, inst)
    out["added"] = scan(with_pf, inst, SHARDS)
    out["added_rows"] = matches(with_pf)
    out["added_removals"] = table(with_pf, "select shard, line from removals order by 1, 2")
    full = settings(root / "full", pool, tasks, shared_data)
    inst_full = instance(root / "home_full")
    build_reference(full, inst_full)
    scan(full, inst_full, SHARDS)
    out["full_rows"] = matches(full)
    out["full_removals"] = table(full, "select shard, line from removals order by 1, 2")
    return out


def test_every_row_is_the_same_with_the_prefilter(runs):
    assert runs["first"]["shards_full"] == 3
    assert runs["first_rows"].height > 0 and runs["first_rows"]["flagged"].any()
    assert (~runs["first_rows"]["flagged"]).any()  # stored near misses are kept too, not only flags
    assert runs["first_rows"].equals(runs["plain_rows"])
    n, read = runs["prefiltered"]
    assert 0 < n < read  # documents were cleared without tokenizing, and some were scanned
    assert runs["cache"] == []  # no token stream: it would miss the cleared documents


def test_an_added_task_is_rescanned_with_its_own_prefilter_and_equals_a_full_rescan(runs):
    assert runs["added"]["shards_incremental"] == 3 and runs["added"]["shards_full"] == 0
    mbpp = runs["added_rows"].filter(pl.col("task") == "mbpp")
    assert mbpp.height > 0 and mbpp["flagged"].any()
    assert runs["added_rows"].equals(runs["full_rows"])
    assert runs["added_removals"].equals(runs["full_removals"])


def test_stored_candidates_survive_the_prefilter_on_planted_near_misses(shared_data, tmp_path):
    """Questions whose last third is replaced (and no answer) score between the report floor and the flag
    bar: stored near misses.  The prefilter must pass their documents (at the flag bar it cleared them)."""
    cfg = DetectConfig()
    specs = [s for s in load_registry(make_tasks_dir(tmp_path / "tasks")) if s.name == "gsm8k"]
    records, _ = build_reference_set(specs, shared_data, cfg)
    index = build_index(records, cfg)
    ref = Reference(records)
    from contam_assets.detector.matches import scan_documents
    from contam_assets.store.pool import Document

    qs = records.filter(pl.col("indexed") & (pl.col("split") == "test")).head(40)["question"].to_list()
    texts = []
    for q in qs:
        words = q.split()
        cut = int(len(words) * 0.65)
        texts.append("Some unrelated words first. " + " ".join(words[:cut] + ["zebra"] * (len(words) - cut)))
    docs = [Document(line=i, doc_id=str(i), source="t", text=t, n_bytes=len(t), raw=t.encode()) for i, t in enumerate(texts)]
    rows, _ = scan_documents(docs, "s", index, ref, cfg)
    rows_pf, c = scan_documents(docs, "s", index, ref, cfg.replace(prefilter=True))
    stored = [r for r in rows if not r["flagged"]]
    assert stored, "the planted near misses are stored below the flag bar"
    key = lambda r: (r["line"], r["record_id"], r["question_start"])  # noqa: E731
    assert sorted(map(key, rows_pf)) == sorted(map(key, rows))
    assert not ensure_prefilter(index, records, cfg.replace(prefilter=True)).always_pass
