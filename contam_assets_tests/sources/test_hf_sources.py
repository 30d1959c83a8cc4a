"""Hugging Face dataset files in task specs (Parquet, Arrow, JSON, save_to_disk and Hub-cache folders), fields by
dotted path, one-line errors naming task/split/row/field, and no silent drops in the run output."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from contam_assets.detector.config import preset
from contam_assets.sources.reference import build_reference_set
from contam_assets.sources.registry import TaskSpecError, load_spec
from contam_assets_tests.e2e.test_cli_data import contam

TRIVIA = [
    {"question": "Which Lloyd Webber musical premiered in the US on 10 December 1993 at the Shubert Theatre?",
     "answer": {"value": "Sunset Boulevard", "aliases": ["Sunset Blvd", "Sunset Boulevard"]}},
    {"question": "Who was the man behind The Chipmunks, the singing group of three cartoon rodents from 1958?",
     "answer": {"value": "David Seville", "aliases": ["Ross Bagdasarian"]}},
]


def spec(tmp: Path, name: str, body: str, kind: str = "qa") -> Path:
    p = tmp / "tasks" / f"{name}.toml"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(f'name = "{name}"\nkind = "{kind}"\n{body}')
    return p


def gsm_rows(shared: Path, n: int | None = None) -> list[dict]:
    rows = [json.loads(line) for line in open(shared / "gsm8k_test.jsonl")]
    return rows[:n] if n else rows


def qa_pairs(df):
    return df.filter(~df["derived"]).select("split", "instance_index", "question", "answer").rows()


@pytest.fixture(scope="module")
def jsonl_reference(shared_data):
    s = load_spec(Path(__file__).resolve().parents[2] / "data" / "tasks" / "gsm8k.toml")
    s = type(s)(**{**s.__dict__, "splits": tuple(x for x in s.splits if x.name == "test")})
    recs, _ = build_reference_set([s], shared_data, preset("default"))
    return qa_pairs(recs)


@pytest.mark.parametrize("layout", ["parquet", "arrow_stream", "json_array", "save_to_disk", "dataset_dict", "hub_cache"])
def test_hub_layouts_give_the_same_instances_as_the_jsonl_spec(tmp_path, shared_data, jsonl_reference, layout):
    rows = gsm_rows(shared_data)
    table = pa.Table.from_pylist(rows)
    bench = tmp_path / "bench"
    if layout == "parquet":
        (bench / "gsm8k" / "main").mkdir(parents=True)
        pq.write_table(table, bench / "gsm8k" / "main" / "test-00000-of-00001.parquet")
        file = "gsm8k/main/test-*.parquet"
    elif layout == "arrow_stream":
        bench.mkdir()
        with pa.OSFile(str(bench / "test.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table, max_chunksize=500)
        file = "test.arrow"
    elif layout == "json_array":
        bench.mkdir()
        (bench / "test.json").write_text(json.dumps(rows))
        file = "test.json"
    elif layout == "save_to_disk":
        import datasets

        datasets.Dataset.from_list(rows).save_to_disk(str(bench / "gsm8k_test"))
        file = "gsm8k_test"
    elif layout == "dataset_dict":  # DatasetDict.save_to_disk: the split's own subfolder is read, not every split
        import datasets

        datasets.DatasetDict({"test": datasets.Dataset.from_list(rows), "train": datasets.Dataset.from_list(rows[:5])}
                             ).save_to_disk(str(bench / "gsm8k"))
        file = "gsm8k"
    else:  # a Hub-cache repository folder: refs/main names the snapshot
        snap = bench / "datasets--openai--gsm8k" / "snapshots" / "abc123"
        (snap / "main").mkdir(parents=True)
        (bench / "datasets--openai--gsm8k" / "snapshots" / "old999").mkdir()
        (bench / "datasets--openai--gsm8k" / "refs").mkdir()
        (bench / "datasets--openai--gsm8k" / "refs" / "main").write_text("abc123")
        pq.write_table(table.slice(0, 700), snap / "main" / "test-00000-of-00002.parquet")
        pq.write_table(table.slice(700), snap / "main" / "test-00001-of-00002.parquet")
        file = "datasets--openai--gsm8k"
    s = load_spec(spec(tmp_path, "gsm8k", f'[fields]\nquestion = "question"\nanswer = "answer"\n'
                                          f'[[splits]]\nname = "test"\nfile = "{file}"\n'))
    recs, stats = build_reference_set([s], bench, preset("default"))
    assert not stats.bad_rows
    assert qa_pairs(recs) == jsonl_reference and len(jsonl_reference) == 1319


def test_nested_fields_by_dotted_path_and_index(tmp_path):
    bench = tmp_path / "bench"
    bench.mkdir()
    pq.write_table(pa.Table.from_pylist(TRIVIA), bench / "validation.parquet")
    body = '[[splits]]\nname = "validation"\nfile = "validation.parquet"\n[fields]\nquestion = "question"\n'
    recs, _ = build_reference_set([load_spec(spec(tmp_path, "triviaqa", body + 'answer = "answer.value"\n'))], bench,
                                  preset("default"))
    assert recs["answer"].to_list() == ["Sunset Boulevard", "David Seville"]
    recs, _ = build_reference_set([load_spec(spec(tmp_path, "triviaqa", body + 'answer = "answer.aliases[-1]"\n'))],
                                  bench, preset("default"))
    assert recs["answer"].to_list() == ["Sunset Boulevard", "Ross Bagdasarian"]
    # a mapping where text is expected, a missing part, an index past the end: one line naming task/split/row/field
    for path, needle in (("answer", "field 'answer' holds a mapping, not text (name a part of it: answer.value"),
                         ("answer.valu", "no field 'answer.valu' (it has: value, aliases)"),
                         ("answer.aliases[1]", "has no [1]")):
        with pytest.raises(TaskSpecError) as exc:
            build_reference_set([load_spec(spec(tmp_path, "triviaqa", body + f'answer = "{path}"\n'))], bench,
                                preset("default"))
        msg = str(exc.value)
        assert "\n" not in msg and needle in msg, msg
        assert msg.startswith("triviaqa/validation row ") and "(validation.parquet:" in msg


def test_choices_by_path_hf_style(tmp_path):
    rows = [{"question": {"stem": "Which gas do plants take in from the air to make their food by photosynthesis?"},
             "choices": {"text": ["carbon dioxide", "oxygen", "nitrogen", "helium"], "label": ["A", "B", "C", "D"]},
             "answerKey": "A"}]
    bench = tmp_path / "bench"
    bench.mkdir()
    pq.write_table(pa.Table.from_pylist(rows), bench / "test.parquet")
    body = ('[[splits]]\nname = "test"\nfile = "test.parquet"\n[fields]\nquestion = "question.stem"\n'
            'choices = "choices.text"\ngold = "answerKey"\n')
    recs, _ = build_reference_set([load_spec(spec(tmp_path, "obqa", body, "multiple-choice"))], bench, preset("default"))
    assert recs["answer"].to_list() == ["carbon dioxide", "oxygen", "nitrogen", "helium"]
    assert recs["is_correct"].to_list() == [True, False, False, False]
    assert set(recs["question"].to_list()) == {rows[0]["question"]["stem"]}


TEN_WORDS = ["Which planet in our solar system has the most moons today?",
             "What is the boiling point of water at sea level?",
             "Who wrote the famous play about the prince of Denmark?",
             "Pneumonoultramicroscopicsilicovolcanoconiosis hippopotomonstrosesquippedaliophobia floccinaucinihilipilification "
             "antidisestablishmentarianism supercalifragilisticexpialidocious sesquipedalianism otorhinolaryngological "
             "psychophysicotherapeutics spectrophotofluorometrically thyroparathyroidectomized?"]


@pytest.fixture(scope="module")
def cli_bench(tmp_path_factory, shared_data):
    tmp = tmp_path_factory.mktemp("cli")
    bench = tmp / "bench"
    (bench / "gsm8k" / "main").mkdir(parents=True)
    rows = gsm_rows(shared_data, 60)
    pq.write_table(pa.Table.from_pylist(rows), bench / "gsm8k" / "main" / "test-00000-of-00001.parquet")
    (bench / "tiny.jsonl").write_text("".join(json.dumps({"q": q}) + "\n" for q in TEN_WORDS))
    # Python reprs instead of JSON: every row unreadable
    (bench / "broken.jsonl").write_text("".join(repr(r) + "\n" for r in rows))
    spec(tmp, "gsm8k_hub", '[fields]\nquestion = "question"\nanswer = "answer"\n'
                           '[[splits]]\nname = "test"\nfile = "gsm8k/main/test-*.parquet"\n')
    spec(tmp, "tiny", '[fields]\nquestion = "q"\n[[splits]]\nname = "test"\nfile = "tiny.jsonl"\n')
    spec(tmp, "broken", '[fields]\nquestion = "question"\n[[splits]]\nname = "test"\nfile = "broken.jsonl"\n')
    pool = tmp / "pool"
    pool.mkdir()
    host = "Notes from the weekend market and a long walk along the river bank. "
    pool.joinpath("a.jsonl").write_text(json.dumps({"id": "d0", "text": host + rows[3]["question"] + " " + rows[3]["answer"]})
                                        + "\n" + json.dumps({"id": "d1", "text": host * 3}) + "\n")
    return tmp, bench, pool


def test_parquet_task_runs_and_short_questions_are_reported(cli_bench):
    tmp, bench, pool = cli_bench
    out = tmp / "o1"
    r = contam("detect", "--pool", pool, "--out", out, "--benchmarks", bench, "--tasks-dir", tmp / "tasks",
               "--tasks", "gsm8k_hub,tiny", env_extra={"DAGSTER_HOME": str(tmp / "h1")})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "removed 1" in r.stdout
    assert "  gsm8k_hub/test: 60 instance(s), 60 indexed\n" in r.stdout
    assert "  tiny/test: 4 instance(s), 1 indexed, 3 skipped: too short (min_tokens) 3 (not indexed" in r.stdout
    con = duckdb.connect(str(out / "contam.duckdb"), read_only=True)
    assert con.execute("select count(*) from instances where task = 'tiny' and skip_reason = 'min_tokens'").fetchone() == (3,)
    assert con.execute("select instances, indexed, reasons from reference_summary where task = 'tiny'").fetchall() == \
        [(4, 1, "min_tokens=3")]
    con.close()
    assert "tiny" in (out / "report.html").read_text() and "min_tokens=3" in (out / "report.html").read_text()


def test_a_task_that_contributes_nothing_fails_with_its_reason(cli_bench):
    tmp, bench, pool = cli_bench
    args = ("detect", "--pool", pool, "--benchmarks", bench, "--tasks-dir", tmp / "tasks", "--tasks", "gsm8k_hub,broken")
    r = contam(*args, "--out", tmp / "o2", env_extra={"DAGSTER_HOME": str(tmp / "h2")})
    assert r.returncode == 2, r.stdout[-2000:]
    err = r.stderr.strip().splitlines()[-1]
    assert "1 task(s) contributed no indexed instance: broken: test 60 instance(s) skipped (unreadable=60)" in err
    assert "malformed JSON" in err and "--allow-missing" in err
    r = contam(*args, "--out", tmp / "o3", "--allow-missing", env_extra={"DAGSTER_HOME": str(tmp / "h3")})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "  broken/test: 60 instance(s), 0 indexed, 60 skipped: unreadable (unreadable) 60" in r.stdout


# -- lm-evaluation-harness tasks --------------------------------------------------------------------------------

LM_EVAL_TASKS = Path(__import__("lm_eval.tasks", fromlist=["x"]).__file__).parent
HELLASWAG = [dict(ind=i, activity_label=label, ctx_a=a, ctx_b=b, ctx=f"{a} {b}", endings=endings, source_id=f"activitynet~{i}",
                  split="val", split_type="zeroshot", label=str(gold))
             for i, (label, a, b, endings, gold) in enumerate([
                 ("Removing ice from car", "Then, the man writes over the snow covering the window of a car, and a woman "
                  "wearing winter clothes smiles.", "then",
                  [", the man adds wax to the windshield and cuts it.", ", a person boards a ski lift while two men watch.",
                   ", the man puts on a christmas coat, knitted with netting.", ", the man continues removing the snow on his car."], 3),
                 ("Baking cookies", "A female chef in white uniform shows a stack of baking pans in a large kitchen presenting them.",
                  "the pans", ["contain egg yolks and baking soda.", "are then sprinkled with brown sugar.",
                               "are placed in a strainer on the counter.", "are filled with pastries and loaded into the oven."], 3),
                 ("Playing the harmonica", "A man is standing on a stage holding a harmonica close to a microphone while "
                  "people sit at tables.", "he", ["starts playing a slow song on the harmonica.", "throws the harmonica into the crowd.",
                                                   "eats a sandwich from one of the tables.", "sits down and reads a long newspaper."], 0)])]


@pytest.fixture(scope="module")
def lm_eval_include(tmp_path_factory, shared_data):
    """lm-eval's own gsm8k and arc_easy YAMLs (include:) over Hub-layout Parquet made from ../shared/data."""
    tmp = tmp_path_factory.mktemp("lme")
    gsm = tmp / "openai--gsm8k" / "main"
    gsm.mkdir(parents=True)
    rows = gsm_rows(shared_data)
    pq.write_table(pa.Table.from_pylist(rows), gsm / "test-00000-of-00001.parquet")
    pq.write_table(pa.Table.from_pylist([json.loads(x) for x in open(shared_data / "gsm8k_train.jsonl")][:200]),
                   gsm / "train-00000-of-00001.parquet")
    arc_files = {}
    for config, name in (("ARC-Easy", "arc_easy"), ("ARC-Challenge", "arc_challenge")):  # the Hub's layout
        arc_rows = []  # from llm-foundry's copies
        for i, line in enumerate(open(shared_data / f"{name}_llmfoundry.jsonl")):
            r = json.loads(line)
            arc_rows.append({"id": f"{name}-{i}", "question": r["query"].removeprefix("Question: "),
                             "choices": {"text": r["choices"], "label": list("ABCDE")[:len(r["choices"])]},
                             "answerKey": "ABCDE"[r["gold"]]})
        folder = tmp / "allenai--ai2_arc" / config
        folder.mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(arc_rows), folder / "test-00000-of-00001.parquet")
        arc_files[name] = folder / "test-00000-of-00001.parquet"
    mmlu = tmp / "cais--mmlu" / "abstract_algebra"  # the Hub's layout: question, subject, choices, answer
    mmlu.mkdir(parents=True)
    import csv

    with open(shared_data / "mmlu_test" / "abstract_algebra_test.csv", newline="") as fh:
        mrows = [{"question": r["question"], "subject": "abstract_algebra",
                  "choices": [r[f"choice{c}"] for c in range(4)], "answer": int(r["answer"])} for r in csv.DictReader(fh)]
    pq.write_table(pa.Table.from_pylist(mrows), mmlu / "test-00000-of-00001.parquet")
    inc = tmp / "include"
    inc.mkdir()
    (inc / "mmlu_abstract_algebra.yaml").write_text(
        f"task: mmlu_abstract_algebra\ninclude: {LM_EVAL_TASKS / 'mmlu' / 'default' / 'mmlu_abstract_algebra.yaml'}\n"
        f"dataset_path: parquet\ndataset_name: null\nfewshot_split: null\n"
        f"dataset_kwargs:\n  data_files:\n    test: {mmlu / 'test-00000-of-00001.parquet'}\n")
    # the same without fewshot_split: null, so lm_eval looks for the 'dev' split the local files lack
    (inc / "mmlu_nodev.yaml").write_text(
        f"task: mmlu_nodev\ninclude: {LM_EVAL_TASKS / 'mmlu' / 'default' / 'mmlu_abstract_algebra.yaml'}\n"
        f"dataset_path: parquet\ndataset_name: null\n"
        f"dataset_kwargs:\n  data_files:\n    test: {mmlu / 'test-00000-of-00001.parquet'}\n")
    hs = tmp / "Rowan" / "hellaswag" / "default"  # HellaSwag in the Hub's layout (ActivityNet-style rows)
    hs.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(HELLASWAG), hs / "validation-00000-of-00001.parquet")
    (inc / "hellaswag.yaml").write_text(
        f"task: hellaswag\ninclude: {LM_EVAL_TASKS / 'hellaswag' / 'hellaswag.yaml'}\ndataset_path: parquet\n"
        f"dataset_name: null\ntraining_split: null\n"
        f"dataset_kwargs:\n  data_files:\n    validation: {hs / 'validation-00000-of-00001.parquet'}\n")
    (inc / "contam_group.yaml").write_text(
        "group: contam_group\ntask:\n  - gsm8k\n  - arc_easy\n  - mmlu_abstract_algebra\n  - mmlu_nodev\n")
    (inc / "gsm8k.yaml").write_text(
        f"task: gsm8k\ninclude: {LM_EVAL_TASKS / 'gsm8k' / 'gsm8k.yaml'}\ndataset_path: parquet\ndataset_name: null\n"
        f"dataset_kwargs:\n  data_files:\n    train: {gsm / 'train-00000-of-00001.parquet'}\n"
        f"    test: {gsm / 'test-00000-of-00001.parquet'}\n")
    for name in ("arc_easy", "arc_challenge"):  # lm-eval's own YAMLs (arc_challenge includes arc_easy's)
        (inc / f"{name}.yaml").write_text(
            f"task: {name}\ninclude: {LM_EVAL_TASKS / 'arc' / (name + '.yaml')}\ndataset_path: parquet\n"
            f"dataset_name: null\ntraining_split: null\nvalidation_split: null\n"
            f"dataset_kwargs:\n  data_files:\n    test: {arc_files[name]}\n")
    (inc / "broken_task.yaml").write_text(
        f"task: broken_task\ninclude: {LM_EVAL_TASKS / 'gsm8k' / 'gsm8k.yaml'}\ndataset_path: parquet\n"
        f"dataset_name: null\ndataset_kwargs:\n  data_files:\n    test: {tmp / 'nowhere.parquet'}\n")
    return tmp, inc


