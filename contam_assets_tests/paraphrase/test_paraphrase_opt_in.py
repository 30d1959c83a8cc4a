"""The paraphrase part's multiple-choice and code-rewrite rules are opt-in (knob paraphrase_kinds,
docs/paraphrase.md): by default no word gate is built, multiple-choice items take the generic rule and code
items the signature rule, and the rows are those of the math rules alone; "all" switches the new rules on."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from contam_assets.cli import build_parser
from contam_assets.commands.detect import knob_args
from contam_assets.detector.config import PRESETS, ConfigError, DetectConfig, paraphrase_kinds
from contam_assets.detector.matches import Reference
from contam_assets.paraphrase.stage import paraphrase_index, paraphrase_rows
from contam_assets.sources.reference import build_reference_set
from contam_assets.sources.registry import load_registry
from contam_assets_tests.paraphrase.test_paraphrase_kinds import (
    ECOLOGY,
    ECOLOGY_OPTIONS,
    OTHER_TASK,
    RENAMED,
    SUBJECTS,
    doc,
    sociology,
)

ROOT = Path(__file__).resolve().parents[2]
DATA = Path("/work/shared/data")
PARA = DATA / "paraphrase"
pytestmark = pytest.mark.skipif(not (PARA / "gsmplus_testmini.jsonl").is_file(), reason="shared data not present")


@pytest.fixture(scope="module")
def planted():
    """MMLU (four subjects), HumanEval and GSM8K, and documents with rewordings of each kind."""
    cfg = PRESETS["paraphrase"]
    records, _ = build_reference_set(load_registry(ROOT / "data" / "tasks", ["mmlu", "humaneval", "gsm8k"]), DATA, cfg)
    ref = Reference(records.filter((pl.col("task") != "mmlu") | pl.col("subject").is_in(SUBJECTS)))
    plus = [json.loads(line) for line in (PARA / "gsmplus_testmini.jsonl").open()]
    plus = [r["question"] for r in plus if r["kind"] == "problem understanding"][:4]
    q, *choices, _ = sociology(1)
    prompt = ref.records.filter(pl.col("task") == "humaneval")["question"][0]
    texts = [ECOLOGY, ECOLOGY_OPTIONS, RENAMED, OTHER_TASK, prompt, q + "\n" + "\n".join(choices), *plus]
    return cfg, ref, [doc(i, t) for i, t in enumerate(texts)]


def found(rows: list[dict]) -> list[tuple]:
    return [(r["line"], r["task"], r["subject"], r["instance_index"], json.loads(r["evidence"])["rule"]) for r in rows]


# what the part found on these documents before the multiple-choice and code rules existed
MATH_ROWS = [(0, "mmlu", "sociology", 1, "other"), (1, "mmlu", "sociology", 1, "other"), (4, "humaneval", None, 0, "code"),
             (5, "mmlu", "sociology", 1, "other"), (6, "gsm8k", None, 1109, "math"), (8, "gsm8k", None, 520, "math"),
             (9, "gsm8k", None, 649, "math")]


def test_the_default_is_the_math_rules_alone(planted):
    cfg, ref, docs = planted
    assert cfg.paraphrase_kinds == "math" and paraphrase_kinds(cfg) == {"math"}
    px = paraphrase_index(ref, cfg)
    assert px.bags == {}  # no word gate
    kinds = dict(zip(px.records["task"].to_list(), [it.kind for it in px.items]))
    assert kinds == {"mmlu": "other", "humaneval": "code", "gsm8k": "math"}
    assert not any(it.renamed for it in px.items)
    assert px.records.height == ref.records.filter(pl.col("indexed") & ~pl.col("derived")).select(
        "task", "split", "instance_index", "subject").unique().height  # no short multiple-choice items added
    rows = paraphrase_rows(docs, "web/a.jsonl", ref, cfg, "paraphrase", [])
    assert found(rows) == MATH_ROWS
    assert rows == paraphrase_rows(docs, "web/a.jsonl", ref, cfg.replace(paraphrase_kinds="math"), "paraphrase", [])


def test_all_switches_the_multiple_choice_and_code_rules_on(planted):
    cfg, ref, docs = planted
    on = cfg.replace(paraphrase_kinds="all")
    px = paraphrase_index(ref, on)
    assert set(px.bags) == {"mc", "code"} and all(it.renamed for it in px.items if it.kind == "code")
    got = found(paraphrase_rows(docs, "web/a.jsonl", ref, on, "paraphrase", []))
    assert (0, "mmlu", "sociology", 1, "mc") in got and (2, "humaneval", None, 0, "code") in got
    assert not [g for g in got if g[0] == 3]  # another task with other examples
    code_only = found(paraphrase_rows(docs, "web/a.jsonl", ref, cfg.replace(paraphrase_kinds="code"), "paraphrase", []))
    assert (2, "humaneval", None, 0, "code") in code_only and not [g for g in code_only if g[4] == "mc"]


def test_the_knob_its_flag_and_the_settings_digest():
    base = PRESETS["paraphrase"]
    assert base.replace(paraphrase_kinds="math").digest() == base.digest()  # the default keeps cached results
    assert base.replace(paraphrase_kinds="all").digest() != base.digest()  # a change rescans
    assert DetectConfig().digest() == DetectConfig(paraphrase_kinds="math").digest()
    # equal meanings, one digest: case, order, repeats, "all" spelled out, math named or not
    assert base.replace(paraphrase_kinds="MATH").digest() == base.digest()
    assert base.replace(paraphrase_kinds="mc,math").digest() == base.replace(paraphrase_kinds="math, MC, mc").digest() \
        == base.replace(paraphrase_kinds="mc").digest() != base.digest()
    assert base.replace(paraphrase_kinds="all").digest() == base.replace(paraphrase_kinds="code,math,mc").digest()
    assert base.replace(paraphrase_kinds="all").paraphrase_kinds == "code,math,mc"
    assert paraphrase_kinds(base.replace(paraphrase_kinds="mc, code")) == {"math", "mc", "code"}
    assert paraphrase_kinds(base.replace(paraphrase_kinds="all")) == {"math", "mc", "code"}
    for bad in ("", "mc code", "essay"):
        with pytest.raises(ConfigError, match="paraphrase_kinds takes math, mc, code"):
            base.replace(paraphrase_kinds=bad)
    with pytest.raises(ConfigError, match="needs the paraphrase part"):
        DetectConfig(paraphrase_kinds="mc")
    args = build_parser().parse_args(["detect", "--pool", "p", "--out", "o", "--paraphrase-kinds", "mc,code"])
    assert knob_args(args) == {"paraphrase_kinds": "mc,code"}
