"""Counts that add up: every pool file of a hostile local pool ends in exactly one class — ok, incomplete, failed
(its stream broke before a line, or its scan raised) or skipped — and the summary line, run.json, the report,
the report's Dagster metadata and the DuckDB tables give the same numbers, listed = ok + incomplete + failed +
skipped.  The pool is drawn at random (seeded) from every kind of bad file at once, each kind at least once, and
scanned as a normal user would be (as root, with every capability dropped: a mode-000 file is unreadable)."""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
import zstandard

from contam_assets.testing.bad_pool import clean, humaneval_copies, jsonl

AS_USER = (["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--"]
           if os.geteuid() == 0 and shutil.which("setpriv") else [])
SEED = 48
BIG = 3000  # lines in a compressed file that breaks midway: some are read before the break


def _ok(pool: Path, name: str, i: int) -> None:
    (pool / name).write_bytes(jsonl(clean(3) + humaneval_copies(i % 3 + 1)[-1:], name))


def _invalid_json(pool: Path, name: str, i: int) -> None:
    (pool / name).write_bytes(jsonl(clean(2), name) + b"{not json\n[1, 2]\n\xff\xfe\n")


def _gzip(pool: Path, name: str, i: int) -> None:
    (pool / name).write_bytes(gzip.compress(jsonl(clean(4), name)))


