"""What survives translation (crosslingual.py): numbers, capitalised names and code identifiers of a text, read once
per block with their places, so a sentence's anchors are the block's that lie in it (crosslingual_windows.py)."""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

NAME_PREFIX = 5
# English function words that are not words of Spanish, French, German, Italian, Portuguese or Dutch
EN_WORDS = frozenset(
    "the and of to is that with for are this have from they which were their has been would what there when who "
    "how it its at by be or not but his her she we you our them than then these those into about after before "
    "because could should each other only also any some such very just over your my can does did do if".split())
_NUMBER = re.compile(r"\d+(?:[.,\u00a0\u202f ]\d{3})*(?:[.,]\d+)?")
_NAME = re.compile(r"\b[A-ZÀ-ÖØ-Þ][a-zß-öø-ÿ]{2,}(?:[A-Z][a-z]+)*\b")
_IDENT = re.compile(r"\b[A-Za-z]+_[A-Za-z0-9_]+\b|\b[a-z]+[A-Z][A-Za-z0-9]*\b")
_NOT_DIGIT = re.compile(r"\D")


def anchor_places(text: str) -> list[tuple[int, int, str]]:
    """Each anchor read in ``text`` with its place, ``(start, end, anchor)``: numbers as ``#`` and their digits
    (separators and leading zeros dropped: ``80,000``, ``80 000`` and ``80.000`` alike; a zero is none), a name's
    first ``NAME_PREFIX`` letters with accents dropped (Normandy and Normandía, France and Francia meet; English
    function words written with a capital are none), code identifiers as written."""
    out = []
    for m in _NUMBER.finditer(text):
        digits = _NOT_DIGIT.sub("", m.group()).lstrip("0")
        if digits:
            out.append((m.start(), m.end(), "#" + digits))
    for m in _NAME.finditer(text):
        key = name_key(m.group())
        if key is not None:
            out.append((m.start(), m.end(), key))
    out += [(m.start(), m.end(), m.group()) for m in _IDENT.finditer(text)]
    return out


def anchors(text: str) -> set[str]:
    """The set of ``anchor_places``' anchors."""
    return {a for _, _, a in anchor_places(text)}


@lru_cache(maxsize=1 << 16)
def name_key(name: str) -> str | None:
    """A capitalised word's anchor: its first ``NAME_PREFIX`` letters, accents dropped; None for an English
    function word."""
    return None if name.lower() in EN_WORDS else fold(name)[:NAME_PREFIX]


def fold(word: str) -> str:
    return unicodedata.normalize("NFKD", word.lower()).encode("ascii", "ignore").decode()
