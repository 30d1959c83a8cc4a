"""Data side: registry -> reference set -> n-gram index -> shard scans -> removals -> report -> mix."""


import json
import time
from datetime import datetime, timezone

import dagster as dg
import polars as pl

from contam_assets import settings as setting
from contam_assets import store
from contam_assets.defs.automation import (
    on_new_scans,
)
from contam_assets.defs.data.engine import ScanEngine
from contam_assets.defs.data.index_step import index_step, reference_inputs
from contam_assets.defs.data.scan_metadata import (
    LOG_EACH_SHARD,
    SHARD_FIGURES,
    figure_name,
    materialize_finished,
    partition_metadata,
    scan_figures,
    shard_figures,
)
from contam_assets.defs.data.scan_plan import ShardScanConfig, plan_work
from contam_assets.defs.data.units import partition_files
from contam_assets.defs.inputs import inputs_check, inputs_present, skip_for_missing_inputs
from contam_assets.defs.meta import DATA_OWNERS, DETECTOR_VERSION, SCAN_VERSION, tags
from contam_assets.defs.partitions import shards_partitions
from contam_assets.defs.resources import ContamDB, ContamSettings, detect_config, lm_eval_specs, load_task_specs
from contam_assets.detector import build_budget
from contam_assets.detector.config import paraphrase_removes, settings_rows
from contam_assets.detector.matches import Reference
from contam_assets.detector.prefilter import ensure_prefilter
from contam_assets.detector.skips import instance_summary
from contam_assets.executor.mix import MixAsScanned
from contam_assets.executor.progress import file_size, for_step
from contam_assets.report.render import md_table
from contam_assets.rescan import state as scan_state
from contam_assets.rescan.outcomes import OutcomeWriter
from contam_assets.rescan.plan import load_task_hashes, scan_config_digest
from contam_assets.sources.reference_reuse import write_reference_set_reusing
from contam_assets.sources.registry import (
    TaskSpecError,
    locate,
    looks_like_decon_references,
    spec_digest,
)
from contam_assets.sources.translation_links import links as translation_links
from contam_assets.store import artifacts, tables
from contam_assets.store import shards as shards_db
from contam_assets.store.faults import fault_point

GROUP = "decontamination"
# What every asset of the data side declares (owners, group, tags); kinds and descriptions are per asset.
_DATA = dict(group_name=GROUP, owners=DATA_OWNERS, tags=tags("data", "decontamination"))


def lm_eval_check(context: dg.AssetExecutionContext, settings: ContamSettings) -> list[dict]:
    """Every lm-eval leaf reported (logged, and returned as metadata rows); a requested task that yields nothing
    fails the asset with its reason."""
    from contam_assets.sources.lm_eval_tasks import report_lines

    _, reports = lm_eval_specs(settings)
    for line in report_lines(reports):
        context.log.info(line.strip())
    bad = [r for r in reports if not r.ok]
    if bad and not settings.allow_missing:
        raise dg.Failure(f"{len(bad)} lm-eval task(s) yielded nothing: " + "; ".join(f"{r.task}: {r.error}" for r in bad)
                         + f" — fix the task or its data, or pass --allow-missing ({setting.var('allow_missing')}=1) to run without them")
    for r in bad:
        context.log.warning(f"lm-eval {r.task} yielded nothing: {r.error}")
    return [dict(task=r.task, splits=", ".join(f"{k} {v}" for k, v in r.splits.items()), error=r.error or "",
                 absent=", ".join(r.absent)) for r in reports]


