"""Sensors and the nightly schedule, evaluated with Dagster's test APIs and with the sensor daemon's own
tick loop (cursor persistence on success and failure)."""

from __future__ import annotations

import datetime as dt
import json
import logging
import sys

import dagster as dg
import pytest
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from contam_assets.defs.data.jobs import reference_job, scan_shards_job
from contam_assets.defs.data.sensors import (
    new_shards_sensor,
    new_tasks_sensor,
    nightly_rescan_schedule,
    tasks_rescan_sensor,
)
from contam_assets_tests.support.automation import (
    add_mbpp,
    build_reference,
    instance,
    make_tasks_dir,
    scan,
    settings,
    write_pool,
)

SHARDS = ["part-000.jsonl", "part-001.jsonl", "part-002.jsonl"]


@pytest.fixture(scope="module")
def world(tmp_path_factory, shared_data):
    root = tmp_path_factory.mktemp("sensors")
    pool, tasks = root / "pool", make_tasks_dir(root / "tasks")
    write_pool(pool, shared_data, docs=24)
    s = settings(root / "out", pool, tasks, shared_data)
    inst = instance(root / "home")
    build_reference(s, inst)
    scan(s, inst, SHARDS)
    return dict(root=root, s=s, inst=inst, tasks=tasks, pool=pool, shared=shared_data)


def _ctx(inst, s, cursor=None):
    return dg.build_sensor_context(instance=inst, cursor=cursor, resources={"contam_settings": s})


def test_sensors_and_schedule_validate_and_default_to_stopped():
    from contam_assets.definitions import build_definitions

    repo = build_definitions().get_repository_def()
    for name in ("new_shards_sensor", "new_tasks_sensor", "tasks_rescan_sensor"):
        assert repo.get_sensor_def(name).default_status == dg.DefaultSensorStatus.STOPPED
    assert repo.get_schedule_def("nightly_rescan_schedule").default_status == dg.DefaultScheduleStatus.STOPPED
    # run config the sensors send is valid for the scan job
    assert dg.validate_run_config(scan_shards_job.resolve(asset_graph=repo.asset_graph),
                                  {"ops": {"shard_matches": {"config": {"mode": "full"}}}})


def test_new_task_file_yields_one_rebuild_and_a_repeat_tick_none(world):
    s, inst, tasks = world["s"], world["inst"], world["tasks"]
    first = new_tasks_sensor(_ctx(inst, s))
    assert len(first.run_requests) == 1  # the first look rebuilds once
    again = new_tasks_sensor(_ctx(inst, s, first.cursor))
    assert again.run_requests == [] and again.skip_reason
    add_mbpp(tasks)
    added = new_tasks_sensor(_ctx(inst, s, first.cursor))
    assert len(added.run_requests) == 1
    req = added.run_requests[0]
    assert req.run_key.startswith("registry:") and req.tags["contam/tasks_added"] == "mbpp"
    assert req.tags["contam/tasks_changed"] == "" and req.tags["contam/tasks_removed"] == ""
    assert new_tasks_sensor(_ctx(inst, s, added.cursor)).run_requests == []
    cur = json.loads(added.cursor)
    assert set(cur["tasks"]) == {"gsm8k", "humaneval", "mbpp"} and len(added.cursor) < 200


def test_new_index_requests_exactly_one_rescan_set(world):
    s, inst = world["s"], world["inst"]
    # the build_reference run the sensor above requested (mbpp added)
    build_reference(s, inst)
    r1 = tasks_rescan_sensor(_ctx(inst, s))
    assert len(r1.run_requests) == 1
    req = r1.run_requests[0]
    assert (req.tags[ASSET_PARTITION_RANGE_START_TAG], req.tags[ASSET_PARTITION_RANGE_END_TAG]) == (SHARDS[0], SHARDS[-1])
    assert req.run_key.startswith("tasks@") and req.run_config["ops"]["shard_matches"]["config"]["mode"] == "auto"
    r2 = tasks_rescan_sensor(_ctx(inst, s, r1.cursor))
    assert not r2.run_requests
    # carry out the request as the daemon would: one run over the range
    res = scan_shards_job.resolve(asset_graph=_graph()).execute_in_process(
        instance=inst, tags=req.tags, run_config=req.run_config, resources=_resources(s))
    assert res.success
    md = res.asset_materializations_for_node("shard_matches")
    assert md[0].metadata["shards_incremental"].value == 3
    # the same index again (e.g. a re-materialization that reused it): nothing to rescan
    build_reference(s, inst)
    r3 = tasks_rescan_sensor(_ctx(inst, s, r1.cursor))
    assert not r3.run_requests and "current" in r3.skip_reason.skip_message


