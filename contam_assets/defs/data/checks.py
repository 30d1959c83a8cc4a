"""The data side's asset checks: every shard's documents accounted for, the scan state current, removals consistent."""

import dagster as dg

from contam_assets import store
from contam_assets.defs.automation import on_schedule
from contam_assets.defs.data.assets import removals, shard_matches
from contam_assets.defs.meta import DATA_OWNERS, check_metadata
from contam_assets.defs.partitions import shards_partitions
from contam_assets.defs.resources import ContamDB, ContamSettings, detect_config
from contam_assets.report.render import md_table
from contam_assets.rescan import state as scan_state
from contam_assets.rescan import watch
from contam_assets.rescan.plan import load_task_hashes
from contam_assets.store import artifacts, tables
from contam_assets.store import shards as shards_db

# The scan-state consistency check: with every removals run (once per backfill: removals waits until no scan is in
# progress) and nightly, never inside a shard's own run.
SCAN_STATE_CRON = "30 2 * * *"


@dg.asset_check(asset=shard_matches, blocking=True,
                description="every document read is kept, removed or rejected (read = kept + removed + rejected), in "
                "every shard; blocking: a failure stops the removals from being recomputed by automation",
                metadata=check_metadata(DATA_OWNERS, "the scan's document counts"))
def shard_accounting(contam_db: ContamDB) -> dg.AssetCheckResult:
    with contam_db.connect(read_only=True) as con:
        if not store.table_exists(con, "shard_stats"):
            return dg.AssetCheckResult(passed=True, metadata={"shards_checked": 0})
        bad = store.query_df(con, "select shard, read, kept, removed, rejected from shard_stats where read != kept + removed + rejected")
        n = con.execute("select count(*) from shard_stats").fetchone()[0]
    return dg.AssetCheckResult(passed=bad.height == 0, metadata={
        "shards_checked": n, "violations": bad.height, "details": dg.MetadataValue.md(md_table(None, bad.to_dicts()))})


@dg.asset_check(asset=shard_matches, description=(
    "every shard's stream was read to its end (status ok) and every document read is kept, removed or rejected "
    "(read = kept + removed + rejected); a truncated or corrupt shard, or one that failed, is an ERROR naming it. "
    "Not blocking: a broken shard is quarantined by the mix, the other shards' removals stand"),
    metadata=check_metadata(DATA_OWNERS, "shard streams and counts"))
def shard_conservation(contam_db: ContamDB) -> dg.AssetCheckResult:
    with contam_db.connect(read_only=True) as con:
        if not store.table_exists(con, "shard_stats"):
            return dg.AssetCheckResult(passed=True, metadata={"shards_checked": 0})
        bad = store.query_df(con, """select shard, read, kept, removed, rejected, coalesce(status, 'ok') status,
                   coalesce(status_reason, 'read != kept + removed + rejected') problem from shard_stats
            where read != kept + removed + rejected or coalesce(status, 'ok') <> 'ok' order by shard""")
        n = con.execute("select count(*) from shard_stats").fetchone()[0]
        errors = shards_db.errors(con)
    details = bad.to_dicts() + [dict(shard=e["shard"], status="failed", problem=f"{e['step']}: {e['message']}") for e in errors]
    return dg.AssetCheckResult(passed=not details, severity=dg.AssetCheckSeverity.ERROR, metadata={
        "shards_checked": n, "violations": len(details),
        "incomplete_or_failed": dg.MetadataValue.json(sorted({d["shard"] for d in details})),
        "details": dg.MetadataValue.md(md_table(["shard", "status", "read", "kept", "removed", "rejected", "problem"],
                                                details[:50]))})


def consistency(instance: dg.DagsterInstance, settings: ContamSettings) -> watch.Consistency:
    """How far the match tables are from the pool and the registry (rescan.watch.check_consistency)."""
    cfg = detect_config(settings)
    try:
        digest = artifacts.current_digest(settings.out_path)
    except FileNotFoundError:
        digest, tasks_now = "", {}
    else:
        tasks_now = load_task_hashes(artifacts.index_dir(settings.out_path, digest), None, cfg)
    with store.connect(settings.db_path, read_only=True) as con:
        states = scan_state.load_states(con)
        sigs = scan_state.stat_signatures(con)
    return watch.check_consistency(watch.pool_listing(settings.pool_path, settings.follow_links, settings.pool_pattern), instance.get_dynamic_partitions(shards_partitions.name),
                                   states, sigs, tasks_now, digest)


@dg.asset_check(asset="removals", blocking=False, automation_condition=on_schedule(SCAN_STATE_CRON),
                description="the removals come from current scans: every pool shard is a partition, scanned at its current "
                "content, for the current tasks and index (WARN; runs with each removals run and nightly)",
                metadata=check_metadata(DATA_OWNERS, "scan state against the pool, the partitions and the index"))
def scan_state_current(context: dg.AssetCheckExecutionContext, contam_settings: ContamSettings) -> dg.AssetCheckResult:
    c = consistency(context.instance, contam_settings)
    examples = {k: v[:5] for k, v in c.__dict__.items() if v}
    return dg.AssetCheckResult(passed=c.ok, severity=dg.AssetCheckSeverity.WARN, metadata={
        **{k: n for k, n in c.counts().items()},
        "examples": dg.MetadataValue.json(examples),
    })


@dg.asset_check(asset=removals, blocking=True,
                description="removed(shard) = number of removals rows of the shard, and every removed document has a "
                "flagged match that no reviewer rejected; blocking: a failure stops the report and the mix",
                metadata=check_metadata(DATA_OWNERS, "removals against matches, decisions and shard_stats"))
def removals_consistent(contam_db: ContamDB) -> dg.AssetCheckResult:
    with contam_db.connect(read_only=True) as con:
        if not store.table_exists(con, "removals"):
            return dg.AssetCheckResult(passed=True, metadata={"shards_checked": 0})
        counts = store.query_df(con, """select s.shard, s.removed, count(r.line) as rows from shard_stats s
            left join removals r using (shard) group by all having s.removed <> count(r.line) order by 1""")
        orphans = store.query_df(con, f"""select r.shard, r.line from removals r where not exists (
            select 1 from ({tables.REMOVABLE_SQL}) m where m.shard = r.shard and m.line = r.line and m.flagged
              and coalesce(m.decision, '') <> 'reject') order by 1, 2 limit 5""")
        n = con.execute("select count(*) from shard_stats").fetchone()[0]
    return dg.AssetCheckResult(passed=counts.height == 0 and orphans.height == 0, metadata={
        "shards_checked": n, "count_mismatches": counts.height, "removals_without_a_flag": orphans.height,
        "examples": dg.MetadataValue.json({"counts": counts.head(5).to_dicts(), "orphans": orphans.to_dicts()})})