def test_lm_eval_gsm8k_and_arc_easy_give_the_toml_instances(lm_eval_include, shared_data):
    from contam_assets.detector.text import clean_text
    from contam_assets.sources.catalogue import CATALOGUE_DIR
    from contam_assets.sources.lm_eval_tasks import materialize
    from contam_assets.sources.registry import load_registry

    tmp, inc = lm_eval_include
    specs, reports = materialize(["contam_group"], tmp / "out", str(inc))  # a group expands to its leaves
    hs_specs, hs_reports = materialize(["hellaswag"], tmp / "out_hs", str(inc))
    assert [(r.task, r.splits) for r in hs_reports] == [("hellaswag", {"validation": 3})]
    ac_specs, ac_reports = materialize(["arc_challenge"], tmp / "out_ac", str(inc))
    assert [(r.task, r.splits, r.error) for r in ac_reports] == [("arc_challenge", {"test": 1172}, "")]
    assert sorted((r.task, r.splits, r.error) for r in reports) == [
        ("arc_easy", {"test": 2376}, ""), ("gsm8k", {"test": 1319, "train": 200}, ""),
        ("mmlu_abstract_algebra", {"test": 100}, ""),
        ("mmlu_nodev", {}, "KeyError: 'dev' (a split the task names is not in its dataset)")]
    assert [s.name for s in specs] == ["gsm8k", "arc_easy", "mmlu_abstract_algebra"]
    cfg = preset("default")
    ours, _ = build_reference_set(specs, None, cfg)
    toml = [s for s in load_registry(Path(__file__).resolve().parents[2] / "data" / "tasks",
                                     ["gsm8k", "arc_easy", "arc_challenge", "mmlu"])]
    theirs, _ = build_reference_set(toml, shared_data, cfg)
    theirs = theirs.with_columns(task=pl.when(pl.col("subject") == "abstract_algebra")
                                 .then(pl.lit("mmlu_abstract_algebra")).otherwise(pl.col("task")))
    ours = pl.concat([ours, build_reference_set(ac_specs, None, cfg)[0]])
    ours = pl.concat([ours, build_reference_set(hs_specs, None, cfg)[0]])  # HellaSwag against the catalogue's spec
    theirs = pl.concat([theirs, build_reference_set(load_registry(CATALOGUE_DIR, ["hellaswag"]), tmp, cfg)[0]])
    opts = cfg.clean_options

    def items(df, task, split):
        d = df.filter((df["task"] == task) & (df["split"] == split) & ~df["derived"]).sort("instance_index", "choice_index")
        return [(i, clean_text(q, opts), clean_text(a or "", opts), c)
                for i, q, a, c in d.select("instance_index", "question", "answer", "is_correct").rows()]

    for task, split in (("gsm8k", "test"), ("arc_easy", "test"), ("arc_challenge", "test"),
                        ("mmlu_abstract_algebra", "test"), ("hellaswag", "validation")):
        a, b = items(ours, task, split), items(theirs, task, split)
        assert len(a) == len(b) and a == b, (task, next((x, y) for x, y in zip(a, b) if x != y))


