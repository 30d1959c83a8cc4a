"""Concurrent shard runs (separate processes) lose no rows and never fail on DuckDB's lock; a partition
range runs from the `dagster` CLI as one grouped run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import dagster as dg
import pytest

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

SHARDS = [f"part-{k:03d}.jsonl" for k in range(4)]

WORKER = textwrap.dedent("""
    import sys, dagster as dg
    from contam_assets.defs.data import assets as A
    from contam_assets.defs.data.engine import engine_from_env
    from contam_assets.defs.resources import ContamDB, ContamSettings
    s = ContamSettings(out_dir=sys.argv[2], pool_dir=sys.argv[3], tasks_dir=sys.argv[4], benchmarks_dir=sys.argv[5])
    r = dg.materialize([A.shard_matches], partition_key=sys.argv[1], instance=dg.DagsterInstance.get(),
                       resources={"contam_settings": s, "contam_db": ContamDB(path=str(s.db_path)),
                                  "contam_scan_engine": engine_from_env()})
    sys.exit(0 if r.success else 1)
""")


@pytest.fixture(scope="module")
def world(tmp_path_factory, shared_data):
    root = tmp_path_factory.mktemp("concurrency")
    pool, tasks = root / "pool", make_tasks_dir(root / "tasks")
    write_pool(pool, shared_data, n_shards=4, docs=30)
    seq = settings(root / "seq", pool, tasks, shared_data)
    inst = instance(root / "home_seq")
    build_reference(seq, inst)
    scan(seq, inst, SHARDS)
    return dict(root=root, pool=pool, tasks=tasks, seq=seq, inst=inst, shared=shared_data)


def _run_parallel(s, home, tasks, shared):
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, shard, s.out_dir, s.pool_dir, str(tasks), str(shared)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for shard in SHARDS]
    outs = [p.communicate(timeout=600)[0].decode(errors="replace") for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n\n".join(o[-3000:] for o in outs)


def test_partition_range_runs_from_the_dagster_cli(world, tmp_path):
    """`dagster job execute -j scan_shards` with a partition range: one run scans the range (grouped)."""
    seq = world["seq"]
    out = tmp_path / "cli"
    cli = settings(out, world["pool"], world["tasks"], world["shared"])
    home = tmp_path / "home"
    inst = instance(home)
    build_reference(cli, inst)
    inst.add_dynamic_partitions("shards", SHARDS)
    env = {**os.environ, "DAGSTER_HOME": str(home), "CONTAM_OUT": str(out), "CONTAM_POOL": str(world["pool"]),
           "CONTAM_TASKS_DIR": str(world["tasks"]), "CONTAM_BENCHMARKS": str(world["shared"]), "CONTAM_TASKS": ""}
    tags = {"dagster/asset_partition_range_start": SHARDS[1], "dagster/asset_partition_range_end": SHARDS[3]}
    dagster = shutil.which("dagster", path=os.path.dirname(sys.executable)) or "dagster"
    run_config = tmp_path / "run.yaml"  # the data jobs' default, said outright (a run may also choose multiprocess)
    run_config.write_text(json.dumps({"execution": {"config": {"in_process": {}}}}))
    proc = subprocess.run([dagster, "job", "execute", "-m", "contam_assets.definitions", "-j", "scan_shards",
                           "--tags", json.dumps(tags), "-c", str(run_config)], env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    runs = inst.get_runs()
    scan_runs = [r for r in runs if r.job_name == "scan_shards"]
    assert len(scan_runs) == 1 and scan_runs[0].status.value == "SUCCESS"
    done = table(cli, "select shard from shard_stats order by shard")["shard"].to_list()
    assert done == SHARDS[1:]
    assert matches(cli).equals(matches(seq, f"shard in ('{SHARDS[1]}', '{SHARDS[2]}', '{SHARDS[3]}')"))
    # every partition of the range is recorded as materialized
    mats = inst.fetch_materializations(dg.AssetKey("shard_matches"), limit=10).records
    assert sorted(r.partition_key for r in mats) == SHARDS[1:]


def test_four_concurrent_shard_runs_hold_exactly_the_union_of_their_rows(world):
    root, seq = world["root"], world["seq"]
    par = settings(root / "par", world["pool"], world["tasks"], world["shared"])
    inst = instance(root / "home_par")
    build_reference(par, inst)
    inst.add_dynamic_partitions("shards", SHARDS)
    _run_parallel(par, root / "home_par", world["tasks"], world["shared"])
    assert matches(par).equals(matches(seq)) and matches(par).height > 0
    assert stats(par).equals(stats(seq))
    assert table(par, "select count(*) n, count(distinct match_id) d from matches").row(0) == (matches(seq).height,) * 2
    assert table(par, "select count(*) n from shard_scans")["n"][0] == 4
    # the same four runs again, now incremental after a task was added, still in parallel
    add_mbpp(world["tasks"])
    try:
        build_reference(par, inst)
        _run_parallel(par, root / "home_par", world["tasks"], world["shared"])
        build_reference(seq, world["inst"])  # the same change, one shard after another
        scan(seq, world["inst"], SHARDS)
        assert matches(par).filter(matches(par)["task"] == "mbpp").height > 0
        assert matches(par).equals(matches(seq))
        assert stats(par).equals(stats(seq))
        assert table(par, "select mode, count(*) n from shard_scans group by 1")["mode"].to_list() == ["incremental"]
    finally:
        (world["tasks"] / "mbpp.toml").unlink()
