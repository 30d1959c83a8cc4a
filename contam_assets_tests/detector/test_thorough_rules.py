"""The thorough preset's rules, one planted case each, against decon's default.

A reduced registry of real items (GSM8K test, GSM-Hard, ARC-Easy, HumanEval, MMLU
subjects a-c); each case is one document whose answer we know.  Table tests:
(variant, document builder, what default does, what thorough does).
"""

from __future__ import annotations

import dataclasses
import html
import json
import re
from functools import lru_cache
from pathlib import Path

import polars as pl
import pytest

from contam_assets.defs.resources import DEFAULT_TASKS_DIR
from contam_assets.demo import HostText
from contam_assets.detector.config import PRESETS, THOROUGH_PARTS, DetectConfig, preset, with_parts
from contam_assets.detector.index_build import build_index
from contam_assets.detector.matches import Reference, scan_documents
from contam_assets.detector.prefilter import ensure_prefilter, flag_bar, rule_floor
from contam_assets.detector.text import CleanOptions, clean_text
from contam_assets.detector.tokenize import get_tokenizer
from contam_assets.quality.items import items_from_records
from contam_assets.sources.reference import build_reference_set
from contam_assets.sources.registry import load_registry
from contam_assets.store.pool import Document


def specs():
    out = []
    for s in load_registry(DEFAULT_TASKS_DIR, ["gsm8k", "gsm_hard", "arc_easy", "humaneval", "mmlu"]):
        if s.name == "gsm8k":
            s = dataclasses.replace(s, splits=tuple(sp for sp in s.splits if sp.name == "test"))
        if s.name == "mmlu":
            s = dataclasses.replace(s, splits=tuple(dataclasses.replace(sp, file="mmlu_test/[a-c]*_test.csv") for sp in s.splits))
        out.append(s)
    return out


@lru_cache(maxsize=2)
def detector(shared_data: Path, name: str):
    cfg = preset(name)
    records, _ = build_reference_set(specs(), shared_data, cfg)
    return cfg, records, build_index(records, cfg), Reference(records)


@pytest.fixture(scope="module")
def items(shared_data):
    _, records, _, _ = detector(shared_data, "default")
    its = [it for it in items_from_records(records) if it.indexed]
    return {"records": records, "by_task": {t: [it for it in its if it.task == t] for t in {it.task for it in its}}}


def scan(shared_data: Path, name: str, text: str, **overrides) -> list[dict]:
    cfg, _, index, ref = detector(shared_data, name)
    cfg = cfg.replace(**overrides) if overrides else cfg
    rows, _ = scan_documents([Document(line=0, doc_id="d", source=None, text=text, n_bytes=len(text), raw=b"")], "s",
                             index, ref, cfg, name)
    return rows


def rows_for(rows: list[dict], task: str, index: int) -> list[dict]:
    return [r for r in rows if r["task"] == task and r["instance_index"] == index]


HOST = HostText(5)


def wrap(block: str) -> str:
    return f"{HOST.paragraph()}\n\n{block}\n\n{HOST.paragraph()}"


def q_tokens(text: str) -> int:
    return len(get_tokenizer("cl100k").encode(clean_text(text)))


def gsm8k_item(items, min_words: int = 30):
    return next(it for it in items["by_task"]["gsm8k"] if len(it.question.split()) >= min_words
                and len(re.findall(r"\d+", it.question)) >= 3 and len(it.answer.split()) >= 30)


# -- the normaliser's markup option ------------------------------------------------------------

MARKUP = [
    ("entities", "x &lt; y &amp;&amp; y &gt; z", "x y y z"),
    ("tags_separate_words", "<p>first</p><p>second</p>", "first second"),
    ("inline_tags_join", "Na<b>Cl</b> is salt", "nacl is salt"),
    ("line_break_tag", "line one<br>line two", "line one line two"),
    ("escaped_twice", "&amp;lt;b&amp;gt;bold&amp;lt;/b&amp;gt;", "bold"),
    ("comment_and_doctype", "<!DOCTYPE html><!-- note -->text", "text"),
    ("less_than_is_no_tag", "if a < b and c > d", "if a b and c d"),
    ("numeric_references", "it&#x27;s &#8220;quoted&#8221;", "it s quoted"),
    ("markdown_escape_is_punctuation", r"foo\_bar \*x\*", "foo bar x"),
]


