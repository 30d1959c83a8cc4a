"""A pool in S3, read in place through a real S3-protocol server on loopback (moto's standalone server, as s3fs's
own tests do): the same tables and mix as the same pool in a local folder, no copy of the pool on local disk, a changed
object rescanned by its ETag, a deleted one failing alone, credentials never written anywhere."""

from __future__ import annotations

import gzip
import json
import shutil
import sys
import tempfile
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from contam_assets.testing.pool_formats import contam, docs, jsonl_and_parquet_pool, tasks_dir
from contam_assets.testing.s3_server import s3_bucket, s3_client, s3_server, upload_folder

SECRET = "s3cr3t-never-written-7f3a9c"
BUCKET = "contam-bucket"


@pytest.fixture(scope="module")
def s3(tmp_path_factory, shared_data):
    with s3_bucket(BUCKET, secret=SECRET) as (env, client):
        tmp = tmp_path_factory.mktemp("s3")
        pool = jsonl_and_parquet_pool(tmp / "pool", shared_data)
        upload_folder(client, pool, BUCKET, "pool")
        tasks = tasks_dir(tmp / "tasks")
        run = {}
        for name, spec, out in (("local", pool, tmp / "out-local"), ("s3", f"s3://{BUCKET}/pool", tmp / "out-s3"),
                                ("s3out", f"s3://{BUCKET}/pool", f"s3://{BUCKET}/results/run1")):
            run[name] = contam("detect", "--pool", spec, "--out", out, "--benchmarks", shared_data, "--tasks-dir",
                               tasks, env_extra={**env, "DAGSTER_HOME": str(tmp / f"home-{name}"),
                                                 "CONTAM_WORK_DIR": str(tmp / "work")})
        yield dict(env=env, client=client, tmp=tmp, run=run, tasks=tasks, pool=pool)


def rows(out, sql):
    with duckdb.connect(str(out / "contam.duckdb"), read_only=True) as con:
        return con.execute(sql).fetchall()


rows_of = rows


def test_an_s3_pool_gives_the_tables_and_mix_of_the_local_run(s3):
    local, remote = s3["run"]["local"], s3["run"]["s3"]
    assert local.returncode == 0, local.stderr[-2000:]
    assert remote.returncode == 0, remote.stdout[-2000:] + remote.stderr[-2000:]
    assert "shards 2  documents read 11  removed 4  kept 7  rejected 0" in remote.stdout
    lo, ro = s3["tmp"] / "out-local", s3["tmp"] / "out-s3"
    for sql in ("select shard, line, doc_id, reason from removals order by all",
                "select shard, read, removed, kept, rejected, bytes from shard_stats order by shard",
                "select shard, line, task, split, instance_index, score, flagged from matches order by all"):
        assert rows(ro, sql) == rows(lo, sql), sql
    assert sorted(d for (d,) in rows(ro, "select doc_id from removals")) == ["p-a-0", "p-a-1", "p-b-0", "p-b-1"]
    assert pq.read_table(ro / "mix" / "web" / "b.parquet").equals(pq.read_table(lo / "mix" / "web" / "b.parquet"))
    assert (ro / "mix" / "a.jsonl").read_bytes() == (lo / "mix" / "a.jsonl").read_bytes()


def test_decon_report_files_and_purified_copies_read_an_s3_pool_in_place(s3, shared_data, tmp_path):
    """decon's report files and purified copies of an S3 pool are those of the same pool in a local folder."""
    got = {}
    for name, spec in (("local", s3["pool"]), ("s3", f"s3://{BUCKET}/pool")):
        report, cleaned = tmp_path / name / "report", tmp_path / name / "cleaned"
        run = contam("detect", "--pool", spec, "--out", tmp_path / name / "out", "--benchmarks", shared_data,
                     "--tasks-dir", s3["tasks"], "--report-output-dir", report, "--purify", "--cleaned-output-dir",
                     cleaned, env_extra={**s3["env"], "DAGSTER_HOME": str(tmp_path / name / "home")})
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
        assert "Traceback" not in run.stderr
        got[name] = ({f.relative_to(report).as_posix(): f.read_text() for f in sorted(report.rglob("*")) if f.is_file()},
                     {f.relative_to(cleaned).as_posix(): gzip.decompress(f.read_bytes()) for f in sorted(cleaned.rglob("*")) if f.is_file()})
    assert got["s3"] == got["local"]
    entries = [json.loads(line) for text in got["s3"][0].values() for line in text.splitlines() if line.startswith("{")]
    assert {(e["training_file"], e["training_line"]) for e in entries} >= {("a.jsonl", 0), ("a.jsonl", 1)}
    assert got["s3"][1], "no purified copy written"


