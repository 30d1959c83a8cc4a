"""Model-side DuckDB tables (contract in docs/tables.md).

``probe_metrics`` and ``probe_items`` are long tables; a probe's rows for one
checkpoint are replaced in one transaction (delete, then insert), so a re-run
never duplicates rows.  Metrics without a value (None) are not stored.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping

from contam_assets.model.checkpoint import CheckpointInfo

DDL = (
    """create table if not exists checkpoints (
        checkpoint varchar, path varchar, experiment varchar, stage varchar,
        step bigint, is_base boolean, recipe varchar, added_at timestamp)""",
    """create table if not exists probe_metrics (
        checkpoint varchar, probe varchar, metric varchar, value double, computed_at timestamp)""",
    """create table if not exists probe_items (
        checkpoint varchar, probe varchar, dataset varchar, item varchar, metric varchar,
        value double, computed_at timestamp)""",
    """create table if not exists probe_correlations (
        scope varchar, experiment varchar, n bigint, spearman double, spearman_p double, kendall double,
        kendall_p double, note varchar, computed_at timestamp)""",
)


def ensure_tables(con) -> None:
    for ddl in DDL:
        con.execute(ddl)


def replace_correlations(con, results) -> None:
    """Replace ``probe_correlations`` whole (recreated: older tables lack ``scope``)."""
    con.execute("begin transaction")
    try:
        con.execute("drop table if exists probe_correlations")
        con.execute(DDL[3])
        for r in results:
            con.execute(
                "insert into probe_correlations values (?, ?, ?, ?, ?, ?, ?, ?, now())",
                [r.scope, r.experiment, r.n, r.spearman, r.spearman_p, r.kendall, r.kendall_p, r.note],
            )
        con.execute("commit")
    except Exception:
        con.execute("rollback")
        raise


def _finite(v) -> bool:
    return v is not None and math.isfinite(float(v))


def upsert_checkpoint(con, info: CheckpointInfo) -> None:
    ensure_tables(con)
    con.execute("begin transaction")
    try:
        con.execute("delete from checkpoints where checkpoint = ?", [info.key])
        con.execute(
            "insert into checkpoints values (?, ?, ?, ?, ?, ?, ?, now())",
            [info.key, info.path, info.experiment, info.stage, info.step, info.is_base, info.recipe],
        )
        con.execute("commit")
    except Exception:
        con.execute("rollback")
        raise


def replace_probe_rows(
    con,
    checkpoint: str,
    probe: str,
    metrics: Mapping[str, float | None],
    items: Iterable[tuple[str, str, str, float | None]] = (),
) -> tuple[int, int]:
    """Replace the probe's metrics and per-item rows ``(dataset, item, metric, value)``; returns the counts."""
    ensure_tables(con)
    metric_rows = [(m, float(v)) for m, v in metrics.items() if _finite(v)]
    item_rows = [(d, i, m, float(v)) for d, i, m, v in items if _finite(v)]
    con.execute("begin transaction")
    try:
        for table in ("probe_metrics", "probe_items"):
            con.execute(f"delete from {table} where checkpoint = ? and probe = ?", [checkpoint, probe])
        # Columns go in as lists and come out row by row through unnest: fast for many rows.
        if metric_rows:
            con.execute(
                "insert into probe_metrics select ?, ?, unnest(?::varchar[]), unnest(?::double[]), now()",
                [checkpoint, probe, *map(list, zip(*metric_rows))],
            )
        if item_rows:
            con.execute(
                "insert into probe_items select ?, ?, unnest(?::varchar[]), unnest(?::varchar[]), "
                "unnest(?::varchar[]), unnest(?::double[]), now()",
                [checkpoint, probe, *map(list, zip(*item_rows))],
            )
        con.execute("commit")
    except Exception:
        con.execute("rollback")
        raise
    return len(metric_rows), len(item_rows)
