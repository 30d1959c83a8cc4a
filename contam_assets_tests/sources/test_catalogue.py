"""The catalogue shipped with the package (contam_assets/catalogue/): every spec read over a small file the test
writes in the Hub's layout its first file pattern names (real rows of ../shared/data where we have them)."""

from __future__ import annotations

import csv
import gzip
import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from contam_assets.detector.config import preset
from contam_assets.sources.catalogue import CATALOGUE_DIR, DEFAULT_TASKS_DIR
from contam_assets.sources.reference import build_reference_set
from contam_assets.sources.registry import load_registry
from contam_assets_tests.e2e.test_cli_data import contam

SPECS = {s.name: s for s in load_registry(CATALOGUE_DIR)}
WORDS = ("river basin granite orchard lantern violet harbor meadow quartz falcon copper willow ember "
         "glacier saffron thicket prairie marble cobalt juniper").split()


def sentence(seed: int, n: int = 24) -> str:
    return " ".join(WORDS[(seed * 7 + i * 3) % len(WORDS)] + str((seed + i) % 10) for i in range(n)) + "?"


def put(row: dict, path: str, value) -> None:
    """The inverse of fields.get_path: ``row`` gets ``value`` at ``path`` (a.b[0], a.text)."""
    parts = [p for p in re.findall(r"[^.\[\]]+|\[-?\d+\]", path)]
    cur = row
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        nxt = parts[i + 1] if not last else None
        if part.startswith("["):
            continue
        if last:
            cur[part] = value
        elif nxt.startswith("["):
            cur[part] = [value] + ([sentence(9, 3)] if parts[-1] != nxt else [])
            return
        else:
            cur = cur.setdefault(part, {})


def n_choices(spec) -> int:
    return 4 if len(spec.fields.choices) == 1 else len(spec.fields.choices)


def synthetic_rows(spec, n: int = 3) -> list[dict]:
    f = spec.fields
    rows = []
    for i in range(n):
        row: dict = {}
        put(row, f.question, sentence(i))
        if f.answer:
            put(row, f.answer, f"answer {i} " + sentence(i + 50, 8))
        if f.passage:
            put(row, f.passage, sentence(i + 100, 40))
        if f.solution and f.solution != f.answer:
            put(row, f.solution, f"def solve_{i}():\n    return {i}\n")
        if spec.kind == "multiple-choice":
            choices = [f"choice {c} of item {i} " + sentence(i * 5 + c, 6) for c in range(n_choices(spec))]
            if len(f.choices) == 1:
                put(row, f.choices[0], choices)
                if f.choices[0].endswith(".text"):
                    put(row, f.choices[0][: -len(".text")] + ".label", list("ABCD")[: len(choices)])
            else:
                for name, text in zip(f.choices, choices):
                    row[name] = text
            if f.gold:
                gold = i % len(choices)
                put(row, f.gold, "ABCD"[gold] if f.gold_labels or spec.name == "race" else gold + f.gold_base)
        rows.append(row)
    return rows


