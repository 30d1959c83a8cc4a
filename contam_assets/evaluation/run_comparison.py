"""The reports under an output folder: summaries, the comparison across runs, consistency.

Used by the HTTP API and the ``evaluation_comparison`` asset.  A report file
that cannot be read or validated is returned as an error entry, never
raised, so one bad file does not hide the others (``report_files`` reads).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from contam_assets.evaluation.report_files import Found, read_report, walk
from contam_assets.evaluation.safeio import Refused
from contam_assets.report.inert import md_text


def headline_contamination(c: dict | None) -> dict | None:
    if c is None:
        return None
    keys = ("items", "exact", "exact_rate", "near", "near_rate", "share_mean", "flagged")
    return {k: c.get(k) for k in keys}


def summary(experiment: str, stage: str, report: dict) -> dict:
    """What the listing shows of one (validated) report: model, recipe, headline scores, contamination."""
    return {
        "experiment": experiment,
        "stage": stage,
        "recipe": report.get("recipe"),
        "model": report["model"],
        "scores": report["scores"],
        "benchmarks": {n: {"metric": b.get("metric"), "value": b.get("value")}
                       for n, b in report["benchmarks"].items()},
        "contamination": headline_contamination(report["contamination"]),
    }


def step_order(report: dict, stage: str) -> tuple:
    """Sort key: step (null first), then stage name; the last one is the latest."""
    step = report["model"].get("step")
    return (step is not None, step if step is not None else -1, stage)


def collect(output_dir: Path, experiment: str | None = None,
            allow: Callable[[str], bool] | None = None) -> tuple[list[tuple[Found, dict]], list[dict]]:
    """Every readable report and an error entry (experiment, stage, path, kind, error) for every other one.

    ``allow(real_path)`` refuses symlinks that leave the allowed roots before
    anything behind them is listed or opened (see ``report_files.walk``).
    """
    good, errors = [], []
    root = os.path.realpath(output_dir)
    for found in walk(root, allow or (lambda _p: True), experiment):
        if found.kind:
            errors.append(found.error_entry())
            continue
        try:
            good.append((found, read_report(found.path, found.lstat)))
        except Refused as exc:
            errors.append(found.error_entry(exc.kind, exc.message))
    good.sort(key=lambda x: (x[0].experiment, step_order(x[1], x[0].stage)))
    return good, errors


# -- comparison across runs --------------------------------------------------
COLUMNS = ("experiment", "stage", "step", "recipe", "is_base", "items", "exact", "exact_rate",
           "near", "near_rate", "share_mean")


def comparison(output_dir: Path) -> dict:
    """One row per report, and per run (experiment) the contamination of its latest report."""
    good, errors = collect(output_dir)
    rows = []
    runs: dict[str, dict] = {}
    for rf, rep in good:
        c = rep["contamination"] or {}
        row = {"experiment": rf.experiment, "stage": rf.stage, "step": rep["model"].get("step"),
               "recipe": rep.get("recipe"), "is_base": bool(rep["model"].get("is_base"))}
        row |= {k: c.get(k) for k in COLUMNS[5:]}
        rows.append(row)
        if rep["contamination"] is not None:
            runs[rf.experiment] = {"stage": rf.stage, "recipe": rep.get("recipe")} | headline_contamination(c)
    return {"reports": rows, "runs": dict(sorted(runs.items())), "errors": errors}


def markdown_table(rows: list[dict], columns=COLUMNS) -> str:
    def cell(v):
        if v is None:
            return "–"
        if isinstance(v, float):
            return f"{v:.4f}"
        return md_text(v)  # names and paths come from report files on disk

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def report_problems(report: dict) -> list[str]:
    """Internal consistency of a report (empty list = consistent); used by the asset check."""
    problems = []
    model, c = report.get("model") or {}, report.get("contamination")
    if model.get("is_base") and c is not None:
        problems.append("base checkpoint with non-null contamination")
    measured = [n for n, b in (report.get("benchmarks") or {}).items() if b.get("format") != "mteb"]
    if not model.get("is_base") and measured and c is None:
        problems.append("non-base checkpoint without contamination")
    if c is None:
        return problems
    parts = [v for v in (c.get("benchmarks") or {}).values() if v is not None]
    for name, d in [("total", c)] + [(k, v) for k, v in (c.get("benchmarks") or {}).items() if v is not None]:
        if not 0 <= d["exact"] <= d["near"] <= d["items"]:
            problems.append(f"{name}: expected 0 <= exact <= near <= items, got {d['exact']}, {d['near']}, {d['items']}")
        if d["share_mean"] is not None and not 0.0 <= d["share_mean"] <= 1.0:
            problems.append(f"{name}: share_mean {d['share_mean']} outside [0, 1]")
        if len(d["flagged"]) != min(d["near"], 20):
            problems.append(f"{name}: {len(d['flagged'])} flagged items for {d['near']} near")
    for k in ("items", "exact", "near"):
        if sum(p[k] for p in parts) != c[k]:
            problems.append(f"per-benchmark {k} does not add up to the total {c[k]}")
    return problems
