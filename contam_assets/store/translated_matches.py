"""Matches of a source item reported for its translations (sources/translation_links.py links the items).

``link_rows`` derives, from every flagged direct match of a source task's own suite, one row of ``matches`` for
each translated item linked to that source item: the same document, spans and scores, the translated task's
task, suite, split, instance and record, and ``via_task`` naming the source task.  Direct rows have
``via_task = ''`` (or null, in a table written before the column existed).  The derived rows are rebuilt with
every refresh of the removals (tables.recompute_removals), so whichever scan wrote the direct rows, the
translated ones follow.  They remove nothing: ``tables.REMOVABLE_SQL`` leaves them out, so a document is
removed (and counted) once, under its direct match, and no reviewer is asked to decide on them.

``exposure_lines`` is the one readable line per translated task the report, the review and the estimate show.
"""

from __future__ import annotations

import duckdb

LINKS_DDL = """
    task VARCHAR, split VARCHAR, instance_index INTEGER, subject VARCHAR,
    source_task VARCHAR, source_split VARCHAR, source_index INTEGER, source_subject VARCHAR, align VARCHAR
"""

DIRECT = "coalesce(via_task, '') = ''"

LANGUAGES = {"en": "English", "de": "German", "es": "Spanish", "fr": "French", "it": "Italian", "pt": "Portuguese",
             "nl": "Dutch", "ru": "Russian", "zh": "Chinese", "ja": "Japanese", "ko": "Korean", "ar": "Arabic",
             "hi": "Hindi", "sw": "Swahili"}


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> list[str]:
    return [r[0] for r in con.execute("select column_name from information_schema.columns where table_name = ? "
                                      "order by ordinal_position", [table]).fetchall()]


def link_rows(con: duckdb.DuckDBPyConnection, where: str = "true", params: list | None = None) -> int:
    """Rebuild the translated rows of ``matches`` for the shards ``where`` selects (inside the caller's
    transaction); the number of rows written."""
    params = list(params or [])
    if "via_task" not in _columns(con, "matches"):
        return 0  # a table before translated rows: nothing to rebuild (ensure_schema adds the column)
    con.execute(f"delete from matches where not {DIRECT} and ({where})", params)
    if not _columns(con, "translation_links") or not con.execute("select count(*) from translation_links").fetchone()[0]:
        return 0
    replaced = {
        "match_id": "md5(m.match_id || chr(31) || l.task)[1:16]",
        "task": "l.task", "suite": "l.task", "split": "l.split", "instance_index": "l.instance_index",
        "subject": "l.subject", "choice_index": "coalesce(i.choice_index, j.choice_index)",
        "is_correct": "coalesce(i.is_correct, j.is_correct)", "record_id": "coalesce(i.record_id, j.record_id)",
        "eval_question": "coalesce(i.question, j.question)", "eval_answer": "coalesce(i.answer, j.answer)",
        "eval_passage": "coalesce(i.passage, j.passage)", "twins": "coalesce(i.twins, j.twins)",
        "via_task": "m.task",
    }
    cols = _columns(con, "matches")
    select = ", ".join(f"{replaced.get(c, 'm.' + c)} as {c}" for c in cols)
    same_item = "{a}.split = l.split and {a}.instance_index = l.instance_index and coalesce({a}.subject, '') = coalesce(l.subject, '')"
    n = con.execute(f"""
        insert into matches ({', '.join(cols)})
        select {select}
        from matches m
        join translation_links l on l.source_task = m.task and l.source_split = m.split
             and l.source_index = m.instance_index and coalesce(l.source_subject, '') = coalesce(m.subject, '')
        left join instances i on i.suite = l.task and {same_item.format(a='i')}
             and coalesce(i.choice_index, -1) = coalesce(m.choice_index, -1)
        left join (select * from instances where suite in (select distinct task from translation_links)
                   qualify row_number() over (partition by suite, split, instance_index, subject
                                              order by is_correct desc nulls last, record_id) = 1) j
             on j.suite = l.task and {same_item.format(a='j')}
        where m.flagged and m.suite = m.task and {DIRECT.replace('via_task', 'm.via_task')}
          and ({where.replace('shard', 'm.shard')})
        """, params).fetchone()
    return int(n[0]) if n else 0


def read_only_view(con: duckdb.DuckDBPyConnection) -> None:
    """On a read-only connection to a database written before ``matches`` had ``via_task`` (which cannot be
    altered), a temporary view of the table with the column empty, so the queries that read it run."""
    cols = _columns(con, "matches")
    if cols and "via_task" not in cols:
        db = con.execute("select current_database()").fetchone()[0]
        con.execute(f"create temp view matches as select *, '' as via_task from \"{db}\".main.matches")


def language_name(code: str | None) -> str:
    return LANGUAGES.get((code or "").split("-")[0].lower(), "")


def exposure(con: duckdb.DuckDBPyConnection) -> list[dict]:
    """Per translated task: its source, its linked items, and how many of them a flagged match of their source
    item exposes (distinct items of the translated rows); empty without links."""
    if not _columns(con, "translation_links") or "via_task" not in _columns(con, "matches"):
        return []
    rows = con.execute(f"""
        select l.task, l.source_task, count(*) items,
               count(*) filter (where exists (
                   select 1 from matches m where m.task = l.task and m.split = l.split and m.flagged
                     and m.instance_index = l.instance_index and coalesce(m.subject, '') = coalesce(l.subject, '')
                     and not {DIRECT.replace('via_task', 'm.via_task')})) exposed,
               (select any_value(language) from tasks t where t.task = l.source_task) language
        from translation_links l group by l.task, l.source_task order by l.task""").fetchall()
    return [dict(zip(("task", "source_task", "items", "exposed", "language"), r)) for r in rows]


def exposure_lines(con: duckdb.DuckDBPyConnection) -> list[str]:
    """One line per translated task: "mgsm_es (translation of gsm8k): 20 of 250 items exposed through English
    copies".  Task names come from specs and are not made inert here: the caller does, for where it shows them."""
    out = []
    for e in exposure(con):
        lang = language_name(e["language"])
        out.append(f"{e['task']} (translation of {e['source_task']}): {e['exposed']:,} of {e['items']:,} items "
                   f"exposed through {lang + ' ' if lang else ''}copies of {e['source_task']}")
    return out