def test_nightly_schedule_rescans_idf_stale_shards_in_full(world):
    s, inst = world["s"], world["inst"]
    when = dt.datetime(2026, 1, 2, 3, 0, tzinfo=dt.timezone.utc)
    ctx = dg.build_schedule_context(instance=inst, scheduled_execution_time=when, resources={"contam_settings": s})
    reqs = nightly_rescan_schedule(ctx)
    assert len(reqs) == 1
    assert reqs[0].run_config["ops"]["shard_matches"]["config"]["mode"] == "full"
    assert reqs[0].run_key == f"nightly:2026-01-02:full:{SHARDS[0]}..{SHARDS[-1]}"
    scan(s, inst, SHARDS, mode="full")
    assert isinstance(nightly_rescan_schedule(ctx), dg.SkipReason)


DEFS_MODULE = """
import dagster as dg
import contam_assets.defs.data as data
from contam_assets.defs.data import assets, checks, jobs, outputs, pool, publish, sensors
from contam_assets.defs.resources import ContamDB, ContamSettings

s = ContamSettings(out_dir={out!r}, pool_dir={pool!r}, tasks_dir={tasks!r}, benchmarks_dir={bench!r})
defs = dg.Definitions.merge(dg.load_definitions_from_modules([assets, checks, outputs, pool, publish, jobs, sensors]), data.defs,
                            dg.Definitions(resources={{"contam_settings": s, "contam_db": ContamDB(path=str(s.db_path))}}))
"""


def test_failed_tick_keeps_the_cursor_in_the_sensor_daemon(tmp_path, shared_data):
    """Real daemon ticks: a tick that fails (unreadable spec) stores no cursor and launches nothing;
    the next good tick still sees the change made meanwhile; a repeated tick launches nothing."""
    from dagster._core.remote_origin import InProcessCodeLocationOrigin
    from dagster._core.test_utils import create_test_daemon_workspace_context, freeze_time
    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
    from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
    from dagster._daemon.sensor import execute_sensor_iteration

    tasks = make_tasks_dir(tmp_path / "tasks")
    mod = tmp_path / "code_location.py"
    mod.write_text(DEFS_MODULE.format(out=str(tmp_path / "out"), pool=str(tmp_path / "pool"), tasks=str(tasks), bench=str(shared_data)))
    origin = InProcessCodeLocationOrigin(LoadableTargetOrigin(executable_path=sys.executable, python_file=str(mod),
                                                              attribute="defs", working_directory=str(tmp_path)))
    overrides = {"run_coordinator": {"module": "dagster._core.run_coordinator", "class": "QueuedRunCoordinator"}}
    (tmp_path / "home").mkdir()
    with dg.instance_for_test(overrides=overrides, temp_dir=str(tmp_path / "home")) as inst:
        with create_test_daemon_workspace_context(InProcessWorkspaceLoadTarget(origin), inst) as ws:
            entry = next(iter(ws.create_request_context().get_code_location_entries().values()))
            assert entry.code_location, entry.load_error
            location = entry.code_location
            sensor = location.get_repository("__repository__").get_sensor("new_tasks_sensor")
            inst.start_sensor(sensor)
            t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)

            def tick(minutes: int):
                with freeze_time(t0 + dt.timedelta(minutes=minutes)):
                    list(execute_sensor_iteration(ws, logging.getLogger("test"), None, None))
                state = inst.get_instigator_state(sensor.get_remote_origin_id(), sensor.selector_id)
                ticks = inst.get_ticks(sensor.get_remote_origin_id(), sensor.selector_id)
                return state.instigator_data.cursor, ticks[0], inst.get_runs()

            c1, t1, runs = tick(0)
            assert t1.status.value == "SUCCESS" and len(runs) == 1 and c1
            add_mbpp(tasks)
            (tasks / "broken.toml").write_text("name = \n")  # does not parse
            c2, t2, runs = tick(2)
            assert t2.status.value == "FAILURE" and "broken.toml" in t2.error.to_string()
            assert c2 == c1 and len(runs) == 1  # nothing launched, cursor kept
            (tasks / "broken.toml").unlink()
            c3, t3, runs = tick(4)
            assert t3.status.value == "SUCCESS" and len(runs) == 2 and c3 != c1
            assert runs[0].tags["contam/tasks_added"] == "mbpp"  # the change was seen against the kept cursor
            assert runs[0].job_name == reference_job.name
            c4, t4, runs = tick(6)
            assert t4.status.value == "SKIPPED" and len(runs) == 2 and c4 == c3


