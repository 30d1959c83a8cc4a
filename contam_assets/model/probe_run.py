"""Every probe for one checkpoint, as one flat dict (the CLI's probe.json).

Metric keys are the ``probe_metrics`` metric names; ``checkpoint``,
``skipped``, ``bad_rows`` and ``settings`` are the only other keys.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Sequence

from contam_assets.model import probe_inputs as pin
from contam_assets.model.batching import LogFn
from contam_assets.model.bits_per_byte import bpb_metrics
from contam_assets.model.checkpoint import read_info
from contam_assets.model.fresh_gap import fewshot_prefix, gap_metrics, gsm_accuracy
from contam_assets.model.loader import LoadedModel, LoadOptions, describe, load_checkpoint
from contam_assets.model.membership import membership_metrics
from contam_assets.model.ppl_probe import ppl_metrics
from contam_assets.model.recitation import recitation_metrics, run_recitation
from contam_assets.model.sequences import ItemScore, score_sets


def run_probes(checkpoint: str | Path, opts: pin.ProbeOptions, load: LoadOptions = LoadOptions(), log: LogFn | None = None) -> dict:
    started = time.monotonic()
    info = read_info(checkpoint) if Path(checkpoint).is_dir() else None
    lm = load_checkpoint(checkpoint, load)
    result: dict = {
        "checkpoint": dict(info.as_dict() if info else {"path": str(checkpoint)}, device=lm.device, dtype=lm.dtype),
        "skipped": {},
        "bad_rows": {},
    }
    if log:
        log(f"loaded {describe(lm)}")
    result.update(sequence_probes(lm, opts, result, log))
    result.update(recitation_probe(lm, opts, result, log))
    result.update(fresh_gap_probe(lm, opts, result, log))
    result["settings"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(opts).items()}
    result["settings"]["token_budget"] = lm.token_budget
    result["seconds"] = round(time.monotonic() - started, 2)
    return result


def _note(result: dict, probe: str, inputs: pin.Inputs) -> None:
    result["skipped"].update({f"{probe}/{k}": v for k, v in inputs.skipped.items()})
    result["bad_rows"].update({f"{probe}/{k}": len(v) for k, v in inputs.bad.items()})


def sequence_probes(lm: LoadedModel, opts: pin.ProbeOptions, result: dict, log: LogFn | None) -> dict:
    items, inputs = sequence_items(lm, opts, log=log)
    _note(result, "sequences", inputs)
    return sequence_metrics(items, opts.k, opts.skywork_batch_size)


def sequence_items(
    lm: LoadedModel, opts: pin.ProbeOptions, sets: Sequence[str] | None = None, log: LogFn | None = None
) -> tuple[list[ItemScore], pin.Inputs]:
    """Per-item scores of the probe sets (``sets`` = only these names; None = every set found).

    A requested set that could not be read stays in ``inputs.skipped``; the
    caller decides whether that is fatal.
    """
    inputs = pin.scoring_sets(opts)
    values = inputs.values if sets is None else {name: inputs.values[name] for name in sets if name in inputs.values}
    return score_sets(lm, values, k=opts.k, log=log, skywork_max_tokens=opts.skywork_max_tokens), inputs


def sequence_metrics(items: Sequence[ItemScore], k: float, skywork_batch_size: int = 1) -> dict:
    """The PPL, bits-per-byte and Min-K% metrics of scored items (probe.json keys)."""
    metrics = ppl_metrics(items, skywork_batch_size)
    metrics.update(bpb_metrics(items))
    metrics.update(membership_metrics(items, k=k))
    metrics["truncated-items"] = float(sum(it.truncated for it in items))
    return metrics


def recitation_probe(lm: LoadedModel, opts: pin.ProbeOptions, result: dict, log: LogFn | None) -> dict:
    inputs = pin.code_problems(opts)
    _note(result, "recitation", inputs)
    items = run_recitation(
        lm,
        pin.all_problems(inputs),
        opts.code_max_new_tokens,
        execute=opts.execute,
        limits=opts.exec_limits(),
        workers=opts.exec_workers,
        log=log,
    )
    return recitation_metrics(items)


def fresh_gap_probe(lm: LoadedModel, opts: pin.ProbeOptions, result: dict, log: LogFn | None) -> dict:
    inputs = pin.gsm_sets(opts)
    _note(result, "fresh_gap", inputs)
    if "fresh" not in inputs.values:
        return {}
    prefix = fewshot_prefix(inputs.values["gsm8k-train"], opts.n_shot)
    items = gsm_accuracy(lm, inputs.values["gsm8k-test"], prefix, "gsm8k-test", opts.gsm_max_new_tokens, log)
    items += gsm_accuracy(lm, inputs.values["fresh"], prefix, "fresh", opts.gsm_max_new_tokens, log)
    return gap_metrics(items)
