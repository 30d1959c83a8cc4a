"""Across languages: the reverse link of translated tasks (not a test).

    python benchmarks/crosslingual_quality.py [--benchmarks ../shared/data] [--items 150] [--beyond 50]
           [--clean-docs 300] [--seed 0] [--preset default] [--out /tmp/crosslingual_quality.json]

A task folder declares ``gsm8k`` (its test split) and one task per MGSM language file under
``<benchmarks>/crosslingual/`` other than English (``mgsm_es``, ``mgsm_fr``: ``translation_of = "gsm8k"``,
aligned by index over GSM8K's first 250 test items).  A pool gets English copies of ``--items`` random items of
those 250 (a third each: question and worked answer; the same with a ``Question:``/``Answer:`` layout and the
spacing changed; question and final number only), ``--beyond`` copies of items past 250 (which no translation
links), each between host paragraphs (quality/hosts.py), and ``--clean-docs`` clean host documents.  One
``contam detect`` (``--preset``, default ``default``) runs over it.

Reverse link, per translated task: the share of its items with an English copy in the pool that the tables
report as exposed through gsm8k (a flagged ``via_task = 'gsm8k'`` row).  Beside it: the share of the planted
English copies the direct scan flags (the link is only as good as that), translated rows of items that have no
English copy (must be 0), whether the removals are the direct ones only, and the seconds the link step takes
(tables.recompute_removals over the whole pool, with and without links).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

import duckdb  # noqa: E402

from contam_assets.quality.hosts import Hosts  # noqa: E402
from contam_assets.store import tables  # noqa: E402

SPEC = 'name = "{name}"\nkind = "qa"\nlanguage = "{lang}"\n{extra}[fields]\nquestion = "question"\nanswer = "answer"\n'


def _copy(style: int, g: dict) -> str:
    if style == 0:
        return f"{g['question']}\n{g['answer']}"
    if style == 1:
        return "Question:  " + g["question"].replace(". ", ".  ") + "\n\nAnswer:\n" + g["answer"].replace("\n", "\n\n")
    return f"{g['question']}\nThe answer is {g['answer'].split('####')[-1].strip()}."


def build(root: Path, data: Path, items: int, beyond: int, clean: int, seed: int) -> dict:
    tasks, bench, pool = root / "tasks", root / "bench", root / "pool"
    for p in (tasks, bench, pool):
        p.mkdir(parents=True, exist_ok=True)
    (tasks / "gsm8k.toml").write_text(SPEC.format(name="gsm8k", lang="en", extra="")
                                      + f'[[splits]]\nname = "test"\nfile = "{data / "gsm8k_test.jsonl"}"\n')
    langs = sorted(p.stem.split("_")[1] for p in (data / "crosslingual").glob("mgsm_*.tsv") if p.stem != "mgsm_en")
    for lang in langs:
        rows = [dict(zip(("question", "answer"), line.rstrip("\n").split("\t")))
                for line in open(data / "crosslingual" / f"mgsm_{lang}.tsv", encoding="utf-8")]
        (bench / f"mgsm_{lang}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        (tasks / f"mgsm_{lang}.toml").write_text(
            SPEC.format(name=f"mgsm_{lang}", lang=lang, extra='translation_of = "gsm8k"\n[translation]\nlimit = 250\n')
            + f'[[splits]]\nname = "test"\nfile = "mgsm_{lang}.jsonl"\n')
    gsm = [json.loads(line) for line in open(data / "gsm8k_test.jsonl")]
    rng, hosts = random.Random(seed), Hosts(seed)
    inside = sorted(rng.sample(range(250), items))
    outside = sorted(rng.sample(range(250, len(gsm)), beyond))
    docs, planted = [], {}
    for k, i in enumerate(inside + outside):
        text, _, _ = hosts.wrap(_copy(k % 3, gsm[i]), "web")
        docs.append({"id": f"g{i}", "text": text})
        planted[i] = k % 3
    docs += [{"id": f"c{k}", "text": hosts.clean_document()[1]} for k in range(clean)]
    rng.shuffle(docs)
    (pool / "part-0.jsonl").write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs))
    return {"langs": langs, "inside": inside, "outside": outside, "styles": planted,
            "pool_bytes": (pool / "part-0.jsonl").stat().st_size}


def measure(root: Path, plan: dict) -> dict:
    con = duckdb.connect(str(root / "out" / "contam.duckdb"))
    flagged = {r[0] for r in con.execute("select distinct instance_index from matches where task = 'gsm8k' "
                                         "and flagged and coalesce(via_task, '') = ''").fetchall()}
    inside = set(plan["inside"])
    out = {"direct_recall": len(flagged & set(plan["styles"])) / len(plan["styles"]), "tasks": {}}
    for style in range(3):
        mine = [i for i, s in plan["styles"].items() if s == style]
        out[f"direct_recall_style_{style}"] = sum(i in flagged for i in mine) / len(mine)
    for lang in plan["langs"]:
        task = f"mgsm_{lang}"
        via = {r[0] for r in con.execute("select distinct instance_index from matches where task = ? and flagged "
                                         "and via_task = 'gsm8k'", [task]).fetchall()}
        out["tasks"][task] = {"items_with_english_copy": len(inside), "exposed": len(via & inside),
                              "reverse_link": len(via & inside) / len(inside), "exposed_without_copy": len(via - inside),
                              "reverse_link_of_flagged_copies": len(via & inside & flagged) / max(1, len(inside & flagged))}
    removed = con.execute("select count(*), count(*) filter (where reason = 'gsm8k') from removals").fetchone()
    out["removals"], out["removals_direct_only"] = removed[0], removed[0] == removed[1]
    out["translated_rows"] = con.execute("select count(*) from matches where via_task <> ''").fetchone()[0]
    t0 = time.perf_counter()
    tables.recompute_removals(con)
    out["recompute_seconds_with_links"] = round(time.perf_counter() - t0, 4)
    con.execute("create temp table _keep as select * from translation_links")
    con.execute("delete from translation_links")
    t0 = time.perf_counter()
    tables.recompute_removals(con)
    out["recompute_seconds_without_links"] = round(time.perf_counter() - t0, 4)
    con.execute("insert into translation_links select * from _keep")
    tables.recompute_removals(con)
    con.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--benchmarks", default=str(PROJECT.parent / "shared" / "data"))
    ap.add_argument("--items", type=int, default=150)
    ap.add_argument("--beyond", type=int, default=50)
    ap.add_argument("--clean-docs", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--preset", default="default", help="the detector preset of the run (thorough flags question-only copies)")
    ap.add_argument("--out", default="/tmp/crosslingual_quality.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        plan = build(root, Path(args.benchmarks), args.items, args.beyond, args.clean_docs, args.seed)
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "contam_assets.cli", "detect", "--pool", root / "pool", "--out",
                            root / "out", "--benchmarks", root / "bench", "--tasks-dir", root / "tasks", "--preset", args.preset],
                           capture_output=True, text=True, env={**os.environ, "DAGSTER_HOME": str(root / "home")})
        if r.returncode != 0:
            sys.exit(f"contam detect failed ({r.returncode}): {r.stderr.strip().splitlines()[-1:]}")
        result = {"machine": f"{platform.machine()} {os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d"),
                  "seed": args.seed, "preset": args.preset, "planted_inside": len(plan["inside"]), "planted_beyond": len(plan["outside"]),
                  "clean_docs": args.clean_docs, "pool_bytes": plan["pool_bytes"],
                  "detect_seconds": round(time.perf_counter() - t0, 1), **measure(root, plan)}
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
