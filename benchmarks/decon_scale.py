"""decon (AI2's, PyPI ``decontaminate``) on the registry and pool that `reference_scale.py` writes, timed and measured.

The same folders as ``reference_scale.py`` (its ``generate``: a decon-format reference folder of N instances over
K tasks and a small pool with some of them planted), given to ``decon.detect`` with its defaults (simple mode,
5-grams, cl100k) and ``--threads`` worker threads.  decon needs Python 3.12 or later, so it runs in a venv of its
own, named by ``--decon-python`` (``python3.12 -m venv /tmp/decon-venv && /tmp/decon-venv/bin/pip install
decontaminate``).  Each row: the wall time, the CPU seconds and the peak memory of decon's process tree (summed PSS,
and the largest VmHWM), decon's own index-build and detection seconds, and the planted copies it flagged (a pool
document holding "(taskNNN item M)" flagged against that instance).  A run whose summed PSS passes ``--max-gb``
is stopped there (``stopped_at_gb``) rather than left to the kernel.

    python benchmarks/decon_scale.py --decon-python /tmp/decon-venv/bin/python --instances 200000,600000 --work /tmp/contam-refscale --json decon.json

`contam_assets_tests/sources/test_decon_scale_benchmark.py` runs it at 3,000 instances where ``DECON_PYTHON``
names such a venv's Python.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from proc_tree import TreeMemory, TreeSampler, load  # noqa: E402
from reference_scale import DATA, generate  # noqa: E402

# run in decon's venv: argv = pool, reference folder, report folder, threads
DRIVER = """import sys, decon
pool, ref, out, threads = sys.argv[1:5]
decon.detect(decon.Config(training_dir=pool, evals_dir=ref, report_output_dir=out, worker_threads=int(threads)))
"""
PLANTED = re.compile(r"\((task\d+) item (\d+)\)")


class CappedMemory(TreeMemory):
    """``TreeMemory`` that kills the root process once the tree's summed PSS passes ``cap`` bytes."""

    def __init__(self, root: int, cap: int, every: float = 0.5):
        super().__init__(root, every)
        self.cap, self.stopped_at = cap, 0

    def observe(self, pss, tree, parents, table):
        if pss > self.cap and not self.stopped_at:
            self.stopped_at = pss
            os.kill(self.root, signal.SIGKILL)


def _seconds(text: str, label: str) -> float | None:
    m = re.search(rf"{label}\s+([\d.]+)s", text)
    return float(m.group(1)) if m else None


def _count(text: str, label: str) -> int | None:
    m = re.search(rf"{label}\s+([\d,]+)", text)
    return int(m.group(1).replace(",", "")) if m else None


def planted_found(pool: Path, report: Path) -> tuple[int, int, int]:
    """(planted documents in the pool, those flagged against their own instance, other documents flagged)."""
    planted = {}
    for shard in sorted(pool.glob("*.jsonl")):
        for i, line in enumerate(shard.open(encoding="utf-8")):
            if m := PLANTED.search(json.loads(line)["text"]):
                planted[(shard.name, i)] = (m.group(1), int(m.group(2)))
    found, other = set(), set()
    for path in report.glob("*.jsonl"):
        for line in path.open(encoding="utf-8"):
            r = json.loads(line)
            doc = (r["training_file"], int(r["training_line"]))
            if planted.get(doc) == (r["eval_key"], int(r["eval_instance_index"])):
                found.add(doc)
            else:
                other.add(doc)
    return len(planted), len(found), len(other - found)


def run(decon_python: str, ref: Path, pool: Path, work: Path, threads: int, max_gb: float) -> dict:
    """``decon.detect`` on ``ref`` and ``pool``, measured."""
    report = work / f"decon-{ref.name}"
    shutil.rmtree(report, ignore_errors=True)
    log = work / f"decon-{ref.name}.log"
    load_start = load()
    t0 = time.perf_counter()
    with log.open("w", encoding="utf-8") as fh:
        proc = subprocess.Popen([decon_python, "-c", DRIVER, str(pool), str(ref), str(report), str(threads)],
                                stdout=fh, stderr=subprocess.STDOUT)
        mem, cpu = CappedMemory(proc.pid, int(max_gb * 2**30)), TreeSampler(proc.pid)
        mem.start()
        cpu.start()
        rc = proc.wait()
        mem.stop.set()
        cpu.stop.set()
        mem.join()
    wall = time.perf_counter() - t0
    text = log.read_text(errors="replace")
    row = {"wall_s": round(wall, 1), "cpu_s": round(sum(cpu.cpu.values()), 1),
           "peak_pss_gb": round(mem.pss / 2**30, 3), "peak_rss_gb": round(max(cpu.hwm.values(), default=0) / 2**30, 3),
           "load": [load_start, load()], "log": str(log)}
    if mem.stopped_at:
        return row | {"stopped_at_gb": round(mem.stopped_at / 2**30, 2)}
    if rc != 0:
        raise SystemExit(f"decon exit {rc}; see {log}:\n{text[-2000:]}")
    planted, found, other = planted_found(pool, report)
    read = {"index_build_s": _seconds(text, "Index building time"), "detection_s": _seconds(text, "Detection time"),
            "lines_indexed": _count(text, "Lines indexed"), "unique_ngrams": _count(text, "Unique n-grams")}
    missing = [k for k, v in read.items() if v is None]
    if missing:  # decon's summary is not the one this script reads (another version of decon)
        raise SystemExit(f"decon's summary lacks {', '.join(missing)}; see {log}")
    if not read["lines_indexed"]:
        raise SystemExit(f"decon indexed no reference line of {ref}; see {log}")
    return row | read | {"planted": planted, "planted_found": found, "other_flagged": other}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--decon-python", required=True, help="a Python (3.12+) with `decontaminate` installed")
    ap.add_argument("--instances", default="200000", help="comma-separated instance counts (one run each)")
    ap.add_argument("--tasks", type=int, default=226)
    ap.add_argument("--work", type=Path, default=Path("/tmp/contam-refscale"))
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--pool-mb", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-gb", type=float, default=16.0, help="stop decon once its summed PSS passes this")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    results = []
    for n in [int(x) for x in a.instances.split(",")]:
        ref, pool = generate(a.work, n, a.tasks, a.seed, a.data, a.pool_mb)
        row = {"instances": n, "tasks": a.tasks, "threads": a.threads,
               "ref_mb": round(sum(p.stat().st_size for p in ref.glob("*.jsonl")) / 1e6, 1)}
        row |= run(a.decon_python, ref, pool, a.work, a.threads, a.max_gb)
        print(json.dumps(row), flush=True)
        results.append(row)
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