def missing_tasks(specs, availability: pl.DataFrame, settings: ContamSettings) -> dict[str, list[str]]:
    """Tasks the user asked for whose every split has no source file: task -> the paths looked for.

    The embedded default (no benchmark folder, no task named) asks for nothing in particular: there a
    task without files is expected (only HumanEval ships with a package) and not an error.
    """
    asked = bool(settings.benchmarks_dir or settings.task_filter or settings.evals_dir or settings.decon_config)
    if not asked:
        return {}
    found = set(availability.filter(pl.col("origin") != "missing")["task"].to_list())
    base = settings.benchmarks_path
    out = {}
    for spec in specs:
        if spec.name not in found:
            out[spec.name] = [s.file if spec.format == "decon" or base is None else str(base / s.file) for s in spec.splits]
    return out


@dg.asset(**_DATA, kinds={"python", "duckdb"}, code_version=DETECTOR_VERSION)
def task_registry(context: dg.AssetExecutionContext, contam_settings: ContamSettings, contam_db: ContamDB) -> dg.MaterializeResult:
    """Benchmark tasks from data/tasks/*.toml (and lm-eval tasks, read through lm_eval) and where each split's rows come from."""
    specs = load_task_specs(contam_settings, refresh_lm_eval=True)
    lm_eval = lm_eval_check(context, contam_settings) if contam_settings.lm_eval_list else []
    rows = []
    for spec in specs:
        spec_hash = spec_digest(spec)
        for split in spec.splits:
            avail = locate(spec, split, contam_settings.benchmarks_path)
            rows.append(dict(task=spec.name, kind=spec.kind, language=spec.language, split=split.name, origin=avail.origin,
                             files=len(avail.files), spec_path=spec.spec_path, spec_hash=spec_hash))
    df = pl.DataFrame(rows, schema={"task": pl.Utf8, "kind": pl.Utf8, "language": pl.Utf8, "split": pl.Utf8, "origin": pl.Utf8,
                                    "files": pl.Int32, "spec_path": pl.Utf8, "spec_hash": pl.Utf8})
    with contam_db.connect() as con:
        tables.ensure_schema(con)
        tables.replace_table(con, "tasks", df)
    available = df.filter(pl.col("origin") != "missing")
    missing = df.filter(pl.col("origin") == "missing")
    no_files = missing_tasks(specs, df, contam_settings)
    if no_files and not contam_settings.allow_missing:
        hint = ""
        if contam_settings.benchmarks_path and looks_like_decon_references(contam_settings.benchmarks_path):
            hint = (f"; {contam_settings.benchmarks_path} holds decon reference files: pass it as --evals-dir "
                    f"({setting.var('evals_dir')}), not --benchmarks")
        raise dg.Failure(
            f"{len(no_files)} task(s) have no source files: " + "; ".join(f"{t} (looked for {', '.join(p)})" for t, p in no_files.items())
            + f" — fix the paths, or pass --allow-missing ({setting.var('allow_missing')}=1) to run without them" + hint)
    if missing.height:
        (context.log.warning if contam_settings.benchmarks_path else context.log.info)(f"{missing.height} split(s) have no source file: " + ", ".join(f"{r['task']}/{r['split']}" for r in missing.to_dicts()))
    return dg.MaterializeResult(metadata={
        "tasks": len(specs), "splits_available": available.height, "splits_missing": missing.height,
        "benchmarks_dir": str(contam_settings.benchmarks_path or "(embedded default)"),
        "splits": dg.MetadataValue.md(md_table(None, df.select("task", "kind", "split", "origin", "files").to_dicts())),
        **({"lm_eval_leaves": dg.MetadataValue.md(md_table(None, lm_eval))} if lm_eval else {}),
    })


