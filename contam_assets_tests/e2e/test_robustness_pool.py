"""Every document accounted for, whatever the pool holds (bad_pool.py), scanned as a normal user would be.

As root the run drops every capability (`setpriv --bounding-set=-all`), so permissions bind
as they do for anyone else: a mode-000 file or folder is unreadable, not silently read.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from contam_assets.store.pool import read_shard, shard_key, shard_path
from contam_assets.testing import bad_pool

AS_USER = (["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--"]
           if os.geteuid() == 0 and shutil.which("setpriv") else [])


def contam_as_user(*args, env_extra=None, timeout=900):
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([*AS_USER, sys.executable, "-m", "contam_assets.cli", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=timeout)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("badpool")
    expected = bad_pool.build(tmp / "pool")
    r = contam_as_user("detect", "--pool", tmp / "pool", "--out", tmp / "out",
                       env_extra={"DAGSTER_HOME": str(tmp / "home")})
    yield tmp, expected, r
    for p in (tmp / "pool" / "locked", tmp / "pool" / "secret.jsonl"):  # let pytest clean up
        os.chmod(p, 0o755)


def stats(tmp: Path) -> dict:
    con = duckdb.connect(str(tmp / "out" / "contam.duckdb"), read_only=True)
    cols = ["shard", "status", "read", "kept", "removed", "rejected", "status_reason"]
    return {r[0]: dict(zip(cols, r)) for r in con.execute(f"select {', '.join(cols)} from shard_stats").fetchall()}


def test_the_run_completes_with_a_summary_and_no_traceback(run):
    _, _, r = run
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]  # failed and incomplete shards: non-zero
    out = r.stdout + r.stderr
    assert "Traceback" not in out and "Stack Trace" not in out
    assert "2 shard(s) failed, 3 incomplete" in r.stdout
    for shard in ("broken/truncated.jsonl.zst", "broken/zeroed.jsonl.gz", "broken/truncated.jsonl.xz"):
        assert f"INCOMPLETE {shard}:" in r.stdout
    for shard in ("broken/plain-named.jsonl.zst", "broken/truncated.jsonl.bz2"):
        assert f"FAILED {shard}:" in r.stdout


def test_every_shard_has_its_status_and_exact_accounting(run):
    tmp, expected, _ = run
    got = stats(tmp)
    shards = {shard_key(k): v for k, v in expected.items() if isinstance(v, tuple)}
    assert set(got) == set(shards)
    for shard, (status, read, removed, rejected, has_mix) in shards.items():
        g = got[shard]
        assert g["status"] == status, (shard, g)
        assert g["read"] == g["kept"] + g["removed"] + g["rejected"], (shard, g)
        for key, want in (("read", read), ("removed", removed), ("rejected", rejected)):
            if want is not None:
                assert g[key] == want, (shard, key, g)
        if status == "incomplete":
            assert g["read"] > 0 and "at compressed byte" in g["status_reason"]
        mix = shard_path(tmp / "out" / "mix", shard)  # the mix keeps the shard's own file name
        assert mix.exists() == has_mix, shard
        if has_mix:  # an intact shard balances exactly: input lines = mix lines + removed + rejected
            assert sum(1 for _ in read_shard(mix, shard)) == g["read"] - g["removed"] - g["rejected"], shard


def test_broken_streams_keep_their_matches_but_reach_no_mix(run):
    tmp, _, _ = run
    con = duckdb.connect(str(tmp / "out" / "contam.duckdb"), read_only=True)
    hits = con.execute("select shard, line, flagged from matches where shard like 'broken/%'").fetchall()
    assert ("broken/truncated.jsonl.zst", 0, True) in hits  # read before the break: found and stored
    zero = con.execute("select count(*) from shard_stats where shard = 'broken/zeroed.jsonl.gz' and read > 0").fetchone()[0]
    assert zero == 1 and not (tmp / "out" / "mix" / "broken" / "zeroed.jsonl.gz").exists()
    status = dict(con.execute("select shard, status from mix_stats").fetchall())
    assert status["broken/zeroed.jsonl.gz"] == "quarantined"


def test_lone_surrogates_are_stored_escaped(run):
    tmp, _, _ = run
    con = duckdb.connect(str(tmp / "out" / "contam.duckdb"), read_only=True)
    row = con.execute("select doc_id, source, flagged from matches where shard = 'ok/surrogate.jsonl'").fetchone()
    assert row == ("bad\\udfff", "web\\udfff", True)


def test_nothing_outside_the_pool_is_read_and_every_skip_is_reported(run):
    tmp, expected, r = run
    skips = {k: v for k, v in expected.items() if isinstance(v, str)}
    for name, want in skips.items():
        assert f"skipped {name}: {want.removeprefix('skipped: ')}" in r.stdout, name
    con = duckdb.connect(str(tmp / "out" / "contam.duckdb"), read_only=True)
    listed = dict(con.execute("select path, reason from pool_skips").fetchall())
    assert set(listed) == set(skips)
    host = Path("/etc/hostname").read_bytes().strip()
    for p in (tmp / "out").rglob("*"):
        if p.is_file() and p.suffix in (".jsonl", ".json") and host:
            assert host not in p.read_bytes(), p
    page = (tmp / "out" / "report.html").read_text()
    assert "outside_pool" in page and "broken/truncated.jsonl.zst" in page


def test_the_conservation_check_names_the_broken_shards(run, monkeypatch):
    tmp, _, _ = run
    import dagster as dg

    monkeypatch.setenv("DAGSTER_HOME", str(tmp / "home"))
    inst = dg.DagsterInstance.get()
    evals = []
    for rec in inst.get_runs(limit=100):
        for e in inst.all_logs(rec.run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION):
            d = e.dagster_event.event_specific_data
            if d.check_name == "shard_conservation":
                evals.append(d)
    failing = [d for d in evals if not d.passed]
    assert failing and all(d.severity == dg.AssetCheckSeverity.ERROR for d in failing)
    named = set(failing[0].metadata["incomplete_or_failed"].value)
    assert named == {"broken/truncated.jsonl.zst", "broken/zeroed.jsonl.gz", "broken/truncated.jsonl.xz",
                     "broken/plain-named.jsonl.zst", "broken/truncated.jsonl.bz2"}


def test_an_incomplete_shard_is_mixed_once_a_reviewer_accepts_it(run, tmp_path):
    tmp, _, _ = run
    r = contam_as_user("review", tmp / "out", "--accept-shard", "broken/truncated.jsonl.zst")
    assert r.returncode == 0, r.stderr
    r = contam_as_user("apply", tmp / "out", env_extra={"DAGSTER_HOME": str(tmp / "home")})
    mix = tmp / "out" / "mix" / "broken" / "truncated.jsonl.zst"
    assert mix.exists()
    con = duckdb.connect(str(tmp / "out" / "contam.duckdb"), read_only=True)
    read, removed = con.execute("select read, removed from shard_stats where shard = 'broken/truncated.jsonl.zst'").fetchone()
    status, written = con.execute("select status, written from mix_stats where shard = 'broken/truncated.jsonl.zst'").fetchone()
    assert status == "accepted_incomplete" and written <= read - removed
    ids = [d.doc_id for d in read_shard(mix, "m")]
    assert "z-0" not in ids and len(ids) == written  # the removed copy stays out
    assert "INCOMPLETE broken/truncated.jsonl.zst" in r.stdout  # still reported as what it is


def test_a_rerun_is_identical_and_leaves_no_temporary_files(run):
    tmp, _, _ = run
    before = stats(tmp)
    r = contam_as_user("detect", "--pool", tmp / "pool", "--out", tmp / "out", env_extra={"DAGSTER_HOME": str(tmp / "home")})
    assert r.returncode == 1
    assert stats(tmp) == before
    temps = [p for p in (tmp / "out").rglob(".*") if ".tmp-" in p.name]
    assert not temps, temps
    assert json.loads(json.dumps(before))  # plain data
