"""pool_listing and the run rules on planted pools: what a run's sweep may remove, which files its door check reads,
what it keeps of run.json, which partitions a pool may delete in a shared instance, how runs are cut, and which
files a failed run's reason is recorded for."""

from __future__ import annotations

import json
import os
import time

import dagster as dg
import pytest
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from contam_assets import store
from contam_assets.defs.data.assets import record_run_failure, step_clock
from contam_assets.defs.data.pool import pool_listing
from contam_assets.defs.data.runs import plan_for, pool_plan
from contam_assets.defs.data.sensors import unit_runs
from contam_assets.defs.partitions import shards_partitions
from contam_assets.defs.resources import ContamDB, ContamSettings
from contam_assets.store import shards as shards_db
from contam_assets.store.files import STALE_S


def _dead_pid() -> int:
    pid = 4_000_000
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            pass
        pid += 1


@pytest.fixture
def pool(tmp_path):
    p = tmp_path / "pool"
    p.mkdir()
    (p / "a.jsonl").write_text('{"text": "one document"}\n')
    (p / "b.jsonl").write_text('{"text": "another document"}\n')
    return p


def _run(settings: ContamSettings, instance, tags: dict | None = None):
    return dg.materialize([pool_listing], instance=instance, tags=tags or {}, raise_on_error=False,
                          resources={"contam_settings": settings, "contam_db": ContamDB(path=str(settings.db_path))})


def test_the_runs_sweep_removes_only_old_temporaries_while_another_run_is_in_progress(tmp_path, pool):
    """Alone, a run removes every temporary whose process is gone here; while another run is in progress, a fresh
    temporary of a pid not alive here may be that run's live write on another node (a shared folder): it stays."""
    from dagster._core.storage.dagster_run import DagsterRun, DagsterRunStatus

    out = tmp_path / "out"
    (out / "mix").mkdir(parents=True)
    pid = _dead_pid()
    past = time.time() - STALE_S - 60

    def plant():
        fresh = out / "mix" / f".a.jsonl.tmp-{pid}-0123abcd.jsonl"
        old = out / "mix" / f".b.jsonl.tmp-{pid}-89abcdef.jsonl"
        fresh.write_text("partial")
        old.write_text("partial")
        os.utime(old, (past, past))
        return fresh, old

    settings = ContamSettings(out_dir=str(out), pool_dir=str(pool))
    with dg.instance_for_test() as inst:
        fresh, old = plant()
        alone = _run(settings, inst)
        assert alone.success and not fresh.exists() and not old.exists()
        assert alone.asset_materializations_for_node("pool_listing")[0].metadata["temporary_files_removed"].value == 2
        inst.add_run(DagsterRun(job_name="scan_shards", run_id="0" * 8 + "-busy", status=DagsterRunStatus.STARTED))
        fresh, old = plant()
        busy = _run(settings, inst)
        assert busy.success and fresh.exists() and not old.exists()
        assert busy.asset_materializations_for_node("pool_listing")[0].metadata["temporary_files_removed"].value == 1


def test_a_scan_run_checks_only_its_own_units_at_the_door(tmp_path, pool):
    """A daemon-style scan run of a good unit succeeds while another unit lacks the content key; the run without
    partitions (the listing run `contam detect` starts with) checks every unit and refuses."""
    (pool / "c.jsonl").write_text('{"body": "no text key here"}\n')
    settings = ContamSettings(out_dir=str(tmp_path / "out"), pool_dir=str(pool))
    with dg.instance_for_test() as inst:
        inst.add_dynamic_partitions(shards_partitions.name, ["a.jsonl", "b.jsonl", "c.jsonl"])
        one = _run(settings, inst, {"dagster/partition": "a.jsonl"})
        assert one.success
        assert one.asset_materializations_for_node("pool_listing")[0].metadata["door_checked"].value == 1
        ranged = _run(settings, inst, {ASSET_PARTITION_RANGE_START_TAG: "a.jsonl", ASSET_PARTITION_RANGE_END_TAG: "b.jsonl"})
        assert ranged.success
        bad = _run(settings, inst, {"dagster/partition": "c.jsonl"})
        assert not bad.success
        whole = _run(settings, inst)
        assert not whole.success
        failure = whole.get_step_failure_events()[0].step_failure_data.error.message
        assert "c.jsonl" in failure, failure


