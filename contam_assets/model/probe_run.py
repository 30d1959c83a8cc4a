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
from contam_assets.model.baseline import cache_key, calibrated_metrics, load_cache, save_cache, tokenizer_digest
from contam_assets.model.batching import LogFn
from contam_assets.model.bits_per_byte import bpb_metrics
from contam_assets.model.checkpoint import check_complete, newest_mtime, read_info
from contam_assets.model.fresh_gap import fewshot_prefixes, gap_metrics, gsm_accuracy
from contam_assets.model.loader import LoadedModel, LoadOptions, describe, load_checkpoint
from contam_assets.model.membership import membership_metrics
from contam_assets.model.ppl_probe import ppl_metrics
from contam_assets.model.recitation import recitation_metrics, run_recitation
from contam_assets.model.sequences import ItemScore, score_sets


def run_probes(
    checkpoint: str | Path,
    opts: pin.ProbeOptions,
    load: LoadOptions = LoadOptions(),
    log: LogFn | None = None,
    cache_dir: Path | None = None,
) -> dict:
    """Every probe; with ``opts.baseline_checkpoint`` also the baseline's scores (cached under ``cache_dir``)."""
    started = time.monotonic()
    info = read_info(checkpoint) if Path(checkpoint).is_dir() else None
    base = baseline_items(opts, load, cache_dir, log) if opts.baseline_checkpoint else None  # before the target loads
    lm = load_checkpoint(checkpoint, load)
    result: dict = {
        "checkpoint": dict(info.as_dict() if info else {"path": str(checkpoint)}, device=lm.device, dtype=lm.dtype),
        "skipped": {},
        "bad_rows": {},
    }
    if log:
        log(f"loaded {describe(lm)}")
    items, metrics = _sequences(lm, opts, result, log)
    result.update(metrics)
    if base is not None:
        same = tokenizer_digest(lm.tokenizer) == base[1].get("tokenizer")
        result.update(calibrated_metrics(items, base[0], opts.k, opts.skywork_batch_size, same))
        result["baseline"] = base[1]
    result.update(recitation_probe(lm, opts, result, log))
    result.update(fresh_gap_probe(lm, opts, result, log))
    result["settings"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(opts).items()}
    result["settings"]["token_budget"] = lm.token_budget
    result["seconds"] = round(time.monotonic() - started, 2)
    return result


def baseline_items(
    opts: pin.ProbeOptions, load: LoadOptions, cache_dir: Path | None, log: LogFn | None = None, before_load=None
) -> tuple[list[ItemScore], dict]:
    """The baseline checkpoint's scores on the probe sets: from the cache, else loaded, scored and freed.

    ``before_load`` is called only when the baseline has to be loaded (e.g. to release another model).
    """
    path = Path(opts.baseline_checkpoint or "")
    check_complete(path)
    key = cache_key({
        "version": 1, "path": str(path.resolve()), "mtime": newest_mtime(path), "dtype": load.dtype,
        "sets": [str(opts.benchmarks_dir), str(opts.tasks_dir), opts.limit, opts.ref_file, opts.fresh_file],
        "k": opts.k, "skywork_max_tokens": opts.skywork_max_tokens,
    })
    cache = Path(cache_dir) / f"{key}.json" if cache_dir else None
    cached = load_cache(cache) if cache else None
    if cached is not None:
        if log:
            log(f"baseline {path}: {len(cached[0])} cached item scores ({cache})")
        return cached[0], dict(cached[1], cached=True)
    if before_load is not None:
        before_load()
    lm = load_checkpoint(path, dataclasses.replace(load, generation_backend="transformers"))
    if log:
        log(f"baseline loaded {describe(lm)}")
    items, _ = sequence_items(lm, opts, log=log)
    info = {"path": str(path.resolve()), "dtype": lm.dtype, "tokenizer": tokenizer_digest(lm.tokenizer),
            "items": len(items), "cached": False}
    free(lm)
    if cache is not None:
        save_cache(cache, items, info)
    return items, info


def free(lm: LoadedModel) -> None:
    """Drop a model's weights now (before the next one loads)."""
    import gc

    import torch

    lm.model = lm.generator = None
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _note(result: dict, probe: str, inputs: pin.Inputs) -> None:
    result["skipped"].update({f"{probe}/{k}": v for k, v in inputs.skipped.items()})
    result["bad_rows"].update({f"{probe}/{k}": len(v) for k, v in inputs.bad.items()})


def sequence_probes(lm: LoadedModel, opts: pin.ProbeOptions, result: dict, log: LogFn | None) -> dict:
    return _sequences(lm, opts, result, log)[1]


def _sequences(lm: LoadedModel, opts: pin.ProbeOptions, result: dict, log: LogFn | None):
    """(items, metrics) of the sequence probes; skips and bad rows noted in ``result``."""
    items, inputs = sequence_items(lm, opts, log=log)
    _note(result, "sequences", inputs)
    return items, sequence_metrics(items, opts.k, opts.skywork_batch_size)


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
        return dict(inputs.counts)
    return fresh_gap_metrics(lm, opts, inputs, log)[0]


def fresh_gap_metrics(lm: LoadedModel, opts: pin.ProbeOptions, inputs: pin.Inputs, log: LogFn | None):
    """(metrics, items) of the fresh-set gap on inputs that have a fresh set (shots drawn per question)."""
    train, test, fresh = inputs.values["gsm8k-train"], inputs.values["gsm8k-test"], inputs.values["fresh"]
    items = gsm_accuracy(lm, test, fewshot_prefixes(train, len(test), opts.n_shot, opts.shot_seed), "gsm8k-test",
                         opts.gsm_max_new_tokens, log)
    items += gsm_accuracy(lm, fresh, fewshot_prefixes(train, len(fresh), opts.n_shot, opts.shot_seed), "fresh",
                          opts.gsm_max_new_tokens, log)
    metrics = gap_metrics(items)
    metrics.update(inputs.counts)
    return metrics, items
