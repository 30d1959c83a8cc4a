"""A remote --out written as the run goes (store/outbox.py), on the loopback S3-protocol server: each shard's mix
object is on the store before the next shard's mix is done and its local copy is gone, the database stays local,
run.json is the last object written, a refused upload ends the run with one line naming the object and leaves the
previous run.json, and progress lines come at a bounded rate (executor/progress.py)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time

import duckdb
import pyarrow.parquet as pq
import pytest
import zstandard

from contam_assets.executor.progress import RunProgress
from contam_assets.testing.pool_formats import contam, docs, tasks_dir, write_jsonl, write_parquet
from contam_assets.testing.s3_server import s3_bucket

BUCKET = "out-bucket"
LINES = 5000  # a JSONL shard's kept lines: the mix_write point is passed once per shard (every 4096 lines)


def _keys(client, prefix: str) -> set[str]:
    got = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    return {o["Key"][len(prefix):] for o in got}


@pytest.fixture(scope="module")
def s3(tmp_path_factory, shared_data):
    with s3_bucket(BUCKET) as (env, client):
        tmp = tmp_path_factory.mktemp("out-streamed")
        pool = tmp / "pool"
        write_jsonl(pool / "a.jsonl", docs(shared_data, "a", 2, LINES, 100))
        with open(pool / "a.jsonl", "a") as fh:
            fh.write("{not json\n")  # a rejected line: a.jsonl gets a rejected file
        write_jsonl(tmp / "b.jsonl", docs(shared_data, "b", 2, LINES, 110))
        (pool / "b.jsonl.zst").write_bytes(zstandard.compress((tmp / "b.jsonl").read_bytes()))
        write_parquet(pool / "c.parquet", docs(shared_data, "c", 2, 30, 120))
        yield dict(env=env, client=client, tmp=tmp, pool=pool, tasks=tasks_dir(tmp / "tasks"), shared=shared_data)


def _args(s3, out, home):
    return ["detect", "--pool", s3["pool"], "--out", out, "--benchmarks", s3["shared"], "--tasks-dir", s3["tasks"]]


def _env(s3, name, **extra):
    return {**s3["env"], "DAGSTER_HOME": str(s3["tmp"] / f"home-{name}"), "CONTAM_WORK_DIR": str(s3["tmp"] / f"work-{name}"),
            **extra}


def _held(s3, out, marker, env_extra) -> subprocess.Popen:
    """`contam detect` to ``out`` started with a fault hold (CONTAM_FAULT_HOLD=``marker``), once it holds there."""
    proc = subprocess.Popen([sys.executable, "-m", "contam_assets.cli", *map(str, _args(s3, out, None))],
                            env={**os.environ, **env_extra}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    if not marker.exists():
        ended = proc.poll() is not None
        proc.kill()
        stderr = proc.communicate()[1]
        pytest.fail(stderr[-2000:] if ended else "never held")
    return proc


def test_each_mix_object_is_on_the_store_before_the_next_shard_is_mixed_and_a_rerun_finishes(s3):
    """Per-shard runs; the run is held in the second shard's mix: the first shard's mix object is on the store (its
    local copy removed), no later one is, and no run.json yet.  Killed there and rerun: every output, run.json last."""
    out, prefix = f"s3://{BUCKET}/run1", "run1/"
    marker = s3["tmp"] / "held.pid"
    proc = _held(s3, out, marker, _env(s3, "run1", CONTAM_DETECT_RUNS="per-shard", CONTAM_SCAN_WORKERS="1",
                                       CONTAM_FAULT="mix_write:2", CONTAM_FAULT_HOLD=str(marker)))
    try:
        keys = _keys(s3["client"], prefix)
        assert "mix/a.jsonl" in keys and "rejected/a.jsonl.jsonl" in keys, keys
        assert not any(k.startswith("mix/b") or k.startswith("mix/c") for k in keys), keys
        # its table rows went with it, as Parquet parts (store/table_parts.py); none of a later shard's
        for t in ("removals", "shard_stats", "mix_stats", "matches"):
            assert f"tables/{t}/shards/a.jsonl.parquet" in keys, (t, keys)
        assert not any(k.startswith("tables/") and "/shards/b" in k for k in keys), keys
        assert "run.json" not in keys and "contam.duckdb" not in keys, keys
        work = s3["tmp"] / "work-run1"
        assert not list(work.rglob("mix/a.jsonl")) and not list(work.rglob("rejected/a.jsonl.jsonl"))
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
    r = contam(*_args(s3, out, None), env_extra=_env(s3, "run1", CONTAM_DETECT_RUNS="per-shard"))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    keys = _keys(s3["client"], prefix)
    for k in ("mix/a.jsonl", "mix/b.jsonl.zst", "mix/c.parquet", "rejected/a.jsonl.jsonl", "report.html", "run.json",
              "tables/removals/shards/b.jsonl.zst.parquet", "tables/mix_stats/shards/c.parquet.parquet",
              "tables/instances/part-0.parquet"):
        assert k in keys, k
    assert "contam.duckdb" not in keys  # the database stays on the run's host
    assert not any(k.startswith("tables/") and k.endswith("/part-0.parquet") and k.split("/")[1] in (
        "matches", "removals", "shard_stats", "shard_errors", "mix_stats", "cuts") for k in keys), keys
    work = s3["tmp"] / "work-run1"
    # the parts, read as one dataset per table, are the tables of the run's database, row for row
    db = next(work.rglob("contam.duckdb"))
    with duckdb.connect(str(db), read_only=True) as con:
        for t in ("matches", "removals", "shard_stats", "mix_stats"):
            parts = [pq.read_table(io.BytesIO(s3["client"].get_object(Bucket=BUCKET, Key=f"{prefix}{k}")["Body"].read()))
                     for k in sorted(keys) if k.startswith(f"tables/{t}/shards/")]
            got = sorted((tuple(r.values()) for p in parts for r in p.to_pylist()), key=repr)
            assert got == sorted(con.execute(f"select * from {t}").fetchall(), key=repr), t
    assert not [p for p in work.rglob("*") if p.is_file() and p.parent.name in ("mix", "rejected")]
    got = {o["Key"]: o["LastModified"] for o in s3["client"].list_objects_v2(Bucket=BUCKET, Prefix=prefix)["Contents"]}
    assert got[f"{prefix}run.json"] == max(got.values())  # the commit marker went last
    # the same codec as the pool's file: the zstd mix decompresses to the kept lines
    body = s3["client"].get_object(Bucket=BUCKET, Key=f"{prefix}mix/b.jsonl.zst")["Body"].read()
    lines = zstandard.ZstdDecompressor().decompressobj().decompress(body).decode().splitlines()
    assert len(lines) == LINES and all(json.loads(x)["id"].startswith("c-b-") for x in lines)
    s3["client"].download_file(BUCKET, f"{prefix}mix/c.parquet", str(s3["tmp"] / "c-mix.parquet"))
    assert sorted(pq.read_table(s3["tmp"] / "c-mix.parquet").column("id").to_pylist()) == sorted(
        f"c-c-{i}" for i in range(30))
    # an unchanged rerun verifies the uploaded mix from its records (nothing is local) and writes nothing again
    again = contam(*_args(s3, out, None), env_extra=_env(s3, "run1", CONTAM_DETECT_RUNS="per-shard"))
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert _keys(s3["client"], prefix) == keys


def test_a_refused_upload_is_one_line_naming_the_object_and_the_previous_run_json_stays(s3, monkeypatch):
    """The store refuses writes under mix/ (as a read-only policy would): exit non-zero, one line on stderr naming the
    object and the store's error, no traceback, nothing else published, the previous run.json in place."""
    from moto.s3 import models
    from moto.s3.exceptions import S3AccessDeniedError

    prefix = "denied/"
    s3["client"].put_object(Bucket=BUCKET, Key=f"{prefix}run.json", Body=b'{"previous": true}')

    def refuse(real):
        def call(self, bucket_name, key_name, *args, **kwargs):
            if key_name.startswith(f"{prefix}mix/"):
                raise S3AccessDeniedError()
            return real(self, bucket_name, key_name, *args, **kwargs)
        return call

    monkeypatch.setattr(models.S3Backend, "put_object", refuse(models.S3Backend.put_object))
    monkeypatch.setattr(models.S3Backend, "create_multipart_upload", refuse(models.S3Backend.create_multipart_upload))
    r = contam(*_args(s3, f"s3://{BUCKET}/denied", None), env_extra=_env(s3, "denied", CONTAM_DETECT_RUNS="ranged"))
    assert r.returncode != 0, r.stdout[-2000:]
    err = r.stderr.strip().splitlines()
    assert len(err) == 1, r.stderr
    assert err[0].startswith(f"contam detect: error: upload of s3://{BUCKET}/denied/mix/a.jsonl failed: "), err
    assert "Access Denied" in err[0], err
    assert "Traceback" not in r.stdout + r.stderr
    body = s3["client"].get_object(Bucket=BUCKET, Key=f"{prefix}run.json")["Body"].read()
    assert body == b'{"previous": true}'
    assert not any(k.startswith(("mix/", "tables/", "report")) for k in _keys(s3["client"], prefix))


