"""benchmarks/small_shards.py as docs/scale.md shows it, at a tiny size: many one-document shards (grouped into
partitions, store/units.py) remove exactly what the same documents in a few shards remove, every planted copy among
them, and the unchanged rerun scans nothing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from contam_assets_tests.doc_commands import ROOT, command

START = "python benchmarks/small_shards.py"


def test_small_shards_at_a_tiny_size(tmp_path, shared_data):
    cmd = command("docs/scale.md", START)
    cmd = re.sub(r"--files \S+", "--files 150", cmd)
    cmd = re.sub(r"--shards \S+", "--shards 3", cmd)
    cmd = re.sub(r"--rounds \S+", "--rounds 1", cmd) + " --plant-every 30"
    cmd = re.sub(r"--work \S+", f"--work {tmp_path / 'work'}", cmd)
    cmd = re.sub(r"--json \S+", f"--json {tmp_path / 'small.json'}", cmd)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONTAM_", "DAGSTER_"))}
    env |= {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", "CONTAM_SHARED_DATA": str(shared_data)}
    r = subprocess.run(["bash", "-c", cmd], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads((tmp_path / "small.json").read_text())
    assert res["files"] == 150 and res["planted"] == 5 and res["removed"] >= 5 and all(res["checks"].values())
    assert res["many_s"] > 0 and res["ratio"] == round(res["rounds"][0]["many_s"] / res["rounds"][0]["few_s"], 2)
    out = tmp_path / "work" / "out-many"
    # 150 small files are more than 64: the many-shard pool was scanned in groups of files, not a partition per file
    keys = subprocess.run([sys.executable, "-c", "import dagster as dg; print(len(dg.DagsterInstance.get()"
                           ".get_dynamic_partitions('shards')))"], env=dict(env, DAGSTER_HOME=str(out / ".dagster_home")),
                          capture_output=True, text=True, check=True).stdout
    assert 1 <= int(keys) < 150
    assert "one-document shards vs 3 shards" in r.stdout
