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
from contam_assets.executor.pool_scan import WorkerDied, available_cpus, scan_in_processes
from contam_assets.store import artifacts
from contam_assets_tests.support.automation import (
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
    # a loaded machine may let one of the two processes take all four shards before the other starts
    assert md2.pop("workers") in (1, 2)
    assert md2 == {"engine": "2 local processes", "shards_full": 4}
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
    from contam_assets.defs.data.scan_plan import plan_work
    from contam_assets.defs.resources import detect_config
    from contam_assets.rescan.plan import load_task_hashes

    cfg = detect_config(s)
    index, records, digest = artifacts.load_index(s.out_path)
    tasks_now = load_task_hashes(artifacts.index_dir(s.out_path, digest), records, cfg)
    jobs, _, failed = plan_work(s, SHARDS, cfg, digest, tasks_now, None, "auto", {})
    assert not failed and len(jobs) == 4
    jobs[1] = dataclasses.replace(jobs[1], plan=None)  # raises AttributeError in the worker
    jobs[2] = dataclasses.replace(jobs[2], plan=DiesWhenRead())
    got = list(scan_in_processes(jobs, index, records, 2))
    assert [j.shard for j, _ in got] == SHARDS  # every shard, in order
    outs = [o for _, o in got]
    assert isinstance(outs[1], AttributeError)
    assert isinstance(outs[2], WorkerDied)
    assert outs[0].stats["read"] == 12 and outs[3].stats["read"] == 12


def test_outcomes_written_in_one_batch_equal_one_write_each_and_a_bad_one_fails_alone(tmp_path, shared_data):
    from contam_assets import store
    from contam_assets.defs.data.scan_plan import plan_work
    from contam_assets.defs.resources import detect_config
    from contam_assets.detector.matches import Reference
    from contam_assets.executor.shard_work import run_shard_work
    from contam_assets.rescan.outcomes import OutcomeWriter
    from contam_assets.rescan.plan import load_task_hashes
    from contam_assets.rescan.state import write_outcome

    pool, tasks = tmp_path / "pool", make_tasks_dir(tmp_path / "tasks")
    write_pool(pool, shared_data, n_shards=4, docs=20)
    got = {}
    for name in ("one_each", "batched"):
        s = settings(tmp_path / name, pool, tasks, shared_data)
        build_reference(s, instance(tmp_path / f"home_{name}"))
        cfg = detect_config(s)
        index, records, digest = artifacts.load_index(s.out_path)
        tasks_now = load_task_hashes(artifacts.index_dir(s.out_path, digest), records, cfg)
        jobs, sigs, _ = plan_work(s, SHARDS, cfg, digest, tasks_now, None, "auto", {})
        outs = [(job, run_shard_work(job, index, Reference(records))) for job in jobs]
        kw = dict(tasks_now=tasks_now, digest=digest, scan_config="cfg", records=records)
        if name == "one_each":
            for job, out in outs:
                with store.connect(s.db_path) as con:
                    write_outcome(con, out, size=sigs[job.shard][0], mtime_ns=sigs[job.shard][1], **kw)
        else:
            outs[2][1].stats["read"] = "not a number"  # this shard's rows cannot be written
            seen = []
            w = OutcomeWriter(lambda **a: store.connect(s.db_path, **a), sigs, lambda j, o, st: seen.append((j.shard, o, st)),
                              flush_shards=10, flush_seconds=1e9, **kw)
            for job, out in outs:
                w.add(job, out)
            assert w.flushes == 0  # nothing written until the batch is flushed
            w.flush()
            assert [x[0] for x in seen] == SHARDS  # every shard reported, in order
            assert isinstance(seen[2][1], RuntimeError) and "writing its rows" in str(seen[2][1])
            assert all(x[2] and x[2][0]["shard"] == x[0] for i, x in enumerate(seen) if i != 2)
        got[name] = s
    one, batched = got["one_each"], got["batched"]
    keep = f"shard <> '{SHARDS[2]}'"
    assert matches(batched).height > 0
    assert matches(batched).equals(matches(one, keep))
    for sql in ("select * exclude (seconds, index_digest) from shard_stats where {} order by rowid",
                "select * exclude (scanned_at) from shard_scans where {} order by rowid",
                "select * from removals where {} order by shard, line"):  # a group by: its row order is its own
        assert table(batched, sql.format("true")).equals(table(one, sql.format(keep))), sql


def _rows(o):
    """An outcome's match rows: in memory, or in its Parquet part."""
    import polars as pl

    return o.matches if o.matches is not None else pl.read_parquet(o.matches_path) if o.matches_path else None


def _same(a, b) -> bool:
    """Two outcomes of one shard hold the same rows and counters (not the same worker or seconds)."""
    drop = {"seconds"}
    ra, rb = _rows(a), _rows(b)
    return (((ra is None and rb is None) or ra.equals(rb)) and a.n_matches == b.n_matches
            and {k: v for k, v in a.stats.items() if k not in drop} == {k: v for k, v in b.stats.items() if k not in drop})


def test_workers_read_the_index_from_its_folder_and_one_that_holds_another_fails_each_shard(tmp_path, shared_data):
    """`source`: each worker reads the index and records from the index folder instead of receiving them pickled
    through its pipe; the outcomes are those of the pickled hand-over.  A folder that cannot be read, or holds another
    index than the step's, fails every shard with the reason, and the pool goes on."""
    from contam_assets.defs.data.scan_plan import plan_work
    from contam_assets.defs.resources import detect_config
    from contam_assets.detector.index_build import build_index
    from contam_assets.rescan.plan import load_task_hashes

    pool, tasks = tmp_path / "pool", make_tasks_dir(tmp_path / "tasks")
    write_pool(pool, shared_data, n_shards=4, docs=30)
    s = settings(tmp_path / "out", pool, tasks, shared_data)
    build_reference(s, instance(tmp_path / "home"))
    cfg = detect_config(s)
    index, records, digest = artifacts.load_index(s.out_path)
    folder = artifacts.index_dir(s.out_path, digest)
    jobs, _, _ = plan_work(s, SHARDS, cfg, digest, load_task_hashes(folder, records, cfg), None, "auto", {})
    piped = list(scan_in_processes(jobs, index, records, 2))
    read = list(scan_in_processes(jobs, index, records, 2, source=folder))
    assert [j.shard for j, _ in read] == SHARDS
    assert sum(_rows(o).height for _, o in read if _rows(o) is not None) > 0
    assert all(_same(a, b) for (_, a), (_, b) in zip(piped, read, strict=True))

    from contam_assets.executor import pool_scan

    shape = pool_scan.fingerprint(index, records)
    try:  # in this process, as a worker starts: the step's own tables are kept on the index it reads
        pool_scan._init_from(str(folder), {"_record_max_idf": index.record_max_idf()}, shape)
        assert "error" not in pool_scan._WORKER
        assert pool_scan._WORKER["index"].__dict__["_record_max_idf"] is index.record_max_idf()
        assert pool_scan._WORKER["records"].equals(records)
    finally:
        pool_scan._WORKER.clear()

    other = artifacts.save_index(tmp_path / "other", "x", records.head(50), build_index(records.head(50), cfg))
    same_counts = artifacts.save_index(tmp_path / "same", "y", records, dataclasses.replace(index, config_json='{"n": 9}'))
    for bad, why in ((tmp_path / "missing", "FileNotFoundError"), (other, "holds another index than the step's"),
                     (same_counts, "or other contents")):
        got = list(scan_in_processes(jobs, index, records, 2, source=bad))
        assert [j.shard for j, _ in got] == SHARDS
        assert all(isinstance(o, RuntimeError) and f"could not read the index at {bad}" in str(o) and why in str(o)
                   for _, o in got), got


WARM = """
import json, multiprocessing.forkserver as fs, os, sys
from contam_assets.executor.processes import WORKER_MODULES, start_pool, warm_forkserver
env = json.loads(sys.argv[1])
warmed = warm_forkserver(env)
pid = None
if warmed:
    from contam_assets.executor.pool_scan import loaded_kernels as loaded
    pool = start_pool(1, ["contam_assets.executor.mix"])  # a pool started later uses the warm server
    worker = pool.submit(os.getppid).result()
    kernels = pool.submit(loaded).result()  # before the worker ran any of them
    pool.shutdown()
    cmd = open(f"/proc/{worker}/cmdline", "rb").read().decode().split("\\0")
    print(json.dumps({"warmed": True, "server": worker, "cmd": " ".join(cmd), "modules": WORKER_MODULES,
                      "kernels": kernels, "here": loaded()}))
elif env.get("COLD"):  # a server that was not warmed: its workers load the kernels at their first call
    from contam_assets.executor.pool_scan import loaded_kernels
    pool = start_pool(1, ["contam_assets.executor.mix"])
    print(json.dumps({"warmed": False, "kernels": pool.submit(loaded_kernels).result()}))
    pool.shutdown()
else:
    print(json.dumps({"warmed": False, "started": fs._forkserver._forkserver_pid is not None}))
"""


def test_the_forkserver_is_warmed_with_every_worker_module_only_where_local_pools_start(tmp_path):
    """`contam detect` starts the forkserver first, preloading the modules of every pool (scan, mix, tokenizing
    ahead) and the compiled steps; a pool started later forks from it.  One worker, or Ray, starts no server."""
    import json
    import subprocess
    import sys

    def warm(env: dict) -> dict:
        out = subprocess.run([sys.executable, "-c", WARM, json.dumps(env)], capture_output=True, text=True, check=True,
                             timeout=120, env={**{k: v for k, v in os.environ.items() if k != "NUMBA_DISABLE_JIT"},
                                               "CONTAM_COMPILED": "on", **env, "PYTHONPATH": os.getcwd()})
        return json.loads(out.stdout.strip().splitlines()[-1])

    got = warm({"CONTAM_SCAN_WORKERS": "2"})
    assert got["warmed"] and "multiprocessing.forkserver" in got["cmd"]
    assert all(m in got["cmd"] for m in got["modules"])  # the server preloaded every worker module
    assert {"contam_assets.executor.pool_scan", "contam_assets.executor.mix", "contam_assets.executor.ahead"} <= set(got["modules"])
    # the compiled steps were loaded in the server (preload.py): a worker holds them before its first call; the
    # process that started the server never ran them, nor does a worker of a server started cold
    assert got["kernels"] and all(v >= 1 for v in got["kernels"].values()), got["kernels"]
    assert set(got["here"].values()) == {0}
    cold = warm({"CONTAM_SCAN_WORKERS": "1", "COLD": "1"})
    assert set(cold["kernels"]) == set(got["kernels"]) and set(cold["kernels"].values()) == {0}
    off = warm({"CONTAM_SCAN_WORKERS": "2", "CONTAM_COMPILED": "off"})
    assert off["warmed"] and set(off["kernels"].values()) == {0}  # the plain paths: nothing compiled is loaded
    for env in ({"CONTAM_SCAN_WORKERS": "1"}, {"CONTAM_SCAN_WORKERS": "2", "CONTAM_SCAN_ENGINE": "ray"}):
        assert warm(env) == {"warmed": False, "started": False}, env


def test_a_preload_that_fails_returns_false_instead_of_ending_the_forkserver(monkeypatch):
    """The forkserver imports preload.py before any fork: an error there (a tokenizer that cannot load) must not
    raise, or every pool of the run would lose its server; the workers then load what they need themselves."""
    from contam_assets.detector import tokenize
    from contam_assets.executor import preload

    def broken(*_a, **_k):
        raise OSError("no vocabulary file")

    monkeypatch.setenv("CONTAM_COMPILED", "on")
    monkeypatch.setattr(tokenize, "get_tokenizer", broken)
    assert preload.warm() is False
    monkeypatch.undo()
    assert preload.warm() is True  # the same call with the tokenizer back
