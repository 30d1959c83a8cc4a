"""Data side: registry -> reference set -> n-gram index -> shard scans -> removals -> report -> mix."""


import base64
import hashlib
import json
import time
from pathlib import Path

import dagster as dg
import polars as pl

from contam_assets.core import artifacts, store, tables
from contam_assets.core.config import DetectConfig, preset
from contam_assets.core.detect import Reference, scan_shard
from contam_assets.core.index import build_index
from contam_assets.core.pool import shard_fingerprint
from contam_assets.core.reference import build_reference_set
from contam_assets.core.registry import TaskSpecError, load_registry, locate
from contam_assets.core.report import histogram_png, render_report
from contam_assets.defs.partitions import shards_partitions
from contam_assets.defs.resources import ContamDB, ContamSettings

GROUP = "decontamination"


def detect_config(settings: ContamSettings) -> DetectConfig:
    try:
        return preset(settings.preset, tokenizer=settings.tokenizer, unescape=settings.unescape)
    except ValueError as exc:
        raise dg.Failure(str(exc)) from exc


def _md_table(rows: list[dict], cols: list[str] | None = None) -> str:
    if not rows:
        return "_none_"
    cols = cols or list(rows[0])
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join(str(r.get(c, "")).replace("|", "\\|").replace("\n", " ")[:120] for c in cols) + " |")
    return "\n".join(out)


def _specs(settings: ContamSettings):
    try:
        return load_registry(settings.tasks_path, settings.task_filter or None)
    except TaskSpecError as exc:
        raise dg.Failure(str(exc)) from exc


@dg.asset(group_name=GROUP, kinds={"python", "duckdb"})
def task_registry(context: dg.AssetExecutionContext, contam_settings: ContamSettings, contam_db: ContamDB) -> dg.MaterializeResult:
    """Benchmark tasks from data/tasks/*.toml and where each split's rows come from."""
    specs = _specs(contam_settings)
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
        "splits": dg.MetadataValue.md(_md_table(df.select("task", "kind", "split", "origin", "files").to_dicts())),
    })


