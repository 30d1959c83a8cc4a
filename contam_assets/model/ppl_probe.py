"""OpenCompass ``gsm8k_contamination_ppl`` and Skywork's loss gaps.

Per sample, OpenCompass's HuggingFace wrapper (``_get_ppl``) sums the token
cross-entropy over the predicted tokens (every token but the first) and
divides by the number of non-pad tokens of the input (the first token
included); ``AveragePPLEvaluator`` averages that over samples and calls it
``average_ppl``.  Skywork (arXiv:2310.19341, Table 8) compares token-level
language-modelling loss: Δ1 = L_test − L_ref (test leakage when clearly
negative) and Δ2 = L_test − L_train (train-set overfitting when clearly
positive).  Here the loss of a set is token-weighted: total NLL / predicted
tokens.

OpenCompass finds pad positions by ``input_ids != pad_token_id``; we use the
attention mask, which agrees except where a text itself contains the pad token.
"""

from __future__ import annotations

from typing import Sequence

from contam_assets.model.sequences import ItemScore, by_dataset

TRAIN, TEST, REF = "gsm8k-train", "gsm8k-test", "gsm8k-ref"
SETS = (TRAIN, TEST, REF)


def average_ppl(items: Sequence[ItemScore]) -> float | None:
    values = [it.opencompass_ppl for it in items if it.opencompass_ppl is not None]
    return sum(values) / len(values) if values else None


def token_loss(items: Sequence[ItemScore]) -> float | None:
    predicted = sum(it.n_predicted for it in items)
    return sum(it.nll for it in items) / predicted if predicted else None


def _diff(a: float | None, b: float | None) -> float | None:
    return a - b if a is not None and b is not None else None


def ppl_metrics(items: Sequence[ItemScore]) -> dict[str, float | None]:
    """``gsm8k-{train,test,ref}-ppl``, ``loss/<set>``, ``n/<set>``, ``delta1``, ``delta2``."""
    groups = by_dataset(items)
    metrics: dict[str, float | None] = {}
    loss = {}
    for name in SETS:
        group = groups.get(name, [])
        metrics[f"{name}-ppl"] = average_ppl(group)
        loss[name] = metrics[f"loss/{name}"] = token_loss(group)
        metrics[f"n/{name}"] = float(len(group))
    metrics["delta1"] = _diff(loss[TEST], loss[REF])
    metrics["delta2"] = _diff(loss[TEST], loss[TRAIN])
    return metrics
