"""Object keys that are no safe local path, in an S3 pool (moto's server on loopback): every key ends as exactly one
row, read (`shard_stats`) or skipped with its reason (`pool_skips`), in the summary and the report; a key with a part
too long for a local file name is read in place and shown as its key, the files made from it bounded."""

from __future__ import annotations

import json

import duckdb
import pytest

from contam_assets.store.location import resolve
from contam_assets.store.mirror import NAME_MAX_BYTES, local_rel
from contam_assets.store.pool import list_pool
from contam_assets.testing.pool_formats import contam, docs, tasks_dir
from contam_assets.testing.s3_server import s3_client, s3_server

BUCKET = "keys-bucket"
LONG = "long/" + "x" * 300 + ".jsonl"  # a 306-character part: no local file system takes it as a name
LONG_TWIN = "long/" + "y" * 300 + ".jsonl"  # its bounded name is planted as a key of its own: not read
# key (under pool/) -> the reason it is skipped, or None: read
KEYS = {
    "ok/a.jsonl": None,
    LONG: None,
    "d/x.jsonl": None,
    local_rel(LONG_TWIN): None,
    LONG_TWIN: "its bounded local name is another key's",
    "a/../b.jsonl": "a key with an empty, '.' or '..' part",
    "a//b.jsonl": "a key with an empty, '.' or '..' part",
    "d": "a key that is also the folder of other keys",
    ".meta/x.jsonl": "hidden",
    "notes.txt": "not a pool file",
}


def _body(shared_data, tag: str, copies: int, start: int) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in docs(shared_data, tag, copies, 2, start)).encode()


@pytest.fixture(scope="module")
def run(tmp_path_factory, shared_data):
    with s3_server() as env:
        client = s3_client(env)
        client.create_bucket(Bucket=BUCKET)
        for i, key in enumerate(KEYS):
            client.put_object(Bucket=BUCKET, Key=f"pool/{key}", Body=_body(shared_data, f"k{i}", 1 + (key == LONG), 10 * i))
        listed = {o["Key"].removeprefix("pool/") for o in client.list_objects_v2(Bucket=BUCKET, Prefix="pool/")["Contents"]}
        assert listed == set(KEYS)  # the store holds every planted key as written
        tmp = tmp_path_factory.mktemp("keys")
        args = ("detect", "--pool", f"s3://{BUCKET}/pool", "--out", tmp / "out", "--benchmarks", shared_data,
                "--tasks-dir", tasks_dir(tmp / "tasks"))
        r = contam(*args, env_extra={**env, "DAGSTER_HOME": str(tmp / "home")})
        yield tmp / "out", r, env


def rows(out, sql):
    with duckdb.connect(str(out / "contam.duckdb"), read_only=True) as con:
        return con.execute(sql).fetchall()


def test_every_key_is_one_row_read_or_skipped_with_its_reason(run):
    out, r, _ = run
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    read = {s for (s,) in rows(out, "select shard from shard_stats")}
    skipped = dict(rows(out, "select path, reason from pool_skips"))
    assert not read & set(skipped)
    assert read | set(skipped) == set(KEYS)
    assert read == {k for k, why in KEYS.items() if why is None}
    for key, why in KEYS.items():
        if why is not None:
            assert skipped[key].startswith(why), (key, skipped[key])
            assert f"skipped {key}: {skipped[key]}" in r.stdout, key
    n_read, n_skipped = len(read), len(skipped)
    assert (f"{len(KEYS)} pool file(s) listed, {n_read} ok, 0 incomplete, 0 failed, {n_skipped} skipped"
            in r.stdout), r.stdout[-2000:]
    assert json.loads((out / "run.json").read_text())["files"] == dict(
        listed=len(KEYS), ok=n_read, incomplete=0, failed=0, skipped=n_skipped)
    page = (out / "report.html").read_text()
    assert f"{len(KEYS)} pool file(s) listed, {n_read} ok, 0 incomplete, 0 failed, {n_skipped} skipped" in page


