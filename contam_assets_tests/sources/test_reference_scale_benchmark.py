"""benchmarks/reference_scale.py at 3,000 instances over 6 tasks: the folder it writes and the run it measures;
its rerun and grow runs: an unchanged rerun keeps the index, a task added (sorting in the middle), then that task
and the first one removed, grow it, to the files a run from scratch builds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data"


def _run(tmp_path: Path, *extra: str, timeout: int) -> dict:
    """The benchmark at 3,000 instances over 6 tasks and a 0.3 MB pool; its one JSON row."""
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "reference_scale.py"), "--instances", "3000",
                           "--tasks", "6", "--pool-mb", "0.3", "--work", str(tmp_path), "--json", str(out), *extra],
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (row,) = json.loads(out.read_text())
    return row


@pytest.mark.skipif(not (DATA / "gsm8k_train.jsonl").exists(), reason="needs ../shared/data")
def test_reference_scale_benchmark(tmp_path):
    row = _run(tmp_path, timeout=300)
    ref = next(tmp_path.glob("refs-*"))
    files = sorted(p.name for p in ref.glob("*.jsonl"))
    assert files == [f"task{t:03d}.jsonl" for t in range(6)]
    lines = [json.loads(x) for p in ref.glob("*.jsonl") for x in p.read_text().splitlines() if not x.startswith("#")]
    assert len(lines) == 3000
    assert len({x["question"] for x in lines}) == 3000  # every instance its own
    assert {x["eval_key"] for x in lines} == {f"task{t:03d}" for t in range(6)}
    mean = sum(len(x["question"]) + len(x["answer"]) for x in lines) / len(lines)
    assert 450 < mean < 750, mean
    # every planted instance found and removed by the run the benchmark measured
    assert row["removed"] == row["planted"] > 0
    assert row["peak_pss_gb"] > 0.05 and row["stages_s"]["reference"] > 0


@pytest.mark.skipif(not (DATA / "gsm8k_train.jsonl").exists(), reason="needs ../shared/data")
def test_reference_scale_reruns_and_grows(tmp_path):
    row = _run(tmp_path, "--reruns", "1", "--grow", "400", "--grow-check", timeout=1500)
    assert row["rerun1"]["index"]["how"] == "kept"
    add, remove = row["add_task"], row["remove_task"]
    assert add["index"]["how"] == remove["index"]["how"] == "grown"
    assert add["index"]["records_indexed"] == 3400 and remove["index"]["records_indexed"] == 2500
    assert add["index_files"] == add["fresh_index_files"] and remove["index_files"] == remove["fresh_index_files"]
    added = next(tmp_path.glob("refs-*+*"))
    assert sorted(p.name for p in added.glob("*.jsonl"))[3] == "task003-added.jsonl"  # between the others
