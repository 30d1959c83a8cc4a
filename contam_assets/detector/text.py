"""The one text normaliser of contam-assets.

Every piece of text that is compared with benchmark text (training documents,
reference instances, evaluation items) goes through :func:`clean_text` with the
same :class:`CleanOptions`, so both sides of a comparison are normalised alike.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

import numpy as np

from contam_assets.detector import compiled

# decon default punctuation set (config/default.yaml `punctuation_chars`).
DEFAULT_PUNCTUATION = "!'\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~\u201c\u201d\u2018\u2019\u2014"

_WS = re.compile(r"\s+")
# JSON / Python string escapes: \n \r \t \" \' \/ and \uXXXX, behind ANY number of backslashes, so
# every escaping level of a text (verbatim, escaped once, escaped twice) cleans to the same words.
# (A text with a literal backslash, such as LaTeX "\norm", then cleans the same way in the
# benchmark and in a JSON-escaped copy of it.)  A run of backslashes before anything else is
# punctuation, i.e. a space, at every level.
_ESCAPE = re.compile(r"\\+(u[0-9a-fA-F]{4}|[nrtbf\"'/])")
_ESCAPE_MAP = {"n": "\n", "r": "\r", "t": "\t", "b": " ", "f": " ", '"': '"', "'": "'", "/": "/"}
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
    # Beyond decon (thorough preset): decode HTML/XML character references and remove tags, so an
    # item inside a web page (`&lt;`, `&gt;`, `<br>`, `<p>`) cleans to the same words as the item.
    markup: bool = False


def _unescape_one(m: re.Match) -> str:
    s = m.group(1)
    if s[0] == "u":
        try:
            return chr(int(s[1:], 16))
        except ValueError:  # pragma: no cover - regex guarantees hex
            return " "
    return _ESCAPE_MAP[s]


def unescape(text: str) -> str:
    """Undo JSON and Python string escapes (``\\n``, ``\\"``, ``\\uXXXX``) at any escaping depth."""
    if "\\" not in text:
        return text
    return _ESCAPE.sub(_unescape_one, text)


# -- markup (CleanOptions.markup) ------------------------------------------------------
# Character references exactly as html.unescape finds them (named with or without ";", decimal,
# hex); each is decoded by html.unescape on its own, which is what html.unescape does to a text.
_CHARREF = re.compile(r"&(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?)")
# A tag: comment, doctype / processing instruction, CDATA markers, or an element tag with attributes.
# A "<" followed by a space or digit ("a < b", "x<3") is no tag.
_TAG = re.compile(r"<!--.*?-->|<!\[CDATA\[|\]\]>|<[!?][^<>]*>|</?([A-Za-z][A-Za-z0-9:_.-]*)(?:\s[^<>]*)?/?>", re.S)
# Inline elements join the text around them ("<b>Na</b>Cl" is "NaCl"); every other tag separates words.
INLINE_TAGS = frozenset("a abbr b bdi bdo cite code del dfn em font i ins kbd mark q s samp small span strike strong "
                        "sub sup tt u var wbr".split())
MARKUP_PASSES = 3  # "&amp;lt;" (escaped twice) decodes to "<" in two passes; three is the most tried


def _charref(m: re.Match) -> str:
    return html.unescape(m.group(0))


def _tag(m: re.Match) -> str:
    name = m.group(1)
    return "" if name is not None and name.lower() in INLINE_TAGS else " "


def decode_markup(text: str) -> str:
    """Character references decoded, then tags removed, until nothing changes (at most MARKUP_PASSES).

    References first, so a tag written as entities (``&lt;b&gt;``) and the tag itself clean alike, and
    code whose ``<`` and ``>`` a page escaped cleans like the code.
    """
    for _ in range(MARKUP_PASSES):
        if "&" not in text and "<" not in text and "]]>" not in text:
            break
        new = _TAG.sub(_tag, _CHARREF.sub(_charref, text))
        if new == text:
            break
        text = new
    return text


def _decode(text: str, options: "CleanOptions") -> str:
    """The text-to-text steps before lowercasing: escapes undone, then markup decoded (per the options)."""
    if options.unescape and "\\" in text:
        text = _ESCAPE.sub(_unescape_one, text)
    if options.markup and ("&" in text or "<" in text or "]]>" in text):
        text = decode_markup(text)
    return text


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


def clean_text_reference(text: str, options: CleanOptions = CleanOptions()) -> str:
    """Plain definition of :func:`clean_text` (tests compare the two on random input)."""
    if options.unescape:
        text = unescape(text)
    if options.markup:
        text = decode_markup(text)
    # decon rule: lowercase, then replace each punctuation char with a space
    text = text.lower().translate(_translation(options.punctuation))
    # decon rule: collapse runs of whitespace to one space and trim
    text = _WS.sub(" ", text).strip()
    if len(text) > MAX_WORD_CHARS and _LONG_WORD.search(text):
        text = _split_long_words(text)
    return text


# -- fast path ------------------------------------------------------------------
# Same result as clean_text_reference, computed with C-level string operations on
# the UTF-8 bytes:
# * lowercase + ASCII punctuation + ASCII whitespace in one bytes.translate
#   (ASCII text: byte lowercasing is str.lower; other text is lowercased with
#   str.lower first, and UTF-8 multi-byte sequences never contain ASCII bytes);
# * non-ASCII punctuation and whitespace with one character-class substitution;
# * bytes.split() collapses and trims the spaces, which are then the only
#   whitespace left (the reference's re "\s+" and strip() use Python's isspace).
_FAST_CACHE: dict[str, tuple[bytes, bytes, re.Pattern]] = {}
_WIDE_SPACE = "".join(chr(c) for c in range(128, 0x3001) if chr(c).isspace())


def _fast_tables(punctuation: str) -> tuple[bytes, bytes, re.Pattern]:
    """(table for ASCII text, table for lowercased UTF-8 text, pattern of non-ASCII punctuation and space)."""
    t = _FAST_CACHE.get(punctuation)
    if t is None:
        punct = set(punctuation)
        # byte b of lowercased UTF-8 text -> space if punctuation or whitespace; multi-byte sequences untouched
        utf8 = bytes(32 if (chr(b) in punct or chr(b).isspace()) else b for b in range(128)) + bytes(range(128, 256))
        # byte b of ASCII text -> translate(lower(b)) in one step
        ascii_ = bytes(32 if (chr(b).lower() in punct or chr(b).isspace()) else ord(chr(b).lower()) for b in range(128)) + bytes(range(128, 256))
        wide = sorted({c for c in punctuation if ord(c) >= 128} | set(_WIDE_SPACE))
        pattern = re.compile("[" + "".join(re.escape(c) for c in wide) + "]")
        t = _FAST_CACHE[punctuation] = (ascii_, utf8, pattern)
    return t


def _split_long(words: list[bytes]) -> list[bytes]:
    out = []
    for w in words:
        if len(w) > MAX_WORD_CHARS:
            s = w.decode("utf-8", "surrogatepass")  # the limit counts characters, not bytes
            if len(s) > MAX_WORD_CHARS:
                out.extend(s[i : i + MAX_WORD_CHARS].encode("utf-8", "surrogatepass") for i in range(0, len(s), MAX_WORD_CHARS))
                continue
        out.append(w)
    return out


def translate_bytes(text: str, options: CleanOptions = CleanOptions(), errors: str = "surrogatepass") -> bytes:
    """UTF-8 bytes of ``text`` unescaped, lowercased, with punctuation and all whitespace as spaces.

    Splitting the result on spaces gives the cleaned words (before long words are cut);
    ``errors="strict"`` raises UnicodeEncodeError on lone surrogates.
    """
    text = _decode(text, options)
    ascii_table, utf8_table, wide = _fast_tables(options.punctuation)
    if text.isascii():
        return text.encode("ascii").translate(ascii_table)
    kernel = _WIDE_KERNEL.get(options.punctuation) or _wide_kernel(options.punctuation)
    if kernel[0] is not None and compiled.enabled():  # lower, the regex and the translate in one walk (text_kernel.py)
        out = kernel[0](text.encode("utf-8", errors), *kernel[1:])
        if out is not None:
            return out
    return wide.sub(" ", text.lower()).encode("utf-8", errors).translate(utf8_table)


_WIDE_KERNEL: dict[str, tuple] = {}


def _wide_kernel(punctuation: str) -> tuple:
    """(text_kernel.clean_bytes or None without numba, its code-point set, lowercase table, ASCII byte table)."""
    from contam_assets.detector import text_kernel

    ascii_table, _, _ = _fast_tables(punctuation)
    if not text_kernel.AVAILABLE:
        k = (None,)
    else:
        chars = "".join(sorted({c for c in punctuation if ord(c) >= 128} | set(_WIDE_SPACE)))
        k = (text_kernel.clean_bytes, text_kernel.wide_set(chars), text_kernel.lower_table(),
             np.frombuffer(ascii_table, dtype=np.uint8))
    _WIDE_KERNEL[punctuation] = k
    return k


def clean_words(text: str, options: CleanOptions = CleanOptions()) -> list[bytes]:
    """Words of the cleaned text as UTF-8 bytes: ``b" ".join(clean_words(t))`` is clean_text(t) encoded."""
    return split_translated(translate_bytes(text, options))


def split_translated(translated: bytes) -> list[bytes]:
    """Words of :func:`translate_bytes` output, long words cut: ``clean_words(t) == split_translated(translate_bytes(t))``."""
    words = translated.split()
    if words and max(map(len, words)) > MAX_WORD_CHARS:
        words = _split_long(words)
    return words


def join_words(words: list[bytes]) -> str:
    """The cleaned text of :func:`clean_words`' output."""
    return b" ".join(words).decode("utf-8", "surrogatepass")


def clean_text(text: str, options: CleanOptions = CleanOptions()) -> str:
    """decon clean: lowercase, punctuation to spaces, collapse whitespace, trim.

    Equal to :func:`clean_text_reference` for every input.
    """
    return join_words(clean_words(text, options))


def normalize_ws_case(text: str) -> str:
    """Case and whitespace normalisation only (used for 'exact' comparisons)."""
    return _WS.sub(" ", text.lower()).strip()


def words(text: str) -> list[str]:
    """Words of already-cleaned text."""
    return text.split()


# -- where each cleaned word came from ---------------------------------------------------

def _sub_mapped(pattern: re.Pattern, fn, text: str, start: list[int], end: list[int]) -> tuple[str, list[int], list[int]]:
    """``pattern.sub(fn, text)``, carrying each character's [start, end) in the original text along."""
    out, s2, e2, pos = [], [], [], 0
    for m in pattern.finditer(text):
        a, b = m.span()
        out.append(text[pos:a])
        s2 += start[pos:a]
        e2 += end[pos:a]
        r = fn(m)
        out.append(r)
        s2 += [start[a]] * len(r)
        e2 += [end[b - 1]] * len(r)
        pos = b
    out.append(text[pos:])
    return "".join(out), s2 + start[pos:], e2 + end[pos:]


def clean_spans(text: str, options: CleanOptions = CleanOptions()) -> tuple[list[str], list[tuple[int, int]]]:
    """The cleaned words of ``text`` and, for each, the [start, end) characters of ``text`` it came from.

    ``" ".join(words) == clean_text(text, options)`` (tests hold it on random input); a caller that
    relies on the spans may still compare the two and fall back.
    """
    start, end = list(range(len(text))), list(range(1, len(text) + 1))
    if options.unescape and "\\" in text:
        text, start, end = _sub_mapped(_ESCAPE, _unescape_one, text, start, end)
    if options.markup:
        for _ in range(MARKUP_PASSES):
            if "&" not in text and "<" not in text and "]]>" not in text:
                break
            new, s2, e2 = _sub_mapped(_CHARREF, _charref, text, start, end)
            new, s2, e2 = _sub_mapped(_TAG, _tag, new, s2, e2)
            if new == text:
                break
            text, start, end = new, s2, e2
    lowered = text.lower()
    if len(lowered) != len(text):  # a character whose lowercase is longer ("İ"): spread its span
        sizes = [len(c.lower()) for c in text]
        start = [s for n, s in zip(sizes, start) for _ in range(n)]
        end = [e for n, e in zip(sizes, end) for _ in range(n)]
    sep = set(options.punctuation)
    words, spans, cur = [], [], []
    for i, c in enumerate(lowered + " "):
        if c in sep or c.isspace():
            if cur:
                w = "".join(lowered[j] for j in cur)
                for k in range(0, len(w), MAX_WORD_CHARS):  # long words are cut as clean_text cuts them
                    piece = cur[k : k + MAX_WORD_CHARS]
                    words.append(w[k : k + MAX_WORD_CHARS])
                    spans.append((start[piece[0]], end[piece[-1]]))
                cur = []
        else:
            cur.append(i)
    return words, spans
