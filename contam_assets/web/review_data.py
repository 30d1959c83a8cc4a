"""What the review page reads: matches filtered by task, suite, reason, source, shard, score and status.

Filters work over the columns the ``matches`` table has: a column that is not there
(older tables have no ``reason``) is offered only where a default stands in for it —
a missing ``reason`` reads as ``question+answer``, the only reason decon's rules flag
for.  Every row comes with the review state it is in: the latest decision on the match
or its instance (store.tables.REMOVABLE_SQL) and whether its document is removed now.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import duckdb

from contam_assets.store.tables import REMOVABLE_SQL
from contam_assets.store.translated_matches import DIRECT

DEFAULT_REASON = "question+answer"
FILTER_COLUMNS = ("task", "suite", "reason", "source", "shard")
STATUSES = {
    "": "any",
    "flagged": "flagged",
    "pending": "waiting for a decision (document kept)",
    "decided": "decided",
    "near_miss": "stored, not flagged",
}
PAGE_SIZE = 20


@dataclass
class Filters:
    task: str = ""
    suite: str = ""
    reason: str = ""
    source: str = ""
    shard: str = ""
    min_score: float | None = None
    max_score: float | None = None
    status: str = ""

    def query(self) -> dict:
        """Non-empty filters as query parameters."""
        return {k: v for k, v in asdict(self).items() if v not in ("", None)}

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


def match_columns(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {r[0] for r in con.execute(
        "select column_name from information_schema.columns where table_name = 'matches'").fetchall()}


def _expr(column: str, columns: set[str]) -> str:
    if column == "reason":
        return f"coalesce(r.reason, '{DEFAULT_REASON}')" if "reason" in columns else f"'{DEFAULT_REASON}'"
    return f"coalesce(r.{column}, '(none)')" if column == "source" else f"r.{column}"


def _base() -> str:
    return f"""select r.*, exists (select 1 from removals x where x.shard = r.shard and x.line = r.line) as removed
               from ({REMOVABLE_SQL}) r"""


def filter_options(con: duckdb.DuckDBPyConnection) -> dict[str, list[str]]:
    """Distinct values per filter column (a missing reason column offers its default only)."""
    columns = match_columns(con)
    out = {}
    for c in FILTER_COLUMNS:
        rows = con.execute(f"select distinct {_expr(c, columns)} as v from ({REMOVABLE_SQL}) r order by 1").fetchall()
        out[c] = [r[0] for r in rows if r[0] is not None]
    return out


def _where(f: Filters, columns: set[str]) -> tuple[str, list]:
    clauses, params = ["true"], []
    for c in FILTER_COLUMNS:
        value = getattr(f, c)
        if value:
            clauses.append(f"{_expr(c, columns)} = ?")
            params.append(value)
    if f.min_score is not None:
        clauses.append("r.score >= ?")
        params.append(f.min_score)
    if f.max_score is not None:
        clauses.append("r.score <= ?")
        params.append(f.max_score)
    if f.status == "flagged":
        clauses.append("r.flagged")
    elif f.status == "pending":
        clauses.append("r.flagged and r.needs_review and r.decision is null and not r.removed")
    elif f.status == "decided":
        clauses.append("r.decision is not null")
    elif f.status == "near_miss":
        clauses.append("not r.flagged")
    elif f.status:
        raise ValueError(f"status must be one of {', '.join(k for k in STATUSES if k)}, got {f.status!r}")
    return " and ".join(clauses), params


def query_matches(con: duckdb.DuckDBPyConnection, f: Filters, page: int = 1, page_size: int = PAGE_SIZE) -> tuple[list[dict], dict]:
    """One page of matching rows (best first) and the counts of the whole selection."""
    columns = match_columns(con)
    where, params = _where(f, columns)
    base = f"select *, {_expr('reason', columns)} as why_reason from ({_base()}) r"
    counts = con.execute(f"""select count(*), count(distinct shard || ':' || line),
            count(*) filter (where flagged and needs_review and decision is null and not removed),
            count(distinct case when removed then shard || ':' || line end)
            from ({base}) r where {where}""", params).fetchone()
    offset = max(0, (page - 1) * page_size)
    cur = con.execute(f"""select * from ({base}) r where {where}
            order by r.flagged desc, (r.flagged and r.needs_review and r.decision is null and not r.removed) desc, r.score desc,
                     r.shard, r.line,
                     r.match_id limit ? offset ?""", params + [page_size, offset])
    names = [d[0] for d in cur.description]
    rows = [dict(zip(names, row)) for row in cur.fetchall()]
    return rows, {"matches": counts[0], "documents": counts[1], "pending_matches": counts[2], "removed_documents": counts[3],
                  "page": page, "pages": max(1, -(-counts[0] // page_size))}


def totals(con: duckdb.DuckDBPyConnection) -> dict:
    """Counts of the whole output folder, in documents (shard_stats) and matches."""
    row = con.execute("""select coalesce(sum(read), 0), coalesce(sum(removed), 0), coalesce(sum(pending_review), 0)
                         from shard_stats""").fetchone()
    m = con.execute(f"select count(*), count(*) filter (where flagged) from matches where {DIRECT}").fetchone()
    d = con.execute("select count(*) from review_decisions").fetchone()[0]
    return {"documents_read": row[0], "documents_removed": row[1], "documents_pending_review": row[2],
            "matches": m[0], "flagged_matches": m[1], "decisions": d}