@pytest.mark.parametrize("variant,text,expected", MARKUP, ids=[m[0] for m in MARKUP])
def test_markup_decoding(variant, text, expected):
    assert clean_text(text, CleanOptions(markup=True)) == expected


def test_markup_is_off_in_decon_presets_and_joins_the_index_key():
    for name in ("default", "olmo-web", "olmo-synth"):
        assert not PRESETS[name].clean_options.markup and PRESETS[name].thorough_parts == []
    assert PRESETS["thorough"].thorough_parts == list(THOROUGH_PARTS)
    assert "markup" not in PRESETS["default"].reference_key() and PRESETS["thorough"].reference_key()["markup"] is True
    assert with_parts(PRESETS["default"], ["markup"]).clean_options.markup
    with pytest.raises(ValueError, match="unknown detector part"):
        with_parts(PRESETS["default"], ["nope"])


# -- one planted case per rule -------------------------------------------------------------------

def test_short_question_found_at_every_alignment(shared_data, items):
    """decon's every-10th lookup steps over a question under 14 tokens at some alignments; thorough never does."""
    it = next(i for i in items["by_task"]["arc_easy"] if 8 <= q_tokens(i.question) < 12 and i.gold is not None)
    block = it.question + "\n" + "\n".join(f"{'ABCD'[k]}. {c}" for k, c in enumerate(it.choices)) + f"\nAnswer: {'ABCD'[it.gold]}"
    default_hits, thorough_hits = 0, 0
    for pad in range(10):
        text = "word " * (20 + pad) + block + "\n" + "tail " * 20
        default_hits += any(r["flagged"] for r in rows_for(scan(shared_data, "default", text), "arc_easy", it.instance_index))
        thorough = [r for r in rows_for(scan(shared_data, "thorough", text), "arc_easy", it.instance_index) if r["flagged"]]
        thorough_hits += bool(thorough)
        assert all(r["reason"] == "question+answer" for r in thorough)
    assert default_hits < 10 and thorough_hits == 10


def test_html_wrapped_code(shared_data, items):
    it = items["by_task"]["humaneval"][3]
    page = f"<html><body><pre><code>{html.escape(it.question + it.answer)}</code></pre></body></html>"
    assert "&lt;" in page or "&gt;" in page or "&quot;" in page or "&#x27;" in page
    thorough = rows_for(scan(shared_data, "thorough", page), "humaneval", it.instance_index)
    assert any(r["flagged"] and not r["needs_review"] and r["suite"] == "humaneval" for r in thorough)


def test_question_only_is_held_for_review(shared_data, items):
    it = gsm8k_item(items)
    text = wrap(it.question)
    default = rows_for(scan(shared_data, "default", text), "gsm8k", it.instance_index)
    thorough = rows_for(scan(shared_data, "thorough", text), "gsm8k", it.instance_index)
    assert default and not any(r["flagged"] for r in default)  # decon stores it at 0.75, under the bar
    held = [r for r in thorough if r["reason"] == "question_only"]
    assert held and all(r["flagged"] and r["needs_review"] for r in held)


def test_answer_only_is_held_for_review(shared_data, items):
    it = gsm8k_item(items)
    text = wrap("Solution:\n" + it.answer)
    assert not rows_for(scan(shared_data, "default", text), "gsm8k", it.instance_index)
    thorough = rows_for(scan(shared_data, "thorough", text), "gsm8k", it.instance_index)
    assert thorough and all(r["suite"] == "gsm8k_answer" and r["reason"] == "answer_only" and r["needs_review"] for r in thorough)


def quiz_page(quiz) -> str:
    """GSM8K questions, and a key with the final answers at the end (seed 003: no single item reaches the bar)."""
    text = "Practice set\n\n" + "\n\n".join(f"{n}. {it.question}" for n, it in enumerate(quiz, 1))
    return text + "\n\nAnswer key\n" + "\n".join(f"{n}. {it.answer.split('####')[-1].strip()}" for n, it in enumerate(quiz, 1))


