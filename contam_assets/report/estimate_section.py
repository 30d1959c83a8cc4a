"""The report's section for a pool estimate (`contam estimate`, table pool_estimates): per task and split, the
estimates with their 95 % intervals, what the sample itself holds, and the sample's size."""

from __future__ import annotations

import html

from contam_assets.report.inert import html_text
from contam_assets.store.db import table_exists

MEASURES = [("items_present_share", "items present"), ("copies_per_item", "copies per item"),
            ("removed_documents", "documents removed"), ("held_documents", "documents held for review"),
            ("removed_tokens", "tokens removed")]


def _fmt(measure: str, x: float | None) -> str:
    if x is None:
        return ""
    if measure == "items_present_share":
        return f"{100 * x:.1f} %"
    return f"{x:,.0f}" if abs(x) >= 10 else f"{x:,.2f}"


def estimate_section(con) -> tuple[str, str] | None:
    """(title, body HTML) of the estimate section, or None when the folder holds no estimate."""
    if not table_exists(con, "pool_estimates"):
        return None
    rows = con.execute("""select scope, coalesce(source, ''), task, coalesce(split, ''), measure, estimate, low, high,
                                 observed, items, fraction, seed, units_sampled, units_total,
                                 coalesce(unit, 'shard')
                          from pool_estimates order by scope = 'source', source, task, split nulls first""").fetchall()
    if not rows:
        return None
    fraction, seed, n, N, unit = rows[0][10:15]
    units = "shards" if unit == "shard" else "blocks of shards"
    table: dict[tuple, dict] = {}
    for scope, source, task, split, measure, est, lo, hi, obs, items, *_ in rows:
        r = table.setdefault((scope, source, task, split), {"items": items})
        r[measure] = (est, lo, hi, obs)
    head = "".join(f"<th>{html.escape(label)}</th>" for _, label in MEASURES)
    body = []
    for (scope, source, task, split), r in table.items():
        cells = []
        for m, _ in MEASURES:
            est, lo, hi, obs = r.get(m, (None,) * 4)
            cells.append(f"<td>~{_fmt(m, est)} <span class='muted'>({_fmt(m, lo)}–{_fmt(m, hi)}; sample "
                         f"{_fmt(m, obs)})</span></td>")
        name = f"{source} · {task}" if scope == "source" else f"{task} {split}".strip()
        body.append(f"<tr><td>{html_text(name)}</td><td>{r['items']:,}</td>{''.join(cells)}</tr>")
    design = "whole shards" if unit == "shard" else units
    intro = (f"<p>Estimated for the whole pool from a random sample of {n:,} of its {N:,} {units} (fraction "
             f"{fraction:g}, seed {seed}); each figure with its 95 % interval and what the sample itself holds "
             f"(docs/estimate.md: stratified sample of {design}, Horvitz-Thompson totals, cluster-bootstrap "
             "intervals, Chao2 for the share of items present).</p>")
    return (f"Pool estimate from a {fraction:g} sample ({n:,} of {N:,} {units})",
            f"{intro}<table><tr><th>task / split</th><th>items</th>{head}</tr>{''.join(body)}</table>")
