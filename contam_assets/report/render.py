"""Small renderers for asset metadata: markdown tables and inline PNG images.

Every cell and header goes through ``inert.md_text``: text from a pool or a benchmark file is
shown as the characters it is, never as a link, an image or HTML."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Mapping, Sequence

from contam_assets.report.inert import md_text


def fmt(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 1e4 else f"{value:.4g}"
    return str(value)


def md_table(headers: Sequence[str] | None, rows: Sequence[Mapping | Sequence]) -> str:
    """A markdown table; rows are dicts (looked up by header) or sequences. No rows: "_none_"."""
    rows = list(rows)
    if not rows:
        return "_none_"
    if headers is None:
        headers = list(rows[0]) if isinstance(rows[0], Mapping) else [str(i) for i in range(len(rows[0]))]
    cell = lambda v: md_text(fmt(v), limit=120)
    lines = ["| " + " | ".join(md_text(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    for r in rows:
        values = [r.get(h) for h in headers] if isinstance(r, Mapping) else list(r)
        lines.append("| " + " | ".join(cell(v) for v in values) + " |")
    return "\n".join(lines)


def png_markdown_bytes(png: bytes, alt: str = "plot") -> str:
    """PNG bytes inlined as a data URL, so the plot shows in the Dagster UI without a file server."""
    return f"![{alt}](data:image/png;base64,{base64.b64encode(png).decode('ascii')})"


def png_markdown(path: str | Path, alt: str = "plot") -> str:
    return png_markdown_bytes(Path(path).read_bytes(), alt)
