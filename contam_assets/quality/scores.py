"""Scores of one detector run over the planted suite: recall, precision, false positives, item split.

What counts (decided here, documented in docs/quality.md):

- A *pair* is (document, instance) over all match rows of that document and
  instance (any span, any suite, so a code item's derived-suite match and its
  primary match are one pair).
- A planted item is **caught** when a flagged pair in its document points at it
  (task/split/instance_index/subject), or at an instance with the same normalised
  question (an identical-text twin: a GSM-Hard row equal to its GSM8K question, an
  MMLU question repeated in another subject).  **held for review** = caught only
  through derived suites (``needs_review``); **candidate** = any stored pair
  (score >= the report floor, flagged or not).
- A flagged pair in a planted document is **correct** when its instance is in the
  document's truth, an identical-text twin of a planted item, or an instance whose
  whole normalised question (for a derived-suite match: its reference solution)
  occurs in the document (it really is there); anything else is **stray**.
  Precision = correct / flagged pairs: it measures attribution to the right instance.
- A clean or hard-negative document with any flagged pair is a **false positive**.
  GSM-Hard items whose question differs from their GSM8K source are hard negatives
  for GSM8K: a flagged GSM8K pair on them is a false positive too.
- PlantedItem split (seed 003): an instance is **present** when its normalised question
  occurs in a removed document (one with a flagged pair that is not held for review),
  **flagged** when any flagged pair points at it; recall given presence =
  flagged and present / present.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import polars as pl

from contam_assets.detector.text import clean_text
from contam_assets.quality.items import Key, PlantedItem, item_key
from contam_assets.quality.leaks import FORMATTING
from contam_assets.quality.overlap import PresenceIndex
from contam_assets.quality.suite import NUMBER_CHANGED_COPIES

ESCAPED = ("json_escaped", "python_escaped")
KEY_COLS = ["task", "split", "instance_index", "subject"]


@dataclass
class Targets:
    verbatim_recall: float = 0.99  # verbatim and formatting-changed question+answer
    solution_recall: float = 0.95  # solution-only code through the derived suites (held for review counts)
    fp_per_million: float = 100.0
    hard_negative_fp: int = 0
    recall_types: tuple[str, ...] = ("verbatim",) + FORMATTING + ESCAPED
    # further recall targets, leak type -> least recall (flagged, or held for review where the rule holds)
    more: tuple[tuple[str, float], ...] = ()
    # numbers_changed: most that may be flagged, and the least share reported as same_template (None: no target)
    numbers_flagged: float | None = None
    numbers_same_template: float | None = None


# The targets of each preset that has any (default and thorough).  Others are measured only.
TARGETS = {
    "default": Targets(),
    "thorough": Targets(
        verbatim_recall=0.995, fp_per_million=10.0,
        recall_types=("verbatim",) + FORMATTING + ESCAPED + ("mc_options_changed",),
        more=(("html_wrapped", 0.98), ("benchmark_dump", 0.98), ("question_only", 0.90), ("question_middle_cut", 0.80),
              ("answer_only", 0.80)),
        numbers_flagged=0.0, numbers_same_template=0.95,
    ),
}


@dataclass
class QualityResult:
    preset: str
    pairs: pl.DataFrame
    outcomes: pl.DataFrame
    scores: pl.DataFrame
    clean: pl.DataFrame
    item_split: pl.DataFrame
    item_split_summary: pl.DataFrame
    summary: dict = field(default_factory=dict)


def fp_upper_bound(k: int, n: int, confidence: float = 0.95) -> float:
    """One-sided Clopper-Pearson upper bound of a rate with k events in n trials."""
    if n == 0:
        return 1.0
    if k >= n:
        return 1.0
    from scipy.stats import beta

    return float(beta.ppf(confidence, k + 1, n - k))


def _key(row: dict) -> Key:
    return item_key(row["task"], row["split"], row["instance_index"], row["subject"])


def match_pairs(matches: pl.DataFrame) -> pl.DataFrame:
    """(shard, line, instance) pairs with flagged / flagged_primary / best score over all their match rows."""
    if matches.height == 0:
        return pl.DataFrame(schema={"shard": pl.Utf8, "line": pl.Int32, "task": pl.Utf8, "split": pl.Utf8,
                                    "instance_index": pl.Int32, "subject": pl.Utf8, "flagged": pl.Boolean,
                                    "flagged_primary": pl.Boolean, "best_score": pl.Float64, "suites": pl.Utf8,
                                    "reasons": pl.Utf8})
    if "reason" not in matches.columns:  # match rows of decon's presets recorded before the column existed
        matches = matches.with_columns(reason=pl.lit(None, dtype=pl.Utf8))
    return (matches.with_columns(pl.col("subject").fill_null(""))
            .group_by("shard", "line", *KEY_COLS)
            .agg(flagged=pl.col("flagged").any(),
                 flagged_primary=(pl.col("flagged") & ~pl.col("needs_review")).any(),
                 best_score=pl.col("score").max(),
                 suites=pl.col("suite").unique().sort().str.join(","),
                 reasons=pl.col("reason").fill_null("").unique().sort().str.join(","))
            .sort("shard", "line", *KEY_COLS))


def evaluate(preset: str, truth: pl.DataFrame, docs: pl.DataFrame, matches: pl.DataFrame, texts: dict[tuple[str, int], str],
             items: list[PlantedItem], presence: PresenceIndex | None = None, targets: Targets | None = None) -> QualityResult:
    targets = targets if targets is not None else TARGETS.get(preset)
    presence = presence or PresenceIndex((it.key, it.question) for it in items)
    norm_q = {it.key: clean_text(it.question) for it in items}
    by_norm: dict[str, set[Key]] = defaultdict(set)
    for k, q in norm_q.items():
        by_norm[q].add(k)

    doc_rows = {(d["shard"], d["line"]): d for d in docs.to_dicts()}
    truth_rows = truth.to_dicts()
    truth_keys: dict[tuple[str, int], set[Key]] = defaultdict(set)
    planted_keys: dict[tuple[str, int], set[Key]] = defaultdict(set)
    for t in truth_rows:
        truth_keys[(t["shard"], t["line"])].add(_key(t))
        if t["role"] == "planted":
            planted_keys[(t["shard"], t["line"])].add(_key(t))

    solutions = PresenceIndex((it.key, it.solution) for it in items if it.solution)
    found_cache: dict[tuple[str, int], set] = {}
    sol_cache: dict[tuple[str, int], set] = {}

    def found(pos) -> set:
        if pos not in found_cache:
            found_cache[pos] = presence.found_in(texts.get(pos, ""))
        return found_cache[pos]

    def found_solution(pos) -> set:
        if pos not in sol_cache:
            sol_cache[pos] = solutions.found_in(texts.get(pos, ""))
        return sol_cache[pos]

    # -- pairs and their correctness -------------------------------------------------
    pairs = match_pairs(matches)
    verdicts = []
    for p in pairs.iter_rows(named=True):
        pos = (p["shard"], p["line"])
        d = doc_rows.get(pos)
        k = _key(p)
        if d is None or d["doc_class"] != "planted":
            verdicts.append("false_positive")
        elif k in truth_keys[pos]:
            verdicts.append("truth")
        elif any(norm_q.get(k) == norm_q.get(pk) for pk in planted_keys[pos]):
            verdicts.append("twin")
        elif k in found(pos) or ("_solution" in p["suites"] and k in found_solution(pos)):
            verdicts.append("present")
        else:
            verdicts.append("stray")
    pairs = pairs.with_columns(verdict=pl.Series(verdicts, dtype=pl.Utf8))
    pairs = pairs.join(docs.select("shard", "line", "doc_id", "doc_class", pl.col("kind").alias("doc_kind")), on=["shard", "line"], how="left")

    pair_index: dict[tuple[str, int], dict[Key, dict]] = defaultdict(dict)
    for p in pairs.iter_rows(named=True):
        pair_index[(p["shard"], p["line"])][_key(p)] = p

    # -- outcome of every planted item -----------------------------------------------
    outcomes = []
    for t in truth_rows:
        if t["role"] != "planted":
            continue
        pos = (t["shard"], t["line"])
        k = _key(t)
        here = pair_index.get(pos, {})
        twins = [here[o] for o in by_norm.get(norm_q.get(k, ""), ()) if o != k and o in here]
        direct = here.get(k)
        cands = ([direct] if direct else []) + twins
        flagged = [c for c in cands if c["flagged"]]
        outcomes.append(dict(
            doc_id=t["doc_id"], leak_type=t["leak_type"], variant=t["variant"], task=t["task"], split=t["split"],
            instance_index=t["instance_index"], subject=t["subject"], shard=t["shard"], line=t["line"],
            caught=bool(flagged), caught_direct=bool(direct and direct["flagged"]),
            held_for_review=bool(flagged) and not any(c["flagged_primary"] for c in flagged),
            candidate=bool(cands), best_score=max((c["best_score"] for c in cands), default=None),
            suites=",".join(sorted({s for c in cands for s in c["suites"].split(",")})),
            same_template=any("same_template" in c["reasons"].split(",") for c in cands),
            reasons=",".join(sorted({r for c in cands for r in c["reasons"].split(",") if r})),
        ))
    outcomes_df = pl.DataFrame(outcomes, schema=OUTCOME_SCHEMA) if outcomes else pl.DataFrame(schema=OUTCOME_SCHEMA)

    scores_df = _scores(outcomes_df, pairs, docs)
    clean_df, fp = _clean(pairs, docs)
    hard = _hard_negatives(pairs, docs, truth)

    # -- item split (seed 003) ----------------------------------------------------------
    removed = sorted({(p["shard"], p["line"]) for p in pairs.filter(pl.col("flagged_primary")).iter_rows(named=True)})
    present: set = set()
    for pos in removed:
        present |= found(pos)
    flagged_keys = {_key(p) for p in pairs.filter(pl.col("flagged")).iter_rows(named=True)}
    planted_all = {_key(t) for t in truth_rows if t["role"] == "planted"}
    split_rows = [dict(task=it.task, split=it.split, instance_index=it.instance_index, subject=it.subject or "",
                       indexed=it.indexed, planted=it.key in planted_all, present=it.key in present,
                       flagged=it.key in flagged_keys) for it in items]
    split_df = pl.DataFrame(split_rows, schema=ITEM_SPLIT_SCHEMA) if split_rows else pl.DataFrame(schema=ITEM_SPLIT_SCHEMA)
    split_summary = item_split_summary(split_df)

    result = QualityResult(preset=preset, pairs=pairs, outcomes=outcomes_df, scores=scores_df, clean=clean_df,
                           item_split=split_df, item_split_summary=split_summary)
    result.summary = {"false_positives": fp, "hard_negatives": hard, "removed_documents": len(removed),
                      "targets": check_targets(scores_df, fp, hard, targets) if targets is not None else []}
    return result


def _ratio(a, b):
    return None if not b else round(a / b, 4)


def _scores(outcomes: pl.DataFrame, pairs: pl.DataFrame, docs: pl.DataFrame) -> pl.DataFrame:
    rows = []
    planted_docs = docs.filter(pl.col("doc_class") == "planted")
    removed_docs = set(pairs.filter(pl.col("flagged_primary"))["doc_id"].to_list())  # what `contam detect` removes
    flagged_pairs = pairs.filter(pl.col("flagged") & (pl.col("doc_class") == "planted"))
    for (leak,), grp in outcomes.group_by(["leak_type"], maintain_order=True):
        tasks = sorted(grp["task"].unique().to_list())
        for task in tasks + ["ALL"]:
            g = grp if task == "ALL" else grp.filter(pl.col("task") == task)
            fp_ = flagged_pairs.filter(pl.col("doc_kind") == leak)
            if task != "ALL":
                fp_ = fp_.filter(pl.col("task") == task)
            correct = fp_.filter(pl.col("verdict").is_in(["truth", "twin", "present"])).height
            d = planted_docs.filter(pl.col("kind") == leak)
            if task != "ALL":
                d = d.filter(pl.col("task") == task)
            n_removed = sum(1 for x in d["doc_id"].to_list() if x in removed_docs)
            planted, caught = g.height, int(g["caught"].sum())
            cands = int(g["candidate"].sum())
            rows.append(dict(leak_type=leak, task=task, planted=planted, flagged=caught,
                             held_for_review=int(g["held_for_review"].sum()), candidates=cands,
                             recall=_ratio(caught, planted), candidate_recall=_ratio(cands, planted),
                             flagged_pairs=fp_.height, correct_pairs=correct, precision=_ratio(correct, fp_.height),
                             documents=d.height, documents_removed=n_removed,
                             same_template=int(g["same_template"].sum())))
    return pl.DataFrame(rows, schema=SCORE_SCHEMA) if rows else pl.DataFrame(schema=SCORE_SCHEMA)


def _clean(pairs: pl.DataFrame, docs: pl.DataFrame) -> tuple[pl.DataFrame, dict]:
    neg = docs.filter(pl.col("doc_class").is_in(["clean", "hard_negative"]))
    fl = pairs.filter(pl.col("flagged") & pl.col("doc_class").is_in(["clean", "hard_negative"]))
    flagged_docs = set(fl["doc_id"].to_list())
    removed_docs = set(fl.filter(pl.col("flagged_primary"))["doc_id"].to_list())
    stored_docs = set(pairs.filter(pl.col("doc_class").is_in(["clean", "hard_negative"]))["doc_id"].to_list())
    rows = []
    for (cls, kind), g in neg.group_by(["doc_class", "kind"], maintain_order=True):
        ids = g["doc_id"].to_list()
        rows.append(dict(doc_class=cls, kind=kind, documents=len(ids),
                         flagged_documents=sum(i in flagged_docs for i in ids),
                         removed_documents=sum(i in removed_docs for i in ids),
                         candidate_documents=sum(i in stored_docs for i in ids)))
    clean_df = pl.DataFrame(rows, schema=CLEAN_SCHEMA).sort("doc_class", "kind") if rows else pl.DataFrame(schema=CLEAN_SCHEMA)
    n, k = neg.height, len(flagged_docs)
    fp = dict(documents=n, flagged_documents=k, removed_documents=len(removed_docs),
              per_million=round(k / n * 1e6, 1) if n else None,
              upper95_per_million=round(fp_upper_bound(k, n) * 1e6, 1) if n else None,
              examples=fl.select("doc_id", *KEY_COLS, "best_score", "suites").head(20).to_dicts())
    return clean_df, fp


def _hard_negatives(pairs: pl.DataFrame, docs: pl.DataFrame, truth: pl.DataFrame) -> dict:
    out = {}
    hn = docs.filter(pl.col("doc_class") == "hard_negative")
    fl = pairs.filter(pl.col("flagged"))
    for (kind,), g in hn.group_by(["kind"], maintain_order=True):
        ids = set(g["doc_id"].to_list())
        out[kind] = dict(documents=len(ids), false_positives=fl.filter(pl.col("doc_id").is_in(list(ids)))["doc_id"].n_unique())
    for copy_task, (src_task, _) in NUMBER_CHANGED_COPIES.items():
        d = docs.filter((pl.col("kind") == "numbers_changed") & (pl.col("variant") == copy_task))
        if d.height == 0:
            continue
        ids = d["doc_id"].to_list()
        bad = fl.filter(pl.col("doc_id").is_in(ids) & (pl.col("task") == src_task))["doc_id"].n_unique()
        out[f"{copy_task}_changed_as_{src_task}"] = dict(documents=len(ids), false_positives=bad)
    out["total"] = dict(documents=sum(v["documents"] for v in out.values()),
                        false_positives=sum(v["false_positives"] for v in out.values()))
    return out


def item_split_summary(split: pl.DataFrame) -> pl.DataFrame:
    if split.height == 0:
        return pl.DataFrame(schema=ITEM_SPLIT_SUMMARY_SCHEMA)
    g = (split.group_by("task").agg(
        instances=pl.len(), indexed=pl.col("indexed").sum(), planted=pl.col("planted").sum(),
        present=pl.col("present").sum(), flagged=pl.col("flagged").sum(),
        flagged_and_present=(pl.col("flagged") & pl.col("present")).sum()).sort("task"))
    g = g.with_columns(recall_given_presence=pl.when(pl.col("present") > 0)
                       .then((pl.col("flagged_and_present") / pl.col("present")).round(4)).otherwise(None))
    return g.cast({c: pl.Int64 for c in ("instances", "indexed", "planted", "present", "flagged", "flagged_and_present")})


def check_targets(scores: pl.DataFrame, fp: dict, hard: dict, t: Targets) -> list[dict]:
    out = []
    by = {(r["leak_type"], r["task"]): r for r in scores.to_dicts()}
    for leak in t.recall_types:
        r = by.get((leak, "ALL"))
        if r is None:
            continue
        out.append(dict(name=f"recall {leak}", value=r["recall"], target=f">= {t.verbatim_recall}",
                        passed=r["recall"] is not None and r["recall"] >= t.verbatim_recall))
    r = by.get(("solution_only", "ALL"))
    if r is not None:
        out.append(dict(name="recall solution_only (held for review counts)", value=r["recall"],
                        target=f">= {t.solution_recall}", passed=r["recall"] is not None and r["recall"] >= t.solution_recall))
    for leak, least in t.more:
        r = by.get((leak, "ALL"))
        if r is not None:
            out.append(dict(name=f"recall {leak} (held for review counts)", value=r["recall"], target=f">= {least}",
                            passed=r["recall"] is not None and r["recall"] >= least))
    r = by.get(("numbers_changed", "ALL"))
    if r is not None and t.numbers_flagged is not None:
        out.append(dict(name="numbers_changed flagged", value=r["recall"], target=f"<= {t.numbers_flagged}",
                        passed=r["recall"] is not None and r["recall"] <= t.numbers_flagged))
    if r is not None and t.numbers_same_template is not None:
        share = _ratio(r["same_template"], r["planted"])
        out.append(dict(name="numbers_changed reported as same_template", value=share,
                        target=f">= {t.numbers_same_template}", passed=share is not None and share >= t.numbers_same_template))
    if fp.get("documents"):
        out.append(dict(name="false positives per million clean documents", value=fp["per_million"],
                        target=f"<= {t.fp_per_million:g}", passed=fp["per_million"] <= t.fp_per_million))
    if hard.get("total", {}).get("documents"):
        v = hard["total"]["false_positives"]
        out.append(dict(name="false positives on hard negatives", value=v, target=f"<= {t.hard_negative_fp}",
                        passed=v <= t.hard_negative_fp))
    return out


OUTCOME_SCHEMA = {
    "doc_id": pl.Utf8, "leak_type": pl.Utf8, "variant": pl.Utf8, "task": pl.Utf8, "split": pl.Utf8,
    "instance_index": pl.Int32, "subject": pl.Utf8, "shard": pl.Utf8, "line": pl.Int32, "caught": pl.Boolean,
    "caught_direct": pl.Boolean, "held_for_review": pl.Boolean, "candidate": pl.Boolean, "best_score": pl.Float64,
    "suites": pl.Utf8, "same_template": pl.Boolean, "reasons": pl.Utf8,
}
SCORE_SCHEMA = {
    "leak_type": pl.Utf8, "task": pl.Utf8, "planted": pl.Int64, "flagged": pl.Int64, "held_for_review": pl.Int64,
    "candidates": pl.Int64, "recall": pl.Float64, "candidate_recall": pl.Float64, "flagged_pairs": pl.Int64,
    "correct_pairs": pl.Int64, "precision": pl.Float64, "documents": pl.Int64, "documents_removed": pl.Int64,
    "same_template": pl.Int64,
}
CLEAN_SCHEMA = {
    "doc_class": pl.Utf8, "kind": pl.Utf8, "documents": pl.Int64, "flagged_documents": pl.Int64,
    "removed_documents": pl.Int64, "candidate_documents": pl.Int64,
}
ITEM_SPLIT_SCHEMA = {
    "task": pl.Utf8, "split": pl.Utf8, "instance_index": pl.Int32, "subject": pl.Utf8, "indexed": pl.Boolean,
    "planted": pl.Boolean, "present": pl.Boolean, "flagged": pl.Boolean,
}
ITEM_SPLIT_SUMMARY_SCHEMA = {
    "task": pl.Utf8, "instances": pl.Int64, "indexed": pl.Int64, "planted": pl.Int64, "present": pl.Int64,
    "flagged": pl.Int64, "flagged_and_present": pl.Int64, "recall_given_presence": pl.Float64,
}
