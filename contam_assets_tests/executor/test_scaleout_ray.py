"""Scale-out: one run over several shards fans out to a local Ray cluster (dagster-ray's LocalRay, started
for the run, several worker processes, loopback only); the tables equal the single-process result."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest

from contam_assets.defs.data.engine import RayScanEngine, ScanEngine, engine_from_env
from contam_assets_tests.support.automation import (
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

RAY_RUN = textwrap.dedent("""
    import json, sys, dagster as dg
    from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG
    from contam_assets.defs.data import assets as A
    from contam_assets.defs.data.engine import engine_from_env
    from contam_assets.defs.resources import ContamDB, ContamSettings
    s = ContamSettings(out_dir=sys.argv[1], pool_dir=sys.argv[2], tasks_dir=sys.argv[3], benchmarks_dir=sys.argv[4])
    r = dg.materialize([A.shard_matches], instance=dg.DagsterInstance.get(),
                       resources={"contam_settings": s, "contam_db": ContamDB(path=str(s.db_path)),
                                  "contam_scan_engine": engine_from_env()},
                       tags={ASSET_PARTITION_RANGE_START_TAG: sys.argv[5], ASSET_PARTITION_RANGE_END_TAG: sys.argv[6]})
    md = r.asset_materializations_for_node("shard_matches")[0].metadata
    print("RESULT " + json.dumps({k: md[k].value for k in ("engine", "workers", "shards_full")}))
    sys.exit(0 if r.success else 1)
""")


def test_engine_is_chosen_by_environment():
    assert type(engine_from_env({})) is ScanEngine
    ray_engine = engine_from_env({"CONTAM_SCAN_ENGINE": "ray", "CONTAM_RAY_NUM_CPUS": "2"})
    assert isinstance(ray_engine, RayScanEngine) and ray_engine.ray_cluster.ray_init_options["num_cpus"] == 2
    remote = engine_from_env({"CONTAM_SCAN_ENGINE": "ray", "CONTAM_RAY_ADDRESS": "ray://head.ray.svc:10001"})
    assert remote.ray_cluster.ray_address == "ray://head.ray.svc:10001"
    gcs = engine_from_env({"CONTAM_SCAN_ENGINE": "ray", "CONTAM_RAY_ADDRESS": "127.0.0.1:6380", "CONTAM_RAY_SHARD_RETRIES": "3"})
    assert gcs.ray_cluster.ray_address == "127.0.0.1:6380" and gcs.shard_retries == 3 and remote.shard_retries == 2
    assert engine_from_env({"CONTAM_TOKEN_CACHE": "off"}).cache_root(tempfile.gettempdir()) is None
    with pytest.raises(ValueError):
        engine_from_env({"CONTAM_SCAN_ENGINE": "spark"})


def test_multi_shard_scan_on_a_local_ray_cluster_equals_single_process(tmp_path, shared_data):
    pool, tasks = tmp_path / "pool", make_tasks_dir(tmp_path / "tasks")
    write_pool(pool, shared_data, n_shards=4, docs=30)
    local = settings(tmp_path / "local", pool, tasks, shared_data)
    inst = instance(tmp_path / "home_local")
    build_reference(local, inst)
    scan(local, inst, SHARDS)

    ray_out = settings(tmp_path / "ray", pool, tasks, shared_data)
    home = tmp_path / "home_ray"
    inst_ray = instance(home)
    build_reference(ray_out, inst_ray)
    inst_ray.add_dynamic_partitions("shards", SHARDS)
    ray_tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # Ray's socket paths must stay short
    env = {**os.environ, "DAGSTER_HOME": str(home), "CONTAM_SCAN_ENGINE": "ray", "CONTAM_RAY_NUM_CPUS": "3",
           "CONTAM_RAY_TEMP_DIR": ray_tmp, "RAY_USAGE_STATS_ENABLED": "0"}
    try:
        proc = subprocess.run([sys.executable, "-c", RAY_RUN, ray_out.out_dir, str(pool), str(tasks), str(shared_data),
                               SHARDS[0], SHARDS[-1]], env=env, capture_output=True, text=True, timeout=600)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    result = json.loads(next(l for l in proc.stdout.splitlines() if l.startswith("RESULT "))[7:])
    assert result["engine"] == "ray (LocalRay)" and result["shards_full"] == 4
    # Ray tasks run in its worker processes, never the driver; on a loaded machine one worker may take all four
    assert 1 <= result["workers"] <= 3
    assert matches(ray_out).height > 0
    assert matches(ray_out).equals(matches(local))
    assert stats(ray_out).equals(stats(local))
    assert table(ray_out, "select count(*) n from shard_scans")["n"][0] == 4
    assert {p.name for p in (ray_out.out_path / "token_cache").iterdir()} == set(SHARDS)  # workers cached the token streams
