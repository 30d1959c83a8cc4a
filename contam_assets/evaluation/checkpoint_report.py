"""Build and write the evaluation report of one checkpoint.

``<experiments_dir>/<experiment>/eval/<stage>/report.json``::

    schema         "contam-eval-report/1"
    model          checkpoint, path, experiment, stage, step, is_base
    recipe         from contam_checkpoint.json (or the checkpoints table)
    scores         every probe_metrics number of the checkpoint, keyed by metric
                   name (``<probe>/<metric>`` when two probes share a name)
    probes         probe -> the score keys it wrote
    benchmarks     per benchmark: source, sha256, format, item_text, items,
                   items_skipped, metric, value
    contamination  null for base checkpoints (and when every benchmark is an
                   MTEB task); else see contamination.py

The report holds no timestamp and nothing from the tracker config, so
re-running with the same inputs writes the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from contam_assets.evaluation import contamination as contam
from contam_assets.evaluation.config import EvaluationConfig
from contam_assets.evaluation.items import Benchmark, default_specs, load_benchmark
from contam_assets.evaluation.rows import RowStats, find_train_file, iter_training_texts
from contam_assets.store.files import atomic_write_text

SCHEMA = "contam-eval-report/1"
REPORT_FILE = "report.json"
CACHE_DIR = ".cache"
METHOD = f"contam-8gram/1 n={contam.NGRAM} near>={contam.NEAR_SHARE} words=clean_text(unescape=False)"
# benchmarks.<name>.value: the first of these scores present (unless the config names `metric`).
VALUE_CANDIDATES = ("{name}/accuracy", "recitation/{name}/pass@1", "bpb/{name}", "{name}-ppl")


class ReportError(RuntimeError):
    """The report cannot be built (no checkpoint, no training rows, bad benchmark)."""


def report_path(experiments_dir: Path, experiment: str, stage: str) -> Path:
    return Path(experiments_dir) / experiment / "eval" / stage / REPORT_FILE


# -- model -----------------------------------------------------------------
def checkpoint_model(experiments_dir: Path, experiment: str, stage: str, db_row: dict | None = None) -> tuple[dict, str | None]:
    """``model`` section and recipe, from contam_checkpoint.json or the checkpoints table row."""
    from contam_assets.model.checkpoint import CheckpointError, read_info

    folder = Path(experiments_dir) / experiment / "checkpoints" / stage
    if folder.is_dir():
        try:
            info = read_info(folder)
        except CheckpointError as exc:
            raise ReportError(str(exc)) from exc
        model = {"checkpoint": f"{experiment}/{stage}", "path": info.path, "experiment": experiment,
                 "stage": stage, "step": info.step, "is_base": bool(info.is_base)}
        return model, info.recipe
    if db_row:
        step = db_row.get("step")
        model = {"checkpoint": f"{experiment}/{stage}", "path": db_row.get("path"), "experiment": experiment,
                 "stage": stage, "step": int(step) if step is not None else None,
                 "is_base": bool(db_row.get("is_base"))}
        return model, db_row.get("recipe")
    raise ReportError(f"checkpoint {experiment}/{stage}: no folder {folder} and no row in the checkpoints table")


# -- scores from DuckDB ------------------------------------------------------
def _number(v) -> float | None:
    if v is None:
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def read_db(con, experiment: str, stage: str) -> tuple[dict | None, list[tuple[str, str, float | None]]]:
    """The checkpoints row (or None) and (probe, metric, value) rows of ``<experiment>/<stage>``."""
    from contam_assets.store import table_exists

    key = f"{experiment}/{stage}"
    row = None
    ids = [key]
    if table_exists(con, "checkpoints"):
        cur = con.execute(
            "select checkpoint, path, step, is_base, recipe from checkpoints "
            "where checkpoint = ? or (experiment = ? and stage = ?) order by checkpoint = ? desc limit 1",
            [key, experiment, stage, key],
        )
        r = cur.fetchone()
        if r:
            row = dict(zip(["checkpoint", "path", "step", "is_base", "recipe"], r))
            ids.append(row["checkpoint"])
    metrics = []
    if table_exists(con, "probe_metrics"):
        metrics = con.execute(
            "select probe, metric, value from probe_metrics where checkpoint in (select unnest(?)) "
            "order by probe, metric",
            [sorted(set(ids))],
        ).fetchall()
    return row, [(p, m, _number(v)) for p, m, v in metrics]


def scores_from_metrics(rows: Iterable[tuple[str, str, float | None]]) -> tuple[dict, dict]:
    """``scores`` (metric -> value) and ``probes`` (probe -> score keys)."""
    rows = sorted(set(rows), key=lambda r: (r[1], r[0]))
    counts: dict[str, int] = {}
    for _, m, _ in rows:
        counts[m] = counts.get(m, 0) + 1
    scores: dict[str, float | None] = {}
    probes: dict[str, list[str]] = {}
    for probe, metric, value in rows:
        key = metric if counts[metric] == 1 else f"{probe}/{metric}"
        scores[key] = value
        probes.setdefault(probe, []).append(key)
    return dict(sorted(scores.items())), {p: sorted(k) for p, k in sorted(probes.items())}


# -- benchmarks ----------------------------------------------------------------
def load_benchmarks(config: EvaluationConfig, benchmarks_dir: Path | None) -> list[Benchmark]:
    from contam_assets.evaluation.items import BenchmarkError

    specs = config.benchmarks if config.benchmarks is not None else default_specs(benchmarks_dir)
    try:
        return [load_benchmark(s) for s in specs]
    except BenchmarkError as exc:
        raise ReportError(str(exc)) from exc


def benchmarks_section(benchmarks: list[Benchmark], scores: dict) -> dict:
    out = {}
    for b in benchmarks:
        name = b.spec.name
        candidates = [b.spec.metric] if b.spec.metric else [c.format(name=name) for c in VALUE_CANDIDATES]
        metric = next((c for c in candidates if scores.get(c) is not None), None)
        out[name] = b.describe() | {"metric": metric, "value": scores[metric] if metric else None}
    return out


# -- contamination -------------------------------------------------------------
def _items_fingerprint(benchmarks: list[Benchmark]) -> str:
    h = hashlib.sha256()
    for b in benchmarks:
        h.update(f"\0B{b.spec.name}\0{b.format}\0".encode())
        for i, t in b.items:
            h.update(f"{i}\0".encode() + t.encode("utf-8", "surrogatepass") + b"\0")
    return h.hexdigest()


def contamination_section(experiment_dir: Path, benchmarks: list[Benchmark], content_key: str = "text",
                          use_cache: bool = True, batch: dict | None = None) -> dict:
    """Measure (or reuse the cached measurement of) the experiment's training rows."""
    train = find_train_file(experiment_dir)
    if train is None:
        raise ReportError(f"no training rows: {experiment_dir / 'data' / 'train.jsonl'} not found")
    measured = [b for b in benchmarks if b.measured]
    st = train.stat()
    key = hashlib.sha256(
        json.dumps([METHOD, str(train.resolve()), st.st_size, st.st_mtime_ns, content_key,
                    _items_fingerprint(measured)]).encode()
    ).hexdigest()[:32]
    cache = experiment_dir / "eval" / CACHE_DIR / f"contamination-{key}.json"
    if use_cache and cache.is_file():
        try:
            return json.loads(cache.read_text(encoding="utf-8"))
        except ValueError:
            pass  # a torn cache file is recomputed
    stats = RowStats()
    texts = iter_training_texts(train, stats, content_key)
    result = contam.measure([contam.ItemSet(b.spec.name, b.items) for b in measured], texts, **(batch or {}))
    result.pop("rows_checked")  # the same as train.rows_used below
    per = result.pop("benchmarks")
    result["benchmarks"] = {b.spec.name: per.get(b.spec.name) for b in benchmarks}  # mteb -> null
    result["train"] = {"file": str(train.relative_to(experiment_dir)), "bytes": st.st_size} | stats.as_dict()
    if use_cache:
        atomic_write_text(cache, json.dumps(result, indent=2))
    return result


