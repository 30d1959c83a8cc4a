"""Full detector-quality measurement (not a test): every task, every preset, 100k clean documents.

    python benchmarks/quality_full.py --out /tmp/contam_quality_full [--benchmarks ../shared/data]
           [--per-type 100] [--clean-docs 100000] [--seed 0] [--preset NAME ...]

Runs `contam quality` (the same Dagster assets, every preset: default, olmo-web, olmo-synth, thorough),
then writes OUT/quality_full.md:
the tables recorded in docs/quality.md, plus why each verbatim-like or
option-changed copy was missed on the default preset, found by replaying the
detector's n-gram walk on the document (decon's every-10th-5-gram sampling
skipping a short question, a question inside another instance's cluster, a
question under 5 tokens, a stored score below the bar, anything else).
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


def _replay_walk(index, tokens, cfg) -> tuple[list[int], list[tuple[int, int]]]:
    """Run detector.clusters.find_clusters on one document and record what its walk did.

    Returns the positions the every-`sample_every`-th lookup tested (outside cluster
    expansion) and the (start n-gram, end) of every cluster.  The clusters module's own
    functions are wrapped for the duration of the call: this observes the shipped
    code path rather than re-implementing it.
    """
    from contam_assets.detector import clusters as scan

    sampled: list[int] = []
    clusters: list[tuple[int, int]] = []
    depth = [0]
    key_at, expand = scan._DocLookup.key_at, scan.expand_cluster

    def spy_key_at(self, pos):
        if not depth[0]:
            sampled.append(int(pos))
        return key_at(self, pos)

    def spy_expand(lk, hit, key, c):
        depth[0] += 1
        try:
            cl = expand(lk, hit, key, c)
        finally:
            depth[0] -= 1
        clusters.append((int(hit), int(cl.end)))
        return cl

    scan._DocLookup.key_at, scan.expand_cluster = spy_key_at, spy_expand
    try:
        scan.find_clusters(index, tokens, cfg)
    finally:
        scan._DocLookup.key_at, scan.expand_cluster = key_at, expand
    return sampled, clusters


def miss_causes(out: Path, benchmarks: Path) -> tuple[list[dict], list[dict]]:
    """Why verbatim-like and option-changed copies were missed on the default preset.

    Each missed document is tokenized as `contam detect` does, the question's
    tokens are located in it, and the cluster walk is replayed (_replay_walk).
    Also returns, per task, how many such copies had a question under
    ngram_size + sample_every - 1 tokens and how many of those were missed.
    """
    from contam_assets import store
    from contam_assets.detector.index import encode_texts
    from contam_assets.detector.text import clean_words
    from contam_assets.detector.tokenize import get_tokenizer
    from contam_assets.quality.items import items_from_records
    from contam_assets.quality.leaks import VERBATIM_LIKE
    from contam_assets.quality.measure import build_detector, read_texts

    types = VERBATIM_LIKE + ("mc_options_changed",)
    with store.connect(out / "contam.duckdb", read_only=True) as con:
        rows = store.query_df(con, f"""select * from quality_outcomes where preset = 'default'
                                       and leak_type in ({', '.join(repr(x) for x in types)})""")
    if rows.height == 0:
        return [], []
    from contam_assets.sources.registry import load_registry

    det = build_detector("default", load_registry(PROJECT / "data" / "tasks", sorted(set(rows["task"].to_list()))), benchmarks)
    cfg = det.cfg
    n, short_below = cfg.ngram_size, cfg.ngram_size + cfg.sample_every - 1
    tok = get_tokenizer(cfg.tokenizer)
    items = {it.key: it for it in items_from_records(det.records)}
    misses = rows.filter(~pl.col("caught")).to_dicts()
    texts = read_texts(out / "quality_suite" / "pool", {(r["shard"], r["line"]) for r in misses})
    counts: dict[tuple[str, str], int] = {}
    by_task: dict[str, list[int]] = {}
    for r in rows.to_dicts():
        it = items[(r["task"], r["split"], r["instance_index"], r["subject"] or "")]
        q = encode_texts([it.question], cfg)[0]
        T = len(q)
        bt = by_task.setdefault(r["task"], [0, 0, 0, 0])  # copies, short, missed, short and missed
        bt[0] += 1
        bt[1] += T < short_below
        if r["caught"]:
            continue
        bt[2] += 1
        bt[3] += T < short_below
        doc = tok.encode_words([clean_words(texts[(r["shard"], r["line"])], cfg.clean_options)])[0]
        starts = [s for s in range(len(doc) - T + 1) if T and (doc[s:s + T] == q).all()]
        if r["candidate"]:
            cause = f"stored below the bar (best score {r['best_score']:.3f})"
        elif not starts:
            cause = "question tokens not found in the document"
        elif T < n:
            cause = f"question under {n} tokens: indexed as one shorter n-gram, which no document {n}-gram equals"
        else:
            sampled, clusters = _replay_walk(det.index, doc, cfg)
            s = starts[0]
            grams = range(s, s + T - n + 1)
            if any(p in grams for p in sampled):
                cause = f"other: a sampled lookup landed in the question ({T} tokens)"
            elif any(h < s and e >= grams[-1] for h, e in clusters):
                cause = (f"question under {short_below} tokens, inside another instance's cluster (started before it); "
                         "the walk resumes after that cluster's end")
            elif T < short_below:
                cause = f"question under {short_below} tokens (< {cfg.sample_every} {n}-grams): no every-{cfg.sample_every}th lookup landed in it"
            else:
                cause = f"other: no lookup landed in a {T}-token question"
        counts[(r["task"], cause)] = counts.get((r["task"], cause), 0) + 1
    causes = [{"task": t, "cause": c, "missed": k} for (t, c), k in sorted(counts.items())]
    short = [{"task": t, "copies": v[0], f"question < {short_below} tokens": v[1], "missed": v[2],
              f"missed, question < {short_below} tokens": v[3],
              f"recall, question >= {short_below} tokens": round(1 - (v[2] - v[3]) / max(1, v[0] - v[1]), 4)}
             for t, v in sorted(by_task.items())]
    return causes, short


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="/tmp/contam_quality_full")
    ap.add_argument("--benchmarks", default=str(PROJECT.parent / "shared" / "data"))
    ap.add_argument("--per-type", type=int, default=100)
    ap.add_argument("--clean-docs", type=int, default=100_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--preset", action="append", help="preset to measure (repeatable; default: every preset)")
    ap.add_argument("--skip-run", action="store_true", help="only rebuild the markdown from an earlier run in --out")
    args = ap.parse_args()
    out = Path(args.out).resolve()
    t0 = time.perf_counter()
    if not args.skip_run:
        from contam_assets.cli import main as cli

        rc = cli(["quality", "--out", str(out), "--benchmarks", args.benchmarks, "--per-type", str(args.per_type),
                  "--clean-docs", str(args.clean_docs), "--seed", str(args.seed)]
                 + [x for p in (args.preset or []) for x in ("--preset", p)])
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

    for name in [p for p in ("default", "thorough") if p in report["presets"]] or presets[:1]:
        d = report["presets"][name]
        tasks = sorted({t for r in d["leak_types"].values() for t in r["tasks"]})
        rows = [{"leak type": leak, **{t: pct(d["leak_types"][leak]["tasks"].get(t, {}).get("recall")) for t in tasks}} for leak in leaks]
        lines += [f"### Recall per task (%), {name} preset", "", md(rows, ["leak type"] + tasks), ""]
    if "thorough" in report["presets"]:
        t = report["presets"]["thorough"]["leak_types"]
        rows = [{"leak type": leak, "planted": t[leak]["planted"], "flagged": t[leak]["flagged"],
                 "held for review": t[leak]["held_for_review"], "same_template": t[leak].get("same_template")} for leak in leaks]
        lines += ["### Thorough preset: flagged, held for review, reported as same_template", "", md(rows, list(rows[0])), ""]

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

    causes, short = miss_causes(out, Path(args.benchmarks))
    if causes:
        lines += ["### Why verbatim-like and option-changed copies were missed (default preset)", "",
                  md(causes, ["task", "cause", "missed"]), ""]
    if short:
        lines += ["### Verbatim-like and option-changed copies by question length (default preset)", "", md(short, list(short[0])), ""]
    for name in presets:
        t = report["presets"][name]["targets"]
        if t:
            lines += [f"### Targets ({name} preset)", "", md([{**x, "passed": "yes" if x["passed"] else "NO"} for x in t],
                                                            ["name", "value", "target", "passed"]), ""]
    text = "\n".join(lines)
    (out / "quality_full.md").write_text(text)
    print(text)


if __name__ == "__main__":
    pl.Config.set_tbl_rows(100)
    main()
