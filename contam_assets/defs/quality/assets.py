"""Quality domain: planted_suite -> detector_quality (one partition per preset).

``planted_suite`` writes a pool of documents with known benchmark leaks and
clean documents (``<out>/quality_suite/``) and its truth (``quality_truth``,
``quality_documents``).  ``detector_quality`` scans that pool with one preset,
scores it and writes the ``quality_*`` tables, ``<out>/quality.json`` and the
page ``<out>/quality.html`` (every preset measured on the current suite).
"""

import io
import json
import time

import dagster as dg
import polars as pl

from contam_assets.defs.meta import DATA_OWNERS, QUALITY_VERSION, check_metadata, tags
from contam_assets.defs.quality.resources import QualitySettings
from contam_assets.defs.resources import ContamDB, ContamSettings, load_task_specs
from contam_assets.detector.config import PRESETS, preset
from contam_assets.report.render import md_table, png_markdown_bytes
from contam_assets.sources.reference import build_reference_set
from contam_assets.store.files import atomic_write_text

GROUP = "quality"
_QUALITY = dict(group_name=GROUP, owners=DATA_OWNERS, tags=tags("data", "quality"), code_version=QUALITY_VERSION)
presets_partitions = dg.StaticPartitionsDefinition(list(PRESETS))


def _overrides(settings: ContamSettings) -> dict:
    return settings.knob_overrides()


@dg.asset(**_QUALITY, kinds={"python", "duckdb"})
def planted_suite(context: dg.AssetExecutionContext, contam_settings: ContamSettings, contam_db: ContamDB,
                  quality_settings: QualitySettings) -> dg.MaterializeResult:
    """Documents with known benchmark leaks (one class per leak type) and clean documents, written as a pool."""
    from contam_assets.quality import tables
    from contam_assets.quality.suite import build_suite, documents_frame, truth_frame, write_suite

    t0 = time.perf_counter()
    cfg = preset("default", **_overrides(contam_settings))
    records, _ = build_reference_set(load_task_specs(contam_settings), contam_settings.benchmarks_path, cfg)
    if records.filter(pl.col("indexed")).height == 0:
        raise dg.Failure("no indexable benchmark instance: check the benchmark folder and the task filter")
    qs = quality_settings
    suite = build_suite(records, seed=qs.seed, per_type=qs.per_type, clean_docs=qs.clean_docs,
                        hard_negatives=qs.hard_negative_limit, benchmarks_dir=contam_settings.benchmarks_path)
    suite_dir = qs.suite_path(contam_settings.out_path)
    meta = write_suite(suite, suite_dir)
    with contam_db.connect() as con:
        tables.write_suite(con, truth_frame(suite), documents_frame(suite))
    truth = truth_frame(suite).filter(pl.col("role") == "planted")
    per_type = (truth.group_by("leak_type", "task").len().sort("leak_type", "task")
                .pivot(on="task", index="leak_type", values="len").fill_null(0))
    if meta["skipped"]:
        context.log.info(f"left out: {meta['skipped']}")
    return dg.MaterializeResult(metadata={
        "seed": qs.seed, "per_type": qs.per_type, "digest": meta["digest"],
        "planted_documents": meta["documents"].get("planted", 0), "clean_documents": meta["documents"].get("clean", 0),
        "hard_negative_documents": meta["documents"].get("hard_negative", 0), "planted_items": meta["planted_items"],
        "tasks": ", ".join(meta["tasks"]), "seconds": round(time.perf_counter() - t0, 1),
        "items_per_leak_type_and_task": dg.MetadataValue.md(md_table(None, per_type.to_dicts())),
        "left_out": dg.MetadataValue.json(meta["skipped"]),
        "pool": dg.MetadataValue.path(meta["pool"]),
    })


def _recall_png(scores: pl.DataFrame) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = scores.filter(pl.col("task") == "ALL").to_dicts()
    fig, ax = plt.subplots(figsize=(7, 0.28 * len(rows) + 0.8), dpi=90)
    names = [r["leak_type"] for r in rows][::-1]
    ax.barh(names, [r["candidate_recall"] or 0 for r in rows][::-1], color="#c9d3e3", label="candidate")
    ax.barh(names, [r["recall"] or 0 for r in rows][::-1], color="#2f6fb3", label="flagged")
    ax.set_xlim(0, 1)
    ax.set_xlabel("recall")
    ax.legend(frameon=False, fontsize=8, loc="lower right")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


