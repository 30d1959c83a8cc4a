"""DuckDB tables of the data side, and the writes that keep re-runs idempotent."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import duckdb
import polars as pl

from contam_assets.store.translated_matches import LINKS_DDL, link_rows

SCHEMA = {
    "tasks": """
        task VARCHAR, kind VARCHAR, language VARCHAR, split VARCHAR, origin VARCHAR, files INTEGER,
        spec_path VARCHAR, spec_hash VARCHAR
    """,
    "instances": """
        record_id INTEGER, task VARCHAR, suite VARCHAR, split VARCHAR, instance_index INTEGER, subject VARCHAR,
        choice_index INTEGER, is_correct BOOLEAN, kind VARCHAR, language VARCHAR, derived BOOLEAN,
        question VARCHAR, answer VARCHAR, passage VARCHAR, fingerprint VARCHAR, indexed BOOLEAN,
        skip_reason VARCHAR, source_file VARCHAR, source_line INTEGER, eval_key VARCHAR, eval_doc_id BIGINT,
        twins VARCHAR
    """,
    "matches": """
        match_id VARCHAR, shard VARCHAR, line INTEGER, doc_id VARCHAR, source VARCHAR,
        task VARCHAR, suite VARCHAR, split VARCHAR, instance_index INTEGER, subject VARCHAR,
        choice_index INTEGER, is_correct BOOLEAN, record_id INTEGER,
        score DOUBLE, required_score DOUBLE, flagged BOOLEAN, needs_review BOOLEAN,
        question_overlap DOUBLE, answer_overlap DOUBLE, passage_overlap DOUBLE,
        question_start INTEGER, question_end INTEGER, answer_start INTEGER, answer_end INTEGER,
        passage_start INTEGER, passage_end INTEGER, n_matched_ngrams INTEGER, doc_tokens INTEGER, doc_chars BIGINT,
        training_text VARCHAR, training_segments VARCHAR,
        eval_question VARCHAR, eval_answer VARCHAR, eval_passage VARCHAR, preset VARCHAR,
        contamination_score DOUBLE, answer_spans VARCHAR, cluster_end INTEGER,
        reason VARCHAR, twins VARCHAR, evidence VARCHAR, via_task VARCHAR
    """,
    "shard_stats": """
        shard VARCHAR, read BIGINT, scanned BIGINT, too_short BIGINT, rejected BIGINT,
        flagged BIGINT, pending_review BIGINT, removed BIGINT, kept BIGINT,
        bytes BIGINT, tokens BIGINT, candidates BIGINT, seconds DOUBLE, shard_fingerprint VARCHAR,
        reject_reasons VARCHAR, preset VARCHAR, index_digest VARCHAR,
        status VARCHAR, status_reason VARCHAR, error_offset BIGINT, error_line BIGINT, prefiltered BIGINT
    """,
    "shard_errors": """
        shard VARCHAR, step VARCHAR, message VARCHAR, recorded_at TIMESTAMP
    """,
    "shard_decisions": """
        shard VARCHAR, shard_fingerprint VARCHAR, decision VARCHAR, reviewer VARCHAR, note VARCHAR, decided_at TIMESTAMP
    """,
    "pool_skips": """
        path VARCHAR, reason VARCHAR, listed_at TIMESTAMP
    """,
    "retired_shards": """
        shard VARCHAR, retired_at TIMESTAMP, matches BIGINT, removals BIGINT, files VARCHAR
    """,
    "review_decisions": """
        decision_id VARCHAR, match_id VARCHAR, suite VARCHAR, split VARCHAR, instance_index INTEGER,
        subject VARCHAR, decision VARCHAR, reviewer VARCHAR, note VARCHAR, decided_at TIMESTAMP
    """,
    "removals": """
        shard VARCHAR, line INTEGER, doc_id VARCHAR, source VARCHAR, n_chars BIGINT, reason VARCHAR
    """,
    "detect_settings": """
        name VARCHAR, value VARCHAR, decon_name VARCHAR, origin VARCHAR
    """,
    "mix_stats": """
        shard VARCHAR, written BIGINT, dropped BIGINT, rejected BIGINT, path VARCHAR, status VARCHAR, cut BIGINT
    """,
    # thorough preset: near-duplicate pairs of the reference set itself (detector/overlap.py)
    "reference_overlap": """
        task_a VARCHAR, split_a VARCHAR, instance_a INTEGER, subject_a VARCHAR,
        task_b VARCHAR, split_b VARCHAR, instance_b INTEGER, subject_b VARCHAR,
        relation VARCHAR, jaccard DOUBLE, masked_jaccard DOUBLE
    """,
    # what the instances table was built from (registry.inputs_digest): an unchanged one is kept, not rebuilt
    "reference_state": """
        inputs VARCHAR, records BIGINT, bad_rows BIGINT, bad_row_examples VARCHAR, same_answer_suites VARCHAR,
        seconds DOUBLE, built_at TIMESTAMP
    """,
    # per task and split: instances indexed and skipped by reason (detector/skips.py; no silent drops)
    "reference_summary": """
        task VARCHAR, split VARCHAR, instances BIGINT, indexed BIGINT, skipped BIGINT, reasons VARCHAR, notes VARCHAR,
        short_covered BIGINT
    """,
    # a translated task's items and the source items they translate (sources/translation_links.py)
    "translation_links": LINKS_DDL,
    # `--removal span`: every cut made in a kept document (store/cuts.py)
    "cuts": """
        shard VARCHAR, line INTEGER, doc_id VARCHAR, cut_start BIGINT, cut_end BIGINT,
        span_start BIGINT, span_end BIGINT, match_ids VARCHAR, removed_text VARCHAR
    """,
}

MATCH_COLUMNS = [c.strip().split()[0] for c in SCHEMA["matches"].split(",")]
STATS_COLUMNS = [c.strip().split()[0] for c in SCHEMA["shard_stats"].split(",")]


def columns_of(ddl: str) -> list[tuple[str, str]]:
    """(name, type) of each column in a SCHEMA entry."""
    out = []
    for c in ddl.split(","):
        name, _, kind = c.strip().partition(" ")
        out.append((name, kind.strip()))
    return out


def ensure_schema(con: duckdb.DuckDBPyConnection, schema: dict[str, str] | None = None) -> None:
    """Create missing tables, and add the columns a newer version appended to existing ones."""
    for name, cols in (schema or SCHEMA).items():
        con.execute(f"create table if not exists {name} ({cols})")
        have = {r[0] for r in con.execute(
            "select column_name from information_schema.columns where table_name = ?", [name]).fetchall()}
        for col, kind in columns_of(cols):
            if col not in have:
                con.execute(f"alter table {name} add column {col} {kind}")


def replace_many(con: duckdb.DuckDBPyConnection, changes: list[tuple[str, str, list, pl.DataFrame | Path | None]]) -> None:
    """For each (table, where, params, df): delete the rows matching `where`, insert `df`; all in one transaction.
    ``df`` may be the path of a Parquet file, which DuckDB reads a row group at a time (columns by name)."""
    con.execute("begin transaction")
    try:
        for table, where, params, df in changes:
            con.execute(f"delete from {table} where {where}", params)
            if isinstance(df, Path):
                _insert_parquet(con, table, df)
            elif df is not None and df.height:
                con.register("_incoming", df.to_arrow())
                cols = ", ".join(df.columns)
                con.execute(f"insert into {table} ({cols}) select {cols} from _incoming")
                con.unregister("_incoming")
        con.execute("commit")
    except Exception:
        con.execute("rollback")
        raise


FILE_INSERT_MEMORY = "512MB"  # DuckDB's memory while it inserts a Parquet file (its default: 80 % of the machine's)
EXPORT_MEMORY = "512MB"  # DuckDB's memory while it writes a table as Parquet (store/export.py)


@contextmanager
def memory_held(con: duckdb.DuckDBPyConnection, limit: str):
    """DuckDB's memory limit set to ``limit`` meanwhile, the one before put back after (`restore_memory_limit`)."""
    before = con.execute("select current_setting('memory_limit')").fetchone()[0]
    con.execute(f"set memory_limit = '{limit}'")
    try:
        yield
    finally:
        restore_memory_limit(con, before)