def test_credentials_are_never_written(s3):
    remote = s3["run"]["s3"]
    assert SECRET not in remote.stdout + remote.stderr
    out = s3["tmp"] / "out-s3"
    for f in (p for p in out.rglob("*") if p.is_file()):
        assert SECRET.encode() not in f.read_bytes(), f


def test_an_object_changed_in_place_is_rescanned_by_its_etag(s3, shared_data, tmp_path):
    """The same size, other bytes: only the store's ETag tells; the changed object is scanned again and its mix
    rewritten, the unchanged one is not read.  A pool of its own under another prefix: the module's pool stays as
    the other tests compare it."""
    for f in sorted(p for p in s3["pool"].rglob("*") if p.is_file()):
        s3["client"].upload_file(str(f), BUCKET, f"pool-etag/{f.relative_to(s3['pool']).as_posix()}")
    out = tmp_path / "out"

    def detect():
        r = contam("detect", "--pool", f"s3://{BUCKET}/pool-etag", "--out", out, "--benchmarks", shared_data,
                   "--tasks-dir", s3["tasks"], env_extra={**s3["env"], "DAGSTER_HOME": str(tmp_path / "home")})
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        assert "shards 2  documents read 11  removed 4" in r.stdout
        return r

    detect()
    scans = "select shard, shard_fingerprint, mtime_ns from shard_scans order by shard"
    before = rows(out, scans)
    body = (s3["pool"] / "a.jsonl").read_bytes()
    assert body.count(b'"c-a-0"') == 1
    s3["client"].put_object(Bucket=BUCKET, Key="pool-etag/a.jsonl", Body=body.replace(b'"c-a-0"', b'"c-a-9"'))
    detect()
    after = rows(out, scans)
    assert after[1] == before[1] and after[0][0] == "a.jsonl" and after[0][1:] != before[0][1:], (before, after)
    mix = [json.loads(line)["id"] for line in (out / "mix" / "a.jsonl").read_text().splitlines()]
    assert "c-a-9" in mix and "c-a-0" not in mix
    assert not (out / "pool_mirror").exists()


def test_a_missing_bucket_or_prefix_is_one_line(s3, tmp_path):
    r = contam("detect", "--pool", "s3://no-such-bucket/pool", "--out", tmp_path / "out", env_extra=s3["env"])
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "contam detect: error: pool not found: s3://no-such-bucket/pool (no bucket 'no-such-bucket')"], r.stderr
    r = contam("detect", "--pool", f"s3://{BUCKET}/nothing-here", "--out", tmp_path / "out", env_extra=s3["env"])
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"contam detect: error: pool not found: s3://{BUCKET}/nothing-here"], r.stderr


def test_a_remote_out_receives_the_tables_the_mix_and_the_report(s3):
    r = s3["run"]["s3out"]
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "removed 4" in r.stdout and f"(and as Parquet: s3://{BUCKET}/results/run1/tables/)" in r.stdout
    keys = {o["Key"] for o in s3["client"].list_objects_v2(Bucket=BUCKET, Prefix="results/run1/")["Contents"]}
    for k in ("report.html", "run.json", "mix/a.jsonl", "mix/web/b.parquet",
              "tables/removals/shards/a.jsonl.parquet", "tables/matches/shards/a.jsonl.parquet",
              "tables/instances/part-0.parquet"):
        assert f"results/run1/{k}" in keys, k
    assert "results/run1/contam.duckdb" not in keys  # the database stays on the run's host
    # a reader takes tables/<table>/**/*.parquet: the per-shard parts hold the table's rows
    got = s3["tmp"] / "removals"
    for k in sorted(k for k in keys if k.startswith("results/run1/tables/removals/")):
        (got / k).parent.mkdir(parents=True, exist_ok=True)
        s3["client"].download_file(BUCKET, k, str(got / k))
    parts = [pq.read_table(f) for f in sorted(got.rglob("*.parquet"))]
    remote = sorted((r for t in parts for r in t.select(["shard", "line", "doc_id"]).to_pylist()),
                    key=lambda d: (d["shard"], d["line"]))
    local = [dict(shard=a, line=b, doc_id=c) for a, b, c in rows(s3["tmp"] / "out-local",
                                                                  "select shard, line, doc_id from removals order by shard, line")]
    assert remote == local
    for f in (p for p in (s3["tmp"] / "work").rglob("*") if p.is_file()):
        assert SECRET.encode() not in f.read_bytes(), f


