"""Data side: registry -> reference set -> n-gram index -> shard scans -> removals -> report -> mix."""


import hashlib
import json
import time
from pathlib import Path

import dagster as dg
import polars as pl
from pydantic import Field

from contam_assets import store
from contam_assets.defs.data.engine import ScanEngine, engine_from_env
from contam_assets.defs.partitions import shards_partitions
from contam_assets.defs.resources import ContamDB, ContamSettings, load_task_specs
from contam_assets.detector.config import DetectConfig, preset, with_parts
from contam_assets.detector.index import build_index
from contam_assets.detector.matches import Reference
from contam_assets.detector.reference import build_reference_set
from contam_assets.detector.registry import locate
from contam_assets.report.html import histogram_png, render_report
from contam_assets.report.render import md_table, png_markdown_bytes
from contam_assets.rescan import state as scan_state
from contam_assets.rescan import token_cache, watch
from contam_assets.rescan.jobs import ShardJob
from contam_assets.rescan.plan import (
    TASK_HASHES_FILE,
    load_task_hashes,
    plan_shard,
    scan_config_digest,
    shard_identity,
    task_hashes,
)
from contam_assets.store import artifacts, tables
from contam_assets.store.cuts import span_cutter
from contam_assets.store.files import atomic_write_text

GROUP = "decontamination"


def detect_config(settings: ContamSettings) -> DetectConfig:
    try:
        return with_parts(preset(settings.preset, tokenizer=settings.tokenizer, unescape=settings.unescape), settings.part_list)
    except ValueError as exc:
        raise dg.Failure(str(exc)) from exc


@dg.asset(group_name=GROUP, kinds={"python", "duckdb"})
def task_registry(context: dg.AssetExecutionContext, contam_settings: ContamSettings, contam_db: ContamDB) -> dg.MaterializeResult:
    """Benchmark tasks from data/tasks/*.toml and where each split's rows come from."""
    specs = load_task_specs(contam_settings)
    rows = []
    for spec in specs:
        spec_hash = hashlib.sha256(Path(spec.spec_path).read_bytes()).hexdigest()[:16]
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
    if missing.height:
        (context.log.warning if contam_settings.benchmarks_path else context.log.info)(f"{missing.height} split(s) have no source file: " + ", ".join(f"{r['task']}/{r['split']}" for r in missing.to_dicts()))
    return dg.MaterializeResult(metadata={
        "tasks": len(specs), "splits_available": available.height, "splits_missing": missing.height,
        "benchmarks_dir": str(contam_settings.benchmarks_path or "(embedded default)"),
        "splits": dg.MetadataValue.md(md_table(None, df.select("task", "kind", "split", "origin", "files").to_dicts())),
    })


@dg.asset(group_name=GROUP, deps=[task_registry], kinds={"python", "duckdb"})
def reference_set(context: dg.AssetExecutionContext, contam_settings: ContamSettings, contam_db: ContamDB) -> dg.MaterializeResult:
    """Every benchmark instance of every split as reference records (decon's preprocessing + derived suites)."""
    cfg = detect_config(contam_settings)
    t0 = time.perf_counter()
    records, stats = build_reference_set(load_task_specs(contam_settings), contam_settings.benchmarks_path, cfg)
    if records.filter(pl.col("indexed")).height == 0:
        raise dg.Failure("no indexable benchmark instance: check the benchmark folder "
                         f"({contam_settings.benchmarks_path or 'embedded default'}) and the task filter")
    with contam_db.connect() as con:
        tables.ensure_schema(con)
        tables.replace_table(con, "instances", records)
        tables.write_reference_overlap(con, stats.overlap)
    per_suite = (records.group_by("task", "suite", "split").agg(records=pl.len(), indexed=pl.col("indexed").sum())
                 .sort("task", "suite", "split").to_dicts())
    skipped = records.group_by("skip_reason").len().sort("skip_reason").to_dicts()
    if stats.bad_rows:
        context.log.warning(f"{len(stats.bad_rows)} unreadable benchmark rows, e.g. {stats.bad_rows[:3]}")
    return dg.MaterializeResult(metadata={
        "records": records.height, "indexed": int(records["indexed"].sum()),
        "bad_rows": len(stats.bad_rows), "same_answer_suites": ", ".join(stats.same_answer_suites) or "none",
        "seconds": round(time.perf_counter() - t0, 2),
        "per_suite": dg.MetadataValue.md(md_table(None, per_suite)),
        "skip_reasons": dg.MetadataValue.md(md_table(None, [{"reason": r["skip_reason"] or "(indexed)", "records": r["len"]} for r in skipped])),
    })


