"""Small renderers for asset metadata and reports: markdown tables and embedded PNG plots."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Mapping, Sequence


def fmt(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 1e4 else f"{value:.4g}"
    return str(value)


def md_table(headers: Sequence[str], rows: Sequence[Sequence]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def metrics_md(metrics: Mapping[str, float | None]) -> str:
    return md_table(["metric", "value"], [(k, v) for k, v in metrics.items()])


def png_markdown(path: str | Path, alt: str = "plot") -> str:
    """The PNG inlined as a data URL, so the plot shows in the Dagster UI without a file server."""
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return f"![{alt}](data:image/png;base64,{data})"


def histogram_png(groups: Mapping[str, Sequence[float]], xlabel: str, path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    for label, values in groups.items():
        if values:
            ax.hist(values, bins=30, alpha=0.55, label=f"{label} (n={len(values)})")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("items")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