def test_the_shard_sensor_lists_an_s3_pool_and_skips_a_missing_bucket_with_its_reason(s3, tmp_path, monkeypatch):
    """A tick lists the store (sizes and ETags) and reads nothing: no copy of the pool, no output folder made."""
    import dagster as dg

    from contam_assets.defs.data.sensors import new_shards_sensor
    from contam_assets.defs.resources import ContamSettings
    from contam_assets_tests.support.automation import instance

    for k, v in s3["env"].items():
        monkeypatch.setenv(k, v)
    inst = instance(tmp_path / "home")
    settings = ContamSettings(out_dir=str(tmp_path / "out"), pool_dir=f"s3://{BUCKET}/pool")
    r = new_shards_sensor(dg.build_sensor_context(instance=inst, resources={"contam_settings": settings}))
    assert sorted(r.dynamic_partitions_requests[0].partition_keys) == ["a.jsonl", "web/b.parquet"]
    assert settings.pool_path == f"s3://{BUCKET}/pool" and not (tmp_path / "out").exists()
    gone = ContamSettings(out_dir=str(tmp_path / "out2"), pool_dir="s3://no-such-bucket/pool")
    r = new_shards_sensor(dg.build_sensor_context(instance=inst, resources={"contam_settings": gone}))
    assert r.skip_reason and "no-such-bucket" in str(r.skip_reason) and not r.run_requests


def test_no_copy_of_the_pool_reaches_local_disk(s3, shared_data, tmp_path):
    """A pool whose largest shard is 24 MB (a Parquet file with a large column the scan does not read) beside a
    JSONL.zst shard: while the run goes, no file outside the mix (the run's output) in the output folder or the run's
    temporary folder reaches a quarter of that shard's size, and no mirror is made."""
    import threading

    import numpy as np
    import pyarrow as pa
    import zstandard

    rng = np.random.default_rng(1)
    pool = tmp_path / "pool"
    rows = docs(shared_data, "w", 2, 4, 130)
    (pool / "big").mkdir(parents=True)
    pq.write_table(pa.table({"id": [d["id"] for d in rows], "text": [d["text"] for d in rows],
                             "blob": [rng.bytes(4 << 20) for _ in rows]}), pool / "big" / "w.parquet", compression="none")
    (pool / "z.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(
        "".join(json.dumps(d) + "\n" for d in docs(shared_data, "z", 1, 3, 140)).encode()))
    for f in sorted(p for p in pool.rglob("*") if p.is_file()):
        s3["client"].upload_file(str(f), BUCKET, f"big-pool/{f.relative_to(pool).as_posix()}")
    largest = (pool / "big" / "w.parquet").stat().st_size
    assert largest > 24 << 20
    # a short temporary folder: a forkserver socket lives there, and AF_UNIX paths are limited to 108 bytes
    out, tmp = tmp_path / "out", Path(tempfile.mkdtemp(prefix="ct-", dir="/tmp"))
    tmp.mkdir(exist_ok=True)
    biggest, done = [0, ""], threading.Event()

    def watch():
        while not done.is_set():
            for folder in (out, tmp):
                for p in folder.rglob("*") if folder.exists() else ():
                    try:
                        size = p.stat().st_size if p.is_file() and "mix" not in p.relative_to(folder).parts else 0
                    except OSError:
                        continue
                    if size > biggest[0]:
                        biggest[:] = [size, str(p)]
            done.wait(0.05)

    t = threading.Thread(target=watch)
    t.start()
    try:
        r = contam("detect", "--pool", f"s3://{BUCKET}/big-pool", "--out", out, "--benchmarks", shared_data,
                   "--tasks-dir", s3["tasks"], env_extra={**s3["env"], "DAGSTER_HOME": str(tmp_path / "home"),
                                                          "TMPDIR": str(tmp)})
    finally:
        done.set()
        t.join()
        shutil.rmtree(tmp, ignore_errors=True)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert biggest[0] < largest / 4, biggest
    assert not (out / "pool_mirror").exists()
    assert sorted(d for (d,) in rows_of(out, "select doc_id from removals")) == ["p-w-0", "p-w-1", "p-z-0"]
    assert pq.read_table(out / "mix" / "big" / "w.parquet").column("id").to_pylist() == ["c-w-0", "c-w-1", "c-w-2", "c-w-3"]