def test_lm_eval_unknown_and_failing_tasks_are_reported(lm_eval_include):
    from contam_assets.sources.lm_eval_tasks import LmEvalError, materialize

    tmp, inc = lm_eval_include
    with pytest.raises(LmEvalError, match=r"unknown lm-eval task\(s\) \['no_such_task'\]"):
        materialize(["no_such_task"], tmp / "o2", str(inc))
    r = contam("tasks", "--tasks", "gsm8k", "--lm-eval-tasks", "contam_group", "--lm-eval-include", inc)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "lm-eval tasks contam_group: 3 of 4 leaf task(s) with docs" in r.stdout
    assert "  lm-eval mmlu_nodev: FAILED KeyError: 'dev' (a split the task names is not in its dataset)" in r.stdout
    specs, reports = materialize(["broken_task"], tmp / "o3", str(inc))
    assert specs == [] and not reports[0].ok and reports[0].error, reports


def test_detect_with_lm_eval_tasks_finds_the_planted_copies_of_tasks(lm_eval_include, cli_bench, gsm8k_bench):
    tmp, inc = lm_eval_include
    _, _, pool = cli_bench
    tasks = Path(__file__).resolve().parents[2] / "data" / "tasks"
    a = contam("detect", "--pool", pool, "--out", tmp / "d1", "--lm-eval-tasks", "gsm8k", "--lm-eval-include", inc,
               env_extra={"DAGSTER_HOME": str(tmp / "h1")})
    assert a.returncode == 0, a.stderr[-3000:]
    assert "  lm-eval gsm8k: test 1,319, train 200" in a.stdout and "  gsm8k/test: 1,319 instance(s), 1,319 indexed" in a.stdout
    # the project's own gsm8k spec over the rows of the lm-eval folders: the test split, train's first 200
    b = contam("detect", "--pool", pool, "--out", tmp / "d2", "--benchmarks", gsm8k_bench, "--tasks-dir", tasks,
               "--tasks", "gsm8k", env_extra={"DAGSTER_HOME": str(tmp / "h2")})
    assert b.returncode == 0, b.stderr[-3000:]

    def found(out):
        con = duckdb.connect(str(out / "contam.duckdb"), read_only=True)
        rows = con.execute("select distinct shard, line, task, split, instance_index from matches where flagged "
                           "order by all").fetchall()
        con.close()
        return rows

    assert found(tmp / "d1") == found(tmp / "d2") == [("a.jsonl", 0, "gsm8k", "test", 3)]
    c = contam("detect", "--pool", pool, "--out", tmp / "d3", "--lm-eval-tasks", "gsm8k,broken_task",
               "--lm-eval-include", inc, env_extra={"DAGSTER_HOME": str(tmp / "h3")})
    assert c.returncode == 2 and "1 lm-eval task(s) yielded nothing: broken_task: " in c.stderr.strip().splitlines()[-1]
    d = contam("detect", "--pool", pool, "--out", tmp / "d4", "--lm-eval-tasks", "gsm8k,broken_task",
               "--lm-eval-include", inc, "--allow-missing", env_extra={"DAGSTER_HOME": str(tmp / "h4")})
    assert d.returncode == 0, d.stderr[-3000:]
    assert "  lm-eval broken_task: FAILED " in d.stdout and "removed 1" in d.stdout


