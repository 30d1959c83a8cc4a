"""Bits per byte and per-character log-likelihood of each scored set.

bits per byte = total NLL (nats) / ln 2 / UTF-8 bytes (seed 003: a model that
saw GSM8K compresses it at 0.18 bpb against 0.42).  Per-character
log-likelihood = −total NLL / characters (GSM1k Figure 8, where a higher value
goes with more overfit).  Only the predicted part of each text counts: the
first token has no prediction, so its characters are left out.
"""

from __future__ import annotations

import math
from typing import Sequence

from contam_assets.model.sequences import ItemScore, by_dataset


def bits_per_byte(items: Sequence[ItemScore]) -> float | None:
    n_bytes = sum(it.n_bytes for it in items)
    return sum(it.nll for it in items) / math.log(2) / n_bytes if n_bytes else None


def loglik_per_char(items: Sequence[ItemScore]) -> float | None:
    n_chars = sum(it.n_chars for it in items)
    return -sum(it.nll for it in items) / n_chars if n_chars else None


def bpb_metrics(items: Sequence[ItemScore]) -> dict[str, float | None]:
    """``bpb/<set>`` and ``llpc/<set>`` for every set present."""
    metrics: dict[str, float | None] = {}
    for name, group in sorted(by_dataset(items).items()):
        metrics[f"bpb/{name}"] = bits_per_byte(group)
        metrics[f"llpc/{name}"] = loglik_per_char(group)
    return metrics
