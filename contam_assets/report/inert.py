"""Untrusted text made inert for the place it is shown: one function per display context.

Text from a pool (sources, ids, document text), a benchmark file (task names, questions) or a
file name (shard keys) is written by whoever wrote those files.  Shown as it is, it can be
Markdown (an image that calls out on every view, a phishing link), HTML or a terminal escape
sequence (a cleared screen, a rewritten line, a hyperlink).  Every place that shows such text
passes it through the function of its context:

    md_text(s)    Markdown, e.g. a table cell in Dagster metadata: every ASCII punctuation
                  character backslash-escaped (CommonMark: it is then a literal character), so
                  no link, image, autolink (``<http://..>``, and GFM's bare ``http://``,
                  ``www.`` and e-mail literals, which need a bare ``:``, ``.`` or ``@``),
                  raw HTML, entity or table syntax survives; newlines become spaces.
    html_text(s)  HTML element text or an attribute value: ``html.escape`` (quotes included).
    term_text(s)  the terminal: C0/C1 control characters (ESC, CSI, BEL, CR, backspace...) and
                  Unicode bidirectional overrides removed, tabs and newlines become spaces.

Each keeps the text readable: the characters a person reads are the same.
"""

from __future__ import annotations

import html
import re
import string

# C0 and C1 controls and DEL; the bidi embeddings, overrides and isolates (a "Trojan Source" line reads
# differently from what it is); the line and paragraph separators
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
_SPACES = re.compile("[\t\n\r\x0b\x0c\u2028\u2029]")
_MD_ESCAPE = str.maketrans({c: "\\" + c for c in string.punctuation})


def term_text(value: object) -> str:
    """``value`` as text safe to print to a terminal (one line; no control or bidi characters)."""
    return _CONTROL.sub("", _SPACES.sub(" ", str(value)))


def md_text(value: object, limit: int | None = None) -> str:
    """``value`` as inert Markdown inline text (one line), cut to ``limit`` characters before escaping."""
    text = term_text(value)
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text.translate(_MD_ESCAPE)


def html_text(value: object) -> str:
    """``value`` escaped for HTML text or a quoted attribute."""
    return html.escape(str(value), quote=True)