def test_progress_lines_name_shards_bytes_rate_and_time_left_and_come_at_a_steady_rate(s3):
    """A ranged run with a line per shard allowed (progress_s 0): scan and mix lines on the terminal, at most one per
    shard each; with the default interval this short run says none."""
    r = contam(*_args(s3, f"s3://{BUCKET}/progress", None),
               env_extra=_env(s3, "progress", CONTAM_DETECT_RUNS="ranged", CONTAM_PROGRESS_S="0"))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    scan = [x for x in r.stdout.splitlines() if x.startswith("scan: ") and " shards, " in x]
    mix = [x for x in r.stdout.splitlines() if x.startswith("mix: ") and " shards, " in x]
    assert 1 <= len(scan) <= 3 and 1 <= len(mix) <= 3, r.stdout
    assert scan[0].startswith("scan: 1/3 shards, ") and " MB/s, " in scan[0] and " left" in scan[0], scan
    assert scan[-1].startswith("scan: 3/3 shards, ") and scan[-1].endswith("done"), scan
    quiet = contam(*_args(s3, f"s3://{BUCKET}/quiet", None), env_extra=_env(s3, "quiet", CONTAM_DETECT_RUNS="ranged"))
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert not [x for x in quiet.stdout.splitlines() if x.startswith(("scan: ", "mix: ")) and " shards, " in x]


