"""Small renderers for asset metadata and reports: markdown tables and embedded PNG plots."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

from contam_assets.report.render import md_table


def metrics_md(metrics: Mapping[str, float | None]) -> str:
    return md_table(["metric", "value"], [(k, v) for k, v in metrics.items()])


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
