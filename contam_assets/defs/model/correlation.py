"""`loglik_gap_correlation`: GSM8K familiarity vs the fresh-set gap, across experiments (GSM1k) and, apart, within runs."""

import dagster as dg

from contam_assets.defs.automation import on_new_probe_results
from contam_assets.defs.inputs import inputs_check, inputs_present, skip_for_missing_inputs
from contam_assets.defs.meta import MODEL_OWNERS, tags
from contam_assets.defs.resources import ContamDB, ContamSettings
from contam_assets.model.correlation import Point, correlate, plot_points
from contam_assets.model.tables import ensure_tables, replace_correlations
from contam_assets.report.render import md_table, png_markdown
from contam_assets.store import table_exists

_POINTS_SQL = """
select c.checkpoint, c.experiment, l.value, g.value, c.step
from checkpoints c
join probe_metrics l on l.checkpoint = c.checkpoint and l.probe = 'bits_per_byte' and l.metric = 'llpc/gsm8k-test'
join probe_metrics g on g.checkpoint = c.checkpoint and g.probe = 'fresh_set_gap' and g.metric = 'fresh/gap'
order by c.experiment, c.step nulls first, c.checkpoint
"""


@dg.asset(
    group_name="model",
    deps=["bits_per_byte", "fresh_set_gap"],
    kinds={"duckdb", "scipy"},
    owners=MODEL_OWNERS,
    tags=tags("model", "probes"),
    automation_condition=on_new_probe_results(),
    output_required=False,
    check_specs=[inputs_check("loglik_gap_correlation", "a checkpoint with both llpc/gsm8k-test and fresh/gap", MODEL_OWNERS)],
    description="Spearman and Kendall correlation between per-character log-likelihood of GSM8K test and the "
    "GSM8K - fresh accuracy gap across experiments, one point per experiment's latest checkpoint (GSM1k Figure 8; "
    "scope across-experiments), and, labelled apart, across the checkpoints of each run (scope within-run, moved "
    "by training step); table `probe_correlations` and a scatter plot of each.",
)
def loglik_gap_correlation(context: dg.AssetExecutionContext, contam_settings: ContamSettings, contam_db: ContamDB):
    with contam_db.connect() as con:
        ensure_tables(con)
        rows = con.execute(_POINTS_SQL).fetchall() if table_exists(con, "checkpoints") else []
        points = [Point(*r) for r in rows]
        if not points:
            return skip_for_missing_inputs(context, "no checkpoint has both llpc/gsm8k-test (bits_per_byte) and "
                                                    "fresh/gap (fresh_set_gap) yet")
        results = correlate(points)
        replace_correlations(con, results)  # the across-experiments row first, then one within-run row per experiment
    out_dir = contam_settings.out_path / "probes"
    out_dir.mkdir(parents=True, exist_ok=True)
    png = out_dir / "loglik_gap_correlation.png"
    plot_points(points, png)  # across experiments
    within_png = out_dir / "loglik_gap_within_run.png"
    plot_points(points, within_png, across=False)
    table = md_table(
        ["scope", "experiment", "points", "Spearman", "p", "Kendall", "p", "note"],
        [(r.scope, r.experiment, r.n, r.spearman, r.spearman_p, r.kendall, r.kendall_p, r.note) for r in results],
    )
    return dg.MaterializeResult(
        metadata={
            "checkpoints": len(points),
            "experiments": len(results) - 1,
            "plot_within_run": dg.MetadataValue.md(png_markdown(within_png, "within each run (moves with training step)")),
            "correlations": dg.MetadataValue.md(table),
            "plot": dg.MetadataValue.md(png_markdown(png, "per-character log-likelihood vs gap")),
            "plot_path": dg.MetadataValue.path(str(png)),
        },
        check_results=[inputs_present(checkpoints=len(points))],
    )
