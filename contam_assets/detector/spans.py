"""Where a match lies in the document's own text: token positions back to character spans.

A match row gives token positions in the cleaned text (question_start ... answer_end);
span removal (store/cuts.py) needs the characters of the document they came from.
``text.clean_spans`` maps every cleaned word to its characters, and the word rule of
the tokenizer (tokenize.py: no token crosses a word boundary) maps tokens to words.
"""

from __future__ import annotations

import numpy as np

from contam_assets.detector.config import DetectConfig
from contam_assets.detector.text import clean_spans, clean_text
from contam_assets.detector.tokenize import get_tokenizer


def char_spans(text: str, cfg: DetectConfig, token_spans: list[tuple[int, int]],
               n_tokens: int | None = None) -> list[tuple[int, int]] | None:
    """[start, end) characters of ``text`` covering each inclusive (first, last) token span.

    None when the mapping is not exact: the words do not clean to what the scanner saw, or
    do not give ``n_tokens`` tokens (the text changed since the scan).
    """
    opts = cfg.clean_options
    words, spans = clean_spans(text, opts)
    if " ".join(words) != clean_text(text, opts):
        return None
    counts = get_tokenizer(cfg.tokenizer).word_token_counts([w.encode("utf-8", "surrogatepass") for w in words])
    off = np.concatenate([[0], np.cumsum(counts)])
    if n_tokens is not None and int(off[-1]) != n_tokens:
        return None
    out = []
    for t0, t1 in token_spans:
        if t1 < t0 or t0 < 0 or t1 >= off[-1]:
            return None
        w0 = int(np.searchsorted(off, t0, side="right")) - 1
        w1 = int(np.searchsorted(off, t1, side="right")) - 1
        out.append((spans[w0][0], spans[w1][1]))
    return out
