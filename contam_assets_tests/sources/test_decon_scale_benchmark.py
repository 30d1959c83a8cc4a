"""benchmarks/decon_scale.py as docs/scale.md shows it, at 3,000 instances over 6 tasks: decon, in its own venv, on
the folders `reference_scale.py` writes, finds every planted copy and nothing else.  decon needs Python 3.12+ and
the `decontaminate` package: the test uses the Python ``DECON_PYTHON`` names, else a venv it makes from a Python 3.12+
on this machine (pyenv's included) with `pip install decontaminate`; it is skipped, saying why, where neither can be had."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from contam_assets_tests.support.doc_commands import ROOT, clean_env, command

START = "python benchmarks/decon_scale.py"
DATA = ROOT.parent / "shared" / "data"


def _python312() -> str | None:
    """A Python 3.12+ that runs (pyenv's shims name versions that may not be selected)."""
    found = sorted(glob.glob(str(Path.home() / ".pyenv" / "versions" / "3.1[2-9]*" / "bin" / "python3")))
    found += [shutil.which(f"python3.{m}") for m in range(12, 16)]
    check = "import sys; assert sys.version_info >= (3, 12)"
    return next((p for p in found if p and subprocess.run([p, "-c", check], capture_output=True).returncode == 0),
                None)


@pytest.fixture(scope="module")
def decon_python(tmp_path_factory) -> str:
    """decon's Python: ``DECON_PYTHON``, else a side venv made here (decon's wheels need Python 3.12+)."""
    given = os.environ.get("DECON_PYTHON", "")
    if given:
        return given
    base = _python312()
    if base is None:
        pytest.skip("needs a Python 3.12+ for decon's side venv (or DECON_PYTHON naming one with decontaminate)")
    venv = tmp_path_factory.mktemp("decon") / "venv"
    made = subprocess.run(f"{base} -m venv {venv} && {venv}/bin/pip install -q decontaminate", shell=True,
                          capture_output=True, text=True, timeout=600)
    if made.returncode != 0:
        pytest.skip(f"`pip install decontaminate` into a side venv failed: {made.stderr.strip().splitlines()[-1:]}")
    return str(venv / "bin" / "python")


@pytest.mark.skipif(not (DATA / "gsm8k_train.jsonl").exists(), reason="needs ../shared/data")
def test_decon_scale_benchmark(tmp_path, decon_python):
    """The line docs/scale.md shows, at a tiny size, with decon in its side venv."""
    cmd = command("docs/scale.md", START)
    for flag, value in (("--decon-python", decon_python), ("--instances", "3000"), ("--work", tmp_path),
                        ("--json", tmp_path / "d.json")):
        cmd = re.sub(rf"{flag} \S+", f"{flag} {value}", cmd)
    proc = subprocess.run(["bash", "-c", f"{cmd} --tasks 6 --pool-mb 0.3"], cwd=ROOT, env=clean_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (row,) = json.loads((tmp_path / "d.json").read_text())
    assert row["instances"] == row["lines_indexed"] == 3000 and "stopped_at_gb" not in row
    assert row["planted"] > 0 and row["planted_found"] == row["planted"] and row["other_flagged"] == 0
    assert row["peak_pss_gb"] > 0.02 and row["cpu_s"] > 0 and row["index_build_s"] > 0


def test_planted_found_counts_only_a_copy_flagged_against_its_own_instance(tmp_path):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from decon_scale import planted_found

    pool, report = tmp_path / "pool", tmp_path / "report"
    pool.mkdir()
    report.mkdir()
    docs = ["plain text", "a copy of it (task001 item 5) here", "another (task002 item 1)", "plain again"]
    (pool / "shard-000.jsonl").write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(docs)))
    rows = [("shard-000.jsonl", 1, "task001", 5),  # its own instance
            ("shard-000.jsonl", 2, "task002", 7),  # a planted document, flagged against another instance
            ("shard-000.jsonl", 3, "task000", 0)]  # a plain document
    (report / "shard-000-simple-0.80.jsonl").write_text("".join(json.dumps(
        {"training_file": f, "training_line": str(n), "eval_key": k, "eval_instance_index": str(i)}) + "\n"
        for f, n, k, i in rows))
    assert planted_found(pool, report) == (2, 1, 2)
