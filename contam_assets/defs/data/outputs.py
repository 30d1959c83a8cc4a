"""Data side, the outputs a person uses: the removal report (report.html) and the decontaminated mix (mix/)."""

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import dagster as dg

from contam_assets import store
from contam_assets.defs.automation import MIX_REFRESH_CRON, REPORT_REFRESH_CRON, on_new_removals
from contam_assets.defs.data.assets import (
    _DATA,
    _scanned_shards,
    record_run_failure,
    removals,
    shard_matches,
    step_clock,
)
from contam_assets.defs.data.scan_metadata import materialize_finished
from contam_assets.defs.data.units import partition_files
from contam_assets.defs.inputs import inputs_check, inputs_present, skip_for_missing_inputs
from contam_assets.defs.meta import DATA_OWNERS, check_metadata
from contam_assets.defs.partitions import shards_partitions
from contam_assets.defs.resources import ContamDB, ContamSettings, detect_config
from contam_assets.executor.mix import write_mix
from contam_assets.executor.processes import workers_from_env
from contam_assets.executor.progress import for_step
from contam_assets.report.html import histogram_png, render_report
from contam_assets.report.render import md_table, png_markdown_bytes
from contam_assets.store import artifacts, mix_state, outbox
from contam_assets.store.faults import fault_point
from contam_assets.store.files import atomic_write_text
from contam_assets.store.pool import shard_path
from contam_assets.store.shards import file_counts
from contam_assets.store.translated_matches import DIRECT


def _has_estimate(con) -> bool:
    """OUT holds a pool estimate (a block sample's rows are in OUT/estimate_sample/, not in OUT's own tables)."""
    return store.table_exists(con, "pool_estimates") and con.execute("select count(*) from pool_estimates").fetchone()[0] > 0


@dg.asset(**_DATA, deps=[removals], kinds={"html", "duckdb"}, output_required=False,
          automation_condition=on_new_removals(REPORT_REFRESH_CRON),
          freshness_policy=dg.FreshnessPolicy.time_window(fail_window=timedelta(hours=36), warn_window=timedelta(hours=26)),
          check_specs=[inputs_check("removal_report", "at least one scanned shard", DATA_OWNERS)])
def removal_report(context: dg.AssetExecutionContext, contam_settings: ContamSettings, contam_db: ContamDB):
    """Self-contained HTML page for reviewers (<out>/report.html): counts, score histogram, the source x benchmark
    matrix, pending reviews and the top matches side by side (raw training text, matched spans marked)."""
    metadata = write_report(contam_settings, contam_db)
    if metadata is None:
        return skip_for_missing_inputs(context, "no shard has been scanned yet: there is nothing to report")
    return dg.MaterializeResult(metadata=metadata, check_results=[inputs_present()])


def write_report(contam_settings: ContamSettings, contam_db: ContamDB) -> dict | None:
    """report.html rendered from the tables and written; its metadata, or None when no shard has been scanned (and no
    estimate made): nothing to report.  removal_report's body, and pool_tables' when a later step (the mix) changed
    what the report's shards-that-need-attention section says."""
    settings = {"pool": str(contam_settings.pool_path), "benchmarks": str(contam_settings.benchmarks_path or "embedded default"),
                "preset": contam_settings.preset, "parts": ",".join(contam_settings.part_list) or "(preset's)",
                "removal": contam_settings.removal}
    if contam_settings.evals_path:
        settings["decon reference folder"] = str(contam_settings.evals_path)
    if contam_settings.decon_config:
        settings["decon config"] = str(Path(contam_settings.decon_config).resolve())
    with contam_db.connect(read_only=True) as con:
        if not _scanned_shards(con) and not _has_estimate(con):  # a block sample's estimate is in OUT's tables alone
            return None
        if store.table_exists(con, "detect_settings"):
            for name, value, decon_name, origin in con.execute(
                    "select name, value, decon_name, origin from detect_settings").fetchall():
                label = f"{name} ({decon_name})" if decon_name and decon_name != name else name
                settings[label] = value + ("" if origin == "preset" else f"  [{origin}]")
        cfg = detect_config(contam_settings)
        scores = con.execute(f"select score, flagged from matches where {DIRECT}").fetchall()
        png = histogram_png([s for s, _ in scores], [f for _, f in scores]) if scores else None  # page and metadata
        page = render_report(con, settings=settings, pool_dir=contam_settings.pool_path, content_key=contam_settings.content_key,
                             tokenizer=cfg.tokenizer, unescape=cfg.unescape, histogram=png)
        totals = con.execute("select coalesce(sum(read),0), coalesce(sum(removed),0), coalesce(sum(rejected),0) from shard_stats").fetchone()
        files = file_counts(con)  # every pool file in one class: the numbers of the page and of the run summary
    path = contam_settings.out_path / "report.html"
    fault_point("report_write")
    atomic_write_text(path, page)
    md_img = png_markdown_bytes(png, "score histogram") if png else ""
    return {
        "path": dg.MetadataValue.path(str(path)), "documents_read": totals[0], "documents_removed": totals[1],
        "documents_rejected": totals[2], **{f"files_{k}": v for k, v in files.items()}, "matches": len(scores), "score_histogram": dg.MetadataValue.md(md_img or "_no matches_"),
    }


