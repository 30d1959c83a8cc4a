"""The load benchmark runs as docs/evaluation.md writes it; its figures are read by people, not asserted."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from contam_assets_tests.conftest import PROJECT_ROOT


def documented(doc: Path, prefix: str) -> str:
    """The one line of a ```bash block in ``doc`` that starts with ``prefix``."""
    blocks = re.findall(r"```bash\n(.*?)```", doc.read_text(encoding="utf-8"), re.S)
    lines = [line.strip() for block in blocks for line in block.splitlines() if line.strip().startswith(prefix)]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.slow
def test_the_load_benchmark_runs_exactly_as_documented(shared_data):
    command = documented(PROJECT_ROOT / "docs" / "evaluation.md", "python benchmarks/api_load.py")
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               CONTAM_SHARED_DATA=str(shared_data))
    proc = subprocess.run(command, shell=True, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True,
                          timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results_path = Path(re.search(r"^results: (.+)$", proc.stdout, re.M).group(1))
    try:
        out = json.loads(results_path.read_text())
        assert out["machine"]["reports"] == 2000 and out["machine"]["clients"] == 20
        assert set(out["results"]) == {"fresh_s=1.0", "fresh_s=0.0"}
        for server in out["results"].values():
            assert server["listing_bytes_gzip"] * 4 < server["listing_bytes"]
            assert server["1 client, gzip"]["n"] == 50
            for name in ("gzip", "identity", "If-None-Match", "one report"):
                assert server[f"20 clients, {name}"]["n"] == 500
            assert server["20 clients while reports change"]["rewrites"] > 0
            assert server["rewrite listed after"]["ms"] > 0
        assert "| fresh_s=1.0 | 20 clients, gzip | 500 |" in proc.stdout
    finally:
        shutil.rmtree(results_path.parent, ignore_errors=True)
