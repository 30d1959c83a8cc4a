"""Data side, the pool as the scans see it: ``pool_listing``, the first asset of every `scan_shards` run.

It does what a run must do before any shard is scanned, the same for `contam detect` and a daemon-started run:
sweeps the temporary files a killed run left (those of processes gone from this host; while another run is in
progress only those older than a day, store/files.STALE_S, since a younger one may belong to that run's live
writer on another node or in another container sharing the folder), lists the pool (a remote
pool by its store's own listing: read in place, never copied), checks the door (store/door.py: every new or changed unit holds the content key; in a
run over partitions only their files, so one bad new file fails only the runs that scan it; in the listing-only
run `contam detect` starts with, the whole pool, so detect refuses before any scan; the units that passed are
kept in table ``door_checks``, so a tick on a large pool does not read every file again), records what the listing skipped,
retires the files of this output folder that left the pool (the one retirement rule: defs/data/runs.py), and
writes run.json (the settings `contam apply` and `contam review` read back; the ``files`` counts pool_tables
adds are kept until the next publish).
"""


import json
import os
import socket
from pathlib import Path

import dagster as dg
import polars as pl
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
    PARTITION_NAME_TAG,
)

from contam_assets.defs.data.assets import _DATA
from contam_assets.defs.data.runs import known_files
from contam_assets.defs.partitions import shards_partitions
from contam_assets.defs.resources import ContamDB, ContamSettings, DetectorKnobs
from contam_assets.rescan.watch import pool_units
from contam_assets.store import shards as shards_db
from contam_assets.store import table_exists, tables
from contam_assets.store.door import DoorError, check_units
from contam_assets.store.files import atomic_write_text, process_alive, sweep_temp_files
from contam_assets.store.location import LocationError, check_remote
from contam_assets.store.pool import list_pool, unit_stat
from contam_assets.store.readers import FORMATS

RECORDED = ("out_dir", "pool_dir", "benchmarks_dir", "tasks_dir", "tasks", "preset", "parts", "crosslingual", "removal", "unescape", "tokenizer",
            "content_key", "evals_dir", "decon_config", "decon_report_dir", "decon_cleaned_dir", "purify", "allow_missing",
            "follow_symlinks", "lm_eval_tasks", "lm_eval_include")
DOOR_TABLE = "door_checks"


def settings_record(settings: ContamSettings) -> dict:
    """What `contam apply` and `contam review` need to know about the run (run.json)."""
    rec = {k: getattr(settings, k) for k in RECORDED}
    rec["knobs"] = {k: v for k, v in settings.knobs.model_dump().items() if v is not None}
    return rec


def recorded_settings(out_dir: Path) -> ContamSettings | None:
    p = Path(out_dir) / "run.json"
    if not p.exists():
        return None
    rec = json.loads(p.read_text())
    return ContamSettings(**{k: v for k, v in rec.items() if k in RECORDED},
                          knobs=DetectorKnobs(**rec.get("knobs", {})))


def pool_missing(settings: ContamSettings, listing) -> str | None:
    """The one line of a pool that cannot be scanned (no folder, no pool file), else None."""
    loc = settings.pool_location
    if not settings.pool_path.is_dir():
        return f"pool not found: {loc.display}"
    if not listing.shards:
        return (f"no pool files ({FORMATS}) in {loc.display}"
                + (f" ({len(listing.skipped)} other entries, e.g. {listing.skipped[0].path}: "
                   f"{listing.skipped[0].reason})" if listing.skipped else ""))
    return None


def _stamps(paths: dict[str, Path], listed: dict[str, tuple[int, int]] | None = None) -> dict[str, tuple[int, int]]:
    """unit -> (size, mtime_ns); ``listed``: a remote pool's (size, version) from its listing, no request per unit."""
    out = {}
    for unit, path in paths.items():
        if listed and unit in listed:
            out[unit] = listed[unit]
            continue
        try:
            out[unit] = unit_stat(path)  # a remote object: its size and version (ETag or generation)
        except OSError:  # gone since it was listed: the scan reports it
            continue
    return out


