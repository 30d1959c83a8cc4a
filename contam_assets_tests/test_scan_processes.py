"""The local engine on several cores: one run's shards scanned by worker processes give the same tables, in the
same order, as the serial engine; a shard that raises or kills its worker fails alone."""

from __future__ import annotations

import dataclasses
import os

import dagster as dg
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from contam_assets.defs.data import assets as A
from contam_assets.defs.data.engine import ScanEngine, engine_from_env
from contam_assets.defs.resources import ContamDB
from contam_assets.rescan.pool_scan import WorkerDied, available_cpus, scan_in_processes
from contam_assets.store import artifacts
from contam_assets_tests.automation_helpers import (
    build_reference,
    instance,
    make_tasks_dir,
    matches,
    settings,
    stats,
    table,
    write_pool,
)

SHARDS = [f"part-{k:03d}.jsonl" for k in range(4)]


class DiesWhenRead:
    """A plan whose first look kills the worker process (as the OOM killer would)."""

    @property
    def mode(self):
        os._exit(3)


def _ranged_scan(s, inst, engine: ScanEngine) -> dict:
    inst.add_dynamic_partitions("shards", SHARDS)
    r = dg.materialize([A.shard_matches], instance=inst,
                       resources={"contam_settings": s, "contam_db": ContamDB(path=str(s.db_path)), "contam_scan_engine": engine},
                       tags={ASSET_PARTITION_RANGE_START_TAG: SHARDS[0], ASSET_PARTITION_RANGE_END_TAG: SHARDS[-1]})
    assert r.success
    md = r.asset_materializations_for_node("shard_matches")[0].metadata
    return {k: md[k].value for k in ("engine", "workers", "shards_full")}


def test_default_is_every_core_and_workers_are_configurable():
    assert engine_from_env({}).processes(64) == min(available_cpus(), 64)
    assert engine_from_env({"CONTAM_SCAN_WORKERS": "3"}).processes(64) == 3
    assert engine_from_env({"CONTAM_SCAN_WORKERS": "3"}).processes(1) == 1  # one shard: in the step's process
    assert engine_from_env({"CONTAM_SCAN_WORKERS": "1"}).describe(10) == "in-process"


def test_two_workers_write_the_tables_of_the_serial_engine(tmp_path, shared_data):
    pool, tasks = tmp_path / "pool", make_tasks_dir(tmp_path / "tasks")
    write_pool(pool, shared_data, n_shards=4, docs=30)
    runs = {}
    for name, workers in (("serial", 1), ("two", 2)):
        s = settings(tmp_path / name, pool, tasks, shared_data)
        inst = instance(tmp_path / f"home_{name}")
        build_reference(s, inst)
        runs[name] = (s, _ranged_scan(s, inst, ScanEngine(workers=workers)))
    (serial, md1), (two, md2) = runs["serial"], runs["two"]
    assert md1 == {"engine": "in-process", "workers": 1, "shards_full": 4}
    assert md2 == {"engine": "2 local processes", "workers": 2, "shards_full": 4}
    assert matches(two).height > 0 and matches(two)["flagged"].sum() > 0
    assert matches(two).equals(matches(serial))
    assert stats(two).equals(stats(serial))
    order = "select shard from shard_stats order by rowid"
    assert table(two, order).equals(table(serial, order))  # written in the same order
    assert {p.name for p in (two.out_path / "token_cache").iterdir()} == set(SHARDS)


def test_a_shard_that_raises_or_kills_its_worker_fails_alone(tmp_path, shared_data):
    pool, tasks = tmp_path / "pool", make_tasks_dir(tmp_path / "tasks")
    write_pool(pool, shared_data, n_shards=4, docs=12)
    s = settings(tmp_path / "out", pool, tasks, shared_data)
    inst = instance(tmp_path / "home")
    build_reference(s, inst)
    from contam_assets.defs.data.scan_jobs import plan_jobs
    from contam_assets.defs.resources import detect_config
    from contam_assets.rescan.plan import load_task_hashes

    cfg = detect_config(s)
    index, records, digest = artifacts.load_index(s.out_path)
    tasks_now = load_task_hashes(artifacts.index_dir(s.out_path, digest), records, cfg)
    jobs, _, failed = plan_jobs(s, SHARDS, cfg, digest, tasks_now, None, "auto", {})
    assert not failed and len(jobs) == 4
    jobs[1] = dataclasses.replace(jobs[1], plan=None)  # raises AttributeError in the worker
    jobs[2] = dataclasses.replace(jobs[2], plan=DiesWhenRead())
    got = list(scan_in_processes(jobs, index, records, 2))
    assert [j.shard for j, _ in got] == SHARDS  # every shard, in order
    outs = [o for _, o in got]
    assert isinstance(outs[1], AttributeError)
    assert isinstance(outs[2], WorkerDied)
    assert outs[0].stats["read"] == 12 and outs[3].stats["read"] == 12
