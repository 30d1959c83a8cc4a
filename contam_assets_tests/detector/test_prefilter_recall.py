"""The prefilter never clears a document that the faithful scan flags or stores a candidate for.

Checked three ways on the reduced registry (GSM8K, HumanEval, GSM-Hard, MMLU a-c):
* planted suite: every row (flagged and stored near misses) with and without the prefilter is identical;
* adversarial documents (question pieces shuffled, scattered among other text,
  repeated, case-changed, glued into long words, with lone surrogates): every
  flagged document passes;
* the inequality behind the proof, on every document: when the n-gram keys a
  document holds could carry some record over its flag bar, the prefilter passes it.
"""

from __future__ import annotations

import random

import numpy as np
import polars as pl
import pytest

from contam_assets.demo import HostText
from contam_assets.detector.config import DetectConfig, preset
from contam_assets.detector.ngrams import ngram_hashes
from contam_assets.detector.prefilter import ensure_prefilter, flag_bar
from contam_assets.detector.text import clean_text
from contam_assets.detector.tokenize import get_tokenizer
from contam_assets.testing.throughput_planted import as_documents, build_detector, planted_documents, scan_rows

CFG = DetectConfig()


@pytest.fixture(scope="module")
def detector(shared_data):
    return build_detector(shared_data, CFG)


def adversarial_documents(records: pl.DataFrame, n: int = 400, seed: int = 9) -> list[str]:
    rng = random.Random(seed)
    host = HostText(seed)
    items = records.filter(~pl.col("derived") & pl.col("indexed")).sort("record_id").to_dicts()
    solutions = records.filter(pl.col("derived") & pl.col("indexed")).sort("record_id")["question"].to_list()
    docs = []
    for i in range(n):
        rec = rng.choice(items)
        q, a = rec["question"], rec["answer"] or ""
        words = q.split()
        style = i % 10
        if style == 0:  # pieces of the question in another order, scattered among host words
            k = rng.randint(4, 9)
            pieces = [" ".join(words[j : j + k]) for j in range(0, len(words), k)]
            rng.shuffle(pieces)
            text = " ".join(p + " " + (rng.choice(host.sentences) if rng.random() < 0.3 else "") for p in pieces) + " " + a
        elif style == 1:  # every piece twice, overlapping
            text = " ".join(" ".join(words[j : j + 7]) for j in range(0, len(words), 3)) + "\n" + a
        elif style == 2:  # shouting, odd spacing and punctuation
            text = "\n\t".join(w.upper() + rng.choice(["", ",", "!!", "\u2014"]) for w in words) + " " + a.upper()
        elif style == 3:  # glued to a long word before and after
            text = "x" * rng.randint(200, 300) + q + "y" * rng.randint(0, 300) + " " + a
        elif style == 4:  # lone surrogate somewhere
            text = host.paragraph() + " \ud800 " + q + "\n" + a
        elif style == 5:  # a few words replaced
            text = " ".join(rng.choice(host.sentences).split()[0] if rng.random() < 0.08 else w for w in words) + "\n" + a
        elif style == 6:  # escaped inside JSON, and a NUL byte
            text = '{"q": "' + q.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"}\x00' + a
        elif style == 7:  # a solution alone
            text = "snippet:\n" + rng.choice(solutions)
        elif style == 8:  # two items in one document
            other = rng.choice(items)
            text = f"{other['question']}\n{host.paragraph()}\n{q}\n{a}"
        else:  # plain copy inside host text
            text = f"{host.paragraph()}\n{q}\n{a}\n{host.paragraph()}"
        docs.append(text)
    return docs


def flagged_lines(rows: list[dict]) -> set[int]:
    return {r["line"] for r in rows if r["flagged"]}


def test_planted_suite_flags_are_identical_with_the_prefilter(detector, shared_data):
    records, index, ref = detector
    texts = [t for _, t in planted_documents(records, shared_data)]
    plain, c0 = scan_rows(as_documents(texts), index, ref, CFG)
    with_pf, c1 = scan_rows(as_documents(texts), index, ref, CFG.replace(prefilter=True))
    assert flagged_lines(plain)  # the suite does flag documents
    assert [r for r in plain if r["flagged"]] == [r for r in with_pf if r["flagged"]]
    # every row, near misses included: the prefilter's bar is the stored candidates' (anchors.keep_bar)
    assert any(not r["flagged"] for r in plain) and plain == with_pf
    # documents cleared by the prefilter count as scanned; nothing is lost from the counts
    assert c1["prefiltered"] > 0 and c1["scanned"] + c1["too_short"] == c0["scanned"] + c0["too_short"]


