"""The commands docs/probes.md shows, run exactly as written (in a folder laid out as the command expects)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from contam_assets.testing import model_tiny as mt
from contam_assets_tests.conftest import SHARED_DATA

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "probes.md"
_FENCE = re.compile(r"^```bash\n(.*?)^```", re.S | re.M)


def doc_commands() -> list[str]:
    return [line.strip() for block in _FENCE.findall(DOC.read_text()) for line in block.splitlines() if line.strip()]


def test_every_command_of_the_probes_page_runs(tmp_path, sandbox):
    commands = doc_commands()
    assert len(commands) == 1 and commands[0].startswith("contam probe ")  # a new command needs a test here
    project = tmp_path / "project"
    for name in ("leaked", "baseline"):
        mt.untrained_checkpoint(project / "experiments" / name / "checkpoints" / "final")
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "data").symlink_to(SHARED_DATA)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONTAM_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    r = subprocess.run(["bash", "-c", commands[0]], cwd=project, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    result = json.loads((project / "probe_out" / "probe.json").read_text())
    assert result["n/gsm8k-test"] == 8 and result["recitation/humaneval/n"] == 8
    assert result["recitation/humaneval/pass@1"] == 0.0  # an untrained model passes nothing, sandbox or not
    assert result["calibrated/delta1"] == 0.0  # the baseline is the same untrained model
    assert "fresh/gap" in result and "fresh/dropped-gsm8k-questions" in result
    assert "items/s" in r.stderr and ("ETA" in r.stderr or "done in" in r.stderr)  # progress in the run log
