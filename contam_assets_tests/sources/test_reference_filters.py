"""decon's reference filters counted part by part: the same skips as decon's formula on the whole record text.

`apply_decon_filters` tokenizes each distinct cleaned question / answer / passage once and adds the
counts (the word rule: every tokenizer encodes " ".join of cleaned texts as their ids back to back).
These tests recompute decon's own formula, one encode of the record's combined text, on real GSM8K,
MMLU and ARC records for all three tokenizers, and on a record whose parts are not in cleaned form.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from contam_assets.defs.resources import DEFAULT_TASKS_DIR
from contam_assets.detector.config import preset
from contam_assets.detector.record_tokens import ChunkTexts
from contam_assets.detector.text import clean_text
from contam_assets.detector.tokenize import get_tokenizer
from contam_assets.sources import reference, reference_filters
from contam_assets.sources.registry import load_registry


def decon_skip(records: list[dict], cfg, clean=clean_text) -> list[str | None]:
    """decon's rules, straight: clean each field, join, encode the whole text, count, dedup per suite."""
    tok, opts, seen, out = get_tokenizer(cfg.tokenizer), cfg.clean_options, set(), []
    for r in records:
        parts = ([clean(r["passage"], opts)] if cfg.index_passages and r["passage"] else []) + [clean(r["question"], opts)]
        parts += [clean(r["answer"], opts)] if cfg.index_answers and r["answer"] else []
        text = " ".join(p for p in parts if p)
        key = (r["suite"], r.get("fingerprint") if cfg.dedup_by == "fingerprint"
               else reference.fingerprint(r["passage"], r["question"], r["answer"]))
        reason = None
        if cfg.eval_min_token_length and tok.count_non_space(tok.encode(text)) < cfg.eval_min_token_length:
            reason = "min_tokens"
        elif cfg.eval_min_unique_words and len(set(text.split())) < cfg.eval_min_unique_words:
            reason = "min_unique_words"
        elif cfg.eval_dedup and key[1] is not None and key in seen:
            reason = "duplicate"
        elif not clean(r["question"], opts):
            reason = "empty_question"
        if cfg.eval_dedup and reason is None and key[1] is not None:
            seen.add(key)
        out.append(reason)
    return out


@pytest.fixture(scope="module")
def raw_records(shared_data) -> list[dict]:
    """GSM8K, MMLU (four records per question) and ARC, before the filters, plus planted short ones."""
    cfg = preset("default")
    stats = reference.ReferenceStats()
    records = []
    for spec in load_registry(DEFAULT_TASKS_DIR, only=["gsm8k", "mmlu", "arc_easy"]):
        records.extend(reference.rows_for_task(spec, shared_data, stats, derived_suites=cfg.derived_suites)[:6000])
    base = records[0]
    records += [dict(base, question="one two three", answer="four"),  # too few tokens
                dict(base, question="a a a a a a a a a a a a a a a a a a a a a a a a", answer=None),  # too few words
                dict(base, question="", answer="an answer with enough words in it to pass the token count easily")]
    return records


@pytest.mark.parametrize("tokenizer", ["cl100k", "word", "bytes"])
def test_filters_equal_decon_formula(raw_records, tokenizer):
    cfg = preset("default").replace(tokenizer=tokenizer)
    recs = copy.deepcopy(raw_records)
    reference.apply_decon_filters(recs, cfg)
    expected = decon_skip(raw_records, cfg)
    assert [r["skip_reason"] for r in recs] == expected
    assert [r["indexed"] for r in recs] == [e is None for e in expected]
    reasons = set(expected)
    assert {None, "min_tokens", "duplicate"} <= reasons  # the real data exercises the rules, not only the default
    assert "min_unique_words" in reasons or tokenizer != "cl100k"


def test_parts_not_in_cleaned_form_are_encoded_whole(raw_records, monkeypatch):
    """A cleaner that keeps double spaces: those records are encoded as one text, as decon encodes them."""
    cfg = preset("default")
    sloppy = lambda text, opts=None: (text or "").lower().replace("\n", "  ")  # noqa: E731

    class SloppyTexts(ChunkTexts):  # the filters' texts cleaned by it, and tokenized from what it gives
        def __init__(self, records, cfg):
            super().__init__(records, cfg)
            tok = get_tokenizer(cfg.tokenizer)
            self.cleaned = {t: sloppy(t) for t in self.cleaned}
            self.ids = {t: tok.encode(c) for t, c in self.cleaned.items()}

    monkeypatch.setattr(reference_filters, "ChunkTexts", SloppyTexts)
    recs = [dict(r) for r in raw_records[:400]] + [
        dict(raw_records[0], question="x " * 9 + " ", answer="  y\n" * 12)]
    got = copy.deepcopy(recs)
    reference.apply_decon_filters(got, cfg)
    assert [r["skip_reason"] for r in got] == decon_skip(recs, cfg, clean=sloppy)


@pytest.mark.parametrize("tokenizer", ["cl100k", "word", "bytes"])
def test_count_non_space_many(tokenizer):
    tok = get_tokenizer(tokenizer)
    docs = [tok.encode(t) for t in ["", "hello world", "tabs\tand\nnewlines  here", "x"]]
    if tokenizer == "cl100k":
        docs.append(np.array([220, 2**63 + 5, 198], dtype=np.uint64))  # spaces, an id past the vocabulary
    assert tok.count_non_space_many(docs).tolist() == [tok.count_non_space(d) for d in docs]
    assert tok.count_non_space_many([]).tolist() == []
