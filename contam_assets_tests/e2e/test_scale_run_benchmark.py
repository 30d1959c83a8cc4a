"""benchmarks/scale_run.py as docs/scale.md and the README show it, at a tiny size: every figure is in its JSON,
every planted copy is removed in every run (serial detect, detect on every core, the Dagster job commands, the
daemon's backfills), the daemon's tables equal `contam detect`'s, and
the parallel run's tables equal the serial run's; the machine's own ceiling (cores_ceiling.py) beside the pinned pair,
and idle_cores.py's idle core-seconds per stage of `contam detect`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from contam_assets_tests.support.doc_commands import ROOT, command

START = "python benchmarks/scale_run.py"


def test_readme_and_scale_doc_show_the_same_command():
    assert command("README.md", START) == command("docs/scale.md", START)


@pytest.fixture(scope="module")
def tiny_bench(tmp_path_factory, shared_data):
    """The benchmark folder with GSM8K's train split cut to its first 300 items and its test split and MBPP to their
    first 200 (every other file as it is): the planted items are drawn from this folder's GSM8K test, MBPP and
    HumanEval items, and each of the runs builds its reference set from it, without indexing thousands of items
    that nothing in the tiny pool holds."""
    bench = tmp_path_factory.mktemp("bench")
    cut = {"gsm8k_train.jsonl": 300, "gsm8k_test.jsonl": 200, "mbpp.jsonl": 200}
    for src in shared_data.iterdir():
        if src.name in cut:
            (bench / src.name).write_text("".join(src.read_text().splitlines(keepends=True)[:cut[src.name]]))
        else:
            (bench / src.name).symlink_to(src)
    return bench


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, tiny_bench):
    """The documented line at 1 MB with 2 % of the documents planted (9 copies in its ~400 documents, in every
    shard), run once for the file: its six runs (compiled steps on, the default) are what the figures test reads
    and what the compiled-off test compares its tables with.  `--dequeue-s 1`: the daemon
    looks at the run queue every second (Dagster's 5 s tick would be a third of a tiny backfill's wall time)."""
    tmp_path = tmp_path_factory.mktemp("scale_run")
    cmd = command("docs/scale.md", START)
    cmd = re.sub(r"--size \S+", "--size 1MB", cmd)
    cmd = re.sub(r"--work \S+", f"--work {tmp_path / 'work'}", cmd)
    cmd = re.sub(r"--json \S+", f"--json {tmp_path / 'scale.json'}", cmd)
    cmd += (f" --plant-rate 0.02 --tasks gsm8k,humaneval,mbpp --workers 2 --tiktoken-mb 0.5 --ceiling-mb 0.5 --dequeue-s 1"
            f" --benchmarks {tiny_bench}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONTAM_", "DAGSTER_"))}
    env |= {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", "WANDB_MODE": "offline",
            "HF_HUB_OFFLINE": "1"}
    r = subprocess.run(["bash", "-c", cmd], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads((tmp_path / "scale.json").read_text())


def test_scale_run_at_a_tiny_size_reports_every_figure(tiny_run):
    res = tiny_run
    assert res["pool"]["planted"] > 0 and res["pool"]["shards"] == 3 and res["all_planted_removed"]
    assert [x["run"] for x in res["runs"]] == ["detect-1", "detect-1-ranged", "detect-2-on-1-core", "detect-2", "dagster",
                                               "dagster-backfill"]
    assert res["tables_identical_one_core"] and set(res["speedup_cores"]) == {"reference", "scan", "mix", "end_to_end",
                                                                               "machine_ceiling", "of_ceiling"}
    c = res["ceiling"]  # the machine's own 2-core ratio on tiktoken alone, measured beside the pinned pair
    assert c["workers"] == 2 and c["mb"] == res["tiktoken"]["mb"] and len(c["speedups"]) == 3
    assert c["speedups"] == [round(a / b, 3) for a, b in zip(c["one_core_s"], c["n_cores_s"])]
    assert res["speedup_cores"]["machine_ceiling"] == c["speedup"] == sorted(c["speedups"])[1]
    assert res["speedup_cores"]["of_ceiling"] == round(res["speedup_cores"]["end_to_end"] / c["speedup"], 3)
    assert f"Machine ceiling for 2 cores (cores_ceiling.py: tiktoken alone, {c['mb']} MB a pass" in res["markdown"]
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
    assert dag["executor"] == "in_process" and {"shard_matches", "removal_report", "decontaminated_mix"} <= set(dag["stages_s"])
    assert "| detect-1 |" in res["markdown"]
    # the daemon's backfills: a run per shard partition for the scan and the mix, one for the reference and the report
    assert res["tables_identical_backfill"]
    assert backfill["dagster_runs"] == 1 + 3 + 1 + 3 and backfill["runs_failed"] == 0 and backfill["dequeue_s"] == 1, backfill
    assert backfill["executor"] == "in_process" and set(backfill["commands_s"]) == {"build_reference", "scan_shards",
                                                                                  "apply_reviews", "write_mix"}
    assert {"shard_matches", "decontaminated_mix", "decontaminated_mix_mix_conservation"} <= set(backfill["stages_s"])


def test_scale_run_with_the_compiled_steps_off_gives_the_same_tables(tmp_path, tiny_bench, tiny_run):
    """`scale_run.py --compiled off` (docs/scale.md, the README table) runs `contam detect` on the plain paths: its
    runs carry the suffix, remove every planted copy, agree with each other (pinned to one core and not), and their
    tables equal those of the compiled runs on the same pool (the documented line's, compiled on by default)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from scale_run import tables

    def compiled_by_default() -> bool:
        r = subprocess.run([sys.executable, "-c", "from contam_assets.detector import compiled; print(compiled.enabled())"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        return r.stdout.strip() == "True"

    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONTAM_", "DAGSTER_"))}
    env |= {"WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1"}
    work = Path(tiny_run["pool"]["path"]).parent  # the documented run's folder: its pool, runs in folders of their own
    cmd = [sys.executable, "benchmarks/scale_run.py", "--size", "1MB", "--plant-rate", "0.02", "--work", str(work),
           "--skip", "detect-1,detect-1-ranged,dagster,dagster-backfill", "--tasks", "gsm8k,humaneval,mbpp",
           "--workers", "2", "--tiktoken-mb", "0.5", "--ceiling-mb", "0.5", "--benchmarks", str(tiny_bench),
           "--compiled", "off", "--json", str(tmp_path / "off.json")]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    off = json.loads((tmp_path / "off.json").read_text())
    assert [x["run"] for x in off["runs"]] == ["detect-2-on-1-core", "detect-2"]
    assert all(Path(x["out"]).name.endswith("-compiled-off") for x in off["runs"])  # in folders of its own
    assert off["all_planted_removed"] and off["tables_identical_one_core"]
    assert all(x["planted_removed"] > 0 and not x["planted_missed"] for x in off["runs"])
    assert off["pool"] == tiny_run["pool"]  # the same pool
    on = next(x for x in tiny_run["runs"] if x["run"] == "detect-2")
    assert compiled_by_default()  # the documented line sets no CONTAM_COMPILED: its runs are the compiled ones
    assert tables(Path(on["out"])) == tables(Path(off["runs"][1]["out"]))


def test_cores_ceiling_as_docs_show_it(tmp_path):
    """`cores_ceiling.py` (docs/scale.md): one pinned process encoding the text N times against N processes once
    each, the order alternating; a pool without plain shards is refused with its reason."""
    pool = tmp_path / "pool"
    pool.mkdir()
    docs = [{"id": i, "text": f"Natalia sold clips to {i} of her friends in April, and then half as many in May."}
            for i in range(3000)]
    (pool / "a.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    cmd = command("docs/scale.md", "python benchmarks/cores_ceiling.py")
    cmd = re.sub(r"--pool \S+", f"--pool {pool}", cmd)
    r = subprocess.run(["bash", "-c", cmd.replace("python ", f"{sys.executable} ", 1) + " --repeats 3 --workers 2"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    size = (pool / "a.jsonl").stat().st_size  # every line: the pool is smaller than --mb
    assert res["mb"] == round(size / 1e6, 2) and res["workers"] == 2 and len(res["one_core_s"]) == len(res["n_cores_s"]) == 3
    assert res["speedups"] == [round(a / b, 3) for a, b in zip(res["one_core_s"], res["n_cores_s"])]
    assert res["speedup"] == sorted(res["speedups"])[1]  # the median
    r = subprocess.run([sys.executable, "benchmarks/cores_ceiling.py", "--pool", str(pool), "--repeats", "0"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "at least once (workers" in r.stderr and "Traceback" not in r.stderr
    (pool / "a.jsonl").rename(pool / "a.jsonl.gz")
    r = subprocess.run([sys.executable, "benchmarks/cores_ceiling.py", "--pool", str(pool)], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode != 0 and f"no plain .jsonl shard with documents in {pool}" in r.stderr


def test_idle_cores_as_docs_show_it(tmp_path, tiny_bench):
    """`idle_cores.py` (docs/scale.md) on `contam detect`: a stretch per stage line, the stretches cover the run, and
    no stretch has fewer than 0 or more than cores x seconds idle; a planted copy is removed on the way."""
    item = json.loads((tiny_bench / "gsm8k_test.jsonl").read_text().splitlines()[7])
    pool = tmp_path / "pool"
    pool.mkdir()
    docs = [{"id": "planted", "text": f"Homework help.\n{item['question']}\n{item['answer']}"}]
    docs += [{"id": f"d{i}", "text": f"Field notes {i}: the river rose two feet after the storm."} for i in range(200)]
    (pool / "shard.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    cmd = command("docs/scale.md", "python benchmarks/idle_cores.py")
    cmd = re.sub(r"--json \S+", f"--json {tmp_path / 'idle.json'}", cmd)
    cmd = re.sub(r"--pool \S+", f"--pool {pool}", cmd)
    cmd = re.sub(r"--out \S+", f"--out {tmp_path / 'out'}", cmd)
    cmd = re.sub(r"--benchmarks \S+", f"--benchmarks {tiny_bench}", cmd) + " --tasks gsm8k"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONTAM_", "DAGSTER_")) and k != "PYTHONUNBUFFERED"}
    env |= {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", "WANDB_MODE": "offline",
            "HF_HUB_OFFLINE": "1", "DAGSTER_HOME": str(tmp_path / "dagster_home")}
    r = subprocess.run(["bash", "-c", cmd.replace("python ", f"{sys.executable} ", 1)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads((tmp_path / "idle.json").read_text())
    at = {s["line"].split(" (")[0]: s["start_s"] for s in res["stretches"]}
    assert res["stretches"][0]["line"] == "(start)" and any(x.startswith("shards 1 ") and "removed 1 " in x for x in at)
    scan = next(t for x, t in at.items() if x.startswith("scan "))
    # each stage's line arrived as it began, not all at the exit (the command's Python writes to a pipe)
    assert at["reference set and index"] + 0.1 < scan < at["removals and report"] - 0.1 < res["wall_s"] - 0.2
    assert abs(sum(s["seconds"] for s in res["stretches"]) - res["wall_s"]) < 0.05
    for s in res["stretches"]:
        assert s["idle_core_s"] <= res["cores"] * s["seconds"] + 0.02, s
    assert f"idle core-seconds {res['idle_core_s']}, exit 0" in r.stdout


def test_idle_cores_counts_a_sleeping_stretch_as_idle(tmp_path):
    """A command that sleeps a second between two lines: that stretch is about a second long, its idle core-seconds
    within [0, cores x seconds] (the whole machine is sampled, and other tests may run beside this one); the
    stretch arithmetic on known ticks: a tick that spans two lines is shared out by time, a quiet tick is idle."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from idle_cores import run_sampled, stretches

    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # the tool unbuffers the child itself
    run = run_sampled([sys.executable, "-c", "import time; print('a'); time.sleep(1.0); print('b')"], env)
    by = {s["line"]: s for s in stretches(run)}
    assert run["returncode"] == 0 and list(by) == ["(start)", "a", "b"]
    assert 0.95 <= by["a"]["seconds"] <= 1.5 and 0 <= by["a"]["idle_core_s"] <= run["cores"] * by["a"]["seconds"] + 0.02
    ticks = {"cores": 2, "wall_s": 2.0, "lines": [(0.5, "a"), (1.5, "b")],
             "busy": [(0.0, 0.5, 2.0), (0.5, 0.5, 0.0), (1.0, 1.0, 1.0)]}  # (start, seconds, busy cores)
    assert [(s["line"], s["seconds"], s["mean_busy"], s["idle_core_s"]) for s in stretches(ticks)] == [
        ("(start)", 0.5, 2.0, 0.0), ("a", 1.0, 0.5, 1.5), ("b", 0.5, 1.0, 0.5)]


def test_the_ceiling_and_idle_cores_refuse_bad_input_with_their_reason(tmp_path):
    """cores_ceiling: one core against one, and an encoding process that fails (counted, after every process
    ended); idle_cores: no command, a command that does not exist, and a command's own exit code passed on."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from cores_ceiling import cores_ceiling

    try:
        cores_ceiling(["text"], 4, 1)
        raise AssertionError("one worker accepted")
    except ValueError as exc:
        assert "(workers 1, repeats 3)" in str(exc)
    try:
        cores_ceiling([None], 0, 2, repeats=1)  # not a str: the pinned process (first of the repeat) fails
        raise AssertionError("a failed encoding process went unreported")
    except RuntimeError as exc:
        assert str(exc) == "1 encoding process(es) exited with [1]"
    tool = [sys.executable, "benchmarks/idle_cores.py"]
    r = subprocess.run(tool, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "no command given (put it after --)" in r.stderr
    r = subprocess.run(tool + ["--", str(tmp_path / "no-such-command")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and r.stderr.strip() == f"cannot run {tmp_path / 'no-such-command'}: No such file or directory"
    r = subprocess.run(tool + ["--", sys.executable, "-c", "print('half done'); raise SystemExit(3)"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 3 and "half done" in r.stdout and r.stdout.rstrip().endswith("exit 3")
