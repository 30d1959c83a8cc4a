"""The commands docs/pools.md shows, run exactly as written: a glob of Parquet files, and an S3 pool written back
to S3 (moto's S3-protocol server on loopback)."""

from __future__ import annotations

import os
import subprocess

import pyarrow.parquet as pq

from contam_assets.testing.bad_pool import FILLER, humaneval_copies
from contam_assets.testing.pool_formats import write_parquet
from contam_assets.testing.s3_server import s3_client, s3_server
from contam_assets_tests.support.doc_commands import command


def host_rows() -> list[dict]:
    """HumanEval copies (the embedded default indexes HumanEval) among clean rows, FineWeb's columns."""
    rows = [{"id": f"p{i}", "text": t, "url": f"https://example.org/p{i}", "dump": "CC-MAIN-2024-10"}
            for i, t in enumerate(humaneval_copies(3))]
    return rows + [{"id": f"c{i}", "text": f"{i}: " + FILLER * 3, "url": f"https://example.org/c{i}",
                    "dump": "CC-MAIN-2024-10"} for i in range(5)]


def bash(cmd: str, cwd, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=900)


def test_the_pools_page_commands_run_as_written(tmp_path):
    write_parquet(tmp_path / "pool" / "CC-MAIN-2024-10" / "000_00000.parquet", host_rows())
    r = bash(command("docs/pools.md", "contam detect --pool 'pool/"), tmp_path, {"DAGSTER_HOME": str(tmp_path / "h1")})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "removed 3" in r.stdout
    mix = pq.read_table(tmp_path / "out-parquet" / "mix" / "CC-MAIN-2024-10" / "000_00000.parquet")
    assert mix.column("id").to_pylist() == [f"c{i}" for i in range(5)]

    with s3_server(key="k", secret="s") as aws:
        env = {**aws, "DAGSTER_HOME": str(tmp_path / "h2"), "CONTAM_WORK_DIR": str(tmp_path / "work")}
        client = s3_client(env)
        client.create_bucket(Bucket="my-bucket")
        client.upload_file(str(tmp_path / "pool" / "CC-MAIN-2024-10" / "000_00000.parquet"), "my-bucket",
                           "fineweb/data/CC-MAIN-2024-10/000_00000.parquet")
        r = bash(command("docs/pools.md", "contam detect --pool s3://"), tmp_path, env)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        assert "removed 3" in r.stdout
        keys = {o["Key"] for o in client.list_objects_v2(Bucket="my-bucket", Prefix="contam/run1/")["Contents"]}
        assert "contam/run1/mix/CC-MAIN-2024-10/000_00000.parquet" in keys
        assert "contam/run1/tables/removals/shards/CC-MAIN-2024-10/000_00000.parquet.parquet" in keys


def test_the_parquet_benchmark_runs_as_documented(tmp_path):
    import shutil

    from contam_assets_tests.support.doc_commands import ROOT, clean_env

    cmd = command("docs/pools.md", "python benchmarks/parquet_vs_jsonl.py")
    shutil.rmtree("/tmp/contam-pvj", ignore_errors=True)
    env = clean_env()
    r = subprocess.run(["bash", "-c", cmd], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert '"parquet_speed_vs_jsonl"' in r.stdout and '"planted_removed"' in r.stdout and '"s3_speed_vs_local"' in r.stdout
