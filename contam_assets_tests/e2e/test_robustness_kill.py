"""kill -9 at every stage of a run, and two runs at once: the re-run equals a clean run and leaves no temporary file.

CONTAM_FAULT=<point>[:<n>] (store/faults.py) makes `contam detect` SIGKILL itself the n-th
time it passes a point: building the reference set, saving the index, scanning a shard,
inside the transaction that writes a shard's rows, while writing a mix file, before the
report is renamed into place.
"""

from __future__ import annotations

import gzip
import hashlib
import signal
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
import zstandard

from contam_assets.store.compression import open_binary
from contam_assets.testing import bad_pool
from contam_assets_tests.e2e.test_cli_data import contam

POINTS = ["reference_build", "index_save", "scan:1", "scan:3", "table_write:1", "table_write:2", "mix_write:1",
          "report_write"]
VOLATILE = {"seconds", "scanned_at", "recorded_at", "listed_at", "retired_at", "decided_at", "built_at", "path", "stream_key"}


def build_pool(pool: Path) -> None:
    copies = bad_pool.humaneval_copies(5)
    pool.mkdir(parents=True)
    # 5,000 lines: several scan batches and more than one mix-write fault point in one shard
    (pool / "big.jsonl").write_bytes(bad_pool.jsonl([f"line {i} of a plain shard" for i in range(5000)] + copies[:2], "big"))
    (pool / "web.jsonl.gz").write_bytes(gzip.compress(bad_pool.jsonl(bad_pool.clean(30) + copies[2:4], "web")))
    (pool / "code.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(bad_pool.jsonl(bad_pool.clean(30) + copies[4:], "code")))


def dump(out: Path) -> dict:
    con = duckdb.connect(str(out / "contam.duckdb"), read_only=True)
    tables = {}
    for (t,) in con.execute("select table_name from information_schema.tables order by 1").fetchall():
        cols = [c[0] for c in con.execute(f"describe {t}").fetchall() if c[0] not in VOLATILE]
        tables[t] = con.execute(f"select {', '.join(cols)} from {t} order by all").fetchall()
    con.close()
    mix = {}
    for p in sorted((out / "mix").rglob("*")):
        if p.is_file():
            with open_binary(p) as fh:
                mix[p.relative_to(out).as_posix()] = hashlib.sha256(fh.read()).hexdigest()
    tables["_mix_files"] = mix
    return tables


def temporaries(out: Path) -> list[Path]:
    return [p for p in out.rglob("*") if ".tmp-" in p.name]


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kill")
    build_pool(tmp / "pool")
    r = contam("detect", "--pool", tmp / "pool", "--out", tmp / "clean", env_extra={"DAGSTER_HOME": str(tmp / "home-clean")})
    assert r.returncode == 0, r.stderr[-3000:]
    return tmp, dump(tmp / "clean")


@pytest.mark.parametrize("point", POINTS)
def test_a_kill_at_any_point_then_a_rerun_equals_a_clean_run(clean_run, point):
    tmp, want = clean_run
    out = tmp / f"out-{point.replace(':', '-')}"
    home = {"DAGSTER_HOME": str(tmp / f"home-{point.replace(':', '-')}")}
    r = contam("detect", "--pool", tmp / "pool", "--out", out, env_extra={**home, "CONTAM_FAULT": point})
    assert r.returncode == -signal.SIGKILL, (point, r.returncode, r.stdout[-1500:], r.stderr[-1500:])
    r = contam("detect", "--pool", tmp / "pool", "--out", out, env_extra=home)
    assert r.returncode == 0, (point, r.stdout[-2000:], r.stderr[-2000:])
    assert dump(out) == want, point
    assert not temporaries(out), temporaries(out)


def test_two_runs_at_once_on_a_fresh_output_folder(clean_run):
    tmp, want = clean_run
    out, home = tmp / "concurrent", str(tmp / "home-concurrent")
    cmd = [sys.executable, "-m", "contam_assets.cli", "detect", "--pool", str(tmp / "pool"), "--out", str(out)]
    import os

    env = {**os.environ, "DAGSTER_HOME": home}
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    results = [p.communicate(timeout=900) for p in procs]
    for p, (o, e) in zip(procs, results):
        assert p.returncode == 0, (o[-2000:], e[-3000:])
    assert dump(out) == want
    assert not temporaries(out)


def test_a_shard_that_left_the_pool_is_retired(clean_run, monkeypatch):
    tmp, _ = clean_run
    pool, out, home = tmp / "pool-retire", tmp / "retire", {"DAGSTER_HOME": str(tmp / "home-retire")}
    build_pool(pool)
    assert contam("detect", "--pool", pool, "--out", out, env_extra=home).returncode == 0
    assert (out / "mix" / "web.jsonl.gz").exists()
    (pool / "web.jsonl.gz").unlink()
    r = contam("detect", "--pool", pool, "--out", out, env_extra=home)
    assert r.returncode == 0 and "retired web.jsonl.gz" in r.stdout, r.stdout[-2000:]
    assert not (out / "mix" / "web.jsonl.gz").exists()
    con = duckdb.connect(str(out / "contam.duckdb"), read_only=True)
    for t in ("matches", "shard_stats", "removals", "mix_stats", "shard_scans"):
        assert con.execute(f"select count(*) from {t} where shard = 'web.jsonl.gz'").fetchone()[0] == 0, t
    assert con.execute("select matches, removals from retired_shards where shard = 'web.jsonl.gz'").fetchone() == (2, 2)
    con.close()
    assert "web.jsonl.gz" in (out / "report.html").read_text()
    import dagster as dg

    monkeypatch.setenv("DAGSTER_HOME", home["DAGSTER_HOME"])
    assert "web.jsonl.gz" not in dg.DagsterInstance.get().get_dynamic_partitions("shards")
