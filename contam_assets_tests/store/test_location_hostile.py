"""Hostile pool locations: a Hub cache snapshot whose link leads out of the cache, object keys that are no path
(a key that is also a folder, NUL, an empty part), credentials written into a URL.  Each is skipped and reported,
or refused in one line; none is read, read as another key, or shown with its secret."""

from __future__ import annotations

import json
import os
from pathlib import Path

import fsspec
import pytest

from contam_assets.defs.resources import ContamSettings
from contam_assets.store.location import LocationError, redact, resolve
from contam_assets.store.pool import check_shard, list_pool, read_shard
from contam_assets.testing.pool_formats import docs, write_jsonl

SECRET_TEXT = "outside-secret-row-4b1d9e never to be read"
SECRET_KEY = "se/cret+Wq9zK2v8Lm"  # an AWS secret access key may hold '/' and '+'


def hub_cache(root: Path, rows: list[dict], outside: Path) -> Path:
    """A Hub cache repository folder: refs/main, a blob, a snapshot with one link into blobs/ and one out."""
    base = root / "datasets--o--n"
    rev = "89abcdef0123456789abcdef0123456789abcdef"
    write_jsonl(base / "blobs" / "a1b2c3d4", rows)
    (base / "refs").mkdir()
    (base / "refs" / "main").write_text(rev)
    snap = base / "snapshots" / rev
    snap.mkdir(parents=True)
    (snap / "train.jsonl").symlink_to(os.path.relpath(base / "blobs" / "a1b2c3d4", snap))
    (snap / "leak.jsonl").symlink_to(outside)
    return base


def test_a_hub_cache_link_out_of_its_blobs_is_skipped_not_read(tmp_path, shared_data):
    outside = tmp_path / "elsewhere" / "secret.jsonl"
    write_jsonl(outside, [{"id": "s-1", "text": SECRET_TEXT}])
    rows = docs(shared_data, "hub", 1, 2, 40)
    settings = ContamSettings(pool_dir=str(hub_cache(tmp_path / "hub", rows, outside)), out_dir=str(tmp_path / "out"))
    assert settings.pool_location.hf_cache
    listing = list_pool(settings.pool_path, settings.follow_links, settings.pool_pattern)
    assert listing.shards == ["train.jsonl"]
    assert [(e.path, e.reason.split(" ")[0]) for e in listing.skipped] == [("leak.jsonl", "outside_pool")]
    got = [d.text for key in listing.shards for d in read_shard(listing.paths[key], key) if hasattr(d, "text")]
    assert got == [r["text"] for r in rows] and not any(SECRET_TEXT in t for t in got)
    # a scan asked for the shard by its key (check_shard, as the scan jobs do) refuses it too
    path, why = check_shard(settings.pool_path, "leak.jsonl", settings.follow_links)
    assert path is None and why.startswith("outside_pool")
    assert check_shard(settings.pool_path, "train.jsonl", settings.follow_links)[0] is not None


@pytest.fixture
def memory_store():
    fs = fsspec.filesystem("memory")
    saved = dict(fs.store), list(fs.pseudo_dirs)
    yield fs
    fs.store.clear()
    fs.store.update(saved[0])
    fs.pseudo_dirs[:] = saved[1]


def test_odd_object_keys_are_skipped_and_counted_never_a_traceback(memory_store, tmp_path):
    """The store's own listing: each key read in place or skipped with its reason; '/e/p//abs.jsonl' is never read
    as (or over) '/e/p/abs.jsonl'; control characters never shown raw; nothing written to local disk."""
    fs = memory_store
    fs.pipe_file("/e/p/ok.jsonl", b'{"text": "good one"}\n')
    fs.pipe_file("/e/p/abs.jsonl", b'{"text": "the other key"}\n')
    for key, text in (("/e/p/x", "file x"), ("/e/p/x/y.jsonl", "under x"), ("/e/p/a\x00b.jsonl", "nul"),
                      ("/e/p/\x1b]8;;http://x\x07l.jsonl", "escape"), ("/e/p//abs.jsonl", "empty part")):
        fs.store[key] = fsspec.implementations.memory.MemoryFile(fs, key, json.dumps({"text": text}).encode() + b"\n")
    loc = resolve("memory://e/p")
    listing = list_pool(loc.read_root)
    assert listing.shards == ["abs.jsonl", "ok.jsonl", "x/y.jsonl"]
    skipped = {e.path: e.reason for e in listing.skipped}
    assert skipped["x"] == "a key that is also the folder of other keys"
    for key in ("a\x00b.jsonl", "\x1b]8;;http://x\x07l.jsonl", "/abs.jsonl"):
        assert skipped[key].startswith("a key with an empty, '.' or '..' part, or a control character"), key
    texts = {k: [getattr(d, "text", d) for d in read_shard(listing.paths[k], k)] for k in listing.shards}
    assert {k: v for k, v in texts.items() if k != "x/y.jsonl"} == {"abs.jsonl": ["the other key"],
                                                                    "ok.jsonl": ["good one"]}
    # memory:// itself will not open 'x/y.jsonl' under the file 'x' (an S3 store would): a read error of that unit
    [failure] = texts["x/y.jsonl"]
    assert failure.kind == "read_error" and "FileExistsError" in failure.detail
    assert list(tmp_path.iterdir()) == []
    # the store changes: 'x/y.jsonl' goes and 'x' stays the only key there: it is no folder now, a file of no format
    del fs.store["/e/p/x/y.jsonl"]
    again = list_pool(loc.read_root)
    assert again.shards == ["abs.jsonl", "ok.jsonl"] and {e.path: e.reason for e in again.skipped}["x"].startswith(
        "not a pool file")


@pytest.mark.parametrize("spec", [f"s3://AKIAX:{SECRET_KEY}@bucket/x", "s3://AKIAX:plain@bucket/x",
                                  f"gs://user:{SECRET_KEY}@bucket/pool/*.jsonl"])
def test_credentials_in_a_url_are_refused_in_one_line_without_the_secret(spec):
    with pytest.raises(LocationError) as err:
        resolve(spec)
    msg = str(err.value)
    assert "credentials in a URL are not accepted: put them in the environment" in msg and len(msg.splitlines()) == 1
    assert "plain" not in msg and "cret" not in msg and "AKIAX" not in msg and "user" not in msg


def test_redact_cuts_a_password_with_a_slash_and_keeps_a_revision():
    assert redact(f"s3://AKIAX:{SECRET_KEY}@bucket/x") == "s3://***@bucket/x"
    assert redact("s3://AKIAX:p@ss@bucket/x") == "s3://***@bucket/x"
    assert redact("s3://token@bucket/x") == "s3://***@bucket/x"
    assert redact("hf://datasets/o/n@main/data") == "hf://datasets/o/n@main/data"
    assert redact("s3://bucket/x") == "s3://bucket/x" and redact("/a/b@c") == "/a/b@c"
