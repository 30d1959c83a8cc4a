"""The one text normaliser of contam-assets.

Every piece of text that is compared with benchmark text (training documents,
reference instances, evaluation items) goes through :func:`clean_text` with the
same :class:`CleanOptions`, so both sides of a comparison are normalised alike.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# decon default punctuation set (config/default.yaml `punctuation_chars`).
DEFAULT_PUNCTUATION = "!'\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~\u201c\u201d\u2018\u2019\u2014"

_WS = re.compile(r"\s+")
# JSON / Python string escapes: \n \r \t \" \' \\ \/ and \uXXXX.
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|[nrtbf\"'\\/])")
_ESCAPE_MAP = {"n": "\n", "r": "\r", "t": "\t", "b": " ", "f": " ", '"': '"', "'": "'", "\\": "\\", "/": "/"}
# A "word" longer than this is cut into pieces before BPE encoding; BPE on a
# multi-megabyte run of letters is quadratic and would stall a shard.
MAX_WORD_CHARS = 256
_LONG_WORD = re.compile(r"\S{%d,}" % (MAX_WORD_CHARS + 1))


@dataclass(frozen=True)
class CleanOptions:
    punctuation: str = DEFAULT_PUNCTUATION
    # Beyond decon: undo JSON/Python string escapes first, so that a benchmark
    # item quoted inside a JSON or Python string literal still matches.
    # Set False for exact decon parity.
    unescape: bool = True


def _unescape_one(m: re.Match) -> str:
    s = m.group(1)
    if s[0] == "u":
        try:
            return chr(int(s[1:], 16))
        except ValueError:  # pragma: no cover - regex guarantees hex
            return " "
    return _ESCAPE_MAP[s]


def unescape(text: str) -> str:
    """Undo JSON and Python string escapes (``\\n``, ``\\"``, ``\\\\``, ``\\uXXXX``)."""
    if "\\" not in text:
        return text
    return _ESCAPE.sub(_unescape_one, text)


_TRANSLATION_CACHE: dict[str, dict[int, str]] = {}


def _translation(punctuation: str) -> dict[int, str]:
    table = _TRANSLATION_CACHE.get(punctuation)
    if table is None:
        table = {ord(c): " " for c in punctuation}
        _TRANSLATION_CACHE[punctuation] = table
    return table


def _split_long_words(text: str) -> str:
    return _LONG_WORD.sub(
        lambda m: " ".join(m.group(0)[i : i + MAX_WORD_CHARS] for i in range(0, len(m.group(0)), MAX_WORD_CHARS)),
        text,
    )


def clean_text(text: str, options: CleanOptions = CleanOptions()) -> str:
    """decon clean: lowercase, punctuation to spaces, collapse whitespace, trim."""
    if options.unescape:
        text = unescape(text)
    # decon rule: lowercase, then replace each punctuation char with a space
    text = text.lower().translate(_translation(options.punctuation))
    # decon rule: collapse runs of whitespace to one space and trim
    text = _WS.sub(" ", text).strip()
    if len(text) > MAX_WORD_CHARS and _LONG_WORD.search(text):
        text = _split_long_words(text)
    return text


def normalize_ws_case(text: str) -> str:
    """Case and whitespace normalisation only (used for 'exact' comparisons)."""
    return _WS.sub(" ", text.lower()).strip()


def words(text: str) -> list[str]:
    """Words of already-cleaned text."""
    return text.split()
