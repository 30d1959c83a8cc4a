"""Across the checkpoints of an experiment: does familiarity with GSM8K go with the fresh-set gap?

GSM1k (Figure 8) relates a model's per-character log-likelihood of the GSM8K
test set to its GSM8K − GSM1k accuracy gap with Spearman's and Kendall's rank
correlations.  Here the points are the checkpoints of one experiment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

MIN_POINTS = 3


@dataclass(frozen=True)
class Point:
    checkpoint: str
    experiment: str
    loglik_per_char: float
    gap: float


@dataclass(frozen=True)
class Correlation:
    experiment: str
    n: int
    spearman: float | None
    spearman_p: float | None
    kendall: float | None
    kendall_p: float | None
    note: str = ""


def _finite(x) -> float | None:
    return float(x) if x is not None and math.isfinite(float(x)) else None


def correlate(points: Sequence[Point]) -> list[Correlation]:
    """One Correlation per experiment (None with a note when it cannot be computed)."""
    from scipy.stats import kendalltau, spearmanr

    out = []
    for exp in sorted({p.experiment for p in points}):
        group = [p for p in points if p.experiment == exp]
        x = [p.loglik_per_char for p in group]
        y = [p.gap for p in group]
        if len(group) < MIN_POINTS:
            out.append(Correlation(exp, len(group), None, None, None, None, f"needs at least {MIN_POINTS} checkpoints"))
            continue
        if len(set(x)) < 2 or len(set(y)) < 2:
            out.append(Correlation(exp, len(group), None, None, None, None, "a constant variable has no rank correlation"))
            continue
        s, k = spearmanr(x, y), kendalltau(x, y)
        out.append(Correlation(exp, len(group), _finite(s.statistic), _finite(s.pvalue), _finite(k.statistic), _finite(k.pvalue)))
    return out


def plot_points(points: Sequence[Point], path) -> None:
    """Scatter of gap (x) against per-character log-likelihood (y), one colour per experiment."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    for exp in sorted({p.experiment for p in points}):
        group = [p for p in points if p.experiment == exp]
        ax.scatter([p.gap for p in group], [p.loglik_per_char for p in group], label=exp)
        for p in group:
            ax.annotate(p.checkpoint.split("/", 1)[-1], (p.gap, p.loglik_per_char), fontsize=7, alpha=0.7)
    ax.set_xlabel("GSM8K accuracy − fresh-set accuracy")
    ax.set_ylabel("per-character log-likelihood, GSM8K test")
    if points:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
