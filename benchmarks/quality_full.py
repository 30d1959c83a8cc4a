"""Full detector-quality measurement (not a test): every task, every preset, 100k clean documents.

    python benchmarks/quality_full.py --out /tmp/contam_quality_full [--benchmarks ../shared/data]
           [--per-type 100] [--clean-docs 100000] [--seed 0]

Runs `contam quality` (the same Dagster assets), then writes OUT/quality_full.md:
the tables recorded in docs/quality.md, plus why verbatim-like copies were missed
(no candidate and a question under 14 tokens: decon's every-10th-5-gram sampling;
a stored score that rounds to 1.0 but is not flagged; anything else).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import polars as pl

PROJECT = Path(__file__).resolve().parents[1]


def md(rows: list[dict], cols: list[str]) -> str:
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join("" if r.get(c) is None else (f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c])) for c in cols) + " |")
    return "\n".join(out)


def pct(v) -> str:
    return "–" if v is None else f"{100 * v:.1f}"


def miss_causes(out: Path, benchmarks: Path) -> list[dict]:
    from contam_assets.core import store
    from contam_assets.core.config import preset
    from contam_assets.core.reference import build_reference_set
    from contam_assets.core.registry import load_registry
    from contam_assets.core.text import clean_text
    from contam_assets.core.tokenize import get_tokenizer
    from contam_assets.quality.items import items_from_records
    from contam_assets.quality.leaks import VERBATIM_LIKE

    with store.connect(out / "contam.duckdb", read_only=True) as con:
        misses = store.query_df(con, f"""select * from quality_outcomes where preset = 'default' and not caught
                                         and leak_type in ({', '.join(repr(x) for x in VERBATIM_LIKE)})""")
    if misses.height == 0:
        return []
    recs, _ = build_reference_set(load_registry(PROJECT / "data" / "tasks", sorted(set(misses["task"].to_list()))), benchmarks, preset("default"))
    items = {it.key: it for it in items_from_records(recs)}
    tok = get_tokenizer("cl100k")
    counts: dict[tuple[str, str], int] = {}
    for r in misses.to_dicts():
        it = items[(r["task"], r["split"], r["instance_index"], r["subject"] or "")]
        q_tokens = len(tok.encode(clean_text(it.question)))
        if not r["candidate"]:
            cause = "no candidate, question < 14 tokens (sampling)" if q_tokens < 14 else "no candidate, question >= 14 tokens"
        elif r["best_score"] is not None and r["best_score"] >= 0.999999:
            cause = "stored score 1.0 but not flagged (float rounding)"
        else:
            cause = "stored below the bar"
        counts[(r["task"], cause)] = counts.get((r["task"], cause), 0) + 1
    return [{"task": t, "cause": c, "missed": n} for (t, c), n in sorted(counts.items())]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/tmp/contam_quality_full")
    ap.add_argument("--benchmarks", default=str(PROJECT.parent / "shared" / "data"))
    ap.add_argument("--per-type", type=int, default=100)
    ap.add_argument("--clean-docs", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-run", action="store_true", help="only rebuild the markdown from an earlier run in --out")
    args = ap.parse_args()
    out = Path(args.out).resolve()
    t0 = time.perf_counter()
    if not args.skip_run:
        from contam_assets.cli import main as cli

        rc = cli(["quality", "--out", str(out), "--benchmarks", args.benchmarks, "--per-type", str(args.per_type),
                  "--clean-docs", str(args.clean_docs), "--seed", str(args.seed)])
        if rc:
            raise SystemExit(rc)
    wall = time.perf_counter() - t0
    report = json.loads((out / "quality.json").read_text())
    presets = list(report["presets"])
    lines = [f"Suite: seed {report['suite']['seed']}, {report['suite']['per_type']} documents per leak type and task, "
             f"documents {report['suite']['documents']}, {report['suite']['planted_items']} planted items, "
             f"tasks {', '.join(report['suite']['tasks'])}; wall time {wall / 60:.1f} min" + (" (this run)" if not args.skip_run else ""), ""]

    leaks = list(report["presets"][presets[0]]["leak_types"])
    rows = []
    for leak in leaks:
        row = {"leak type": leak}
        for p in presets:
            r = report["presets"][p]["leak_types"].get(leak, {})
            row[f"{p} recall"] = f"{pct(r.get('recall'))} ({r.get('flagged')}/{r.get('planted')})"
            row[f"{p} cand."] = pct(r.get("candidate_recall"))
            row[f"{p} prec."] = pct(r.get("precision"))
        rows.append(row)
    lines += ["### Recall, candidate recall and precision (%), all tasks", "", md(rows, list(rows[0])), ""]

    d = report["presets"].get("default", report["presets"][presets[0]])
    tasks = sorted({t for r in d["leak_types"].values() for t in r["tasks"]})
    rows = [{"leak type": leak, **{t: pct(d["leak_types"][leak]["tasks"].get(t, {}).get("recall")) for t in tasks}} for leak in leaks]
    lines += ["### Recall per task (%), default preset", "", md(rows, ["leak type"] + tasks), ""]

    rows = []
    for p in presets:
        c, h = report["presets"][p]["clean"], report["presets"][p]["hard_negatives"]
        rows.append({"preset": p, "clean docs": c["documents"], "flagged": c["false_positives"], "per million": c["per_million"],
                     "95% upper / M": c["upper95_per_million"], "hard negatives": h["total"]["documents"],
                     "hard-negative FPs": h["total"]["false_positives"],
                     "of which GSM-Hard as GSM8K": next((v["false_positives"] for k, v in h.items() if k.endswith("_as_gsm8k")), 0)})
    lines += ["### False positives", "", md(rows, list(rows[0])), ""]

    rows = []
    for p in presets:
        for t, r in report["presets"][p]["item_split"]["tasks"].items():
            rows.append({"preset": p, "task": t, "instances": r["instances"], "planted": r["planted"], "present": r["present"],
                         "flagged": r["flagged"], "flagged & present": r["flagged_and_present"],
                         "recall given presence": r["recall_given_presence"]})
    lines += ["### Item split (seed 003)", "", md(rows, list(rows[0])), ""]

    causes = miss_causes(out, Path(args.benchmarks))
    if causes:
        lines += ["### Why verbatim-like copies were missed (default preset)", "", md(causes, ["task", "cause", "missed"]), ""]
    if "default" in report["presets"]:
        t = report["presets"]["default"]["targets"]
        lines += ["### Targets (default preset)", "", md([{**x, "passed": "yes" if x["passed"] else "NO"} for x in t], ["name", "value", "target", "passed"]), ""]
    text = "\n".join(lines)
    (out / "quality_full.md").write_text(text)
    print(text)


if __name__ == "__main__":
    pl.Config.set_tbl_rows(100)
    main()
