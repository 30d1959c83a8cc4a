"""The tracker sends each report version exactly once: concurrent runs, kill -9 mid-send, changed reports.

Real ``contam evaluate`` processes and real offline wandb runs; what was
sent is read back from the run folders with ``wandb leet inspect``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from contam_assets import store
from contam_assets.evaluation.checkpoint_report import evaluate, flatten_numbers
from contam_assets.evaluation.config import load_config
from contam_assets.evaluation.tracker import read_marker, run_id_for
from contam_assets.testing.experiments import add_checkpoint, gsm8k_rows, write_jsonl, write_probe_metrics

PROJECT = "contam-evals"
CHECKPOINTS = [("leaky", "step-000100", 100), ("leaky", "step-000200", 200), ("clean", "step-000100", 100),
               ("clean", "step-000200", 200)]


@pytest.fixture
def setup(tmp_path, shared_data):
    exp = tmp_path / "out" / "experiments"
    rows = gsm8k_rows(shared_data)
    write_jsonl(exp / "leaky" / "data" / "train.jsonl", rows[:8] + [{"text": "other"}])
    write_jsonl(exp / "clean" / "data" / "train.jsonl", [{"text": "nothing of the benchmark"}])
    for e, stage, step in CHECKPOINTS:
        add_checkpoint(exp, e, stage, step, recipe=f"{e}-mix")
    db = tmp_path / "out" / "contam.duckdb"
    write_probe_metrics(db, [(f"{e}/{s}", "ppl_probe", "loss/gsm8k-test", step / 1000) for e, s, step in CHECKPOINTS])
    config = tmp_path / "evaluation.json"
    config.write_text(json.dumps({
        "benchmarks": [{"name": "gsm8k-test", "path": str(shared_data / "gsm8k_test.jsonl"), "limit": 50}],
        "tracker": {"enabled": True, "project": PROJECT, "mode": "offline"}}))
    env = dict(os.environ, WANDB_MODE="offline", CONTAM_OUT=str(tmp_path / "out"))
    for name in ("WANDB_DATA_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_ARTIFACT_DIR"):
        env[name] = str(tmp_path / "wandb-home" / name.lower())
    env.pop("WANDB_DIR", None)
    # a wandb service started by an earlier test in this process would be shared by the children (wandb
    # passes WANDB_SERVICE on), and would keep the stream of a killed child's run open: "run ID is in use"
    env.pop("WANDB_SERVICE", None)
    return exp, db, config, env


def _evaluate(setup, *keys: str, wait: bool = True):
    exp, db, config, env = setup
    cmd = [sys.executable, "-m", "contam_assets.cli", "evaluate", *keys, "--config", str(config),
           "--experiments", str(exp), "--db", str(db)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if not wait:
        return proc
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    return out


def _runs(exp: Path) -> list[Path]:
    return sorted((exp / "wandb" / "wandb").glob("offline-run-*"))


def _inspect(run_dir: Path) -> dict:
    proc = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--summary", "--json", str(run_dir)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _report(exp: Path, experiment: str, stage: str) -> tuple[Path, dict]:
    path = exp / experiment / "eval" / stage / "report.json"
    return path, json.loads(path.read_text())


def test_two_concurrent_evaluates_send_each_report_once(setup):
    exp = setup[0]
    first, second = _evaluate(setup, wait=False), _evaluate(setup, wait=False)
    outs = []
    for proc in (first, second):
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, out
        outs.append(out)
    lines = [line for out in outs for line in out.splitlines() if "tracker:" in line]
    assert sum("tracker: sent," in line for line in lines) == 4, outs
    assert sum("tracker: already sent," in line for line in lines) == 4, outs
    runs = _runs(exp)
    ids = [r.name.rsplit("-", 2)[-2] + "-" + r.name.rsplit("-", 1)[-1] for r in runs]
    assert len(runs) == 4 and len(set(ids)) == 4, [r.name for r in runs]
    for e, stage, _ in CHECKPOINTS:
        path, report = _report(exp, e, stage)
        entry = read_marker(path)["wandb"][PROJECT]
        assert entry["state"] == "sent" and entry["version"] == 1
        assert entry["run_id"] == run_id_for(path, PROJECT) and entry["run_id"] in ids
        state = _inspect(Path(entry["run_dir"]))
        assert state["state"] == "finished" and state["summary"]["scores/loss/gsm8k-test"] == report["scores"][
            "loss/gsm8k-test"]
        assert not (path.parent / "tracker.json.tmp").exists()


KILLER = """
import json, os, signal, sys
from pathlib import Path
from contam_assets.evaluation import tracker
from contam_assets.evaluation.config import TrackerConfig

