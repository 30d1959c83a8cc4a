"""Does familiarity with GSM8K go with the fresh-set gap?  Across models, as GSM1k asks; within a run, apart.

GSM1k (Zhang et al. 2024, Figure 8) relates each *model's* per-character
log-likelihood of the GSM8K test set to its GSM8K − GSM1k accuracy gap, with
Spearman's and Kendall's rank correlations over models.  Here a model is an
experiment, represented by its latest checkpoint (highest step): the
``across-experiments`` row, with experiment ``*``.

The checkpoints of one run are a different question: both variables move
with the training step (the model gets better at everything), so their
correlation within a run says little about memorisation.  That view is kept,
labelled ``within-run``, one row per experiment, and plotted apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

MIN_POINTS = 3
ACROSS, WITHIN = "across-experiments", "within-run"


@dataclass(frozen=True)
class Point:
    checkpoint: str
    experiment: str
    loglik_per_char: float
    gap: float
    step: int | None = None


@dataclass(frozen=True)
class Correlation:
    experiment: str  # "*" for the across-experiments row
    n: int
    spearman: float | None
    spearman_p: float | None
    kendall: float | None
    kendall_p: float | None
    note: str = ""
    scope: str = WITHIN


def _finite(x) -> float | None:
    return float(x) if x is not None and math.isfinite(float(x)) else None


def _rank_correlation(experiment: str, scope: str, group: Sequence[Point], what: str, note: str = "") -> Correlation:
    from scipy.stats import kendalltau, spearmanr

    x = [p.loglik_per_char for p in group]
    y = [p.gap for p in group]
    if len(group) < MIN_POINTS:
        return Correlation(experiment, len(group), None, None, None, None, f"needs at least {MIN_POINTS} {what}", scope)
    if len(set(x)) < 2 or len(set(y)) < 2:
        return Correlation(experiment, len(group), None, None, None, None, "a constant variable has no rank correlation",
                           scope)
    s, k = spearmanr(x, y), kendalltau(x, y)
    return Correlation(experiment, len(group), _finite(s.statistic), _finite(s.pvalue), _finite(k.statistic),
                       _finite(k.pvalue), note, scope)


def latest_per_experiment(points: Sequence[Point]) -> list[Point]:
    """Each experiment's checkpoint with the highest step (the last listed when no step is known)."""
    chosen: dict[str, Point] = {}
    for p in points:
        best = chosen.get(p.experiment)
        if best is None or (p.step if p.step is not None else -1) >= (best.step if best.step is not None else -1):
            chosen[p.experiment] = p
    return [chosen[e] for e in sorted(chosen)]


def across_experiments(points: Sequence[Point]) -> Correlation:
    """GSM1k's analysis: one point per experiment (its latest checkpoint)."""
    latest = latest_per_experiment(points)
    note = "latest checkpoint of each: " + ", ".join(p.checkpoint for p in latest)
    return _rank_correlation("*", ACROSS, latest, "experiments (models)", note)


def within_run(points: Sequence[Point]) -> list[Correlation]:
    """One Correlation per experiment over its own checkpoints (driven by training step)."""
    out = []
    for exp in sorted({p.experiment for p in points}):
        group = [p for p in points if p.experiment == exp]
        out.append(_rank_correlation(exp, WITHIN, group, "checkpoints"))
    return out


def correlate(points: Sequence[Point]) -> list[Correlation]:
    """The across-experiments row first, then the within-run rows."""
    return [across_experiments(points)] + within_run(points)


def plot_points(points: Sequence[Point], path, across: bool = True) -> None:
    """Gap (x) against per-character log-likelihood (y): one point per experiment, or every checkpoint per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = latest_per_experiment(points) if across else list(points)
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for exp in sorted({p.experiment for p in shown}):
        group = [p for p in shown if p.experiment == exp]
        ax.scatter([p.gap for p in group], [p.loglik_per_char for p in group], label=exp)
        if not across:
            ax.plot([p.gap for p in group], [p.loglik_per_char for p in group], alpha=0.3)
        for p in group:
            ax.annotate(p.checkpoint.split("/", 1)[-1], (p.gap, p.loglik_per_char), fontsize=7, alpha=0.7)
    ax.set_xlabel("GSM8K accuracy − fresh-set accuracy")
    ax.set_ylabel("per-character log-likelihood, GSM8K test")
    ax.set_title("across experiments (latest checkpoint each; GSM1k)" if across
                 else "within each run (checkpoints; moves with training step)", fontsize=9)
    if shown:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
