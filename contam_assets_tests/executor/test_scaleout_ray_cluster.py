"""A real two-node Ray cluster (docs/automation.md, "Multi-node Ray"): a head and a worker node started with
`ray start --block` exactly as the docs write them, a backfill of two shards through `dagster job execute` on it,
and the same backfill while the worker node is killed (SIGKILL of its whole process group) in the middle of a shard.

Both results equal an in-process `contam detect` of the same pool: matches, shard_stats, removals, mix line counts.
Nodes are stopped by their process group (never `ray stop`, which stops every Ray process of the machine).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import dagster as dg
import pytest

from contam_assets.runner import run_detect
from contam_assets.testing.s3_server import free_port, s3_client, s3_server
from contam_assets_tests.support.automation import (
    build_reference,
    instance,
    make_tasks_dir,
    settings,
    table,
    write_pool,
)
from contam_assets_tests.support.doc_commands import ROOT, command

DOC = "docs/automation.md"
BIN = Path(sys.executable).parent
SHARDS = ["web/part-000.jsonl.gz", "web/part-001.jsonl"]  # the range of the docs' backfill command

pytestmark = pytest.mark.skipif(not (BIN / "ray").exists() and shutil.which("ray") is None,
                                reason="the `ray` CLI is not installed (pip install 'ray[default]')")


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONTAM_", "DAGSTER_", "RAY_"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    # Ray workers are started by their raylet with its environment: they import this checkout's package
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    return {**env, "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
            "RAY_USAGE_STATS_ENABLED": "0", **extra}


def _bash(cmd: str, env: dict, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", cmd], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


class Node:
    """One `ray start --block` in its own process group: everything that node started dies with the group."""

    def __init__(self, cmd: str, env: dict, log: Path):
        self.log = log
        self.proc = subprocess.Popen(["bash", "-c", cmd], cwd=ROOT, env=env, stdout=open(log, "w"),
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def wait_started(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while "Ray runtime started" not in self.log.read_text():
            assert self.proc.poll() is None, f"ray start exited: {self.log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"ray start timed out: {self.log.read_text()[-3000:]}"
            time.sleep(0.5)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


def _pool(pool: Path, shared: Path, staging: Path) -> None:
    """Two shards named as the docs' range names them, one gzip-compressed."""
    write_pool(staging, shared, n_shards=2, docs=30)
    (pool / "web").mkdir(parents=True)
    with gzip.open(pool / SHARDS[0], "wb") as fh:
        fh.write((staging / "part-000.jsonl").read_bytes())
    shutil.copy(staging / "part-001.jsonl", pool / SHARDS[1])


def _tables(s) -> dict:
    """Every table the test compares, in a stable order, without ids and times that differ between runs."""
    mix = s.out_path / "mix"
    return {
        "matches": table(s, "select * exclude (record_id) from matches order by match_id"),
        "shard_stats": table(s, "select * exclude (seconds, index_digest) from shard_stats order by shard"),
        "removals": table(s, "select * from removals order by shard, line"),
        "mix_lines": {str(p.relative_to(mix)): len(gzip.open(p).read().splitlines() if p.suffix == ".gz"
                                                   else p.read_bytes().splitlines())
                      for p in sorted(mix.rglob("*")) if p.is_file()},
    }


def _remote_fp(tables: dict) -> dict:
    """The tables without shard_stats.shard_fingerprint: a remote object's is its size and ETag as listed, a local
    file's its size and a hash of its first and last MiB (the same bytes, another fingerprint)."""
    return {**tables, "shard_stats": tables["shard_stats"].drop("shard_fingerprint")}


def _assert_same(got: dict, want: dict) -> None:
    for name in ("matches", "shard_stats", "removals"):
        assert got[name].equals(want[name]), f"{name} differs:\n{got[name]}\n{want[name]}"
    assert got["mix_lines"] == want["mix_lines"]


def _materialization(home: Path) -> dict:
    inst = dg.DagsterInstance.local_temp(str(home))
    rec = inst.get_latest_materialization_event(dg.AssetKey("shard_matches"))
    inst.dispose()
    return {k: v.value for k, v in rec.asset_materialization.metadata.items()}


