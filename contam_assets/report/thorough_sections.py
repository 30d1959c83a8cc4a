"""Report sections of the thorough preset: why each match was made, twins, span cuts.

Called from report.html.render_report in one place (``thorough_sections``) and from the
match cards (``card_note``); every section says "none" when its table is empty, so a
report of decon's presets shows decon's reasons only.
"""

from __future__ import annotations

import json

import duckdb

from contam_assets.report.inert import html_text

REASONS = {
    "question+answer": "decon's score: the question, and the answer near it",
    "solution_only": "a derived <task>_solution suite: the reference solution alone (held for review)",
    "answer_only": "a derived <task>_answer suite: a long answer alone (held for review)",
    "question_only": "a long question found whole without its answer (held for review)",
    "dump": "one of several items of one task in one document (a benchmark dump)",
    "near_duplicate": "most of the question in order with its answer: words cut or inserted (MinHash LSH, verified)",
    "same_template": "the item with other numbers (GSM-Hard style): reported, neither removed nor held",
}


def _rows(con: duckdb.DuckDBPyConnection, sql: str) -> list[dict]:
    cur = con.execute(sql)
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


def _table(rows: list[dict], cols: list[str]) -> str:
    if not rows:
        return "<p class='muted'>none</p>"
    head = "".join(f"<th>{html_text(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html_text('' if r.get(c) is None else str(r.get(c)))}</td>" for c in cols)
                   + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _has(con: duckdb.DuckDBPyConnection, table: str, column: str | None = None) -> bool:
    q = "select count(*) from information_schema.columns where table_name = ?" + (" and column_name = ?" if column else "")
    return bool(con.execute(q, [table] + ([column] if column else [])).fetchone()[0])


def thorough_sections(con: duckdb.DuckDBPyConnection) -> list[tuple[str, str, str]]:
    """(title, body, anchor) of three report sections: matches per reason, the reference set's twins, every span cut."""
    if _has(con, "matches", "reason"):
        by = _rows(con, """select coalesce(reason, 'question+answer') reason, count(*) matches,
            count(*) filter (where flagged and not needs_review) removing, count(*) filter (where flagged and needs_review) held,
            count(*) filter (where not flagged) stored, count(distinct shard || ':' || line) documents
            from matches where coalesce(via_task, '') = '' group by 1 order by 2 desc""")
        for r in by:
            r["meaning"] = REASONS.get(r["reason"], "")
        reasons = _table(by, ["reason", "matches", "removing", "held", "stored", "documents", "meaning"])
    else:
        reasons = "<p class='muted'>none</p>"
    twins = ("<p>Instances that are near-duplicates of each other (<code>reference_overlap</code>, thorough preset): "
             "a match for one is a match for its twins.</p>")
    if _has(con, "reference_overlap"):
        by = _rows(con, """select task_a, task_b, relation, count(*) pairs from reference_overlap
                           group by all order by pairs desc limit 50""")
        twins += _table(by, ["task_a", "task_b", "relation", "pairs"])
    cut_body = ("<p>With <code>--removal span</code> a removed document is kept with each matched span "
                "and 200 characters either side cut out (GPT-3's policy); every cut is listed.</p>")
    if _has(con, "cuts"):
        cuts = _rows(con, """select shard, line, doc_id, cut_start, cut_end, span_start, span_end, cut_end - cut_start chars,
                             match_ids, removed_text from cuts order by shard, line, cut_start""")
        for c in cuts:
            c["removed_text"] = (c["removed_text"] or "")[:120]
        cut_body += _table(cuts, ["shard", "line", "doc_id", "cut_start", "cut_end", "span_start", "span_end", "chars",
                                  "match_ids", "removed_text"])
    return [("Why each match was made", reasons, "reasons"), ("Twins in the reference set", twins, "twins"),
            ("Span cuts", cut_body, "cuts")]


def card_note(m: dict) -> str:
    """The reason, twins and evidence of one match card (empty for decon's reason without them)."""
    out = []
    if m.get("reason") and m["reason"] != "question+answer":
        out.append(f" · <b>{html_text(m['reason'])}</b>")
    if m.get("twins"):
        names = ", ".join(t["instance"] + f" ({t['relation']})" for t in json.loads(m["twins"]))
        out.append(f" · twins: {html_text(names)}")
    if m.get("evidence"):
        out.append(f" · evidence: {html_text(evidence_text(m['evidence']))}")
    return "".join(out)


def evidence_text(evidence: str) -> str:
    """A paraphrase or translation row's evidence in words (plain text: the caller escapes it)."""
    try:
        ev = json.loads(evidence)
    except (TypeError, ValueError):
        return "unreadable"
    parts = [f"similarity {ev.get('similarity')}", f"rule {ev.get('rule')}"]
    if ev.get("quantities"):
        parts.append("same numbers " + ", ".join(map(str, ev["quantities"])))
    if ev.get("names"):
        parts.append("names " + ", ".join(map(str, ev["names"])))
    if ev.get("signature"):
        parts.append(f"signature {ev['signature']}")
    if ev.get("answer_in_window"):
        parts.append("gold answer in the window")
    if ev.get("rule") == "translation":  # contam_assets/paraphrase/crosslingual.py
        parts.append(f"anchors {', '.join(map(str, ev.get('anchors') or [])) or 'none'} (cover {ev.get('cover')})")
    return "; ".join(parts)
