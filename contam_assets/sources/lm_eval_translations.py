"""Translated lm-evaluation-harness suites and the tasks they translate, for the lm_eval installed here.

``translation_for(leaf)`` is the registry.Translation of an lm-eval leaf task whose items are translations of
another lm-eval task's items, or None.  Each entry says where its alignment comes from.  Entries whose alignment
cannot be established from what lm-eval reads offline carry ``unavailable``: such a task runs as before, and is
refused with that reason (one line, sources/translation_links.py) only when its source task is in the same run,
where the link would be used.  A shipped link, unlike one a task spec declares, is skipped when its source task
is not in the run.  Counts are checked whenever a link is made: an index alignment whose counts differ is refused.

Checked against lm_eval 0.4.13's task folders (mgsm, afrimgsm, xnli, xstorycloze, xquad, paws-x,
lambada_multilingual, okapi, arc_mt, global_mmlu, openai-mmmlu, mmlu_prox, xcopa).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from contam_assets.sources.registry import Translation


@dataclass(frozen=True)
class Entry:
    pattern: str  # a regular expression over leaf names
    translation: Translation
    why: str = ""  # where the alignment comes from (an entry that is refused says why in its translation)


def _index(source: str, **kw) -> Translation:
    return Translation(of=source, align="index", shipped=True, **kw)


def _refused(source: str, reason: str) -> Translation:
    return Translation(of=source, shipped=True, unavailable=reason)


NO_ID = "the rows lm-eval reads keep no id or position of the source item, and the order could not be checked offline"

TABLE: tuple[Entry, ...] = (
    Entry(r"^mgsm_(direct|native_cot|en_cot)_\w+$",
          _index("gsm8k", split="test", splits=("test",), limit=250),
          "MGSM (Shi et al. 2022): the first 250 GSM8K test problems translated by people; item i = GSM8K test item i"),
    Entry(r"^afrimgsm_\w+$", _index("gsm8k", split="test", splits=("test",), limit=250),
          "AfriMGSM translates MGSM's 250 problems (the counts are checked when the link is made)"),
    Entry(r"^xnli_(?!en$)[a-z]{2}$", _index("xnli_en"),
          "XNLI: the same dev and test pairs in every language, in the same order"),
    Entry(r"^xstorycloze_(?!en$)[a-z]{2}$", _index("xstorycloze_en"),
          "XStoryCloze: the English StoryCloze stories translated, in the same order"),
    Entry(r"^xquad_(?!en$)[a-z]{2}$", _index("xquad_en"),
          "XQuAD: 1,190 SQuAD v1.1 dev questions translated, in the same order in every language"),
    Entry(r"^paws_(?!en$)[a-z]{2}$", _index("paws_en"),
          "PAWS-X: the same dev and test pairs translated, in the same order"),
    Entry(r"^lambada_openai_mt_(?!en$)[a-z]{2}$", _index("lambada_openai"),
          "machine translations of LAMBADA's test passages, line for line (the counts are checked)"),
    Entry(r"^arc_[a-z]{2}$",
          _refused("arc_challenge", f"Okapi's ARC translations (alexandrainst/m_arc): {NO_ID}")),
    Entry(r"^hellaswag_[a-z]{2}$",
          _refused("hellaswag", f"Okapi translated a subset of HellaSwag's validation split: {NO_ID}")),
    Entry(r"^m_mmlu_[a-z]{2}$",
          _refused("mmlu", f"Okapi's MMLU translations are split into their own train/val/test: {NO_ID}")),
    Entry(r"^truthfulqa_[a-z]{2}_mc[12]$",
          _refused("truthfulqa_mc1", f"Okapi translated TruthfulQA: {NO_ID}")),
    Entry(r"^arc_challenge_mt_[a-z]{2}$",
          _refused("arc_challenge", f"machine-translated ARC-Challenge: {NO_ID}")),
    Entry(r"^global_mmlu_\w+$",
          _refused("mmlu", f"Global-MMLU's sample ids name MMLU's items, but {NO_ID}")),
    Entry(r"^mmmlu_[a-z]{2}_\w+$",
          _refused("mmlu", f"OpenAI's MMMLU translates MMLU's test split: {NO_ID}")),
    Entry(r"^mmlu_prox_\w+$",
          _refused("mmlu_pro", f"MMLU-ProX keeps MMLU-Pro's question_id in its dataset, but {NO_ID}")),
    Entry(r"^xcopa_[a-z]{2}$",
          _refused("copa", "XCOPA translates COPA's test split, which lm-eval's copa (validation only) does not read")),
)


def translation_for(leaf: str) -> Translation | None:
    """The shipped link of an lm-eval leaf task, or None (a task that translates nothing, or is its own source)."""
    for e in TABLE:
        if re.match(e.pattern, leaf) and leaf != e.translation.of:
            return replace(e.translation)
    return None
