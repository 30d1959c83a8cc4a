"""benchmarks/probe_gpu.py as docs/probes.md shows it: on a machine without CUDA it refuses with one line (exit 2);
its own steps on the CPU with a 2-layer model give every figure and hold parity (same folder, same items)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from contam_assets_tests.support.doc_commands import ROOT, command

START = "python benchmarks/probe_gpu.py"


def _env() -> dict:
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}


def test_documented_command_refuses_without_cuda_in_one_line(tmp_path):
    import torch

    if torch.cuda.is_available():  # a GPU machine runs the real benchmark; this test is for the CPU-only suite
        return
    cmd = command("docs/probes.md", START)
    r = subprocess.run(["bash", "-c", cmd], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip().splitlines() == ["probe_gpu: no CUDA device visible; this benchmark measures the GPU path"]


def test_the_benchmark_steps_on_cpu_hold_parity(tmp_path, shared_data):
    out = tmp_path / "probe.json"
    r = subprocess.run([sys.executable, "benchmarks/probe_gpu.py", "--device", "cpu", "--shape", "tiny", "--limit", "12",
                        "--parity", "6", "--data", str(shared_data), "--work", str(tmp_path / "work"), "--json", str(out)],
                       cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["items"] == 36 and res["parity_items"] == 6 and res["device"] == "cpu"
    assert res["tokens_scored"] > res["items"] and res["items_per_s"] > 0
    assert res["max_diff_device_fp32_vs_cpu_fp32"] == 0.0  # the same device and dtype: identical
    assert res["max_diff_packed_vs_single_fp32"] < 1e-4  # padding and packing change nothing beyond float noise
    assert 0 < res["max_diff_bf16_vs_fp32"] < 0.05  # bfloat16 drifts, a little
    assert "bfloat16" in res["placement"]