def test_contam_tasks_lists_splits_counts_and_unused_files(tmp_path, shared_data):
    r = contam("tasks", "--benchmarks", shared_data)
    assert r.returncode == 0, r.stderr
    lines = [" ".join(x.split()) for x in r.stdout.splitlines()]
    assert "gsm8k qa test benchmarks 1 1,319 0" in lines and "mmlu multiple-choice test benchmarks 57 14,042 0" in lines
    assert "7 of 7 task(s) have instances" in lines and "skywork_mock_gsm8k_eval_1419.jsonl" in lines
    bench = tmp_path / "bench"
    (bench / "gsm8k" / "main").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(gsm_rows(shared_data, 7)), bench / "gsm8k" / "main" / "test-00000-of-00001.parquet")
    (bench / "bad.jsonl").write_text('{"question": "q"}\nnot json\n')
    spec(tmp_path, "gsm8k_hub", '[fields]\nquestion = "question"\n[[splits]]\nname = "test"\nfile = "gsm8k/main/*.parquet"\n')
    spec(tmp_path, "bad", '[fields]\nquestion = "question"\n[[splits]]\nname = "test"\nfile = "bad.jsonl"\n')
    spec(tmp_path, "absent", '[fields]\nquestion = "question"\n[[splits]]\nname = "dev"\nfile = "absent/*.parquet"\n')
    r = contam("tasks", "--benchmarks", bench, "--tasks-dir", tmp_path / "tasks")
    lines = [" ".join(x.split()) for x in r.stdout.splitlines()]
    assert r.returncode == 0 and "gsm8k_hub qa test benchmarks 1 7 0" in lines and "bad qa test benchmarks 1 1 1" in lines
    assert "absent qa dev missing 0 - (looks for absent/*.parquet)" in lines and "2 of 3 task(s) have instances" in lines
    r = contam("tasks", "--benchmarks", tmp_path / "nope")
    assert r.returncode == 2 and r.stderr.strip() == f"contam tasks: error: benchmark folder not found: {tmp_path / 'nope'}"