def door_check(con, paths: dict[str, Path], content_key: str, only: set[str] | None = None,
               prechecked: bool = False, listed: dict[str, tuple[int, int]] | None = None) -> tuple[int, int]:
    """check_units over the units new or changed since they last passed the door (for this content key); those that
    pass are recorded.  ``only``: check just these files (the files of the partitions a scan run covers; None: the
    whole pool; ``prechecked``: they passed just now, before the database existed).  DoorError as check_units
    raises it; (units checked now, units passed before and unchanged)."""
    con.execute(f"create table if not exists {DOOR_TABLE} (shard varchar primary key, size bigint, mtime_ns bigint, "
                "content_key varchar)")
    passed = {r[0]: (r[1], r[2], r[3]) for r in con.execute(f"select shard, size, mtime_ns, content_key from {DOOR_TABLE}").fetchall()}
    stamps = _stamps(paths, listed)
    todo = {u: p for u, p in paths.items() if (only is None or u in only)
            and (u not in stamps or passed.get(u) != (*stamps[u], content_key))}
    if not prechecked:
        check_units(todo, content_key)
    rows = [dict(shard=u, size=stamps[u][0], mtime_ns=stamps[u][1], content_key=content_key) for u in todo if u in stamps]
    if rows:
        df = pl.DataFrame(rows, schema={"shard": pl.Utf8, "size": pl.Int64, "mtime_ns": pl.Int64, "content_key": pl.Utf8})
        con.register("door_rows", df)
        try:
            con.execute(f"insert or replace into {DOOR_TABLE} select * from door_rows")
        finally:
            con.unregister("door_rows")
    gone = sorted(set(passed) - set(paths))
    if gone:
        con.execute(f"delete from {DOOR_TABLE} where shard in (select unnest(?::varchar[]))", [gone])
    return len(todo), (len(paths) if only is None else len(only & set(paths))) - len(todo)


def run_files(context: dg.AssetExecutionContext, paths: dict[str, Path],
              listed: dict[str, tuple[int, int]] | None = None) -> set[str] | None:
    """The pool files of the partitions the run scans (its partition key, or its partition range over the instance's
    order; each unit stands for its files, store/units.py); None for a run without partitions (the listing-only
    run `contam detect` launches first and the sensors' ``listing_request``): it checks every new or changed unit."""
    tags = context.run.tags
    key, start, end = (tags.get(PARTITION_NAME_TAG), tags.get(ASSET_PARTITION_RANGE_START_TAG),
                       tags.get(ASSET_PARTITION_RANGE_END_TAG))
    if key:
        keys = [key]
    elif start and end:
        order = context.instance.get_dynamic_partitions(shards_partitions.name)
        if start not in order or end not in order:
            return None
        keys = order[order.index(start):order.index(end) + 1]
    else:
        return None
    units = pool_units(_stamps(paths, listed))
    return set(units.files_of(keys))


LAUNCHER_PID_TAG, LAUNCHER_HOST_TAG = "contam/launcher_pid", "contam/launcher_host"


def launcher_tags() -> dict[str, str]:
    """The tags `contam detect` puts on the runs it executes in its own process: a run that still reads as started
    while that process is gone from this host was killed (kill -9 leaves its record as it was)."""
    return {LAUNCHER_PID_TAG: str(os.getpid()), LAUNCHER_HOST_TAG: socket.gethostname()}