@dg.asset(group_name=GROUP, deps=[task_registry], kinds={"python", "duckdb"})
def reference_set(context: dg.AssetExecutionContext, contam_settings: ContamSettings, contam_db: ContamDB) -> dg.MaterializeResult:
    """Every benchmark instance of every split as reference records (decon's preprocessing + derived suites)."""
    cfg = detect_config(contam_settings)
    t0 = time.perf_counter()
    records, stats = build_reference_set(_specs(contam_settings), contam_settings.benchmarks_path, cfg)
    if records.filter(pl.col("indexed")).height == 0:
        raise dg.Failure("no indexable benchmark instance: check the benchmark folder "
                         f"({contam_settings.benchmarks_path or 'embedded default'}) and the task filter")
    with contam_db.connect() as con:
        tables.ensure_schema(con)
        tables.replace_table(con, "instances", records)
    per_suite = (records.group_by("task", "suite", "split").agg(records=pl.len(), indexed=pl.col("indexed").sum())
                 .sort("task", "suite", "split").to_dicts())
    skipped = records.group_by("skip_reason").len().sort("skip_reason").to_dicts()
    if stats.bad_rows:
        context.log.warning(f"{len(stats.bad_rows)} unreadable benchmark rows, e.g. {stats.bad_rows[:3]}")
    return dg.MaterializeResult(metadata={
        "records": records.height, "indexed": int(records["indexed"].sum()),
        "bad_rows": len(stats.bad_rows), "same_answer_suites": ", ".join(stats.same_answer_suites) or "none",
        "seconds": round(time.perf_counter() - t0, 2),
        "per_suite": dg.MetadataValue.md(_md_table(per_suite)),
        "skip_reasons": dg.MetadataValue.md(_md_table([{"reason": r["skip_reason"] or "(indexed)", "records": r["len"]} for r in skipped])),
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
        artifacts.atomic_write_text(out / "index" / "current.json", json.dumps({"digest": digest}))
    else:
        index = build_index(records, cfg)
        artifacts.save_index(out, digest, records, index)
    seconds = time.perf_counter() - t0
    context.log.info(f"index {digest}: {index.n_records} records, {len(index.q_keys)} question n-grams ({'reused' if reused else 'built'} in {seconds:.1f}s)")
    return dg.MaterializeResult(metadata={
        "digest": digest, "reused": reused, "build_seconds": round(seconds, 2), "records_indexed": index.n_records,
        "question_ngrams": len(index.q_keys), "hot_ngrams": int(index.hot.sum()), "hot_threshold": index.hot_threshold,
        "bytes_per_instance": round(index.nbytes() / max(1, index.n_records), 1),
        "path": dg.MetadataValue.path(str(artifacts.index_dir(out, digest))),
    })


def scan_one_shard(context, settings: ContamSettings, db: ContamDB, shard: str, cfg: DetectConfig, index, ref, digest: str) -> dict:
    path = settings.pool_path / shard
    if not path.is_file():
        raise dg.Failure(f"shard {shard!r} not found in the pool {settings.pool_path}")
    result = scan_shard(path, shard, index, ref, cfg, settings.content_key, settings.preset, digest)
    result.stats["shard_fingerprint"] = shard_fingerprint(path)
    artifacts.write_rejects(settings.out_path, shard, result.rejects)
    with db.connect() as con:
        tables.ensure_schema(con)
        con.execute("begin transaction")
        try:
            con.execute("delete from matches where shard = ?", [shard])
            if result.matches.height:
                con.register("_m", result.matches.to_arrow())
                con.execute(f"insert into matches ({', '.join(result.matches.columns)}) select * from _m")
                con.unregister("_m")
            con.execute("delete from shard_stats where shard = ?", [shard])
            stats_df = pl.DataFrame([result.stats])
            con.register("_s", stats_df.to_arrow())
            con.execute(f"insert into shard_stats ({', '.join(stats_df.columns)}) select * from _s")
            con.unregister("_s")
            con.execute("commit")
        except Exception:
            con.execute("rollback")
            raise
        tables.recompute_removals(con, shard)
        stats = store.query_df(con, "select * from shard_stats where shard = ?", [shard]).to_dicts()[0]
    context.log.info(f"{shard}: read {stats['read']}, removed {stats['removed']}, rejected {stats['rejected']}, "
                     f"candidates {stats['candidates']} in {stats['seconds']}s")
    return {"stats": stats, "matches": result.matches}


@dg.asset(
    group_name=GROUP,
    partitions_def=shards_partitions,
    deps=[ngram_index],
    kinds={"python", "duckdb"},
    backfill_policy=dg.BackfillPolicy.multi_run(max_partitions_per_run=16),
    pool="contam_scan",
)
def shard_matches(context: dg.AssetExecutionContext, contam_settings: ContamSettings, contam_db: ContamDB) -> dg.MaterializeResult:
    """Candidate and flagged matches of one training-pool shard (rows replaced on re-run)."""
    cfg = detect_config(contam_settings)
    try:
        index, records, digest = artifacts.load_index(contam_settings.out_path)
    except FileNotFoundError as exc:
        raise dg.Failure(str(exc)) from exc
    ref = Reference(records)
    totals = {"read": 0, "removed": 0, "rejected": 0, "pending_review": 0, "candidates": 0, "kept": 0, "bytes": 0}
    top: list[dict] = []
    seconds = 0.0
    for shard in context.partition_keys:
        res = scan_one_shard(context, contam_settings, contam_db, shard, cfg, index, ref, digest)
        for k in totals:
            totals[k] += int(res["stats"][k])
        seconds += float(res["stats"]["seconds"])
        m = res["matches"]
        if m.height:
            top += m.sort(["flagged", "score"], descending=True).head(10).select(
                "shard", "line", "suite", "split", "instance_index", "score", "flagged", "needs_review").to_dicts()
    top = sorted(top, key=lambda r: (r["flagged"], r["score"]), reverse=True)[:10]
    mb_s = totals["bytes"] / 1e6 / seconds if seconds else 0.0
    return dg.MaterializeResult(metadata={
        **{f"documents_{k}" if k in ("read", "removed", "rejected", "kept") else k: v for k, v in totals.items()},
        "mb_per_s": round(mb_s, 2), "index_digest": digest,
        "top_matches": dg.MetadataValue.md(_md_table(top)),
    })


@dg.asset_check(asset=shard_matches, description="every document read is kept, removed or rejected (read = kept + removed + rejected)")
def shard_conservation(contam_db: ContamDB) -> dg.AssetCheckResult:
    with contam_db.connect(read_only=True) as con:
        if not store.table_exists(con, "shard_stats"):
            return dg.AssetCheckResult(passed=True, metadata={"shards_checked": 0})
        bad = store.query_df(con, "select shard, read, kept, removed, rejected from shard_stats where read != kept + removed + rejected")
        n = con.execute("select count(*) from shard_stats").fetchone()[0]
    return dg.AssetCheckResult(passed=bad.height == 0, metadata={
        "shards_checked": n, "violations": bad.height, "details": dg.MetadataValue.md(_md_table(bad.to_dicts()))})


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
        "per_task": dg.MetadataValue.md(_md_table(by_task)), "per_source": dg.MetadataValue.md(_md_table(by_source)),
    })


