"""Reading the reports under an output folder: listing, summaries, the comparison.

Used by the HTTP API and the ``evaluation_comparison`` asset.  A report file
that cannot be read is returned as an error entry, never raised, so one bad
file does not hide the others.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from contam_assets.evaluation.report import REPORT_FILE, SCHEMA


class MalformedReport(ValueError):
    """A report.json that is not a readable report."""


@dataclass(frozen=True)
class ReportFile:
    experiment: str
    stage: str
    path: Path


def find_reports(output_dir: Path, experiment: str | None = None) -> list[ReportFile]:
    """``<output_dir>/<experiment>/eval/<stage>/report.json`` files, sorted by experiment and stage."""
    pattern = f"{experiment}/eval/*/{REPORT_FILE}" if experiment else f"*/eval/*/{REPORT_FILE}"
    found = []
    for p in sorted(Path(output_dir).glob(pattern)):
        found.append(ReportFile(p.parent.parent.parent.name, p.parent.name, p))
    return found


def read_report(path: Path) -> dict:
    """Parse and check one report; raises MalformedReport with the reason."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise MalformedReport(f"not UTF-8 text: {exc}") from exc
    except ValueError as exc:
        raise MalformedReport(f"not valid JSON: {exc}") from exc
    except OSError as exc:
        raise MalformedReport(f"cannot read: {exc.strerror or exc}") from exc
    if not isinstance(data, dict):
        raise MalformedReport("not a JSON object")
    if data.get("schema") != SCHEMA:
        raise MalformedReport(f"schema is {data.get('schema')!r}, expected {SCHEMA!r}")
    model = data.get("model")
    if not isinstance(model, dict) or not isinstance(model.get("stage"), str):
        raise MalformedReport("`model` must be an object with a `stage`")
    step = model.get("step")
    if step is not None and (not isinstance(step, int) or isinstance(step, bool)):
        raise MalformedReport("`model.step` must be an integer or null")
    for key in ("scores", "benchmarks"):
        if not isinstance(data.get(key), dict):
            raise MalformedReport(f"`{key}` must be an object")
    if "contamination" not in data or not isinstance(data["contamination"], (dict, type(None))):
        raise MalformedReport("`contamination` must be an object or null")
    return data


def headline_contamination(c: dict | None) -> dict | None:
    if c is None:
        return None
    keys = ("items", "exact", "exact_rate", "near", "near_rate", "share_mean", "flagged")
    return {k: c.get(k) for k in keys}


def summary(rf: ReportFile, report: dict) -> dict:
    """What the listing shows of one report: model, recipe, headline scores, contamination."""
    return {
        "experiment": rf.experiment,
        "stage": rf.stage,
        "recipe": report.get("recipe"),
        "model": report["model"],
        "scores": report["scores"],
        "benchmarks": {n: {"metric": b.get("metric"), "value": b.get("value")}
                       for n, b in report["benchmarks"].items() if isinstance(b, dict)},
        "contamination": headline_contamination(report["contamination"]),
    }


def step_order(report: dict, stage: str) -> tuple:
    """Sort key: step (null first), then stage name; the last one is the latest."""
    step = report["model"].get("step")
    return (step is not None, step if step is not None else -1, stage)


def collect(output_dir: Path, experiment: str | None = None,
            allow: Callable[[Path], bool] | None = None) -> tuple[list[tuple[ReportFile, dict]], list[dict]]:
    """Every readable report and an error entry (path, error) for every unreadable one.

    ``allow(real_path)`` may refuse a file before it is opened (the API uses it
    to refuse reports reached through a symlink that leaves its roots).
    """
    good, errors = [], []
    for rf in find_reports(output_dir, experiment):
        entry = {"experiment": rf.experiment, "stage": rf.stage, "path": str(rf.path.relative_to(output_dir))}
        if allow is not None and not allow(Path(os.path.realpath(rf.path))):
            errors.append(entry | {"kind": "refused", "error": "the file lies outside the allowed roots (symlink)"})
            continue
        try:
            good.append((rf, read_report(rf.path)))
        except MalformedReport as exc:
            errors.append(entry | {"kind": "malformed", "error": str(exc)})
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
        return str(v)

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
