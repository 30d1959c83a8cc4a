"""benchmarks/incremental_rescan.py exactly as docs/scale.md shows it: the cached, per-task prefilter and
full-with-prefilter rescans give the full rescan's rows (the script exits non-zero otherwise) and print
every ratio the page quotes."""

from __future__ import annotations

import subprocess

import pytest

from contam_assets_tests.support.doc_commands import ROOT, clean_env, commands


@pytest.mark.parametrize("line", ["python benchmarks/incremental_rescan.py --mb 8",
                                  "python benchmarks/incremental_rescan.py --mb 8 --planted 0.05"])
def test_the_documented_rescan_benchmark_runs_and_its_rows_agree(line):
    assert line in commands("docs/scale.md")  # the page still shows it, as written here
    cmd = line
    env = clean_env(WANDB_MODE="offline")
    r = subprocess.run(["bash", "-c", cmd], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "equal to the full rescan: True" in r.stdout
    assert "per-task prefilter rescan / full rescan" in r.stdout and "equal: True" in r.stdout
    assert "full with prefilter / full" in r.stdout
