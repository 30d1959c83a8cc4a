"""The thorough preset everywhere default goes, starting with the commands docs/usage.md and
docs/quality.md show, run exactly as written: `contam quality` with thorough beside default, then
`contam detect --preset thorough --removal span` on that planted pool, then `contam review`.

Also: an incremental rescan under thorough equals a full rescan, the quality preset partitions and the
Dagster resource know thorough, and every part has its flag.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from contam_assets import store
from contam_assets.commands.detect import PART_FLAGS
from contam_assets.defs.data.assets import detect_config
from contam_assets.defs.quality.assets import presets_partitions
from contam_assets.defs.resources import PROJECT_ROOT, ContamSettings
from contam_assets.detector.config import EXTRA_PARTS, PRESETS, THOROUGH_PARTS, with_parts
from contam_assets.store.pool import open_binary
from contam_assets_tests.support.automation import (
    add_mbpp,
    build_reference,
    instance,
    make_tasks_dir,
    matches,
    scan,
    settings,
    stats,
    write_pool,
)

MARKERS = ("q_thorough", "det_thorough")
REASONS = {"question+answer", "solution_only", "answer_only", "question_only", "dump", "near_duplicate", "same_template"}


def documented_commands() -> list[str]:
    """The shell lines of docs/quality.md and docs/usage.md that use the thorough example folders, in that order:
    docs/quality.md first (it makes the pool docs/usage.md's lines scan)."""
    out = []
    for doc in ("docs/quality.md", "docs/usage.md"):
        text = (PROJECT_ROOT / doc).read_text()
        for block in re.findall(r"```bash\n(.*?)```", text, re.S):
            for line in block.splitlines():
                if any(m in line for m in MARKERS):
                    out.append(re.sub(r"\s+#\s.*$", "", line).strip())
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory, shared_data):
    tmp = tmp_path_factory.mktemp("thorough_docs")
    env = dict(os.environ, TMPDIR=str(tmp), DAGSTER_HOME=str(tmp / "home"),
               PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"])
    (tmp / "home").mkdir()
    (tmp / "home" / "dagster.yaml").touch()
    cmds = documented_commands()
    outputs = []
    for cmd in cmds:
        res = subprocess.run(["bash", "-c", cmd], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=1200)
        assert res.returncode == 0, (cmd, res.stdout[-2000:], res.stderr[-4000:])
        outputs.append(res.stdout)
    return dict(tmp=tmp, cmds=cmds, out=outputs)


def test_the_documented_commands_are_the_ones_run(run):
    assert [c.split()[1] for c in run["cmds"]] == ["quality", "detect", "review", "review"]
    assert "--preset thorough" in run["cmds"][0] and "--removal span" in run["cmds"][1]


def test_quality_measures_thorough_beside_default(run):
    report = json.loads((run["tmp"] / "q_thorough" / "quality.json").read_text())
    assert list(report["presets"]) == ["default", "thorough"]
    d, t = report["presets"]["default"], report["presets"]["thorough"]
    for leak, r in t["leak_types"].items():  # thorough keeps everything default flags
        assert (r["recall"] or 0) >= (d["leak_types"][leak]["recall"] or 0), leak
    assert t["leak_types"]["numbers_changed"]["flagged"] == 0  # templates are reported, not flagged
    assert t["leak_types"]["numbers_changed"]["same_template"] == t["leak_types"]["numbers_changed"]["planted"]
    assert t["leak_types"]["answer_only"]["recall"] == 1.0 and d["leak_types"]["answer_only"]["recall"] == 0.0
    names = {x["name"] for x in t["targets"]}
    assert {"recall html_wrapped (held for review counts)", "numbers_changed reported as same_template"} <= names
    assert t["clean"]["false_positives"] == 0 and t["hard_negatives"]["total"]["false_positives"] == 0
    page = (run["tmp"] / "q_thorough" / "quality.html").read_text()
    assert "Targets (thorough preset)" in page and "Targets (default preset)" in page


@pytest.fixture(scope="module")
def det(run):
    out = run["tmp"] / "det_thorough"
    with store.connect(out / "contam.duckdb", read_only=True) as con:
        q = lambda sql: store.query_df(con, sql)  # noqa: E731
        return dict(out=out, matches=q("select * from matches"), cuts=q("select * from cuts"),
                    mix=q("select * from mix_stats"), stats=q("select * from shard_stats"),
                    overlap=q("select * from reference_overlap"), removals=q("select * from removals"))


def test_detect_thorough_reasons_and_twins(det):
    m = det["matches"]
    assert set(m["reason"].unique().to_list()) <= REASONS
    assert {"question+answer", "near_duplicate", "same_template", "question_only", "answer_only"} <= set(m["reason"].to_list())
    assert not m.filter(pl.col("reason") == "same_template")["flagged"].any()  # reported, never flagged
    held = m.filter(pl.col("reason").is_in(["question_only", "answer_only", "solution_only"]) & pl.col("flagged"))
    assert held.height and held["needs_review"].all()
    ov = det["overlap"].to_dicts()
    assert ov  # GSM8K repeats a few train items in test
    paired = {(r["task_a"], r["split_a"], r["instance_a"]) for r in ov} | {(r["task_b"], r["split_b"], r["instance_b"]) for r in ov}
    for r in m.filter(pl.col("twins").is_not_null()).to_dicts():  # a row names twins exactly when its instance has some
        assert (r["task"], r["split"], r["instance_index"]) in paired and json.loads(r["twins"])
    for r in m.filter(pl.col("twins").is_null() & (pl.col("suite") == pl.col("task"))).to_dicts():
        assert (r["task"], r["split"], r["instance_index"]) not in paired


def test_span_removal_cuts_every_removed_document_and_conserves(det):
    mix, st = det["mix"].sort("shard"), det["stats"].sort("shard")
    joined = mix.join(st.select("shard", "read", "removed"), on="shard")
    for r in joined.to_dicts():  # every document read is written whole, written cut, dropped or rejected
        assert r["written"] + r["cut"] + r["dropped"] + r["rejected"] == r["read"], r
        assert r["cut"] + r["dropped"] == r["removed"], r
        with open_binary(Path(r["path"])) as fh:
            assert fh.read().count(b"\n") == r["written"] + r["cut"], r
    assert int(mix["cut"].sum()) > 0 and det["cuts"].height >= int(mix["cut"].sum())
    # a cut document of the verbatim shard keeps its host text and loses the item
    pool = Path(json.loads((det["out"] / "run.json").read_text())["pool_dir"])
    cut = det["cuts"].filter(pl.col("shard") == "planted/verbatim.jsonl").sort("line").to_dicts()[0]
    src = [json.loads(x) for x in (pool / "planted/verbatim.jsonl").read_text().splitlines()][cut["line"]]
    dst = {d["id"]: d for d in map(json.loads, (det["out"] / "mix/planted/verbatim.jsonl").read_text().splitlines())}[src["id"]]
    item = src["text"][cut["span_start"] : cut["span_end"]]
    assert item not in dst["text"] and len(dst["text"]) < len(src["text"])
    assert src["text"][: cut["cut_start"]] in dst["text"]
    page = (det["out"] / "report.html").read_text()
    assert "Span cuts" in page and "Why each match was made" in page and "Twins in the reference set" in page


def test_review_groups_by_reason(run):
    assert "per reason" in run["out"][2] and "near_duplicate" in run["out"][2]
    assert "why: near_duplicate" in run["out"][3]


# -- incremental rescans under thorough -------------------------------------------------------

def test_thorough_incremental_rescan_equals_a_full_rescan(tmp_path, shared_data):
    pool, tasks = tmp_path / "pool", make_tasks_dir(tmp_path / "tasks")
    write_pool(pool, shared_data)
    shards = ["part-000.jsonl", "part-001.jsonl", "part-002.jsonl"]
    s = settings(tmp_path / "out", pool, tasks, shared_data, preset="thorough")
    inst = instance(tmp_path / "home")
    build_reference(s, inst)
    assert scan(s, inst, shards)["shards_full"] == 3
    add_mbpp(tasks)
    build_reference(s, inst)
    assert scan(s, inst, shards) == {"shards_full": 0, "shards_incremental": 3, "shards_current": 0}
    full = settings(tmp_path / "full", pool, tasks, shared_data, preset="thorough")
    inst_full = instance(tmp_path / "home_full")
    build_reference(full, inst_full)
    scan(full, inst_full, shards)
    inc = matches(s, "task = 'mbpp'").drop("twins")
    assert inc.height and inc.equals(matches(full, "task = 'mbpp'").drop("twins"))
    assert stats(s).equals(stats(full))
    assert set(matches(s)["reason"].to_list()) >= {"question+answer", "question_only"}


# -- the resource, the partitions, the flags -----------------------------------------------------

def test_resource_partitions_and_flags_know_thorough(monkeypatch):
    assert "thorough" in presets_partitions.get_partition_keys()
    assert set(PART_FLAGS) == set(THOROUGH_PARTS) | set(EXTRA_PARTS)
    assert detect_config(ContamSettings(preset="thorough")) == PRESETS["thorough"]
    assert detect_config(ContamSettings(parts="dumps,markup")) == with_parts(PRESETS["default"], ["dumps", "markup"])
    monkeypatch.setenv("CONTAM_PARTS", "near_duplicates")
    monkeypatch.setenv("CONTAM_REMOVAL", "span")
    s = ContamSettings.from_env()
    assert s.part_list == ["near_duplicates"] and s.removal == "span"
    assert detect_config(s).near_duplicates and not detect_config(s).markup
