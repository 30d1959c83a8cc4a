"""`contam detect` on many one-document shards against the same documents in a few shards (docs/scale.md).

The documents are GSM8K train items (real text, one per line) with a HumanEval problem (prompt and canonical
solution, of 300 characters or more: the embedded default reference) planted every ``--plant-every`` documents.  The many-shard pool puts each
document in its own file, in nested folders (``g00/s0/doc-00000.jsonl``: 10 folders of 10 of ``--files``/100
files); the few-shard pool holds the same documents, in the same order, in ``--shards`` files.

Each round runs, in this order: the few-shard pool, the many-shard pool, the many-shard pool again unchanged; every
run from a fresh output folder and Dagster home except the rerun.  The figures are each column's median over
``--rounds``; the ratio is many / few of the same round.  It checks that both pools remove the same documents, every
planted one among them, and that the rerun scans nothing (its tables equal the first run's).

``--backfill`` runs both pools instead through the daemon, as production does (scale_run.py's `backfill_run`:
`dagster-daemon run` with queued runs, as many at once as cores; `dagster job launch` of build_reference and
apply_reviews, `dagster job backfill --all` of scan_shards and write_mix: a run per `shards` partition, which for
the many-shard pool is a group of files), and checks the same removals.

    python benchmarks/small_shards.py --files 5000 --shards 5 --work /tmp/small-shards --json small.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("CONTAM_SHARED_DATA", ROOT.parent / "shared" / "data"))


def documents(n: int, plant_every: int) -> tuple[list[str], set[int]]:
    """``n`` document lines; the indexes of the planted ones."""
    with open(SHARED / "gsm8k_train.jsonl", encoding="utf-8") as fh:
        gsm = [json.loads(line) for line in fh]
    with gzip.open(SHARED / "HumanEval.jsonl.gz", "rt", encoding="utf-8") as fh:
        # the problems long enough for the default detector to index (HumanEval/23, `strlen`, is too short)
        he = [p for p in map(json.loads, fh) if len(p["prompt"] + p["canonical_solution"]) >= 300]
    lines, planted = [], set()
    for i in range(n):
        g = gsm[i % len(gsm)]
        text = f"{g['question']}\n{g['answer']}"
        if plant_every and i % plant_every == plant_every // 2:
            p = he[len(planted) % len(he)]
            text = f"{text}\n\n{p['prompt']}{p['canonical_solution']}"
            planted.add(i)
        lines.append(json.dumps({"id": f"doc-{i:05d}", "text": text}))
    return lines, planted


def many_path(i: int, n: int) -> str:
    per = max(1, n // 100)
    return f"g{i // (per * 10):02d}/s{(i // per) % 10}/doc-{i:05d}.jsonl"


def write_pools(work: Path, lines: list[str], shards: int) -> tuple[Path, Path]:
    many, few = work / "many", work / "few"
    for p in (many, few):
        shutil.rmtree(p, ignore_errors=True)
    for i, line in enumerate(lines):
        f = many / many_path(i, len(lines))
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(line + "\n")
    few.mkdir(parents=True)
    per = -(-len(lines) // shards)
    for k in range(shards):
        (few / f"part-{k:03d}.jsonl").write_text("".join(line + "\n" for line in lines[k * per:(k + 1) * per]))
    return many, few


def detect(pool: Path, out: Path, fresh: bool = True) -> dict:
    if fresh:
        shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, DAGSTER_HOME=str(out / ".dagster_home"))
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "contam_assets.cli", "detect", "--pool", str(pool), "--out", str(out)],
                       capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"contam detect on {pool} exited {p.returncode}: {p.stderr.strip()[-400:]}")
    with duckdb.connect(str(out / "contam.duckdb"), read_only=True) as con:
        removed = sorted(r[0] for r in con.execute("select doc_id from removals").fetchall())
        files = con.execute("select count(*) from shard_stats").fetchone()[0]
        scans = con.execute("select shard, scanned_at from shard_scans order by shard").fetchall()
    return {"wall_s": round(wall, 2), "removed": removed, "files": files, "scans": scans, "stdout": p.stdout}


def backfill(pool: Path, work: Path, dequeue_s: int) -> dict:
    """Both steps of the pool through the daemon's backfill (scale_run.backfill_run, the embedded default reference
    as `contam detect` here uses; the daemon looks at its run queue every ``dequeue_s`` seconds); wall seconds, runs
    and the removed documents."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from scale_run import KNOBS, backfill_run

    KNOBS["dequeue_s"] = dequeue_s
    m = backfill_run(work, pool, None, os.cpu_count() or 1, "")
    with duckdb.connect(str(Path(m["out"]) / "contam.duckdb"), read_only=True) as con:
        removed = sorted(r[0] for r in con.execute("select doc_id from removals").fetchall())
        files = con.execute("select count(*) from shard_stats").fetchone()[0]
    return {"wall_s": m["wall_s"], "runs": m["dagster_runs"], "removed": removed, "files": files,
            "commands_s": m["commands_s"]}