@dg.asset(**_DATA, partitions_def=shards_partitions, deps=[removals, shard_matches], kinds={"python", "jsonl"},
          automation_condition=on_new_removals(MIX_REFRESH_CRON, needs_all_deps=True),
          freshness_policy=dg.FreshnessPolicy.time_window(fail_window=timedelta(days=8), warn_window=timedelta(days=7)))
def decontaminated_mix(context: dg.AssetExecutionContext, contam_settings: ContamSettings, contam_db: ContamDB) -> dg.MaterializeResult:
    """The shard without removed documents (same format), written atomically under <out>/mix/; a shard whose removals,
    rejects and pool file are unchanged since its last write is verified, not rewritten.

    A shard whose stream broke (status incomplete or failed) is quarantined: no mix file,
    until it is replaced (and rescanned) or a reviewer accepts it (`contam review --accept-shard`).
    One shard that cannot be written fails only its own partition.  The files of a run's shards are
    written by the scan_workers setting's processes (executor/mix.py); the tables are the serial loop's.
    """
    started = step_clock()
    try:
        return _write_partitions(context, contam_settings, contam_db)
    except Exception as exc:
        record_run_failure(contam_settings, contam_db, list(context.partition_keys), ("mix",), exc, started)
        raise


def _write_partitions(context: dg.AssetExecutionContext, contam_settings: ContamSettings, contam_db: ContamDB) -> dg.MaterializeResult:
    if contam_settings.removal not in ("document", "span"):
        raise dg.Failure(f"removal must be 'document' or 'span', got {contam_settings.removal!r}")
    unit_files = partition_files(contam_settings, list(context.partition_keys))
    shards = [f for files in unit_files.values() for f in files]
    out, remote = contam_settings.out_path, contam_settings.out_location
    with contam_db.connect(read_only=True) as con:  # the pool files' sizes as their scans read them
        sizes = dict(con.execute("select shard, coalesce(bytes, 0) from shard_stats where shard in "
                                 "(select unnest(?::varchar[]))", [shards]).fetchall()) \
            if store.table_exists(con, "shard_stats") else {}
    progress = for_step("mix", {f: int(sizes.get(f) or 0) for f in shards}, context.log.info)
    try:
        run = write_mix(contam_db.connect, out, contam_settings.pool_path, shards, contam_settings.removal,
                        detect_config(contam_settings), contam_settings.content_key, workers_from_env(len(shards)),
                        warn=context.log.warning, store=remote, progress=progress)
    finally:  # the terminal's bar stops with the step, failed or not
        progress.close()
    totals, unchanged, failed = run.totals, run.unchanged, run.failed
    if failed:  # the store refused an object (one line: the object and the store's error), or shards not written
        why = run.upload_error or (f"mix of {len(failed)} shard(s) not written: "
                                   + "; ".join(f"{k}: {v}" for k, v in list(failed.items())[:5]))
        # a ranged run: the partitions whose mix finished are materialized, the failed ones are left to the next run
        materialize_finished(context, unit_files, failed, why, lambda done: mix_figures(run.shards, done))
        raise dg.Failure(description=why, metadata={"failed": dg.MetadataValue.json(failed)})
    # each partition's own figures (a ranged run holds many); the run's sums under run_totals
    for key, figures in mix_figures(run.shards, unit_files).items():
        context.add_asset_metadata(figures, partition_key=key)
    return dg.MaterializeResult(metadata={
        "run_totals": dg.MetadataValue.json({"partitions": len(unit_files), "shards": len(shards), **{f"documents_{k}": v for k, v in totals.items()
                                                                        if k != "quarantined"},
                                             "shards_quarantined": totals["quarantined"], "shards_unchanged": unchanged}),
        "mix_dir": dg.MetadataValue.path(remote.url("mix") if remote is not None else str(out / "mix")),
        **({"objects_uploaded": run.uploaded} if remote is not None else {})})