def test_quiz_page_with_the_key_elsewhere_is_a_dump(shared_data, items):
    quiz = [it for it in items["by_task"]["gsm8k"] if q_tokens(it.question) >= 30][:4]
    default = scan(shared_data, "default", quiz_page(quiz))
    thorough = scan(shared_data, "thorough", quiz_page(quiz))
    assert not any(r["flagged"] for r in default)
    for it in quiz:
        mine = rows_for(thorough, "gsm8k", it.instance_index)
        assert any(r["flagged"] and not r["needs_review"] and r["reason"] == "dump" for r in mine), it.instance_index


def test_one_item_with_a_shared_passage_is_no_dump(shared_data, items):
    """MMLU questions that share a long stem are one item at one place, not a dump."""
    text = wrap("For which of these two scenarios does the main character (who uses I/me/my) do something clearly "
                "morally wrong, according to ordinary moral standards in the US as of 2020?")
    assert not any(r["reason"] == "dump" for r in scan(shared_data, "thorough", text))


def _cut_middle(q: str, frac: float = 0.3) -> str:
    w = q.split(" ")
    k = round(len(w) * frac)
    a = (len(w) - k) // 2
    return " ".join(w[:a]) + " ... " + " ".join(w[a + k :])


def _insert_words(q: str, every: int = 9) -> str:
    w = q.split(" ")
    return " ".join(x + (" indeed" if i % every == every - 1 else "") for i, x in enumerate(w))


@pytest.mark.parametrize("variant,edit", [("middle_cut", _cut_middle), ("words_inserted", _insert_words)],
                         ids=["middle_cut", "words_inserted"])
def test_near_duplicates_are_flagged(shared_data, items, variant, edit):
    it = gsm8k_item(items, 40)
    text = wrap(f"Question: {edit(it.question)}\nAnswer: {it.answer}")
    default = rows_for(scan(shared_data, "default", text), "gsm8k", it.instance_index)
    thorough = rows_for(scan(shared_data, "thorough", text), "gsm8k", it.instance_index)
    assert not any(r["flagged"] and not r["needs_review"] for r in default)
    primary = [r for r in thorough if r["suite"] == "gsm8k" and r["flagged"]]
    assert primary and {r["reason"] for r in primary} == {"near_duplicate"} and not any(r["needs_review"] for r in primary)


def _mean_idf_share(shared_data: Path, it) -> tuple[int, float]:
    """(question tokens, its n-grams' mean idf over ln N) of one item, from the thorough index."""
    import numpy as np
    _, records, index, _ = detector(shared_data, "thorough")
    rids = records.filter((pl.col("task") == it.task) & (pl.col("split") == it.split) & pl.col("indexed")
                          & (pl.col("instance_index") == it.instance_index) & (pl.col("suite") == it.task))["record_id"]
    local = int(np.flatnonzero(np.isin(index.record_ids, rids.to_numpy()))[0])
    return int(index.q_len[local]), float(index.q_idf_sum[local] / index.q_unique[local] / np.log(len(index.q_len)))


def test_short_question_only_is_held_when_its_ngrams_are_rare(shared_data, items):
    """Under question_only_min_tokens a question found whole is held only when its n-grams' mean idf reaches the bar."""
    cfg = preset("thorough")
    lo, hi = cfg.question_only_short_min_tokens, cfg.question_only_min_tokens
    short = [(it, *_mean_idf_share(shared_data, it)) for it in items["by_task"]["arc_easy"][:300]
             if lo + 2 <= q_tokens(it.question) < hi - 2]
    rare, n, share = next((it, n, s) for it, n, s in short if lo <= n < hi and s >= cfg.question_only_short_min_idf + 0.05)
    text = wrap(rare.question)

    def held(**kw) -> bool:
        rows = rows_for(scan(shared_data, "thorough", text, **kw), "arc_easy", rare.instance_index)
        assert rows  # always stored: decon's candidate
        return any(r["reason"] == "question_only" and r["flagged"] and r["needs_review"] for r in rows)

    assert held()
    assert held(question_only_short_min_idf=share - 0.01) and not held(question_only_short_min_idf=share + 0.01)
    assert not held(question_only_short_min_tokens=n + 1)  # too short for the rule: stored, not held
    # the stems many MMLU items share sit under the bar: "Which of the following is true?" and its kin
    stems = [_mean_idf_share(shared_data, it)[1] for it in items["by_task"]["mmlu"]
             if it.question.strip() in ("Which of the following is true?", "Which of the following statements is true?",
                                        "Which of the following is not true?")]
    assert stems and max(stems) < cfg.question_only_short_min_idf


