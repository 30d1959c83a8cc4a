"""Data side, what is published from the tables once the report and the mix are current (job `publish_outputs`):

- ``decon_reports``: decon's report files (and purified files) when a decon report folder is set (docs/decon.md);
  otherwise it materializes with metadata saying it is off;
- ``pool_tables``: the user tables as Parquet under OUT/tables/ (store/export.py), and the file counts in run.json.

Both move by automation after a new report or mix (``on_new_outputs``), and `contam detect` requests the same job.
"""


from pathlib import Path

import dagster as dg

from contam_assets.defs.automation import on_new_outputs
from contam_assets.defs.data.assets import _DATA
from contam_assets.defs.data.outputs import decontaminated_mix, removal_report
from contam_assets.defs.resources import ContamDB, ContamSettings
from contam_assets.store import shards as shards_db
from contam_assets.store import table_exists
from contam_assets.store.export import export_tables

DECON_KEYS = ("decon_reports", "decon_report_files", "decon_report_entries", "decon_cleaned", "decon_cleaned_files")


@dg.asset(**_DATA, deps=[removal_report, decontaminated_mix], kinds={"python", "jsonl"},
          automation_condition=on_new_outputs())
def decon_reports(context: dg.AssetExecutionContext, contam_settings: ContamSettings, contam_db: ContamDB) -> dg.MaterializeResult:
    """decon's report files for every training file with a flagged line (and, with purify, the purified copy of every
    file read whole), from the tables; off (materialized, metadata ``enabled`` false) without a decon report folder."""
    s = contam_settings
    if not s.decon_report_dir:
        return dg.MaterializeResult(metadata={"enabled": False, "why": "no decon report folder set (decon mode only)"})
    from contam_assets.decon.decon_outputs import write_decon_outputs

    context.log.info(f"decon reports -> {s.decon_report_dir}")
    cfg, _ = s.detect_config()
    with contam_db.connect(read_only=True) as con:
        result = write_decon_outputs(con, s.out_path, s.pool_path, Path(s.decon_report_dir), cfg, s.content_key,
                                     Path(s.decon_cleaned_dir or s.decon_report_dir) if s.purify else None)
    return dg.MaterializeResult(metadata={"enabled": True, **result})


@dg.asset(**_DATA, deps=[removal_report, decontaminated_mix], kinds={"duckdb", "parquet"},
          automation_condition=on_new_outputs())
def pool_tables(context: dg.AssetExecutionContext, contam_settings: ContamSettings, contam_db: ContamDB) -> dg.MaterializeResult:
    """The user tables as Parquet under OUT/tables/<table>/part-0.parquet (for DuckDB 1.x, polars and Spark), and
    every pool file's class counted into run.json (store/shards.file_counts)."""
    out = contam_settings.out_path
    with contam_db.connect(read_only=True) as con:
        rows = export_tables(con, out)
        files = shards_db.file_counts(con) if table_exists(con, "shard_stats") else {}
    if files:
        shards_db.record_counts(out, files)
    return dg.MaterializeResult(metadata={
        "tables": len(rows), "rows": dg.MetadataValue.json(rows), **{f"files_{k}": v for k, v in files.items()},
        "path": dg.MetadataValue.path(str(out / "tables"))})
