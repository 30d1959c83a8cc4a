"""What became of every benchmark instance: indexed, or skipped and why (no silent drops).

Per task and split: the instances its files hold (rows read, the unreadable ones included), those indexed (an
instance counts as indexed when any of its records is: a multiple-choice row is one record per choice), and
those skipped by reason.  Reasons: ``unreadable`` (a row the file reader could not parse), ``no_question``
(a null or empty question), and decon's filters on every record of the instance: ``min_tokens`` (too short),
``min_unique_words``, ``duplicate`` (a copy of an earlier instance of its suite), ``empty_question``.
``no_answer`` is a note, not a skip: the instance is indexed on its question alone.

No preset indexes a skipped instance; `thorough`'s short_questions part looks up, at every position, the
indexed questions of ngram_size to short_question_tokens - 1 tokens that decon's sampling can step over
(`covered_short`), and the summary says so beside the skipped short ones.
"""

from __future__ import annotations

import polars as pl

REASON_WORDS = {"unreadable": "unreadable", "no_question": "no question", "min_tokens": "too short",
                "min_unique_words": "too few distinct words", "duplicate": "duplicate", "empty_question": "empty question"}
SUMMARY_SCHEMA = {"task": pl.Utf8, "split": pl.Utf8, "instances": pl.Int64, "indexed": pl.Int64, "skipped": pl.Int64,
                  "reasons": pl.Utf8, "notes": pl.Utf8, "short_covered": pl.Int64}


def instance_summary(records: pl.DataFrame, row_skips: dict, notes: dict, cfg=None) -> pl.DataFrame:
    """One row per (task, split): instances, indexed, skipped, ``reasons`` / ``notes`` as ``reason=n, reason=n``
    (sorted by reason), and ``short_covered`` (covered_short; 0 unless the short_questions part is on)."""
    covered = covered_short(records, cfg) if cfg is not None else {}
    per: dict[tuple[str, str], dict] = {}

    def entry(task, split):
        return per.setdefault((task, split), {"instances": 0, "indexed": 0, "reasons": {}, "notes": {}})

    if records.height:
        inst = (records.filter(~pl.col("derived"))
                .with_columns(pl.col("subject").fill_null(""))
                .group_by("task", "split", "subject", "instance_index", maintain_order=True)
                .agg(indexed=pl.col("indexed").any(), reason=pl.col("skip_reason").drop_nulls().first()))
        for r in inst.group_by("task", "split", "indexed", "reason").len().to_dicts():
            e = entry(r["task"], r["split"])
            e["instances"] += r["len"]
            if r["indexed"]:
                e["indexed"] += r["len"]
            else:
                e["reasons"][r["reason"] or "unknown"] = e["reasons"].get(r["reason"] or "unknown", 0) + r["len"]
    for (task, split, reason), n in row_skips.items():
        e = entry(task, split)
        e["instances"] += n
        e["reasons"][reason] = e["reasons"].get(reason, 0) + n
    for (task, split, note), n in notes.items():
        entry(task, split)["notes"][note] = n
    rows = [dict(task=t, split=s, instances=e["instances"], indexed=e["indexed"],
                 skipped=e["instances"] - e["indexed"], reasons=_join(e["reasons"]), notes=_join(e["notes"]),
                 short_covered=covered.get((t, s), 0))
            for (t, s), e in sorted(per.items())]
    return pl.DataFrame(rows, schema=SUMMARY_SCHEMA)


def _join(d: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(d.items()))


def covered_short(records: pl.DataFrame, cfg) -> dict[tuple[str, str], int]:
    """Indexed instances per (task, split) whose question the short_questions part looks up at every position
    (ngram_size <= question tokens < short_question_tokens, as short.ShortQuestions.build selects them)."""
    from contam_assets.detector.index import encode_texts

    out: dict[tuple[str, str], int] = {}
    if not cfg.dense_short_questions or not records.height:
        return out
    recs = records.filter(pl.col("indexed") & ~pl.col("derived"))
    seen = set()
    for key, q in zip(recs.select("task", "split", "subject", "instance_index").iter_rows(),
                      encode_texts(recs["question"].to_list(), cfg)):
        if cfg.ngram_size <= len(q) < cfg.short_question_tokens and key not in seen:
            seen.add(key)
            out[key[:2]] = out.get(key[:2], 0) + 1
    return out


def summary_lines(summary: list[dict]) -> list[str]:
    """The run output's lines: one per task and split (task and split names come from spec and benchmark files:
    the caller makes each line inert for where it shows it, report/inert.term_text for the terminal)."""
    lines = []
    for r in summary:
        line = f"  {r['task']}/{r['split']}: {r['instances']:,} instance(s), {r['indexed']:,} indexed"
        if r["skipped"]:
            parts = []
            for item in filter(None, (r["reasons"] or "").split(", ")):
                reason, _, n = item.partition("=")
                parts.append(f"{REASON_WORDS.get(reason, reason)} ({reason}) {int(n):,}")
            line += f", {r['skipped']:,} skipped: " + "; ".join(parts)
            if "min_tokens=" in (r["reasons"] or ""):
                line += " (not indexed by any preset, thorough included; --min-tokens lowers the limit)"
        if r.get("notes"):
            line += f" (notes: {r['notes']})"
        if r.get("short_covered"):
            line += f"; thorough's short_questions part looks up {r['short_covered']:,} short indexed question(s) at every position"
        lines.append(line)
    return lines