@dg.asset(**_DATA, deps=[task_registry], kinds={"python", "duckdb"}, code_version=DETECTOR_VERSION)
def reference_set(context: dg.AssetExecutionContext, contam_settings: ContamSettings, contam_db: ContamDB,
                  contam_scan_engine: ScanEngine) -> dg.MaterializeResult:
    """Every benchmark instance of every split as reference records (decon's preprocessing + derived suites).

    Built again only when what it is built from changed (registry.inputs_digest: the detector's code,
    the knobs that shape it, the specs, the bytes of every source file); else the table is kept."""
    cfg = detect_config(contam_settings)
    t0 = time.perf_counter()
    specs = load_task_specs(contam_settings)
    inputs = reference_inputs(contam_settings.out_path, specs, contam_settings.benchmarks_path, cfg, DETECTOR_VERSION)
    cfg_rows = pl.DataFrame(settings_rows(cfg, contam_settings.detect_config()[1]),
                            schema={"name": pl.Utf8, "value": pl.Utf8, "decon_name": pl.Utf8, "origin": pl.Utf8})
    with contam_db.connect() as con:
        tables.ensure_schema(con)
        state = tables.reference_state(con)
        if state is not None and state["inputs"] == inputs:
            tables.replace_table(con, "detect_settings", cfg_rows)  # scan-only knobs may have changed
            return _reference_kept(context, con, state, time.perf_counter() - t0)
    ahead = _tokenize_ahead(context, contam_settings, contam_scan_engine)  # the build is due: the scan's shards beside it
    try:
        return _build_reference(context, contam_settings, contam_db, cfg, specs, inputs, cfg_rows, t0)
    finally:
        if ahead is not None:
            done = ahead.stop()
            _say(context)(f"  tokenized ahead: {done['cached']} shard(s) cached, "
                          f"{done['not_started'] + done['stopped'] + done['broken'] + done['failed']} left to the scan")


def _tokenize_ahead(context: dg.AssetExecutionContext, settings: ContamSettings, engine: ScanEngine):
    """Tokenizing ahead of the scan while the set is built (defs/data/ahead.py), or None."""
    from contam_assets.defs.data.ahead import tokenize_ahead
    from contam_assets.store.pool import list_pool

    if not settings.pool_path.is_dir():
        return None
    try:
        shards = list_pool(settings.pool_path, settings.follow_links, settings.pool_pattern).shards
    except Exception as exc:  # noqa: BLE001 - a remote pool this process cannot list: the scan lists and reads it
        _say(context)(f"  not tokenizing ahead: the pool cannot be listed here ({type(exc).__name__})")
        return None
    return tokenize_ahead(settings, shards, _say(context), engine=engine) if shards else None


