"""DuckDB tables of detector quality (all prefixed ``quality_``).

quality_truth        the planted suite's truth (one row per item per document); replaced with the suite
quality_documents    every suite document: class (planted / clean / hard_negative), leak type or origin, shard, line
quality_runs         one row per measured preset: suite digest, time, summary JSON (false positives, targets...)
quality_scores       per preset, leak type and task: planted, flagged, held for review, candidates, recall, precision
quality_clean        per preset and clean-document origin: documents, flagged, removed
quality_outcomes     per preset and planted item: caught, held for review, candidate, best score
quality_item_split   per preset and instance (seed 003): indexed, planted, present in removed documents, flagged
quality_matches      per preset: the suite's match rows (flagged or stored candidates)

Rows of one preset are replaced in one transaction (no duplicates on re-run).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import duckdb
import polars as pl

from contam_assets import store
from contam_assets.quality.scores import QualityResult, item_split_summary
from contam_assets.store import tables as store_tables
from contam_assets.store.tables import replace_many, replace_rows

SCHEMA = {
    "quality_truth": """doc_id VARCHAR, leak_type VARCHAR, variant VARCHAR, task VARCHAR, split VARCHAR,
        instance_index INTEGER, subject VARCHAR, choice_index INTEGER, role VARCHAR, char_start BIGINT, char_end BIGINT,
        detail VARCHAR, shard VARCHAR, line INTEGER""",
    "quality_documents": """doc_id VARCHAR, doc_class VARCHAR, kind VARCHAR, variant VARCHAR, source VARCHAR, task VARCHAR,
        shard VARCHAR, line INTEGER, n_chars BIGINT""",
    "quality_runs": "preset VARCHAR, suite_digest VARCHAR, measured_at TIMESTAMP, summary VARCHAR",
    "quality_scores": """preset VARCHAR, leak_type VARCHAR, task VARCHAR, planted BIGINT, flagged BIGINT, held_for_review BIGINT,
        candidates BIGINT, recall DOUBLE, candidate_recall DOUBLE, flagged_pairs BIGINT, correct_pairs BIGINT,
        precision DOUBLE, documents BIGINT, documents_removed BIGINT, same_template BIGINT""",
    "quality_clean": """preset VARCHAR, doc_class VARCHAR, kind VARCHAR, documents BIGINT, flagged_documents BIGINT,
        removed_documents BIGINT, candidate_documents BIGINT""",
    "quality_outcomes": """preset VARCHAR, doc_id VARCHAR, leak_type VARCHAR, variant VARCHAR, task VARCHAR, split VARCHAR,
        instance_index INTEGER, subject VARCHAR, shard VARCHAR, line INTEGER, caught BOOLEAN, caught_direct BOOLEAN,
        held_for_review BOOLEAN, candidate BOOLEAN, best_score DOUBLE, suites VARCHAR, same_template BOOLEAN, reasons VARCHAR""",
    "quality_item_split": """preset VARCHAR, task VARCHAR, split VARCHAR, instance_index INTEGER, subject VARCHAR,
        indexed BOOLEAN, planted BOOLEAN, present BOOLEAN, flagged BOOLEAN""",
    "quality_matches": """preset VARCHAR, shard VARCHAR, line INTEGER, doc_id VARCHAR, task VARCHAR, suite VARCHAR, split VARCHAR,
        instance_index INTEGER, subject VARCHAR, choice_index INTEGER, score DOUBLE, required_score DOUBLE, flagged BOOLEAN,
        needs_review BOOLEAN, question_overlap DOUBLE, answer_overlap DOUBLE, training_text VARCHAR, reason VARCHAR""",
}
PER_PRESET = ("quality_scores", "quality_clean", "quality_outcomes", "quality_item_split", "quality_matches", "quality_runs")


def ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
    store_tables.ensure_schema(con, SCHEMA)


def write_suite(con: duckdb.DuckDBPyConnection, truth: pl.DataFrame, docs: pl.DataFrame) -> None:
    ensure_schema(con)
    replace_rows(con, "quality_truth", "true", [], truth)
    replace_rows(con, "quality_documents", "true", [], docs)


def write_result(con: duckdb.DuckDBPyConnection, result: QualityResult, matches: pl.DataFrame, suite_digest: str) -> None:
    """Replace every quality_* row of ``result.preset`` with this result."""
    ensure_schema(con)
    p = result.preset
    with_preset = lambda df: df.select(pl.lit(p).alias("preset"), *df.columns)
    frames = {
        "quality_scores": with_preset(result.scores),
        "quality_clean": with_preset(result.clean),
        "quality_outcomes": with_preset(result.outcomes),
        "quality_item_split": with_preset(result.item_split),
        "quality_matches": with_preset(matches) if matches.height else None,
        "quality_runs": pl.DataFrame([{"preset": p, "suite_digest": suite_digest, "measured_at": datetime.now(timezone.utc).replace(tzinfo=None),
                                       "summary": json.dumps(result.summary, default=str)}]),
    }
    replace_many(con, [(table, "preset = ?", [p], df) for table, df in frames.items()])


def load_report(con: duckdb.DuckDBPyConnection, suite_digest: str | None = None) -> dict:
    """Everything the report needs, for every preset measured on the suite ``suite_digest`` (None = any)."""
    ensure_schema(con)
    runs = store.query_df(con, "select * from quality_runs order by preset")
    if suite_digest is not None and runs.height:
        runs = runs.filter(pl.col("suite_digest") == suite_digest)
    out = {}
    for r in runs.to_dicts():
        p = r["preset"]
        q = lambda sql: store.query_df(con, sql, [p])
        split = q("select * exclude (preset) from quality_item_split where preset = ?")
        out[p] = dict(
            summary=json.loads(r["summary"]), measured_at=str(r["measured_at"]), suite_digest=r["suite_digest"],
            scores=q("select * exclude (preset) from quality_scores where preset = ? order by leak_type, task"),
            clean=q("select * exclude (preset) from quality_clean where preset = ? order by doc_class, kind"),
            item_split=item_split_summary(split),
            misses=q("""select o.* exclude (preset), m.training_text from quality_outcomes o left join (
                            select shard, line, task, split, instance_index, coalesce(subject, '') subj,
                                   arg_max(training_text, score) training_text
                            from quality_matches where preset = $1 group by all) m
                          on m.shard = o.shard and m.line = o.line and m.task = o.task and m.split = o.split
                             and m.instance_index = o.instance_index and m.subj = coalesce(o.subject, '')
                        where o.preset = $1 and not o.caught order by o.leak_type, o.task, o.doc_id"""),
        )
    return out
