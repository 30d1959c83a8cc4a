"""Where a pool read from a store keeps its token streams (the token_cache setting, store/token_cache.cache_root): by
default nowhere, so nothing of the pool's size reaches the run's local disk and an added task rescans its shards from
the text; `CONTAM_TOKEN_CACHE=on` keeps them in the work folder, and an added task is then scanned from them."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from contam_assets.store import token_cache
from contam_assets.testing.pool_formats import contam, jsonl_and_parquet_pool, tasks_dir
from contam_assets.testing.s3_server import s3_bucket, upload_folder

BUCKET = "cache-bucket"
ADDED = ('name = "gsmhard"\nkind = "qa"\n[fields]\nquestion = "input"\nanswer = "target"\n'
         '[[splits]]\nname = "test"\nfile = "gsmhard_v2.jsonl"\n')


def test_the_setting_decides_the_folder(tmp_path):
    out = tmp_path / "out"
    assert token_cache.cache_root("", out) == out / "token_cache"
    assert token_cache.cache_root("", out, remote_pool=True) is None
    assert token_cache.cache_root("on", out, remote_pool=True) == out / "token_cache"
    assert token_cache.cache_root(" ON ", out) == out / "token_cache"
    for off in ("off", "none", "0", "false", "OFF"):
        assert token_cache.cache_root(off, out) is None
        assert token_cache.cache_root(off, out, remote_pool=True) is None
    assert token_cache.cache_root(str(tmp_path / "shared"), out, remote_pool=True) == tmp_path / "shared"


@pytest.fixture(scope="module")
def store(tmp_path_factory, shared_data):
    with s3_bucket(BUCKET) as (env, client):
        tmp = tmp_path_factory.mktemp("cache")
        upload_folder(client, jsonl_and_parquet_pool(tmp / "pool", shared_data), BUCKET, "pool")
        one = tasks_dir(tmp / "tasks-one")
        two = tasks_dir(tmp / "tasks-two")
        (two / "gsmhard.toml").write_text(ADDED)
        yield dict(env=env, tmp=tmp, one=one, two=two)


def run_twice(store, shared_data, name: str, cache: str | None) -> tuple[Path, Path, list]:
    """The pool on the store to an output on the store, with one task, then with a task added; the work folder, the
    Dagster home and each run's shard_scans (shard, mode) after it."""
    work, home = store["tmp"] / f"work-{name}", store["tmp"] / f"home-{name}"
    env = {**store["env"], "DAGSTER_HOME": str(home), "CONTAM_WORK_DIR": str(work)}
    if cache is not None:
        env["CONTAM_TOKEN_CACHE"] = cache
    modes = []
    for tasks in (store["one"], store["two"]):
        r = contam("detect", "--pool", f"s3://{BUCKET}/pool", "--out", f"s3://{BUCKET}/out-{name}", "--benchmarks",
                   shared_data, "--tasks-dir", tasks, env_extra=env)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        assert "shards 2  documents read 11  removed 4" in r.stdout, r.stdout[-2000:]
        db = next(work.rglob("contam.duckdb"))
        with duckdb.connect(str(db), read_only=True) as con:
            modes.append(con.execute("select shard, mode from shard_scans order by shard").fetchall())
    return work, home, modes


def streams(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()
                  and "token_cache" in p.relative_to(folder).parts)


def test_a_remote_pool_keeps_no_token_stream_on_local_disk_and_rescans_an_added_task(store, shared_data):
    work, home, modes = run_twice(store, shared_data, "default", None)
    assert streams(work) == [] and streams(home) == []
    assert not any(p.name == "token_cache" for p in work.rglob("*"))
    # no stream to scan the added task from: the JSONL shard is read and tokenized again (Parquet always is)
    assert modes == [[("a.jsonl", "full"), ("web/b.parquet", "full")]] * 2


def test_token_cache_on_keeps_the_streams_in_the_work_folder_and_scans_an_added_task_from_them(store, shared_data):
    work, _, modes = run_twice(store, shared_data, "on", "on")
    [cache] = [p for p in work.rglob("token_cache") if p.is_dir()]
    names = sorted(p.relative_to(cache).parts[0] + "/" + p.name for p in cache.rglob("*") if p.is_file())
    assert names == ["a.jsonl/docs.bin", "a.jsonl/meta.json", "a.jsonl/rejects.jsonl", "a.jsonl/tokens.bin"]
    assert modes == [[("a.jsonl", "full"), ("web/b.parquet", "full")],
                     [("a.jsonl", "incremental"), ("web/b.parquet", "full")]]