@dg.asset(
    **_QUALITY, deps=[planted_suite], partitions_def=presets_partitions, kinds={"python", "duckdb", "html"},
    check_specs=[dg.AssetCheckSpec("quality_targets", asset="detector_quality",
                                   description="the partition's preset targets (quality.scores.TARGETS): default: recall >= 0.99 "
                                               "verbatim/formatting/escaped Q+A, >= 0.95 solution-only code, <= 100 false positives "
                                               "per million clean documents, none on hard negatives; thorough: its table in docs/quality.md",
                                   metadata=check_metadata(DATA_OWNERS, "the detector's measured recall and false positives"))],
)
def detector_quality(context: dg.AssetExecutionContext, contam_settings: ContamSettings, contam_db: ContamDB,
                     quality_settings: QualitySettings):
    """Recall per leak type and task, precision, false positives per million and the item split, for one preset."""
    from contam_assets.quality import tables
    from contam_assets.quality.measure import measure
    from contam_assets.quality.quality_files import build_json, render_html
    from contam_assets.quality.suite import load_suite_tables

    name = context.partition_key
    suite_dir = quality_settings.suite_path(contam_settings.out_path)
    try:
        _, _, meta = load_suite_tables(suite_dir)
        result, matches = measure(name, suite_dir, load_task_specs(contam_settings), contam_settings.benchmarks_path,
                                  log=context.log.info, **_overrides(contam_settings))
    except (FileNotFoundError, ValueError) as exc:
        raise dg.Failure(str(exc)) from exc
    out = contam_settings.out_path
    page, qjson = out / "quality.html", out / "quality.json"
    with contam_db.connect() as con:  # exclusive: the page always reflects every committed preset
        tables.write_result(con, result, matches, meta["digest"])
        data = tables.load_report(con, meta["digest"])
        atomic_write_text(page, render_html(data, meta))
        atomic_write_text(qjson, json.dumps(build_json(data, meta), indent=2, default=str))

    s = result.summary
    fp, hard = s["false_positives"], s["hard_negatives"]
    overall = result.scores.filter(pl.col("task") == "ALL").select(
        "leak_type", "planted", "flagged", "held_for_review", "candidates", "recall", "candidate_recall", "precision")
    png = png_markdown_bytes(_recall_png(result.scores), "recall") if result.scores.height else ""
    targets = s.get("targets") or []
    yield dg.MaterializeResult(metadata={
        "preset": name, "suite_digest": meta["digest"],
        "recall_per_leak_type": dg.MetadataValue.md(md_table(None, overall.to_dicts())),
        "recall_plot": dg.MetadataValue.md(png or "_no scores_"),
        "clean_documents": fp["documents"], "false_positive_documents": fp["flagged_documents"],
        "false_positives_per_million": fp["per_million"], "false_positives_upper95_per_million": fp["upper95_per_million"],
        "hard_negative_documents": hard.get("total", {}).get("documents", 0),
        "hard_negative_false_positives": hard.get("total", {}).get("false_positives", 0),
        "item_split": dg.MetadataValue.md(md_table(None, result.item_split_summary.to_dicts())),
        "targets": dg.MetadataValue.md(md_table(None, targets) if targets else "_no targets for this preset_"),
        "quality_page": dg.MetadataValue.path(str(page)), "quality_json": dg.MetadataValue.path(str(qjson)),
        "index_seconds": s.get("index_seconds"), "scan_seconds": s.get("scan_seconds"),
    })
    failed = [t["name"] for t in targets if not t["passed"]]
    yield dg.AssetCheckResult(
        check_name="quality_targets", passed=not failed,
        metadata={"preset": name, "failed": ", ".join(failed) or "none",
                  "targets": dg.MetadataValue.md(md_table(None, targets) if targets else "_no targets for this preset_")})