def mix_figures(shards: dict[str, dict], unit_files: dict[str, list[str]]) -> dict[str, dict]:
    """Partition key -> its materialization's metadata: its files' mix_stats rows (``shards``, MixRun.shards) summed,
    for the partitions with a file written, verified or quarantined in this run."""
    out = {}
    for key, files in unit_files.items():
        results = [shards[f] for f in files if f in shards]
        if not results:
            continue
        figures = {f"documents_{k}": sum(int(r.get(k) or 0) for r in results) for k in ("written", "dropped", "rejected", "cut")}
        if len(files) == 1:
            res = results[0]
            figures |= {"status": res.get("status") or "ok", "unchanged": bool(res["unchanged"]),
                        **({"path": dg.MetadataValue.path(res["path"])} if res.get("path") else {})}
        else:  # a group of files (store/units.py)
            figures |= {"files": len(files), "status": ", ".join(sorted({r.get("status") or "ok" for r in results} - {"ok"})) or "ok",
                        "files_unchanged": sum(bool(r["unchanged"]) for r in results)}
        out[key] = figures
    return out


def run_partition_keys(context: dg.AssetCheckExecutionContext, settings: ContamSettings) -> set[str] | None:
    """The pool files of the partitions the check's run materialized (one key or a range; store/units.py), None for a
    run without partitions."""
    if context.has_partition_key or context.has_partition_key_range:
        keys = list(context.partition_keys)
        return {f for files in partition_files(settings, keys).values() for f in files}
    return None


@dg.asset_check(asset=decontaminated_mix, description="mix conservation: written + dropped + cut + rejected = read, "
                "dropped + cut = removed, and the file holds exactly written + cut lines",
                metadata=check_metadata(DATA_OWNERS, "the mix files against shard_stats"))
def mix_conservation(context: dg.AssetCheckExecutionContext, contam_settings: ContamSettings,
                     contam_db: ContamDB) -> dg.AssetCheckResult:
    # the shards of this run only (a run per shard over a backfill would re-read every mix file each time:
    # quadratic in the shards); a check run on its own, without partitions, checks every shard
    scope = run_partition_keys(context, contam_settings)
    problems = []
    with contam_db.connect(read_only=True) as con:
        if not store.table_exists(con, "mix_stats"):
            return dg.AssetCheckResult(passed=True, metadata={"shards_checked": 0})
        rows = store.query_df(con, """select m.shard, m.written, m.dropped, m.rejected, coalesce(m.cut, 0) cut, m.path, s.read, s.removed,
                   coalesce(m.status, 'ok') status from mix_stats m join shard_stats s using (shard)
                   order by m.shard""").to_dicts()
    if scope is not None:
        rows = [r for r in rows if r["shard"] in scope]
    quarantined = [r["shard"] for r in rows if r["status"] == "quarantined"]
    mix_dir = contam_settings.out_path / "mix"
    to_count = []  # rows whose counts hold: their file must hold written + cut lines
    for r in rows:
        if r["status"] == "quarantined":
            if shard_path(mix_dir, r["shard"]).exists():
                problems.append({**r, "problem": "quarantined shard has a mix file"})
        elif r["status"] == "accepted_incomplete":
            to_count.append(r)
        # a cut document (span removal) is written with its matched spans cut out
        elif r["written"] + r["dropped"] + r["cut"] + r["rejected"] != r["read"]:
            problems.append({**r, "problem": "counts"})
        elif r["dropped"] + r["cut"] != r["removed"]:
            problems.append({**r, "problem": "dropped + cut != removed (mix is stale; re-materialize it)"})
        else:
            to_count.append(r)
    remote = contam_settings.out_location
    if remote is not None and to_count:  # uploaded files have no local copy: the store's object, its size as written
        on_store, here = outbox.sizes(remote, "mix"), []
        for r in to_count:
            if shard_path(mix_dir, r["shard"]).exists():
                here.append(r)
                continue
            rel = artifacts.mix_path(contam_settings.out_path, contam_settings.pool_path, r["shard"])
            if on_store.get(rel.relative_to(contam_settings.out_path).as_posix()) != mix_state.recorded_bytes(
                    contam_settings.out_path, r["shard"]):
                problems.append({**r, "problem": "object on the store missing or not the size written"})
        to_count = here
    # every file read whole, on the run's cores (decompression leaves the GIL)
    with ThreadPoolExecutor(max(1, min(workers_from_env(len(to_count)), len(to_count)))) as pool:
        counted = pool.map(lambda r: artifacts.count_lines(shard_path(mix_dir, r["shard"])), to_count)
        problems += [{**r, "problem": "file line count"} for r, n in zip(to_count, counted) if n != r["written"] + r["cut"]]
    problems.sort(key=lambda r: r["shard"])
    return dg.AssetCheckResult(passed=not problems, metadata={
        "shards_checked": len(rows), "scope": "every shard" if scope is None else f"this run's {len(scope)} partition(s)",
        "violations": len(problems), "quarantined": dg.MetadataValue.json(quarantined),
        "details": dg.MetadataValue.md(md_table(["shard", "read", "written", "dropped", "rejected", "problem"], problems) if problems else "_none_")})
