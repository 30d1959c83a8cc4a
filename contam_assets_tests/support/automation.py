"""Shared set-up of the automation and scale-out tests: a small task folder, a planted pool, table reads."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from contam_assets import store
from contam_assets.defs.data import assets as A
from contam_assets.defs.resources import PROJECT_ROOT, ContamDB, ContamSettings
from contam_assets.demo import HostText

TASKS_SRC = PROJECT_ROOT / "data" / "tasks"
# gsm8k with its test split only keeps the reference set small (the train split adds 7,473 items)
GSM8K_TEST_ONLY = """name = "gsm8k"
kind = "qa"
language = "en"
description = "GSM8K test split only (tests)."

[fields]
question = "question"
answer = "answer"

[[splits]]
name = "test"
file = "gsm8k_test.jsonl"
"""


def make_tasks_dir(path: Path, with_mbpp: bool = False) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "gsm8k.toml").write_text(GSM8K_TEST_ONLY)
    shutil.copy(TASKS_SRC / "humaneval.toml", path / "humaneval.toml")
    if with_mbpp:
        add_mbpp(path)
    return path


def add_mbpp(tasks_dir: Path) -> None:
    shutil.copy(TASKS_SRC / "mbpp.toml", tasks_dir / "mbpp.toml")


def _jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def write_pool(pool: Path, shared: Path, n_shards: int = 3, docs: int = 40, seed: int = 3) -> None:
    """Shards of host text with verbatim GSM8K test items and MBPP problems (text + code) planted,
    some documents holding both, and a near miss (a GSM8K question without its answer)."""
    gsm = _jsonl(shared / "gsm8k_test.jsonl")
    mbpp = _jsonl(shared / "mbpp.jsonl")
    host = HostText(seed)
    for k in range(n_shards):
        lines = []
        for i in range(docs):
            text = host.document()
            j = k * docs + i
            if i % 6 == 0:
                text = f"{host.paragraph()}\n{gsm[j]['question']}\n{gsm[j]['answer']}\n{host.paragraph()}"
            if i % 6 == 3:
                text = f"{host.paragraph()}\n{gsm[j]['question']}\n{host.paragraph()}"  # no answer: a stored near miss
            if i % 8 == 0:
                m = mbpp[20 + j]
                text += f"\n\n{m['text']}\n{m['code']}\n"
            lines.append(json.dumps({"id": f"{k}-{i}", "source": "web", "text": text}))
        path = pool / f"part-{k:03d}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")


def settings(out: Path, pool: Path, tasks_dir: Path, shared: Path, **kw) -> ContamSettings:
    return ContamSettings(out_dir=str(out), pool_dir=str(pool), tasks_dir=str(tasks_dir), benchmarks_dir=str(shared), **kw)


def resources(s: ContamSettings) -> dict:
    from contam_assets.defs.data.engine import engine_from_env

    return {"contam_settings": s, "contam_db": ContamDB(path=str(s.db_path)), "contam_scan_engine": engine_from_env()}


def build_reference(s: ContamSettings, instance: dg.DagsterInstance) -> None:
    r = dg.materialize([A.task_registry, A.reference_set, A.ngram_index], resources=resources(s), instance=instance)
    assert r.success


def scan(s: ContamSettings, instance: dg.DagsterInstance, shards: list[str], mode: str = "auto") -> dict:
    """Materialize shard_matches for `shards` (one run each); returns summed shards_* metadata."""
    known = set(instance.get_dynamic_partitions("shards"))
    if set(shards) - known:
        instance.add_dynamic_partitions("shards", sorted(set(shards) - known))
    totals: dict = {}
    for shard in shards:
        r = dg.materialize([A.shard_matches], partition_key=shard, resources=resources(s), instance=instance,
                           run_config={"ops": {"shard_matches": {"config": {"mode": mode}}}})
        assert r.success
        md = r.asset_materializations_for_node("shard_matches")[0].metadata
        for k, v in md.items():
            if k.startswith("shards_"):
                totals[k] = totals.get(k, 0) + v.value
    return totals


def table(s: ContamSettings, sql: str, params: list | None = None) -> pl.DataFrame:
    with store.connect(s.db_path, read_only=True) as con:
        return store.query_df(con, sql, params)


def matches(s: ContamSettings, where: str = "true") -> pl.DataFrame:
    """Match rows without record_id (ids shift when the reference set is rebuilt), in a stable order."""
    return table(s, f"select * exclude (record_id) from matches where {where} order by match_id")


def stats(s: ContamSettings) -> pl.DataFrame:
    return table(s, "select * exclude (seconds, index_digest) from shard_stats order by shard")


def instance(home: Path) -> dg.DagsterInstance:
    """A Dagster instance (SQLite storage) in its own folder."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").touch()
    return dg.DagsterInstance.local_temp(str(home))


# a temporary file's name (store/files.py: .tmp-<pid>-<random>), which differs between any two runs
TEMP_NAME = r"\.tmp-\d+-[0-9a-f]+"


def referenced_pool(tmp_path: Path, shared: Path, monkeypatch, docs: int = 12) -> tuple[ContamSettings, dg.DagsterInstance]:
    """A 3-shard pool (``write_pool``), its settings, an instance and the built reference set; scans in one process."""
    monkeypatch.setenv("CONTAM_SCAN_WORKERS", "1")
    write_pool(tmp_path / "pool", shared, n_shards=3, docs=docs)
    s = settings(tmp_path / "out", tmp_path / "pool", make_tasks_dir(tmp_path / "tasks"), shared)
    inst = instance(tmp_path / "home")
    build_reference(s, inst)
    return s, inst


def contam_detect(s, home: Path) -> tuple[int, str]:
    """`contam detect` as a person runs it, with the flags that give the settings ``s`` and the Dagster home ``home``
    (the command's entry in this process; DAGSTER_HOME, which the command points at its home, restored after): its
    exit code and what it printed."""
    from contam_assets.cli import main

    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(printed):
        mp.setenv("DAGSTER_HOME", str(home))
        rc = main(["detect", "--pool", s.pool_dir, "--out", s.out_dir, "--tasks-dir", s.tasks_dir,
                   "--benchmarks", s.benchmarks_dir, "--dagster-home", str(home)])
    return rc, printed.getvalue()
