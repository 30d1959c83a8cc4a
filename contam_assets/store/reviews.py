"""Review decisions: the one way `review_decisions` rows are written (terminal `contam review` and the review page).

A decision names a match (``match_id``) or a whole instance (``SUITE/SPLIT/INDEX[/SUBJECT]``,
every match of it, now and after rescans).  Rows are appended; the latest decision per
match or instance wins (store.tables.REMOVABLE_SQL), and ``contam apply`` turns them into
removals and the mix.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timezone

import duckdb

DECISIONS = ("accept", "reject")


class DecisionError(ValueError):
    """A decision that names no match, a malformed instance, or an unknown verdict."""


@dataclass(frozen=True)
class Decision:
    match_id: str | None
    suite: str
    split: str
    instance_index: int
    subject: str | None
    decision: str


def for_matches(con: duckdb.DuckDBPyConnection, match_ids: list[str], decision: str) -> list[Decision]:
    if decision not in DECISIONS:
        raise DecisionError(f"decision must be one of {', '.join(DECISIONS)}, got {decision!r}")
    out = []
    for mid in match_ids:
        hit = con.execute("select suite, split, instance_index, subject from matches where match_id = ?", [mid]).fetchone()
        if hit is None:
            raise DecisionError(f"no match with id {mid!r}")
        out.append(Decision(mid, *hit, decision))
    return out


def for_instances(specs: list[str], decision: str) -> list[Decision]:
    if decision not in DECISIONS:
        raise DecisionError(f"decision must be one of {', '.join(DECISIONS)}, got {decision!r}")
    out = []
    for spec in specs:
        parts = spec.split("/")
        if len(parts) not in (3, 4) or not parts[2].isdigit():
            raise DecisionError(f"instance must be SUITE/SPLIT/INDEX[/SUBJECT], got {spec!r}")
        out.append(Decision(None, parts[0], parts[1], int(parts[2]), parts[3] if len(parts) == 4 else None, decision))
    return out


def record(con: duckdb.DuckDBPyConnection, decisions: list[Decision], reviewer: str, note: str = "",
           now: datetime | None = None) -> int:
    """Append the decisions (one transaction); returns how many were written."""
    now = now or datetime.now(timezone.utc).replace(tzinfo=None)
    rows = []
    for d in decisions:
        key = f"{d.match_id}|{d.suite}|{d.split}|{d.instance_index}|{d.subject}|{d.decision}|{now.isoformat()}"
        did = hashlib.sha1(key.encode()).hexdigest()[:16]
        rows.append([did, d.match_id, d.suite, d.split, d.instance_index, d.subject, d.decision, reviewer, note, now])
    if rows:
        con.execute("begin transaction")
        try:
            con.executemany("insert into review_decisions values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
            con.execute("commit")
        except Exception:
            con.execute("rollback")
            raise
    return len(rows)
