"""Calibration against a baseline model (``--baseline-checkpoint``): reference-model membership inference.

Raw scores mix two things: whether the model saw the items, and how the sets
differ.  GSM8K test and Skywork's mock reference differ in style (the mock
set has longer prose and almost none of GSM8K's ``<<a*b=c>>`` notes), so even
a model that never saw GSM8K test separates them: Min-K% AUC 0.63 for an
untrained model, and Δ1 is negative for every arm in docs/arms.md.  A
baseline model — one that never saw the data in question (the same recipe
without the leak, or a public model from before the benchmark) — sees the
same style differences, so subtracting its view leaves what the target alone
knows (the reference-model attack: Carlini et al. 2021, Mireshghallah et al.
2022; Zhang et al. 2024 calibrate Min-K%++ the same way):

- ``calibrated/delta1``, ``calibrated/delta2``: the target's Δ minus the
  baseline's (same units only when both share a tokenizer:
  ``baseline/same-tokenizer``; the per-byte forms below are comparable across
  tokenizers);
- ``calibrated/{mink,minkpp}/auc``: AUC of the per-item difference
  target − baseline, GSM8K test (members) against the reference set;
- ``calibrated/llr/auc``: AUC of the per-item log-likelihood ratio per byte,
  ``nll_baseline/bytes − nll_target/bytes`` (higher: the target finds the
  text likelier than the baseline does).

A clean target reads ~0.5 on the calibrated AUCs and ~0 on calibrated Δ1,
whatever the sets' styles; a target that saw GSM8K test does not.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Sequence

from contam_assets.model.membership import membership_metrics, roc_auc
from contam_assets.model.ppl_probe import ppl_metrics
from contam_assets.model.sequences import ItemScore

MEMBERS, NONMEMBERS = "gsm8k-test", "gsm8k-ref"


def _diff(a, b):
    return a - b if a is not None and b is not None else None


def per_item(target: Sequence[ItemScore], baseline: Sequence[ItemScore]) -> list[tuple[str, str, dict]]:
    """(dataset, item, {calibrated-mink, calibrated-minkpp, llr-per-byte}) for every item both models scored."""
    base = {(it.dataset, it.item): it for it in baseline}
    out = []
    for it in target:
        b = base.get((it.dataset, it.item))
        if b is None:
            continue
        llr = b.nll / b.n_bytes - it.nll / it.n_bytes if it.n_bytes and b.n_bytes else None
        out.append((it.dataset, it.item, {
            "calibrated-mink": _diff(it.mink, b.mink),
            "calibrated-minkpp": _diff(it.minkpp, b.minkpp),
            "llr-per-byte": llr,
        }))
    return out


def calibrated_metrics(
    target: Sequence[ItemScore],
    baseline: Sequence[ItemScore],
    k: float,
    skywork_batch_size: int = 1,
    same_tokenizer: bool | None = None,
) -> dict[str, float | None]:
    """``baseline/*`` (the baseline's own numbers) and ``calibrated/*`` (target relative to it)."""
    mine, theirs = ppl_metrics(target, skywork_batch_size), ppl_metrics(baseline, skywork_batch_size)
    mem_t, mem_b = membership_metrics(target, k=k), membership_metrics(baseline, k=k)
    metrics: dict[str, float | None] = {}
    for key in ("delta1", "delta2", "gsm8k-train-ppl", "gsm8k-test-ppl", "gsm8k-ref-ppl"):
        metrics[f"baseline/{key}"] = theirs[key]
    for key in ("mink/auc", "minkpp/auc"):
        metrics[f"baseline/{key}"] = mem_b[key]
    metrics["calibrated/delta1"] = _diff(mine["delta1"], theirs["delta1"])
    metrics["calibrated/delta2"] = _diff(mine["delta2"], theirs["delta2"])
    rows = per_item(target, baseline)
    for score, name in (("calibrated-mink", "mink"), ("calibrated-minkpp", "minkpp"), ("llr-per-byte", "llr")):
        pos = [r[2][score] for r in rows if r[0] == MEMBERS]
        neg = [r[2][score] for r in rows if r[0] == NONMEMBERS]
        metrics[f"calibrated/{name}/auc"] = roc_auc(pos, neg)
    metrics["calibrated/raw-mink-auc"] = mem_t["mink/auc"]  # the uncalibrated AUC, for the side-by-side
    metrics["baseline/items"] = float(len(rows))
    if same_tokenizer is not None:
        metrics["baseline/same-tokenizer"] = float(same_tokenizer)
    return metrics


def tokenizer_digest(tokenizer) -> str:
    """Equal for tokenizers that map the same strings to the same ids (vocabulary and special tokens)."""
    vocab = sorted(tokenizer.get_vocab().items())
    special = [tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id]
    return hashlib.sha256(json.dumps([vocab, special]).encode()).hexdigest()[:16]


def cache_key(parts: dict) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:20]


def save_cache(path: Path, items: Sequence[ItemScore], info: dict) -> None:
    from contam_assets.store.files import atomic_write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({"info": info, "items": [asdict(it) for it in items]}))


def load_cache(path: Path) -> tuple[list[ItemScore], dict] | None:
    try:
        data = json.loads(path.read_text())
        return [ItemScore(**row) for row in data["items"]], dict(data["info"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent or from another version: score again