def main_backfill(args, planted: set[int], many: Path, few: Path) -> None:
    rounds = []
    for _ in range(args.rounds):
        f = backfill(few, args.work / "backfill-few", args.dequeue_s)
        m = backfill(many, args.work / "backfill-many", args.dequeue_s)
        checks = {"same_removals": f["removed"] == m["removed"], "every_file_scanned": m["files"] == args.files,
                  "planted_removed": {f"doc-{i:05d}" for i in planted} <= set(m["removed"])}
        if not all(checks.values()):
            sys.exit(f"check failed: {checks}")
        rounds.append({"few_s": f["wall_s"], "many_s": m["wall_s"], "ratio": round(m["wall_s"] / f["wall_s"], 2),
                       "runs_few": f["runs"], "runs_many": m["runs"], "commands_many_s": m["commands_s"],
                       "commands_few_s": f["commands_s"]})
    res = {"files": args.files, "shards": args.shards, "backfill": True, "planted": len(planted),
           "removed": len(m["removed"]), "rounds": rounds,
           "few_s": statistics.median(r["few_s"] for r in rounds), "many_s": statistics.median(r["many_s"] for r in rounds),
           "ratio": statistics.median(r["ratio"] for r in rounds), "checks": checks, "cpus": os.cpu_count()}
    print(f"| {args.files:,} one-document shards vs {args.shards} shards, daemon backfill | {res['many_s']:.1f} s "
          f"({rounds[-1]['runs_many']} runs) vs {res['few_s']:.1f} s ({rounds[-1]['runs_few']} runs): {res['ratio']:.2f} x |")
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=5000, help="documents, one file each in the many-shard pool")
    ap.add_argument("--shards", type=int, default=5, help="files of the few-shard pool")
    ap.add_argument("--plant-every", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--work", type=Path, default=Path("/tmp/contam-small-shards"))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--backfill", action="store_true", help="through the daemon's backfill instead of contam detect")
    ap.add_argument("--dequeue-s", type=int, default=5, help="--backfill: seconds between the daemon's looks at its run "
                    "queue (5, Dagster's default; the test's tiny pools use 1)")
    args = ap.parse_args()
    lines, planted = documents(args.files, args.plant_every)
    many, few = write_pools(args.work, lines, args.shards)
    if args.backfill:
        return main_backfill(args, planted, many, few)
    rounds = []
    for _ in range(args.rounds):
        f = detect(few, args.work / "out-few")
        m = detect(many, args.work / "out-many")
        r = detect(many, args.work / "out-many", fresh=False)
        removed_many = set(m["removed"])
        checks = {"same_removals": f["removed"] == m["removed"], "planted_removed": {f"doc-{i:05d}" for i in planted} <= removed_many,
                  "every_file_scanned": m["files"] == args.files, "rerun_scanned_nothing": r["scans"] == m["scans"],
                  "rerun_same_removals": r["removed"] == m["removed"]}
        if not all(checks.values()):
            sys.exit(f"check failed: {checks}")
        rounds.append({"few_s": f["wall_s"], "many_s": m["wall_s"], "rerun_s": r["wall_s"],
                       "ratio": round(m["wall_s"] / f["wall_s"], 2), "seconds_many": m["stdout"].split("seconds ", 1)[-1].split("\n")[0]})
    res = {"files": args.files, "shards": args.shards, "planted": len(planted), "removed": len(removed_many),
           "few_s": statistics.median(r["few_s"] for r in rounds), "many_s": statistics.median(r["many_s"] for r in rounds),
           "rerun_s": statistics.median(r["rerun_s"] for r in rounds), "ratio": statistics.median(r["ratio"] for r in rounds),
           "rounds": rounds, "checks": checks, "cpus": os.cpu_count()}
    print(f"| {args.files:,} one-document shards vs {args.shards} shards | {res['many_s']:.1f} s vs {res['few_s']:.1f} s: "
          f"{res['ratio']:.2f} x; unchanged rerun {res['rerun_s']:.1f} s; {res['removed']} removed ({res['planted']} planted) |")
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
