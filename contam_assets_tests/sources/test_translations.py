"""A translated task linked to the task it translates: the spec, the alignment and its refusals, the `matches`
rows with `via_task`, removals unchanged, and the line the report, the review and the estimate show."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import polars as pl
import pytest

from contam_assets.sources.lm_eval_translations import translation_for
from contam_assets.sources.registry import TaskSpecError, load_registry
from contam_assets.sources.translation_links import links
from contam_assets.store import tables
from contam_assets.store.translated_matches import exposure_lines, read_only_view

INSIDE = list(range(3, 250, 12))[:20]  # GSM8K test items MGSM translates (the first 250)
BEYOND = [300, 400, 600, 900, 1200]  # and items it does not


def _gsm8k_spec(shared_data: Path, splits=("test",)) -> str:
    parts = "".join(f'[[splits]]\nname = "{s}"\nfile = "{shared_data / f"gsm8k_{s}.jsonl"}"\n' for s in splits)
    return f'name = "gsm8k"\nkind = "qa"\nlanguage = "en"\n[fields]\nquestion = "question"\nanswer = "answer"\n{parts}'


def _mgsm_spec(translation: str = "[translation]\nlimit = 250\n", name: str = "mgsm_es") -> str:
    return (f'name = "{name}"\nkind = "qa"\nlanguage = "es"\ntranslation_of = "gsm8k"\n{translation}'
            '[fields]\nquestion = "question"\nanswer = "answer"\n[[splits]]\nname = "test"\nfile = "mgsm_es.jsonl"\n')


def _folders(tmp: Path, shared_data: Path, mgsm: str | None = None, gsm8k: str | None = None) -> tuple[Path, Path]:
    """A task folder (gsm8k's test split, and mgsm_es over MGSM's Spanish file) and a benchmark folder."""
    tasks, bench = tmp / "tasks", tmp / "bench"
    tasks.mkdir(exist_ok=True)
    bench.mkdir(exist_ok=True)
    rows = [dict(zip(("question", "answer"), line.rstrip("\n").split("\t")))
            for line in open(shared_data / "crosslingual" / "mgsm_es.tsv", encoding="utf-8")]
    (bench / "mgsm_es.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    (tasks / "gsm8k.toml").write_text(gsm8k or _gsm8k_spec(shared_data))
    (tasks / "mgsm_es.toml").write_text(mgsm or _mgsm_spec())
    return tasks, bench


def test_index_alignment_over_the_first_items_links_mgsm_to_gsm8k(tmp_path, shared_data):
    tasks, bench = _folders(tmp_path, shared_data)
    specs = load_registry(tasks)
    t = next(s for s in specs if s.name == "mgsm_es").translation
    assert (t.of, t.align, t.offset, t.limit) == ("gsm8k", "index", 0, 250)
    df = links(specs, bench)
    assert df.height == 250 and df["source_task"].unique().to_list() == ["gsm8k"]
    assert df["instance_index"].to_list() == list(range(250)) == df["source_index"].to_list()
    # an offset shifts the window: item k translates source item 10 + k
    (tasks / "mgsm_es.toml").write_text(_mgsm_spec("[translation]\noffset = 10\nlimit = 250\n"))
    assert links(load_registry(tasks), bench)["source_index"].to_list() == list(range(10, 260))


@pytest.mark.parametrize("mgsm, only, message", [
    (None, ["mgsm_es"], "mgsm_es (translation of gsm8k): the source task 'gsm8k' is not in this run"),
    (_mgsm_spec("[translation]\nsplit = \"dev\"\nlimit = 250\n"), None, "gsm8k has no split 'dev' (it has: test)"),
    (_mgsm_spec(""), None, "mgsm_es/test: cannot align by index: it has 250 items and gsm8k/test has 1,319; when it "
                           "translates the first 250 items set [translation] limit = 250"),
    (_mgsm_spec("[translation]\nlimit = 200\n"), None, "it has 250 items and items 0..199 of gsm8k/test has 200"),
    (_mgsm_spec("[translation]\noffset = 1200\nlimit = 250\n"), None, "gsm8k/test has 1,319 items, too few for"),
    (_mgsm_spec("[translation]\nalign = \"id\"\nid = \"question\"\n"), None,
     "mgsm_es/test: cannot align by id: item 0's 'question' 'Los patos de Janet"),
    (_mgsm_spec("[translation]\nalign = \"id\"\nid = \"qid\"\n"), None,
     "gsm8k/test: cannot align by id: item 0 has no id field 'qid'"),
])
def test_an_alignment_that_cannot_be_established_is_refused_in_one_line(tmp_path, shared_data, mgsm, only, message):
    tasks, bench = _folders(tmp_path, shared_data, mgsm=mgsm)
    with pytest.raises(TaskSpecError) as e:
        links(load_registry(tasks, only), bench)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_alignment_by_an_id_field_and_its_refusals(tmp_path):
    (tmp_path / "src.jsonl").write_text("".join(json.dumps({"id": f"q{i}", "question": f"Q {i}"}) + "\n" for i in range(4)))
    (tmp_path / "tr.jsonl").write_text("".join(json.dumps({"meta": {"src": f"q{i}"}, "question": f"P {i}"}) + "\n"
                                               for i in (2, 0)))
    spec = 'name = "{n}"\nkind = "qa"\n{t}[fields]\nquestion = "question"\n[[splits]]\nname = "test"\nfile = "{f}"\n'
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "src.toml").write_text(spec.format(n="src", t="", f="src.jsonl"))
    (tmp_path / "tasks" / "tr.toml").write_text(spec.format(
        n="tr", f="tr.jsonl", t='translation_of = "src"\n[translation]\nalign = "id"\nid = "meta.src"\nsource_id = "id"\n'))
    df = links(load_registry(tmp_path / "tasks"), tmp_path)
    assert list(zip(df["instance_index"], df["source_index"])) == [(0, 2), (1, 0)]
    (tmp_path / "tr.jsonl").write_text(json.dumps({"meta": {"src": "q9"}, "question": "P"}) + "\n")
    with pytest.raises(TaskSpecError, match="item 0's 'meta.src' 'q9' is not in src/test"):
        links(load_registry(tmp_path / "tasks"), tmp_path)
    (tmp_path / "src.jsonl").write_text(json.dumps({"question": "Q"}) + "\n")
    with pytest.raises(TaskSpecError, match="src/test: cannot align by id: item 0 has no id field 'id'"):
        links(load_registry(tmp_path / "tasks"), tmp_path)
    (tmp_path / "tasks" / "tr.toml").write_text(spec.format(n="tr", f="tr.jsonl", t='translation_of = "src"\n'
                                                            '[translation]\nalign = "id"\n'))
    with pytest.raises(TaskSpecError, match='align = "id" needs id'):
        load_registry(tmp_path / "tasks")


def test_the_lm_eval_table_links_mgsm_and_skips_okapi_with_a_note():
    mgsm = translation_for("mgsm_direct_de")
    assert (mgsm.of, mgsm.split, mgsm.splits, mgsm.limit, mgsm.unavailable) == ("gsm8k", "test", ("test",), 250, "")
    assert translation_for("xnli_de").of == "xnli_en" and translation_for("xnli_en") is None
    assert translation_for("gsm8k") is None and translation_for("arc_challenge") is None
    okapi = translation_for("m_mmlu_de")
    assert okapi.of == "mmlu" and "Okapi" in okapi.unavailable
    from contam_assets.sources.registry import Fields, SplitSpec, TaskSpec

    def spec(name, translation=None):
        return TaskSpec(name=name, kind="qa", language="en", fields=Fields(question="question"),
                        splits=(SplitSpec(name="test", file="/nonexistent/x.jsonl"),), translation=translation)

    assert links([spec("m_mmlu_de", okapi)], None).height == 0  # its source is not in the run: nothing to link
    # beside its source (the default registry has mmlu) the shipped link is skipped with one note, not refused
    notes: list[str] = []
    assert links([spec("m_mmlu_de", okapi), spec("mmlu")], None, notes).height == 0
    assert len(notes) == 1 and notes[0].startswith("m_mmlu_de: not linked to mmlu (its items cannot be aligned: ")
    assert "Okapi" in notes[0] and "\n" not in notes[0]
    assert links([spec("arc_de", translation_for("arc_de")), spec("arc_challenge")], None).height == 0
    # a spec that declares the same translation itself is still refused in one line
    own = dataclasses.replace(okapi, shipped=False)
    with pytest.raises(TaskSpecError, match=r"^m_mmlu_de \(translation of mmlu\): its items cannot be aligned"):
        links([spec("m_mmlu_de", own), spec("mmlu")], None)


MATCH = dict(shard="s.jsonl", doc_id="d", source="web", split="test", subject=None, choice_index=None,
             is_correct=None, score=0.9, required_score=0.5, flagged=True, needs_review=False, preset="default",
             training_text="t", reason="question+answer")


def _planted_db(con, with_via: bool = True) -> None:
    tables.ensure_schema(con)
    if not with_via:
        con.execute("alter table matches drop column via_task")
    rows = [dict(MATCH, match_id=f"m{i}", line=i, task="gsm8k", suite="gsm8k", instance_index=i, record_id=i)
            for i in (3, 15, 400)]
    rows.append(dict(MATCH, match_id="near", line=9, task="gsm8k", suite="gsm8k", instance_index=27, record_id=27,
                     flagged=False))
    con.register("_m", pl.DataFrame(rows).to_arrow())
    con.execute(f"insert into matches ({', '.join(rows[0])}) select * from _m")
    con.execute("insert into shard_stats (shard, read, rejected) values ('s.jsonl', 10, 0)")
    con.execute("insert into tasks (task, language) values ('gsm8k', 'en'), ('mgsm_es', 'es')")
    con.execute("insert into instances (record_id, task, suite, split, instance_index, question) "
                "select 1000 + i, 'mgsm_es', 'mgsm_es', 'test', i, 'pregunta ' || i from range(250) t(i)")
    con.register("_l", pl.DataFrame([dict(task="mgsm_es", split="test", instance_index=i, subject=None,
                                          source_task="gsm8k", source_split="test", source_index=i, source_subject=None,
                                          align="index") for i in range(250)]).to_arrow())
    con.execute("insert into translation_links select * from _l")


def test_a_source_match_is_reported_for_its_translation_and_removes_nothing_more(tmp_path):
    con = duckdb.connect(str(tmp_path / "t.duckdb"))
    _planted_db(con)
    assert tables.recompute_removals(con) == 3
    via = con.execute("select instance_index, record_id, eval_question, line, match_id from matches "
                      "where via_task = 'gsm8k' and task = 'mgsm_es' order by 1").fetchall()
    assert [(i, r, q, line) for i, r, q, line, _ in via] == [(3, 1003, "pregunta 3", 3), (15, 1015, "pregunta 15", 15)]
    assert len({m for *_, m in via} | {"m3", "m15"}) == 4  # their own match ids
    assert con.execute("select count(*) from matches where coalesce(via_task, '') = ''").fetchone()[0] == 4
    assert con.execute("select string_agg(reason, ',') from removals").fetchone()[0] == "gsm8k,gsm8k,gsm8k"
    assert exposure_lines(con) == ["mgsm_es (translation of gsm8k): 2 of 250 items exposed through English copies of gsm8k"]
    tables.recompute_removals(con, "s.jsonl")  # rebuilt, not added again
    assert con.execute("select count(*) from matches where via_task <> ''").fetchone()[0] == 2


def test_an_older_database_without_via_task_is_read_and_updated(tmp_path):
    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    _planted_db(con, with_via=False)
    con.close()
    ro = duckdb.connect(str(path), read_only=True)
    read_only_view(ro)  # store.connect does this on every read-only connection
    assert ro.execute(f"select count(*) from ({tables.REMOVABLE_SQL}) r where {tables.REMOVES}").fetchone()[0] == 3
    assert exposure_lines(ro)[0].startswith("mgsm_es (translation of gsm8k): 0 of 250")
    ro.close()
    con = duckdb.connect(str(path))
    tables.ensure_schema(con)  # the next write adds the column; old rows are direct matches
    assert tables.recompute_removals(con) == 3
    assert con.execute("select count(*) from matches where via_task = 'gsm8k'").fetchone()[0] == 2


def _contam(*args, home: Path):
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "contam_assets.cli", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=600)


def test_detect_reports_a_translation_exposed_through_english_copies(tmp_path, shared_data):
    tasks, bench = _folders(tmp_path, shared_data)
    gsm = [json.loads(line) for line in open(shared_data / "gsm8k_test.jsonl")]
    docs = [{"id": f"g{i}", "text": f"Homework help.\n{gsm[i]['question']}\n{gsm[i]['answer']}\nGood luck!"}
            for i in INSIDE + BEYOND]
    docs += [{"id": f"c{i}", "text": "A clean document about gardening and the weather, nothing more. " * 3} for i in range(5)]
    (tmp_path / "pool").mkdir()
    (tmp_path / "pool" / "shard.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    out = tmp_path / "out"
    r = _contam("detect", "--pool", tmp_path / "pool", "--out", out, "--benchmarks", bench, "--tasks-dir", tasks,
                home=tmp_path / "home")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "removed 25" in r.stdout
    con = duckdb.connect(str(out / "contam.duckdb"), read_only=True)
    via = con.execute("select instance_index, doc_id from matches where task = 'mgsm_es' and via_task = 'gsm8k' "
                      "order by 1").fetchall()
    assert via == [(i, f"g{i}") for i in INSIDE]
    assert con.execute("select count(*) from matches where task = 'mgsm_es' and via_task = ''").fetchone()[0] == 0
    assert con.execute("select count(*), count(*) filter (where reason = 'gsm8k') from removals").fetchone() == (25, 25)
    stored, flagged = con.execute("select count(*), count(*) filter (where flagged) from matches "
                                  "where coalesce(via_task, '') = ''").fetchone()
    con.close()
    assert f"matches stored {stored:,} (flagged {flagged:,})" in r.stdout  # the translated rows are not counted again
    line = "mgsm_es (translation of gsm8k): 20 of 250 items exposed through English copies of gsm8k"
    assert line in (out / "report.html").read_text()
    r = _contam("review", out, "--stats", home=tmp_path / "home")
    assert r.returncode == 0 and line in r.stdout
    # the same run with a translation that cannot be aligned: one line, exit 2
    (tasks / "mgsm_es.toml").write_text(_mgsm_spec(""))
    r = _contam("detect", "--pool", tmp_path / "pool", "--out", tmp_path / "out2", "--benchmarks", bench,
                "--tasks-dir", tasks, home=tmp_path / "home")
    assert r.returncode == 2 and "cannot align by index" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_counts_of_matches_leave_out_the_rows_of_translated_tasks(tmp_path, capsys):
    """The report, the review's totals and stats and the retired-shard counts of a run with a translation
    equal those of the same run without it: a translated task's rows repeat direct matches."""
    import re

    from contam_assets.commands.review import _print_stats
    from contam_assets.report.html import render_report
    from contam_assets.web.review_data import totals

    seen = []
    for with_links in (True, False):
        con = duckdb.connect(str(tmp_path / f"{with_links}.duckdb"))
        _planted_db(con)
        if not with_links:
            con.execute("delete from translation_links")
        tables.recompute_removals(con)
        assert con.execute("select count(*) from matches where via_task <> ''").fetchone()[0] == (2 if with_links else 0)
        page = render_report(con)
        kpis = re.search(r'<div class="kpis">.*?</div></div>', page, re.S).group(0)
        _print_stats(con)
        stats = capsys.readouterr().out
        seen.append((kpis, totals(con), stats.split("\nper reason")[0].split("per task and split")[1], "pregunta" in page))
        con.close()
    assert seen[0] == seen[1]
    assert seen[0][1]["matches"] == 4 and seen[0][1]["flagged_matches"] == 3 and not seen[0][3]


def test_an_incremental_merge_counts_the_direct_matches_as_a_full_scan_does(tmp_path):
    from contam_assets.rescan.shard import ShardOutcome
    from contam_assets.rescan.state import _merge, ensure_schema

    con = duckdb.connect(str(tmp_path / "t.duckdb"))
    _planted_db(con)
    ensure_schema(con)
    tables.recompute_removals(con)
    assert con.execute("select count(*) from matches where via_task <> ''").fetchone()[0] == 2
    out = ShardOutcome(shard="s.jsonl", mode="incremental", matches=pl.DataFrame(), stats={}, rejects=None,
                       stream_key=None, tasks=["other"], drop=[])
    _merge(con, out, tasks_now={"other": "h"}, digest="d", scan_config="c", size=1, mtime_ns=1, records=None)
    assert con.execute("select candidates, flagged from shard_stats where shard = 's.jsonl'").fetchone() == (4, 3)