def _build_reference(context: dg.AssetExecutionContext, contam_settings: ContamSettings, contam_db: ContamDB, cfg,
                     specs, inputs: str, cfg_rows: pl.DataFrame, t0: float) -> dg.MaterializeResult:
    workers = build_budget.worker_count(setting.env_value("build_workers"))  # the decon filters' processes
    try:  # one line before the build when it cannot fit in the memory available (fewer filter processes where they fit)
        est = build_budget.fitting(build_budget.estimate([f for spec in specs for split in spec.splits
                                   for f in locate(spec, split, contam_settings.benchmarks_path).files], workers))
    except build_budget.MemoryRefused as exc:
        raise dg.Failure(str(exc)) from None
    progress = build_budget.BuildProgress(_say(context), est.source_bytes, phases=("read", "filter"))
    try:
        link_notes: list[str] = []
        links = translation_links(specs, contam_settings.benchmarks_path, link_notes)  # a translation that cannot be aligned
        for line in link_notes:
            _say(context)(f"note: {line}")
        n, stats = write_reference_set_reusing(specs, contam_settings.benchmarks_path, cfg, out := contam_settings.out_path,
                                               DETECTOR_VERSION, inputs, progress, _say(context), est.workers)  # unchanged kept
    except TaskSpecError as exc:  # a field the rows do not have, or a mapping where text is expected
        raise dg.Failure(str(exc)) from None
    records = artifacts.record_columns(artifacts.reference_records_dir(out), cfg.dense_short_questions)  # no texts
    summary = instance_summary(records, stats.row_skips, stats.notes, cfg)
    empty = empty_tasks(summary, stats)
    if records.filter(pl.col("indexed")).height == 0:
        raise dg.Failure("no indexable benchmark instance: check the benchmark folder "
                         f"({contam_settings.benchmarks_path or 'embedded default'}) and the task filter"
                         + (f" ({'; '.join(empty)})" if empty else ""))
    if empty and not contam_settings.allow_missing:
        raise dg.Failure(f"{len(empty)} task(s) contributed no indexed instance: " + "; ".join(empty)
                         + f" — fix the files or the spec, or pass --allow-missing ({setting.var('allow_missing')}=1) to run without them")
    for line in empty:
        context.log.warning(f"contributed nothing: {line}")
    fault_point("reference_build")
    seconds = time.perf_counter() - t0
    state = pl.DataFrame([dict(inputs=inputs, records=records.height, bad_rows=len(stats.bad_rows),
                               bad_row_examples=json.dumps(stats.bad_rows[:20]),
                               same_answer_suites=", ".join(stats.same_answer_suites), seconds=round(seconds, 3),
                               built_at=datetime.now())])
    with contam_db.connect() as con:
        tables.replace_many(con, [("instances", "true", [], artifacts.reference_records_dir(out) / artifacts.RECORDS_FILE),
                                  ("detect_settings", "true", [], cfg_rows),
                                  ("reference_overlap", "true", [], stats.overlap), ("reference_summary", "true", [], summary),
                                  ("translation_links", "true", [], links), ("reference_state", "true", [], state)])
    artifacts.mark_reference_records(out, inputs, n)
    per_suite = (records.group_by("task", "suite", "split").agg(records=pl.len(), indexed=pl.col("indexed").sum())
                 .sort("task", "suite", "split").to_dicts())
    skipped = records.group_by("skip_reason").len().sort("skip_reason").to_dicts()
    if stats.bad_rows:
        context.log.warning(f"{len(stats.bad_rows)} unreadable benchmark rows, e.g. {stats.bad_rows[:3]}")
    return dg.MaterializeResult(metadata={
        "records": records.height, "indexed": int(records["indexed"].sum()),
        "bad_rows": len(stats.bad_rows), "same_answer_suites": ", ".join(stats.same_answer_suites) or "none",
        "seconds": round(seconds, 2), "rebuilt": True, "inputs_digest": inputs,
        "per_suite": dg.MetadataValue.md(md_table(None, per_suite)),
        "skip_reasons": dg.MetadataValue.md(md_table(None, [{"reason": r["skip_reason"] or "(indexed)", "records": r["len"]} for r in skipped])),
        "instances": dg.MetadataValue.md(md_table(None, summary.to_dicts())),
    })


def _say(context: dg.AssetExecutionContext):
    """A progress line to Dagster's log and to the terminal of `contam detect`."""
    def say(line: str) -> None:
        context.log.info(line.strip())
        print(line, flush=True)
    return say


def empty_tasks(summary: pl.DataFrame, stats) -> list[str]:
    """Tasks whose files were read but gave no indexed instance: one clause each, with the reasons and an
    example of an unreadable row."""
    out = []
    for task, g in summary.group_by("task", maintain_order=True):
        if g["indexed"].sum() == 0:
            example = next((b for b in stats.bad_rows if b.startswith(f"{task[0]}/")), "")
            out.append(f"{task[0]}: " + ", ".join(f"{r['split']} {r['instances']:,} instance(s) skipped ({r['reasons']})"
                                                  for r in g.to_dicts()) + (f", e.g. {example}" if example else ""))
    return out


