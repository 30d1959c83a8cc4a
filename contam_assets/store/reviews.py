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


def check_instances(con: duckdb.DuckDBPyConnection, decisions: list[Decision]) -> None:
    """DecisionError naming the first instance decision whose instance is not in the reference set (``instances``),
    with the suites and splits it holds and the nearest name: a typo must not be recorded as a decision on nothing."""
    import difflib

    known = {(s, p) for s, p in con.execute("select distinct suite, split from instances").fetchall()}
    for d in decisions:
        if d.match_id is not None:
            continue
        hit = con.execute("""select 1 from instances where suite = ? and split = ? and instance_index = ?
                             and (? is null or subject = ?) limit 1""",
                          [d.suite, d.split, d.instance_index, d.subject, d.subject]).fetchone()
        if hit is not None:
            continue
        name = "/".join([d.suite, d.split, str(d.instance_index)] + ([d.subject] if d.subject else []))
        if (d.suite, d.split) in known:
            n = con.execute("select max(instance_index) from instances where suite = ? and split = ?",
                            [d.suite, d.split]).fetchone()[0]
            raise DecisionError(f"no instance {name} in the reference set ({d.suite}/{d.split} has indexes 0..{n}"
                                + (", with that subject" if d.subject else "") + ")")
        pairs = sorted(f"{s}/{p}" for s, p in known)
        near = difflib.get_close_matches(f"{d.suite}/{d.split}", pairs, n=1)
        raise DecisionError(f"no instance {name} in the reference set: no suite/split {d.suite}/{d.split}"
                            + (f" (did you mean {near[0]}?)" if near else "")
                            + f"; it holds {', '.join(pairs[:20]) or 'nothing'}" + (" …" if len(pairs) > 20 else ""))


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
