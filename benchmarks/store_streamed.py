"""`contam detect` with `--out` on an S3-protocol store: wall time beside the same pool run to a local folder, the
run's peak local disk beside the pool's stored size and its largest shard, and when the first mix object and the
commit marker (run.json) reach the store.

    python benchmarks/store_streamed.py --size 150MB --shards 12 --work /tmp/contam-streamed --json streamed.json

The pool is benchmarks/scale_pool.py's (real-looking text, real GSM8K/MBPP/HumanEval items planted; JSONL plain,
.gz and .zst).  It is put on a local S3-protocol server (moto's standalone server, on loopback:
contam_assets.testing.s3_server) and read from there (``--pool-from store``) or from its local folder
(``--pool-from local``); the remote run's output is ``s3://contam-bench/out``.  The local run reads the local
folder and writes a local output.  While the remote run goes, a sampler thread adds up, every ``--every`` seconds,
the bytes of the run's work folder (CONTAM_WORK_DIR), its Dagster home and its temporary folder (TMPDIR), and lists
the store's ``out/mix/``.  Each run starts from scratch (no state, no cache).  The remote run must remove the same
documents as the local one and leave one mix object per shard, and no mix or rejected file in its work folder.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale_pool import build_pool, parse_size  # noqa: E402

from contam_assets.testing.s3_server import s3_client, s3_server  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "contam-bench"


def folder_bytes(folders: list[Path]) -> tuple[int, int]:
    """Bytes of every file under ``folders``, and of those under a mix/ or rejected/ folder (the outputs in transit)."""
    total = outputs = 0
    for folder in folders:
        for dirpath, _, names in os.walk(folder):
            transit = any(part in ("mix", "rejected") for part in Path(dirpath).relative_to(folder).parts)
            for n in names:
                try:
                    size = os.lstat(os.path.join(dirpath, n)).st_size
                except OSError:
                    continue  # removed while we walked
                total += size
                outputs += size if transit else 0
    return total, outputs


class Sampler(threading.Thread):
    """Peak bytes of ``folders`` and the first time ``prefix``'s mix/ and run.json are on the store."""

    def __init__(self, folders: list[Path], client, prefix: str, every: float):
        super().__init__(daemon=True)
        self.folders, self.client, self.prefix, self.every = folders, client, prefix, every
        self.t0 = time.perf_counter()
        self.peak = self.peak_outputs = 0
        self.first_mix: float | None = None
        self.commit: float | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            total, outputs = folder_bytes(self.folders)
            self.peak, self.peak_outputs = max(self.peak, total), max(self.peak_outputs, outputs)
            now = time.perf_counter() - self.t0
            if self.first_mix is None or self.commit is None:
                keys = {o["Key"] for o in self.client.list_objects_v2(Bucket=BUCKET, Prefix=self.prefix).get("Contents", [])}
                if self.first_mix is None and any(k.startswith(f"{self.prefix}mix/") for k in keys):
                    self.first_mix = now
                if self.commit is None and f"{self.prefix}run.json" in keys:
                    self.commit = now
            self.stop.wait(self.every)


def detect(pool: str, out: str, shared: Path, tasks: str, env_extra: dict) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **env_extra}
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "contam_assets.cli", "detect", "--pool", pool, "--out", out,
                        "--benchmarks", str(shared), "--tasks", tasks], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if r.returncode != 0:
        raise SystemExit(f"contam detect --out {out} failed: {r.stderr[-2000:]}")
    return wall, r.stdout


def removed(db: Path) -> set[tuple[str, int]]:
    with duckdb.connect(str(db), read_only=True) as con:
        return set(con.execute("select shard, line from removals").fetchall())


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=parse_size, default=parse_size("150MB"))
    ap.add_argument("--shards", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tasks", default="gsm8k,mbpp,humaneval")
    ap.add_argument("--pool-from", choices=("store", "local"), default="store")
    ap.add_argument("--every", type=float, default=0.2, help="seconds between the sampler's looks")
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # the server's line per request
    a.work.mkdir(parents=True, exist_ok=True)
    pool = a.work / "pool"
    truth = build_pool(pool, a.size, a.shards, a.seed, 0.02, a.shared)
    files = sorted(p for p in pool.iterdir() if p.is_file())
    stored, largest = sum(p.stat().st_size for p in files), max(p.stat().st_size for p in files)
    for old in ("out-local", "home-local", "work-remote", "home-remote", "tmp-remote"):
        shutil.rmtree(a.work / old, ignore_errors=True)
    local_wall, _ = detect(str(pool), str(a.work / "out-local"), a.shared, a.tasks,
                           {"DAGSTER_HOME": str(a.work / "home-local")})
    with s3_server(key="bench", secret="bench") as env:
        client = s3_client(env)
        client.create_bucket(Bucket=BUCKET)
        for f in files:
            client.upload_file(str(f), BUCKET, f"pool/{f.name}")
        folders = [a.work / "work-remote", a.work / "home-remote", a.work / "tmp-remote"]
        for f in folders:
            f.mkdir(parents=True)
        sampler = Sampler(folders, client, "out/", a.every)
        sampler.start()
        remote_wall, stdout = detect(f"s3://{BUCKET}/pool" if a.pool_from == "store" else str(pool), f"s3://{BUCKET}/out",
                                     a.shared, a.tasks, {**env, "DAGSTER_HOME": str(a.work / "home-remote"),
                                                         "CONTAM_WORK_DIR": str(a.work / "work-remote"),
                                                         "TMPDIR": str(a.work / "tmp-remote")})
        sampler.stop.set()
        sampler.join()
        mix = [o["Key"] for o in client.list_objects_v2(Bucket=BUCKET, Prefix="out/mix/").get("Contents", [])]
    if len(mix) != len(files):
        raise SystemExit(f"{len(mix)} mix object(s) on the store for {len(files)} shard(s)")
    work_db = next((a.work / "work-remote").rglob("contam.duckdb"))
    if removed(work_db) != removed(a.work / "out-local" / "contam.duckdb"):
        raise SystemExit("the run to the store removed other documents than the local run")
    left = [p for p in (a.work / "work-remote").rglob("*") if p.is_file() and p.parent.name in ("mix", "rejected")]
    if left:
        raise SystemExit(f"mix or rejected files left in the work folder: {left[:3]}")
    res = dict(documents=truth["documents"], raw_mb=round(truth["raw_bytes"] / 1e6, 1), shards=len(files),
               pool_from=a.pool_from, stored_mb=round(stored / 1e6, 1), largest_shard_mb=round(largest / 1e6, 1),
               removed=len(removed(work_db)), local_s=round(local_wall, 2), store_out_s=round(remote_wall, 2),
               speed_vs_local=round(local_wall / remote_wall, 3), peak_local_disk_mb=round(sampler.peak / 1e6, 1),
               peak_vs_stored=round(sampler.peak / stored, 2),
               peak_mix_and_rejected_mb=round(sampler.peak_outputs / 1e6, 1),
               first_mix_object_s=None if sampler.first_mix is None else round(sampler.first_mix, 1),
               run_json_s=None if sampler.commit is None else round(sampler.commit, 1),
               machine=f"{platform.machine()} {os.cpu_count()} cores", date=time.strftime("%Y-%m-%d"))
    print(json.dumps(res, indent=2))
    if a.json:
        a.json.write_text(json.dumps(res, indent=2))
    return res


if __name__ == "__main__":
    main()
