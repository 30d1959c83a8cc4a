"""The harness route finds what the spec route finds: for every catalogue benchmark that the installed lm_eval also
ships and can read offline from a local file, one planted pool gives the same removals through
`contam detect --lm-eval-tasks` (lm_eval's own task configs over the local file) and through
`contam detect --tasks` (the task spec over the same file).  The pairs are listed in docs/benchmarks.md."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import duckdb
import pytest
import yaml

from contam_assets_tests.e2e.test_cli_data import contam

ROOT = Path(__file__).resolve().parents[2]
LM_EVAL_TASKS = Path(__import__("lm_eval.tasks", fromlist=["x"]).__file__).parent
# lm-eval task -> the spec it is held against (data/tasks), and the planted copies' tag in the pool
PAIRS = {"gsm8k": ("gsm8k", "gsm"), "gsm8k_cot": ("gsm8k", "gsm"), "arc_easy": ("arc_easy", "arc_easy"),
         "arc_challenge": ("arc_challenge", "arc_challenge"), "mmlu_abstract_algebra": ("mmlu", "mmlu"),
         "humaneval": ("humaneval", "humaneval"), "mbpp": ("mbpp", "mbpp")}
HOST = "Notes from the weekend market and a long walk along the river bank with friends and family. "


def _lines(path: Path, n: int) -> list[str]:
    with open(path, encoding="utf-8") as fh:
        return [next(fh) for _ in range(n)]


def _bench(shared: Path, bench: Path) -> dict[str, list[dict]]:
    """Small copies of the real files under the names the specs read, and the rows of each."""
    (bench / "mmlu_test").mkdir(parents=True)
    rows = {}
    for name, n in (("gsm8k_test.jsonl", 60), ("gsm8k_train.jsonl", 20), ("arc_easy_llmfoundry.jsonl", 80),
                    ("arc_challenge_llmfoundry.jsonl", 80), ("mbpp.jsonl", 80)):
        lines = _lines(shared / name, n)
        (bench / name).write_text("".join(lines), encoding="utf-8")
        rows[name] = [json.loads(x) for x in lines]
    with gzip.open(shared / "HumanEval.jsonl.gz", "rt", encoding="utf-8") as fh:
        he = [next(fh) for _ in range(40)]
    with gzip.open(bench / "HumanEval.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.write("".join(he))
    rows["humaneval"] = [json.loads(x) for x in he]
    csv_text = (shared / "mmlu_test" / "abstract_algebra_test.csv").read_text(encoding="utf-8")
    (bench / "mmlu_test" / "abstract_algebra_test.csv").write_text(csv_text, encoding="utf-8")
    rows["mmlu"] = list(csv.DictReader(csv_text.splitlines()))
    return rows


def _include(tmp: Path, bench: Path, rows: dict) -> Path:
    """lm-eval's installed task configs over the local files: `include:` of the installed YAML with the dataset
    pointed at the file, or, where the installed YAML's metric imports the Hub (code_eval), its config whole without
    the metric and filter hooks (the templates, splits and output type as installed)."""
    inc = tmp / "include"
    inc.mkdir()

    def local(task: str, src: Path, files: dict, extra: str = "") -> None:
        (inc / f"{task}.yaml").write_text(
            f"task: {task}\ninclude: {src}\ndataset_path: json\ndataset_name: null\n{extra}dataset_kwargs:\n"
            "  data_files:\n" + "".join(f"    {k}: {v}\n" for k, v in files.items()))

    gsm = {"test": bench / "gsm8k_test.jsonl", "train": bench / "gsm8k_train.jsonl"}
    local("gsm8k", LM_EVAL_TASKS / "gsm8k" / "gsm8k.yaml", gsm)
    local("gsm8k_cot", LM_EVAL_TASKS / "gsm8k" / "gsm8k-cot.yaml", gsm)
    for name in ("arc_easy", "arc_challenge"):  # the Hub's rows (question, choices.text/label, answerKey)
        hub = tmp / f"{name}.jsonl"
        hub.write_text("".join(json.dumps({"id": f"{name}-{i}", "question": r["query"].removeprefix("Question: "),
                                           "choices": {"text": r["choices"], "label": list("ABCDE")[:len(r["choices"])]},
                                           "answerKey": "ABCDE"[r["gold"]]}) + "\n"
                               for i, r in enumerate(rows[f"{name}_llmfoundry.jsonl"])))
        local(name, LM_EVAL_TASKS / "arc" / f"{name}.yaml", {"test": hub}, "training_split: null\nvalidation_split: null\n")
    mmlu = tmp / "mmlu_abstract_algebra.jsonl"  # the Hub's rows: question, subject, choices, answer
    mmlu.write_text("".join(json.dumps({"question": r["question"], "subject": "abstract_algebra",
                                        "choices": [r[f"choice{c}"] for c in range(4)], "answer": int(r["answer"])}) + "\n"
                            for r in rows["mmlu"]))
    local("mmlu_abstract_algebra", LM_EVAL_TASKS / "mmlu" / "default" / "mmlu_abstract_algebra.yaml", {"test": mmlu},
          "fewshot_split: null\n")
    from contam_assets.sources.lm_eval_code import _functions, _Loader

    for task, src, data in (("humaneval", LM_EVAL_TASKS / "humaneval" / "humaneval.yaml", bench / "HumanEval.jsonl.gz"),
                            ("mbpp", LM_EVAL_TASKS / "mbpp" / "mbpp.yaml", bench / "mbpp.jsonl")):
        cfg = yaml.load(src.read_text(), Loader=_Loader)  # noqa: S506 - the !function tags kept as markers
        cfg = {k: v for k, v in cfg.items() if not _functions(v)}
        cfg.update(dataset_path="json", dataset_name=None, num_fewshot=0, metric_list=[{"metric": "exact_match"}],
                   dataset_kwargs={"data_files": {"test": str(data)}})
        (inc / f"{task}.yaml").write_text(yaml.safe_dump(cfg))
    return inc


def _pool(pool: Path, rows: dict) -> dict[str, list[int]]:
    """Planted copies of each benchmark's items (question and answer as training documents carry them; GSM8K's
    worked solutions alone too, found by neither route under the default preset) among clean documents; the lines
    of each benchmark's copies."""
    docs, planted = [], {}

    def add(tag: str, text: str) -> None:
        planted.setdefault(tag, []).append(len(docs))
        docs.append({"id": f"{tag}-{len(docs)}", "text": HOST + text + "\n" + HOST})

    gsm = rows["gsm8k_test.jsonl"]
    for i in range(0, 50, 5):
        add("gsm", gsm[i]["question"] + "\n" + gsm[i]["answer"])
        add("gsm_answer_only", gsm[i + 1]["answer"])
    for name in ("arc_easy", "arc_challenge"):  # the longest questions: a short one is too short to index
        arc = sorted(rows[f"{name}_llmfoundry.jsonl"], key=lambda r: -len(r["query"]))[:10]
        for r in arc:
            add(name, r["query"].removeprefix("Question: ") + " " + r["choices"][r["gold"]])
    for r in sorted(rows["mmlu"], key=lambda r: -len(r["question"]))[:10]:
        add("mmlu", r["question"] + " " + r[f"choice{r['answer']}"])
    for r in rows["humaneval"][::4]:
        add("humaneval", r["prompt"] + r["canonical_solution"])
    for r in rows["mbpp.jsonl"][10:80:7]:  # task_id 11.. (the spec's test split)
        add("mbpp", r["text"] + "\n" + r["code"])
    for i in range(20):
        docs.append({"id": f"clean-{i}", "text": f"{HOST}Plain note {i} about tomatoes, rain and the bus timetable."})
    pool.mkdir()
    (pool / "a.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    return planted


def _removed(out: Path) -> dict[str, set[int]]:
    """Task (a code task's `<task>_solution` suite counted as the task) -> the pool lines its flagged matches remove."""
    con = duckdb.connect(str(out / "contam.duckdb"), read_only=True)
    rows = con.execute("select distinct task, line from matches where flagged").fetchall()
    con.close()
    found: dict[str, set[int]] = {}
    for task, line in rows:
        found.setdefault(task.removesuffix("_solution"), set()).add(line)
    return found


def _indexed(out: Path) -> dict[str, set[tuple]]:
    """Task -> its reference rows as the detector reads them: (suite past the task's name, kind, question, answer,
    gold), text after the one normaliser."""
    from contam_assets.detector.text import clean_text

    con = duckdb.connect(str(out / "contam.duckdb"), read_only=True)
    rows = con.execute("select task, suite, kind, question, answer, is_correct from instances").fetchall()
    con.close()
    found: dict[str, set[tuple]] = {}
    for task, suite, kind, q, a, gold in rows:
        found.setdefault(task, set()).add((suite.removeprefix(task), kind, clean_text(q or ""), clean_text(a or ""), gold))
    return found


@pytest.fixture(scope="module")
def routes(tmp_path_factory, shared_data):
    tmp = tmp_path_factory.mktemp("parity")
    bench = tmp / "bench"
    rows = _bench(shared_data, bench)
    inc = _include(tmp, bench, rows)
    planted = _pool(tmp / "pool", rows)
    lm = contam("detect", "--pool", tmp / "pool", "--out", tmp / "lm", "--lm-eval-tasks", ",".join(PAIRS),
                "--lm-eval-include", inc, env_extra={"DAGSTER_HOME": str(tmp / "h1")})
    assert lm.returncode == 0, lm.stderr[-3000:]
    specs = sorted({s for s, _ in PAIRS.values()})
    spec = contam("detect", "--pool", tmp / "pool", "--out", tmp / "spec", "--benchmarks", bench,
                  "--tasks-dir", ROOT / "data" / "tasks", "--tasks", ",".join(specs),
                  env_extra={"DAGSTER_HOME": str(tmp / "h2")})
    assert spec.returncode == 0, spec.stderr[-3000:]
    return (_removed(tmp / "lm"), _indexed(tmp / "lm")), (_removed(tmp / "spec"), _indexed(tmp / "spec")), planted


@pytest.mark.slow  # two detect runs (about 20 s each) shared by every pair
@pytest.mark.parametrize("lm_task", list(PAIRS))
def test_the_harness_route_finds_what_the_spec_route_finds(routes, lm_task):
    (lm, lm_rows), (spec, spec_rows), planted = routes
    spec_task, tag = PAIRS[lm_task]
    assert lm.get(lm_task, set()) == spec.get(spec_task, set()), (lm_task, spec_task)
    assert set(planted[tag]) <= lm[lm_task] and len(planted[tag]) == 10, planted[tag]
    assert not set(planted["gsm_answer_only"]) & lm[lm_task]  # the default preset needs the question
    # every item as the spec indexes it: the answer is the raw field (GSM8K's worked solution, not gsm8k_cot's
    # final number), a code task's answer its reference solution (lm-eval's target is the test program), also
    # indexed as the task's solution suite
    assert lm_rows[lm_task] and lm_rows[lm_task] <= spec_rows[spec_task], \
        sorted(lm_rows[lm_task] - spec_rows[spec_task])[:2]
    assert {r[:2] for r in lm_rows[lm_task]} == {r[:2] for r in spec_rows[spec_task]}