def test_new_and_changed_shards(world):
    s, inst, pool = world["s"], world["inst"], world["pool"]
    r0 = new_shards_sensor(_ctx(inst, s))
    assert r0.run_requests == [] and not r0.dynamic_partitions_requests  # everything is scanned
    (pool / "part-003.jsonl").write_text((pool / "part-000.jsonl").read_text())
    with open(pool / "part-001.jsonl", "a") as fh:
        fh.write(json.dumps({"id": "late", "text": "a late arrival " * 10}) + "\n")
    r1 = new_shards_sensor(_ctx(inst, s, r0.cursor))
    assert r1.dynamic_partitions_requests[0].partition_keys == ["part-003.jsonl"]
    assert sorted(r.partition_key for r in r1.run_requests) == ["part-001.jsonl", "part-003.jsonl"]
    assert {r.tags["contam/trigger"] for r in r1.run_requests} == {"new_shard", "changed_shard"}
    # a failed tick keeps the old cursor: the retry asks for the same runs, so run keys dedupe them
    retry = new_shards_sensor(_ctx(inst, s, r0.cursor))
    assert sorted(r.run_key for r in retry.run_requests) == sorted(r.run_key for r in r1.run_requests)
    assert new_shards_sensor(_ctx(inst, s, r1.cursor)).run_requests == []


def _graph():
    from contam_assets.definitions import build_definitions

    return build_definitions().get_repository_def().asset_graph


def _resources(s):
    from contam_assets_tests.support.automation import resources

    return resources(s)


def test_a_deleted_shard_loses_its_partition_rows_and_files(world):
    import duckdb

    s, inst, pool = world["s"], world["inst"], world["pool"]
    r0 = new_shards_sensor(_ctx(inst, s))
    out = s.out_path
    con = duckdb.connect(str(s.db_path), read_only=True)
    assert con.execute("select count(*) from shard_stats where shard = 'part-002.jsonl'").fetchone()[0] == 1
    con.close()
    (out / "mix").mkdir(exist_ok=True)
    (out / "mix" / "part-002.jsonl").write_text("{}\n")  # its mix file, as the mix asset writes it
    (pool / "part-002.jsonl").unlink()
    r1 = new_shards_sensor(_ctx(inst, s, r0.cursor))
    deletes = [r for r in r1.dynamic_partitions_requests if isinstance(r, dg.DeleteDynamicPartitionsRequest)]
    assert [r.partition_keys for r in deletes] == [["part-002.jsonl"]]
    assert "part-002.jsonl" not in {r.partition_key for r in r1.run_requests}
    # the tick changed no table: its one request, pool_listing alone, retires the file (the one rule, runs.py)
    con = duckdb.connect(str(s.db_path), read_only=True)
    assert con.execute("select count(*) from shard_stats where shard = 'part-002.jsonl'").fetchone()[0] == 1
    con.close()
    assert r1.run_requests and all(r.job_name in (None, "scan_shards") for r in r1.run_requests)
    from contam_assets.defs.data.runs import listing_request
    from contam_assets.runner import data_definitions, execute

    # the first step of each requested scan_shards run (or the run requested alone when no scan is due)
    done = execute(data_definitions(s), listing_request(), inst, log=lambda _: None)
    assert done.asset_materializations_for_node("pool_listing")[0].metadata["retired_files"].value == ["part-002.jsonl"]
    assert not (out / "mix" / "part-002.jsonl").exists()
    con = duckdb.connect(str(s.db_path), read_only=True)
    assert con.execute("select count(*) from shard_stats where shard = 'part-002.jsonl'").fetchone()[0] == 0
    assert con.execute("select count(*) from retired_shards where shard = 'part-002.jsonl'").fetchone()[0] == 1
    con.close()