@dg.asset(group_name=GROUP, deps=[reference_set], kinds={"python", "numpy"})
def ngram_index(context: dg.AssetExecutionContext, contam_settings: ContamSettings, contam_db: ContamDB) -> dg.MaterializeResult:
    """IDF n-gram index of the reference set, saved under <out>/index/<digest>/ (reused when unchanged)."""
    cfg = detect_config(contam_settings)
    with contam_db.connect(read_only=True) as con:
        records = store.query_df(con, "select * from instances order by record_id")
    digest = artifacts.reference_digest(records, cfg)
    out = contam_settings.out_path
    t0 = time.perf_counter()
    reused = artifacts.has_index(out, digest)
    if reused:
        index, _, _ = artifacts.load_index(out, digest)
        atomic_write_text(out / "index" / "current.json", json.dumps({"digest": digest}))
    else:
        index = build_index(records, cfg)
        artifacts.save_index(out, digest, records, index)
    hashes = task_hashes(records, cfg)
    atomic_write_text(artifacts.index_dir(out, digest) / TASK_HASHES_FILE, json.dumps(hashes, indent=1))
    seconds = time.perf_counter() - t0
    context.log.info(f"index {digest}: {index.n_records} records, {len(index.q_keys)} question n-grams ({'reused' if reused else 'built'} in {seconds:.1f}s)")
    return dg.MaterializeResult(metadata={
        "digest": digest, "reused": reused, "build_seconds": round(seconds, 2), "records_indexed": index.n_records,
        "tasks": len(hashes), "question_ngrams": len(index.q_keys), "hot_ngrams": int(index.hot.sum()), "hot_threshold": index.hot_threshold,
        "bytes_per_instance": round(index.nbytes() / max(1, index.n_records), 1),
        "path": dg.MetadataValue.path(str(artifacts.index_dir(out, digest))),
    })


class ShardScanConfig(dg.Config):
    mode: str = Field("auto", description=(
        "auto: scan what changed (full scan of new or changed shards, incremental scan of added or changed "
        "tasks, nothing when current); full: rescan every shard of the run in full (from its cached token "
        "stream when valid)"))


def plan_jobs(settings: ContamSettings, shards: list[str], cfg: DetectConfig, digest: str, tasks_now: dict[str, str],
              cache_root: Path | None, mode: str, states: dict) -> tuple[list[ShardJob], dict[str, tuple[int, int]], list[str]]:
    """One job per shard (with its plan), the (size, mtime_ns) each plan saw, and the shards missing from the pool."""
    scan_cfg = scan_config_digest(cfg, settings.content_key)
    jobs, sigs, missing = [], {}, []
    for shard in shards:
        path = settings.pool_path / shard
        if not path.is_file():
            missing.append(shard)
            continue
        st = path.stat()
        fp, identity = shard_identity(path)
        key = token_cache.cache_key(identity, cfg, settings.content_key)
        stream_ok = cache_root is not None and token_cache.exists(cache_root, shard, key)
        try:
            plan = plan_shard(states.get(shard), identity, scan_cfg, tasks_now, key, stream_ok, mode)
        except ValueError as exc:
            raise dg.Failure(str(exc)) from exc
        jobs.append(ShardJob(shard=shard, path=str(path), plan=plan, cfg=cfg, content_key=settings.content_key,
                             preset=settings.preset, digest=digest, cache_root=str(cache_root) if cache_root else None,
                             fingerprint=fp, identity=identity))
        sigs[shard] = (st.st_size, st.st_mtime_ns)
    return jobs, sigs, missing


