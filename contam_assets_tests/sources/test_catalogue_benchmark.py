"""benchmarks/catalogue_build.py, run as docs/benchmarks.md shows it but small: its figures and its one-line mistakes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(*args):
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "catalogue_build.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=600)


def test_catalogue_build_reports_per_instance_time_of_both_builds(tmp_path, shared_data):
    r = run("--rows", 20, "--shared", shared_data, "--json", tmp_path / "o.json")
    assert r.returncode == 0, r.stderr
    out = json.loads((tmp_path / "o.json").read_text())
    assert out["catalogue_specs"] == 44 and out["catalogue_instances"] == 880 and out["catalogue_records"] > 700
    assert out["registry_specs"] == 7 and out["registry_instances"] == 28839
    assert out["ratio"] == round(out["catalogue_us_per_instance"] / out["registry_us_per_instance"], 3)
    assert f"ratio {out['ratio']}" in r.stdout


def test_catalogue_build_bad_input_is_one_line(tmp_path):
    r = run("--rows", 0)
    assert r.returncode == 2 and r.stderr.strip() == "catalogue_build.py: --rows and --repeat must be at least 1"
    r = run("--shared", tmp_path / "nope")
    assert r.returncode == 2 and r.stderr.strip() == f"catalogue_build.py: benchmark folder not found: {tmp_path / 'nope'}"


def test_the_docs_command_runs_as_written():
    from contam_assets_tests.support.doc_commands import command

    cmd = command("docs/benchmarks.md", "python benchmarks/catalogue_build.py")
    r = subprocess.run(["bash", "-c", cmd.replace("python ", f"{sys.executable} ", 1)], cwd=ROOT, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0 and "catalogue 44 specs, 44,000 instances" in r.stdout, r.stderr