def test_an_object_deleted_mid_run_fails_that_shard_in_one_line(s3, shared_data, tmp_path, monkeypatch, capsys):
    """The pool is listed and planned, then one object is deleted before the scan opens it: that shard fails with
    one line and a shard_errors row, the other is scanned and mixed."""
    from contam_assets.cli import main
    from contam_assets.executor import scan_plan

    for f in ("a.jsonl", "web/b.parquet"):
        s3["client"].upload_file(str(s3["pool"] / f), BUCKET, f"gone-pool/{f}")
    for k, v in {**s3["env"], "DAGSTER_HOME": str(tmp_path / "home")}.items():
        monkeypatch.setenv(k, v)
    real = scan_plan.plan_work

    def plan_then_delete(*args, **kwargs):
        got = real(*args, **kwargs)
        s3["client"].delete_object(Bucket=BUCKET, Key="gone-pool/web/b.parquet")
        return got

    monkeypatch.setattr(scan_plan, "plan_work", plan_then_delete)
    out = tmp_path / "out"
    rc = main(["detect", "--pool", f"s3://{BUCKET}/gone-pool", "--out", str(out), "--benchmarks", str(shared_data),
               "--tasks-dir", str(s3["tasks"])])
    text = capsys.readouterr()
    assert rc == 1, text.out[-2000:] + text.err[-2000:]
    why = f"ObjectGone: s3://{BUCKET}/gone-pool/web/b.parquet is gone from the store (deleted since the pool was listed)"
    assert rows_of(out, "select shard, step, message from shard_errors") == [("web/b.parquet", "scan", why)]
    assert f"FAILED web/b.parquet: scan: {why}" in text.out.splitlines()
    assert rows_of(out, "select shard, status from shard_stats order by shard") == [("a.jsonl", "ok"),
                                                                                   ("web/b.parquet", "failed")]
    assert (out / "mix" / "a.jsonl").is_file() and "Traceback" not in text.out + text.err


def test_a_node_without_the_pool_reads_its_shards_in_place_by_range_requests(s3, monkeypatch):
    """What a Ray node that shares no folder with the run does (jobs.run_shard_work_detached, here in this process):
    a JSONL shard streamed, a Parquet shard read by range requests — only its footer and the columns scanned come
    over the wire — and the same rows as the run's own scan."""
    import dataclasses
    import os
    import tempfile

    import numpy as np
    import pyarrow as pa
    import s3fs

    from contam_assets.defs.data.scan_plan import plan_work
    from contam_assets.defs.resources import ContamSettings, detect_config
    from contam_assets.executor.shard_work import run_shard_work_detached
    from contam_assets.rescan.plan import load_task_hashes
    from contam_assets.store import artifacts

    for k, v in s3["env"].items():
        monkeypatch.setenv(k, v)
    out = s3["tmp"] / "out-s3"
    settings = ContamSettings(out_dir=str(out), pool_dir=f"s3://{BUCKET}/pool", tasks_dir=str(s3["tasks"]))
    cfg = detect_config(settings)
    index, records, digest = artifacts.load_index(out)
    tasks_now = load_task_hashes(artifacts.index_dir(out, digest), records, cfg)
    jobs, _, failed = plan_work(settings, ["a.jsonl", "web/b.parquet"], cfg, digest, tasks_now, None, "full", {})
    assert not failed and all(j.source is not None for j in jobs)
    fetched = []
    real = s3fs.core.S3File._fetch_range
    monkeypatch.setattr(s3fs.core.S3File, "_fetch_range", lambda self, start, end: fetched.append(end - start) or real(self, start, end))
    read = {}
    for job in jobs:
        got = run_shard_work_detached(dataclasses.replace(job, path="/nonexistent"), index, records)
        read[job.shard] = got.stats["read"]
        want = rows(out, f"select line, instance_index, flagged from matches where shard = '{job.shard}' order by all")
        assert sorted(got.matches.select("line", "instance_index", "flagged").iter_rows()) == want and want, got.stats
    # a wide Parquet file: 6 MB of incompressible bytes beside a small text column
    rng = np.random.default_rng(0)
    wide = s3["tmp"] / "wide.parquet"
    pq.write_table(pa.table({"text": ["a clean line of text about the weather"] * 3,
                             "blob": [rng.bytes(2 << 20) for _ in range(3)]}), wide, compression="none")
    s3["client"].upload_file(str(wide), BUCKET, "pool/wide/w.parquet")
    fetched.clear()
    job = dataclasses.replace(jobs[1], shard="wide/w.parquet", path="/nonexistent", size=os.path.getsize(wide))
    got = run_shard_work_detached(job, index, records)
    assert got.stats["read"] == 3 and sum(fetched) < os.path.getsize(wide) / 10, (sum(fetched), os.path.getsize(wide))
    node_tmp = s3["tmp"] / "node_tmp"  # the node's temporary folder: nothing is written there, refused or not
    node_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(node_tmp))
    for changed in (job, dataclasses.replace(jobs[0], path="/nonexistent")):  # Parquet and JSONL, in place
        with pytest.raises(OSError, match=f"{changed.shard}: {changed.size} bytes in the store, {changed.size + 1} when"):
            run_shard_work_detached(dataclasses.replace(changed, size=changed.size + 1), index, records)
    again = run_shard_work_detached(dataclasses.replace(jobs[0], path="/nonexistent"), index, records)
    assert again.stats["read"] == read[jobs[0].shard] > 0
    assert list(node_tmp.iterdir()) == []


