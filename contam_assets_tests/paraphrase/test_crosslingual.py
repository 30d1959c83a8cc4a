"""The crosslingual part (docs/crosslingual.md): a pool document holding a reference item translated into another
language is held for review with reason ``translation``; English documents and translations of items outside the
reference set are not."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import polars as pl
import pytest

from contam_assets.detector import config
from contam_assets.detector.config import PRESETS, DetectConfig, with_parts
from contam_assets.detector.matches import Reference
from contam_assets.paraphrase.crosslingual import blocks, crosslingual_rows
from contam_assets.sources.reference import build_reference_set
from contam_assets.sources.registry import load_registry
from contam_assets.store.pool import Document
from contam_assets_tests.support.doc_commands import clean_env, command

ROOT = Path(__file__).resolve().parents[2]
DATA = Path("/work/shared/data")
MGSM = DATA / "crosslingual" / "mgsm_es.tsv"
pytestmark = pytest.mark.skipif(not MGSM.is_file(), reason="shared data not present")
HOST = ("This week's newsletter collects a few puzzles that our readers sent in. We thank everyone who wrote to us, "
        "and we will print the answers in the next issue.")
LEFT_OUT = range(10, 20)  # GSM8K test items left out of the reference set


def doc(i: int, body: str) -> Document:
    text = f"{HOST}\n\n{body}\n\nThanks for reading, and see you next week."
    return Document(line=i, doc_id=f"d{i}", source="web", text=text, n_bytes=len(text.encode()), raw=b"", offset=0)


@pytest.fixture(scope="module")
def planted():
    records, _ = build_reference_set(load_registry(ROOT / "data" / "tasks", ["gsm8k"]), DATA, PRESETS["default"])
    ref = Reference(records.filter(~((pl.col("split") == "test") & pl.col("instance_index").is_in(list(LEFT_OUT)))))
    es = [line.rstrip("\n").split("\t")[0] for line in MGSM.open(encoding="utf-8")]
    english = [json.loads(line)["question"] for line in (DATA / "gsm8k_test.jsonl").open()][20]
    docs = [doc(0, es[0]), doc(1, es[3]), doc(2, es[5]), doc(3, es[12]), doc(4, es[15]), doc(5, english)]
    return ref, docs, crosslingual_rows(docs, "web/a.jsonl", ref, "crosslingual", [])


def test_a_spanish_mgsm_problem_is_held_with_reason_translation(planted):
    ref, docs, rows = planted
    got = {(r["line"], r["task"], r["split"], r["instance_index"]) for r in rows}
    assert {(0, "gsm8k", "test", 0), (1, "gsm8k", "test", 3), (2, "gsm8k", "test", 5)} <= got
    for r in rows:
        assert r["reason"] == "translation" and r["flagged"] and r["needs_review"]
        assert r["training_text"] in docs[r["line"]].text and r["training_text"] not in (HOST, "")
        assert json.loads(r["evidence"])["rule"] == "translation"
    janet = next(r for r in rows if r["line"] == 0)
    assert janet["training_text"].startswith("Los patos de Janet") and janet["eval_question"].startswith("Janet")


def test_english_and_non_reference_translations_are_not_held(planted):
    _, _, rows = planted
    assert {r["line"] for r in rows} & {3, 4, 5} == set()  # items 12 and 15 left out; 5 is an English document


def test_only_non_english_lines_are_blocks():
    english = f"{HOST}\n\nShe bought 16 eggs from Janet for $2 each and gave half of them to her friends."
    assert blocks(english) == []
    spanish = "Los patos de Janet ponen 16 huevos por día. Ella come tres en el desayuno todas las mañanas."
    text = f"{HOST}\n\n{spanish}\n\nThanks for reading."
    [(s, e)] = blocks(text)
    assert text[s:e].strip() == spanish


def test_the_part_is_off_by_default_and_in_its_preset():
    assert DetectConfig().crosslingual is False and PRESETS["paraphrase"].crosslingual is False
    assert PRESETS["crosslingual"].crosslingual and PRESETS["crosslingual"].paraphrase
    assert with_parts(DetectConfig(), ["crosslingual"]).crosslingual
    # off, the field stays out of the detector's digest (the default scan's cached results stay valid); on, it is in
    d = {k: v for k, v in dataclasses.asdict(DetectConfig()).items()
         if k != "crosslingual" and not (k in config._THOROUGH_FIELDS and v == config._DEFAULTS[k])}
    before = hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]
    assert DetectConfig().digest() == before != DetectConfig(crosslingual=True).digest()


def _env() -> dict:
    return clean_env()


@pytest.mark.slow  # one detect run with the encoder (about 10 s of CPU, most of it the run's fixed stages)
def test_the_documented_detect_command_holds_a_translation_and_removes_nothing(tmp_path):
    # docs/crosslingual.md's command, run as written from a folder beside a small ../shared/data
    bench, run, pool = tmp_path / "shared" / "data", tmp_path / "run", tmp_path / "run" / "pool" / "web"
    for p in (bench, pool):
        p.mkdir(parents=True)
    for name, n in (("gsm8k_train.jsonl", 50), ("gsm8k_test.jsonl", 200)):  # test items 200 and on: not in the reference
        (bench / name).write_text("".join((DATA / name).read_text().splitlines(True)[:n]))
    es = [line.rstrip("\n").split("\t")[0] for line in MGSM.open(encoding="utf-8")]
    english = json.loads((DATA / "gsm8k_test.jsonl").read_text().splitlines()[230])["question"]
    docs = [doc(0, es[0]), doc(1, es[5]), doc(2, es[215]), doc(3, english)]
    (pool / "part-0.jsonl").write_text("".join(json.dumps({"id": d.doc_id, "text": d.text}) + "\n" for d in docs))
    cmd = command("docs/crosslingual.md", "contam detect --pool")
    assert cmd.endswith("--crosslingual")
    res = subprocess.run(["bash", "-c", cmd], cwd=run, env=_env() | {"DAGSTER_HOME": str(tmp_path / "dh")},
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    con = duckdb.connect(str(run / "out" / "contam.duckdb"), read_only=True)
    rows = con.execute("select line, instance_index, flagged, needs_review, evidence from matches "
                       "where reason = 'translation' order by line").fetchall()
    assert [(r[0], r[1]) for r in rows] == [(0, 0), (1, 5)], rows  # not the item outside the reference, not English
    assert all(r[2] and r[3] and json.loads(r[4])["rule"] == "translation" for r in rows)
    assert con.execute("select count(*) from removals").fetchone()[0] == 0  # held, not removed
    con.close()
    assert "anchors" in (run / "out" / "report.html").read_text()


@pytest.mark.slow  # two detect runs over the full reference set, one with the encoder (about 25 s of CPU)
def test_the_documented_benchmark_reaches_the_targets_on_its_small_run():
    # the docs' command: the small run (a dozen items of each set, 40 clean documents, 20 recombined foreign ones, 3
    # translated manual pages of each language; two detect runs of one pool)
    cmd = command("docs/crosslingual.md", "python benchmarks/crosslingual_pool.py")
    out = cmd.split("--out ")[1].split()[0]
    r = subprocess.run(cmd.replace("python ", f"{sys.executable} ", 1), shell=True, cwd=ROOT, capture_output=True,
                       text=True, timeout=1200, env=_env())
    assert r.returncode == 0, r.stderr[-2000:]
    figures = json.loads(Path(out).read_text())
    assert figures["cost"]["units"] == 9077  # the full reference set, whatever the pool's size
    for name, s in figures["sets"].items():  # items of the reference set and items left out, of every set
        assert s["reference_documents"] >= 5 and s["non_reference_documents"] >= 5, (name, s)
    assert figures["english_documents_held"] == 0
    assert all(figures["cost"][pool]["removed"] == 0 for pool in ("english", "multilingual", "foreign_items", "foreign_text"))
    # the foreign pool with nothing to find: its documents measured, at most the left-out items' 2 % held
    for pool in ("foreign_items", "foreign_text"):
        cost = figures["cost"][pool]
        assert cost["mb"] > 0 and cost["stage_search"]["blocks"] > 0 and cost["stage_search_warm"]["units_embedded"] == 0
        assert figures[f"{pool}_documents_held"] <= 0.02 * cost["stage_search"]["documents"] + 1, (pool, figures)
    # translated manual pages, where the machine has them: foreign text of another kind, none of it held
    for pool in figures["manuals"]:
        cost, lang = figures["cost"][pool], pool.removeprefix("manuals_")
        assert figures[f"{pool}_documents_held"] == 0 and cost["removed"] == 0, (pool, figures)
        assert cost["stage_search"]["documents"] >= 1 and cost["stage_search_warm_mb_per_s"] > 0
        pages = [p for p in Path("/usr/share/man", lang).glob("man*/*") if p.is_file() and not p.is_symlink()]
        # every page asked for is measured or counted as skipped
        assert cost["stage_search"]["documents"] + figures["manual_pages_skipped"].get(lang, 0) == min(3, len(pages))
    assert figures["manuals"] or not (Path("/usr/share/man/de").is_dir() and shutil.which("man"))
    held = {name: s["held"] for name, s in figures["sets"].items()}
    assert held["mgsm_es"] >= 0.8 and held["xquad_es"] >= 0.8 and held["mgsm_fr"] >= 0.8, held
    assert all(s["non_reference_held"] <= 0.02 for s in figures["sets"].values()), figures["sets"]


DAEMON_RUN = """
import dagster as dg
from contam_assets.definitions import build_definitions
from contam_assets.defs.launch import data_side

