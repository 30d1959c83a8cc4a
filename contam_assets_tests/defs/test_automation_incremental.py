"""Incremental rescans: an added task is scanned from cached tokens and equals a full rescan; a removed
task's rows vanish; other tasks' rows are not touched; full scan paths agree with rescan.shard."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from contam_assets.detector.config import preset
from contam_assets.detector.matches import Reference
from contam_assets.executor.shard_work import tokenize_and_scan
from contam_assets.rescan.incremental import scan_stream
from contam_assets.rescan.plan import plan_shard, shard_identity, task_hashes
from contam_assets.rescan.shard import scan_shard
from contam_assets.store import artifacts, token_cache
from contam_assets_tests.support.automation import (
    add_mbpp,
    build_reference,
    instance,
    make_tasks_dir,
    matches,
    scan,
    settings,
    stats,
    table,
    write_pool,
)

SHARDS = ["part-000.jsonl", "part-001.jsonl", "part-002.jsonl"]


@pytest.fixture(scope="module")
def world(tmp_path_factory, shared_data):
    root = tmp_path_factory.mktemp("incremental")
    pool, tasks = root / "pool", make_tasks_dir(root / "tasks")
    write_pool(pool, shared_data)
    s = settings(root / "out", pool, tasks, shared_data)
    inst = instance(root / "home")
    build_reference(s, inst)
    first = scan(s, inst, SHARDS)
    base = dict(matches=matches(s), stats=stats(s), digest=artifacts.current_digest(s.out_path))
    # the registry grows: mbpp is added
    add_mbpp(tasks)
    build_reference(s, inst)
    added = scan(s, inst, SHARDS)
    after_add = dict(matches=matches(s), stats=stats(s), digest=artifacts.current_digest(s.out_path),
                     task_scans=table(s, "select shard, task, index_digest from shard_task_scans order by 1, 2"),
                     removals=table(s, "select shard, line from removals order by 1, 2"))
    # a full rescan with the grown registry, in a fresh output folder
    full = settings(root / "full", pool, tasks, shared_data)
    inst_full = instance(root / "home_full")
    build_reference(full, inst_full)
    scan(full, inst_full, SHARDS)
    return dict(root=root, s=s, inst=inst, tasks=tasks, first=first, added=added, base=base, after_add=after_add,
                full=full, shared=shared_data)


def test_first_scan_is_full_and_caches_tokens(world):
    assert world["first"] == {"shards_full": 3, "shards_incremental": 0, "shards_current": 0}
    for shard in SHARDS:
        assert list((world["s"].out_path / "token_cache" / shard).iterdir()), shard


def test_added_task_is_scanned_incrementally_and_equals_a_full_rescan(world):
    assert world["added"] == {"shards_full": 0, "shards_incremental": 3, "shards_current": 0}
    inc = world["after_add"]["matches"].filter(pl.col("task") == "mbpp")
    full = matches(world["full"], "task = 'mbpp'")
    assert inc.height > 0 and inc["flagged"].any()  # the planted MBPP problems are found
    assert inc.equals(full)  # every column, score and flag of the new task's rows
    # removals and per-shard counts equal a full rescan's too
    assert world["after_add"]["stats"].equals(stats(world["full"]))
    assert world["after_add"]["removals"].equals(table(world["full"], "select shard, line from removals order by 1, 2"))


def test_other_tasks_rows_are_untouched_and_carry_their_index(world):
    before, after = world["base"]["matches"], world["after_add"]["matches"].filter(pl.col("task") != "mbpp")
    assert before.height > 0 and after.equals(before)
    ts = world["after_add"]["task_scans"]
    old, new = world["base"]["digest"], world["after_add"]["digest"]
    assert old != new
    assert set(ts.filter(pl.col("task") == "mbpp")["index_digest"]) == {new}
    assert set(ts.filter(pl.col("task") != "mbpp")["index_digest"]) == {old}  # scored with the old IDF (documented drift)
    # record ids of untouched rows point at the rebuilt reference set
    ids = table(world["s"], """select count(*) n from matches m join instances i using (record_id)
        where i.suite <> m.suite or i.instance_index <> m.instance_index""")
    assert ids["n"][0] == 0


def test_removed_task_rows_vanish(world):
    s, inst, tasks = world["s"], world["inst"], world["tasks"]
    (tasks / "mbpp.toml").unlink()
    build_reference(s, inst)
    assert scan(s, inst, SHARDS) == {"shards_full": 0, "shards_incremental": 3, "shards_current": 0}
    now = matches(s)
    assert now.filter(pl.col("task") == "mbpp").height == 0
    assert now.equals(world["base"]["matches"])
    assert stats(s).equals(world["base"]["stats"])
    assert table(s, "select count(*) n from shard_task_scans where task = 'mbpp'")["n"][0] == 0
    # nothing left to do: a second run is a no-op
    assert scan(s, inst, SHARDS) == {"shards_full": 0, "shards_incremental": 0, "shards_current": 3}
    add_mbpp(tasks)  # restore for the tests below
    build_reference(s, inst)
    scan(s, inst, SHARDS)


def test_full_scan_paths_agree_with_core_detect(world):
    """tokenize_and_scan (what shard_matches runs) and a scan of the cached stream equal rescan.shard.scan_shard."""
    s = world["full"]
    index, records, _ = artifacts.load_index(s.out_path)
    ref, cfg = Reference(records), preset("default")
    path = s.pool_path / SHARDS[1]
    ref_res = scan_shard(path, SHARDS[1], index, ref, cfg, "text", "default", "d")
    cache = world["root"] / "cache_check"
    ours = tokenize_and_scan(path, SHARDS[1], index, ref, cfg, "text", "default", "d", cache)
    fp, identity = shard_identity(path)
    stream = token_cache.load(cache, SHARDS[1], token_cache.cache_key(identity, cfg, "text"))
    again = scan_stream(stream, path, SHARDS[1], index, ref, cfg, "text", "default", "d")
    drop = ["seconds", "shard_fingerprint"]  # scan_shard leaves the fingerprint to its caller
    for res in (ours, again):
        assert res.matches.sort("match_id").equals(ref_res.matches.sort("match_id"))
        assert {k: v for k, v in res.stats.items() if k not in drop} == {k: v for k, v in ref_res.stats.items() if k not in drop}
    assert again.docs_scanned < ours.docs_scanned  # the n-gram prefilter skipped documents without an index n-gram
    assert stream.tokens.dtype == np.uint32 and stream.n_docs == ref_res.stats["read"] - ref_res.stats["rejected"]


def test_changed_shard_is_rescanned_in_full_and_cache_is_rekeyed(world):
    s, inst = world["s"], world["inst"]
    path = s.pool_path / SHARDS[0]
    old_keys = {p.name for p in (s.out_path / "token_cache" / SHARDS[0]).iterdir()}
    with open(path, "a") as fh:
        fh.write(json.dumps({"id": "late", "text": "a late document " * 20}) + "\n")
    assert scan(s, inst, [SHARDS[0]]) == {"shards_full": 1, "shards_incremental": 0, "shards_current": 0}
    new_keys = {p.name for p in (s.out_path / "token_cache" / SHARDS[0]).iterdir()}
    assert new_keys and not (new_keys & old_keys)  # the stale stream was replaced, not reused
    assert table(s, "select read from shard_stats where shard = ?", [SHARDS[0]])["read"][0] == 41


def test_plan_rules():
    tasks = {"a": "1", "b": "2"}
    from contam_assets.rescan.plan import ShardState

    st = ShardState(identity="fp@1", scan_config="c", stream_key="k", index_digest="d", tasks=dict(tasks))
    assert plan_shard(None, "fp@1", "c", tasks, "k", True).mode == "full"
    assert plan_shard(st, "fp@2", "c", tasks, "k", True).mode == "full"
    assert plan_shard(st, "fp@1", "other", tasks, "k", True).mode == "full"
    assert plan_shard(st, "fp@1", "c", tasks, "k", True).mode == "current"
    assert plan_shard(st, "fp@1", "c", tasks, "k", True, mode="full").mode == "full"
    p = plan_shard(st, "fp@1", "c", {"a": "1", "b": "3", "c": "4"}, "k", True)
    assert (p.mode, p.add, p.drop) == ("incremental", ["b", "c"], ["b", "c"])
    p = plan_shard(st, "fp@1", "c", {"a": "1"}, "k", False)  # removal needs no token stream
    assert (p.mode, p.add, p.drop) == ("incremental", [], ["b"])
    assert plan_shard(st, "fp@1", "c", {"a": "1", "c": "4"}, "k", False).mode == "full"  # no stream to add from
    with pytest.raises(ValueError):
        plan_shard(st, "fp@1", "c", tasks, "k", True, mode="sometimes")


def test_task_hash_ignores_spec_prose_but_not_content(world):
    s = world["s"]
    cfg = preset("default")
    _, records, _ = artifacts.load_index(s.out_path)
    h = task_hashes(records, cfg)
    assert set(h) == {"gsm8k", "humaneval", "mbpp"}
    edited = records.with_columns(pl.when(pl.col("task") == "mbpp").then(pl.col("question") + " x").otherwise(pl.col("question")).alias("question"))
    h2 = task_hashes(edited, cfg)
    assert h2["mbpp"] != h["mbpp"] and h2["gsm8k"] == h["gsm8k"]
