"""`loglik_gap_correlation`: GSM8K familiarity vs the fresh-set gap, across experiments (GSM1k) and, apart, within runs."""

import dagster as dg

from contam_assets.defs.resources import ContamDB, ContamSettings
from contam_assets.model.correlation import ACROSS, Point, correlate, plot_points
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
_COLUMNS = ["experiment", "points", "Spearman", "p", "Kendall", "p", "note"]


@dg.asset(
    group_name="model",
    deps=["bits_per_byte", "fresh_set_gap"],
    kinds={"duckdb"},
    description="Spearman and Kendall correlation between per-character log-likelihood of GSM8K test and the "
    "GSM8K - fresh accuracy gap: across experiments, one point per experiment's latest checkpoint (GSM1k "
    "Figure 8; scope across-experiments), and, labelled apart, across the checkpoints of each run (scope "
    "within-run, driven by training step). Table `probe_correlations` and two scatter plots.",
)
def loglik_gap_correlation(context: dg.AssetExecutionContext, contam_settings: ContamSettings, contam_db: ContamDB) -> dg.MaterializeResult:
    with contam_db.connect() as con:
        ensure_tables(con)
        rows = con.execute(_POINTS_SQL).fetchall() if table_exists(con, "checkpoints") else []
        points = [Point(*r) for r in rows]
        results = correlate(points)
        replace_correlations(con, results)
    out_dir = contam_settings.out_path / "probes"
    out_dir.mkdir(parents=True, exist_ok=True)
    across_png, within_png = out_dir / "loglik_gap_correlation.png", out_dir / "loglik_gap_within_run.png"
    plot_points(points, across_png, across=True)
    plot_points(points, within_png, across=False)
    table = lambda rs: md_table(_COLUMNS, [(r.experiment, r.n, r.spearman, r.spearman_p, r.kendall, r.kendall_p, r.note) for r in rs])  # noqa: E731
    across = [r for r in results if r.scope == ACROSS]
    within = [r for r in results if r.scope != ACROSS]
    if not points:
        context.log.warning("no checkpoint has both llpc/gsm8k-test and fresh/gap yet")
    return dg.MaterializeResult(
        metadata={
            "checkpoints": len(points),
            "experiments": len(within),
            "across_experiments": dg.MetadataValue.md("**Across experiments** (one point per model, GSM1k):\n\n" + table(across)),
            "within_run": dg.MetadataValue.md("**Within each run** (checkpoints of one experiment; both variables "
                                              "move with training step — not GSM1k's analysis):\n\n" + table(within)),
            "plot_across_experiments": dg.MetadataValue.md(png_markdown(across_png, "across experiments")),
            "plot_within_run": dg.MetadataValue.md(png_markdown(within_png, "within each run")),
            "plot_path": dg.MetadataValue.path(str(across_png)),
        }
    )