# -- assembling and writing ----------------------------------------------------
@dataclass
class Evaluation:
    report: dict
    path: Path
    changed: bool  # False when report.json already held exactly this report


def build_report(model: dict, recipe: str | None, scores: dict, probes: dict, benchmarks: dict,
                 contamination: dict | None) -> dict:
    return {
        "schema": SCHEMA,
        "model": model,
        "recipe": recipe,
        "scores": scores,
        "probes": probes,
        "benchmarks": benchmarks,
        "contamination": contamination,
    }


def dumps(report: dict) -> str:
    return json.dumps(report, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def write_report(path: Path, report: dict) -> bool:
    """Write ``report`` atomically; returns False when the file already held these bytes."""
    text = dumps(report)
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    atomic_write_text(path, text)
    return True


def evaluate(experiments_dir: Path, experiment: str, stage: str, *, config: EvaluationConfig,
             benchmarks_dir: Path | None, connect: Callable | None = None, content_key: str = "text",
             use_cache: bool = True) -> Evaluation:
    """Build and write the report of ``<experiment>/<stage>``.

    ``connect`` is a context-manager factory for a read-only DuckDB
    connection (``contam_db.connect`` or ``contam_assets.store.connect``); None means
    no database (no scores).
    """
    experiments_dir = Path(experiments_dir)
    db_row, metrics = None, []
    if connect is not None:
        with connect() as con:
            db_row, metrics = read_db(con, experiment, stage)
    model, recipe = checkpoint_model(experiments_dir, experiment, stage, db_row)
    scores, probes = scores_from_metrics(metrics)
    benchmarks = load_benchmarks(config, benchmarks_dir)
    contamination = None  # base checkpoints, and reports whose benchmarks are all MTEB tasks
    if not model["is_base"] and any(b.measured for b in benchmarks):
        contamination = contamination_section(experiments_dir / experiment, benchmarks, content_key, use_cache)
    report = build_report(model, recipe, scores, probes, benchmarks_section(benchmarks, scores), contamination)
    path = report_path(experiments_dir, experiment, stage)
    return Evaluation(report, path, write_report(path, report))


def flatten_numbers(obj, prefix: str = "") -> dict[str, float | int]:
    """Every number of a report as ``slash/keys`` (list entries by position; bools and text left out)."""
    out: dict[str, float | int] = {}
    if isinstance(obj, bool) or obj is None:
        return out
    if isinstance(obj, (int, float)):
        out[prefix] = obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            out |= flatten_numbers(v, f"{prefix}/{k}" if prefix else str(k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out |= flatten_numbers(v, f"{prefix}/{i}" if prefix else str(i))
    return out
