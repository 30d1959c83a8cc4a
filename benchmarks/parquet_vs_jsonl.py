"""`contam detect` on the same documents as JSONL and as FineWeb-schema Parquet (id, text, url, dump, source):
wall time of each, every planted copy flagged (removed, or held for review) in both and the same documents removed,
the Parquet mix re-read equal row for row to the kept rows.

    python benchmarks/parquet_vs_jsonl.py --size 50MB --shards 4 --work /tmp/pvj --json pvj.json

Documents come from benchmarks/scale_pool.py (real-looking text, real GSM8K/MBPP/HumanEval items planted); the
JSONL pool is plain (uncompressed) JSONL, the Parquet pool zstd with row groups of 10,000 rows.  Runs alternate
(jsonl, parquet, jsonl, ...) so a busy machine slows both alike; the figures are medians.  With ``--s3`` the Parquet
pool is also put in a local S3-protocol server (moto's standalone server, on loopback) and each round adds a run
from ``s3://contam-bench/pool`` (read in place, by range requests), checked to remove the
same documents as the local Parquet run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale_pool import build_pool, parse_size  # noqa: E402

from contam_assets.store.compression import open_binary  # noqa: E402
from contam_assets.testing.s3_server import s3_client, s3_server  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ROW_GROUP = 10_000
BUCKET = "contam-bench"


def both_pools(work: Path, size: int, shards: int, seed: int, shared: Path) -> dict:
    """The JSONL and Parquet pools of the same documents; the planted (shard stem, line) pairs."""
    src = work / "source"
    truth = build_pool(src, size, shards, seed, 0.02, shared)
    jl, pqd = work / "jsonl", work / "parquet"
    if not (pqd.is_dir() and jl.is_dir() and len(list(pqd.iterdir())) == shards):
        jl.mkdir(parents=True, exist_ok=True)
        pqd.mkdir(parents=True, exist_ok=True)
        for f in sorted(src.iterdir()):
            stem = f.name.split(".jsonl")[0]
            with open_binary(f) as fh:
                rows = [json.loads(line) for line in fh]
            for i, r in enumerate(rows):
                r["url"] = f"https://example.org/{stem}/{i}"
                r["dump"] = "CC-MAIN-2024-10"
            rows = [{k: r[k] for k in ("id", "text", "url", "dump", "source")} for r in rows]
            (jl / f"{stem}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
            pq.write_table(pa.Table.from_pylist(rows), pqd / f"{stem}.parquet", compression="zstd",
                           row_group_size=ROW_GROUP)
    planted = {(p["shard"].split(".jsonl")[0], p["line"]) for p in truth["planted"]}
    return dict(jsonl=jl, parquet=pqd, planted=planted, documents=truth["documents"], raw_bytes=truth["raw_bytes"])


@contextmanager
def s3_pool(folder: Path) -> Iterator[dict]:
    """``folder`` under s3://BUCKET/pool on a local S3-protocol server (contam_assets.testing.s3_server: moto's
    standalone server, on loopback); yields the environment a run reads it with."""
    with s3_server(key="bench", secret="bench") as env:
        client = s3_client(env)
        client.create_bucket(Bucket=BUCKET)
        for f in sorted(folder.iterdir()):
            client.upload_file(str(f), BUCKET, f"pool/{f.name}")
        yield env


def detect(pool: Path | str, out: Path, shared: Path, tasks: str, home: Path, env_extra: dict | None = None) -> float:
    env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONPATH": str(ROOT), **(env_extra or {})}
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "contam_assets.cli", "detect", "--pool", str(pool), "--out", str(out),
                        "--benchmarks", str(shared), "--tasks", tasks], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"contam detect failed on {pool}: {r.stderr[-2000:]}")
    return wall


def removed(out: Path) -> set[tuple[str, int]]:
    with duckdb.connect(str(out / "contam.duckdb"), read_only=True) as con:
        return {(s.split(".")[0], line) for s, line in con.execute("select shard, line from removals").fetchall()}


def flagged(out: Path) -> set[tuple[str, int]]:
    """Documents with a flagged match: removed, or held for review (a question found without its answer)."""
    with duckdb.connect(str(out / "contam.duckdb"), read_only=True) as con:
        return {(s.split(".")[0], line) for s, line in
                con.execute("select distinct shard, line from matches where flagged").fetchall()}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=parse_size, default=parse_size("50MB"))
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--tasks", default="gsm8k,mbpp,humaneval")
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--s3", action="store_true", help="also run the Parquet pool from a local S3-protocol server")
    a = ap.parse_args(argv)
    pools = both_pools(a.work, a.size, a.shards, a.seed, a.shared)
    kinds = ["jsonl", "parquet"] + (["parquet-s3"] if a.s3 else [])
    walls: dict[str, list[float]] = {k: [] for k in kinds}
    with ExitStack() as stack:
        s3_env = stack.enter_context(s3_pool(pools["parquet"])) if a.s3 else {}
        for i in range(a.repeats):
            for kind in kinds:
                out = a.work / f"out-{kind}-{i}"
                work = a.work / f"work-{i}"
                for old in (out, a.work / f"home-{kind}-{i}", work):  # every run from scratch: no state, no cache
                    shutil.rmtree(old, ignore_errors=True)
                pool, extra = ((f"s3://{BUCKET}/pool", {**s3_env, "CONTAM_WORK_DIR": str(work)})
                               if kind == "parquet-s3" else (pools[kind], {}))
                walls[kind].append(detect(pool, out, a.shared, a.tasks, a.work / f"home-{kind}-{i}", extra))
                missed = pools["planted"] - flagged(out)
                if missed:
                    raise SystemExit(f"{kind}: {len(missed)} planted copies not flagged, e.g. {sorted(missed)[:3]}")
    if removed(a.work / "out-jsonl-0") != removed(a.work / "out-parquet-0"):
        raise SystemExit("the JSONL and Parquet runs removed different documents")
    if a.s3 and removed(a.work / "out-parquet-s3-0") != removed(a.work / "out-parquet-0"):
        raise SystemExit("the S3 and local Parquet runs removed different documents")
    # the Parquet mix, re-read: equal row for row to the kept input rows
    rem = removed(a.work / "out-parquet-0")
    for f in sorted(pools["parquet"].iterdir()):
        stem = f.name.split(".")[0]
        kept = [r for i, r in enumerate(pq.read_table(f).to_pylist()) if (stem, i) not in rem]
        if pq.read_table(a.work / "out-parquet-0" / "mix" / f.name).to_pylist() != kept:
            raise SystemExit(f"the Parquet mix of {f.name} is not the kept rows")
    med = {k: statistics.median(v) for k, v in walls.items()}
    res = dict(documents=pools["documents"], raw_mb=round(pools["raw_bytes"] / 1e6, 1), shards=a.shards,
               planted=len(pools["planted"]), removed=len(rem),
               planted_removed=len(pools["planted"] & rem), jsonl_s=[round(w, 2) for w in walls["jsonl"]],
               parquet_s=[round(w, 2) for w in walls["parquet"]],
               parquet_speed_vs_jsonl=round(med["jsonl"] / med["parquet"], 3),
               **({"parquet_s3_s": [round(w, 2) for w in walls["parquet-s3"]],
                   "s3_speed_vs_local": round(med["parquet"] / med["parquet-s3"], 3)} if a.s3 else {}),
               parquet_mb=round(sum(p.stat().st_size for p in pools["parquet"].iterdir()) / 1e6, 1),
               machine=f"{platform.machine()} {os.cpu_count()} cores", date=time.strftime("%Y-%m-%d"))
    print(json.dumps(res, indent=2))
    if a.json:
        a.json.write_text(json.dumps(res, indent=2))
    return res


if __name__ == "__main__":
    main()