def _insert_parquet(con: duckdb.DuckDBPyConnection, table: str, path: Path) -> None:
    """The rows of a Parquet file inserted, DuckDB's memory bounded meanwhile (the written blocks spill to its file)."""
    with memory_held(con, FILE_INSERT_MEMORY):
        con.execute(f"insert into {table} by name select * from read_parquet(?)", [str(path)])


def restore_memory_limit(con: duckdb.DuckDBPyConnection, shown: str) -> None:
    """Put back the memory limit ``current_setting`` showed before.  It shows one decimal, cut, not rounded
    ('3GB' shows '2.7 GiB'), so setting what it showed would lower the limit a little at every call: the default is
    reset, and another value is set half a step above what was shown, which shows as it did."""
    con.execute("reset memory_limit")
    num, _, unit = shown.partition(" ")
    for value in (None, f"{num}5 {unit}" if "." in num else None, shown):
        try:
            if value is not None:
                con.execute(f"set memory_limit = '{value}'")
        except duckdb.Error:
            continue
        if con.execute("select current_setting('memory_limit')").fetchone()[0] == shown:
            return


def replace_rows(con: duckdb.DuckDBPyConnection, table: str, where: str, params: list, df: pl.DataFrame | None) -> None:
    """Delete the rows matching `where` and insert `df`, in one transaction (no duplicates on re-run)."""
    replace_many(con, [(table, where, params, df)])