def _truncated_gzip(pool: Path, name: str, i: int) -> None:
    data = gzip.compress(jsonl(clean(BIG), name))
    (pool / name).write_bytes(data[: len(data) // 2])


def _truncated_zstd(pool: Path, name: str, i: int) -> None:
    data = zstandard.ZstdCompressor().compress(jsonl(clean(BIG), name))
    (pool / name).write_bytes(data[: len(data) // 2])


def _plain_named_zst(pool: Path, name: str, i: int) -> None:
    (pool / name).write_bytes(jsonl(clean(3), name))


def _scan_raises(pool: Path, name: str, i: int) -> None:
    """A shard with rejected lines whose rejected-lines file in the output is taken by a folder: the scan's write of
    its rows raises (IsADirectoryError), for this shard only."""
    _invalid_json(pool, name, i)
    (pool.parent / "out" / "rejected" / f"{name}.jsonl" / "taken").mkdir(parents=True)


def _unreadable(pool: Path, name: str, i: int) -> None:
    (pool / name).write_bytes(jsonl(clean(2), name))
    os.chmod(pool / name, 0)


def _fifo(pool: Path, name: str, i: int) -> None:
    os.mkfifo(pool / name)


def _dangling(pool: Path, name: str, i: int) -> None:
    os.symlink(pool / f"missing-{i}.jsonl", pool / name)


def _hidden(pool: Path, name: str, i: int) -> None:
    (pool / name).write_bytes(jsonl(clean(2), name))


def _wrong_suffix(pool: Path, name: str, i: int) -> None:
    (pool / name).write_text("not a pool file\n")


# kind -> (how its file is named, what writes it, the class it must end in)
KINDS = {
    "ok": ("ok-{i}.jsonl", _ok, "ok"),
    "invalid_json": ("invalid-{i}.jsonl", _invalid_json, "ok"),
    "gzip": ("gz-{i}.jsonl.gz", _gzip, "ok"),
    "truncated_gzip": ("truncated-{i}.jsonl.gz", _truncated_gzip, "incomplete"),
    "truncated_zstd": ("truncated-{i}.jsonl.zst", _truncated_zstd, "incomplete"),
    "plain_named_zst": ("plain-{i}.jsonl.zst", _plain_named_zst, "failed"),
    "scan_raises": ("raises-{i}.jsonl", _scan_raises, "failed"),
    "unreadable": ("locked-{i}.jsonl", _unreadable, "skipped"),
    "fifo": ("fifo-{i}.jsonl", _fifo, "skipped"),
    "dangling_symlink": ("dangling-{i}.jsonl", _dangling, "skipped"),
    "hidden": (".hidden-{i}.jsonl", _hidden, "skipped"),
    "wrong_suffix": ("notes-{i}.txt", _wrong_suffix, "skipped"),
}


def build(tmp: Path, seed: int) -> dict[str, str]:
    """Each kind once, then as many again drawn at random; file name -> the class it must end in."""
    rng = random.Random(seed)
    kinds = list(KINDS) + [rng.choice(list(KINDS)) for _ in range(rng.randint(6, 12))]
    pool = tmp / "pool"
    pool.mkdir()
    want = {}
    for i, kind in enumerate(kinds):
        pattern, write, cls = KINDS[kind]
        name = pattern.format(i=i)
        write(pool, name, i)
        want[name] = cls
    return want


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("accounting")
    want = build(tmp, SEED)
    r = subprocess.run([*AS_USER, sys.executable, "-m", "contam_assets.cli", "detect", "--pool", tmp / "pool",
                        "--out", tmp / "out"], capture_output=True, text=True, timeout=900,
                       env={**os.environ, "DAGSTER_HOME": str(tmp / "home")})
    yield tmp, want, r
    for p in (tmp / "pool").iterdir():
        if not p.is_symlink():
            os.chmod(p, 0o644)


def expected(want: dict[str, str]) -> dict[str, int]:
    counts = {cls: sum(c == cls for c in want.values()) for cls in ("ok", "incomplete", "failed", "skipped")}
    return {"listed": len(want), **counts}


def test_every_file_is_one_row_with_its_class_in_the_tables(run):
    tmp, want, r = run
    assert "Traceback" not in r.stdout + r.stderr, r.stderr[-3000:]
    con = duckdb.connect(str(tmp / "out" / "contam.duckdb"), read_only=True)
    status = dict(con.execute("select shard, status from shard_stats").fetchall())
    errors = {s for (s,) in con.execute("select shard from shard_errors").fetchall()}
    skips = {p for (p,) in con.execute("select path from pool_skips").fetchall()}
    assert not set(status) & skips and set(status) | skips == set(want)
    got = {name: "skipped" if name in skips else status[name] for name in want}
    assert got == want
    assert errors == {n for n, c in want.items() if c == "failed" and n.startswith("raises-")}
    for name in errors:  # the scan that raised: its row says why, its counts are zero
        reason, read = con.execute("select status_reason, read from shard_stats where shard = ?", [name]).fetchone()
        assert reason.startswith("scan: writing its rows: IsADirectoryError") and read == 0


def test_the_summary_run_json_report_and_dagster_metadata_give_the_same_counts(run, monkeypatch):
    tmp, want, r = run
    n = expected(want)
    assert n["listed"] == n["ok"] + n["incomplete"] + n["failed"] + n["skipped"]
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    line = (f"{n['listed']} pool file(s) listed, {n['ok']} ok, {n['incomplete']} incomplete, {n['failed']} failed, "
            f"{n['skipped']} skipped")
    assert line in r.stdout.splitlines(), r.stdout[-3000:]
    assert (f"{n['failed']} shard(s) failed, {n['incomplete']} incomplete; the other {n['ok']} shard(s) are complete"
            in r.stdout)
    assert len(re.findall(r"^FAILED ", r.stdout, re.M)) == n["failed"]
    assert len(re.findall(r"^INCOMPLETE ", r.stdout, re.M)) == n["incomplete"]
    assert len(re.findall(r"^skipped ", r.stdout, re.M)) == n["skipped"]
    assert json.loads((tmp / "out" / "run.json").read_text())["files"] == n
    assert line in (tmp / "out" / "report.html").read_text()
    import dagster as dg

    monkeypatch.setenv("DAGSTER_HOME", str(tmp / "home"))
    event = dg.DagsterInstance.get().get_latest_materialization_event(dg.AssetKey("removal_report"))
    md = event.asset_materialization.metadata
    assert {k: md[f"files_{k}"].value for k in n} == n


def test_a_shard_whose_rescan_raises_loses_its_old_rows_and_still_adds_up(run):
    """ok-0.jsonl was scanned whole (a removed copy, a mix file); changed, its rescan raises: its row says failed, its
    old matches and mix file are gone, and the counts move from ok to failed."""
    tmp, want, _ = run
    out = tmp / "out"
    con = duckdb.connect(str(out / "contam.duckdb"), read_only=True)
    assert con.execute("select status, removed from shard_stats where shard = 'ok-0.jsonl'").fetchone() == ("ok", 1)
    con.close()
    assert (out / "mix" / "ok-0.jsonl").is_file()
    with open(tmp / "pool" / "ok-0.jsonl", "ab") as fh:
        fh.write(b"{not json\n")
    (out / "rejected" / "ok-0.jsonl.jsonl" / "taken").mkdir(parents=True)
    r = subprocess.run([*AS_USER, sys.executable, "-m", "contam_assets.cli", "detect", "--pool", tmp / "pool",
                        "--out", out], capture_output=True, text=True, timeout=900,
                       env={**os.environ, "DAGSTER_HOME": str(tmp / "home")})
    n = expected(want | {"ok-0.jsonl": "failed"})
    assert (f"{n['listed']} pool file(s) listed, {n['ok']} ok, {n['incomplete']} incomplete, {n['failed']} failed, "
            f"{n['skipped']} skipped") in r.stdout.splitlines(), r.stdout[-3000:] + r.stderr[-3000:]
    con = duckdb.connect(str(out / "contam.duckdb"), read_only=True)
    row = con.execute("select status, read, removed from shard_stats where shard = 'ok-0.jsonl'").fetchone()
    assert row == ("failed", 0, 0)
    assert con.execute("select count(*) from matches where shard = 'ok-0.jsonl'").fetchone()[0] == 0
    assert con.execute("select count(*) from removals where shard = 'ok-0.jsonl'").fetchone()[0] == 0
    assert not (out / "mix" / "ok-0.jsonl").exists()
    assert json.loads((out / "run.json").read_text())["files"] == n