@dg.asset(
    group_name=GROUP,
    partitions_def=shards_partitions,
    deps=[ngram_index],
    kinds={"python", "duckdb"},
    backfill_policy=dg.BackfillPolicy.multi_run(max_partitions_per_run=16),
    pool="contam_scan",
    # bound here, not in Definitions, so every caller (runner, tests, UI) gets the engine chosen by
    # CONTAM_SCAN_ENGINE without passing it (defs/data/engine.py)
    resource_defs={"contam_scan_engine": engine_from_env()},
)
def shard_matches(context: dg.AssetExecutionContext, config: ShardScanConfig, contam_settings: ContamSettings,
                  contam_db: ContamDB, contam_scan_engine: ScanEngine) -> dg.MaterializeResult:
    """Candidate and flagged matches of one training-pool shard, kept current with the index.

    New or changed shards are scanned in full (the token stream is cached); when only
    tasks changed, only the changed tasks are scanned, from the cached stream
    (rescan/plan.py, rescan/incremental.py).  Rows are replaced on re-run, never duplicated.
    """
    cfg = detect_config(contam_settings)
    try:
        index, records, digest = artifacts.load_index(contam_settings.out_path)
    except FileNotFoundError as exc:
        raise dg.Failure(str(exc)) from exc
    ref = Reference(records)
    tasks_now = load_task_hashes(artifacts.index_dir(contam_settings.out_path, digest), records, cfg)
    scan_cfg = scan_config_digest(cfg, contam_settings.content_key)
    cache_root = contam_scan_engine.cache_root(contam_settings.out_path)
    shards = list(context.partition_keys)
    with contam_db.connect(read_only=True) as con:
        states = scan_state.load_states(con, shards)
    jobs, sigs, missing = plan_jobs(contam_settings, shards, cfg, digest, tasks_now, cache_root, config.mode, states)
    context.log.info(f"{len(jobs)} shard(s) on {contam_scan_engine.describe()}: "
                     + ", ".join(f"{j.shard}: {j.plan.describe()}" for j in jobs[:20]) + (" …" if len(jobs) > 20 else ""))
    totals = {"read": 0, "removed": 0, "rejected": 0, "pending_review": 0, "candidates": 0, "kept": 0, "bytes": 0}
    modes = {"full": 0, "incremental": 0, "current": 0}
    workers: set[str] = set()
    top: list[dict] = []
    failed: dict[str, str] = {s: "not found in the pool" for s in missing}
    scan_seconds = 0.0
    for job, out in contam_scan_engine.run(jobs, index, ref):
        if isinstance(out, Exception):
            failed[job.shard] = f"{type(out).__name__}: {out}"
            context.log.error(f"{job.shard}: {failed[job.shard]}")
            continue
        if out.rejects is not None:
            artifacts.write_rejects(contam_settings.out_path, job.shard, out.rejects)
        with contam_db.connect() as con:
            scan_state.write_outcome(con, out, tasks_now=tasks_now, digest=digest, scan_config=scan_cfg,
                                     size=sigs[job.shard][0], mtime_ns=sigs[job.shard][1], records=records)
            stats = store.query_df(con, "select * from shard_stats where shard = ?", [job.shard]).to_dicts()
        modes[out.mode] += 1
        workers.add(out.worker)
        if stats:
            for k in totals:
                totals[k] += int(stats[0][k] or 0)
        if out.mode != "current":
            scan_seconds += float(out.stats.get("seconds", 0.0) or 0.0)
            context.log.info(f"{job.shard}: {job.plan.describe()} -> {out.mode}, {out.matches.height} row(s) "
                             f"({out.docs_scanned} document(s) scanned)")
        if out.matches.height:
            top += out.matches.sort(["flagged", "score"], descending=True).head(10).select(
                "shard", "line", "task", "split", "instance_index", "score", "flagged", "needs_review").to_dicts()
    if failed:
        raise dg.Failure(description=f"{len(failed)} of {len(shards)} shard(s) failed (the others were written): "
                         + "; ".join(f"{k}: {v}" for k, v in list(failed.items())[:5]),
                         metadata={"failed": dg.MetadataValue.json(failed)})
    top = sorted(top, key=lambda r: (r["flagged"], r["score"]), reverse=True)[:10]
    return dg.MaterializeResult(metadata={
        **{f"documents_{k}" if k in ("read", "removed", "rejected", "kept") else k: v for k, v in totals.items()},
        **{f"shards_{k}": v for k, v in modes.items()},
        "scan_seconds": round(scan_seconds, 2), "engine": contam_scan_engine.describe(), "workers": len(workers),
        "index_digest": digest,
        "top_matches": dg.MetadataValue.md(md_table(None, top)),
    })


