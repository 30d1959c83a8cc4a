"""The estimate of a pool from the match tables of its sampled units (estimate.json, table `pool_estimates`).

The sampled units were scanned by the same scan as a full run: whole shards into OUT's own tables (their rows are
real rows of `matches`, `removals`, `shard_stats`), blocks of shards into the tables of OUT/estimate_sample/, one
table "shard" per block (estimate/blocks.py).  Here they are read back per unit (the `shard` column holds the
unit's key) and handed to `estimators`.  What counts:

- removed documents of a task: documents with a match of the task that removes them (tables.REMOVES);
- held documents: documents with a flagged match of the task waiting for a review, not removed;
- tokens: the documents' tokens (matches.doc_tokens);
- copies of an item: documents holding an item of the task's own suites (not derived suites) with a
  match that removes them; copies per item divides by the task's indexed items (the items the detector
  can find at all);
- items present: those items found in at least one document.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import polars as pl

from contam_assets import store
from contam_assets.estimate.design import Sample, design_text
from contam_assets.estimate.estimators import REPLICATES, Design, items_present, rao_wu_weights, total
from contam_assets.store.files import atomic_write_text
from contam_assets.store.tables import REMOVABLE_SQL, REMOVES
from contam_assets.store.translated_matches import language_name

TABLE = "pool_estimates"
TABLE_SCHEMA = {TABLE: """
    scope VARCHAR, source VARCHAR, task VARCHAR, split VARCHAR, measure VARCHAR, estimate DOUBLE, low DOUBLE,
    high DOUBLE, observed DOUBLE, items BIGINT, fraction DOUBLE, seed BIGINT, units_sampled BIGINT, units_total BIGINT,
    estimated_at TIMESTAMP, unit VARCHAR
"""}
MEASURES = ("removed_documents", "held_documents", "removed_tokens", "held_tokens", "copies_per_item",
            "items_present_share")


def _docs(con, shards: list[str]) -> pl.DataFrame:
    """One row per (shard, line, task, split) with a flagged match: whether it removes, waits, its tokens."""
    return store.query_df(con, f"""
        select r.shard, r.line, any_value(coalesce(r.source, '(none)')) source, r.task, r.split,
               bool_or({REMOVES}) removing,
               bool_or(r.flagged and r.needs_review and r.decision is null) pending,
               max(coalesce(r.doc_tokens, 0)) tokens,
               bool_or(exists (select 1 from removals x where x.shard = r.shard and x.line = r.line)) removed_any
        from ({REMOVABLE_SQL}) r
        where r.flagged and r.shard in (select unnest(?::varchar[]))
        group by r.shard, r.line, r.task, r.split""", [shards])


def _items(con, shards: list[str]) -> pl.DataFrame:
    """Distinct (document, item) pairs: an item of a task's own suites in a document it removes."""
    return store.query_df(con, f"""
        select distinct r.shard, r.line, coalesce(r.source, '(none)') source, r.task, r.split,
               r.suite || chr(31) || r.instance_index || chr(31) || coalesce(r.subject, '') item
        from ({REMOVABLE_SQL}) r join instances i on i.record_id = r.record_id
        where not coalesce(i.derived, false) and ({REMOVES})
          and r.shard in (select unnest(?::varchar[]))""", [shards])


def _universe(con) -> pl.DataFrame:
    """Every indexed item of a task's own suites: (task, split, item)."""
    return store.query_df(con, """
        select task, split, suite || chr(31) || instance_index || chr(31) || coalesce(subject, '') item
        from instances where not coalesce(derived, false)
        group by task, split, suite, instance_index, subject having bool_or(indexed)""")


def _per_unit(df: pl.DataFrame, shards: list[str], value: pl.Expr) -> np.ndarray:
    pos = {s: i for i, s in enumerate(shards)}
    out = np.zeros(len(shards))
    if df.height:
        for s, v in df.group_by("shard").agg(value.alias("v")).iter_rows():
            out[pos[s]] = v
    return out


