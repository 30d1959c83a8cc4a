"""The filters' fast paths give the plain expressions' answers: the unique-word minimum settled on a prefix of the
words (`reference_filters.too_few_unique_words`), the str.split form of a cleaned text (`in_str_split_form`), and a
chunk's cleaned text of translated bytes (`record_tokens.cleaned_form`)."""

from __future__ import annotations

import random

import pytest

from contam_assets.detector.record_tokens import cleaned_form
from contam_assets.detector.text import MAX_WORD_CHARS, join_words, split_translated, translate_bytes
from contam_assets.sources.reference_filters import in_str_split_form, too_few_unique_words

# whitespace str.split splits on and bytes.split does not: \x1c-\x1f and non-ASCII (\x85, \xa0, \u2000, \u3000)
STR_ONLY_SPACE = ["\x1c", "\x1d", "\x1e", "\x1f", "\x85", "\xa0", "\u2000", "\u200a", "\u3000"]

UNIQUE_WORD_TEXTS = {
    "empty": "",
    "only whitespace": " \t\n ",
    "three distinct": "one two three",
    "three distinct repeated": "one two three one two three",
    "exactly four": "one two three four",
    "exactly four, trailing space": "one two three four ",
    "four words, three distinct": "one two two three",
    "eight words (the prefix), three distinct": "a b c a b c a b",
    "eight words, four distinct": "a b c d a b c d",
    "nine words, trailing space after the prefix": "a b c a b c a b c ",
    "repeats in the prefix, new words later": "a a a a a a a a a b c d",
    "repeats in the prefix, too few later": "a a a a a a a a a b c a b c",
    "repeats in the prefix, the fourth word last": "x y x y x y x y x y x y x y z z z w",
    "four distinct in the prefix, long rest": "w x y z " + "a " * 50,
    "\\x1c separators": "a\x1cb\x1cc\x1cd",
    "\\x1c inside the prefix, too few": "a\x1ca a\x1ca a a a a a a b",
    "\\x85 separators": "a\x85b\x85c\x85d",
    "\\u3000 separators": "\u3042\u3000\u3044\u3000\u3046",
    "\\xa0 and \\u2000 separators": "a\xa0b\u2000c\u200ad\u3000e",
    "non-ASCII letters": "\xe9t\xe9 \xfcber \xdf \u65e5\u672c \xe9t\xe9",
    "non-ASCII letters, four": "\xe9t\xe9 \xfcber \xdf \u65e5\u672c",
    "case differs": "A a B b",
}


@pytest.mark.parametrize("minimum", [-1, 0, 1, 2, 4, 5, 9])
@pytest.mark.parametrize("name", list(UNIQUE_WORD_TEXTS))
def test_too_few_unique_words_is_the_set_of_every_word(name, minimum):
    text = UNIQUE_WORD_TEXTS[name]
    assert too_few_unique_words(text, minimum) == (len(set(text.split())) < minimum)


def test_the_planted_texts_reach_every_branch():
    """The default minimum (4): a text within the prefix, one the prefix passes, and one counted whole (either way)."""
    prefix = 2 * 4
    within = [t for t in UNIQUE_WORD_TEXTS.values() if len(t.split()) <= prefix]
    settled = [t for t in UNIQUE_WORD_TEXTS.values() if len(t.split()) > prefix and len(set(t.split()[:prefix])) >= 4]
    whole = [t for t in UNIQUE_WORD_TEXTS.values() if len(t.split()) > prefix and len(set(t.split()[:prefix])) < 4]
    assert within and settled
    assert {len(set(t.split())) < 4 for t in within} == {True, False}
    assert {len(set(t.split())) < 4 for t in whole} == {True, False}


def test_too_few_unique_words_on_random_texts():
    rng = random.Random(7)
    alphabet = ["a", "b", "c", "d", "e", "\xe9", "\u65e5", " ", " ", "\t", "\n"] + STR_ONLY_SPACE
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40)))
        for minimum in (1, 2, 3, 4, 6):
            assert too_few_unique_words(text, minimum) == (len(set(text.split())) < minimum), (text, minimum)


