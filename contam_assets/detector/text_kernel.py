"""text.translate_bytes' non-ASCII step compiled (numba): wide punctuation and whitespace to spaces, on UTF-8 bytes.

For text that is not ASCII, translate_bytes lowercases with str.lower, encodes to UTF-8 and
then needs every non-ASCII punctuation or whitespace character (CleanOptions.punctuation,
text._WIDE_SPACE) to become one space and every ASCII byte to go through the ASCII table.
A character-class regex on the str did the first (about 15 ns a character); this walk does
both on the bytes in one pass.  A lone surrogate (surrogatepass: ED A0-BF xx) is copied
as it is, like any character outside the set.  `test_throughput_reference_paths.py` holds
clean_text equal to its plain definition on random text.
"""

from __future__ import annotations

import numpy as np

from contam_assets.detector import compiled

AVAILABLE = compiled.numba_installed()


def _map_wide(src, wide, table, out):
    """UTF-8 ``src`` with each character whose code point is set in ``wide`` replaced by one space and each ASCII
    byte mapped by ``table``, into ``out``; returns the length written."""
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
        if cp < len(wide) and wide[cp]:
            out[o] = 32
            o += 1
        else:
            for j in range(k):
                out[o + j] = src[i + j]
            o += k
        i += k
    return o


if AVAILABLE:
    _map_wide = compiled.njit(nogil=True)(_map_wide)


def wide_set(chars: str) -> np.ndarray:
    """Boolean table over code points: True at every character of ``chars`` (all non-ASCII)."""
    cps = [ord(c) for c in chars]
    table = np.zeros((max(cps) + 1) if cps else 1, dtype=np.bool_)
    table[cps] = True
    return table


def map_wide(encoded: bytes, wide: np.ndarray, table: np.ndarray) -> bytes:
    src = np.frombuffer(encoded, dtype=np.uint8)
    out = np.empty(len(src), dtype=np.uint8)
    return out[: _map_wide(src, wide, table, out)].tobytes()
