"""benchmarks/small_shards.py as docs/scale.md shows it, at a tiny size: many one-document shards (grouped into
partitions, store/units.py) remove exactly what the same documents in a few shards remove, every planted copy among
them, and the unchanged rerun scans nothing."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from contam_assets_tests.support.doc_commands import ROOT, clean_env, command

START = "python benchmarks/small_shards.py"


def _run(tmp_path, shared_data, files: int, shards: int, plant_every: int, extra: str = ""):
    """The documented line at a tiny size (docs/scale.md), ``extra`` appended; (the process, its environment)."""
    cmd = command("docs/scale.md", START)
    cmd = re.sub(r"--files \S+", f"--files {files}", cmd)
    cmd = re.sub(r"--shards \S+", f"--shards {shards}", cmd)
    cmd = re.sub(r"--rounds \S+", "--rounds 1", cmd) + f" --plant-every {plant_every}{extra}"
    cmd = re.sub(r"--work \S+", f"--work {tmp_path / 'work'}", cmd)
    cmd = re.sub(r"--json \S+", f"--json {tmp_path / 'small.json'}", cmd)
    env = clean_env(CONTAM_SHARED_DATA=str(shared_data))
    return subprocess.run(["bash", "-c", cmd], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900), env


def test_small_shards_at_a_tiny_size(tmp_path, shared_data):
    r, env = _run(tmp_path, shared_data, 150, 3, 30)
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


def test_small_shards_through_the_daemon_s_backfill(tmp_path, shared_data):
    """The same line with `--backfill` (docs/scale.md): both pools through `dagster-daemon run` and `dagster job
    backfill`, a run per `shards` partition; the same removals, every planted copy and every file among them.  70
    small files are more than 64: grouped into fewer partitions than files; the queue looked at every second.  The
    few-shard pool is one file: the fewest daemon runs that still compare the two pools."""
    r, _ = _run(tmp_path, shared_data, 70, 1, 10, " --backfill --dequeue-s 1")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads((tmp_path / "small.json").read_text())
    assert res["backfill"] and all(res["checks"].values()) and res["planted"] == 7 and res["removed"] >= 7
    run = res["rounds"][0]
    assert run["runs_few"] == 1 + 1 + 1 + 1  # reference, a scan per file, the reviews, a mix per file
    groups = (run["runs_many"] - 2) // 2
    assert run["runs_many"] == 1 + groups + 1 + groups and 1 <= groups < 70
    assert "70 one-document shards vs 1 shards, daemon backfill" in r.stdout
