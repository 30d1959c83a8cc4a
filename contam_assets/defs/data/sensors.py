"""Sensors and the nightly schedule that keep the match tables current (docs/automation.md).

- new_shards_sensor: a new shard file becomes a `shards` partition (or joins a group of small
  files, store/units.py) and its scan is requested; a scanned shard whose file changed is rescanned.
- new_tasks_sensor: a task spec added, changed or removed (or a benchmark file behind one)
  launches the rebuild of the registry, reference set and index (`build_reference`).
- tasks_rescan_sensor: a new `ngram_index` materialization requests the rescans it implies:
  every scanned shard whose task set differs from the index's, in runs of consecutive
  partitions (the scans are incremental: only the changed tasks, from cached tokens).
- nightly_rescan_schedule: the full consistency check (rescan.watch) and the rescans it implies,
  including a full rescan of shards whose rows were scored with an older index (IDF drift).

All are STOPPED by default; the automation setting makes them RUNNING when the code location
loads (production), or turn them on in the UI / with `dagster sensor start`.
Cursors are small and only advance on a successful tick (Dagster's rule); every request has a
run_key derived from the change, so a repeated tick never launches a second run for it.
"""

import json

import dagster as dg

from contam_assets import settings as setting
from contam_assets import store
from contam_assets.defs.data.jobs import reference_job, scan_shards_job
from contam_assets.defs.data.runs import (  # noqa: F401 - RUN_MAX_*: where they were read before
    RUN_MAX_BYTES,
    RUN_MAX_SHARDS,
    cut_runs,
    file_runs,
    listing_request,
    plan_for,
    pool_plan,
    scan_request,
)
from contam_assets.defs.partitions import shards_partitions
from contam_assets.defs.resources import (
    ContamSettings,
    automation_on,
    evals_spec,
    sensor_default_status,
)
from contam_assets.rescan import state as scan_state
from contam_assets.rescan import watch
from contam_assets.rescan.plan import load_task_hashes
from contam_assets.sources.registry import TaskSpecError
from contam_assets.store import artifacts
from contam_assets.store.location import LocationError, check_remote

DEFAULT_STATUS = sensor_default_status()
SCHEDULE_STATUS = dg.DefaultScheduleStatus.RUNNING if automation_on() else dg.DefaultScheduleStatus.STOPPED
# Task maps up to this many tasks are kept in the cursor (to name what changed); larger ones as a hash only.
CURSOR_MAP_MAX_TASKS = 256


@dg.sensor(job=scan_shards_job, minimum_interval_seconds=60, default_status=DEFAULT_STATUS,
           description="A new shard file in the pool becomes a `shards` partition and its scan is requested; a scanned "
           "shard whose file changed is rescanned. STOPPED unless the automation setting is on.")
def new_shards_sensor(context: dg.SensorEvaluationContext, contam_settings: ContamSettings) -> dg.SensorResult:
    """Adds a `shards` partition for every new work unit (a file, or a group of small files: store/units.py) and
    requests its scan; the unit of a changed shard is rescanned.

    Cursor: a 16-hex digest of the pool listing (path, size, mtime); an unchanged listing is
    a cheap no-op.  New units are the ones without a partition (the partitions are added in
    the same tick, so they are requested once); changed shards are scanned shards whose
    (size, mtime) differs from what their last scan read (table shard_scans).  The partitions to add and
    delete are defs/data/runs.py's plan; the tick changes no table: files that left the pool are retired by
    the pool_listing asset of the run it requests.
    """
    try:
        loc = contam_settings.pool_location  # LocationError: e.g. credentials in the URL (refused, never shown)
        if not loc.is_local:  # a remote pool: reachable; the tick lists it (the store's own listing), reads nothing
            check_remote(loc)
        elif not contam_settings.pool_path.is_dir():
            return dg.SensorResult(skip_reason=f"pool not found: {loc.display}")
    except LocationError as exc:
        return dg.SensorResult(skip_reason=str(exc))
    listing = watch.pool_listing(contam_settings.pool_path, contam_settings.follow_links, contam_settings.pool_pattern)
    cursor = watch.digest(sorted(listing.items()))
    if context.cursor == cursor:
        return dg.SensorResult(skip_reason="pool listing unchanged", cursor=cursor)
    # a partition per file, or per stable group of small files; partitions to add and delete (defs/data/runs.py)
    plan = pool_plan(contam_settings, context.instance, listing)
    new, have = plan.add, set(plan.known)
    sigs = {}
    if contam_settings.db_path.exists():
        with store.connect(contam_settings.db_path, read_only=True) as con:
            sigs = scan_state.stat_signatures(con)
    changed = {s for s in listing if s in sigs and tuple(sigs[s]) != listing[s] and plan.units.unit_of[s] in have}
    requests = []
    for key in new + [k for k in plan.units.keys_of(changed) if k not in new]:
        files = plan.units.files[key]
        # run_key: one run per content of the unit's files; a repeated tick for the same content is a no-op
        stamp = "-".join(map(str, listing[files[0]])) if len(files) == 1 else watch.digest([listing[f] for f in files])
        requests.append(scan_request([key], run_key=f"{key}@{stamp}",
                                     tags={"contam/trigger": "new_shard" if key in new else "changed_shard"}))
    if requests:
        context.log.info(f"{len(new)} new partition(s), {len(changed)} changed shard(s)")
    elif plan.gone:  # files only left the pool: pool_listing retires them (the tick itself changes no table)
        requests.append(listing_request(run_key=f"pool@{cursor}", tags={"contam/trigger": "left_pool"}))
    if plan.gone:
        context.log.info(f"{len(plan.gone)} shard(s) left the pool, retired by the next pool_listing: {_tag(plan.gone)}")
    return dg.SensorResult(run_requests=requests, dynamic_partitions_requests=plan.partition_requests(), cursor=cursor)


