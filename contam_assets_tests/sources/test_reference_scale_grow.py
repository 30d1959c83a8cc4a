"""benchmarks/reference_scale.py's rerun and grow runs at 3,000 instances over 6 tasks: an unchanged rerun keeps the
index, a task added (sorting in the middle), then that task and the first one removed, grow it, to the files a run from scratch
builds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data"


@pytest.mark.skipif(not (DATA / "gsm8k_train.jsonl").exists(), reason="needs ../shared/data")
def test_reference_scale_reruns_and_grows(tmp_path):
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "reference_scale.py"), "--instances", "3000",
                           "--tasks", "6", "--pool-mb", "0.3", "--work", str(tmp_path), "--json", str(out),
                           "--reruns", "1", "--grow", "400", "--grow-check"], capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (row,) = json.loads(out.read_text())
    assert row["rerun1"]["index"]["how"] == "kept"
    add, remove = row["add_task"], row["remove_task"]
    assert add["index"]["how"] == remove["index"]["how"] == "grown"
    assert add["index"]["records_indexed"] == 3400 and remove["index"]["records_indexed"] == 2500
    assert add["index_files"] == add["fresh_index_files"] and remove["index_files"] == remove["fresh_index_files"]
    added = next(tmp_path.glob("refs-*+*"))
    assert sorted(p.name for p in added.glob("*.jsonl"))[3] == "task003-added.jsonl"  # between the others
