"""Data side, what is published from the tables once the report and the mix are current (job `publish_outputs`):

- ``decon_reports``: decon's report files (and purified files) when a decon report folder is set (docs/decon.md);
  otherwise it materializes with metadata saying it is off;
- ``pool_tables``: the user tables as Parquet under OUT/tables/ (store/export.py), the file counts in run.json, and
  report.html rendered again when its shards-that-need-attention section no longer says what the tables say (a mix
  that failed after the report was written: the daemon renders the report and the mix side by side, `contam detect`
  the report first; both publish after the mix, so both reports name the failure).

Both move by automation after a new report or mix (``on_new_outputs``), and `contam detect` requests the same job.
"""


import shutil
from pathlib import Path

import dagster as dg

from contam_assets.defs.automation import on_new_outputs
from contam_assets.defs.data.assets import _DATA
from contam_assets.defs.data.outputs import decontaminated_mix, removal_report, write_report
from contam_assets.defs.resources import ContamDB, ContamSettings
from contam_assets.executor.mix import rejected_rel
from contam_assets.report.html import shard_health_html
from contam_assets.store import artifacts, outbox, table_exists, table_parts
from contam_assets.store import shards as shards_db
from contam_assets.store.export import USER_TABLES, export_tables

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
    """The user tables as Parquet under OUT/tables/<table>/part-0.parquet (for DuckDB 1.x, polars and Spark), every
    pool file's class counted into run.json (store/shards.file_counts), and report.html rendered again when a step
    after it (the mix) changed the shards that need attention."""
    out = contam_settings.out_path
    remote = contam_settings.out_location
    # a remote output's per-shard tables are Parquet parts per shard (store/table_parts.py), not one part-0
    whole = USER_TABLES if remote is None else tuple(t for t in USER_TABLES if t not in table_parts.PER_SHARD)
    with contam_db.connect(read_only=True) as con:
        rows = export_tables(con, out, whole)
        files = shards_db.file_counts(con) if table_exists(con, "shard_stats") else {}
        stale = report_behind(out / "report.html", con)
    if files:
        shards_db.record_counts(out, files)
    if stale:
        context.log.info("report.html rendered again: a step after it changed the shards that need attention")
        write_report(contam_settings, contam_db)
    if remote is not None:
        publish_remote(context, contam_settings, contam_db)
    return dg.MaterializeResult(metadata={
        "tables": len(rows), "rows": dg.MetadataValue.json(rows), **{f"files_{k}": v for k, v in files.items()},
        "report_rendered_again": stale,
        "path": dg.MetadataValue.path(remote.url("tables") if remote is not None else str(out / "tables"))})


def publish_remote(context, contam_settings: ContamSettings, contam_db: ContamDB) -> None:
    """A remote output's end (store/outbox.commit): the tables and the report uploaded, any mix or rejected file not
    yet on the store with them, stray objects deleted, run.json last.  A mix whose upload failed, or an upload that
    fails now, fails the step with the one line naming the object, and the store keeps the previous run.json."""
    remote, out = contam_settings.out_location, contam_settings.out_path
    with contam_db.connect(read_only=True) as con:
        refused = [e["message"] for e in shards_db.errors(con) if e["step"] == "mix"
                   and e["message"].startswith(("upload of ", "not uploaded: "))]
        mixed = con.execute("select shard, path from mix_stats where path is not null and coalesce(status, 'ok') "
                            "!= 'quarantined'").fetchall() if table_exists(con, "mix_stats") else []
        rejected = [r[0] for r in con.execute("select shard from shard_stats where rejected > 0").fetchall()] \
            if table_exists(con, "shard_stats") else []
        # every scanned shard's objects stay: a concurrent mix run uploads a shard before it records it in mix_stats
        scanned = [r[0] for r in con.execute("select shard from shard_stats").fetchall()] \
            if table_exists(con, "shard_stats") else []
        quarantined = {r[0] for r in con.execute("select shard from mix_stats where status = 'quarantined'").fetchall()} \
            if table_exists(con, "mix_stats") else set()
    if refused:
        first = next((m for m in refused if m.startswith("upload of ")), refused[0])
        raise dg.Failure(description=first.removeprefix("not uploaded: "))
    prefix = remote.url("").rstrip("/") + "/"
    keep = {path[len(prefix):] if path.startswith(prefix) else
            artifacts.mix_path(out, contam_settings.pool_path, shard).relative_to(out).as_posix()
            for shard, path in mixed}
    recorded = set(keep) | {rejected_rel(shard) for shard, _ in mixed}
    keep |= {rejected_rel(shard) for shard in rejected}
    keep |= {rel for shard in scanned if shard not in quarantined
             for rel in (artifacts.mix_path(out, contam_settings.pool_path, shard).relative_to(out).as_posix(),
                         rejected_rel(shard))}
    # not on the store yet (written before this run, say); a file no mix_stats row names yet is a concurrent mix
    # run's, which uploads it itself
    pending = [rel for rel in outbox.local_files(out, ("mix", "rejected")) if rel in recorded]
    for t in table_parts.PER_SHARD:  # a whole-table copy an earlier version exported here
        shutil.rmtree(out / "tables" / t, ignore_errors=True)
    try:
        for rel in pending:
            outbox.upload(remote, out / rel, rel, remove=True)
        parts = table_parts.sync(contam_db.connect, remote, out)  # every shard's rows: the parts agree with the tables
        # the parts are table_parts' own (it deletes a shard's part when its rows are gone): a concurrent mix run's
        # part uploaded after the sync above stays
        outbox.commit(remote, out, keep | set(pending) | parts.kept, outbox.local_files(out, ("report.html", "tables")),
                      log=context.log.info, keep_under=table_parts.PART_FOLDERS)
    except outbox.UploadError as exc:
        raise dg.Failure(description=str(exc)) from None


def report_behind(report: Path, con) -> bool:
    """report.html exists and its shards-that-need-attention section (failed steps, file counts) is not what the
    tables say now."""
    if not report.exists() or not table_exists(con, "shard_stats"):
        return False
    return shard_health_html(con) not in report.read_text(encoding="utf-8", errors="replace")
