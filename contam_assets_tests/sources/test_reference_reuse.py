"""A daily `contam detect` keeps a reference set whose inputs did not change, and rebuilds one whose inputs did.

The inputs are the detector's code, the knobs that shape the reference set, the specs and the bytes
of every source file (registry.inputs_digest).  Runs as a user runs them (the CLI, real GSM8K
files copied into a benchmark folder of the test's own), reading what happened from the Dagster
instance (the reference_set materialization's `rebuilt`) and from the tables.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from unittest import mock

import dagster as dg
import duckdb
import polars as pl
import pytest


def contam(*args, home):
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    r = subprocess.run([sys.executable, "-m", "contam_assets.cli", *map(str, args)], capture_output=True, text=True,
                       env=env, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return r


def last_reference_build(home) -> dict:
    with mock.patch.dict(os.environ, {"DAGSTER_HOME": str(home)}), dg.DagsterInstance.get() as instance:
        ev = instance.get_latest_materialization_event(dg.AssetKey("reference_set"))
        return {k: v.value for k, v in ev.asset_materialization.metadata.items()}


def table(db, sql):
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


TRAIN_LINES, TEST_LINES = 600, 40  # train item 535 is under 40 tokens: `--min-tokens 40` below leaves it out


@pytest.fixture()
def case(tmp_path, shared_data):
    bench = tmp_path / "bench"
    bench.mkdir()
    # the first lines of the real GSM8K files: real items for every step below, without building the whole set each run
    for name, n in (("gsm8k_train.jsonl", TRAIN_LINES), ("gsm8k_test.jsonl", TEST_LINES)):
        lines = (shared_data / name).read_text().splitlines(keepends=True)[:n]
        (bench / name).write_text("".join(lines))
    test = [json.loads(line) for line in (bench / "gsm8k_test.jsonl").read_text().splitlines()]
    pool = tmp_path / "pool"
    pool.mkdir()
    docs = [{"text": f"Homework.\n{g['question']}\n{g['answer']}\nThe end."} for g in test[:3]]
    docs += [{"text": "A clean note about tomatoes and the rain in the garden this week. " * 3} for _ in range(4)]
    (pool / "shard.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    return bench, pool, tmp_path / "out", tmp_path / "home", test


def test_unchanged_inputs_keep_the_reference_set_changed_ones_rebuild_it(case):
    bench, pool, out, home, test = case
    args = ["detect", "--pool", pool, "--out", out, "--benchmarks", bench, "--tasks", "gsm8k"]
    db = out / "contam.duckdb"

    contam(*args, home=home)
    first = last_reference_build(home)
    assert first["rebuilt"] is True and first["records"] == len(test) + TRAIN_LINES
    instances = table(db, "select * from instances order by record_id")
    matches = table(db, "select * exclude (record_id) from matches order by match_id")
    built_at = table(db, "select built_at from reference_state")
    assert table(db, "select sum(removed) from shard_stats") == [(3,)]

    # the next day, nothing changed: the set is kept, every table is the same
    contam(*args, home=home)
    again = last_reference_build(home)
    assert again["rebuilt"] is False and again["records"] == first["records"] and again["indexed"] == first["indexed"]
    assert again["inputs_digest"] == first["inputs_digest"] and again["build_seconds"] > 0
    assert table(db, "select * from instances order by record_id") == instances
    assert table(db, "select built_at from reference_state") == built_at
    assert table(db, "select * exclude (record_id) from matches order by match_id") == matches

    # a knob the scan alone reads: kept, and the settings table says the new value
    contam(*args, "--threshold", "0.9", home=home)
    assert last_reference_build(home)["rebuilt"] is False
    assert table(db, "select value from detect_settings where name = 'threshold'") == [("0.9",)]

    # a knob that shapes the reference set (decon's eval_min_token_length): rebuilt
    contam(*args, "--threshold", "0.9", "--min-tokens", "40", home=home)
    rebuilt = last_reference_build(home)
    assert rebuilt["rebuilt"] is True and rebuilt["inputs_digest"] != first["inputs_digest"]
    assert rebuilt["indexed"] < first["indexed"]

    # one question of a source file edited, same size, name and mtime: rebuilt, and the table holds the edit
    question = edit_one_question(bench / "gsm8k_test.jsonl", 5)
    contam(*args, "--threshold", "0.9", "--min-tokens", "40", home=home)
    edited = last_reference_build(home)
    assert edited["rebuilt"] is True and edited["inputs_digest"] != rebuilt["inputs_digest"]
    assert table(db, "select question from instances where split = 'test' and instance_index = 5") == [(question,)]


def edit_one_question(path, line_no: int) -> str:
    """Reverse the first word of one question (same size, same name, same mtime); the new question."""
    lines = path.read_text().splitlines(keepends=True)
    row = json.loads(lines[line_no])
    word = row["question"].split()[0]
    row["question"] = row["question"].replace(word, word[::-1], 1)
    lines[line_no] = json.dumps(row) + "\n"
    before = path.stat()
    path.write_text("".join(lines))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # the same mtime: the content decides
    return row["question"]


def test_a_build_killed_before_its_write_leaves_the_old_set_and_is_redone(case):
    bench, pool, out, home, _ = case
    args = ["detect", "--pool", pool, "--out", out, "--benchmarks", bench, "--tasks", "gsm8k"]
    db = out / "contam.duckdb"
    contam(*args, home=home)
    old = table(db, "select question from instances where split = 'test' and instance_index = 7")
    question = edit_one_question(bench / "gsm8k_test.jsonl", 7)
    env = {**os.environ, "DAGSTER_HOME": str(home), "CONTAM_FAULT": "reference_build"}
    r = subprocess.run([sys.executable, "-m", "contam_assets.cli", *map(str, args)], capture_output=True, text=True,
                       env=env, timeout=900)
    assert r.returncode != 0  # killed (SIGKILL) after building, before writing
    # the state still describes the table as it is: the old set, not the edit
    assert table(db, "select records from reference_state") == table(db, "select count(*) from instances")
    assert table(db, "select question from instances where split = 'test' and instance_index = 7") == old
    contam(*args, home=home)
    assert last_reference_build(home)["rebuilt"] is True
    assert table(db, "select question from instances where split = 'test' and instance_index = 7") == [(question,)]


def test_an_unreadable_source_file_is_a_bad_row_and_a_recorded_digest(tmp_path, shared_data):
    """A glob that matches a folder (or a file the build cannot open) is recorded in the digest, not raised:
    the build reports it as bad rows, and the same state gives the same digest."""
    from contam_assets.defs.resources import DEFAULT_TASKS_DIR
    from contam_assets.detector.config import preset
    from contam_assets.sources.reference import build_reference_set
    from contam_assets.sources.registry import inputs_digest, load_registry

    bench = tmp_path / "bench"
    bench.mkdir()
    shutil.copy(shared_data / "gsm8k_train.jsonl", bench / "gsm8k_train.jsonl")
    (bench / "gsm8k_test.jsonl").mkdir()  # a folder where the spec names a file
    specs, cfg = load_registry(DEFAULT_TASKS_DIR, ["gsm8k"]), preset("default")
    first = inputs_digest(specs, bench, cfg.reference_key(), "v")
    assert inputs_digest(specs, bench, cfg.reference_key(), "v") == first
    records, stats = build_reference_set(specs, bench, cfg)
    assert stats.bad_rows and records.filter(pl.col("split") == "test").height == 0
    (bench / "gsm8k_test.jsonl").rmdir()
    shutil.copy(shared_data / "gsm8k_test.jsonl", bench / "gsm8k_test.jsonl")
    assert inputs_digest(specs, bench, cfg.reference_key(), "v") != first