when, report_path, wandb_dir = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
real_save = tracker.save_marker

def save(path, marker):
    entry = marker["wandb"][{project!r}]
    if when == "after_finish" and entry["state"] == "sent":
        os.kill(os.getpid(), signal.SIGKILL)  # the run finished; its marker is never completed
    real_save(path, marker)
    if when == "after_start" and entry["state"] == "sending" and entry["run_dir"]:
        os.kill(os.getpid(), signal.SIGKILL)  # the run started; nothing of the report logged yet

tracker.save_marker = save
report = json.loads(report_path.read_text())
tracker.send_report(report_path, report, TrackerConfig(enabled=True, project={project!r}, mode="offline"), wandb_dir)
""".format(project=PROJECT)


def _killed_send(setup, when: str) -> tuple[Path, dict]:
    exp, db, config, env = setup
    cfg = load_config(config)
    evaluate(exp, "leaky", "step-000200", config=cfg, benchmarks_dir=None, connect=lambda: store.connect(db, read_only=True))
    path, report = _report(exp, "leaky", "step-000200")
    proc = subprocess.run([sys.executable, "-c", KILLER, when, str(path), str(exp / "wandb")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
    entry = read_marker(path)["wandb"][PROJECT]
    assert entry["state"] == "sending" and entry["run_dir"], entry  # written before the run finished
    return path, report


def test_a_kill_between_the_send_and_the_marker_does_not_send_again(setup):
    exp = setup[0]
    path, report = _killed_send(setup, "after_finish")
    runs = _runs(exp)
    assert len(runs) == 1 and _inspect(runs[0])["state"] == "finished"
    out = _evaluate(setup, "leaky/step-000200")
    assert "tracker: recovered" in out, out
    assert _runs(exp) == runs  # nothing sent again
    entry = read_marker(path)["wandb"][PROJECT]
    assert entry["state"] == "sent" and entry["run_dir"] == str(runs[0])
    assert "tracker: already sent" in _evaluate(setup, "leaky/step-000200")


def test_a_kill_during_the_send_completes_it_under_the_same_run_id(setup):
    exp = setup[0]
    path, report = _killed_send(setup, "after_start")
    (half,) = _runs(exp)
    assert _inspect(half)["state"] != "finished"
    out = _evaluate(setup, "leaky/step-000200")
    assert "tracker: resent" in out, out
    (run,) = _runs(exp)  # the unfinished offline folder is gone: `wandb sync` uploads one complete run
    assert run != half and run.name.endswith(run_id_for(path, PROJECT))
    state = _inspect(run)
    assert state["state"] == "finished"
    assert {k: v for k, v in state["summary"].items() if not k.startswith("_") and k != "report"} == \
        flatten_numbers(report)


def test_a_changed_report_is_sent_again_as_a_new_version(setup):
    exp, db, _, _ = setup
    assert "tracker: sent," in _evaluate(setup, "clean/step-000100")
    path, v1 = _report(exp, "clean", "step-000100")
    first = read_marker(path)["wandb"][PROJECT]
    with store.connect(db) as con:  # the probe was re-run: a new number
        con.execute("update probe_metrics set value = 0.625 where checkpoint = 'clean/step-000100'")
    out = _evaluate(setup, "clean/step-000100")
    assert "(written;" in out and "tracker: sent (version 2)" in out, out
    path, v2 = _report(exp, "clean", "step-000100")
    entry = read_marker(path)["wandb"][PROJECT]
    assert entry["version"] == 2 and entry["run_id"] == first["run_id"] + "-v2" != first["run_id"]
    assert entry["previous_run_id"] == first["run_id"] and entry["report_sha256"] != first["report_sha256"]
    assert [p["run_id"] for p in entry["previous"]] == [first["run_id"]]
    state = _inspect(Path(entry["run_dir"]))
    assert state["summary"]["scores/loss/gsm8k-test"] == 0.625
    assert state["config"]["previous_run_id"] == first["run_id"] and state["config"]["report_version"] == 2
    assert _inspect(Path(first["run_dir"]))["summary"]["scores/loss/gsm8k-test"] == 0.1  # v1 kept as it was
    assert len(_runs(exp)) == 2
