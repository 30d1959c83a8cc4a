"""Baseline-checkpoint calibration for the probe assets: the baseline's scores beside the target's, and the metrics.

The baseline's item scores are cached under ``<out>/probes/baseline`` (keyed
by folder, its modification time and the probe sets), so only the first
checkpoint probed against a baseline pays for scoring it.  On that first
run the target model is released before the baseline loads — never two
models in memory — and loads again for the generation probes.
"""

from __future__ import annotations

import dagster as dg

from contam_assets.defs.model.common import release_model
from contam_assets.defs.model.resources import CheckpointLoader
from contam_assets.defs.resources import ContamSettings
from contam_assets.model.sequences import ScoredSets

_MEMBERSHIP_SETS = ("gsm8k-test", "gsm8k-ref")


def scored_sets(context, settings: ContamSettings, loader: CheckpointLoader, opts, inputs, lm, items) -> ScoredSets:
    """ScoredSets of the target's items, with the baseline's when ``opts.baseline_checkpoint`` names one."""
    from contam_assets.model.baseline import tokenizer_digest

    bad = {k: len(v) for k, v in inputs.bad.items()}
    scored = ScoredSets(items, inputs.skipped, bad, lm.device, lm.dtype, k=opts.k,
                        skywork_batch_size=opts.skywork_batch_size)
    if not opts.baseline_checkpoint:
        return scored
    from contam_assets.model.checkpoint import CheckpointError
    from contam_assets.model.probe_run import baseline_items

    digest = tokenizer_digest(lm.tokenizer)
    cache = settings.out_path / "probes" / "baseline"
    try:  # on a cache miss the target is released first: never two models at once
        scored.baseline, scored.baseline_info = baseline_items(opts, loader.options(), cache, context.log.info,
                                                               before_load=release_model)
    except (CheckpointError, OSError, ValueError) as exc:
        raise dg.Failure(description=f"baseline checkpoint {opts.baseline_checkpoint}: {exc}") from exc
    scored.baseline_info["same_tokenizer"] = digest == scored.baseline_info.get("tokenizer")
    return scored


def skywork_batched(scored: ScoredSets) -> dict:
    """``loss/<set>``, Δ1 and Δ2 again at the configured Skywork batch size (nothing to redo at batch size 1)."""
    if scored.skywork_batch_size == 1:
        return {}
    from contam_assets.model.ppl_probe import ppl_metrics

    return ppl_metrics(scored.items, scored.skywork_batch_size)


def _is_delta(key: str) -> bool:
    return "delta" in key or "-ppl" in key or key == "baseline/same-tokenizer"


def calibrated(scored: ScoredSets, probe: str) -> dict:
    """The ``baseline/*`` and ``calibrated/*`` metrics a probe asset owns (ppl_probe: Δ; membership_scores: AUCs)."""
    if not scored.baseline:
        return {}
    from contam_assets.model.baseline import calibrated_metrics

    metrics = calibrated_metrics(scored.items, scored.baseline, scored.k, scored.skywork_batch_size,
                                 scored.baseline_info.get("same_tokenizer"))
    return {k: v for k, v in metrics.items() if _is_delta(k) == (probe == "ppl_probe")}


def calibrated_rows(scored: ScoredSets) -> list[tuple]:
    """Per-item ``calibrated-mink``, ``calibrated-minkpp``, ``llr-per-byte`` rows for membership_scores."""
    if not scored.baseline:
        return []
    from contam_assets.model.baseline import per_item

    target = [it for it in scored.items if it.dataset in _MEMBERSHIP_SETS]
    base = [it for it in scored.baseline if it.dataset in _MEMBERSHIP_SETS]
    return [(d, i, m, v) for d, i, scores in per_item(target, base) for m, v in scores.items()]