@pytest.fixture(scope="module")
def setup(tmp_path_factory, shared_data):
    """The head node (the docs' commands), the pool, and the in-process baseline (`contam detect`), run while the
    head starts."""
    tmp = tmp_path_factory.mktemp("raycluster")
    ray_dir = Path(tempfile.mkdtemp(prefix="cr", dir="/tmp"))  # Ray's socket paths must stay short
    with s3_server() as aws:  # an S3 server on loopback, its variables in every node's environment (the last test)
        env = _env(RAY_AUTH_MODE="token", CONTAM_RAY_DIR=str(ray_dir), RAY_AUTH_TOKEN_PATH=str(ray_dir / "auth_token"),
                   RAY_PORT=str(free_port()), RAY_CLIENT_PORT=str(free_port()), RAY_DASHBOARD_PORT=str(free_port()),
                   **aws)
        r = _bash(command(DOC, 'python -c "import secrets'), env)
        assert r.returncode == 0 and len((ray_dir / "auth_token").read_text().strip()) == 64, r.stderr
        head = Node(command(DOC, "ray start --head --block"), env, tmp / "head.log")
        try:
            pool, tasks = tmp / "pool", make_tasks_dir(tmp / "tasks")
            _pool(pool, shared_data, tmp / "staging")
            local = settings(tmp / "local", pool, tasks, shared_data)
            assert _detect(local, tmp / "home_local")["failed"] == {}
            want = _tables(local)
            assert want["matches"].height > 0 and want["removals"].height > 0
            head.wait_started()
            yield {"tmp": tmp, "pool": pool, "tasks": tasks, "shared": shared_data, "want": want, "env": env,
                   "ray_dir": ray_dir, "aws": aws}
        finally:
            head.kill()
            _kill_leftovers(ray_dir)
            shutil.rmtree(ray_dir, ignore_errors=True)


def _detect(s, home: Path) -> dict:
    """What `contam detect` does (runner.run_detect), in this process, scanning in-process, on its own Dagster home."""
    with mock.patch.dict(os.environ, {"CONTAM_SCAN_ENGINE": "local"}):
        return run_detect(s, instance(home), log=lambda line: None)


def _kill_leftovers(ray_dir: Path, grace: float = 10) -> None:
    """Ray worker processes run in sessions of their own and exit shortly after their raylet; any of this test's
    cluster (found by CONTAM_RAY_DIR in its environment) still there after `grace` seconds is killed."""
    mark = f"CONTAM_RAY_DIR={ray_dir}".encode()
    deadline = time.monotonic() + grace
    while True:
        ours = []
        for proc in Path("/proc").iterdir():
            try:
                if proc.name.isdigit() and mark in (proc / "environ").read_bytes().split(b"\0"):
                    ours.append(int(proc.name))
            except OSError:
                continue
        if not ours or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    for pid in ours:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _prepare(setup, name: str):
    """An output folder with its reference built and the shards as partitions (what the backfill needs)."""
    s = settings(setup["tmp"] / name, setup["pool"], setup["tasks"], setup["shared"])
    home = setup["tmp"] / f"home_{name}"
    inst = instance(home)
    build_reference(s, inst)
    inst.add_dynamic_partitions("shards", SHARDS)
    env = {**setup["env"], "DAGSTER_HOME": str(home), "CONTAM_OUT": s.out_dir, "CONTAM_POOL": str(setup["pool"]),
           "CONTAM_BENCHMARKS": str(setup["shared"]), "CONTAM_TASKS_DIR": str(setup["tasks"])}
    return s, home, env


def _finish_and_compare(setup, s, home: Path, env: dict) -> dict:
    """The backfill's rows equal the baseline's; `contam detect` then finds the shards current and writes the
    removals and the mix, which equal the baseline's too."""
    scanned = _tables(s)
    for name in ("matches", "shard_stats"):
        assert scanned[name].equals(setup["want"][name]), f"{name} after the Ray backfill differs"
    assert table(s, "select count(*) n, count(distinct match_id) d from matches").row(0) == (scanned["matches"].height,) * 2
    assert _detect(s, home)["failed"] == {}
    md = _materialization(home)  # detect's scan run (one ranged run, or the last shard's) found them scanned by Ray
    assert md["shards_current"] >= 1 and md["shards_full"] == 0 and md["shards_incremental"] == 0
    _assert_same(_tables(s), setup["want"])
    n, distinct = table(s, "select count(*) n, count(distinct (shard, line)) d from removals").row(0)
    assert n == distinct
    cache = s.out_path / "token_cache"  # one whole stream per shard, no temporary folder or Parquet part left
    assert sorted(str(p.parent.parent.relative_to(cache)) for p in cache.rglob("tokens.bin")) == sorted(SHARDS)
    assert sorted(p.name for p in cache.rglob("*") if p.is_file()) == ["docs.bin"] * 2 + ["meta.json"] * 2 + ["rejects.jsonl"] * 2 + ["tokens.bin"] * 2
    assert not [p for p in (s.out_path / "parts").rglob("*") if p.is_file()]
    return scanned