def other_runs_in_progress(context: dg.AssetExecutionContext) -> bool:
    """True while a run of this instance other than this one has started and not ended (its writers may be alive on
    other hosts, where their pids mean nothing here); a run of a launcher process gone from this host is not."""
    busy = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]
    host = socket.gethostname()
    for r in context.instance.get_runs(filters=dg.RunsFilter(statuses=busy), limit=50):
        if r.run_id == context.run.run_id:
            continue
        pid = r.tags.get(LAUNCHER_PID_TAG, "")
        if r.tags.get(LAUNCHER_HOST_TAG) == host and pid.isdigit() and not process_alive(int(pid)):
            continue  # killed with its launcher
        return True
    return False


def merge_record(path: Path, rec: dict) -> str:
    """run.json with ``rec`` over what it held: the keys the listing does not own (the ``files`` counts pool_tables
    adds) are kept until whoever owns them writes them again."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        old = {}
    if not isinstance(old, dict):
        old = {}
    return json.dumps({k: v for k, v in old.items() if k not in rec} | rec, indent=2)


@dg.asset(**_DATA, kinds={"python", "duckdb"},
          description="The pool as a run reads it: temporary files of a killed run swept (while another run is in progress: only those older than a day), the pool "
          "listed (a remote pool by its store's own listing, read in place), the door check on new or changed units (the content key; a scan run: its "
          "own units), pool skips recorded, files that left the pool retired, run.json written (the files counts "
          "kept). A refused door fails the run before any scan.")
def pool_listing(context: dg.AssetExecutionContext, contam_settings: ContamSettings, contam_db: ContamDB) -> dg.MaterializeResult:
    settings = contam_settings
    try:
        loc = settings.pool_location
        if not loc.is_local:  # a remote pool: reachable (listed below by the store itself, read in place)
            check_remote(loc)
    except LocationError as exc:
        raise dg.Failure(str(exc)) from None
    # while another run of the instance is in progress, only temporaries older than a day: on a shared folder (Ray)
    # or in per-run containers a pid not alive on this host may be a live writer of that run; alone, those of every
    # process gone too
    busy = other_runs_in_progress(context)
    swept = sweep_temp_files(settings.out_path, only_stale=busy)
    if swept:
        context.log.info(f"removed {len(swept)} temporary file(s) left by an interrupted run"
                         + (" (older than a day: another run is in progress)" if busy else ""))
    listing = list_pool(settings.pool_path, settings.follow_links, settings.pool_pattern)
    missing = pool_missing(settings, listing)
    if missing:
        raise dg.Failure(missing)
    gone = sorted(known_files(settings) - set(listing.shards))
    only = run_files(context, listing.paths, listing.listed)
    first = not settings.db_path.exists()
    if first:  # nothing has passed the door yet: refuse before the database is created
        try:
            check_units({u: p for u, p in listing.paths.items() if only is None or u in only}, settings.content_key)
        except DoorError as exc:
            raise dg.Failure(str(exc)) from None
    with contam_db.connect() as con:
        tables.ensure_schema(con)
        try:
            checked, kept = door_check(con, listing.paths, settings.content_key, only, prechecked=first,
                                       listed=listing.listed)
        except DoorError as exc:  # one line: the unit, the keys it has, the flag to pass
            raise dg.Failure(str(exc)) from None
        shards_db.record_pool_skips(con, listing.skipped)
        retired = shards_db.retire(con, settings.out_path, gone)
        if table_exists(con, "retired_shards"):
            shards_db.unretire(con, listing.shards)
    for r in retired:
        context.log.info(f"retired {r['shard']}: left the pool ({r['matches']} match row(s), {r['removals']} "
                         f"removal(s), {len(r['files'])} file(s) removed)")
    atomic_write_text(settings.out_path / "run.json", merge_record(settings.out_path / "run.json", settings_record(settings)))
    return dg.MaterializeResult(metadata={
        "files": len(listing.shards), "skipped_entries": len(listing.skipped), "door_checked": checked,
        "door_unchanged": kept, "retired": len(retired), "temporary_files_removed": len(swept),
        "retired_files": dg.MetadataValue.json([r["shard"] for r in retired]),
        "pool": loc.display,
    })