def test_the_docs_contam_tasks_command_runs_as_written():
    import subprocess
    import sys

    from contam_assets_tests.support.doc_commands import command

    root = Path(__file__).resolve().parents[2]
    cmd = command("docs/benchmarks.md", "contam tasks --benchmarks")
    r = subprocess.run(["bash", "-c", cmd.replace("contam ", f"{sys.executable} -m contam_assets.cli ", 1)], cwd=root,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "7 of 7 task(s) have instances" in r.stdout, r.stderr
    cmd = command("docs/benchmarks.md", "contam tasks --tasks-dir catalogue")
    r = subprocess.run(["bash", "-c", cmd.replace("contam ", f"{sys.executable} -m contam_assets.cli ", 1)], cwd=root,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "0 of 44 task(s) have instances" in r.stdout, r.stderr


def test_lm_eval_yaml_in_tasks_dir_is_named_with_the_fix(tmp_path, shared_data):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "gsm8k.yaml").write_text("task: gsm8k\ndataset_path: openai/gsm8k\n")
    pool = tmp_path / "pool"
    pool.mkdir()
    (pool / "a.jsonl").write_text('{"text": "hello"}\n')
    for extra in (("--tasks", "gsm8k"), ()):
        r = contam("detect", "--pool", pool, "--out", tmp_path / "o", "--benchmarks", shared_data, "--tasks-dir", tasks,
                   *extra, env_extra={"DAGSTER_HOME": str(tmp_path / "h")})
        err = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(err) == 1, r.stderr[-2000:]
        assert f"holds YAML file(s) (gsm8k.yaml), which task specs are not: for lm-evaluation-harness task YAMLs pass " \
               f"--lm-eval-include {tasks} --lm-eval-tasks NAMES" in err[0]


def test_the_task_registry_asset_reads_lm_eval_tasks_from_the_resource(lm_eval_include, tmp_path):
    import dagster as dg

    from contam_assets.defs.data.assets import task_registry
    from contam_assets.defs.resources import ContamDB, ContamSettings

    _, inc = lm_eval_include
    settings = ContamSettings(out_dir=str(tmp_path / "out"), lm_eval_tasks="gsm8k,broken_task", lm_eval_include=str(inc),
                              allow_missing=True)
    res = dg.materialize([task_registry], resources={"contam_settings": settings,
                                                     "contam_db": ContamDB(path=str(settings.db_path))})
    meta = res.asset_materializations_for_node("task_registry")[0].metadata
    table = meta["lm_eval_leaves"].value
    assert "gsm8k" in table and "test 1319" in table and "broken" in table
    con = duckdb.connect(str(settings.db_path), read_only=True)
    assert con.execute("select split, files from tasks where task = 'gsm8k' order by split").fetchall() == \
        [("test", 1), ("train", 1)]
    con.close()
    strict = ContamSettings(out_dir=str(tmp_path / "out"), lm_eval_tasks="gsm8k,broken_task", lm_eval_include=str(inc))
    res = dg.materialize([task_registry], resources={"contam_settings": strict,
                                                     "contam_db": ContamDB(path=str(settings.db_path))}, raise_on_error=False)
    assert not res.success
    failure = res.get_step_failure_events()[0].step_failure_data.error.message
    assert "1 lm-eval task(s) yielded nothing: broken_task" in failure