def _node_resources(env: dict) -> dict[str, set[str]]:
    """Ray node id -> its custom resources (live nodes only), asked of the cluster by a separate driver."""
    code = ("import json, os, ray; ray.init(address='127.0.0.1:' + os.environ['RAY_PORT'], log_to_driver=False); "
            "print('NODES ' + json.dumps({n['NodeID']: sorted(k for k in n['Resources'] if k.startswith('contam_')) "
            "for n in ray.nodes() if n['Alive']}))")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    return {k: set(v) for k, v in json.loads(next(l for l in r.stdout.splitlines() if l.startswith("NODES "))[6:]).items()}


def _wait_for_worker_node(env: dict, timeout: float = 120) -> None:
    """Until the cluster lists the worker node with its resources: "Ray runtime started" in its log comes before
    the head's scheduler knows it, and a run submitted in between puts both shards on the head."""
    deadline = time.monotonic() + timeout
    while not any("contam_worker" in r for r in _node_resources(env).values()):
        assert time.monotonic() < deadline, "the worker node never joined the cluster"
        time.sleep(0.5)


def test_backfill_on_two_ray_nodes_equals_in_process(setup):
    # as below: an attempt where Ray placed both shards on the head is made again on a fresh output folder
    for attempt in range(4):
        worker = Node(command(DOC, "ray start --block --address"), setup["env"], setup["tmp"] / f"worker-{attempt}.log")
        try:
            s, home, env = _prepare(setup, f"two_nodes{attempt}")  # while the worker node starts
            worker.wait_started()
            _wait_for_worker_node(setup["env"])
            r = _bash(command(DOC, "CONTAM_SCAN_ENGINE=ray CONTAM_RAY_ADDRESS=127.0.0.1:$RAY_PORT dagster job execute"), env)
            assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
            md = _materialization(home)
            resources = _node_resources(setup["env"])
        finally:
            worker.kill(signal.SIGINT)
        if len(md["ray_nodes"]) == 2:
            break
    assert md["shards_full"] == 2 and md["shard_retries"] == 0
    assert md["engine"] == "ray (Ray cluster at 127.0.0.1:" + setup["env"]["RAY_PORT"] + ")"
    ran_on = {frozenset(resources[node]): sorted(shards) for node, shards in md["ray_nodes"].items()}
    assert set(ran_on) == {frozenset({"contam_head"}), frozenset({"contam_worker"})}, ran_on  # one shard per node
    assert sorted(sum(ran_on.values(), [])) == sorted(SHARDS)
    _finish_and_compare(setup, s, home, env)