def _tag(names: list[str]) -> str:
    text = ",".join(names)
    return text if len(text) <= 200 else text[:197] + "..."


@dg.sensor(job=reference_job, minimum_interval_seconds=60, default_status=DEFAULT_STATUS,
           description="A task spec added, changed or removed (or a benchmark file behind one) launches the rebuild of "
           "the registry, reference set and index. STOPPED unless the automation setting is on.")
def new_tasks_sensor(context: dg.SensorEvaluationContext, contam_settings: ContamSettings) -> dg.SensorResult:
    """A task spec added, changed or removed launches the rebuild of the reference set and index.

    Change = content hash of the spec file plus (size, mtime) of the benchmark files it reads.
    Cursor: {"registry": digest of the task -> hash map, "tasks": the map itself while it has at
    most 256 tasks (so the run can be tagged with what changed)}.  run_key = "registry:<digest>".
    A spec that does not parse fails the tick with the parser's message; the cursor stays.
    """
    try:
        decon_folder = [evals_spec(contam_settings)] if contam_settings.evals_path else []
        snap = watch.spec_snapshot(contam_settings.tasks_path if contam_settings.uses_registry else None,
                                   contam_settings.task_filter, contam_settings.benchmarks_path, decon_folder)
    except TaskSpecError as exc:
        raise Exception(f"task registry unreadable, nothing launched: {exc}") from exc
    registry = watch.digest(snap)
    prev = json.loads(context.cursor) if context.cursor else {}
    if prev.get("registry") == registry:
        return dg.SensorResult(skip_reason="task registry unchanged", cursor=context.cursor)
    old = prev.get("tasks")
    tags = {"contam/trigger": "task_change", "contam/registry": registry}
    if old is not None:
        added = sorted(set(snap) - set(old))
        removed = sorted(set(old) - set(snap))
        changed = sorted(t for t in set(snap) & set(old) if snap[t][:8] != old[t])
        tags.update({"contam/tasks_added": _tag(added), "contam/tasks_changed": _tag(changed), "contam/tasks_removed": _tag(removed)})
        context.log.info(f"tasks added {added}, changed {changed}, removed {removed}")
    else:
        context.log.info(f"first look at the registry ({len(snap)} tasks)" if not prev else "registry changed")
    cursor = {"registry": registry}
    if len(snap) <= CURSOR_MAP_MAX_TASKS:
        cursor["tasks"] = {k: v[:8] for k, v in snap.items()}
    return dg.SensorResult(run_requests=[dg.RunRequest(run_key=f"registry:{registry}", tags=tags)],
                           cursor=json.dumps(cursor, sort_keys=True))


def stale_task_groups(instance: dg.DagsterInstance, settings: ContamSettings, digest: str, tasks_now: dict[str, str]) -> list[list[str]]:
    """Groups of consecutive partitions whose scanned task set differs from `tasks_now`."""
    with store.connect(settings.db_path, read_only=True) as con:
        states = scan_state.load_states(con)
    stale = set(watch.tasks_needing_rescan(states, tasks_now))
    order = instance.get_dynamic_partitions(shards_partitions.name)
    listing = watch.pool_listing(settings.pool_path, settings.follow_links, settings.pool_pattern)
    return unit_runs(order, stale, listing)


def unit_runs(order: list[str], shards: set[str], listing: dict[str, tuple[int, int]]) -> list[list[str]]:
    """Runs of consecutive partitions holding ``shards`` (files of the pool; each stands in its unit, store/units.py),
    cut at RUN_MAX_BYTES / RUN_MAX_SHARDS files (defs/data/runs.py).  The cut is over the instance's partitions
    (``order``) only: a unit the plan would add has no partition yet, so no range may name it."""
    plan = plan_for(listing, order, [])
    keys = set(plan.units.keys_of(f for f in shards if f in listing))
    return cut_runs(order, keys, plan.sizes(), plan.counts(), RUN_MAX_BYTES, RUN_MAX_SHARDS)