def _new_numbers(text: str) -> str:
    return re.sub(r"\d+", lambda m: str(int(m.group(0)) + 7), text)


def test_numbers_changed_is_a_template_neither_removed_nor_held(shared_data, items):
    it = gsm8k_item(items)
    text = wrap(f"Question: {_new_numbers(it.question)}\nAnswer: {_new_numbers(it.answer)}")
    rows = scan(shared_data, "thorough", text)
    mine = rows_for(rows, "gsm8k", it.instance_index)
    assert any(r["reason"] == "same_template" for r in mine)
    assert not any(r["flagged"] for r in rows)  # nothing removed, nothing held


def test_gsm_hard_changed_item_is_flagged_as_itself_and_a_template_of_gsm8k(shared_data, items):
    gsm8k = {it.instance_index: it for it in items["by_task"]["gsm8k"]}
    hard = next(it for it in items["by_task"]["gsm_hard"] if it.instance_index in gsm8k
                and clean_text(it.question) != clean_text(gsm8k[it.instance_index].question))
    rows = scan(shared_data, "thorough", wrap(f"Question: {hard.question}\nAnswer: {hard.answer}"))
    own = rows_for(rows, "gsm_hard", hard.instance_index)
    assert any(r["flagged"] for r in own)
    twins = {t["instance"]: t["relation"] for t in json.loads(next(r["twins"] for r in own if r["twins"]))}
    assert twins.get(f"gsm8k/test/{hard.instance_index}") in ("same_template", "near_duplicate")
    assert not any(r["flagged"] for r in rows if r["task"] == "gsm8k")  # the hard negative stays clean for GSM8K


def test_gsm_hard_items_are_reported_as_templates_of_their_gsm8k_twin(shared_data):
    """Inside a flagged GSM-Hard match the GSM8K item it changes is still reported, as same_template."""
    cfg, records, _, _ = detector(shared_data, "thorough")
    hard = records.filter((pl.col("task") == "gsm_hard") & pl.col("indexed") & pl.col("twins").is_not_null())
    cases = []
    for r in hard.head(400).iter_rows(named=True):
        twin = next((t["instance"] for t in json.loads(r["twins"])
                     if t["relation"] == "same_template" and t["instance"].startswith("gsm8k/test/")), None)
        if twin is not None:
            cases.append((r, int(twin.rsplit("/", 1)[1])))
    assert len(cases) >= 20
    missing = []
    for r, twin in cases[:60]:
        rows = scan(shared_data, "thorough", wrap(f"User: {r['question']}\n\nAssistant: {r['answer']}"))
        assert any(x["flagged"] for x in rows_for(rows, "gsm_hard", r["instance_index"]))  # the item itself
        mine = rows_for(rows, "gsm8k", twin)
        if not any(x["reason"] == "same_template" and not x["flagged"] for x in mine):
            missing.append((r["instance_index"], twin))
    assert not missing


def test_host_text_gives_nothing(shared_data):
    text = "\n\n".join(HOST.paragraph() for _ in range(6))
    assert scan(shared_data, "default", text) == [] and scan(shared_data, "thorough", text) == []


def test_decon_presets_give_decon_reasons_only(shared_data, items):
    it = gsm8k_item(items)
    for r in scan(shared_data, "default", wrap(f"Question: {it.question}\nAnswer: {it.answer}")):
        assert r["reason"] == "question+answer" and r["twins"] is None


def test_reference_overlap_finds_the_gsm_hard_twins(shared_data):
    _, records, _, _ = detector(shared_data, "thorough")
    prim = records.filter(~pl.col("derived") & (pl.col("task") == "gsm_hard") & pl.col("twins").is_not_null())
    assert prim.height > 1000  # nearly every GSM-Hard item re-states a GSM8K test item
    rels = {t["relation"] for v in prim["twins"].to_list() for t in json.loads(v)}
    assert {"identical", "same_template"} <= rels


# -- the prefilter stays safe ------------------------------------------------------------------

