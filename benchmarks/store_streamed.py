"""`contam detect` with `--out` on an S3-protocol store: wall time beside the same pool run to a local folder, the
run's peak local disk beside the pool's stored size and its largest shard, and when the first mix object and the
commit marker (run.json) reach the store.

    python benchmarks/store_streamed.py --size 150MB --shards 12 --work /tmp/contam-streamed --json streamed.json

The pool is benchmarks/scale_pool.py's (real-looking text, real GSM8K/MBPP/HumanEval items planted; JSONL plain,
.gz and .zst in turn, or the codecs ``--codecs`` names: ``--codecs plain`` stores the pool at its raw size).  It is
put on a local S3-protocol server (moto's standalone server, on loopback:
contam_assets.testing.s3_server) and read from there (``--pool-from store``) or from its local folder
(``--pool-from local``); the remote run's output is ``s3://contam-bench/out``.  The local run reads the local
folder and writes a local output.  While the remote run goes, a sampler thread adds up, every ``--every`` seconds,
the bytes of the run's work folder (CONTAM_WORK_DIR), its Dagster home and its temporary folder (TMPDIR), and asks
the store for one key of ``out/mix/``, then once it is there for ``out/run.json``.  Each run starts from scratch (no state, no cache).  The remote run must remove the same
documents as the local one and leave one mix object per shard, and no mix or rejected file in its work folder.

The server runs in a process of its own (contam_assets.testing.s3_server.s3_server_process), on the same cores as
the run.  Beside the remote run the script measures the ceiling that server sets (``ceiling`` in the output): what it
sent and took during the run (each pool object's GETs and bytes: ``reads_per_stored_byte`` is the pool bytes sent
over its stored size), its CPU seconds then (/proc/<pid>/stat) and the run's own; then, with one client and one
request at a time, every pool object read once in full (streamed, discarded) and objects of the sizes of the run's
mix, rejected and table objects put, each timed with the server's and the client's CPU seconds.  ``best_remote_s``
is the local run plus those two transfers (the pool read once, the outputs written once), ``of_ceiling`` that over
the remote run's wall time; ``best_as_read_s`` and ``of_ceiling_as_read`` count the pool read as many times as the
run read it.

``--kill-at-half`` then runs the pool to ``s3://contam-bench/killed`` from scratch, kills it (SIGKILL) at half the
remote run's wall time and runs it again, and fails unless the two outputs are the same: every mix and rejected
object's bytes, every per-shard table's rows (timings and the output's URL left out).

``--cache-study default,on`` then measures where a remote pool's token cache lives (the ``token_cache`` setting,
store/token_cache.cache_root): for each value (``default`` is the setting left empty: no cache for a pool read from
a store; ``on`` keeps the streams in the work folder; ``prefilter`` is the default with the prefilter on), three runs
of the pool on the store to an output on the store, each sampled as above: the first with every task but the last of
``--tasks``, the same again (nothing changed), and a rerun with the last task added.  For ``on`` it also times
uploading the cache folder to the store and fetching it back (what keeping the streams in the store would add to
a first run and to a rescan, at least).  The last run of ``default`` (every shard rescanned in full) must remove
the documents the main remote run removed; the others (the added task scanned alone) say how many differ.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale_pool import build_pool, parse_size  # noqa: E402

from contam_assets.testing.s3_server import cpu_seconds, s3_client, s3_server_process, server_counts  # noqa: E402

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
            # one small request a look (the server is on the run's cores): a listing of at most one mix key until
            # the first is there, then a HEAD of run.json until it is (the run writes it last)
            if self.first_mix is None:
                if self.client.list_objects_v2(Bucket=BUCKET, Prefix=f"{self.prefix}mix/", MaxKeys=1).get("KeyCount"):
                    self.first_mix = now
            elif self.commit is None:
                try:
                    self.client.head_object(Bucket=BUCKET, Key=f"{self.prefix}run.json")
                    self.commit = now
                except self.client.exceptions.ClientError:
                    pass
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


VOLATILE = {"seconds", "recorded_at", "path"}  # a run's timings and its output's own URL


def counts_since(env: dict, before: list) -> dict[tuple[str, str], list[int]]:
    """The server's counts (requests, bytes sent, bytes taken per method and path) since ``before``."""
    old = {(m, p): (n, s, t) for m, p, n, s, t in before}
    out = {}
    for m, p, n, s, t in server_counts(env):
        o = old.get((m, p), (0, 0, 0))
        if (n, s, t) != o:
            out[(m, p)] = [n - o[0], s - o[1], t - o[2]]
    return out


