"""OpenCompass ``gsm8k_contamination_ppl`` and Skywork's loss gaps, each in its own convention.

**OpenCompass** (``gsm8k-{train,test,ref}-ppl``): per sample, the HuggingFace
wrapper's ``get_ppl`` sums the token cross-entropy over the predicted tokens
(every token but the first) and divides by the number of non-pad tokens of
the input (the first included); the input carries the tokenizer's special
tokens (Llama: ``<s>``) and is cut on the left to the context.
``AveragePPLEvaluator`` averages that over samples: ``average_ppl``.

**Skywork** (arXiv:2310.19341, Table 8; ``eval/eval_loss.py``):
Δ1 = L_test − L_ref (test leakage when clearly negative) and
Δ2 = L_test − L_train (train-set overfitting when clearly positive), where L
of a set is total cross-entropy / total predicted tokens over texts tokenized
with ``add_special_tokens=False`` (first cut to 1,365 characters, Skywork's
``max_tokens // 3``).  With a BOS-adding tokenizer the two conventions differ:
OpenCompass's includes the BOS → first-token term, Skywork's does not.

eval_loss.py batches texts (right-padded with EOS) and masks the loss with
``attention_mask[:, :-1]``: every text shorter than the longest of its batch
also gets charged the prediction of EOS after it, which the denominator does
not count.  ``batch_size=1`` (the default) is the loss as defined;
``skywork_loss(items, 16)`` reproduces the script at batch size 16.

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


def skywork_loss(items: Sequence[ItemScore], batch_size: int = 1) -> float | None:
    """Skywork's token-weighted loss of a set, texts batched in order as eval_loss.py does."""
    if batch_size < 1:
        raise ValueError(f"batch size must be at least 1, got {batch_size}")
    scored = [it for it in items if it.sk_nll is not None and it.sk_tokens > 0]
    total, tokens = 0.0, 0
    for start in range(0, len(scored), batch_size):
        batch = scored[start : start + batch_size]
        width = max(it.sk_tokens for it in batch)
        for it in batch:
            total += it.sk_nll
            tokens += it.sk_predicted
            if it.sk_tokens < width and it.sk_end_logprob is not None:
                total -= it.sk_end_logprob  # the EOS pad after a shorter text, predicted and counted
    return total / tokens if tokens else None


def token_loss(items: Sequence[ItemScore]) -> float | None:
    """Skywork's L of a set (batch size 1): cross-entropy per predicted token, no special tokens."""
    return skywork_loss(items, 1)


def opencompass_token_loss(items: Sequence[ItemScore]) -> float | None:
    """Token-weighted loss on OpenCompass's tokenization (special tokens in), kept for comparison; Δ uses Skywork's, without special tokens."""
    predicted = sum(it.n_predicted for it in items)
    return sum(it.nll for it in items) / predicted if predicted else None


def _diff(a: float | None, b: float | None) -> float | None:
    return a - b if a is not None and b is not None else None


def ppl_metrics(items: Sequence[ItemScore], skywork_batch_size: int = 1) -> dict[str, float | None]:
    """``gsm8k-{train,test,ref}-ppl``, ``loss/<set>``, ``n/<set>``, ``delta1``, ``delta2`` and the conventions' counts."""
    groups = by_dataset(items)
    metrics: dict[str, float | None] = {}
    loss = {}
    for name in SETS:
        group = groups.get(name, [])
        metrics[f"{name}-ppl"] = average_ppl(group)
        loss[name] = metrics[f"loss/{name}"] = skywork_loss(group, skywork_batch_size)
        metrics[f"loss-special-tokens/{name}"] = opencompass_token_loss(group)
        metrics[f"n/{name}"] = float(len(group))
        if group:
            metrics[f"skywork/cut/{name}"] = float(sum(it.sk_cut for it in group))
            metrics[f"skywork/tokenization-differs/{name}"] = float(sum(not it.same_tokens for it in group))
    metrics["delta1"] = _diff(loss[TEST], loss[REF])
    metrics["delta2"] = _diff(loss[TEST], loss[TRAIN])
    metrics["skywork/batch-size"] = float(skywork_batch_size)
    return metrics
