"""An incremental rescan for an added task leaves every table as a full scan of the grown registry does, where the
added task's records move decon's sampled walk in a document that holds another task's item.

The planted document: the paragraphs on ranges of Python's own documentation (pydoc_data), then MBPP's "sum of perrin numbers"
problem (text and code) appended.  With GSM8K and MBPP indexed, the walk steps over the problem's short question
and finds only its solution-only row; with HumanEval added, HumanEval n-grams in the documentation start clusters
that move where the walk resumes, and it finds the question+answer row as well (which removes the document).  The
rescan for +HumanEval, from the cached token stream or from the text with the prefilter, must walk that document
again for every task: its matches, removals and per-shard counts equal a full scan's, row for row.
"""

from __future__ import annotations

import json
import re
import shutil

import polars as pl
import pytest

from contam_assets.defs.resources import DetectorKnobs
from contam_assets.demo import HostText
from contam_assets_tests.support.automation import (
    GSM8K_TEST_ONLY,
    TASKS_SRC,
    build_reference,
    instance,
    scan,
    settings,
    table,
)

SHARD = "part-000.jsonl"
TABLES = {
    "matches": "select * exclude (record_id) from matches order by match_id",
    "removals": "select * from removals order by shard, line",
    "shard_stats": "select * exclude (seconds, index_digest) from shard_stats order by shard",
    "instances of matches": """select m.match_id, i.task, i.suite, i.instance_index, i.derived from matches m
        join instances i using (record_id) order by m.match_id, i.suite""",
}


def _planted_document(shared) -> str:
    from pydoc_data.topics import topics

    paras = [p.strip() for p in re.split(r"\n\s*\n", topics["typesseq"]) if len(p.split()) > 8]
    start = next(i for i, p in enumerate(paras) if p.startswith("For a negative *step*"))  # ranges, to their end
    paras = paras[start : start + 12]
    rows = [json.loads(line) for line in (shared / "mbpp.jsonl").read_text(encoding="utf-8").splitlines() if line]
    perrin = next(r for r in rows if r["text"].startswith("Write a function to calculate the sum of perrin numbers"))
    return "\n\n".join(paras) + f"\n\n{perrin['text']}\n{perrin['code']}\n"


def _tasks(path, *names):
    path.mkdir(parents=True)
    (path / "gsm8k.toml").write_text(GSM8K_TEST_ONLY)
    for name in names:
        shutil.copy(TASKS_SRC / f"{name}.toml", path / f"{name}.toml")
    return path


def _tables(s) -> dict[str, pl.DataFrame]:
    return {name: table(s, sql) for name, sql in TABLES.items()}


@pytest.mark.parametrize("prefilter", [False, True], ids=["cached-stream", "prefilter-text"])
def test_rescan_for_an_added_task_equals_a_full_scan_where_it_moves_the_walk(tmp_path, shared_data, prefilter):
    host = HostText(11)
    docs = [host.document() for _ in range(6)]
    docs.insert(3, _planted_document(shared_data))
    pool = tmp_path / "pool"
    pool.mkdir()
    (pool / SHARD).write_text("".join(json.dumps({"id": f"d{i}", "source": "docs", "text": t}) + "\n"
                                      for i, t in enumerate(docs)))
    knobs = DetectorKnobs(prefilter=prefilter)
    tasks = _tasks(tmp_path / "tasks", "mbpp")
    s = settings(tmp_path / "out", pool, tasks, shared_data, knobs=knobs)
    inst = instance(tmp_path / "home")
    build_reference(s, inst)
    assert scan(s, inst, [SHARD])["shards_full"] == 1
    first = table(s, "select suite from matches where line = 3 order by suite")["suite"].to_list()
    # the registry grows: humaneval is added and the shard is rescanned for it alone
    shutil.copy(TASKS_SRC / "humaneval.toml", tasks / "humaneval.toml")
    build_reference(s, inst)
    assert scan(s, inst, [SHARD]) == {"shards_full": 0, "shards_incremental": 1, "shards_current": 0}
    full = settings(tmp_path / "full", pool, _tasks(tmp_path / "tasks_full", "mbpp", "humaneval"), shared_data,
                    knobs=knobs)
    inst_full = instance(tmp_path / "home_full")
    build_reference(full, inst_full)
    assert scan(full, inst_full, [SHARD])["shards_full"] == 1
    want = _tables(full)
    # the case itself: the grown registry finds a row at the planted document the first registry's walk missed
    assert first == ["mbpp_solution"]
    assert want["matches"].filter(pl.col("line") == 3)["suite"].sort().to_list() == ["mbpp", "mbpp_solution"]
    assert want["removals"]["line"].to_list() == [3]
    got = _tables(s)
    for name in TABLES:
        assert got[name].equals(want[name]), name
