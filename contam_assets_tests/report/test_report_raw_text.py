"""Token spans of the cleaned document, marked in the raw text a reviewer reads (report/raw_text.py).

Planted documents whose answer is known: the question sits verbatim, in other case and
punctuation, or JSON-escaped inside a string; the match's token span is found in the
cleaned document's tokens and must come back as the characters of the raw question.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from contam_assets.detector.text import CleanOptions, clean_words
from contam_assets.detector.tokenize import get_tokenizer
from contam_assets.report.raw_text import match_spans, read_lines

QUESTION = "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May."
ANSWER = "Natalia sold 48+24 = 72 clips altogether."


def _tokens(text: str, tokenizer: str) -> np.ndarray:
    return get_tokenizer(tokenizer).encode_words([clean_words(text, CleanOptions())])[0]


def _span(doc: str, part: str, tokenizer: str) -> tuple[int, int]:
    """Inclusive token span of `part` inside `doc` (cleaned, tokenized)."""
    d, p = list(_tokens(doc, tokenizer)), list(_tokens(part, tokenizer))
    for i in range(len(d) - len(p) + 1):
        if d[i : i + len(p)] == p:
            return i, i + len(p) - 1
    raise AssertionError("part not found in the document's tokens")


def _match(doc: str, tokenizer: str, answer: bool = True) -> dict:
    qs, qe = _span(doc, QUESTION, tokenizer)
    row = {"question_start": qs, "question_end": qe, "doc_tokens": len(_tokens(doc, tokenizer)),
           "answer_start": None, "answer_end": None, "passage_start": None, "passage_end": None}
    if answer:
        row["answer_start"], row["answer_end"] = _span(doc, ANSWER, tokenizer)
    return row


@pytest.mark.parametrize("tokenizer", ["cl100k", "word"])
def test_verbatim_question_and_answer_come_back_as_their_raw_characters(tokenizer):
    doc = f"Notes from class.\n\n{QUESTION}\n{ANSWER}\n\nEnd of notes."
    got = match_spans(doc, _match(doc, tokenizer), tokenizer)
    assert not got.note
    assert [(doc[s:e], k) for s, e, k in got.spans] == [(QUESTION, "question"), (ANSWER, "answer")]
    html = got.html()
    assert f'<mark class="question">{QUESTION}</mark>' in html and html.startswith("Notes from class.")


def test_case_punctuation_and_json_escapes_are_kept_and_marked():
    raw_q = QUESTION.upper().replace(",", " ,")
    doc = 'record = ' + json.dumps({"prompt": f"{raw_q}\n{ANSWER}"}) + "  # copied"
    got = match_spans(doc, _match(doc, "cl100k"), "cl100k")
    (qs, qe, kind), (as_, ae, akind) = got.spans
    assert (kind, akind) == ("question", "answer")
    # marks are whole chunks: the JSON string's opening quote stays with the first word, and the chunk
    # `MAY.\nNatalia` (an escaped newline, no space) goes to the answer, which wins where they overlap
    assert doc[qs:qe].startswith('"NATALIA SOLD') and "APRIL ," in doc[qs:qe]
    assert qe == as_ and doc[as_:ae].startswith("MAY.\\nNatalia") and doc[as_:ae].endswith('altogether."}')
    assert "&quot;NATALIA" in got.html() or "&#34;NATALIA" in got.html()  # escaped for HTML, not normalised


def test_a_stale_document_is_shown_unmarked_with_the_reason():
    doc = f"Notes.\n{QUESTION}\n{ANSWER}"
    row = _match(doc, "cl100k") | {"doc_tokens": 3}
    got = match_spans(doc, row, "cl100k")
    assert got.spans == [] and "tokens now" in got.note and got.text == doc


def test_pool_lines_are_read_raw_and_bad_lines_say_why(tmp_path):
    shard = tmp_path / "s.jsonl"
    shard.write_text(json.dumps({"text": "First DOC."}) + "\n" + "{broken\n" + json.dumps({"text": QUESTION}) + "\n")
    got = read_lines(tmp_path, "s.jsonl", {0, 1, 2, 7})
    assert got[0] == "First DOC." and got[2] == QUESTION
    assert isinstance(got[1], ValueError) and "malformed_json" in str(got[1])
    assert isinstance(got[7], LookupError)