def replace_table(con: duckdb.DuckDBPyConnection, table: str, df: pl.DataFrame) -> None:
    replace_rows(con, table, "true", [], df)


# Which flagged matches remove their document: primary suites at once, derived
# suites (needs_review) only once a reviewer accepted the match or its instance.  A translated task's rows
# (via_task, store/translated_matches.py) are not among them: they remove nothing and wait for no decision.
REMOVABLE_SQL = """
    select m.*,
      coalesce(dm.decision, di.decision) as decision
    from matches m
    left join (
        select match_id, arg_max(decision, decided_at) as decision
        from review_decisions where match_id is not null group by match_id
    ) dm using (match_id)
    left join (
        select suite, split, instance_index, coalesce(subject, '') as subj, arg_max(decision, decided_at) as decision
        from review_decisions where match_id is null group by all
    ) di on di.suite = m.suite and di.split = m.split and di.instance_index = m.instance_index
            and di.subj = coalesce(m.subject, '')
    where coalesce(m.via_task, '') = ''
"""


# A row of REMOVABLE_SQL that removes its document (store/cuts.py cuts the same rows out in span mode).
REMOVES = "flagged and (not needs_review or decision = 'accept') and coalesce(decision, '') <> 'reject'"


def recompute_removals(con: duckdb.DuckDBPyConnection, shard: str | list[str] | None = None, transaction: bool = True) -> int:
    """Rebuild `removals` (all shards, one, or a list) from matches + review decisions; update shard_stats.
    In a transaction of its own, or (``transaction=False``) inside the caller's."""
    if isinstance(shard, list):
        where, params = "shard in (select unnest(?::varchar[]))", [shard]
    else:
        where = "shard = ?" if shard is not None else "true"
        params = [shard] if shard is not None else []
    if transaction:
        con.execute("begin transaction")
    try:
        link_rows(con, where, params)  # a source item's matches reported for its translations (removing nothing)
        con.execute(f"delete from removals where {where}", params)
        con.execute(
            f"""
            insert into removals
            select shard, line, any_value(doc_id), any_value(source), any_value(doc_chars),
                   string_agg(distinct case when needs_review then suite || ' (accepted)' else suite end, ', ' order by 1)
            from ({REMOVABLE_SQL}) r
            where {REMOVES} and ({where.replace('shard', 'r.shard')})
            group by shard, line
            """,
            params,
        )
        con.execute(
            f"""
            update shard_stats s set
              removed = coalesce((select count(*) from removals r where r.shard = s.shard), 0),
              kept = s.read - s.rejected - coalesce((select count(*) from removals r where r.shard = s.shard), 0),
              pending_review = coalesce((
                select count(distinct line) from ({REMOVABLE_SQL}) r
                where r.shard = s.shard and r.flagged and r.needs_review and r.decision is null
                  and not exists (select 1 from removals x where x.shard = r.shard and x.line = r.line)), 0)
            where {where.replace('shard', 's.shard')}
            """,
            params,
        )
        n = con.execute(f"select count(*) from removals where {where}", params).fetchone()[0]
        if transaction:
            con.execute("commit")
    except Exception:
        if transaction:
            con.execute("rollback")
        raise
    return int(n)


def reference_state(con: duckdb.DuckDBPyConnection) -> dict | None:
    """The reference_state row of the instances table as it stands, or None (never built, or changed since)."""
    row = con.execute("select inputs, records, bad_rows, bad_row_examples, same_answer_suites, seconds, built_at "
                      "from reference_state").fetchall()
    if len(row) != 1:
        return None
    state = dict(zip(("inputs", "records", "bad_rows", "bad_row_examples", "same_answer_suites", "seconds", "built_at"),
                     row[0]))
    if con.execute("select count(*) from instances").fetchone()[0] != state["records"]:
        return None
    return state


def _check_match_schema() -> None:
    # the detector's match rows and the matches table agree column for column
    from contam_assets.detector.matches import MATCH_SCHEMA

    assert list(MATCH_SCHEMA) == MATCH_COLUMNS, "detector.matches.MATCH_SCHEMA and the matches table differ"


_check_match_schema()
