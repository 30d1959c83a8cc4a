"""The paraphrase part's recall, look-alikes held, clean false positives and speed (not a test).

    python benchmarks/paraphrase_quality.py [--benchmarks ../shared/data] [--clean-docs 20000] [--seed 0]
           [--tasks gsm8k,mmlu,humaneval,mbpp] [--kinds math|all] [--out /tmp/paraphrase_quality.json]
           [--speed-only] [--rounds 1]

Every reworded or perturbed item of ``<benchmarks>/paraphrase/`` (GSM-Plus, MMLU-SR, ReCode, EvoEval, GPT-4's
MMLU rephrasings) is
placed, its ``question`` field alone (no verbatim answer), between host paragraphs of the planted
suite's host text (quality/hosts.py), and the documents go through the stage the scan runs
(paraphrase.stage.paraphrase_rows, preset ``paraphrase``).  Recall: the share of rows whose source
item gets a ``paraphrase`` row; held: the share with any ``paraphrase`` row (look-alikes: Skywork's
fresh GSM8K-like problems, GSM-Hard's copies that differ from their GSM8K question, GSM-Plus's
and EvoEval's ``changed`` kinds; with ``--holdout`` (the default), the MMLU items with an odd row number,
left out of the reference set (those whose question is word for word an indexed item's left out), and the
rewordings of those items).  Clean documents: the planted suite's clean host documents (web, code, prose) and web-like
documents (the demo host text) and code (standard-library Python source), held per million.  MB/s per core: the stage alone (gates, embedding,
search, verifier) on those documents, in batches of 256 as the scan hands them to the stage (the gates read a
batch at once), CPU seconds of this one process, with the machine's load average (``--rounds``: the documents
run again in the same process; ``--speed-only``: the clean documents alone).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

import polars as pl  # noqa: E402

from contam_assets.detector.config import PRESETS, ConfigError  # noqa: E402
from contam_assets.detector.matches import Reference  # noqa: E402
from contam_assets.paraphrase.stage import paraphrase_index, paraphrase_rows  # noqa: E402
from contam_assets.quality.hosts import Hosts  # noqa: E402
from contam_assets.sources.reference import build_reference_set  # noqa: E402
from contam_assets.sources.registry import load_registry  # noqa: E402
from contam_assets.store.pool import Document  # noqa: E402

FILES = {"gsmplus_testmini.jsonl": "GSM-Plus", "mmlusr_question_only.jsonl": "MMLU-SR (question only)",
         "mmlusr_question_and_answer.jsonl": "MMLU-SR (question and answer)",
         "recode_humaneval.jsonl": "ReCode HumanEval", "recode_mbpp.jsonl": "ReCode MBPP",
         "evoeval.jsonl": "EvoEval", "lmsys_mmlu_rephrase_sociology.jsonl": "MMLU rephrased by GPT-4 (stem only)"}
BATCH = 256
SPLIT_FILE = "lmsys_mmlu_rephrase_sociology.jsonl"  # also reported as the rows the rule was fitted on and the rows checked


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.open()]


def run(docs: list[Document], ref: Reference, cfg) -> tuple[list[dict], float]:
    """The stage's rows for ``docs`` and the CPU seconds it took (this process: one core)."""
    t0, rows = time.process_time(), []
    for i in range(0, len(docs), BATCH):
        rows += paraphrase_rows(docs[i:i + BATCH], "bench.jsonl", ref, cfg, "paraphrase", [])
    return rows, time.process_time() - t0


