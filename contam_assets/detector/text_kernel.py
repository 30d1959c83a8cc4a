"""text.translate_bytes for text that is not ASCII, compiled (numba): lowercase, wide punctuation and
whitespace to spaces, ASCII through the table, in one walk over the UTF-8 bytes.

The plain path lowercases with str.lower, encodes, replaces every non-ASCII punctuation or whitespace
character (CleanOptions.punctuation, text._WIDE_SPACE) by one space with a character-class regex and
maps the ASCII bytes with bytes.translate.  This walk decodes each character, lowercases it by a table
(``lower_table``: str.lower of every code point that has a lowercase form), and writes one space, the
ASCII table's byte, or the lowercase character's UTF-8.  str.lower is not a per-character table for two
characters -- U+0130 (two characters in lowercase) and U+03A3 (final sigma depends on the next letter)
-- so a text holding either takes the plain path (the walk returns -1).  A lone surrogate
(surrogatepass: ED A0-BF xx) is copied as it is.  `test_scan_kernels.py` compares the walk with str.lower
on every code point, and `test_throughput_reference_paths.py` clean_text with its plain definition.
"""

from __future__ import annotations

import numpy as np

from contam_assets.detector import compiled

AVAILABLE = compiled.numba_installed()
PLAIN_PATH = (0x130, 0x3A3)  # str.lower is not one character to one character for these


def _map(src, wide, lower, table, out):
    """The cleaned bytes of UTF-8 ``src`` into ``out`` (at least twice ``src``'s length); returns the length
    written, or -1 when ``src`` holds a character the table cannot lowercase (PLAIN_PATH)."""
    n = len(src)
    i = 0
    o = 0
    while i < n:
        c = src[i]
        if c < 0x80:
            out[o] = table[c]
            o += 1
            i += 1
            continue
        if c >= 0xF0:
            k, cp = 4, np.int64(c & 0x07)
        elif c >= 0xE0:
            k, cp = 3, np.int64(c & 0x0F)
        else:
            k, cp = 2, np.int64(c & 0x1F)
        for j in range(1, k):
            cp = (cp << 6) | np.int64(src[i + j] & 0x3F)
        lc = cp
        if cp < len(lower):
            lc = lower[cp]
            if lc < 0:
                return -1
        if lc < len(wide) and wide[lc]:
            out[o] = 32
            o += 1
        elif lc == cp:
            for j in range(k):
                out[o + j] = src[i + j]
            o += k
        elif lc < 0x80:
            out[o] = table[lc]
            o += 1
        elif lc < 0x800:
            out[o] = 0xC0 | (lc >> 6)
            out[o + 1] = 0x80 | (lc & 0x3F)
            o += 2
        elif lc < 0x10000:
            out[o] = 0xE0 | (lc >> 12)
            out[o + 1] = 0x80 | ((lc >> 6) & 0x3F)
            out[o + 2] = 0x80 | (lc & 0x3F)
            o += 3
        else:
            out[o] = 0xF0 | (lc >> 18)
            out[o + 1] = 0x80 | ((lc >> 12) & 0x3F)
            out[o + 2] = 0x80 | ((lc >> 6) & 0x3F)
            out[o + 3] = 0x80 | (lc & 0x3F)
            o += 4
        i += k
    return o


if AVAILABLE:
    _map = compiled.njit(nogil=True)(_map)


def wide_set(chars: str) -> np.ndarray:
    """Boolean table over code points: True at every character of ``chars`` (all non-ASCII)."""
    cps = [ord(c) for c in chars]
    table = np.zeros((max(cps) + 1) if cps else 1, dtype=np.bool_)
    table[cps] = True
    return table


_LOWER: list = []


def lower_table() -> np.ndarray:
    """int32 over code points up to the last one str.lower changes: its lowercase code point, -1 for PLAIN_PATH."""
    if not _LOWER:
        # every cased character lies below U+20000 (planes 2 and up: CJK ideographs, tags, private use);
        # test_scan_kernels.py checks every code point against str.lower
        cps = [c for c in range(0x20000) if not 0xD800 <= c <= 0xDFFF and chr(c).lower() != chr(c)]
        table = np.arange(max(cps) + 1, dtype=np.int32)
        for c in cps:
            low = chr(c).lower()
            table[c] = ord(low) if len(low) == 1 else -1
        table[list(PLAIN_PATH)] = -1
        _LOWER.append(table)
    return _LOWER[0]


def clean_bytes(encoded: bytes, wide: np.ndarray, lower: np.ndarray, table: np.ndarray) -> bytes | None:
    """translate_bytes' result from the UTF-8 of the (decoded, not yet lowercased) text, or None: take the plain path."""
    src = np.frombuffer(encoded, dtype=np.uint8)
    out = np.empty(2 * len(src) + 4, dtype=np.uint8)
    n = _map(src, wide, lower, table, out)
    return None if n < 0 else out[:n].tobytes()