def _reference_kept(context: dg.AssetExecutionContext, con, state: dict, seconds: float) -> dg.MaterializeResult:
    """The metadata of a reference set kept as it was (its inputs unchanged), read back from its table."""
    per_suite = [dict(zip(("task", "suite", "split", "records", "indexed"), r)) for r in con.execute(
        """select task, suite, split, count(*), count(*) filter (where indexed) from instances
           group by task, suite, split order by task, suite, split""").fetchall()]
    skipped = con.execute("select skip_reason, count(*) from instances group by skip_reason order by skip_reason").fetchall()
    context.log.info(f"reference set unchanged (inputs {state['inputs'][:12]}, built {state['built_at']}): kept")
    if state["bad_rows"]:
        context.log.warning(f"{state['bad_rows']} unreadable benchmark rows, e.g. {json.loads(state['bad_row_examples'])[:3]}")
    return dg.MaterializeResult(metadata={
        "records": int(state["records"]), "indexed": sum(r["indexed"] for r in per_suite),
        "bad_rows": int(state["bad_rows"]), "same_answer_suites": state["same_answer_suites"] or "none",
        "seconds": round(seconds, 2), "rebuilt": False, "inputs_digest": state["inputs"],
        "build_seconds": float(state["seconds"]),
        "per_suite": dg.MetadataValue.md(md_table(None, per_suite)),
        "skip_reasons": dg.MetadataValue.md(md_table(None, [{"reason": r or "(indexed)", "records": n} for r, n in skipped])),
    })


@dg.asset(**_DATA, deps=[reference_set], kinds={"python", "numpy"}, code_version=DETECTOR_VERSION)
def ngram_index(context: dg.AssetExecutionContext, contam_settings: ContamSettings, contam_db: ContamDB) -> dg.MaterializeResult:
    """IDF n-gram index of the reference set, saved under <out>/index/<digest>/: kept when its inputs or records are
    unchanged, grown by the changed tasks where it can be, else built (defs/data/index_step.py)."""
    cfg, out, t0 = detect_config(contam_settings), contam_settings.out_path, time.perf_counter()
    done = index_step(out, cfg, contam_db, _say(context))
    index, digest, hashes, reused = done.index, done.digest, done.hashes, done.reused
    if cfg.prefilter:  # built once here and saved beside the index, so no scan run builds the anchors again
        records = done.records if done.records is not None else artifacts.read_index_dir(artifacts.index_dir(out, digest))[1]
        ensure_prefilter(index, records, cfg, folder=artifacts.index_dir(out, digest))
    seconds = time.perf_counter() - t0
    context.log.info(f"index {digest}: {index.n_records} records, {len(index.q_keys)} question n-grams ({done.how} in {seconds:.1f}s)")
    return dg.MaterializeResult(metadata={
        "digest": digest, "reused": reused, "how": done.how, "build_seconds": round(seconds, 2), "records_indexed": index.n_records,
        "tasks": len(hashes), "question_ngrams": len(index.q_keys), "hot_ngrams": int(index.hot.sum()), "hot_threshold": index.hot_threshold,
        "bytes_per_instance": round(index.nbytes() / max(1, index.n_records), 1),
        "path": dg.MetadataValue.path(str(artifacts.index_dir(out, digest))),
    })


@dg.asset(
    **_DATA,
    partitions_def=shards_partitions,
    deps=[ngram_index, dg.AssetKey("pool_listing")],  # defs/data/pool.py: the door check before any scan
    kinds={"python", "duckdb"},
    code_version=SCAN_VERSION,
    # at most N scan steps at once: `dagster instance concurrency set contam_scan N` (docs/automation.md)
    pool="contam_scan",
)
def shard_matches(context: dg.AssetExecutionContext, config: ShardScanConfig, contam_settings: ContamSettings,
                  contam_db: ContamDB, contam_scan_engine: ScanEngine) -> dg.MaterializeResult:
    """Candidate and flagged matches of one training-pool shard, kept current with the index.

    New or changed shards are scanned in full (the token stream is cached); when only
    tasks changed, only the changed tasks are scanned, from the cached stream
    (rescan/plan.py, rescan/incremental.py).  Rows are replaced on re-run, never duplicated.
    """
    started = step_clock()
    try:
        return _scan_partitions(context, config, contam_settings, contam_db, contam_scan_engine)
    except Exception as exc:
        record_run_failure(contam_settings, contam_db, list(context.partition_keys), ("scan", "write"), exc, started)
        raise


