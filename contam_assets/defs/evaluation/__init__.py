"""Evaluation domain: one report per checkpoint, and a comparison across runs.

Thin assets over ``contam_assets.evaluation`` (no Dagster there): load the
config, call ``report.evaluate``, send to the tracker, attach metadata.
"""


import json

import dagster as dg

from contam_assets import settings
from contam_assets.defs.automation import on_new_probe_results
from contam_assets.defs.meta import MODEL_OWNERS, check_metadata, tags
from contam_assets.defs.partitions import checkpoints_partitions
from contam_assets.defs.resources import ContamDB, ContamSettings
from contam_assets.report.inert import md_text
from contam_assets.store.files import atomic_write_text

# Model-side probe assets (contam_assets/defs/model); named, not imported.
PROBE_ASSETS = ("ppl_probe", "bits_per_byte", "membership_scores", "recitation_rate", "fresh_set_gap")


class EvaluationSettings(dg.ConfigurableResource):
    """Where the evaluation config (benchmarks, tracker) lives; see docs/evaluation.md."""

    config_file: str = ""  # YAML/JSON; "" = defaults (known benchmark files, tracker off)
    use_cache: bool = True  # reuse the contamination measured for the same train.jsonl and items


def _benchmarks_md(report: dict) -> str:
    c = report["contamination"] or {}
    per = c.get("benchmarks") or {}
    lines = ["| benchmark | items | exact | near | share_mean | value (metric) |", "|---|---|---|---|---|---|"]
    for name, b in report["benchmarks"].items():
        p = per.get(name) or {}
        value = "–" if b["value"] is None else f"{b['value']:.4g} ({md_text(b['metric'])})"
        lines.append(f"| {md_text(name)} | {b['items']} | {p.get('exact', '–')} | {p.get('near', '–')} | "
                     f"{p.get('share_mean', '–')} | {value} |")
    return "\n".join(lines)


@dg.asset(
    partitions_def=checkpoints_partitions,
    deps=[dg.AssetKey(k) for k in PROBE_ASSETS],
    group_name="evaluation",
    kinds={"json", "wandb"},
    owners=MODEL_OWNERS,
    tags=tags("model", "evaluation"),
    automation_condition=on_new_probe_results(),
    check_specs=[dg.AssetCheckSpec("report_consistent", asset="evaluation_report",
                                   description="contamination null iff base; exact <= near <= items; totals add up",
                                   metadata=check_metadata(MODEL_OWNERS, "the report's contamination counts"))],
    description="<experiments>/<experiment>/eval/<stage>/report.json: model, recipe, probe scores, "
    "benchmark values and 8-gram contamination against the experiment's train.jsonl (null for base).",
)
def evaluation_report(
    context: dg.AssetExecutionContext,
    contam_settings: ContamSettings,
    contam_db: ContamDB,
    contam_evaluation: EvaluationSettings,
) -> dg.MaterializeResult:
    from contam_assets.evaluation.checkpoint_report import ReportError, evaluate
    from contam_assets.evaluation.config import ConfigError, load_config
    from contam_assets.evaluation.run_comparison import report_problems
    from contam_assets.evaluation.tracker import TrackerError, send_report

    key = context.partition_key
    if key.count("/") != 1:
        raise dg.Failure(f"partition key {key!r} is not <experiment>/<stage>")
    experiment, stage = key.split("/")
    try:
        config = load_config(contam_evaluation.config_file)
        ev = evaluate(
            contam_settings.experiments_path, experiment, stage,
            config=config, benchmarks_dir=contam_settings.benchmarks_path,
            connect=lambda: contam_db.connect(read_only=True),
            content_key=contam_settings.content_key, use_cache=contam_evaluation.use_cache,
        )
    except (ConfigError, ReportError) as exc:
        raise dg.Failure(description=f"{key}: {exc}") from exc
    try:
        sent = send_report(ev.path, ev.report, config.tracker, contam_settings.experiments_path / "wandb")
    except TrackerError as exc:
        raise dg.Failure(description=f"{key}: report written at {ev.path}; tracker: {exc}") from exc
    context.log.info(f"{key}: report {'written' if ev.changed else 'unchanged'} at {ev.path}; tracker: {sent.reason}")
    report = ev.report
    c = report["contamination"]
    problems = report_problems(report)
    metadata = {
        "path": dg.MetadataValue.path(str(ev.path)),
        "changed": ev.changed,
        "is_base": report["model"]["is_base"],
        "recipe": report["recipe"] or "",
        "scores": len(report["scores"]),
        "benchmarks": dg.MetadataValue.md(_benchmarks_md(report)),
        "tracker": sent.reason + (f" ({sent.project}, run {sent.run_id}, version {sent.version})"
                                  if sent.run_id else ""),
    }
    if c is not None:
        metadata |= {k: c[k] for k in ("items", "exact", "near") if c[k] is not None}
        metadata |= {k: float(c[k]) for k in ("exact_rate", "near_rate", "share_mean") if c[k] is not None}
        metadata["train_rows_skipped"] = sum(c["train"]["rows_skipped"].values())
    return dg.MaterializeResult(
        metadata=metadata,
        check_results=[dg.AssetCheckResult(check_name="report_consistent", passed=not problems,
                                           metadata={"problems": "; ".join(problems) or "none"})],
    )


@dg.asset(
    deps=[evaluation_report],
    group_name="evaluation",
    kinds={"json"},
    owners=MODEL_OWNERS,
    tags=tags("model", "evaluation"),
    automation_condition=on_new_probe_results(),
    description="Contamination per run: one row per report under the experiments folder, and per "
    "experiment the latest report's contamination; written to <out_dir>/evaluation/comparison.json.",
)
def evaluation_comparison(context: dg.AssetExecutionContext, contam_settings: ContamSettings) -> dg.MaterializeResult:
    from contam_assets.evaluation.run_comparison import comparison, markdown_table

    comp = comparison(contam_settings.experiments_path)
    out = contam_settings.out_path / "evaluation" / "comparison.json"
    atomic_write_text(out, json.dumps(comp, indent=2) + "\n")
    runs = [{"experiment": e} | r for e, r in comp["runs"].items()]
    for e in comp["errors"]:
        context.log.warning(f"unreadable report {e['path']}: {e['error']}")
    return dg.MaterializeResult(metadata={
        "path": dg.MetadataValue.path(str(out)),
        "reports": len(comp["reports"]),
        "runs": len(runs),
        "unreadable_reports": len(comp["errors"]),
        "per_run": dg.MetadataValue.md(markdown_table(
            runs, ("experiment", "stage", "recipe", "items", "exact", "exact_rate", "near", "near_rate", "share_mean"))),
        "reports_table": dg.MetadataValue.md(markdown_table(comp["reports"])),
    })


defs = dg.Definitions(
    assets=[evaluation_report, evaluation_comparison],
    resources={"contam_evaluation": EvaluationSettings(config_file=settings.env_value("eval_config"))},
)