def bytes_cleaned(text: str) -> str:
    """A text in the form the filters' cleaned texts have: b" ".join(bytes.split()) of its UTF-8 bytes, decoded."""
    return b" ".join(text.encode("utf-8", "surrogatepass").split()).decode("utf-8", "surrogatepass")


SPLIT_FORM_TEXTS = ["", "a", "a b c", "3 4 7", "tab\tand  double space", " lead and trail "] + \
    [f"a{s}b" for s in STR_ONLY_SPACE] + [f"{s}a b" for s in STR_ONLY_SPACE] + [f"a b{s}" for s in STR_ONLY_SPACE] + \
    ["\xe9t\xe9 \xfcber", "\u65e5\u672c \u8a9e", "\xe9\x1cb", "\u3000", "\x85", "a \ud800 b"]


@pytest.mark.parametrize("text", SPLIT_FORM_TEXTS)
def test_in_str_split_form_of_cleaned_texts(text):
    cleaned = bytes_cleaned(text)
    assert in_str_split_form(cleaned) == (" ".join(cleaned.split()) == cleaned)


def test_the_planted_cleaned_texts_hold_both_answers_in_both_branches():
    cleaned = [bytes_cleaned(t) for t in SPLIT_FORM_TEXTS]
    for ascii_ in (True, False):
        assert {" ".join(c.split()) == c for c in cleaned if c.isascii() == ascii_} == {True, False}


def test_in_str_split_form_on_random_cleaned_texts():
    rng = random.Random(11)
    alphabet = ["a", "b", "\xe9", "\u65e5", " ", " ", "\t", "\n", "\r", "\x0b", "\x0c"] + STR_ONLY_SPACE
    for _ in range(5000):
        cleaned = bytes_cleaned("".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 20))))
        assert in_str_split_form(cleaned) == (" ".join(cleaned.split()) == cleaned), repr(cleaned)


def long_word_texts() -> list[bytes]:
    """Translated bytes around MAX_WORD_CHARS: words of that many bytes and one more, a long word of two-byte
    characters under and over the character limit, and texts whose length just allows a word over it."""
    n, two = MAX_WORD_CHARS, "\xe9".encode()
    return [b"", b" ", b"   ", b"a", b" a  b ", b"a\tb\nc\rd\x0be\x0cf", b"a\x1cb \xc2\x85 c", b"\xed\xa0\x80 x",
            b"x" * n, b"x" * (n + 1), b"x" * (2 * n + 5), b"a " + b"x" * (n + 1) + b" b",
            two * n, two * (n + 1), b"a " + two * (n + 1),
            b"a " * 3 + b"x" * (n - 1), b"a " * 3 + b"x" * n, b"a " * 3 + b"x" * (n + 1),
            b"a  " * 3 + b"x" * n, b"a  " * 3 + b"x" * (n - 5), b" " * (n + 1) + b"a", b"a" + b" " * (n + 5) + b"b"]


@pytest.mark.parametrize("translated", long_word_texts())
def test_cleaned_form_is_join_of_split_translated(translated):
    assert cleaned_form(translated) == join_words(split_translated(translated))


def test_the_planted_translated_texts_cut_long_words():
    texts = long_word_texts()
    assert any(split_translated(t) != t.split() for t in texts)  # a word cut
    assert any(len(t) > MAX_WORD_CHARS and split_translated(t) == t.split() for t in texts)  # long text, none cut


def test_cleaned_form_on_random_bytes_and_texts():
    rng = random.Random(5)
    pieces = [b"a", b"bc", "\xe9".encode(), "\u65e5".encode(), b" ", b"  ", b"\t", b"\n", b"\x1c", "\x85".encode()]
    for _ in range(2000):
        words = [rng.choice([b"x" * rng.choice([1, 100, 255, 256, 257, 300]), "\xe9".encode() * rng.choice([128, 200, 257])])
                 if rng.random() < 0.05 else rng.choice(pieces) for _ in range(rng.randrange(0, 60))]
        translated = b"".join(words)
        assert cleaned_form(translated) == join_words(split_translated(translated)), translated
    for _ in range(500):
        text = "".join(rng.choice(["Word", "\xc9t\xc9", "x" * 300, " ", ". ", "\n", "\u3000", "\\n"]) for _ in range(30))
        translated = translate_bytes(text)
        assert cleaned_form(translated) == join_words(split_translated(translated))
