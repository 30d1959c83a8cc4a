"""The bulk merge of full scans (rescan/state.py ``_merge_full``) writes the tables the shard-by-shard merge writes.

Checked on a batch that mixes what a run hands the writer: full scans with rows in Parquet parts and
in memory, a shard scanned twice in one batch, an unchanged shard, rescans of stored shards with
review decisions, and an incremental scan between full ones; then the documented benchmark at a tiny size.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import duckdb
import polars as pl

from contam_assets import store
from contam_assets.rescan import state
from contam_assets.rescan.outcomes import OutcomeWriter
from contam_assets.rescan.shard import ShardOutcome
from contam_assets_tests.support.doc_commands import ROOT, command

sys.path.insert(0, str(ROOT / "benchmarks"))
import table_writes as bench  # noqa: E402

START = "python benchmarks/table_writes.py"


def batch(parts: Path) -> list[tuple[ShardOutcome, int, int]]:
    rng = random.Random(5)
    outs = []
    for i, name in enumerate(["old-000001", "new-a", "new-b", "old-000002", "new-a", "new-c"]):
        frame = bench.match_rows(name, 12 + i, rng)
        if i % 2:  # rows in memory, as the step's own scans return them
            outs.append(ShardOutcome(shard=name, mode="full", matches=frame, stats=bench.stats_row(name, frame), rejects=[],
                                     stream_key=f"k{i}", tasks=["gsm8k"], drop=[]))
        else:  # rows in a Parquet part, as the worker pool writes them
            (parts / str(i)).mkdir(parents=True)
            outs.append(bench.outcome(name, frame, parts / str(i)))
    unchanged = ShardOutcome(shard="old-000003", mode="current", matches=None, stats={}, rejects=None, stream_key=None,
                             tasks=[], drop=[])
    extra = bench.match_rows("old-000004", 5, rng).with_columns(task=pl.lit("mbpp"), suite=pl.lit("mbpp"))
    incremental = ShardOutcome(shard="old-000004", mode="incremental", matches=extra, stats={}, rejects=None,
                               stream_key="k-inc", tasks=["mbpp"], drop=[])
    tail = bench.match_rows("new-d", 7, rng)
    last = ShardOutcome(shard="new-d", mode="full", matches=tail, stats=bench.stats_row("new-d", tail), rejects=[],
                        stream_key="k-d", tasks=["gsm8k", "mbpp"], drop=[])
    outs = outs[:3] + [unchanged] + outs[3:] + [incremental, last]
    return [(o, 1000 + i, 7 + i) for i, o in enumerate(outs)]


def test_bulk_merge_equals_shard_by_shard(tmp_path):
    tables = {}
    for mode in (True, False):
        con = duckdb.connect(str(tmp_path / f"{mode}.duckdb"))
        bench.fill(con, 6, 10, random.Random(3))
        con.execute("insert into shard_errors values ('new-b', 'scan', 'an old error', now()::timestamp)")
        state.write_outcomes(con, batch(tmp_path / f"parts-{mode}"), tasks_now={"gsm8k": "h1", "mbpp": "h2"}, digest="d",
                             scan_config="cfg", clear_errors=("scan", "write"), bulk=mode)
        tables[mode] = {name: store.query_df(con, sql) for name, sql in
                        bench.COMPARE + [("shard_errors", "select * from shard_errors")]}
        counts = dict(con.execute("select shard, count(*) from matches group by 1").fetchall())
        assert counts["new-a"] == 12 + 4 and counts["old-000001"] == 12  # the later scan of new-a replaced the first
        assert counts["old-000003"] == 10 and counts["old-000004"] == 10 + 5  # unchanged; incremental rows added
        assert con.execute("select count(*) from shard_errors").fetchone()[0] == 0
        con.close()
    for name in tables[True]:
        assert tables[True][name].equals(tables[False][name]), name
    assert not list(tmp_path.glob("parts-*/*/*.parquet"))  # the parts merged are deleted after the commit


def test_a_corrupt_part_fails_its_shard_alone(tmp_path):
    """One shard's Parquet part is cut short: the bulk statement fails, the writer writes the batch again one shard
    at a time, and only that shard fails; every other shard's rows are committed exactly once, its part deleted."""
    rng, parts = random.Random(9), tmp_path / "parts"
    parts.mkdir()
    names = [f"s{i}" for i in range(5)]
    frames = {n: bench.match_rows(n, 6 + i, rng) for i, n in enumerate(names)}
    outs = [bench.outcome(n, frames[n], parts) for n in names]
    bad = Path(outs[3].matches_path)
    bad.write_bytes(bad.read_bytes()[: bad.stat().st_size // 2])  # a part cut short (a full disk, a lying NFS server)
    db, seen = tmp_path / "t.duckdb", []
    w = OutcomeWriter(lambda **a: store.connect(db, **a), {n: (100, 1) for n in names},
                      lambda job, out, stats: seen.append((job.shard, out, stats)), flush_shards=10, flush_seconds=1e9,
                      tasks_now={"gsm8k": "h"}, digest="d", scan_config="cfg")
    for out in outs:
        w.add(SimpleNamespace(shard=out.shard), out)
    w.flush()
    assert [x[0] for x in seen] == names
    assert isinstance(seen[3][1], RuntimeError) and "writing its rows" in str(seen[3][1])
    assert all(stats and stats[0]["shard"] == n for n, out, stats in seen if n != "s3")
    with store.connect(db, read_only=True) as con:
        counts = dict(con.execute("select shard, count(*) from matches group by 1").fetchall())
        assert counts == {n: frames[n].height for n in names if n != "s3"}
        assert con.execute("select count(distinct match_id) from matches").fetchone()[0] == sum(counts.values())
        assert sorted(r[0] for r in con.execute("select shard from shard_stats").fetchall()) == ["s0", "s1", "s2", "s4"]
    assert sorted(p.name for p in parts.glob("*.parquet")) == ["s3.parquet"]  # the others were merged and deleted


def test_table_writes_benchmark_as_documented(tmp_path):
    """The documented line, exactly as written, from a folder of its own (its JSON lands there)."""
    cmd = command("docs/scale.md", START)
    (tmp_path / "benchmarks").symlink_to(ROOT / "benchmarks")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    r = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = re.search(r"--json (\S+)", cmd).group(1)
    runs = json.loads((tmp_path / out).read_text())["runs"]
    assert [x["stored"] for x in runs] == [int(n) for n in re.search(r"--stored (\S+)", cmd).group(1).split(",")]
    assert all(x["tables_equal"] for x in runs)
    assert all(x["bulk"]["s_per_shard"] > 0 and x["shard_by_shard"]["s_per_shard"] > 0 for x in runs)
    assert "| shards stored |" in r.stdout