def _group(docs: pl.DataFrame, items: pl.DataFrame, universe: list[str], shards: list[str], design: Design,
           boot: np.ndarray, token_floor: float, replicates: int, seed: int) -> dict:
    removed = docs.filter(pl.col("removing")).unique(["shard", "line"])
    held = docs.filter(pl.col("pending") & ~pl.col("removed_any")).unique(["shard", "line"])
    pairs = items.filter(pl.col("item").is_in(universe)).unique(["shard", "line", "item"])
    n_items = len(universe)
    ids = {it: i for i, it in enumerate(universe)}
    incidence = [np.empty(0, dtype=np.int64) for _ in shards]
    pos = {s: i for i, s in enumerate(shards)}
    for (s,), g in pairs.unique(["shard", "item"]).group_by("shard"):
        incidence[pos[s]] = np.array(sorted(ids[i] for i in g["item"]), dtype=np.int64)
    count, tokens = pl.len(), pl.col("tokens").sum()
    y_copies = _per_unit(pairs, shards, pl.len())
    copies = total(design, y_copies, boot)
    share = items_present(design, incidence, n_items, replicates, seed, copies_high=copies.high)
    out = {
        "removed_documents": total(design, _per_unit(removed, shards, count), boot),
        "held_documents": total(design, _per_unit(held, shards, count), boot),
        "removed_tokens": total(design, _per_unit(removed, shards, tokens), boot, floor=token_floor),
        "held_tokens": total(design, _per_unit(held, shards, tokens), boot, floor=token_floor),
        "copies_per_item": copies.scaled(1.0 / n_items) if n_items else copies.scaled(0.0),
        "items_present_share": share.scaled(1.0 / n_items) if n_items else share,
    }
    seen = np.unique(np.concatenate(incidence)).size if incidence else 0
    observed = {"removed_documents": removed.height, "held_documents": held.height,
                "removed_tokens": int(removed["tokens"].sum()) if removed.height else 0,
                "held_tokens": int(held["tokens"].sum()) if held.height else 0,
                "copies_per_item": float(y_copies.sum()) / n_items if n_items else 0.0,
                "items_present_share": seen / n_items if n_items else 0.0}
    return {"estimates": out, "observed": observed, "items": n_items}


def estimate(con, sample: Sample, by_source: bool = False, tasks: list[str] | None = None,
             replicates: int = REPLICATES) -> dict:
    """The estimate.json object of ``sample`` from the tables (its shards scanned); see docs/estimate.md."""
    stats = store.query_df(con, """select shard, read, bytes, tokens, coalesce(status, 'ok') status from shard_stats
                                   where shard in (select unnest(?::varchar[]))""", [[u.key for u in sample.units]])
    scanned = {r["shard"]: r for r in stats.to_dicts() if r["status"] != "failed"}
    units = [u for u in sample.units if u.key in scanned]
    missing = [u.key for u in sample.units if u.key not in scanned]
    pool_units = {s: n for s, n in sample.pool_units.items() if any(u.stratum == s for u in units)}
    unsampled = sorted(set(sample.pool_units) - set(pool_units))
    shards = [u.key for u in units]
    design = Design.of([u.stratum for u in units], pool_units)
    boot = rao_wu_weights(design, replicates, sample.seed)
    read = np.array([float(scanned[s]["read"] or 0) for s in shards])
    tok = np.array([float(scanned[s]["tokens"] or 0) for s in shards])
    token_floor = max(1.0, float(tok.sum() / read.sum())) if read.sum() else 1.0
    docs, items, universe = _docs(con, shards), _items(con, shards), _universe(con)
    if tasks:
        universe = universe.filter(pl.col("task").is_in(tasks))
    result = {
        "fraction": sample.fraction, "seed": sample.seed, "design": design_text(sample.unit, sample.block_bytes),
        "unit": sample.unit, **({"block_bytes": sample.block_bytes} if sample.unit == "block" else {}),
        "sampled": {"units": len(units), "documents": int(read.sum()), "bytes": int(sum(u.bytes for u in units))},
        "pool": {"units": design.N, "bytes": sample.pool_bytes,
                 "documents": total(design, read, boot).to_dict(0)},
        "not_scanned": missing, "strata_without_a_scanned_unit": unsampled,
        "estimated_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "tasks": {},
    }
    names = sorted(set(universe["task"].to_list()))

    def one(d: pl.DataFrame, it: pl.DataFrame, uni: list[str]) -> dict:
        g = _group(d, it, uni, shards, design, boot, token_floor, replicates, sample.seed)
        body = {m: g["estimates"][m].to_dict() for m in MEASURES}
        return {**body, "items": g["items"], "observed": g["observed"]}

    for task in names:
        d, it = docs.filter(pl.col("task") == task), items.filter(pl.col("task") == task)
        u = universe.filter(pl.col("task") == task)
        entry = one(d, it, u["item"].to_list())
        entry["splits"] = {}
        for split in sorted(set(u["split"].to_list())):
            entry["splits"][split] = one(d.filter(pl.col("split") == split), it.filter(pl.col("split") == split),
                                         u.filter(pl.col("split") == split)["item"].to_list())
        result["tasks"][task] = entry
    translated = _translations(con)
    for task in sorted(set(translated["task"].to_list())):  # items exposed through the source they translate
        g = translated.filter(pl.col("task") == task)
        src, keys = g["source_task"][0], g["item"].to_list()
        it = items.filter((pl.col("task") == src) & pl.col("item").is_in(keys))
        d = docs.filter(pl.col("task") == src).join(it.select("shard", "line").unique(), on=["shard", "line"])
        e = one(d, it, keys)
        result.setdefault("translations", {})[task] = {"source": src, "language": g["language"][0], "items": len(keys),
                                                       "items_present_share": e["items_present_share"]}
    if by_source:
        result["sources"] = {}
        for source in sorted(set(docs["source"].to_list())):
            result["sources"][source] = {
                task: one(docs.filter((pl.col("task") == task) & (pl.col("source") == source)),
                          items.filter((pl.col("task") == task) & (pl.col("source") == source)),
                          universe.filter(pl.col("task") == task)["item"].to_list())
                for task in names}
    return result