@dg.asset(group_name=GROUP, deps=[removals], kinds={"html"})
def removal_report(context: dg.AssetExecutionContext, contam_settings: ContamSettings, contam_db: ContamDB) -> dg.MaterializeResult:
    """Self-contained HTML page for reviewers: counts, score histogram, top matches side by side."""
    settings = {"pool": str(contam_settings.pool_path), "benchmarks": str(contam_settings.benchmarks_path or "embedded default"),
                "preset": contam_settings.preset, "tokenizer": contam_settings.tokenizer, "unescape": contam_settings.unescape}
    with contam_db.connect(read_only=True) as con:
        page = render_report(con, settings=settings)
        scores = con.execute("select score, flagged from matches").fetchall()
        totals = con.execute("select coalesce(sum(read),0), coalesce(sum(removed),0), coalesce(sum(rejected),0) from shard_stats").fetchone()
    path = contam_settings.out_path / "report.html"
    artifacts.atomic_write_text(path, page)
    md_img = ""
    if scores:
        png = histogram_png([s for s, _ in scores], [f for _, f in scores])
        md_img = f"![score histogram](data:image/png;base64,{base64.b64encode(png).decode()})"
    return dg.MaterializeResult(metadata={
        "path": dg.MetadataValue.path(str(path)), "documents_read": totals[0], "documents_removed": totals[1],
        "documents_rejected": totals[2], "matches": len(scores), "score_histogram": dg.MetadataValue.md(md_img or "_no matches_"),
    })


@dg.asset(group_name=GROUP, partitions_def=shards_partitions, deps=[removals], kinds={"python"},
          backfill_policy=dg.BackfillPolicy.multi_run(max_partitions_per_run=16))
def decontaminated_mix(context: dg.AssetExecutionContext, contam_settings: ContamSettings, contam_db: ContamDB) -> dg.MaterializeResult:
    """The shard without removed documents (same format), written atomically under <out>/mix/."""
    out = contam_settings.out_path
    totals = {"written": 0, "dropped": 0, "rejected": 0}
    for shard in context.partition_keys:
        with contam_db.connect(read_only=True) as con:
            drop = {r[0] for r in con.execute("select line from removals where shard = ?", [shard]).fetchall()}
            stats = con.execute("select read, rejected from shard_stats where shard = ?", [shard]).fetchone()
        if stats is None:
            raise dg.Failure(f"shard {shard!r} has not been scanned; materialize shard_matches for it first")
        rej_path = out / "rejected" / f"{shard}.jsonl"
        rejected = {json.loads(l)["line"] for l in rej_path.read_text().splitlines()} if rej_path.exists() else set()
        res = artifacts.write_mix_shard(contam_settings.pool_path, out, shard, drop, rejected)
        res["rejected"] = len(rejected)
        with contam_db.connect() as con:
            tables.ensure_schema(con)
            tables.replace_rows(con, "mix_stats", "shard = ?", [shard], pl.DataFrame([res]))
        for k in totals:
            totals[k] += res[k]
    return dg.MaterializeResult(metadata={f"documents_{k}": v for k, v in totals.items()} | {
        "mix_dir": dg.MetadataValue.path(str(out / "mix"))})


@dg.asset_check(asset=decontaminated_mix, description="mix conservation: written + dropped + rejected = read, and the file holds exactly `written` lines")
def mix_conservation(contam_settings: ContamSettings, contam_db: ContamDB) -> dg.AssetCheckResult:
    problems = []
    with contam_db.connect(read_only=True) as con:
        if not store.table_exists(con, "mix_stats"):
            return dg.AssetCheckResult(passed=True, metadata={"shards_checked": 0})
        rows = store.query_df(con, """select m.shard, m.written, m.dropped, m.rejected, m.path, s.read, s.removed
            from mix_stats m join shard_stats s using (shard)""").to_dicts()
    for r in rows:
        if r["written"] + r["dropped"] + r["rejected"] != r["read"]:
            problems.append({**r, "problem": "counts"})
        elif r["dropped"] != r["removed"]:
            problems.append({**r, "problem": "dropped != removed (mix is stale; re-materialize it)"})
        elif artifacts.count_lines(Path(r["path"])) != r["written"]:
            problems.append({**r, "problem": "file line count"})
    return dg.AssetCheckResult(passed=not problems, metadata={
        "shards_checked": len(rows), "violations": len(problems),
        "details": dg.MetadataValue.md(_md_table(problems, ["shard", "read", "written", "dropped", "rejected", "problem"]) if problems else "_none_")})