@dg.asset_check(asset=shard_matches, description="every document read is kept, removed or rejected (read = kept + removed + rejected)")
def shard_conservation(contam_db: ContamDB) -> dg.AssetCheckResult:
    with contam_db.connect(read_only=True) as con:
        if not store.table_exists(con, "shard_stats"):
            return dg.AssetCheckResult(passed=True, metadata={"shards_checked": 0})
        bad = store.query_df(con, "select shard, read, kept, removed, rejected from shard_stats where read != kept + removed + rejected")
        n = con.execute("select count(*) from shard_stats").fetchone()[0]
    return dg.AssetCheckResult(passed=bad.height == 0, metadata={
        "shards_checked": n, "violations": bad.height, "details": dg.MetadataValue.md(md_table(None, bad.to_dicts()))})


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
    return watch.check_consistency(watch.pool_listing(settings.pool_path), instance.get_dynamic_partitions(shards_partitions.name),
                                   states, sigs, tasks_now, digest)


@dg.asset_check(asset=shard_matches, blocking=False,
                description="every pool shard is a partition, scanned at its current content, for the current tasks and index")
def scan_state_current(context: dg.AssetCheckExecutionContext, contam_settings: ContamSettings) -> dg.AssetCheckResult:
    c = consistency(context.instance, contam_settings)
    examples = {k: v[:5] for k, v in c.__dict__.items() if v}
    return dg.AssetCheckResult(passed=c.ok, severity=dg.AssetCheckSeverity.WARN, metadata={
        **{k: n for k, n in c.counts().items()},
        "examples": dg.MetadataValue.json(examples),
    })


@dg.asset(group_name=GROUP, deps=[shard_matches], kinds={"duckdb"})
def removals(context: dg.AssetExecutionContext, contam_db: ContamDB) -> dg.MaterializeResult:
    """Documents to remove: flagged matches of primary suites, and of derived suites once a reviewer accepted them."""
    with contam_db.connect() as con:
        tables.ensure_schema(con)
        n = tables.recompute_removals(con)
        by_task = store.query_df(con, """select task, split, count(distinct shard || ':' || line) documents from matches m
            where exists (select 1 from removals r where r.shard = m.shard and r.line = m.line) and flagged
            group by 1, 2 order by 3 desc""").to_dicts()
        by_source = store.query_df(con, "select coalesce(source, '(none)') source, count(*) documents from removals group by 1 order by 2 desc").to_dicts()
        pending = con.execute("select coalesce(sum(pending_review), 0) from shard_stats").fetchone()[0]
        decisions = con.execute("select count(*) from review_decisions").fetchone()[0]
    return dg.MaterializeResult(metadata={
        "removed_documents": n, "pending_review_documents": int(pending), "review_decisions": decisions,
        "per_task": dg.MetadataValue.md(md_table(None, by_task)), "per_source": dg.MetadataValue.md(md_table(None, by_source)),
    })


@dg.asset(group_name=GROUP, deps=[removals], kinds={"html"})
def removal_report(context: dg.AssetExecutionContext, contam_settings: ContamSettings, contam_db: ContamDB) -> dg.MaterializeResult:
    """Self-contained HTML page for reviewers: counts, score histogram, top matches side by side."""
    settings = {"pool": str(contam_settings.pool_path), "benchmarks": str(contam_settings.benchmarks_path or "embedded default"),
                "preset": contam_settings.preset, "tokenizer": contam_settings.tokenizer, "unescape": contam_settings.unescape,
                "parts": contam_settings.parts or "(preset's)", "removal": contam_settings.removal}
    with contam_db.connect(read_only=True) as con:
        page = render_report(con, settings=settings)
        scores = con.execute("select score, flagged from matches").fetchall()
        totals = con.execute("select coalesce(sum(read),0), coalesce(sum(removed),0), coalesce(sum(rejected),0) from shard_stats").fetchone()
    path = contam_settings.out_path / "report.html"
    atomic_write_text(path, page)
    md_img = ""
    if scores:
        png = histogram_png([s for s, _ in scores], [f for _, f in scores])
        md_img = png_markdown_bytes(png, "score histogram")
    return dg.MaterializeResult(metadata={
        "path": dg.MetadataValue.path(str(path)), "documents_read": totals[0], "documents_removed": totals[1],
        "documents_rejected": totals[2], "matches": len(scores), "score_histogram": dg.MetadataValue.md(md_img or "_no matches_"),
    })


