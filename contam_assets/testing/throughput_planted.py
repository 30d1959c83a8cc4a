"""Planted documents for the throughput and prefilter tests.

A deterministic mix of host text (contam_assets.demo.HostText) and real
benchmark items from ../shared/data, planted in the ways training data quotes
them: verbatim, reformatted, question only, near misses with words replaced,
truncated, cut mid-word, escaped inside JSON, as multiple-choice listings, and
as short fragments of several questions.  Non-members (Skywork's GSM8K-style
problems) and awkward text (tiny documents, unicode punctuation, escapes, very
long words) are mixed in.  The detector is built on a reduced registry (GSM8K,
HumanEval, GSM-Hard and the MMLU subjects whose names start with a-c) so the
fixture stays quick.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import random
from functools import lru_cache
from pathlib import Path

import polars as pl

from contam_assets.demo import HostText
from contam_assets.detector.config import DetectConfig
from contam_assets.detector.index import NgramIndex
from contam_assets.detector.index_build import build_index
from contam_assets.detector.matches import Reference, scan_documents
from contam_assets.sources.catalogue import DEFAULT_TASKS_DIR
from contam_assets.sources.reference import build_reference_set
from contam_assets.sources.registry import TaskSpec, load_registry
from contam_assets.store.pool import Document


def task_specs() -> list[TaskSpec]:
    """The project's gsm8k, humaneval and gsm_hard specs and the MMLU spec reduced to subjects a-c."""
    specs = load_registry(DEFAULT_TASKS_DIR, ["gsm8k", "humaneval", "gsm_hard", "mmlu"])
    out = []
    for s in specs:
        if s.name == "mmlu":
            s = dataclasses.replace(s, splits=tuple(dataclasses.replace(sp, file="mmlu_test/[a-c]*_test.csv") for sp in s.splits))
        out.append(s)
    return out


@lru_cache(maxsize=4)
def build_detector(shared_data: Path, cfg: DetectConfig) -> tuple[pl.DataFrame, NgramIndex, Reference]:
    """Reference records, index and Reference of the reduced registry (cached per session)."""
    records, _ = build_reference_set(task_specs(), Path(shared_data), cfg)
    return records, build_index(records, cfg), Reference(records)


def _jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def planted_documents(records: pl.DataFrame, shared_data: Path, n: int = 260, seed: int = 6) -> list[tuple[str, str]]:
    """``n`` (kind, text) documents; the same arguments give the same documents."""
    rng = random.Random(seed)
    host = HostText(seed)
    prim = records.filter(~pl.col("derived") & pl.col("indexed"))
    qa = prim.filter(pl.col("kind") != "multiple-choice").sort("record_id").to_dicts()
    mc_groups: dict[tuple, list[dict]] = {}
    for r in prim.filter(pl.col("kind") == "multiple-choice").sort("record_id").to_dicts():
        mc_groups.setdefault((r["task"], r["instance_index"], r["subject"]), []).append(r)
    mc = [g for g in mc_groups.values() if len(g) >= 2]
    solutions = records.filter(pl.col("derived") & pl.col("indexed")).sort("record_id").to_dicts()
    mock = _jsonl(shared_data / "skywork_mock_gsm8k_eval_1419.jsonl")
    host_words = " ".join(host.sentences).split()

    def near_miss(q: str, every: int) -> str:
        ws = q.split()
        return " ".join(rng.choice(host_words) if i % every == every - 1 else w for i, w in enumerate(ws))

    def fragment(text: str) -> str:
        ws = text.split()
        k = rng.randint(3, 12)
        s = rng.randint(0, max(0, len(ws) - k))
        return " ".join(ws[s : s + k])

    kinds = [
        "host", "host", "verbatim_qa", "instruct", "question_only", "case_ws", "mc", "solution_escaped",
        "near_miss", "truncated", "fragments", "mid_word", "non_member", "short", "noise", "code_prompt",
    ]
    docs: list[tuple[str, str]] = []
    for i in range(n):
        kind = kinds[i % len(kinds)]
        before, after = host.paragraph(), host.paragraph()
        rec = rng.choice(qa)
        q, a = rec["question"], rec["answer"] or ""
        if kind == "host":
            text = host.document()
        elif kind == "verbatim_qa":
            text = f"{before}\n\n{q}\n{a}\n\n{after}"
        elif kind == "instruct":
            text = f"User: {q}\n\nAssistant: {a}"
        elif kind == "question_only":
            text = f"{before}\n\n{q}\n\n{after}"
        elif kind == "case_ws":
            text = f"{before}\n" + "\n".join(q.upper().split()) + "\r\n" + "  ".join(a.split()) + f"\n{after}"
        elif kind == "mc":
            grp = sorted(rng.choice(mc), key=lambda r: r["choice_index"])
            opts = "\n".join(f"{'ABCDEFGH'[j]}. {r['answer']}" for j, r in enumerate(grp))
            text = f"{before}\n\n{grp[0]['question']}\n{opts}\nAnswer: {'ABCD'[rng.randint(0, 3)]}\n\n{after}"
        elif kind == "solution_escaped":
            sol = rng.choice(solutions)["question"]
            text = host.code_document() + "\nsnippet = " + json.dumps({"completion": sol}) + "\n"
        elif kind == "near_miss":
            text = f"{before}\n{near_miss(q, rng.randint(4, 16))}\n{a if rng.random() < 0.5 else ''}\n{after}"
        elif kind == "truncated":
            ws = q.split()
            cut = max(1, int(len(ws) * rng.uniform(0.3, 0.95)))
            text = f"{before} " + " ".join(ws[:cut]) + f" {a}\n{after}"
        elif kind == "fragments":
            parts = [fragment(rng.choice(qa)["question"]) if rng.random() < 0.6 else rng.choice(host.sentences)
                     for _ in range(rng.randint(3, 10))]
            text = " ".join(parts)
        elif kind == "mid_word":
            text = before + " xq" + q + "zz " + a[: rng.randint(0, len(a))] + "qj" + after
        elif kind == "non_member":
            m = rng.choice(mock)
            text = f"{before}\n{m['question']}\n{m['answer']}\n{after}"
        elif kind == "short":
            text = rng.choice(["ok", "see the table", q.split("?")[0][:30], "a b c d e f g h i j k l"])
        elif kind == "noise":
            text = (f"\u201c{before}\u201d \u2014 caf\u00e9 na\u00efve \\n\\u00e9 \\\" {'x' * rng.randint(250, 700)} "
                    f"{rng.randint(0, 10**12)} \u4e2d\u6587 {q[: len(q) // 2]} \U0001F600 {after}")
        else:  # code_prompt: a QA item quoted in a docstring, sometimes with its answer
            text = host.code_document() + f'\n"""\n{q}\n"""\n' + (a if rng.random() < 0.5 else "")
        docs.append((kind, text))
    return docs


def as_documents(texts: list[str]) -> list[Document]:
    return [Document(line=i, doc_id=f"doc-{i}", source=None, text=t, n_bytes=len(t.encode("utf-8", "surrogatepass")), raw=b"")
            for i, t in enumerate(texts)]


def scan_rows(docs: list[Document], index: NgramIndex, ref: Reference, cfg: DetectConfig) -> tuple[list[dict], dict]:
    rows, counters = scan_documents(docs, "planted.jsonl", index, ref, cfg)
    return rows, dict(counters)
