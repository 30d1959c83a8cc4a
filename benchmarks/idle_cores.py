"""Where a command leaves cores idle: the machine's busy cores sampled from /proc/stat every 0.1 s while the
command runs, summed between the lines it prints (`contam detect` prints one as each stage starts).

Each stretch from one printed line to the next (the first from the start, the last to the exit) gets its
seconds, its mean busy cores and its idle core-seconds (cores x seconds - busy).  The whole machine is
counted (the cores this process may use; time a neighbour steals from a VM counts as busy), so run it on a
quiet machine; with `--every 0.5` it also prints the busy cores every half second.  The command runs with
PYTHONUNBUFFERED=1, so a Python program's lines arrive as it prints them, not at its exit.

    python benchmarks/idle_cores.py --json idle.json -- contam detect --pool /tmp/contam-scale/pool-v2-1000000000-17-62 --out /tmp/idle-run --benchmarks /work/shared/data
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import threading
import time
from pathlib import Path

TICK = 0.1


def _idle_total(cpus: set[int]) -> tuple[int, int]:
    """(idle + iowait jiffies, all jiffies) summed over the cores ``cpus`` (their `cpuN` lines: the first line
    counts every core of the host, which a container or `taskset` may not have)."""
    idle = total = 0
    with open("/proc/stat") as fh:
        for line in fh:
            name, *fields = line.split()
            if name == "cpu":
                continue
            if not name.startswith("cpu"):
                break  # the cpuN lines come first
            if int(name[3:]) in cpus:
                v = [int(x) for x in fields[:8]]  # user nice system idle iowait irq softirq steal (guest is in user)
                idle, total = idle + v[3] + v[4], total + sum(v)
    return idle, total


def run_sampled(cmd: list[str], env: dict | None = None) -> dict:
    """Run ``cmd``; its output lines with their seconds since the start, and the busy cores of each tick."""
    cpus = os.sched_getaffinity(0)
    cores = len(cpus)
    samples, stop = [], threading.Event()

    def sample():
        while not stop.is_set():
            samples.append((time.perf_counter(), *_idle_total(cpus)))
            stop.wait(TICK)

    # a Python child writes to a pipe in blocks: unbuffered, each line arrives when it is printed
    env = dict(os.environ if env is None else env) | {"PYTHONUNBUFFERED": "1"}
    t0 = time.perf_counter()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except OSError as exc:
        stop.set()
        raise SystemExit(f"cannot run {cmd[0]}: {exc.strerror or exc}") from None
    lines = [(round(time.perf_counter() - t0, 3), line.rstrip("\n")) for line in proc.stdout]
    proc.wait()
    wall = time.perf_counter() - t0
    stop.set()
    sampler.join()
    samples.append((time.perf_counter(), *_idle_total(cpus)))
    busy = [(a[0] - t0, b[0] - a[0], cores * (1 - (b[1] - a[1]) / (b[2] - a[2])) if b[2] > a[2] else 0.0)
            for a, b in zip(samples, samples[1:])]
    return dict(cmd=cmd, returncode=proc.returncode, cores=cores, wall_s=round(wall, 3), lines=lines, busy=busy)


def stretches(run: dict) -> list[dict]:
    """Idle core-seconds from each printed line to the next; a tick that spans two stretches is shared out by time."""
    marks = [(0.0, "(start)")] + [(t, line) for t, line in run["lines"] if line.strip()]
    out = []
    for i, (start, line) in enumerate(marks):
        end = marks[i + 1][0] if i + 1 < len(marks) else run["wall_s"]
        parts = [(min(t + dt, end) - max(t, start), b) for t, dt, b in run["busy"] if t < end and t + dt > start]
        secs = sum(s for s, _ in parts)
        busy = sum(s * b for s, b in parts)
        out.append(dict(line=line, start_s=round(start, 2), seconds=round(end - start, 2),
                        mean_busy=round(busy / secs, 2) if secs else None, idle_core_s=round(run["cores"] * secs - busy, 2)))
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", type=Path, default=None, help="write the stretches and the ticks as one JSON object")
    ap.add_argument("--every", type=float, default=0.0, help="also print the mean busy cores every this many seconds")
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="the command, after --")
    args = ap.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        ap.error("no command given (put it after --)")
    run = run_sampled(cmd)
    res = {k: run[k] for k in ("cmd", "returncode", "cores", "wall_s")} | {"stretches": stretches(run)}
    res["idle_core_s"] = round(sum(s["idle_core_s"] for s in res["stretches"]), 2)
    for s in res["stretches"]:
        print(f"{s['start_s']:8.2f} {s['seconds']:7.2f} s  busy {s['mean_busy'] if s['mean_busy'] is not None else '-':>5}  "
              f"idle core-s {s['idle_core_s']:6.2f}  {s['line'][:70]}")
    print(f"wall {res['wall_s']} s on {res['cores']} cores, idle core-seconds {res['idle_core_s']}, exit {res['returncode']}")
    if args.every:
        step = max(1, round(args.every / TICK))
        row = [f"{b[i][0]:6.1f}:{sum(x[2] for x in b[i:i + step]) / len(b[i:i + step]):.1f}"
               for b in [run["busy"]] for i in range(0, len(b), step)]
        for i in range(0, len(row), 10):
            print("  ".join(row[i:i + 10]))
    if args.json:
        args.json.write_text(json.dumps(res | {"busy": run["busy"], "lines": run["lines"]}, indent=1))
    return res


if __name__ == "__main__":
    raise SystemExit(main()["returncode"])