def test_the_listing_keeps_the_file_counts_in_run_json(tmp_path, pool):
    out = tmp_path / "out"
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"content_key": "old", "files": {"clean": 2}}))
    settings = ContamSettings(out_dir=str(out), pool_dir=str(pool))
    with dg.instance_for_test() as inst:
        assert _run(settings, inst).success
    rec = json.loads((out / "run.json").read_text())
    assert rec["files"] == {"clean": 2} and rec["content_key"] == "text" and rec["pool_dir"] == str(pool)


def test_a_pool_deletes_only_its_own_group_partitions_in_a_shared_instance(tmp_path, pool):
    """Group-shaped keys of another pool stay; a group key of this pool (its first file is in this pool's listing,
    or is a file this output folder scanned that left the pool) that is no unit any more is deleted."""
    settings = ContamSettings(out_dir=str(tmp_path / "out"), pool_dir=str(pool))
    theirs, ours = "other/000.jsonl (+9 files, 0123abcd)", "a.jsonl (+1 files, 89abcdef)"
    with dg.instance_for_test() as inst:
        inst.add_dynamic_partitions(shards_partitions.name, [theirs, ours, "a.jsonl"])
        plan = pool_plan(settings, inst)
        assert plan.delete == [ours] and plan.add == ["b.jsonl"]
        plan.apply(inst)
        assert inst.get_dynamic_partitions(shards_partitions.name) == [theirs, "a.jsonl", "b.jsonl"]
    listing = {"a.jsonl": (10, 0)}
    gone_group = "z.jsonl (+2 files, 0123abcd)"
    assert plan_for(listing, [theirs, gone_group, "a.jsonl"], gone=["z.jsonl"]).delete == [gone_group]


def test_runs_are_cut_over_existing_partitions_only():
    """A unit the plan would add has no partition yet: no range may name it."""
    listing = {"a.jsonl": (10, 0), "b.jsonl": (10, 0)}
    assert unit_runs(["a.jsonl"], {"a.jsonl", "b.jsonl"}, listing) == [["a.jsonl"]]
    assert unit_runs(["a.jsonl", "b.jsonl"], {"a.jsonl", "b.jsonl"}, listing) == [["a.jsonl", "b.jsonl"]]


def test_a_failed_run_records_its_reason_past_a_stale_error_row(tmp_path, pool):
    """A file's error row from an earlier run does not stop the run's reason being recorded for every file; once a
    file of the run recorded its own error during this step, the files said what failed and nothing is added."""
    settings = ContamSettings(out_dir=str(tmp_path / "out"), pool_dir=str(pool))
    db = ContamDB(path=str(settings.db_path))
    with db.connect() as con:
        shards_db.record_error(con, "a.jsonl", "mix", "an earlier run's error")
    time.sleep(0.01)
    started = step_clock()
    record_run_failure(settings, db, ["a.jsonl", "b.jsonl"], ("mix",), dg.Failure("the run broke"), started)
    with store.connect(settings.db_path, read_only=True) as con:
        assert {(e["shard"], e["message"]) for e in shards_db.errors(con)} == {
            ("a.jsonl", "the run broke"), ("b.jsonl", "the run broke")}
    time.sleep(0.01)
    started = step_clock()
    with db.connect() as con:
        shards_db.record_error(con, "b.jsonl", "mix", "b's own error")
    record_run_failure(settings, db, ["a.jsonl", "b.jsonl"], ("mix",), dg.Failure("the run broke again"), started)
    with store.connect(settings.db_path, read_only=True) as con:
        assert {(e["shard"], e["message"]) for e in shards_db.errors(con)} == {
            ("a.jsonl", "the run broke"), ("b.jsonl", "b's own error")}