def test_the_review_text_and_the_estimate_blocks_read_the_store_in_place(s3, tmp_path, monkeypatch):
    """The review page's raw text and the estimate's sampled blocks of an S3 pool: read from the store by the same
    open as the scan, and the same as from the local copy of the pool."""
    from contam_assets.estimate import blocks, design
    from contam_assets.report.raw_text import read_lines
    from contam_assets.store.location import resolve
    from contam_assets.store.pool import list_pool

    for k, v in s3["env"].items():
        monkeypatch.setenv(k, v)
    root = resolve(f"s3://{BUCKET}/pool").read_root
    listing = list_pool(root)
    shards = ["a.jsonl", "web/b.parquet"]
    assert set(shards) <= set(listing.shards)
    for shard in shards:
        assert read_lines(root, shard, {0, 2}) == read_lines(s3["pool"], shard, {0, 2}) != {}
    units = design.block_units(shards, listing.paths, 256)
    assert {u.kind for u in units} == {"bytes", "row_group"} and len(units) > 2
    for u in units:
        blocks.cut(u, listing.paths[u.shard], tmp_path / "remote")
        blocks.cut(u, s3["pool"] / u.shard, tmp_path / "local")
        assert (tmp_path / "remote" / u.key).read_bytes() == (tmp_path / "local" / u.key).read_bytes(), u.key


def test_a_new_endpoint_in_the_same_process_gets_its_own_filesystem(monkeypatch):
    """fsspec caches a filesystem by its constructor's arguments only: a second S3 endpoint set later in the same
    process (another server, new credentials) must not reach the first one's instance."""
    from contam_assets.store.location import filesystem

    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    first = filesystem("s3")
    assert filesystem("s3") is first
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:2")
    second = filesystem("s3")
    assert second is not first and filesystem("s3") is second


def test_each_s3_server_starts_empty():
    """moto keeps buckets per process, not per server: a later module's server must not list an earlier one's
    objects (it did, and a Ray test read this module's pool along with its own)."""
    with s3_server() as env:
        s3_client(env).create_bucket(Bucket="left-behind")
        s3_client(env).put_object(Bucket="left-behind", Key="pool/a.jsonl", Body=b"{}\n")
    with s3_server() as env:
        assert s3_client(env).list_buckets()["Buckets"] == []


def test_without_moto_the_s3_server_fails_with_one_line(monkeypatch):
    """moto and boto3 are dev extras: contam_assets.testing imports them inside the functions, and a missing one is
    one line naming the package and the extra."""
    monkeypatch.setitem(sys.modules, "moto.server", None)
    with pytest.raises(ModuleNotFoundError) as e:
        with s3_server():
            pass
    assert str(e.value) == "moto.server is not installed (moto comes with the dev extra: pip install -e '.[dev]')"
    monkeypatch.setitem(sys.modules, "boto3", None)
    with pytest.raises(ModuleNotFoundError, match=r"^boto3 is not installed \(boto3 comes with the dev extra: [^\n]*\)$"):
        s3_client({"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"})