def test_adversarial_documents_that_are_flagged_always_pass(detector):
    records, index, ref = detector
    texts = adversarial_documents(records)
    rows, _ = scan_rows(as_documents(texts), index, ref, CFG)
    flagged = flagged_lines(rows)
    assert len(flagged) > len(texts) // 4  # the construction does produce flags
    keep = ensure_prefilter(index, records, CFG.replace(prefilter=True)).must_scan(texts, CFG.clean_options)
    missed = sorted(i for i in flagged if not keep[i])
    assert not missed, [texts[i][:200] for i in missed]


def test_the_bound_holds_on_every_document(detector, shared_data):
    """Where the keys present in a document carry a record to its flag bar, the document passes."""
    records, index, _ = detector
    tok = get_tokenizer(CFG.tokenizer)
    texts = adversarial_documents(records, n=300, seed=4) + [t for _, t in planted_documents(records, shared_data, n=160, seed=5)]
    keep = ensure_prefilter(index, records, CFG.replace(prefilter=True)).must_scan(texts, CFG.clean_options)
    bar = flag_bar(CFG, index.q_len) * index.q_idf_sum
    reachable_bar = 0
    for text, k in zip(texts, keep):
        ids = tok.encode(clean_text(text, CFG.clean_options))
        if len(ids) < CFG.ngram_size:
            continue
        keys = np.unique(index.lookup(ngram_hashes(ids, CFG.ngram_size)))
        keys = keys[keys >= 0]
        if not len(keys):
            continue
        mass = np.zeros(index.n_records)
        for key in keys.tolist():
            mass[index.postings(key)] += index.q_idf[key]
        if (mass >= bar).any():
            reachable_bar += 1
            assert k, text[:200]
    assert reachable_bar > 50


def test_host_text_is_cleared_and_special_bytes_force_a_scan(detector):
    records, index, _ = detector
    pf = ensure_prefilter(index, records, CFG.replace(prefilter=True))
    host = HostText(3)
    plain = [host.document() for _ in range(200)]
    keep = pf.must_scan(plain, CFG.clean_options)
    assert keep.mean() < 0.2  # most text without benchmark items is not tokenized at all
    forced = ["a lone surrogate \udc80 here", "a run " + "z" * 257 + " of letters", "short \u00e9\u0301 \u4e2d"]
    k = pf.must_scan(forced, CFG.clean_options)
    assert k[0] and k[1]
    assert pf.must_scan([], CFG.clean_options).shape == (0,)


def test_another_preset_rebuilds_the_prefilter_and_stays_safe(detector):
    records, index, ref = detector
    web = preset("olmo-web")  # another flag bar (threshold 0.88, decay 25-50), same index keys
    # olmo-web also changes what is indexed, so use only its scan-time knobs on this index
    cfg = CFG.replace(threshold=web.threshold, decay_start=web.decay_start, decay_end=web.decay_end, prefilter=True)
    pf = ensure_prefilter(index, records, cfg)
    assert pf.matches(cfg) and not pf.matches(CFG.replace(prefilter=True))
    texts = adversarial_documents(records, n=200, seed=21)
    rows, _ = scan_rows(as_documents(texts), index, ref, cfg.replace(prefilter=False))
    keep = pf.must_scan(texts, cfg.clean_options)
    assert all(keep[i] for i in flagged_lines(rows))


def test_word_tokenizer_prefilter_is_safe(shared_data):
    cfg = DetectConfig(tokenizer="word")
    records, index, ref = build_detector(shared_data, cfg)
    texts = adversarial_documents(records, n=200, seed=13)
    rows, _ = scan_rows(as_documents(texts), index, ref, cfg)
    keep = ensure_prefilter(index, records, cfg.replace(prefilter=True)).must_scan(texts, cfg.clean_options)
    flagged = flagged_lines(rows)
    assert flagged and all(keep[i] for i in flagged)
