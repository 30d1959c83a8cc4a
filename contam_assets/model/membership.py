"""Min-K% Prob (Shi et al., 2023) and Min-K%++ (Zhang et al., 2024) per item, and ROC AUC.

Min-K%: the mean log-probability of the k% least likely tokens of a text.
Min-K%++: each token's log-probability is first standardised against the
model's distribution at that position, ``(log p(x_t) - mu_t) / sigma_t`` with
``mu_t = E_z[log p(z)]`` and ``sigma_t`` its standard deviation over the
vocabulary; then the k% lowest are averaged.  Higher means "more likely seen".

The number of tokens kept is ``max(1, floor(k * n))``: a short text keeps its
single least likely token rather than averaging nothing.  A text with no
predicted token (one token long) has no score (None).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

DEFAULT_K = 0.2


def _lowest_mean(values: np.ndarray, k: float) -> float | None:
    if not 0 < k <= 1:
        raise ValueError(f"k must lie in (0, 1], got {k}")
    n = int(values.size)
    if n == 0:
        return None
    keep = max(1, math.floor(k * n))
    return float(np.sort(values)[:keep].mean())


def min_k(logprobs: np.ndarray, k: float = DEFAULT_K) -> float | None:
    return _lowest_mean(np.asarray(logprobs, dtype=np.float64), k)


def min_k_plus_plus(logprobs: np.ndarray, mu: np.ndarray, sigma: np.ndarray, k: float = DEFAULT_K) -> float | None:
    logprobs, mu, sigma = (np.asarray(a, dtype=np.float64) for a in (logprobs, mu, sigma))
    # A one-hot prediction has sigma 0; a tiny floor keeps the score finite.
    z = (logprobs - mu) / np.maximum(sigma, 1e-8)
    return _lowest_mean(z, k)


def roc_auc(members: Sequence[float], nonmembers: Sequence[float]) -> float | None:
    """P(score of a member > score of a non-member), ties counting one half.

    This is the Mann-Whitney U statistic divided by ``n1 * n0`` (scipy).
    None when either group is empty.
    """
    from scipy.stats import mannwhitneyu

    a = [float(x) for x in members if x is not None and np.isfinite(x)]
    b = [float(x) for x in nonmembers if x is not None and np.isfinite(x)]
    if not a or not b:
        return None
    u = mannwhitneyu(a, b, alternative="two-sided").statistic
    return float(u) / (len(a) * len(b))


def membership_metrics(items, members: str = "gsm8k-test", nonmembers: str = "gsm8k-ref", k: float = DEFAULT_K) -> dict:
    """``mink/auc`` and ``minkpp/auc`` separating ``members`` from ``nonmembers`` items, plus group means.

    ``items`` are ItemScores (anything with ``dataset``, ``mink``, ``minkpp``).
    Items without a score (fewer than two tokens) are counted in ``*/unscored``.
    """
    metrics: dict[str, float | None] = {"mink/k": k}
    for score in ("mink", "minkpp"):
        pos = [getattr(it, score) for it in items if it.dataset == members]
        neg = [getattr(it, score) for it in items if it.dataset == nonmembers]
        metrics[f"{score}/auc"] = roc_auc(pos, neg)
        for label, values in (("member", pos), ("nonmember", neg)):
            scored = [v for v in values if v is not None]
            metrics[f"{score}/{label}-mean"] = float(np.mean(scored)) if scored else None
        metrics[f"{score}/unscored"] = float(sum(v is None for v in pos + neg))
    return metrics
