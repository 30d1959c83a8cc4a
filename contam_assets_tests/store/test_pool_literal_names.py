"""`*`, `?` and `[` select only where docs/pools.md says so: a local path that exists is that path, whatever its name
holds (a file `a?.jsonl`, a folder `we?rd`, a file `a[1].jsonl`), and a glob where none does; in a URL only `*`
selects, and an object key's `?` and `[` are its own characters.  Real files and keys named so, both sides."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import fsspec
import pytest

from contam_assets.store.location import LocationError, remote_files, resolve
from contam_assets.store.pool import list_pool

NAMES = ["a?.jsonl", "ab.jsonl", "ac.jsonl", "a[1].jsonl", "a1.jsonl", "we?rd/x.jsonl", "weird/y.jsonl",
         "we?rd/sub/z.jsonl"]


@pytest.fixture
def pool(tmp_path) -> Path:
    for name in NAMES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(json.dumps({"text": f"document of {name}"}) + "\n")
    return tmp_path


def shards(spec: str) -> list[str]:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a pattern the regex module reads as a nested set would warn
        loc = resolve(spec)
        return list_pool(Path(loc.root), False, loc.pattern).shards


@pytest.mark.parametrize("spec, want", [
    ("a?.jsonl", ["a?.jsonl"]),  # the file of that name, not ab/ac/a1 beside it
    ("a[1].jsonl", ["a[1].jsonl"]),  # the file of that name, not a1.jsonl
    ("we?rd", ["sub/z.jsonl", "x.jsonl"]),  # the folder of that name, not weird/
    ("we?rd/*.jsonl", ["x.jsonl"]),  # a glob under the folder of that name
])
def test_a_local_path_that_exists_is_that_path_whatever_its_name_holds(pool, spec, want):
    assert shards(str(pool / spec)) == want


@pytest.mark.parametrize("spec, want", [
    ("a[bc].jsonl", ["ab.jsonl", "ac.jsonl"]),
    ("*/*.jsonl", ["we?rd/x.jsonl", "weird/y.jsonl"]),
    ("**/z.jsonl", ["we?rd/sub/z.jsonl"]),
])
def test_a_local_path_that_does_not_exist_is_a_glob(pool, spec, want):
    assert shards(str(pool / spec)) == want


def test_a_question_mark_globs_where_no_file_has_that_name(pool):
    (pool / "a?.jsonl").unlink()
    assert shards(str(pool / "a?.jsonl")) == ["a1.jsonl", "ab.jsonl", "ac.jsonl"]
    with pytest.raises(LocationError, match=r"pool: no file matches .*/x\?\.jsonl$"):
        resolve(str(pool / "x?.jsonl"))


def test_detect_settings_read_the_file_named_with_a_question_mark(pool):
    """The run's own path: --pool through the CLI's settings to the listing the scan reads."""
    from contam_assets.cli import build_parser
    from contam_assets.commands.detect import settings_from_args

    s = settings_from_args(build_parser().parse_args(["detect", "--pool", str(pool / "a?.jsonl"),
                                                      "--out", str(pool.parent / "out")]))
    assert list_pool(s.pool_path, False, s.pool_pattern).shards == ["a?.jsonl"]


@pytest.fixture
def bucket():
    fs = fsspec.filesystem("memory")
    root = "/literal-names"
    for name in NAMES:
        fs.pipe(f"{root}/pool/{name}", b'{"text": "x"}\n')
    yield "memory://literal-names/pool"
    fs.rm(root, recursive=True)


@pytest.mark.parametrize("spec, want", [
    ("a?.jsonl", ["literal-names/pool/a?.jsonl"]),  # one key, as a single file is listed
    ("ab.jsonl", ["literal-names/pool/ab.jsonl"]),  # (the same for a plain name)
    ("a[1].jsonl", ["literal-names/pool/a[1].jsonl"]),
    ("we?rd", ["sub/z.jsonl", "x.jsonl"]),
    ("*?.jsonl", ["a?.jsonl"]),  # '*' selects, '?' is the key's own character
    ("a*.jsonl", ["a1.jsonl", "a?.jsonl", "a[1].jsonl", "ab.jsonl", "ac.jsonl"]),
    ("we?rd/*.jsonl", ["x.jsonl"]),
    ("**/z.jsonl", ["we?rd/sub/z.jsonl"]),
])
def test_in_a_url_only_the_star_selects(bucket, spec, want):
    assert sorted(remote_files(resolve(f"{bucket}/{spec}"))) == want
