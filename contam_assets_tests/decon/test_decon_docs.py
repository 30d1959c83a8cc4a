"""docs/decon.md's walkthrough, run exactly as written in a folder laid out as the doc says."""

from __future__ import annotations

import gzip
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from contam_assets_tests.support import decon_fixtures as fx

DOC = Path(__file__).resolve().parents[2] / "docs" / "decon.md"


def blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(), re.S)


def test_the_walkthrough_runs_as_written(tmp_path):
    config = blocks("yaml")[0]
    cfg = yaml.safe_load(config)
    (tmp_path / "decon.yaml").write_text(config)
    evals = tmp_path / cfg["evals_dir"]
    evals.mkdir()
    (evals / "toy_qa-1.jsonl").write_text("\n".join(fx.reference_lines()) + "\n")
    fx.write_jsonl(tmp_path / cfg["training_dir"] / "mixed.jsonl", fx.training_files()["mixed.jsonl"])
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "DAGSTER_HOME": str(tmp_path / "home")}
    commands = [line for line in blocks("bash")[0].splitlines() if line.strip() and not line.startswith("#")]
    assert commands[0] == "contam detect --decon-config decon.yaml"
    outputs = []
    for cmd in commands:
        r = subprocess.run(cmd, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, (cmd, r.stdout[-2000:], r.stderr[-3000:])
        outputs.append(r.stdout)
    report = tmp_path / cfg["report_output_dir"] / "mixed-simple-0.80.jsonl"
    assert len(report.read_text().splitlines()) == 2  # BRIDGE at line 0, LEAVES at line 3
    assert len(gzip.decompress((tmp_path / cfg["cleaned_output_dir"] / "mixed.jsonl.gz").read_bytes()).splitlines()) == 3
    assert (tmp_path / "decon-report-contam" / "contam.duckdb").exists()
    assert "agree entry for entry" in outputs[1]
