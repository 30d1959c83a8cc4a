"""The `thorough` parts that act on a document's candidates, and what they need beside the index.

decon decides per (document, instance) pair.  Beyond decon, after decon's scan of a
document (scan.scan_many, which already runs the short-question pass, short.py):

- ``question_only``: a candidate that is not flagged, whose question overlap is at
  least ``question_only_overlap`` for a question of at least
  ``question_only_min_tokens`` tokens and that passed decon's question pre-check, is
  flagged *for review* (``held``): a long question found whole without its answer
  (decon tops it out at 0.75).  A shorter question (at least
  ``question_only_short_min_tokens``) is held too when it is distinctive: the mean
  IDF of its n-grams is at least ``question_only_short_min_idf`` of the largest an
  n-gram can have (ln N, one instance only).  That keeps MBPP's and ARC's short
  questions and leaves stems such as "Which of the following is true of the
  spine?" (0.57) alone: many benchmark items share them, so they say little;
- ``near_duplicates``: neardup.py (template copies unflagged, cut or padded copies added);
- ``dump``: when one document holds candidates of at least ``dump_min_items`` distinct
  instances of one task, at as many places (disjoint question spans; score at least
  the report floor, template copies not counted), every such candidate is flagged,
  reason ``dump`` (seed 003: quiz pages whose answers sit elsewhere, and dumps where
  no single item reaches the bar).

Reasons a match row carries (matches.rows_for_doc): ``question+answer`` (decon's
score), ``solution_only`` / ``answer_only`` (derived suites), ``question_only``,
``near_duplicate``, ``same_template``, ``dump``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl
import xxhash

from contam_assets.detector.config import DetectConfig
from contam_assets.detector.index import NgramIndex
from contam_assets.detector.scan import Candidate
from contam_assets.detector.short import ShortQuestions


@dataclass
class Extras:
    short: ShortQuestions | None
    near: object | None  # neardup.NearDupIndex
    near_floor: float | None  # the near-duplicate gate (neardup.GATE_FLOOR), None when the stage is off
    task_of: np.ndarray  # int per index local
    instance_of: np.ndarray  # int per index local: one id per (task, split, instance_index, subject)
    derived: np.ndarray  # bool per index local


def needs_extras(cfg: DetectConfig) -> bool:
    return cfg.dense_short_questions or cfg.question_only or cfg.near_duplicates or cfg.dump_min_items > 0


def ensure_extras(index: NgramIndex, records: pl.DataFrame, cfg: DetectConfig) -> Extras | None:
    """What the thorough parts of ``cfg`` need, built beside the index on first use and kept with it."""
    if not needs_extras(cfg):
        return None
    cache = index.__dict__.setdefault("_extras", {})
    key = (cfg.dense_short_questions, cfg.near_duplicates, cfg.ngram_size, cfg.sample_every, cfg.digest())
    if key in cache:
        return cache[key]
    recs = records.filter(pl.col("indexed")).sort("record_id")
    if not np.array_equal(recs["record_id"].to_numpy(), index.record_ids):
        raise ValueError("records do not match the index (rebuild the index)")
    # an index loaded again in the same process (one Dagster run per shard) reuses what was built for it
    content = (key, index.config_json, index.keys_digest(),
               xxhash.xxh3_64_hexdigest(recs.select("record_id", "task", "question", "answer").write_csv().encode()))
    if content in _BUILT:
        cache[key] = _BUILT[content]
        return cache[key]
    inst = recs.select(pl.concat_str(["task", "split", pl.col("instance_index").cast(pl.Utf8), pl.col("subject").fill_null("")],
                                     separator="\x1f").alias("k"))["k"]
    near = None
    if cfg.near_duplicates:
        from contam_assets.detector.neardup import GATE_FLOOR, NearDupIndex

        near = NearDupIndex(index, recs, cfg)
    extras = cache[key] = Extras(
        short=ShortQuestions.build(index, cfg) if cfg.dense_short_questions else None,
        near=near, near_floor=GATE_FLOOR if near is not None else None,
        task_of=recs["task"].cast(pl.Categorical).to_physical().to_numpy().astype(np.int64),
        instance_of=inst.cast(pl.Categorical).to_physical().to_numpy().astype(np.int64),
        derived=recs["derived"].to_numpy().astype(bool),
    )
    if len(_BUILT) >= 2:
        _BUILT.pop(next(iter(_BUILT)))
    _BUILT[content] = extras
    return extras


_BUILT: dict[tuple, Extras] = {}  # the last two built in this process, by the content of their index and records


def question_only(index: NgramIndex, cands: list[Candidate], cfg: DetectConfig) -> None:
    top = float(np.log(max(len(index.q_len), 2)))  # idf of an n-gram one instance holds: ln(N / 1)
    for c in cands:
        if c.flagged or not c.question_check or c.q_overlap < cfg.question_only_overlap:
            continue
        n = int(index.q_len[c.local])
        # beyond decon rule: a long question found whole without its answer is held for review
        long_enough = n >= cfg.question_only_min_tokens
        # beyond decon rule: a shorter one too when its n-grams are rare (mean idf near ln N: not a shared stem)
        distinctive = (n >= cfg.question_only_short_min_tokens and index.q_unique[c.local] > 0
                       and index.q_idf_sum[c.local] / index.q_unique[c.local] >= cfg.question_only_short_min_idf * top)
        if long_enough or distinctive:
            c.flagged, c.held, c.reason = True, True, "question_only"


def dumps(extras: Extras, cands: list[Candidate], cfg: DetectConfig) -> None:
    by_task: dict[int, list[Candidate]] = {}
    for c in cands:
        if c.reason != "same_template" and c.score >= cfg.report_floor and not extras.derived[c.local]:
            by_task.setdefault(int(extras.task_of[c.local]), []).append(c)
    for cs in by_task.values():
        # items at one place are one item (an MMLU passage shared by five questions): count disjoint spans
        regions, last = 0, -1
        for c in sorted(cs, key=lambda c: c.cluster_start):
            if c.cluster_start > last:
                regions += 1
            last = max(last, c.question_end)
        if regions >= cfg.dump_min_items and len({int(extras.instance_of[c.local]) for c in cs}) >= cfg.dump_min_items:
            for c in cs:
                if not c.flagged or c.held:
                    # beyond decon rule: a document holding dump_min_items instances of one task is a dump
                    c.flagged, c.held, c.reason = True, False, "dump"


def finish(extras: Extras | None, index: NgramIndex, tokens: np.ndarray, words: list[bytes] | None,
           cands: list[Candidate], cfg: DetectConfig, present: np.ndarray | None = None) -> list[Candidate]:
    """A document's candidates after the thorough rules of ``cfg`` (unchanged when none is on).

    ``words``: the document's cleaned words (text.clean_words), needed by the near-duplicate stage;
    ``present``: the non-hot index keys of a document that passed its gate (scan.scan_many's ``gated``).
    """
    if extras is None:
        return cands
    if cfg.question_only:
        question_only(index, cands, cfg)
    if extras.near is not None and words is not None:
        from contam_assets.detector.neardup import near_duplicates
        from contam_assets.detector.tokenize import get_tokenizer

        cands = near_duplicates(extras.near, index, tokens, words, cands, cfg, get_tokenizer(cfg.tokenizer), present)
    if cfg.dump_min_items > 0:
        dumps(extras, cands, cfg)
    return cands