def test_prefilter_bar_covers_the_thorough_rules():
    cfg = PRESETS["thorough"]
    assert rule_floor(PRESETS["default"]) == 1.0 and rule_floor(cfg) <= 0.3
    bar = flag_bar(cfg, [10, 30, 60])
    assert (bar <= rule_floor(cfg)).all()
    assert rule_floor(with_parts(PRESETS["default"], ["dumps"])) == min(cfg.min_question_overlap, cfg.candidate_question_floor)
    assert rule_floor(with_parts(PRESETS["default"], ["question_only", "short_questions", "markup"])) == 1.0


def test_prefilter_passes_every_document_a_thorough_rule_flags(shared_data, items):
    it = gsm8k_item(items, 40)
    quiz = [i for i in items["by_task"]["gsm8k"] if q_tokens(i.question) >= 30][4:8]
    docs = [wrap(f"Question: {_cut_middle(it.question)}\nAnswer: {it.answer}"),
            wrap(f"Question: {_insert_words(it.question)}\nAnswer: {it.answer}"),
            quiz_page(quiz), wrap(it.question), "\n\n".join(HOST.paragraph() for _ in range(4))]
    cfg, _, index, ref = detector(shared_data, "thorough")
    batch = [Document(line=i, doc_id=str(i), source=None, text=t, n_bytes=len(t), raw=b"") for i, t in enumerate(docs)]
    plain, _ = scan_documents(batch, "s", index, ref, cfg, "thorough")
    filtered, counters = scan_documents(batch, "s", index, ref, cfg.replace(prefilter=True), "thorough")
    flagged = lambda rows: sorted((r["line"], r["suite"], r["instance_index"], r["reason"]) for r in rows if r["flagged"])  # noqa: E731
    assert flagged(plain) == flagged(filtered) and len({x[0] for x in flagged(plain)}) >= 3
    # at the lowered bar a question whose hot n-grams alone reach it cannot be covered: then the prefilter
    # passes every document (safe, and no faster: docs/detector.md)
    pf = ensure_prefilter(index, ref.records, cfg)
    assert counters["prefiltered"] == (0 if pf.always_pass else counters["prefiltered"]) and (pf.always_pass or counters["prefiltered"] >= 1)


def test_config_digests_of_decon_presets_ignore_the_thorough_fields():
    assert DetectConfig().digest() == dataclasses.replace(DetectConfig(), question_only_overlap=0.95).digest()
    assert DetectConfig().digest() != DetectConfig(markup=True).digest()


def test_minhashes_equal_datasketch_generator_and_containment_is_exact(shared_data):
    """The near-duplicate stage's two speedups change no value: one shared starting MinHash gives
    MinHash.generator's signatures, and the batched containment equals minhash.containment per unit."""
    import numpy as np
    from datasketch import MinHash

    from contam_assets.detector.minhash import NUM_PERM, containment, minhashes, shingle_set
    from contam_assets.detector.neardup import ENSEMBLE_THRESHOLD
    from contam_assets.detector.thorough import ensure_extras

    rng = np.random.default_rng(3)
    sets = [np.unique(rng.integers(0, 2**63, int(rng.integers(1, 60)), dtype=np.uint64)) for _ in range(40)]
    ours = minhashes(sets)
    theirs = MinHash.generator((s.tolist() for s in sets), num_perm=NUM_PERM, hashfunc=int, scheme="affine64")
    assert all(np.array_equal(a.hashvalues, b.hashvalues) for a, b in zip(ours, theirs, strict=True))
    cfg, records, index, _ = detector(shared_data, "thorough")
    ndx = ensure_extras(index, records, cfg).near
    checked = 0
    for unit in [u for u in ndx.sets if len(ndx.units[u].masked) >= 30][:50]:
        masked = ndx.units[unit].masked
        for lo, hi in ((0, len(masked) - 1), (5, len(masked) // 2)):
            s = shingle_set(masked[lo : hi + 1])
            lsh = sorted(ndx.ensemble.query(minhashes([s])[0], len(s)))
            expected = [u for u in lsh if containment(s, ndx.sets[u]) >= ENSEMBLE_THRESHOLD]
            assert ndx.candidates(masked, lo, hi) == expected
            checked += len(lsh)
    assert checked > 100