def store_traffic(counts: dict, files: list[Path]) -> dict:
    """What the server sent and took for a run: each pool object's GETs and bytes read beside its stored size."""
    pool = {f"/{BUCKET}/pool/{f.name}": f.stat().st_size for f in files}
    per = {p: [0, 0] for p in pool}
    heads = 0
    for (m, p), (n, sent, _) in counts.items():
        if p in pool and m == "GET":
            per[p][0] += n
            per[p][1] += sent
        heads += n if (p in pool and m == "HEAD") else 0
    ratios = sorted(per[p][1] / pool[p] for p in pool)
    stored = sum(pool.values())
    return dict(pool_gets=sum(g for g, _ in per.values()), pool_heads=heads,
                pool_bytes_sent_mb=round(sum(b for _, b in per.values()) / 1e6, 1),
                reads_per_stored_byte=round(sum(b for _, b in per.values()) / stored, 3),
                reads_per_stored_byte_by_object=[round(ratios[0], 3), round(ratios[len(ratios) // 2], 3), round(ratios[-1], 3)],
                out_bytes_taken_mb=round(sum(t for (m, p), (_, _, t) in counts.items()
                                             if p.startswith(f"/{BUCKET}/out/")) / 1e6, 1),
                all_bytes_sent_mb=round(sum(s for _, s, _ in counts.values()) / 1e6, 1),
                all_bytes_taken_mb=round(sum(t for _, _, t in counts.values()) / 1e6, 1),
                requests=sum(n for n, _, _ in counts.values()),
                listings=sum(n for (m, p), (n, _, _) in counts.items() if m == "GET" and p.strip("/") == BUCKET))


class Filler(io.RawIOBase):
    """``size`` bytes of filler, read as a stream (an object of an output's size, put without a file behind it)."""

    def __init__(self, size: int):
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = min(len(b), self.left)
        b[:n] = b"x" * n
        self.left -= n
        return n


def ceiling(client, pid: int, files: list[Path], out_sizes: list[int]) -> dict:
    """The bare transfers of a run on this server, one client, one request at a time: GET every pool object once in
    full (streamed, discarded) and PUT objects of the run's outputs' sizes; each timed with the server's and this
    client's CPU seconds."""
    from boto3.s3.transfer import TransferConfig

    res = {}
    cpu_s, cpu_c, t = cpu_seconds(pid), time.process_time(), time.perf_counter()
    for f in files:
        body = client.get_object(Bucket=BUCKET, Key=f"pool/{f.name}")["Body"]
        for _ in body.iter_chunks(1 << 20):
            pass
    res.update(get_s=round(time.perf_counter() - t, 2), get_server_cpu_s=round(cpu_seconds(pid) - cpu_s, 2),
               get_client_cpu_s=round(time.process_time() - cpu_c, 2))
    one = TransferConfig(use_threads=False)
    cpu_s, cpu_c, t = cpu_seconds(pid), time.process_time(), time.perf_counter()
    for i, size in enumerate(out_sizes):
        client.upload_fileobj(Filler(size), BUCKET, f"ceiling/{i}", Config=one)
    res.update(put_s=round(time.perf_counter() - t, 2), put_server_cpu_s=round(cpu_seconds(pid) - cpu_s, 2),
               put_client_cpu_s=round(time.process_time() - cpu_c, 2),
               put_objects=len(out_sizes), put_mb=round(sum(out_sizes) / 1e6, 1))
    for i in range(len(out_sizes)):
        client.delete_object(Bucket=BUCKET, Key=f"ceiling/{i}")
    return res


def store_outputs(client, prefix: str) -> dict[str, object]:
    """What a run left under ``prefix``: each mix and rejected object's ETag (its bytes' MD5 here) and each per-shard
    table's rows from its Parquet parts (store/table_parts.py), timings and the output's URL left out."""
    import io

    import pyarrow.parquet as pq

    got: dict[str, object] = {}
    keys = [o for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
            for o in page.get("Contents", [])]
    rows: dict[str, list] = {}
    for o in keys:
        rel = o["Key"][len(prefix):]
        if rel.startswith(("mix/", "rejected/")):
            got[rel] = o["ETag"]
        elif rel.startswith("tables/") and "/shards/" in rel:
            body = client.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read()
            t = pq.read_table(io.BytesIO(body))
            t = t.select([c for c in t.column_names if c not in VOLATILE])
            rows.setdefault(rel.split("/")[1], []).extend(json.dumps(r, sort_keys=True, default=str) for r in t.to_pylist())
    got.update({f"table {t}": sorted(r) for t, r in rows.items()})
    return got


def killed_and_rerun(pool: str, shared: Path, tasks: str, env: dict, work: Path, at_s: float) -> dict:
    """The remote run from scratch to ``s3://BUCKET/killed``, killed (SIGKILL, the whole process group) ``at_s``
    seconds in, then run again to the end: the two walls."""
    names = {"DAGSTER_HOME": work / "home-killed", "CONTAM_WORK_DIR": work / "work-killed", "TMPDIR": work / "tmp-killed"}
    for f in names.values():
        shutil.rmtree(f, ignore_errors=True)
        f.mkdir(parents=True)
    run_env = {**os.environ, "PYTHONPATH": str(ROOT), **env, **{k: str(v) for k, v in names.items()}}
    cmd = [sys.executable, "-m", "contam_assets.cli", "detect", "--pool", pool, "--out", f"s3://{BUCKET}/killed",
           "--benchmarks", str(shared), "--tasks", tasks]
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, env=run_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        proc.wait(timeout=at_s)
        raise SystemExit(f"the run to be killed ended before {at_s:.0f} s")
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    killed = time.perf_counter() - t
    rerun, _ = detect(pool, f"s3://{BUCKET}/killed", shared, tasks, {**env, **{k: str(v) for k, v in names.items()}})
    return dict(killed_at_s=round(killed, 1), rerun_s=round(rerun, 2), total_s=round(killed + rerun, 2))


def sampled_run(pool: str, out: str, shared: Path, tasks: str, env: dict, folders: list[Path], client, prefix: str,
                every: float) -> dict:
    """One `contam detect` with its peak local disk (``folders``) and the time its first mix object reached the store."""
    for f in folders:
        f.mkdir(parents=True, exist_ok=True)
    sampler = Sampler(folders, client, prefix, every)
    sampler.start()
    try:
        wall, _ = detect(pool, out, shared, tasks, env)
    finally:
        sampler.stop.set()
        sampler.join()
    return dict(wall_s=round(wall, 2), peak_local_disk_mb=round(sampler.peak / 1e6, 1),
                peak_mix_and_rejected_mb=round(sampler.peak_outputs / 1e6, 1),
                cache_mb=round(folder_bytes([p for f in folders for p in f.rglob("token_cache") if p.is_dir()])[0] / 1e6, 1),
                modes=scan_modes(next(folders[0].rglob("contam.duckdb"))))


def scan_modes(db: Path) -> dict[str, int]:
    """Shards by how they were last scanned (shard_scans.mode: full or incremental)."""
    with duckdb.connect(str(db), read_only=True) as con:
        return dict(con.execute("select mode, count(*) from shard_scans group by mode order by mode").fetchall())


STUDY_ENV = {"default": {"CONTAM_TOKEN_CACHE": ""}, "on": {"CONTAM_TOKEN_CACHE": "on"},
             "prefilter": {"CONTAM_TOKEN_CACHE": "", "CONTAM_KNOBS": '{"prefilter": true}'}}


def cache_study(modes: list[str], a, client, env: dict, expect: set[tuple[str, int]]) -> dict:
    """First run, unchanged rerun and a rerun with the last task added, for each token cache value in ``modes``."""
    tasks = a.tasks.split(",")
    if len(tasks) < 2:
        raise SystemExit("--cache-study needs at least two --tasks (the last is the one added)")
    base = ",".join(tasks[:-1])
    out: dict[str, dict] = {}
    for mode in modes:
        names = [f"work-{mode}", f"home-{mode}", f"tmp-{mode}"]
        for n in names:
            shutil.rmtree(a.work / n, ignore_errors=True)
        folders = [a.work / n for n in names]
        run_env = {**env, **STUDY_ENV[mode], "DAGSTER_HOME": str(folders[1]), "CONTAM_WORK_DIR": str(folders[0]),
                   "TMPDIR": str(folders[2])}
        prefix = f"study-{mode}/"
        res = {}
        for step, t in (("first", base), ("unchanged", base), ("task_added", a.tasks)):
            res[step] = sampled_run(f"s3://{BUCKET}/pool", f"s3://{BUCKET}/{prefix.rstrip('/')}", a.shared, t, run_env,
                                    folders, client, prefix, a.every)
            print(f"token cache {mode}, {step}: {json.dumps(res[step])}", file=sys.stderr, flush=True)
        # a rescan for the added task alone (from the streams, or from the text with the prefilter) leaves the other
        # tasks' rows as the first run found them (docs/automation.md, "IDF"): its removals are counted against the
        # main run's; the default rescans every shard in full and must remove what the main run removed
        got = removed(next(folders[0].rglob("contam.duckdb")))
        res["removals_differ"] = len(got ^ expect)
        if got != expect and mode == "default":
            raise SystemExit(f"token cache {mode}: the run with every task removed other documents than the main run")
        cache = [p for p in folders[0].rglob("token_cache") if p.is_dir()]
        if mode != "on" and any(p.is_file() for c in cache for p in c.rglob("*")):
            raise SystemExit(f"token cache {mode}: a token stream was written to local disk")
        if mode == "on":
            files = [p for c in cache for p in c.rglob("*") if p.is_file()]
            t = time.perf_counter()
            for f in files:
                client.upload_file(str(f), BUCKET, f"cache-copy/{f.relative_to(cache[0]).as_posix()}")
            res["cache_upload_s"] = round(time.perf_counter() - t, 2)
            back = a.work / "cache-back"
            shutil.rmtree(back, ignore_errors=True)
            t = time.perf_counter()
            for f in files:
                dest = back / f.relative_to(cache[0])
                dest.parent.mkdir(parents=True, exist_ok=True)
                client.download_file(BUCKET, f"cache-copy/{f.relative_to(cache[0]).as_posix()}", str(dest))
            res["cache_download_s"] = round(time.perf_counter() - t, 2)
            res["cache_files"] = len(files)
            shutil.rmtree(back, ignore_errors=True)
        print(f"token cache {mode}: {json.dumps(res)}", file=sys.stderr, flush=True)
        out[mode] = res
    return out


def removed(db: Path) -> set[tuple[str, int]]:
    with duckdb.connect(str(db), read_only=True) as con:
        return set(con.execute("select shard, line from removals").fetchall())


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=parse_size, default=parse_size("150MB"))
    ap.add_argument("--shards", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--codecs", default="plain,gz,zst",
                    help="the shards' codecs in turn (plain, gz, zst): plain makes the stored pool its raw size")
    ap.add_argument("--tasks", default="gsm8k,mbpp,humaneval")
    ap.add_argument("--pool-from", choices=("store", "local"), default="store")
    ap.add_argument("--every", type=float, default=0.2, help="seconds between the sampler's looks")
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--cache-study", default="", help="token cache values to compare (default,on,prefilter); '' = none")
    ap.add_argument("--kill-at-half", action="store_true",
                    help="also run to s3://BUCKET/killed, kill it at half the remote run's wall time, rerun it, and "
                         "fail unless its outputs equal the uninterrupted run's")
    a = ap.parse_args(argv)
    modes = [m for m in a.cache_study.split(",") if m]
    unknown = sorted(set(modes) - set(STUDY_ENV))
    if unknown:
        raise SystemExit(f"--cache-study: unknown value(s) {', '.join(unknown)} (takes {', '.join(STUDY_ENV)})")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # the server's line per request
    a.work.mkdir(parents=True, exist_ok=True)
    load_at_start = [round(x, 1) for x in os.getloadavg()]
    pool = a.work / "pool"
    codecs = tuple("" if c == "plain" else f".{c}" for c in a.codecs.split(","))
    if set(codecs) - {"", ".gz", ".zst"}:
        raise SystemExit(f"--codecs: takes plain, gz and zst, not {a.codecs}")
    truth = build_pool(pool, a.size, a.shards, a.seed, 0.02, a.shared, codecs)
    files = sorted(p for p in pool.iterdir() if p.is_file())
    stored, largest = sum(p.stat().st_size for p in files), max(p.stat().st_size for p in files)
    for old in ("out-local", "home-local", "work-remote", "home-remote", "tmp-remote"):
        shutil.rmtree(a.work / old, ignore_errors=True)
    print(f"pool: {len(files)} shard(s), {stored / 1e6:.1f} MB stored, largest {largest / 1e6:.1f} MB",
          file=sys.stderr, flush=True)
    local_wall, _ = detect(str(pool), str(a.work / "out-local"), a.shared, a.tasks,
                           {"DAGSTER_HOME": str(a.work / "home-local")})
    print(f"local run: {local_wall:.1f} s, load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
    with s3_server_process(key="bench", secret="bench") as (env, pid):
        client = s3_client(env)
        client.create_bucket(Bucket=BUCKET)
        for f in files:
            client.upload_file(str(f), BUCKET, f"pool/{f.name}")
        folders = [a.work / "work-remote", a.work / "home-remote", a.work / "tmp-remote"]
        for f in folders:
            f.mkdir(parents=True)
        sampler = Sampler(folders, client, "out/", a.every)
        sampler.start()
        before, server_cpu0 = server_counts(env), cpu_seconds(pid)
        remote_wall, stdout = detect(f"s3://{BUCKET}/pool" if a.pool_from == "store" else str(pool), f"s3://{BUCKET}/out",
                                     a.shared, a.tasks, {**env, "DAGSTER_HOME": str(a.work / "home-remote"),
                                                         "CONTAM_WORK_DIR": str(a.work / "work-remote"),
                                                         "TMPDIR": str(a.work / "tmp-remote")})
        server_cpu = cpu_seconds(pid) - server_cpu0
        sampler.stop.set()
        sampler.join()
        traffic = store_traffic(counts_since(env, before), files)
        out_sizes = [o["Size"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="out/")
                     for o in page.get("Contents", []) if o["Key"].startswith(("out/mix/", "out/rejected/", "out/tables/"))]
        bare = ceiling(client, pid, files, out_sizes)
        # the best the server allows: the local run with the bare transfers added (each byte of the pool read once,
        # the outputs written once), and with the pool read as many times as the run read it
        best = local_wall + bare["get_s"] + bare["put_s"]
        best_as_read = local_wall + bare["get_s"] * traffic["reads_per_stored_byte"] + bare["put_s"]
        roof = dict(**bare, best_remote_s=round(best, 2), best_vs_local=round(local_wall / best, 3),
                    of_ceiling=round(best / remote_wall, 3), best_as_read_s=round(best_as_read, 2),
                    of_ceiling_as_read=round(best_as_read / remote_wall, 3), run_server_cpu_s=round(server_cpu, 2),
                    **traffic)
        print(f"ceiling: {json.dumps(roof)}", file=sys.stderr, flush=True)
        mix = [o["Key"] for o in client.list_objects_v2(Bucket=BUCKET, Prefix="out/mix/").get("Contents", [])]
        print(f"remote run: {remote_wall:.1f} s, load {os.getloadavg()[0]:.1f}, peak local disk "
              f"{sampler.peak / 1e6:.1f} MB, first mix object at {sampler.first_mix} s, run.json at {sampler.commit} s",
              file=sys.stderr, flush=True)
        resume = {}
        if a.kill_at_half:
            resume = killed_and_rerun(f"s3://{BUCKET}/pool" if a.pool_from == "store" else str(pool), a.shared,
                                      a.tasks, env, a.work, remote_wall / 2)
            whole, again = store_outputs(client, "out/"), store_outputs(client, "killed/")
            differ = sorted(k for k in set(whole) | set(again) if whole.get(k) != again.get(k))
            if differ:
                raise SystemExit(f"the killed and rerun output differs from the uninterrupted one: {differ[:5]}")
            resume["identical_objects_and_tables"] = len(whole)
            print(f"killed and rerun: {json.dumps(resume)}", file=sys.stderr, flush=True)
        study = cache_study(modes, a, client, env, removed(next((a.work / "work-remote").rglob("contam.duckdb")))) \
            if modes else {}
    if len(mix) != len(files):
        raise SystemExit(f"{len(mix)} mix object(s) on the store for {len(files)} shard(s)")
    work_db = next((a.work / "work-remote").rglob("contam.duckdb"))
    if removed(work_db) != removed(a.work / "out-local" / "contam.duckdb"):
        raise SystemExit("the run to the store removed other documents than the local run")
    left = [p for p in (a.work / "work-remote").rglob("*") if p.is_file() and p.parent.name in ("mix", "rejected")]
    if left:
        raise SystemExit(f"mix or rejected files left in the work folder: {left[:3]}")
    res = dict(documents=truth["documents"], raw_mb=round(truth["raw_bytes"] / 1e6, 1), shards=len(files),
               pool_from=a.pool_from, codecs=a.codecs, stored_mb=round(stored / 1e6, 1), largest_shard_mb=round(largest / 1e6, 1),
               removed=len(removed(work_db)), local_s=round(local_wall, 2), store_out_s=round(remote_wall, 2),
               speed_vs_local=round(local_wall / remote_wall, 3), peak_local_disk_mb=round(sampler.peak / 1e6, 1),
               peak_vs_stored=round(sampler.peak / stored, 2),
               peak_mix_and_rejected_mb=round(sampler.peak_outputs / 1e6, 1),
               first_mix_object_s=None if sampler.first_mix is None else round(sampler.first_mix, 1),
               run_json_s=None if sampler.commit is None else round(sampler.commit, 1),
               machine=f"{platform.machine()} {os.cpu_count()} cores", date=time.strftime("%Y-%m-%d"),
               load_at_start=load_at_start, load_at_end=[round(x, 1) for x in os.getloadavg()],
               local_cache_mb=round(folder_bytes([a.work / "out-local" / "token_cache"])[0] / 1e6, 1),
               remote_cache_mb=round(folder_bytes([p for p in (a.work / "work-remote").rglob("token_cache")])[0] / 1e6, 1),
               ceiling=roof, kill_at_half=resume, token_cache=study)
    print(json.dumps(res, indent=2))
    if a.json:
        a.json.write_text(json.dumps(res, indent=2))
    return res


if __name__ == "__main__":
    main()
