"""Runs of the data-side jobs executed in this process, as the daemon launches them (what runner.py, `contam estimate`
and the tests use).

- ``instance_for``: the Dagster instance of a run ($DAGSTER_HOME when set, else `<out>/.dagster_home`, its
  dagster.yaml turning telemetry off), created once even when two runs start at the same moment;
- ``data_definitions``: the code location's assets, checks and jobs bound to a run's settings; ``data_side``: the
  assets and checks of the data side, read from the definitions (never listed);
- ``execute``: a RunRequest executed with execute_in_process (its job, partition key or range tags, run config,
  asset selection); a failure raises ``StepFailed`` with its one-line reason;
- ``scan_range`` / ``mix_ranges``: the scan_shards and write_mix runs of a set of partitions, cut by
  defs/data/runs.py.

Nothing here decides what a run does: the assets do, the same for a daemon-launched run.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
from pathlib import Path
from typing import Callable

import dagster as dg

from contam_assets import settings as setting
from contam_assets import store
from contam_assets.defs.data import runs
from contam_assets.defs.data.ahead import ahead_mode
from contam_assets.defs.data.engine import engine_from_env
from contam_assets.defs.data.pool import launcher_tags
from contam_assets.defs.partitions import shards_partitions
from contam_assets.defs.resources import ContamDB, ContamSettings
from contam_assets.store import shards as shards_db
from contam_assets.store.files import atomic_write_text
from contam_assets.store.units import Units

# The CLI prints the warnings that asset code logs and one line per failure; Dagster's own
# log lines and stack traces stay in the instance (`dagster dev` shows them).
LOG_LEVEL = setting.env_value("log_level")
# The instance config written into a new (or empty) DAGSTER_HOME: no telemetry, no banner.
INSTANCE_YAML = "# written by contam-assets (defs/launch.instance_for); deploy/dagster.yaml has a full example\ntelemetry:\n  enabled: false\n"


def instance_for(out_dir: Path, dagster_home: str | None = None) -> dg.DagsterInstance:
    """The Dagster instance of a run, created once even when two runs start at the same moment."""
    home = Path(dagster_home or os.environ.get("DAGSTER_HOME") or Path(out_dir).resolve() / ".dagster_home")
    home.mkdir(parents=True, exist_ok=True)
    os.environ["DAGSTER_HOME"] = str(home)
    with open(home / ".contam-instance.lock", "a+") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # the SQLite schema is created by the first process only
        try:
            cfg = home / "dagster.yaml"
            if not cfg.exists() or not cfg.read_text().strip():
                atomic_write_text(cfg, INSTANCE_YAML)
            instance = dg.DagsterInstance.get()
            instance.get_runs(limit=1)  # touches every storage, so their schemas exist before the lock is released
            instance.get_dynamic_partitions(shards_partitions.name)
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    return instance


def resources_for(settings: ContamSettings) -> dict:
    return {"contam_settings": settings, "contam_db": ContamDB(path=str(settings.db_path)),
            "contam_scan_engine": engine_from_env()}


def data_definitions(settings: ContamSettings) -> dg.Definitions:
    """The code location's assets, checks and jobs (build_definitions), bound to these settings (not the
    environment's); its sensors and schedules are the daemon's and are left out."""
    from contam_assets.definitions import build_definitions

    defs = build_definitions()
    return dg.Definitions(assets=defs.assets, asset_checks=defs.asset_checks, jobs=defs.jobs,
                          resources={**(defs.resources or {}), **resources_for(settings)})


def data_side(defs: dg.Definitions | None = None) -> tuple[list, list]:
    """The assets and checks of the data side (group decontamination) of the definitions."""
    from contam_assets.defs.data.assets import GROUP

    if defs is None:
        from contam_assets.definitions import build_definitions

        defs = build_definitions()
    assets = list({id(a): a for a in defs.assets if isinstance(a, dg.AssetsDefinition) and a.is_executable
                   and set(a.group_names_by_key.values()) == {GROUP}}.values())
    keys = {k for a in assets for k in a.keys}
    checks = list({id(c): c for c in defs.asset_checks or [] if {k.asset_key for k in c.check_keys} <= keys}.values())
    return assets, checks


class StepFailed(RuntimeError):
    """A materialization failed; the message is the user-facing reason, without a stack trace."""


def _reason(err) -> str:
    while err.cause is not None:  # the user-facing reason is at the bottom of the chain
        err = err.cause
    msg = err.message.strip()
    # our own errors (and a database wait's TimeoutError, store/db.py) carry a message for the user: no class name
    return re.sub(r"^(dagster\._core\.definitions\.events\.Failure|contam_assets\.[\w.]+|TimeoutError): ", "", msg)


def execute(defs: dg.Definitions, request: dg.RunRequest, instance, log: Callable[[str], None] = print):
    """Execute a RunRequest in this process, as the daemon would launch it (its job, partition key or range tags,
    run config, asset selection); asset warnings are printed, a failure raises StepFailed with its one-line reason."""
    cfg = dict(request.run_config or {})
    result = defs.resolve_job_def(request.job_name).execute_in_process(
        instance=instance, partition_key=request.partition_key, raise_on_error=False,
        tags={**dict(request.tags or {}), **launcher_tags()},
        asset_selection=list(request.asset_selection) if request.asset_selection else None,
        run_config={**cfg, "loggers": {"console": {"config": {"log_level": LOG_LEVEL}}}})
    for entry in instance.all_logs(result.run_id):  # the warnings asset code logged, one line each
        if entry.level >= logging.WARNING and not entry.is_dagster_event and entry.user_message:
            log(f"warning: {entry.user_message.splitlines()[0]}")
    if not result.success:
        failures = [e for e in result.all_events if e.is_failure]
        msg = failures[0].message if failures else "run failed"
        for e in result.all_events:
            if e.event_type_value == "STEP_FAILURE" and e.step_failure_data and e.step_failure_data.error:
                msg = _reason(e.step_failure_data.error)
                break
        raise StepFailed(msg)
    return result


def run_job(defs: dg.Definitions, job, instance, partition_key=None, log: Callable[[str], None] = print,
            tags: dict | None = None, ops: dict | None = None, assets: list[str] | None = None):
    """One of the named jobs (``ops``: its ops' run config; ``assets``: only these of its assets), through execute."""
    return execute(defs, dg.RunRequest(job_name=job.name, partition_key=partition_key, tags=tags or {},
                                       run_config={"ops": ops} if ops else {},
                                       asset_selection=[dg.AssetKey(a) for a in assets] if assets else None), instance, log)


def try_run(defs, request, instance, log, what: str = "") -> bool:
    """A scan or mix run; its failure is said in one line (the asset recorded its files' errors in the tables)."""
    try:
        execute(defs, request, instance, log)
        return True
    except StepFailed as exc:
        log(f"  {what}{request.partition_key or request.tags.get(runs.ASSET_PARTITION_RANGE_START_TAG, '')} "
            f"failed: {exc}")
        return False


def check_environment(env=os.environ) -> None:
    """The run knobs `contam detect` reads from the environment (the tokenize_ahead and detect_runs settings), checked
    before anything runs: ValueError with the variable and its values."""
    ahead_mode(env)
    runs.detect_runs(1, env)


def scan_range(settings: ContamSettings, defs: dg.Definitions, instance: dg.DagsterInstance, processes: int,
               shards: list[str], log: Callable[[str], None] = print, units: Units | None = None,
               ranged: bool = True) -> dict[str, str]:
    """The scan_shards runs of ``shards`` (their ``units``): ranged, over stretches of consecutive partitions (one run
    where they are consecutive, spread over ``processes`` worker processes), else a run per partition; the cut is
    defs/data/runs.py's.  shard -> why it failed, for the shards no partition stands for."""
    units = units or Units.one_per_file(shards)
    keys = units.keys_of(shards)
    order = instance.get_dynamic_partitions(shards_partitions.name)
    parts = runs.cut_runs(order, keys) if ranged else runs.cut_runs(order, keys, max_files=1)
    if ranged:
        log(f"scan {len(shards)} shard(s)" + (f" in {len(keys)} partition(s)" if len(keys) != len(shards) else "")
            + f" on {processes} processes")
    failed = uncovered(parts, keys, log, units)
    for i, part in enumerate(parts, 1):
        if not ranged:
            log(f"scan [{i}/{len(parts)}] {part[0]}")
        try_run(defs, runs.scan_request(part, listed=True), instance, log)  # run_detect's listing run went first
    return failed


def mix_ranges(settings: ContamSettings, defs: dg.Definitions, instance: dg.DagsterInstance, shards: list[str],
               log: Callable[[str], None] = print, units: Units | None = None, ranged: bool = True) -> bool:
    """The write_mix runs of the partitions of ``shards`` holding a file whose scan did not fail, over stretches of
    consecutive partitions (ranged) or one per partition; False when one failed."""
    units = units or Units.one_per_file(shards)
    with store.connect(settings.db_path, read_only=True) as con:
        failed = {e["shard"] for e in shards_db.errors(con) if e["step"] in ("scan", "write")}
        scanned = {r[0] for r in con.execute("select shard from shard_stats").fetchall()} - failed
    keys = [k for k in units.keys_of(s for s in shards if s in scanned)]
    order = instance.get_dynamic_partitions(shards_partitions.name)
    parts = runs.cut_runs(order, keys) if ranged else runs.cut_runs(order, keys, max_files=1)
    ok = True
    for part in parts:
        ok = try_run(defs, runs.mix_request(part), instance, log, what="mix of ") and ok
    return ok


def uncovered(parts: list[list[str]], keys: list[str], log: Callable[[str], None], units: Units) -> dict[str, str]:
    """The shards no partition stands for (removed from the instance while this run ran): failed, not skipped."""
    covered = {k for part in parts for k in part}
    failed = {s: "no partition in the Dagster instance (removed while this run ran?)"
              for k in keys if k not in covered for s in units.files_of([k])}
    for shard, why in failed.items():
        log(f"  {shard} failed: {why}")
    return failed
