"""What a shard_matches materialization shows for each partition: its files' shard_stats counts (summed over a
group of files, store/units.py), how the run scanned them, and their best match rows; a run over several partitions
that fails partway (a scan, or a mix: defs/data/outputs.py) materializes the partitions whose files all finished
(``materialize_finished``)."""

from collections.abc import Callable

import dagster as dg

from contam_assets import store
from contam_assets.report.render import md_table

LOG_EACH_SHARD = 64  # a run of more shards logs its totals, not a line per shard (failures and warnings always)

# the counts of a shard_stats row that a shard_matches materialization shows (documents_* are documents, candidates
# and pending_review as in shard_stats)
SHARD_FIGURES = ("read", "removed", "rejected", "kept", "pending_review", "candidates", "bytes")


def figure_name(k: str) -> str:
    return f"documents_{k}" if k in ("read", "removed", "rejected", "kept") else k


def shard_figures(stats: dict, out) -> dict:
    """One partition's metadata: its shard_stats row's counts, and how this run scanned it."""
    return {**{figure_name(k): int(stats[k] or 0) for k in SHARD_FIGURES},
            "status": stats.get("status") or "ok", "scan_mode": out.mode,
            "scan_seconds": round(float(out.stats.get("seconds", 0.0) or 0.0), 3) if out.mode != "current" else 0.0,
            "attempts": out.attempts, **({"ray_node": out.node} if out.node else {})}


def unit_figures(figures: list[dict]) -> dict | None:
    """A partition's metadata from its files' (store/units.py): one file's as they are; a group's counts summed, its
    status the worst of its files', its scan modes counted."""
    if len(figures) <= 1:
        return figures[0] if figures else None
    out = {figure_name(k): sum(f[figure_name(k)] for f in figures) for k in SHARD_FIGURES}
    bad = sorted({f["status"] for f in figures} - {"ok"})
    modes = {}
    for f in figures:
        modes[f["scan_mode"]] = modes.get(f["scan_mode"], 0) + 1
    return {**out, "files": len(figures), "status": ", ".join(bad) or "ok",
            "scan_mode": ", ".join(f"{m} {n}" for m, n in sorted(modes.items())),
            "scan_seconds": round(sum(f["scan_seconds"] for f in figures), 3), "attempts": max(f["attempts"] for f in figures)}


def top_matches(con, shards: list[str], n: int = 10) -> dict[str, list[dict]]:
    """Each shard's ``n`` best stored match rows (flagged first, then by score), as they are in ``matches``."""
    if not shards:
        return {}
    rows = store.query_df(con, """select shard, line, doc_id, task, suite, split, instance_index, score, flagged, needs_review
        from matches where shard in (select unnest(?::varchar[])) and coalesce(via_task, '') = ''
        qualify row_number() over (partition by shard order by flagged desc, score desc, line) <= ?
        order by shard, flagged desc, score desc, line""", [shards, n]).to_dicts()
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(r["shard"], []).append(r)
    return out


def partition_metadata(con, unit_files: dict[str, list[str]], per_shard: dict[str, dict]) -> dict[str, dict]:
    """Partition key -> its materialization's metadata, for the partitions with a file scanned in this run."""
    tops = top_matches(con, list(per_shard))
    out = {}
    for key, files in unit_files.items():
        figures = unit_figures([per_shard[f] for f in files if f in per_shard])
        if figures is None:
            continue
        best = sorted((r for f in files for r in tops.get(f, [])), key=lambda r: (not r["flagged"], -r["score"]))[:10]
        out[key] = {**figures, "top_matches": dg.MetadataValue.md(md_table(None, best))}
    return out


def scan_figures(contam_db, per_shard: dict[str, dict]) -> Callable[[dict[str, list[str]]], dict[str, dict]]:
    """``materialize_finished``'s figures for a scan run: each finished partition's ``partition_metadata``."""
    def figures(done: dict[str, list[str]]) -> dict[str, dict]:
        with contam_db.connect(read_only=True) as con:
            return partition_metadata(con, done, per_shard)
    return figures


def materialize_finished(context: dg.AssetExecutionContext, unit_files: dict[str, list[str]], failed: dict[str, str],
                         why: str, figures: Callable[[dict[str, list[str]]], dict[str, dict]]) -> None:
    """A run over several partitions (a scan or a mix) that failed partway: each partition whose files all finished
    is materialized with ``figures(finished partitions)`` (its own, as a run that succeeds gives it), so only the
    failed ones stay unmaterialized and a backfill's retry, the sensors and the next run redo only those; the run
    then fails with its reason.  A run of one partition materializes nothing."""
    done = {k: fs for k, fs in unit_files.items() if not any(f in failed for f in fs)}
    if len(unit_files) < 2 or not done:
        return
    metadata = figures(done)
    for key in done:
        context.log_event(dg.AssetMaterialization(asset_key=context.asset_key, partition=key, metadata={
            **metadata.get(key, {}), "run_failed_partway": why.splitlines()[0][:500]}))
    context.log.info(f"{len(done)} of {len(unit_files)} partition(s) materialized; the run fails for the others")