def write(bench: Path, spec, split, rows: list[dict]) -> None:
    root = bench / spec.hub
    path = root / split.file.replace("*", "00000-of-00001")
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        pq.write_table(pa.Table.from_pylist(rows), path)
    elif path.suffix == ".csv":
        with open(path, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_catalogue_holds_the_benchmarks_labs_report():
    assert len(SPECS) >= 40
    for name in ("mmlu", "mmlu_pro", "gsm8k", "math", "humaneval", "humaneval_plus", "mbpp", "mbpp_plus", "arc_easy",
                 "arc_challenge", "hellaswag", "winogrande", "piqa", "siqa", "openbookqa", "boolq", "triviaqa", "nq_open",
                 "squad", "drop", "commonsense_qa", "truthfulqa_gen", "truthfulqa_mc1", "bbh", "gpqa_diamond", "ifeval",
                 "livecodebench", "agieval_lsat_ar", "agieval_sat_math", "swag", "medmcqa"):
        assert name in SPECS and SPECS[name].hub


@pytest.mark.parametrize("name", sorted(SPECS))
def test_each_catalogue_spec_reads_its_hub_layout(tmp_path, name):
    spec = SPECS[name]
    bench = tmp_path / "bench"
    rows = synthetic_rows(spec)
    for split in spec.splits:
        write(bench, spec, split, rows)
    recs, stats = build_reference_set([spec], bench, preset("default"))
    assert not stats.bad_rows
    base = recs.filter(~recs["derived"])
    per = n_choices(spec) if spec.kind == "multiple-choice" else 1
    assert base.height == len(rows) * per * len(spec.splits)
    first = base.filter(base["split"] == spec.splits[0].name)
    assert sorted(set(first["question"].to_list())) == sorted(sentence(i) for i in range(len(rows)))
    if spec.fields.answer:
        assert sorted(first["answer"].to_list()) == sorted(f"answer {i} " + sentence(i + 50, 8) for i in range(len(rows)))
    if spec.kind == "multiple-choice":
        gold = first.filter(first["is_correct"])
        if spec.fields.gold_index is not None:
            assert gold["choice_index"].to_list() == [spec.fields.gold_index] * len(rows)
        else:
            assert sorted(gold.select("instance_index", "choice_index").rows()) == [(i, i % (per)) for i in range(len(rows))]


def test_catalogue_over_a_hub_cache_with_real_rows(tmp_path, shared_data):
    """GSM8K, ARC-Easy, MMLU and HumanEval from ../shared/data written as a Hub cache (datasets--org--name/snapshots)
    give the same instances as data/tasks' specs over the original files."""
    cache = tmp_path / "hub"

    def snapshot(repo: str) -> Path:
        org, name = repo.split("/")
        root = cache / f"datasets--{org}--{name}"
        (root / "refs").mkdir(parents=True)
        (root / "refs" / "main").write_text("r1")
        return root / "snapshots" / "r1"

    g = snapshot("openai/gsm8k") / "main"
    g.mkdir(parents=True)
    for split in ("train", "test"):
        pq.write_table(pa.Table.from_pylist([json.loads(x) for x in open(shared_data / f"gsm8k_{split}.jsonl")]),
                       g / f"{split}-00000-of-00001.parquet")
    a = snapshot("allenai/ai2_arc") / "ARC-Easy"
    a.mkdir(parents=True)
    arc = [json.loads(x) for x in open(shared_data / "arc_easy_llmfoundry.jsonl")]
    pq.write_table(pa.Table.from_pylist([{"id": str(i), "question": r["query"].removeprefix("Question: "),
                                          "choices": {"text": r["choices"], "label": list("ABCDE")[: len(r["choices"])]},
                                          "answerKey": "ABCDE"[r["gold"]]} for i, r in enumerate(arc)]),
                   a / "test-00000-of-00001.parquet")
    h = snapshot("openai/openai_humaneval") / "openai_humaneval"
    h.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([json.loads(x) for x in gzip.open(shared_data / "HumanEval.jsonl.gz", "rt")]),
                   h / "test-00000-of-00001.parquet")
    cfg = preset("default")
    ours, _ = build_reference_set([SPECS[n] for n in ("gsm8k", "arc_easy", "humaneval")], cache, cfg)
    theirs, _ = build_reference_set(load_registry(DEFAULT_TASKS_DIR, ["gsm8k", "arc_easy", "humaneval"]), shared_data, cfg)
    cols = ["task", "suite", "split", "instance_index", "choice_index", "question", "answer", "is_correct", "indexed"]
    assert ours.select(cols).sort(cols[:5]).rows() == theirs.select(cols).sort(cols[:5]).rows()
    r = contam("tasks", "--tasks-dir", "catalogue", "--benchmarks", cache, "--tasks", "gsm8k,arc_easy,humaneval,hellaswag")
    lines = [" ".join(x.split()) for x in r.stdout.splitlines()]
    assert r.returncode == 0 and "gsm8k qa test benchmarks 1 1,319 0" in lines and "3 of 4 task(s) have instances" in lines
