"""Span removal (`--removal span`): the cut of one JSONL line, and matched tokens mapped back to characters.

GPT-3's rule: each matched span goes with 200 characters on either side; overlapping cuts
merge; the pieces left are kept.  The end-to-end run (mix, cuts table, conservation) is in
test_thorough_commands.py.
"""

from __future__ import annotations

import json
import random

import pytest

from contam_assets.detector.config import DetectConfig
from contam_assets.detector.spans import char_spans
from contam_assets.detector.text import CleanOptions, clean_spans, clean_text, clean_words
from contam_assets.detector.tokenize import get_tokenizer
from contam_assets.store.cuts import MARGIN, cut_spans

HOST = "".join(chr(97 + i % 26) for i in range(1000))  # 1,000 letters, no spaces: cut positions are easy to read


def line(text: str, **extra) -> bytes:
    return json.dumps({"id": "d1", "text": text, **extra}, ensure_ascii=False).encode()


# (variant, text, spans, margin, expected kept text (None: dropped), expected cuts as (cut_start, cut_end))
CASES = [
    ("middle_span", HOST, [(500, 520)], MARGIN, HOST[:300] + "\n" + HOST[720:], [(300, 720)]),
    ("span_at_start_clipped", HOST, [(50, 60)], MARGIN, HOST[260:], [(0, 260)]),
    ("span_at_end_clipped", HOST, [(950, 990)], MARGIN, HOST[:750], [(750, 1000)]),
    ("two_far_spans_two_cuts", HOST, [(300, 310), (800, 810)], 100, HOST[:200] + "\n" + HOST[410:700] + "\n" + HOST[910:],
     [(200, 410), (700, 910)]),
    ("overlapping_margins_merge", HOST, [(300, 310), (500, 510)], 100, HOST[:200] + "\n" + HOST[610:], [(200, 610)]),
    ("unsorted_spans", HOST, [(800, 810), (300, 310)], 100, HOST[:200] + "\n" + HOST[410:700] + "\n" + HOST[910:],
     [(200, 410), (700, 910)]),
    ("whole_document_dropped", HOST[:300], [(100, 200)], MARGIN, None, [(0, 300)]),
    ("empty_span_ignored", HOST, [(500, 500)], MARGIN, HOST, []),
    ("unicode_counted_in_characters", "é" * 400 + "Q" * 10 + "ü" * 400, [(400, 410)], MARGIN, "é" * 200 + "\n" + "ü" * 200,
     [(200, 610)]),
]


@pytest.mark.parametrize("variant,text,spans,margin,kept,cuts", CASES, ids=[c[0] for c in CASES])
def test_cut_spans(variant, text, spans, margin, kept, cuts):
    new, got = cut_spans(line(text, source="web"), "text", spans, margin)
    assert [(c["cut_start"], c["cut_end"]) for c in got] == cuts
    for c in got:  # the removed text is exactly what was cut, and the matched span lies inside it
        assert c["removed_text"] == text[c["cut_start"] : c["cut_end"]]
        assert c["cut_start"] <= c["span_start"] < c["span_end"] <= c["cut_end"]
    if kept is None:
        assert new is None
        return
    obj = json.loads(new)
    assert obj["text"] == kept
    assert list(obj) == ["id", "text", "source"] and obj["id"] == "d1" and obj["source"] == "web"  # other keys, in order


def test_cut_spans_other_content_key_and_no_newline_in_output():
    new, cuts = cut_spans(line("x", body=HOST), "body", [(10, 20)])
    assert json.loads(new)["body"] == HOST[220:] and json.loads(new)["text"] == "x"
    assert b"\n" not in new and len(cuts) == 1  # one JSONL line stays one line


@pytest.mark.parametrize("raw,reason", [
    (b"not json", "not a JSON line"),
    (b"[1, 2]", "no string at key"),
    (b'{"text": 5}', "no string at key"),
    (b"\xff\xfe", "not a JSON line"),
], ids=["malformed", "array", "text_not_string", "not_utf8"])
def test_cut_spans_bad_lines_are_errors(raw, reason):
    with pytest.raises(ValueError, match=reason):
        cut_spans(raw, "text", [(0, 1)])


# -- token spans back to characters ----------------------------------------------------------

def _token_span(text: str, cfg: DetectConfig, phrase: str) -> tuple[int, int]:
    """(first, last) token of ``phrase``'s cleaned words inside ``text``'s cleaned tokens."""
    tok = get_tokenizer(cfg.tokenizer)
    words = clean_words(text, cfg.clean_options)
    counts = tok.word_token_counts(words)
    target = clean_words(phrase, cfg.clean_options)
    for i in range(len(words)):
        if words[i : i + len(target)] == target:
            start = int(counts[:i].sum())
            return start, start + int(counts[i : i + len(target)].sum()) - 1
    raise AssertionError(f"{phrase!r} not in {text!r}")


MAP_CASES = [
    ("plain", "Some host text. How many apples did Tom buy? More text.", "How many apples did Tom buy", DetectConfig()),
    ("json_escaped", 'pre {"q": "Line one\\nHow many apples did Tom buy?"} post', "How many apples did Tom buy", DetectConfig()),
    ("html_entities", "<p>a &lt; b and x &amp; y</p><p>How many apples did Tom buy?</p>", "How many apples did Tom buy",
     DetectConfig(markup=True)),
    ("word_tokenizer", "One two. How many apples did Tom buy? three", "How many apples did Tom buy", DetectConfig(tokenizer="word")),
    ("long_word_cut", "x" * 600 + " How many apples did Tom buy", "How many apples did Tom buy", DetectConfig()),
]


@pytest.mark.parametrize("variant,text,phrase,cfg", MAP_CASES, ids=[c[0] for c in MAP_CASES])
def test_char_spans_cover_the_matched_words(variant, text, phrase, cfg):
    t0, t1 = _token_span(text, cfg, phrase)
    n = len(get_tokenizer(cfg.tokenizer).encode_words([clean_words(text, cfg.clean_options)])[0])
    [(a, b)] = char_spans(text, cfg, [(t0, t1)], n_tokens=n)
    assert clean_text(text[a:b], cfg.clean_options) == clean_text(phrase, cfg.clean_options)


def test_char_spans_refuse_a_stale_token_count():
    text = "How many apples did Tom buy?"
    assert char_spans(text, DetectConfig(), [(0, 2)], n_tokens=999) is None
    assert char_spans(text, DetectConfig(), [(0, 999)]) is None


def test_clean_spans_equal_clean_text_on_random_markup_and_escapes():
    pieces = list("abXY Z,.;<>&/\\\"'#=-\n\t") + ["&lt;", "&gt;", "&amp;", "&amp;lt;", "<br>", "<b>", "</b>", "<p class='x'>",
                                                 "&#x27;", "\\n", "\\\\n", "\\u0041", "İ", "Σ", "ΟΔΟΣ ", "\u00a0", "<!-- c -->",
                                                 "x" * 300, "&nbsp", "]]>", "ß"]
    rng = random.Random(3)
    for opts in (CleanOptions(), CleanOptions(markup=True), CleanOptions(unescape=False, markup=True)):
        for _ in range(1500):
            text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 30)))
            words, spans = clean_spans(text, opts)
            assert " ".join(words) == clean_text(text, opts), text
            for w, (a, b) in zip(words, spans):  # every word came from inside its span
                assert 0 <= a < b <= len(text)
