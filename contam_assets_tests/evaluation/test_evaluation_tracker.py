"""The wandb tracker: offline run files prove what was sent; the marker stops a second send."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from contam_assets import store
from contam_assets.evaluation.checkpoint_report import evaluate, flatten_numbers
from contam_assets.evaluation.config import TrackerConfig, parse_config
from contam_assets.evaluation.tracker import MARKER_FILE, TrackerError, read_marker, send_report
from contam_assets.testing.experiments import add_checkpoint, gsm8k_rows, write_jsonl, write_probe_metrics


@pytest.fixture(autouse=True)
def _wandb_env(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    for name in ("WANDB_DATA_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb-home" / name.lower()))
    monkeypatch.delenv("WANDB_DIR", raising=False)


@pytest.fixture
def setup(tmp_path, shared_data):
    exp = tmp_path / "out" / "experiments"
    write_jsonl(exp / "run1" / "data" / "train.jsonl", gsm8k_rows(shared_data)[:12] + [{"text": "other"}])
    add_checkpoint(exp, "run1", "step-000050", 50, recipe="r1")
    db = tmp_path / "out" / "contam.duckdb"
    write_probe_metrics(db, [("run1/step-000050", "ppl_probe", "loss/gsm8k-test", 0.75),
                             ("run1/step-000050", "bits_per_byte", "bpb/gsm8k-test", 0.3)])
    bench = {"name": "gsm8k-test", "path": str(shared_data / "gsm8k_test.jsonl"), "limit": 100}
    return exp, db, bench


def _report(exp, db, raw_config, tmp_path):
    cfg = parse_config(raw_config, tmp_path)
    ev = evaluate(exp, "run1", "step-000050", config=cfg, benchmarks_dir=None,
                  connect=lambda: store.connect(db, read_only=True))
    return ev, cfg


def _inspect(run_dir: str) -> dict:
    """wandb's own reader of the offline run's .wandb transaction log."""
    proc = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--summary", "--json", run_dir],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_sent_once_with_every_number(setup, tmp_path):
    exp, db, bench = setup
    raw = {"benchmarks": [bench], "tracker": {"enabled": True, "project": "contam-evals"}}
    ev, cfg = _report(exp, db, raw, tmp_path)
    res = send_report(ev.path, ev.report, cfg.tracker, exp / "wandb")
    assert res.sent and res.reason == "sent" and res.project == "contam-evals"
    run_dir = Path(res.run_dir)
    assert run_dir.is_relative_to(exp / "wandb") and run_dir.name.startswith("offline-run-")

    state = _inspect(str(run_dir))
    assert state["project"] == "contam-evals" and state["name"] == "run1/step-000050" and state["state"] == "finished"
    summary = state["summary"]
    flat = flatten_numbers(ev.report)
    sent = {k: v for k, v in summary.items() if not k.startswith("_") and k != "report"}
    assert sent == flat  # every number, nothing else
    assert summary["scores/loss/gsm8k-test"] == 0.75
    assert summary["benchmarks/gsm8k-test/value"] == 0.3
    assert summary["contamination/exact"] == 12 and summary["contamination/near"] == 12
    assert summary["contamination/benchmarks/gsm8k-test/flagged/11"] == 11
    # the same numbers as a table
    assert summary["report"]["_type"] == "table-file"
    table = json.loads((run_dir / "files" / summary["report"]["path"]).read_text())
    assert table["columns"] == ["key", "value"]
    assert {k: v for k, v in table["data"]} == flat
    assert state["config"]["recipe"] == "r1"

    marker = read_marker(ev.path)
    assert marker["wandb"]["contam-evals"]["run_id"] == res.run_id
    assert marker["wandb"]["contam-evals"]["metrics"] == len(flat)
    assert (ev.path.parent / MARKER_FILE).is_file()

    # second send: skipped by the marker, no new run folder
    runs_before = sorted((exp / "wandb" / "wandb").glob("offline-run-*"))
    again = send_report(ev.path, ev.report, cfg.tracker, exp / "wandb")
    assert not again.sent and again.reason == "already sent" and again.run_id == res.run_id
    assert sorted((exp / "wandb" / "wandb").glob("offline-run-*")) == runs_before
    # another project is a separate send, recorded in the same marker
    other = send_report(ev.path, ev.report, TrackerConfig(enabled=True, project="second"), exp / "wandb")
    assert other.sent and set(read_marker(ev.path)["wandb"]) == {"contam-evals", "second"}


def test_tracker_config_is_not_part_of_the_report(setup, tmp_path):
    exp, db, bench = setup
    ev1, _ = _report(exp, db, {"benchmarks": [bench]}, tmp_path)
    text = ev1.path.read_text()
    ev2, cfg2 = _report(exp, db, {"benchmarks": [bench],
                                  "tracker": {"enabled": True, "project": "p2", "mode": "offline"}}, tmp_path)
    assert not ev2.changed and ev2.path.read_text() == text
    send_report(ev2.path, ev2.report, cfg2.tracker, tmp_path / "elsewhere")
    assert ev2.path.read_text() == text  # sending writes only the marker
    off = send_report(ev2.path, ev2.report, TrackerConfig(enabled=False), tmp_path)
    assert not off.sent and off.reason == "disabled"


def test_wandb_disabled_sends_nothing(setup, tmp_path, monkeypatch):
    exp, db, bench = setup
    ev, _ = _report(exp, db, {"benchmarks": [bench]}, tmp_path)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    res = send_report(ev.path, ev.report, TrackerConfig(enabled=True, project="p"), tmp_path / "w")
    assert not res.sent and res.reason == "WANDB_MODE=disabled"
    assert not (ev.path.parent / MARKER_FILE).exists()


def test_a_failed_send_is_a_clear_error_and_the_next_one_completes_it(setup, tmp_path):
    exp, db, bench = setup
    ev, _ = _report(exp, db, {"benchmarks": [bench]}, tmp_path)
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the wandb folder should be")
    with pytest.raises(TrackerError, match="failed: FileExistsError"):
        send_report(ev.path, ev.report, TrackerConfig(enabled=True, project="p", dir=str(blocked)), exp / "wandb")
    entry = read_marker(ev.path)["wandb"]["p"]
    assert entry["state"] == "sending" and entry["run_dir"] is None
    res = send_report(ev.path, ev.report, TrackerConfig(enabled=True, project="p"), exp / "wandb")
    assert res.sent and res.reason == "resent" and res.run_id == entry["run_id"]
    assert read_marker(ev.path)["wandb"]["p"]["state"] == "sent"
    assert _inspect(res.run_dir)["state"] == "finished"