@dg.asset(group_name=GROUP, partitions_def=shards_partitions, deps=[removals], kinds={"python"},
          backfill_policy=dg.BackfillPolicy.multi_run(max_partitions_per_run=16))
def decontaminated_mix(context: dg.AssetExecutionContext, contam_settings: ContamSettings, contam_db: ContamDB) -> dg.MaterializeResult:
    """The shard without removed documents (same format), written atomically under <out>/mix/."""
    out = contam_settings.out_path
    totals = {"written": 0, "dropped": 0, "rejected": 0, "cut": 0}
    for shard in context.partition_keys:
        with contam_db.connect(read_only=True) as con:
            drop = {r[0] for r in con.execute("select line from removals where shard = ?", [shard]).fetchall()}
            stats = con.execute("select read, rejected from shard_stats where shard = ?", [shard]).fetchone()
        if stats is None:
            raise dg.Failure(f"shard {shard!r} has not been scanned; materialize shard_matches for it first")
        rej_path = out / "rejected" / f"{shard}.jsonl"
        rejected = {json.loads(l)["line"] for l in rej_path.read_text().splitlines()} if rej_path.exists() else set()
        cutter = None
        if contam_settings.removal not in ("document", "span"):
            raise dg.Failure(f"removal must be 'document' or 'span', got {contam_settings.removal!r}")
        if contam_settings.removal == "span":  # issue 13: cut the matched spans instead of dropping the document
            with contam_db.connect(read_only=True) as con:
                cutter = span_cutter(con, shard, detect_config(contam_settings), contam_settings.content_key)
        res = artifacts.write_mix_shard(contam_settings.pool_path, out, shard, drop, rejected, cut=cutter)
        res["rejected"] = len(rejected)
        with contam_db.connect() as con:
            tables.ensure_schema(con)
            tables.replace_rows(con, "mix_stats", "shard = ?", [shard], pl.DataFrame([res]))
            tables.replace_rows(con, "cuts", "shard = ?", [shard], cutter.frame() if cutter else None)
        for k in totals:
            totals[k] += res[k]
    return dg.MaterializeResult(metadata={f"documents_{k}": v for k, v in totals.items()} | {
        "mix_dir": dg.MetadataValue.path(str(out / "mix"))})


@dg.asset_check(asset=decontaminated_mix, description="mix conservation: written + dropped + cut + rejected = read, "
                "dropped + cut = removed, and the file holds exactly written + cut lines")
def mix_conservation(contam_settings: ContamSettings, contam_db: ContamDB) -> dg.AssetCheckResult:
    problems = []
    with contam_db.connect(read_only=True) as con:
        if not store.table_exists(con, "mix_stats"):
            return dg.AssetCheckResult(passed=True, metadata={"shards_checked": 0})
        rows = store.query_df(con, """select m.shard, m.written, m.dropped, m.rejected, coalesce(m.cut, 0) cut, m.path,
            s.read, s.removed from mix_stats m join shard_stats s using (shard)""").to_dicts()
    for r in rows:  # a cut document (span removal) is written with its matched spans cut out
        if r["written"] + r["dropped"] + r["cut"] + r["rejected"] != r["read"]:
            problems.append({**r, "problem": "counts"})
        elif r["dropped"] + r["cut"] != r["removed"]:
            problems.append({**r, "problem": "dropped + cut != removed (mix is stale; re-materialize it)"})
        elif artifacts.count_lines(Path(r["path"])) != r["written"] + r["cut"]:
            problems.append({**r, "problem": "file line count"})
    return dg.AssetCheckResult(passed=not problems, metadata={
        "shards_checked": len(rows), "violations": len(problems),
        "details": dg.MetadataValue.md(md_table(["shard", "read", "written", "dropped", "rejected", "problem"], problems) if problems else "_none_")})