def make_doc(i: int, text: str) -> Document:
    return Document(line=i, doc_id=str(i), source="bench", text=text, n_bytes=len(text.encode()), raw=b"", offset=0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--benchmarks", default=str(PROJECT.parent / "shared" / "data"))
    ap.add_argument("--tasks", default="gsm8k,mmlu,humaneval,mbpp")
    ap.add_argument("--clean-docs", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="")
    ap.add_argument("--kinds", default="math",
                    help="the knob paraphrase_kinds: math (the default rules) or math,mc,code / all (the opt-in ones)")
    ap.add_argument("--limit", type=int, default=0, help="at most this many rows per file (0: all; a quick check)")
    ap.add_argument("--speed-only", action="store_true",
                    help="the clean documents alone (held and MB/s per core): no recall or look-alike set")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the clean documents this many times in the one process (the first round fills what "
                         "the stage keeps between batches: the tokenizer's pieces)")
    ap.add_argument("--holdout", type=int, default=1000,
                    help="MMLU items with an odd row number are left out of the reference set; this many of them "
                         "(spread over the subjects) are placed as same-subject look-alikes (0: no hold-out)")
    args = ap.parse_args(argv)
    bench = Path(args.benchmarks)
    para = bench / "paraphrase"
    if not para.is_dir():
        print(f"paraphrase_quality: no {para} (see ../shared/data/paraphrase/SOURCES.md)", file=sys.stderr)
        return 2
    try:
        cfg = PRESETS["paraphrase"].replace(paraphrase_kinds=args.kinds)
    except ConfigError as exc:
        print(f"paraphrase_quality: --kinds: {exc}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    records, _ = build_reference_set(load_registry(PROJECT / "data" / "tasks", args.tasks.split(",")), bench, cfg)
    held_out = records.head(0)
    if args.holdout:  # every other MMLU item is not in the reference set: its questions are look-alikes of its subject
        out = (pl.col("task") == "mmlu") & (pl.col("instance_index") % 2 == 1)
        held_out, records = records.filter(out), records.filter(~out)
    ref = Reference(records)
    px = paraphrase_index(ref, cfg)
    setup = time.perf_counter() - t0
    hosts = Hosts(args.seed)
    result: dict = {"machine": f"{platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} cores",
                    "date": time.strftime("%Y-%m-%d"), "command": "python benchmarks/paraphrase_quality.py "
                    + " ".join(argv if argv is not None else sys.argv[1:]), "paraphrase_kinds": args.kinds, "instances": len(px.items),
                    "setup_seconds": round(setup, 1), "recall": [], "look_alikes": []}

    def placed(texts: list[str]) -> list[Document]:
        return [make_doc(i, hosts.wrap(t, "web")[0]) for i, t in enumerate(texts)]

    tasks = set(args.tasks.split(",")) if not args.speed_only else set()
    for name, label in FILES.items():
        if not (para / name).is_file():
            continue
        rows = [r for r in jsonl(para / name) if r["task"] in tasks][:args.limit or None]
        docs = placed([r["question"] for r in rows])
        found, secs = run(docs, ref, cfg)
        by_line = defaultdict(set)
        for f in found:
            by_line[f["line"]].add((f["task"], f["instance_index"], f["subject"] or None))
        groups = defaultdict(lambda: Counter())
        for i, r in enumerate(rows):
            sem = r["semantics"]
            if held_out.height and r["task"] == "mmlu" and r["index"] % 2 == 1:
                sem = "held out"  # a rewording of an item that is not in the reference set: a look-alike
            keys = [(r["task"], r["kind"], sem)]
            if name == SPLIT_FILE and sem == "preserved":  # the rows the multiple-choice rule was fitted on, and the others
                keys.append((r["task"], r["kind"] + (" - fit: rows 0, 4, 8, ..." if r["index"] % 4 == 0 else
                                                     " - check: rows 2, 6, 10, ..."), sem))
            for key in keys:
                g = groups[key]
                g["n"] += 1
                g["held"] += bool(by_line[i])
                g["correct"] += (r["task"], r["index"], r.get("subject") or None) in by_line[i]
        for (task, kind, sem), g in sorted(groups.items()):
            entry = {"file": label, "task": task, "kind": kind, "semantics": sem, "rows": g["n"],
                     "held": round(g["held"] / g["n"], 4), "found_source": round(g["correct"] / g["n"], 4)}
            result["recall" if sem == "preserved" else "look_alikes"].append(entry)
            print(json.dumps(entry))
    if held_out.height and not args.speed_only:
        # MMLU repeats some questions word for word under two row numbers: such a held-out item is a reference item
        norm = lambda q: " ".join(q.lower().split())  # noqa: E731
        indexed = {norm(q) for q in records.filter(pl.col("task") == "mmlu")["question"].to_list()}
        items = held_out.sort(["subject", "instance_index", "choice_index"]).group_by(
            ["subject", "instance_index"], maintain_order=True).agg(pl.col("question").first(), pl.col("answer"))
        rows = [r for r in items.rows() if norm(r[2]) not in indexed]
        picks = {"all subjects": random.Random(args.seed).sample(rows, min(args.holdout, len(rows))),
                 "sociology": [r for r in rows if r[0] == "sociology"]}
        for which, sample in picks.items():
            for label, texts in ((f"MMLU held out, {which} (question)", [q for _, _, q, _ in sample]),
                                 (f"MMLU held out, {which} (question and choices)",
                                  [q + "\n" + "\n".join(f"{'ABCD'[k]}. {c}" for k, c in enumerate(cs)) for _, _, q, cs in sample])):
                found, _ = run(placed(texts), ref, cfg)
                entry = {"file": label, "rows": len(texts), "held": round(len({f["line"] for f in found}) / len(texts), 4),
                         "examples": [(f["training_text"][:160], f["eval_question"][:160]) for f in found[:12]]}
                result["look_alikes"].append(entry)
                print(json.dumps(entry))
    if "gsm8k" in tasks:
        exact = set(records.filter(records["task"] == "gsm8k")["question"].str.strip_chars().to_list())
        looks = {"Skywork mock GSM8K (eval 1419, question)": [r["question"] for r in jsonl(bench / "skywork_mock_gsm8k_eval_1419.jsonl")],
                 "Skywork mock GSM8K (public, text)": [r["text"] for r in jsonl(bench / "skywork_mock_gsm8k_test_public.jsonl")],
                 "GSM-Hard (input differs from its GSM8K question)": [r["input"] for r in jsonl(bench / "gsmhard_v2.jsonl")
                                                                     if r["input"].strip() not in exact]}
        for label, texts in looks.items():
            texts = texts[:args.limit or None]
            found, _ = run(placed(texts), ref, cfg)
            entry = {"file": label, "rows": len(texts), "held": round(len({f["line"] for f in found}) / len(texts), 4)}
            result["look_alikes"].append(entry)
            print(json.dumps(entry))
    pools = [("clean (planted suite's hosts: web 30 %, code 50 %, prose 20 %)", lambda: hosts.clean_document()[1]),
             ("web-like (the demo host text's documents)", hosts.web.document),
             ("code (standard-library Python source)", lambda: "\n\n".join(hosts.code_block() for _ in range(2)))]
    pools = [(label, [make_doc(i, make()) for i in range(args.clean_docs)]) for label, make in pools]
    for k in range(max(1, args.rounds)):
        for label, clean in pools:
            found, secs = run(clean, ref, cfg)
            mb = sum(d.n_bytes for d in clean) / 1e6
            held = len({f["line"] for f in found})
            entry = {"documents": label, "round": k + 1, "n": len(clean), "MB": round(mb, 1), "held": held,
                     "per_million": round(1e6 * held / max(len(clean), 1), 1), "cpu_seconds": round(secs, 2),
                     "MB_per_s_per_core": round(mb / secs, 2), "docs_per_s_per_core": round(len(clean) / secs, 1),
                     "load_average": round(os.getloadavg()[0], 1), "examples": [f["training_text"][:200] for f in found[:5]]}
            result.setdefault("clean", []).append(entry)
            print(json.dumps(entry))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