defs = build_definitions()  # the code location, as the daemon loads it: its settings read from the environment
assets, _ = data_side(defs)
inst = dg.DagsterInstance.get()
assert dg.materialize(assets, selection=["task_registry", "reference_set", "ngram_index"], resources=defs.resources,
                      instance=inst).success
inst.add_dynamic_partitions("shards", ["part-0.jsonl"])
assert dg.materialize(assets, selection=["shard_matches"], partition_key="part-0.jsonl", resources=defs.resources,
                      instance=inst).success
"""


@pytest.mark.slow  # a reference build and one shard's scan with the encoder, in a fresh process (about 15 s of CPU)
def test_a_daemon_run_with_the_setting_in_its_environment_holds_a_translation(tmp_path):
    # no command line: the Definitions are loaded and materialized with the setting in the environment only
    bench, pool, tasks = tmp_path / "bench", tmp_path / "pool", tmp_path / "tasks"
    for p in (bench, pool, tasks):
        p.mkdir()
    (tasks / "gsm8k.toml").write_text('name = "gsm8k"\nkind = "qa"\nlanguage = "en"\n[fields]\nquestion = "question"\n'
                                      'answer = "answer"\n[[splits]]\nname = "test"\nfile = "gsm8k_test.jsonl"\n')
    (bench / "gsm8k_test.jsonl").write_text("".join((DATA / "gsm8k_test.jsonl").read_text().splitlines(True)[:200]))
    es = [line.rstrip("\n").split("\t")[0] for line in MGSM.open(encoding="utf-8")]
    docs = [doc(0, es[0]), doc(1, es[5]), doc(2, es[215])]  # item 215 is not in the reference set
    (pool / "part-0.jsonl").write_text("".join(json.dumps({"id": d.doc_id, "text": d.text}) + "\n" for d in docs))
    home = tmp_path / "home"
    home.mkdir()
    env = _env() | {"DAGSTER_HOME": str(home), "CONTAM_OUT": str(tmp_path / "out"), "CONTAM_POOL": str(pool),
                    "CONTAM_BENCHMARKS": str(bench), "CONTAM_TASKS_DIR": str(tasks), "CONTAM_SCAN_WORKERS": "1",
                    "CONTAM_CROSSLINGUAL": "1"}
    res = subprocess.run([sys.executable, "-c", DAEMON_RUN], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    con = duckdb.connect(str(tmp_path / "out" / "contam.duckdb"), read_only=True)
    rows = con.execute("select line, instance_index, flagged, needs_review from matches "
                       "where reason = 'translation' order by line").fetchall()
    con.close()
    assert rows == [(0, 0, True, True), (1, 5, True, True)], rows


def test_the_setting_reaches_the_dagster_resource_as_the_command_line(monkeypatch, tmp_path):
    from contam_assets.cli import build_parser
    from contam_assets.commands.detect import settings_from_args
    from contam_assets.defs.resources import ContamSettings, detect_config

    for k in list(os.environ):
        if k.startswith("CONTAM_") and k != "CONTAM_SHARED_DATA":
            monkeypatch.delenv(k)
    (tmp_path / "pool").mkdir()
    (tmp_path / "pool" / "a.jsonl").write_text('{"text": "x"}\n')
    cli = lambda *a: settings_from_args(build_parser().parse_args(  # noqa: E731
        ["detect", "--pool", str(tmp_path / "pool"), "--out", str(tmp_path / "o"), *a]))
    assert not detect_config(ContamSettings.from_env()).crosslingual and not detect_config(cli()).crosslingual
    assert detect_config(cli("--crosslingual")).crosslingual
    monkeypatch.setenv("CONTAM_CROSSLINGUAL", "1")
    daemon, command = ContamSettings.from_env(), cli()
    assert daemon.crosslingual and command.crosslingual and daemon.part_list == command.part_list == ["crosslingual"]
    assert detect_config(daemon) == detect_config(command) == with_parts(PRESETS["default"], ["crosslingual"])
    monkeypatch.setenv("CONTAM_PARTS", "markup,crosslingual")  # named twice, the part is one
    assert ContamSettings.from_env().part_list == ["markup", "crosslingual"]


def test_documents_searched_in_groups_give_the_rows_of_one_batch(planted, monkeypatch):
    """search_many looks at a group of documents' windows together; groups of one document hold the same pairs and
    windows (the encoder's batched products may move a similarity in its sixth decimal)."""
    from contam_assets.paraphrase import crosslingual

    ref, docs, rows = planted
    monkeypatch.setattr(crosslingual, "GROUP_CHARS", 1)
    alone = crosslingual_rows(docs, "web/a.jsonl", ref, "crosslingual", [])
    key = ("line", "record_id", "training_text", "flagged", "needs_review")
    assert [tuple(r[k] for k in key) for r in alone] == [tuple(r[k] for k in key) for r in rows]
    assert max(abs(a["score"] - b["score"]) for a, b in zip(alone, rows)) < 1e-5


def test_blocks_formed_and_looked_at_in_small_batches_give_the_same_rows(planted, monkeypatch):
    """A group's blocks go through windows and sum looks in batches bounded by cells and sentences, and the looks a
    slice of windows and pairs at a time: the smallest batches and slices hold the same rows."""
    from contam_assets.paraphrase import crosslingual, crosslingual_looks

    ref, docs, rows = planted
    for name, value in (("BATCH_CELLS", 1), ("BATCH_SENTENCES", 1)):
        monkeypatch.setattr(crosslingual, name, value)
    for name, value in (("WINDOW_ROWS", 3), ("PAIR_ROWS", 2)):
        monkeypatch.setattr(crosslingual_looks, name, value)
    crosslingual._INDEXES.clear()
    small = crosslingual_rows(docs, "web/a.jsonl", ref, "crosslingual", [])
    key = ("line", "record_id", "training_text", "flagged", "needs_review")
    assert [tuple(r[k] for k in key) for r in small] == [tuple(r[k] for k in key) for r in rows] and len(rows) >= 3
    assert max(abs(a["score"] - b["score"]) for a, b in zip(small, rows)) < 1e-5
