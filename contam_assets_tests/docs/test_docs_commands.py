"""The Dagster commands of README.md and docs/automation.md, run exactly as written.

On a demo output folder (`contam demo`, as `./dev demo` makes it) and in the environment
of the README's `dagster dev` line: `dg check defs`, `dg list defs`, `dg dev` and
`dagster dev` load one code location named `contam_assets`; `dagster sensor start`
turns a sensor on where the daemon and the UI see it; the CLI backfills of shards and of
checkpoints run their runs to success through `dagster-daemon run`; the ranged
`dagster job execute`, `dagster schedule start` and `dagster instance concurrency set`
do what the docs say.  Ports: `DAGSTER_DG_DEV_PORT` / `DAGSTER_CLI_DEV_PORT` (click's
environment names of `--port`), so the commands stay as written.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.instance.ref import InstanceRef

from contam_assets.store import connect
from contam_assets.testing import model_tiny as mt
from contam_assets_tests.support.doc_commands import ROOT, command
from contam_assets_tests.support.review import free_port

README, AUTOMATION = "README.md", "docs/automation.md"
BIN = Path(sys.executable).parent


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONTAM_", "DAGSTER_"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return {**env, "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1", **extra}


def bash(cmd: str, env: dict, cwd: Path = ROOT, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """<root>/contam_out from `contam demo` (a small pool); <root>/pyproject.toml and <root>/contam_assets link to the
    project's, so the README's `$PWD/contam_out` lines run as written without touching the checkout's own contam_out."""
    root = tmp_path_factory.mktemp("docs")
    out = root / "contam_out"
    env = _env(DAGSTER_HOME=str(out / ".dagster_home"))
    r = bash(f"contam demo --out {out} --docs 180", env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    for name in ("pyproject.toml", "contam_assets"):  # a project folder whose contam_out is this demo's
        (root / name).symlink_to(ROOT / name)
    ckpts = out / "experiments" / "docs" / "checkpoints"
    for stage in ("step-1", "step-2"):
        mt.untrained_checkpoint(ckpts / stage)
    # OMP_NUM_THREADS=1: the tiny checkpoints' probes on one torch thread each (two runs at once on a busy 2-core
    # machine: on two threads each, greedy generation of 384 tokens took 23 s instead of 0.3 s)
    env = _env(DAGSTER_HOME=str(out / ".dagster_home"), CONTAM_OUT=str(out), CONTAM_POOL=str(out / "demo_pool"),
               CONTAM_PROBE_LIMIT="2", CONTAM_CHECKPOINT_SETTLE_S="0", OMP_NUM_THREADS="1")
    return {"root": root, "out": out, "env": env, "home": out / ".dagster_home"}


def _start(cmd: str, env: dict, cwd: Path, log: Path) -> subprocess.Popen:
    return subprocess.Popen(["bash", "-c", cmd], cwd=cwd, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def _graphql(port: int, query: str) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", data=json.dumps({"query": query}).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def _wait_loaded(port: int, proc: subprocess.Popen, log: Path, timeout: float = 240) -> dict:
    q = "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus } } } assetNodes { assetKey { path } } }"
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            data = _graphql(port, q)["data"]
            entries = data["workspaceOrError"]["locationEntries"]
            if entries and all(e["loadStatus"] == "LOADED" for e in entries):
                return data
        except (OSError, KeyError, TypeError, ValueError):
            pass
        time.sleep(2)
    raise AssertionError("the webserver did not load the code location:\n" + log.read_text()[-3000:])


def test_the_demo_runs_named_jobs_on_an_instance_without_telemetry(demo):
    inst = dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(demo["home"])))
    jobs = {r.job_name for r in inst.get_runs()}
    assert jobs == {"build_reference", "scan_shards", "apply_reviews", "write_mix", "publish_outputs"}, jobs
    assert "enabled: false" in (demo["home"] / "dagster.yaml").read_text()