@dg.sensor(job=scan_shards_job, minimum_interval_seconds=30, default_status=DEFAULT_STATUS,
           description="A new ngram_index materialization requests the incremental rescans of the scanned shards whose "
           "task set differs from the index's. STOPPED unless the automation setting is on.")
def tasks_rescan_sensor(context: dg.SensorEvaluationContext, contam_settings: ContamSettings) -> dg.SensorResult:
    """A new `ngram_index` materialization requests the rescans its task changes imply.

    Only shards that were scanned already are requested (new ones are new_shards_sensor's), in
    runs of consecutive partitions; each run scans incrementally (only added or changed tasks,
    from cached token streams) and deletes the rows of removed tasks.
    Cursor: storage id of the last ngram_index materialization handled.
    run_key = "tasks@<index digest>:<first>..<last>".
    """
    found = context.instance.fetch_materializations(dg.AssetKey("ngram_index"), limit=1).records
    if not found:
        return dg.SensorResult(skip_reason="ngram_index was never materialized")
    record = found[0]
    if context.cursor and int(context.cursor) >= record.storage_id:
        return dg.SensorResult(skip_reason="no new index", cursor=context.cursor)
    cursor, event = str(record.storage_id), record.event_log_entry
    out = contam_settings.out_path
    try:
        digest = artifacts.current_digest(out)
    except FileNotFoundError:
        return dg.SensorResult(skip_reason="no index on disk", cursor=cursor)
    md = event.asset_materialization.metadata if event.asset_materialization else {}
    event_digest = md["digest"].value if "digest" in md else digest
    if event_digest != digest:
        return dg.SensorResult(skip_reason=f"index {event_digest} was superseded by {digest}", cursor=cursor)
    if not contam_settings.db_path.exists():
        return dg.SensorResult(skip_reason="no shard scanned yet", cursor=cursor)
    tasks_now = load_task_hashes(artifacts.index_dir(out, digest), None, _cfg(contam_settings))
    groups = stale_task_groups(context.instance, contam_settings, digest, tasks_now)
    if not groups:
        return dg.SensorResult(skip_reason=f"every scanned shard is current with index {digest}", cursor=cursor)
    context.log.info(f"index {digest}: {sum(map(len, groups))} shard(s) to rescan in {len(groups)} run(s)")
    return dg.SensorResult(cursor=cursor, run_requests=[
        scan_request(g, run_key=f"tasks@{digest}:{g[0]}..{g[-1]}", tags={"contam/trigger": "task_change", "contam/index": digest})
        for g in groups])


def _cfg(settings: ContamSettings):
    from contam_assets.defs.data.assets import detect_config

    return detect_config(settings)


@dg.schedule(job=scan_shards_job, cron_schedule=setting.env_value("nightly_cron"),
             execution_timezone="UTC", default_status=SCHEDULE_STATUS,
             description="Nightly consistency check of the match tables against the pool and the index; rescans what "
             "is stale, new or changed (IDF drift in full). STOPPED unless the automation setting is on.")
def nightly_rescan_schedule(context: dg.ScheduleEvaluationContext, contam_settings: ContamSettings):
    """Nightly consistency check: rescans what is stale, new or changed.

    - scanned with another task set, never scanned, or changed file: `auto` (incremental when it can);
    - rows scored with an older index (IDF drift after an incremental add): `full`, from the cached
      token streams (the nightly_idf_rescan setting off only reports them).
    Shard files without a partition are left to new_shards_sensor and reported.
    run_key = "nightly:<date>:<mode>:<first>..<last>".
    """
    from contam_assets.defs.data.checks import consistency

    if not contam_settings.db_path.exists():
        return dg.SkipReason("nothing scanned yet")
    c = consistency(context.instance, contam_settings)
    day = context.scheduled_execution_time.strftime("%Y-%m-%d") if context.scheduled_execution_time else "now"
    listing = watch.pool_listing(contam_settings.pool_path, contam_settings.follow_links, contam_settings.pool_pattern)
    order = context.instance.get_dynamic_partitions(shards_partitions.name)
    wanted = {"auto": set(c.unscanned) | set(c.changed) | set(c.task_stale),
              "full": set(c.idf_stale) if setting.env_value("nightly_idf_rescan") else set()}
    requests = []
    for mode, shards in wanted.items():
        for g in unit_runs(order, shards, listing):
            requests.append(scan_request(g, run_key=f"nightly:{day}:{mode}:{g[0]}..{g[-1]}", mode=mode,
                                         tags={"contam/trigger": "nightly"}))
    summary = ", ".join(f"{k} {v}" for k, v in c.counts().items() if v) or "consistent"
    context.log.info(f"nightly check: {summary}")
    if not requests:
        return dg.SkipReason(f"nothing to rescan ({summary})")
    return requests
