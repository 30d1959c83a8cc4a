"""`contam detect` with a task added grows the saved index by that task instead of building it again, and gives the
files and tables a run from scratch gives; a rerun with nothing changed takes the index by its inputs' digest,
without reading the records (the ngram_index materialization's `how`)."""

from __future__ import annotations

import json
import os
import shutil
from unittest import mock

import dagster as dg

from contam_assets_tests.sources.test_reference_reuse import contam, table


def last_index(home) -> dict:
    with mock.patch.dict(os.environ, {"DAGSTER_HOME": str(home)}), dg.DagsterInstance.get() as instance:
        ev = instance.get_latest_materialization_event(dg.AssetKey("ngram_index"))
        return {k: v.value for k, v in ev.asset_materialization.metadata.items()}


def index_files(out) -> dict[str, bytes]:
    digest = json.loads((out / "index" / "current.json").read_text())["digest"]
    folder = out / "index" / digest / "index"
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_an_added_task_grows_the_index_to_what_a_build_gives(tmp_path, shared_data):
    bench = tmp_path / "bench"
    bench.mkdir()
    for name in ("gsm8k_test.jsonl", "HumanEval.jsonl.gz"):
        shutil.copy(shared_data / name, bench / name)
    lines = (shared_data / "gsm8k_train.jsonl").read_text().splitlines(keepends=True)[:800]
    (bench / "gsm8k_train.jsonl").write_text("".join(lines))
    test = [json.loads(line) for line in (bench / "gsm8k_test.jsonl").read_text().splitlines()[:3]]
    pool = tmp_path / "pool"
    pool.mkdir()
    docs = [{"text": f"Homework.\n{g['question']}\n{g['answer']}\nThe end."} for g in test]
    docs += [{"text": "A clean note about tomatoes and the rain in the garden this week. " * 3} for _ in range(4)]
    (pool / "shard.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    out, home = tmp_path / "out", tmp_path / "home"
    args = ["detect", "--pool", pool, "--benchmarks", bench, "--allow-missing"]

    contam(*args, "--out", out, "--tasks", "gsm8k", home=home)
    assert last_index(home)["how"] == "built"
    contam(*args, "--out", out, "--tasks", "gsm8k", home=home)
    assert last_index(home)["how"] == "kept"  # unchanged inputs: the records not read, the index mapped

    contam(*args, "--out", out, "--tasks", "gsm8k,humaneval", home=home)
    grown = last_index(home)
    assert grown["how"] == "grown"
    fresh, fresh_home = tmp_path / "fresh", tmp_path / "fresh-home"
    contam(*args, "--out", fresh, "--tasks", "gsm8k,humaneval", home=fresh_home)
    built = last_index(fresh_home)
    assert built["how"] == "built" and built["digest"] == grown["digest"]
    assert built["records_indexed"] == grown["records_indexed"] > 800
    assert index_files(out) == index_files(fresh)  # byte for byte, the lookup table and frequencies too
    sql = "select * exclude (record_id, match_id) from matches order by shard, line, task, suite, instance_index"
    assert table(out / "contam.duckdb", sql) == table(fresh / "contam.duckdb", sql)
    assert table(out / "contam.duckdb", "select sum(removed) from shard_stats") == [(3,)]

    contam(*args, "--out", out, "--tasks", "gsm8k,humaneval", home=home)
    assert last_index(home)["how"] == "kept"