def test_worker_node_killed_mid_shard_loses_only_that_shard(setup):
    # Ray may still place both shards on the head (its scheduler's view of a node that just joined lags); such an
    # attempt never reaches the worker node, proves nothing either way, and is made again on a fresh output folder
    for attempt in range(4):
        held = setup["ray_dir"] / f"held{attempt}"
        worker = Node(command(DOC, "ray start --block --address"),
                      {**setup["env"], "CONTAM_FAULT": "scan", "CONTAM_FAULT_HOLD": str(held)},
                      setup["tmp"] / f"worker2-{attempt}.log")
        run = None
        try:
            s, home, env = _prepare(setup, f"node_killed{attempt}")  # while the worker node starts
            worker.wait_started()
            _wait_for_worker_node(setup["env"])
            run = subprocess.Popen(["bash", "-c", command(DOC, "CONTAM_SCAN_ENGINE=ray CONTAM_RAY_ADDRESS=127.0.0.1:$RAY_PORT dagster job execute")],
                                   cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            deadline = time.monotonic() + 240
            while not held.exists() and run.poll() is None:  # a worker process of the worker node is inside a shard's scan
                assert time.monotonic() < deadline, "no shard reached the worker node"
                time.sleep(0.2)
            if not held.exists():
                assert run.returncode == 0, run.stdout.read()[-4000:]  # both shards ran on the head: try again
                continue
            pid = int(held.read_text())
            worker.kill()  # kill -9 of the node: raylet, agents, ray start
            try:
                os.kill(pid, signal.SIGKILL)  # and the task's own worker process, if it outlived its raylet
            except ProcessLookupError:
                pass
            out, _ = run.communicate(timeout=300)
            break
        finally:
            worker.kill()
            if run is not None and run.poll() is None:
                run.kill()
    else:
        raise AssertionError("in 4 attempts Ray never placed a shard on the worker node")
    assert run.returncode == 0, out[-4000:]
    md = _materialization(home)
    assert md["shards_full"] == 2 and md["shard_retries"] == 1  # exactly the held shard, once
    assert len(md["ray_nodes"]) == 1  # both shards' rows came from the head node in the end
    assert "attempt 1 lost" in out and "submitting it again (retry 1 of 2)" in out
    _finish_and_compare(setup, s, home, env)


def _worker_sees(env: dict, path: Path) -> bool:
    """Whether a task placed on the worker node (its `contam_worker` resource) finds ``path``, asked by a separate
    driver."""
    code = ("import os, ray; ray.init(address='127.0.0.1:' + os.environ['RAY_PORT'], log_to_driver=False)\n"
            "def sees(p): return os.path.exists(p)\n"
            f"print('SEES', ray.get(ray.remote(resources={{'contam_worker': 1}})(sees).remote({str(path)!r})))")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    return next(line for line in r.stdout.splitlines() if line.startswith("SEES ")) == "SEES True"


def test_nodes_sharing_no_folder_read_their_shards_from_the_store(setup):
    """The pool in S3 (moto's server on loopback), the worker node in a mount namespace where the test's folder (the
    pool, every output and Dagster home) is an empty tmpfs: with CONTAM_RAY_SHARED_FOLDER=0 each task reads its
    shard from the store in place and returns its rows; the tables, removals and mix equal the in-process run's."""
    import shlex

    if subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("no mount namespaces on this machine (unshare -m): a node cannot be given a folder of its own")
    aws = setup["aws"]
    client = s3_client(aws)
    client.create_bucket(Bucket="contam-bucket")
    for f in sorted(p for p in setup["pool"].rglob("*") if p.is_file()):
        client.upload_file(str(f), "contam-bucket", f"pool/{f.relative_to(setup['pool']).as_posix()}")
    hidden = setup["tmp"]
    node_env = setup["env"]  # the store's variables included
    for attempt in range(4):
        inner = f"mount -t tmpfs tmpfs {shlex.quote(str(hidden))} && exec {command(DOC, 'ray start --block --address')}"
        worker = Node(f"unshare -m --propagation private bash -c {shlex.quote(inner)}", node_env,
                      Path(tempfile.mkdtemp(prefix="cr-log")) / f"worker3-{attempt}.log")
        try:
            s = settings(hidden / f"no_shared{attempt}", "s3://contam-bucket/pool", setup["tasks"], setup["shared"])
            home = hidden / f"home_no_shared{attempt}"
            inst = instance(home)
            build_reference(s, inst)
            inst.add_dynamic_partitions("shards", SHARDS)
            env = {**node_env, "DAGSTER_HOME": str(home), "CONTAM_OUT": s.out_dir, "CONTAM_POOL": s.pool_dir,
                   "CONTAM_BENCHMARKS": str(setup["shared"]), "CONTAM_TASKS_DIR": str(setup["tasks"])}
            worker.wait_started()
            _wait_for_worker_node(setup["env"])
            assert not _worker_sees(setup["env"], s.out_path)  # the node sees no output (and the pool is a URL)
            r = _bash(command(DOC, "CONTAM_SCAN_ENGINE=ray CONTAM_RAY_ADDRESS=127.0.0.1:$RAY_PORT "
                                   "CONTAM_RAY_SHARED_FOLDER=0"), env)
            assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
            md = _materialization(home)
        finally:
            worker.kill(signal.SIGINT)
        if len(md["ray_nodes"]) == 2:
            break
    else:
        raise AssertionError("in 4 attempts Ray never placed a shard on the worker node")
    assert md["shards_full"] == 2 and md["shard_retries"] == 0
    scanned = _remote_fp(_tables(s))
    want = _remote_fp(setup["want"])
    for name in ("matches", "shard_stats"):
        assert scanned[name].equals(want[name]), f"{name} from nodes sharing no folder differs"
    assert not [p for p in (s.out_path / "parts").rglob("*") if p.is_file()]  # the rows came back in the results
    assert not list((s.out_path / "token_cache").rglob("tokens.bin"))  # no cache the nodes could share
    # the mix reads the store in place: one worker, in this process, which has the store's variables (a worker
    # process forked before they were set here would not)
    with mock.patch.dict(os.environ, {**aws, "CONTAM_SCAN_WORKERS": "1"}):
        assert _detect(s, home)["failed"] == {}
    assert _materialization(home)["shards_current"] >= 1
    _assert_same(_remote_fp(_tables(s)), want)
    r = _bash(command(DOC, "CONTAM_SCAN_ENGINE=ray CONTAM_RAY_ADDRESS=127.0.0.1:$RAY_PORT CONTAM_RAY_SHARED_FOLDER=0"),
              {**env, "CONTAM_POOL": str(setup["pool"])})  # a local pool cannot be read by such nodes: one line
    assert r.returncode != 0 and "must be a URL they can read" in r.stdout + r.stderr