def test_dg_check_and_list_defs(demo):
    r = bash(command(README, "dg check defs"), demo["env"], timeout=300)
    assert r.returncode == 0 and "All definitions loaded successfully" in r.stdout + r.stderr, r.stdout + r.stderr
    r = bash(command(README, "dg list defs"), {**demo["env"], "COLUMNS": "250"}, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    for name in ("removal_report", "decontaminated_mix", "shard_matches", "contam_automation_sensor", "scan_shards"):
        assert name in r.stdout, name


@pytest.mark.parametrize("start", ["DAGSTER_HOME=$PWD/contam_out/.dagster_home CONTAM_OUT=$PWD/contam_out CONTAM_POOL=$PWD/contam_out/demo_pool dg dev",
                                   "DAGSTER_HOME=$PWD/contam_out/.dagster_home CONTAM_OUT=$PWD/contam_out CONTAM_POOL=$PWD/contam_out/demo_pool dagster dev"])
def test_dev_servers_load_the_one_code_location(demo, start, tmp_path):
    cmd = command(README, start)
    port = free_port()
    env = {k: v for k, v in demo["env"].items() if not k.startswith(("CONTAM_", "DAGSTER_"))}
    env |= {"DAGSTER_DG_DEV_PORT": str(port), "DAGSTER_CLI_DEV_PORT": str(port)}
    log = tmp_path / "dev.log"
    proc = _start(cmd, env, demo["root"], log)
    try:
        data = _wait_loaded(port, proc, log)
    finally:
        _stop(proc)
    assert [e["name"] for e in data["workspaceOrError"]["locationEntries"]] == ["contam_assets"]
    keys = {"/".join(n["assetKey"]["path"]) for n in data["assetNodes"]}
    assert {"removals", "removal_report", "decontaminated_mix", "evaluation_report"} <= keys
    # `dagster dev` itself says it is superseded by `dg dev` (Dagster's own notice); nothing else may warn
    lines = [x for x in log.read_text().splitlines() if "Warning" in x and "`dev_command` is superseded" not in x]
    assert not lines, lines


def _runs_done(inst: dg.DagsterInstance, tags: dict, n: int, timeout: float = 420) -> list:
    deadline = time.time() + timeout
    while time.time() < deadline:
        runs = inst.get_runs(filters=dg.RunsFilter(tags=tags))
        if len(runs) >= n and all(r.is_finished for r in runs):
            return runs
        time.sleep(0.5)
    raise AssertionError(f"runs {tags} not finished: {[(r.job_name, r.status) for r in inst.get_runs(filters=dg.RunsFilter(tags=tags))]}")


QUEUE_EVERY_SECOND = """run_coordinator:
  module: dagster.core.run_coordinator
  class: QueuedRunCoordinator
  config:
    dequeue_interval_seconds: 1
"""


def test_sensor_start_backfills_and_cli_commands_through_the_daemon(demo, tmp_path):
    env, home = demo["env"], demo["home"]
    inst = dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home)))
    inst.add_dynamic_partitions("checkpoints", ["docs/step-1", "docs/step-2"])  # what new_checkpoints_sensor adds
    log = tmp_path / "daemon.log"
    # the demo's instance (telemetry off, Dagster's default queued runs) with the queue looked at every second, not
    # every 5 s: the daemon's tick is no part of what is tested here; the file is restored after the daemon
    cfg = home / "dagster.yaml"
    written = cfg.read_text()
    cfg.write_text(written + QUEUE_EVERY_SECOND)
    daemon = _start(command(AUTOMATION, "dagster-daemon run"), env, ROOT, log)
    try:
        r = bash(command(AUTOMATION, "dagster sensor start new_tasks_sensor"), env)
        assert r.returncode == 0, r.stdout + r.stderr
        states = {s.instigator_name: s for s in inst.all_instigator_state()}
        sensor = states["new_tasks_sensor"]
        assert sensor.status.value == "RUNNING"
        assert sensor.origin.repository_origin.code_location_origin.location_name == "contam_assets"
        r = bash(command(AUTOMATION, "dagster schedule start nightly_rescan_schedule"), env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert {s.instigator_name: s for s in inst.all_instigator_state()}["nightly_rescan_schedule"].status.value == "RUNNING"

        backfill = bash(command(AUTOMATION, "dagster job backfill -j scan_shards"), env)
        assert backfill.returncode == 0, backfill.stdout + backfill.stderr
        bid = re.search(r"Launched backfill job `([^`]+)`", backfill.stdout).group(1)
        runs = _runs_done(inst, {"dagster/backfill": bid}, 2)
        assert sorted(r.tags["dagster/partition"] for r in runs) == ["web/part-000.jsonl.gz", "web/part-001.jsonl"]
        assert {r.status.value for r in runs} == {"SUCCESS"}, log.read_text()[-3000:]
        assert {r.remote_job_origin.location_name for r in runs} == {"contam_assets"}

        probes = bash(command(AUTOMATION, "dagster job backfill -j checkpoint_probes"), env)
        assert probes.returncode == 0, probes.stdout + probes.stderr
        bid = re.search(r"Launched backfill job `([^`]+)`", probes.stdout).group(1)
        runs = _runs_done(inst, {"dagster/backfill": bid}, 2)
        assert sorted(r.tags["dagster/partition"] for r in runs) == ["docs/step-1", "docs/step-2"]
        assert {r.status.value for r in runs} == {"SUCCESS"}, log.read_text()[-3000:]

        launched = bash(command(AUTOMATION, "dagster job launch -j scan_shards"), env)
        assert launched.returncode == 0, launched.stdout + launched.stderr
        ranged = _runs_done(inst, {"dagster/asset_partition_range_start": "web/part-000.jsonl.gz"}, 1)
        assert [r.status.value for r in ranged] == ["SUCCESS"], log.read_text()[-3000:]

        # the daemon ticks the sensor started from the CLI (it evaluates it under the same location)
        deadline = time.time() + 120
        while not inst.get_ticks(sensor.instigator_origin_id, sensor.selector_id) and time.time() < deadline:
            time.sleep(0.5)
        assert inst.get_ticks(sensor.instigator_origin_id, sensor.selector_id), log.read_text()[-3000:]
    finally:
        _stop(daemon)
        cfg.write_text(written)
    with connect(demo["out"] / "contam.duckdb", read_only=True) as con:
        metrics = con.execute("""select checkpoint, count(*) from probe_metrics where probe = 'recitation_rate'
                                 group by 1 order by 1""").fetchall()
    assert [m[0] for m in metrics] == ["docs/step-1", "docs/step-2"] and all(n > 0 for _, n in metrics)
    # no GSM8K in the embedded default: the perplexity probe skipped, its check says why, nothing materialized
    assert inst.get_latest_materialization_event(dg.AssetKey("ppl_probe")) is None
    check = inst.event_log_storage.get_latest_asset_check_execution_by_key(
        [dg.AssetCheckKey(dg.AssetKey("ppl_probe"), "inputs_present")])
    assert check[dg.AssetCheckKey(dg.AssetKey("ppl_probe"), "inputs_present")].status.value == "FAILED"

    r = bash(command(AUTOMATION, "dagster job execute -m contam_assets.definitions -j scan_shards"), env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    ranged = inst.get_runs(filters=dg.RunsFilter(job_name="scan_shards",
                                                 tags={"dagster/asset_partition_range_start": "web/part-000.jsonl.gz"}))
    assert [x.status.value for x in ranged] == ["SUCCESS", "SUCCESS"]  # this one and the launched one
    r = bash(command(AUTOMATION, "dagster instance concurrency set contam_scan"), env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert inst.event_log_storage.get_concurrency_info("contam_scan").slot_count == 8
