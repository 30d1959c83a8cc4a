"""benchmarks/scale_run.py as docs/scale.md and the README show it, at a tiny size: every figure is in its JSON,
every planted copy is removed in every run (serial detect, detect on every core, the Dagster job commands, the
daemon's backfills), the daemon's tables equal `contam detect`'s, and
the parallel run's tables equal the serial run's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from contam_assets_tests.doc_commands import ROOT, command

START = "python benchmarks/scale_run.py"


def test_readme_and_scale_doc_show_the_same_command():
    assert command("README.md", START) == command("docs/scale.md", START)


def test_scale_run_at_a_tiny_size_reports_every_figure(tmp_path, shared_data):
    cmd = command("docs/scale.md", START)
    cmd = re.sub(r"--size \S+", "--size 2MB", cmd)
    cmd = re.sub(r"--work \S+", f"--work {tmp_path / 'work'}", cmd)
    cmd = re.sub(r"--json \S+", f"--json {tmp_path / 'scale.json'}", cmd)
    cmd += f" --tasks gsm8k,humaneval,mbpp --workers 2 --tiktoken-mb 1 --benchmarks {shared_data}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONTAM_", "DAGSTER_"))}
    env |= {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", "WANDB_MODE": "offline",
            "HF_HUB_OFFLINE": "1"}
    r = subprocess.run(["bash", "-c", cmd], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads((tmp_path / "scale.json").read_text())
    assert res["pool"]["planted"] > 0 and res["pool"]["shards"] == 3 and res["all_planted_removed"]
    assert [x["run"] for x in res["runs"]] == ["detect-1", "detect-1-ranged", "detect-2-on-1-core", "detect-2", "dagster",
                                               "dagster-backfill"]
    assert res["tables_identical_one_core"] and set(res["speedup_cores"]) == {"reference", "scan", "mix", "end_to_end"}
    assert res["tables_identical"] and res["speedup_end_to_end"] > 0 and res["speedup_scan"] > 0
    assert res["tables_identical_ranged"] and res["speedup_engine_end_to_end"] > 0 and res["speedup_engine_mix"] > 0
    assert res["tiktoken"]["mb_per_s"] > 0 and res["machine"]["cores"] >= 1
    for run in res["runs"]:
        assert run["planted_removed"] + run["planted_held_for_review"] == res["pool"]["planted"], run["run"]
        assert not run["planted_missed"] and run["planted_removed"] > 0, run["run"]
        for key in ("wall_s", "mb_per_s", "cpu_s_per_mb", "driver_peak_rss_mb", "duckdb_mb", "token_cache_mb", "x_tiktoken"):
            assert run[key] > 0, (run["run"], key)
        assert run["load_before"] and run["load_after"]
        assert run["stages_s"]["table_writes"] > 0
    one, ranged, pinned, two, dag, backfill = res["runs"]
    assert pinned["worker_peak_rss_mb"] > 0  # two scan processes, on one core
    assert {"listing", "reference", "scan", "report", "mix"} <= set(one["stages_s"]) <= set(ranged["stages_s"])
    assert two["worker_peak_rss_mb"] > 0  # the scan workers were seen
    assert dag["multiprocess_executor"] and {"shard_matches", "removal_report", "decontaminated_mix"} <= set(dag["stages_s"])
    assert "| detect-1 |" in res["markdown"]
    # the daemon's backfills: a run per shard partition for the scan and the mix, one for the reference and the report
    assert res["tables_identical_backfill"]
    assert backfill["dagster_runs"] == 1 + 3 + 1 + 3 and backfill["runs_failed"] == 0, backfill
    assert backfill["multiprocess_executor"] and set(backfill["commands_s"]) == {"build_reference", "scan_shards",
                                                                                  "apply_reviews", "write_mix"}
    assert {"shard_matches", "decontaminated_mix", "decontaminated_mix_mix_conservation"} <= set(backfill["stages_s"])


def test_scale_run_with_the_compiled_steps_off_gives_the_same_tables(tmp_path, shared_data):
    """`scale_run.py --compiled off` (docs/scale.md, the README table) runs `contam detect` on the plain paths: its
    runs carry the suffix, remove every planted copy, and their tables equal the compiled runs' on the same pool."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from scale_run import tables

    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONTAM_", "DAGSTER_"))}
    env |= {"WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1"}
    res = {}
    for mode in ("on", "off"):
        cmd = [sys.executable, "benchmarks/scale_run.py", "--size", "2MB", "--work", str(tmp_path / "work"),
               "--skip", "detect-1,detect-1-ranged,dagster,dagster-backfill", "--tasks", "gsm8k,humaneval,mbpp",
               "--workers", "2", "--tiktoken-mb", "1", "--benchmarks", str(shared_data), "--compiled", mode,
               "--json", str(tmp_path / f"{mode}.json")]
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        res[mode] = json.loads((tmp_path / f"{mode}.json").read_text())
    for mode, r in res.items():
        assert [x["run"] for x in r["runs"]] == ["detect-2-on-1-core", "detect-2"]
        assert all(Path(x["out"]).name.endswith(f"-compiled-{mode}") for x in r["runs"])  # each mode in its own folders
        assert r["all_planted_removed"] and r["tables_identical_one_core"]
        assert all(x["planted_removed"] > 0 and not x["planted_missed"] for x in r["runs"])
    on, off = (Path(res[m]["runs"][1]["out"]) for m in ("on", "off"))
    assert on != off and tables(on) == tables(off)