def test_progress_is_at_most_one_line_per_interval():
    """10,000 shards of 1 MB finishing over 1,000 s of a clock: a line every 60 s at most, plus the closing one."""
    tenths = [0]
    said: list[str] = []
    p = RunProgress("scan", {f"s{i}": 1_000_000 for i in range(10_000)}, said.append, every=60,
                    clock=lambda: tenths[0] / 10)
    for i in range(10_000):
        tenths[0] += 1
        p.shard_done(f"s{i}")
    p.close()
    assert len(said) == 17, said  # at 60, 120, ..., 960 s, and the closing line
    assert said[0] == "scan: 600/10,000 shards, 600.0 MB read of 10.00 GB, 10.0 MB/s, 1m00s elapsed, about 15m40s left"
    assert said[-1].startswith("scan: 10,000/10,000 shards, 10.00 GB read of 10.00 GB") and said[-1].endswith("done")


def test_the_streamed_output_benchmark_runs_as_documented():
    """docs/pools.md's command, as written (a tiny pool): the run to the store removes what the local run removes,
    leaves one mix object per shard and no mix file in its work folder (the script checks), and says when the first
    mix object and run.json reached the store, and that a run killed at half and rerun leaves the same outputs; the
    token cache study runs each value three times."""
    import shutil

    from contam_assets_tests.support.doc_commands import ROOT, clean_env, command

    cmd = command("docs/pools.md", "python benchmarks/store_streamed.py")
    shutil.rmtree("/tmp/contam-streamed", ignore_errors=True)
    env = clean_env()
    r = subprocess.run(["bash", "-c", cmd], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads(r.stdout[r.stdout.index("{"):])
    assert res["shards"] == 3 and res["removed"] > 0
    assert res["first_mix_object_s"] is not None and res["run_json_s"] is not None
    assert res["first_mix_object_s"] <= res["run_json_s"]
    # the server's ceiling: every pool byte was sent at least once (each object GET), the outputs it took hold the
    # mix, rejected and table objects put again in the bare transfer, and the best time is the local run plus those
    roof = res["ceiling"]
    assert roof["pool_gets"] >= 3 and roof["reads_per_stored_byte"] >= 1
    assert min(roof["reads_per_stored_byte_by_object"]) >= 1
    assert roof["pool_bytes_sent_mb"] >= res["stored_mb"] - 0.1
    assert 0 < roof["put_mb"] <= roof["out_bytes_taken_mb"] and roof["put_objects"] >= 3
    assert roof["best_remote_s"] == pytest.approx(res["local_s"] + roof["get_s"] + roof["put_s"], abs=0.02)
    assert roof["of_ceiling"] == pytest.approx(roof["best_remote_s"] / res["store_out_s"], abs=0.002)
    assert roof["run_server_cpu_s"] > 0
    # killed at half and rerun: the same mix and rejected objects and table rows as the uninterrupted run (the script
    # fails otherwise)
    kill = res["kill_at_half"]
    assert kill["identical_objects_and_tables"] >= 3 + 4 and kill["killed_at_s"] < kill["total_s"]
    # where a remote pool's token streams live: nowhere by default (an added task rescans every shard from its text),
    # in the work folder with CONTAM_TOKEN_CACHE=on (an added task is scanned from the streams)
    study = res["token_cache"]
    assert sorted(study) == ["default", "on"]
    assert [study["default"][step]["cache_mb"] for step in ("first", "unchanged", "task_added")] == [0.0, 0.0, 0.0]
    assert study["default"]["task_added"]["modes"] == {"full": 3}
    assert all(study["on"][step]["cache_mb"] > 0 for step in ("first", "unchanged", "task_added"))
    assert study["on"]["task_added"]["modes"] == {"incremental": 3}
    assert study["on"]["cache_files"] == 12  # docs.bin, meta.json, rejects.jsonl and tokens.bin of each shard


def test_an_upload_retries_a_transient_error_and_names_the_object_of_a_refused_one(tmp_path, monkeypatch):
    """outbox.upload on memory://: a connection reset on the first try is retried with back-off and the object
    arrives whole (the local copy removed after); a refusal is not retried and is one line naming the object."""
    from contam_assets.store import location, outbox

    monkeypatch.setattr(location, "BACKOFF_S", 0.01)
    loc = location.resolve("memory://streamed-out/run", "out", must_exist=False)
    fs = loc.filesystem()
    real_open, calls = fs.open, []

    def flaky(path, mode="rb", **kw):
        calls.append(path)
        if "w" in mode and path.endswith("a.jsonl") and len(calls) == 1:
            raise ConnectionResetError("connection reset by peer")
        if "w" in mode and "refused" in path:
            raise PermissionError("Access Denied")
        return real_open(path, mode, **kw)

    monkeypatch.setattr(fs, "open", flaky)
    src = tmp_path / "a.jsonl"
    src.write_bytes(b'{"text": "kept"}\n' * 1000)
    assert outbox.upload(loc, src, "mix/a.jsonl", remove=True) == 17_000
    assert len(calls) == 2 and not src.exists()
    with real_open(loc.url("mix/a.jsonl"), "rb") as fh:
        assert fh.read() == b'{"text": "kept"}\n' * 1000
    src.write_bytes(b"x\n")
    calls.clear()
    with pytest.raises(outbox.UploadError) as err:
        outbox.upload(loc, src, "mix/refused.jsonl", remove=True)
    assert str(err.value) == f"upload of {loc.url('mix/refused.jsonl')} failed: PermissionError: Access Denied"
    assert len(calls) == 1 and src.exists()  # not retried; the local copy kept for the rerun


def test_each_shard_is_mixed_as_its_scan_is_written_and_the_objects_are_the_local_runs_bytes(s3):
    """One run for the whole pool, held where the report is written (after every scan, before the mix step): each
    shard's mix object, rejected lines and table parts are on the store already (mixed as its scan rows were written,
    executor/mix.MixAsScanned), run.json is not.  Killed there and rerun, the mix step verifies those objects and
    writes none again; they are byte for byte the mix a local output gets from its mix step."""
    out, prefix = f"s3://{BUCKET}/asscanned", "asscanned/"
    marker = s3["tmp"] / "held-report.pid"
    proc = _held(s3, out, marker, _env(s3, "asscanned", CONTAM_FAULT="report_write", CONTAM_FAULT_HOLD=str(marker)))
    try:
        held = {o["Key"][len(prefix):]: (o["ETag"], o["LastModified"])
                for o in s3["client"].list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])}
        for k in ("mix/a.jsonl", "mix/b.jsonl.zst", "mix/c.parquet", "rejected/a.jsonl.jsonl",
                  "tables/mix_stats/shards/a.jsonl.parquet", "tables/removals/shards/b.jsonl.zst.parquet"):
            assert k in held, (k, sorted(held))
        assert "run.json" not in held and "report.html" not in held, sorted(held)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
    r = contam(*_args(s3, out, None), env_extra=_env(s3, "asscanned"))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    after = {o["Key"][len(prefix):]: (o["ETag"], o["LastModified"])
             for o in s3["client"].list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])}
    assert "run.json" in after
    mixed = [k for k in held if k.startswith(("mix/", "rejected/"))]
    assert {k: after[k] for k in mixed} == {k: held[k] for k in mixed}  # verified, not uploaded again
    local = s3["tmp"] / "out-local-asscanned"
    r = contam("detect", "--pool", s3["pool"], "--out", local, "--benchmarks", s3["shared"], "--tasks-dir", s3["tasks"],
               env_extra={"DAGSTER_HOME": str(s3["tmp"] / "home-local-asscanned")})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    for k in mixed:
        body = s3["client"].get_object(Bucket=BUCKET, Key=prefix + k)["Body"].read()
        assert body == (local / k).read_bytes(), k


def test_a_mix_that_raises_during_the_scan_is_one_warning_and_leaves_the_rest_to_the_mix_step(monkeypatch, tmp_path):
    """Mixing in the scan step must not fail the scan: an error other than the store's (a locked database, say) is
    one warning line, and no shard is mixed there after it (the mix step writes them)."""
    from contam_assets.executor import mix

    calls, warned = [], []

    def raises(connect, out, pool_dir, shards, *rest, **kw):
        calls.append(list(shards))
        raise RuntimeError("database is locked\nsecond line")

    monkeypatch.setattr(mix, "write_mix", raises)
    mixer = mix.MixAsScanned(None, tmp_path / "out", tmp_path / "pool", "document", None, "text", None, warn=warned.append)
    mixer.add("a.jsonl")
    mixer.drain()
    mixer.add("b.jsonl")
    mixer.drain()
    assert calls == [["a.jsonl"]] and mixer.stopped and mixer.ready == []
    assert len(warned) == 1 and "database is locked" in warned[0] and "second line" not in warned[0]
