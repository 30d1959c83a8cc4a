"""docs/crosslingual.md's figures: its two benchmark commands run exactly as written, and their reverse links."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from contam_assets_tests.support.doc_commands import ROOT, command

DOC = "docs/crosslingual.md"


@pytest.mark.parametrize("preset, reverse_link", [("default", 2 / 3), ("thorough", 1.0)])
def test_the_documented_runs_give_the_documented_reverse_links(preset, reverse_link, shared_data):
    cmd = command(DOC, f"python benchmarks/crosslingual_quality.py --preset {preset} ")
    out = cmd.split("--out ")[1].split()[0]
    r = subprocess.run(cmd.replace("python ", f"{sys.executable} ", 1), shell=True, cwd=ROOT, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    figures = json.loads(open(out).read())
    assert figures["removals_direct_only"] is True and figures["removals"] == 134
    for task in ("mgsm_es", "mgsm_fr"):
        t = figures["tasks"][task]
        assert t["items_with_english_copy"] == 150 and t["exposed_without_copy"] == 0
        assert t["reverse_link"] == pytest.approx(reverse_link, abs=1e-3)
        assert t["reverse_link_of_flagged_copies"] == 1.0