def step_clock() -> datetime:
    """Now, as shard_errors.recorded_at holds it (UTC, naive): when a step began, for record_run_failure."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


def record_run_failure(settings: ContamSettings, db: ContamDB, keys: list[str], steps: tuple[str, ...], exc: Exception,
                       since: datetime | None = None) -> None:
    """A run of partitions that failed as a whole (no file of it recorded its own error during this step: an error
    row of ``steps`` recorded at or after ``since``, the step's start; an older row is stale and does not count):
    each of its files gets the run's reason as its error row (steps[0]), and a scan's a failed shard_stats row where
    it has none, so a daemon run leaves the rows `contam detect` reports."""
    why = exc.description if isinstance(exc, dg.Failure) and exc.description else (
        str(exc) if type(exc).__module__.startswith("contam_assets") or isinstance(exc, TimeoutError)
        else f"{type(exc).__name__}: {exc}")
    try:
        files = [f for fs in partition_files(settings, keys).values() for f in fs]
    except dg.Failure:
        files = list(keys)
    try:
        with db.connect() as con:
            fresh = "" if since is None else " and recorded_at >= ?"
            if store.table_exists(con, "shard_errors") and con.execute(
                    "select count(*) from shard_errors where shard in (select unnest(?::varchar[])) "
                    f"and step in (select unnest(?::varchar[])){fresh}",
                    [files, list(steps)] + ([since] if since is not None else [])).fetchone()[0]:
                return  # the run's shards said what failed during this step, each
            stats = {r[0] for r in con.execute("select shard from shard_stats").fetchall()} \
                if store.table_exists(con, "shard_stats") else set()
            for shard in files:
                if steps[0] == "scan" and shard not in stats:
                    shards_db.record_failed(con, shard, "scan", why, settings.out_path)
                else:
                    shards_db.record_error(con, shard, steps[0], why)
    except Exception:  # noqa: BLE001 - a database that cannot be written: the run's own error is the one to raise
        pass


def _scan_partitions(context: dg.AssetExecutionContext, config: ShardScanConfig, contam_settings: ContamSettings,
                     contam_db: ContamDB, contam_scan_engine: ScanEngine) -> dg.MaterializeResult:
    cfg = detect_config(contam_settings)
    try:
        index, records, digest = artifacts.load_index(contam_settings.out_path)
    except FileNotFoundError as exc:
        raise dg.Failure(str(exc)) from exc
    ref = Reference(records)
    if cfg.prefilter:  # read (or built once and saved) beside the index; the workers receive it with the index
        ensure_prefilter(index, records, cfg, folder=artifacts.index_dir(contam_settings.out_path, digest))
    tasks_now = load_task_hashes(artifacts.index_dir(contam_settings.out_path, digest), records, cfg)
    unknown = sorted(paraphrase_removes(cfg) - set(tasks_now) - {"all"}) if cfg.paraphrase else []
    if unknown:  # a name that matches no task would remove nothing, silently
        raise dg.Failure(f"--paraphrase-remove names {', '.join(unknown)}, which the reference set does not hold "
                         f"(it holds {', '.join(sorted(tasks_now)) or 'no task'})")
    scan_cfg = scan_config_digest(cfg, contam_settings.content_key)
    cache_root = contam_scan_engine.cache_root(contam_settings.out_path, not contam_settings.pool_location.is_local)
    unit_files = partition_files(contam_settings, list(context.partition_keys))
    shards = [f for files in unit_files.values() for f in files]
    with contam_db.connect(read_only=True) as con:
        states = scan_state.load_states(con, shards)
    jobs, sigs, failed = plan_work(contam_settings, shards, cfg, digest, tasks_now, cache_root, config.mode, states)
    context.log.info(f"{len(jobs)} shard(s) on {contam_scan_engine.describe(len(jobs))}: "
                     + ", ".join(f"{j.shard}: {j.plan.describe()}" for j in jobs[:20]) + (" …" if len(jobs) > 20 else ""))
    totals = dict.fromkeys(SHARD_FIGURES, 0)
    modes = {"full": 0, "incremental": 0, "current": 0}
    workers: set[str] = set()
    nodes: dict[str, list[str]] = {}  # Ray node -> the shards it scanned
    retries = 0
    incomplete: dict[str, str] = {}
    scan_seconds = 0.0
    per_shard: dict[str, dict] = {}  # each partition's own figures (its shard_stats row), never the run's
    # shards done of the total, bytes read, MB/s and the time left, at most a line every progress_s seconds
    progress = for_step("scan", {j.shard: file_size(j.path, j.size) for j in jobs}, context.log.info)

    def finish(job, out, stats: list[dict]) -> None:
        """One outcome, once its rows are committed (OutcomeWriter, in the jobs' order)."""
        nonlocal retries, scan_seconds
        progress.shard_done(job.shard, read=isinstance(out, Exception) or out.mode != "current")
        if isinstance(out, Exception):
            failed[job.shard] = f"{type(out).__name__}: {out}" if not isinstance(out, RuntimeError) else str(out)
            context.log.error(f"{job.shard}: {failed[job.shard]}")
            return
        if stats and stats[0].get("status") not in (None, "ok"):
            incomplete[job.shard] = f"{stats[0]['status']}: {stats[0]['status_reason']}"
            context.log.warning(f"{job.shard}: {incomplete[job.shard]} (its readable documents are scanned; it gets no mix file)")
        elif mixer is not None and stats and out.mode != "current":
            mixer.add(job.shard)  # a remote output: its mix goes to the store now (executor/mix.MixAsScanned)
        modes[out.mode] += 1
        workers.add(out.worker)
        retries += out.attempts - 1
        if out.node:
            nodes.setdefault(out.node, []).append(job.shard)
        if stats:
            for k in totals:
                totals[k] += int(stats[0][k] or 0)
            per_shard[job.shard] = shard_figures(stats[0], out)
        if out.mode != "current":
            scan_seconds += float(out.stats.get("seconds", 0.0) or 0.0)
        if out.mode != "current" and len(jobs) <= LOG_EACH_SHARD:  # each line is a row of Dagster's event log
            context.log.info(f"{job.shard}: {job.plan.describe()} -> {out.mode}, {out.n_matches or (out.matches.height if out.matches is not None else 0)} row(s) "
                             f"({out.docs_scanned} document(s) scanned" + (f" on node {out.node[:12]}" if out.node else "")
                             + (f", attempt {out.attempts}" if out.attempts > 1 else "") + ")")

    remote = contam_settings.out_location  # a remote output: each shard's mix as its rows are committed
    mixer = MixAsScanned(contam_db.connect, contam_settings.out_path, contam_settings.pool_path, contam_settings.removal,
                         cfg, contam_settings.content_key, remote, warn=context.log.warning) \
        if remote is not None and contam_settings.removal in ("document", "span") else None
    # several outcomes per connection and transaction (rescan/outcomes.py); the rows are one write per shard's
    writer = OutcomeWriter(contam_db.connect, sigs, finish, tasks_now=tasks_now, digest=digest, scan_config=scan_cfg,
                           records=records)
    source = artifacts.index_dir(contam_settings.out_path, digest)  # local workers read the index from there

    def idle() -> None:
        writer.idle()
        if mixer is not None:
            mixer.drain()

    try:
        for job, out in contam_scan_engine.run(jobs, index, ref, idle=idle, source=source):
            if not isinstance(out, Exception) and out.rejects is not None:
                try:
                    artifacts.write_rejects(contam_settings.out_path, job.shard, out.rejects)
                except Exception as exc:  # noqa: BLE001 - one shard's write failing must not lose the others
                    out = RuntimeError(f"writing its rows: {type(exc).__name__}: {exc}")
            writer.add(job, out)
            idle()
        writer.flush()
        idle()
    finally:  # the terminal's bar stops with the step, failed or not
        progress.close()
    write_seconds = writer.write_seconds
    if failed:  # each gets its shard_stats row (status failed), so every listed file has one
        with contam_db.connect() as con:
            for shard, why in failed.items():
                shards_db.record_failed(con, shard, "scan", why, contam_settings.out_path)
        why = (f"{len(failed)} of {len(shards)} shard(s) failed (the others were written): "
               + "; ".join(f"{k}: {v}" for k, v in list(failed.items())[:5]))
        materialize_finished(context, unit_files, failed, why, scan_figures(contam_db, per_shard))
        raise dg.Failure(description=why, metadata={"failed": dg.MetadataValue.json(failed)})
    with contam_db.connect(read_only=True) as con:
        metadata = partition_metadata(con, unit_files, per_shard)
    # each partition's materialization carries its own shard's figures and matches (whether the run held one
    # partition or a range: add_asset_metadata per partition key); the rest describes the run the partition was
    # materialized in (the same on each of its partitions), its document counts under run_totals
    for key, md in metadata.items():
        context.add_asset_metadata(md, partition_key=key)
    run_totals = {"partitions": len(unit_files), "shards": len(shards), **{figure_name(k): v for k, v in totals.items()},
                  "scan_seconds": round(scan_seconds, 2)}
    context.log.info("run totals: " + ", ".join(f"{k} {v}" for k, v in run_totals.items()))
    return dg.MaterializeResult(metadata={
        "run_totals": dg.MetadataValue.json(run_totals), **{f"shards_{k}": v for k, v in modes.items()},
        "write_seconds": round(write_seconds, 2), "write_batches": writer.flushes,
        "engine": contam_scan_engine.describe(len(jobs)), "workers": len(workers),
        "shard_retries": retries, **({"ray_nodes": dg.MetadataValue.json(nodes)} if nodes else {}),
        "index_digest": digest,
    })


def _scanned_shards(con) -> int:
    return con.execute("select count(*) from shard_stats").fetchone()[0] if store.table_exists(con, "shard_stats") else 0


@dg.asset(**_DATA, deps=[shard_matches], kinds={"duckdb"}, automation_condition=on_new_scans(), output_required=False,
          check_specs=[inputs_check("removals", "at least one scanned shard", DATA_OWNERS)])
def removals(context: dg.AssetExecutionContext, contam_db: ContamDB):
    """Documents to remove: flagged matches of primary suites, and of derived suites once a reviewer accepted them."""
    with contam_db.connect() as con:
        tables.ensure_schema(con)
        if not _scanned_shards(con):
            return skip_for_missing_inputs(context, "no shard has been scanned yet (materialize shard_matches first)")
        n = tables.recompute_removals(con)
        by_task = store.query_df(con, """select task, split, count(distinct shard || ':' || line) documents from matches m
            where exists (select 1 from removals r where r.shard = m.shard and r.line = m.line) and flagged
              and coalesce(via_task, '') = '' group by 1, 2 order by 3 desc""").to_dicts()
        by_source = store.query_df(con, "select coalesce(source, '(none)') source, count(*) documents from removals group by 1 order by 2 desc").to_dicts()
        pending = con.execute("select coalesce(sum(pending_review), 0) from shard_stats").fetchone()[0]
        decisions = con.execute("select count(*) from review_decisions").fetchone()[0]
        shards = _scanned_shards(con)
    return dg.MaterializeResult(metadata={
        "removed_documents": n, "pending_review_documents": int(pending), "review_decisions": decisions,
        "per_task": dg.MetadataValue.md(md_table(None, by_task)), "per_source": dg.MetadataValue.md(md_table(None, by_source)),
    }, check_results=[inputs_present(shards_scanned=shards)])