def _translations(con) -> pl.DataFrame:
    """(task, source_task, language of the source, source item) of every translated item
    (sources/translation_links.py); empty without links."""
    schema = {"task": pl.Utf8, "source_task": pl.Utf8, "language": pl.Utf8, "item": pl.Utf8}
    if not store.table_exists(con, "translation_links"):
        return pl.DataFrame(schema=schema)
    return store.query_df(con, """
        select l.task, l.source_task, (select any_value(language) from tasks t where t.task = l.source_task) language,
               l.source_task || chr(31) || l.source_index || chr(31) || coalesce(l.source_subject, '') item
        from translation_links l""").cast(schema)


def table_rows(result: dict) -> pl.DataFrame:
    """The long rows of `pool_estimates`: one per scope, source, task, split and measure."""
    at = datetime.now(timezone.utc).replace(tzinfo=None)
    common = dict(fraction=result["fraction"], seed=result["seed"], units_sampled=result["sampled"]["units"],
                  units_total=result["pool"]["units"], estimated_at=at,
                  unit=result.get("unit", "shard"))
    rows = []

    def add(scope, source, task, split, entry):
        for m in MEASURES:
            rows.append(dict(scope=scope, source=source, task=task, split=split, measure=m, **entry[m],
                             observed=float(entry["observed"][m]), items=entry["items"], **common))

    for task, entry in result["tasks"].items():
        add("task", None, task, None, entry)
        for split, e in entry["splits"].items():
            add("split", None, task, split, e)
    for source, per_task in result.get("sources", {}).items():
        for task, e in per_task.items():
            add("source", source, task, None, e)
    schema = {"scope": pl.Utf8, "source": pl.Utf8, "task": pl.Utf8, "split": pl.Utf8, "measure": pl.Utf8,
              "estimate": pl.Float64, "low": pl.Float64, "high": pl.Float64, "observed": pl.Float64, "items": pl.Int64,
              "fraction": pl.Float64, "seed": pl.Int64, "units_sampled": pl.Int64, "units_total": pl.Int64,
              "estimated_at": pl.Datetime("us"), "unit": pl.Utf8}
    return pl.DataFrame(rows, schema=schema)


def write(con, out_dir: Path, result: dict) -> pl.DataFrame:
    """estimate.json, the `pool_estimates` table (replaced whole) and its Parquet export
    (OUT/tables/pool_estimates/part-0.parquet, store/export.py)."""
    from contam_assets.store import tables
    from contam_assets.store.export import export_tables

    df = table_rows(result)
    tables.ensure_schema(con, TABLE_SCHEMA)
    tables.replace_table(con, TABLE, df)
    atomic_write_text(Path(out_dir) / "estimate.json", json.dumps(result, indent=1))
    export_tables(con, out_dir, (TABLE,))
    return df


def _num(x: float) -> str:
    return f"{x:,.0f}" if x >= 10 or x == int(x) else f"{x:.1f}"


def sentences(result: dict) -> list[str]:
    """One plain sentence per task and split, in the words of seed 003 (task names as the specs give them: a
    caller that prints them makes them inert for its display, report/inert.py)."""
    out = []
    for task, entry in result["tasks"].items():
        for split, e in entry["splits"].items():
            s, c, r = e["items_present_share"], e["copies_per_item"], e["removed_documents"]
            out.append(f"{task} {split}: ~{100 * s['estimate']:.0f} % of items present "
                       f"({100 * s['low']:.0f}–{100 * s['high']:.0f} %), ~{_num(c['estimate'])} copies per item "
                       f"({_num(c['low'])}–{_num(c['high'])}), ~{_num(r['estimate'])} documents removed "
                       f"({_num(r['low'])}–{_num(r['high'])})")
    for task, e in result.get("translations", {}).items():
        s, lang = e["items_present_share"], language_name(e["language"])
        out.append(f"{task} (translation of {e['source']}): ~{100 * s['estimate']:.0f} % of its {e['items']:,} items "
                   f"exposed through {lang + ' ' if lang else ''}copies of {e['source']} "
                   f"({100 * s['low']:.0f}–{100 * s['high']:.0f} %)")
    return out