def test_a_key_too_long_for_a_file_name_is_read_and_shown_as_its_key(run):
    out, r, _ = run
    assert rows(out, f"select read, removed, status from shard_stats where shard = '{LONG}'") == [(4, 2, "ok")]
    assert sorted(d for (d,) in rows(out, f"select doc_id from removals where shard = '{LONG}'")) == ["p-k1-0", "p-k1-1"]
    mix = out / "mix" / local_rel(LONG)  # the mix file has the bounded name; its lines are the kept documents
    assert [json.loads(line)["id"] for line in mix.read_text().splitlines()] == ["c-k1-0", "c-k1-1"]
    assert "Traceback" not in r.stdout + r.stderr and "too long" not in r.stdout + r.stderr


def test_the_store_listing_gives_the_same_keys_again_and_nothing_is_copied(run, monkeypatch):
    out, _, env = run
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    root = resolve(f"s3://{BUCKET}/pool").read_root
    first, second = list_pool(root), list_pool(root)
    assert first.shards == second.shards and first.skipped == second.skipped and first.listed == second.listed
    assert set(first.shards) == {s for (s,) in rows(out, "select shard from shard_stats")}
    assert first.paths[LONG] == f"s3://{BUCKET}/pool/{LONG}"  # read in place under its key, never a local name
    assert not (out / "pool_mirror").exists()


def test_local_names_are_bounded_kept_apart_and_stable():
    a, b = "x" * 300 + ".jsonl.gz", "x" * 300 + "z.jsonl.gz"  # the same first 100 bytes
    assert local_rel(a) != local_rel(b) and local_rel(a) == local_rel(a)
    for name in (a, b, "é" * 150 + ".parquet"):
        got = local_rel(f"dir/{name}")
        assert got.startswith("dir/") and len(got.split("/")[1].encode()) <= NAME_MAX_BYTES
        assert got.endswith(".jsonl.gz" if "jsonl" in name else ".parquet")
    assert local_rel("web/part-0001.jsonl.gz") == "web/part-0001.jsonl.gz"  # a name that fits is its own


def test_a_copy_an_earlier_version_wrote_under_the_literal_name_is_removed(tmp_path):
    """A part of 201-255 bytes was once written as it was: once written under its bounded name, the literal copy
    (mix, rejected lines, mix state) goes, so out/mix never holds the shard twice."""
    from contam_assets.store import artifacts, mix_state
    from contam_assets.store.mirror import remove_literal

    shard = "web/" + "z" * 220 + ".jsonl"  # a part of 226 bytes: bounded now, literal before
    pool, out = tmp_path / "pool", tmp_path / "out"
    (pool / "web").mkdir(parents=True)
    (pool / local_rel(shard)).write_text('{"text": "a"}\n{"text": "b"}\n')
    old_mix, old_state = out / "mix" / shard, out / "mix_state" / f"{shard}.json"
    old_rej = out / "rejected" / f"{shard}.jsonl"
    for p in (old_mix, old_state, old_rej):
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("stale\n")
    res = artifacts.write_mix_shard(pool, out, shard, drop={0}, rejected=set())
    assert res["written"] == 1 and not old_mix.exists()
    assert [p.name for p in (out / "mix" / "web").iterdir()] == [local_rel(shard).split("/")[1]]
    mix_state.record(out, shard, {"k": 1}, {"written": 1}, artifacts.mix_path(out, pool, shard))
    assert not old_state.exists() and mix_state._path(out, shard).is_file()
    artifacts.write_rejects(out, shard, [])
    assert not old_rej.exists()
    lit = "web/" + "w" * 220 + ".jsonl"  # a local pool file under its literal name: its old mix copy goes too
    (pool / lit).write_text('{"text": "c"}\n')
    (out / "mix" / lit).write_text("stale\n")
    artifacts.write_mix_shard(pool, out, lit, drop=set(), rejected=set())
    assert not (out / "mix" / lit).exists() and artifacts.mix_path(out, pool, lit).read_text() == '{"text": "c"}\n'
    kept = out / "mix" / "web" / "plain.jsonl"
    kept.write_text("x\n")
    remove_literal(out / "mix", "web/plain.jsonl")  # a name that was never bounded: its own file, kept
    remove_literal(out / "mix", "web/" + "q" * 300 + ".jsonl")  # too long ever to have been written: nothing
    assert kept.read_text() == "x\n"
