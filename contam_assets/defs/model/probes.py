"""Probe assets, one per probe, partitioned by checkpoint.  Each writes `probe_metrics` (and `probe_items`).

`sequence_scores` runs the one forward pass over every text set; `ppl_probe`,
`bits_per_byte` and `membership_scores` summarise it.  `recitation_rate` and
`fresh_set_gap` generate.  A probe whose inputs are missing (no GSM8K in the benchmark
folder, no fresh set) skips: no materialization, its `inputs_present` check says why
(contam_assets/defs/inputs.py).
"""

import tempfile
from pathlib import Path

import dagster as dg

from contam_assets.defs.inputs import inputs_check, inputs_present, skip_for_missing_inputs
from contam_assets.defs.meta import MODEL_OWNERS, tags
from contam_assets.defs.model.common import load_model, probe_options, resolve_checkpoint, skipped_md, write_rows
from contam_assets.defs.model.probe_calibration import calibrated, calibrated_rows, scored_sets, skywork_batched
from contam_assets.defs.model.resources import CheckpointLoader, ProbeSettings
from contam_assets.defs.partitions import checkpoints_partitions
from contam_assets.defs.resources import ContamDB, ContamSettings
from contam_assets.model import probe_inputs as pin
from contam_assets.model.asset_markdown import histogram_png, metrics_md
from contam_assets.model.sandbox import sandbox_status
from contam_assets.model.sequences import ScoredSets
from contam_assets.report.inert import md_text
from contam_assets.report.render import md_table, png_markdown

_COMMON = dict(partitions_def=checkpoints_partitions, group_name="model", kinds={"pytorch", "duckdb"}, owners=MODEL_OWNERS,
               tags=tags("model", "probes"), output_required=False)


def _needs(asset: str, what: str) -> list[dg.AssetCheckSpec]:
    return [inputs_check(asset, what, MODEL_OWNERS)]


def _why(skipped: dict[str, str], names) -> str:
    return "; ".join(f"{n}: {skipped.get(n, 'not scored')}" for n in names)


@dg.asset(
    **_COMMON,
    deps=["checkpoints"],
    check_specs=_needs("sequence_scores", "at least one text set to score"),
    description="Per item of every text set (GSM8K train/test/ref, HumanEval, MBPP, fresh set): summed NLL, "
    "token/char/byte counts, Min-K% and Min-K%++. One forward pass shared by the PPL, bits-per-byte and "
    "membership probes; per-item rows in `probe_items` (probe sequence_scores).",
)
def sequence_scores(
    context: dg.AssetExecutionContext,
    contam_settings: ContamSettings,
    contam_db: ContamDB,
    checkpoint_loader: CheckpointLoader,
    probe_settings: ProbeSettings,
):
    from contam_assets.model.sequences import score_sets

    info = resolve_checkpoint(context.partition_key, contam_settings, checkpoint_loader, contam_db)
    opts = probe_options(contam_settings, probe_settings)
    inputs = pin.scoring_sets(opts)
    if not inputs.values:
        yield skip_for_missing_inputs(context, "no text set could be read: " + _why(inputs.skipped, inputs.skipped))
        return
    lm = load_model(context, checkpoint_loader, info)
    items = score_sets(lm, inputs.values, k=opts.k, log=context.log.info, skywork_max_tokens=opts.skywork_max_tokens)
    scored = scored_sets(context, contam_settings, checkpoint_loader, opts, inputs, lm, items)  # + the baseline's
    rows = [
        (it.dataset, it.item, m, v)
        for it in items
        for m, v in (("nll", it.nll), ("tokens", it.n_tokens), ("chars", it.n_chars), ("bytes", it.n_bytes), ("ppl", it.opencompass_ppl),
                     ("skywork-nll", it.sk_nll), ("skywork-tokens", it.sk_tokens))
    ]
    write_rows(contam_db, context.partition_key, "sequence_scores", {"items": float(len(items))}, rows)
    counts = [(name, sum(it.dataset == name for it in items), sum(it.truncated for it in items if it.dataset == name)) for name in scored.datasets()]
    yield dg.Output(
        scored,
        metadata={
            "items": len(items),
            "sets": dg.MetadataValue.md(md_table(["set", "items", "truncated"], counts)),
            "skipped": dg.MetadataValue.md(skipped_md(inputs.skipped)),
            "bad_rows": sum(scored.bad_rows.values()),
            "device": lm.device,
            "dtype": lm.dtype,
        },
    )
    yield inputs_present(sets=", ".join(scored.datasets()))


def _summary(context, contam_db: ContamDB, probe: str, metrics: dict, items=(), extra: dict | None = None) -> dg.MaterializeResult:
    n_metrics, n_items = write_rows(contam_db, context.partition_key, probe, metrics, items)
    meta = {"metrics": dg.MetadataValue.md(metrics_md(metrics)), "rows_written": n_metrics, "item_rows_written": n_items}
    meta.update({k: v for k, v in metrics.items() if v is not None and "/" not in k})
    meta.update(extra or {})
    return dg.MaterializeResult(metadata=meta, check_results=[inputs_present()])


@dg.asset(**_COMMON, check_specs=_needs("ppl_probe", "GSM8K train, test or reference items"),
          description="OpenCompass gsm8k_contamination_ppl (gsm8k-train/test/ref-ppl) and Skywork's "
          "delta1 = L_test - L_ref, delta2 = L_test - L_train on token-weighted loss.")
def ppl_probe(context: dg.AssetExecutionContext, contam_db: ContamDB, sequence_scores: ScoredSets) -> dg.MaterializeResult:
    from contam_assets.model.ppl_probe import SETS, ppl_metrics

    missing = {s: sequence_scores.skipped.get(s, "not scored") for s in SETS if s not in sequence_scores.datasets()}
    if len(missing) == len(SETS):
        return skip_for_missing_inputs(context, "no GSM8K set was scored: " + _why(missing, SETS))
    metrics = ppl_metrics(sequence_scores.items)
    extra = {"skipped": dg.MetadataValue.md(skipped_md(missing))} if missing else {}
    metrics.update(skywork_batched(sequence_scores) | calibrated(sequence_scores, "ppl_probe"))
    return _summary(context, contam_db, "ppl_probe", metrics, extra=extra)


@dg.asset(**_COMMON, check_specs=_needs("bits_per_byte", "at least one scored set"), description="Bits per byte (NLL / ln 2 / UTF-8 bytes) and per-character log-likelihood of every scored set.")
def bits_per_byte(context: dg.AssetExecutionContext, contam_db: ContamDB, sequence_scores: ScoredSets) -> dg.MaterializeResult:
    from contam_assets.model.bits_per_byte import bpb_metrics

    sets = sequence_scores.datasets()
    if not sets:
        return skip_for_missing_inputs(context, "no set was scored: " + _why(sequence_scores.skipped, sequence_scores.skipped))
    metrics = bpb_metrics(sequence_scores.items)
    table = md_table(["set", "bits per byte", "log-lik per char"], [(s, metrics[f"bpb/{s}"], metrics[f"llpc/{s}"]) for s in sets])
    extra = {"table": dg.MetadataValue.md(table), "skipped": dg.MetadataValue.md(skipped_md(sequence_scores.skipped))}
    return _summary(context, contam_db, "bits_per_byte", metrics, extra=extra)


@dg.asset(**_COMMON, check_specs=_needs("membership_scores", "GSM8K test items and the reference set"),
          description="Min-K% Prob and Min-K%++ of GSM8K test (members) against the reference set "
          "(non-members): ROC AUC and per-item scores in `probe_items`.")
def membership_scores(context: dg.AssetExecutionContext, contam_db: ContamDB, sequence_scores: ScoredSets) -> dg.MaterializeResult:
    from contam_assets.model.membership import membership_metrics

    items = [it for it in sequence_scores.items if it.dataset in ("gsm8k-test", "gsm8k-ref")]
    if {it.dataset for it in items} != {"gsm8k-test", "gsm8k-ref"}:
        return skip_for_missing_inputs(context, "no members or non-members: " + _why(sequence_scores.skipped, ("gsm8k-test", "gsm8k-ref")))
    metrics = membership_metrics(items)
    rows = [(it.dataset, it.item, m, getattr(it, m)) for it in items for m in ("mink", "minkpp")]
    metrics.update(calibrated(sequence_scores, "membership_scores"))
    rows += calibrated_rows(sequence_scores)
    extra = {}
    with tempfile.TemporaryDirectory() as tmp:
        png = Path(tmp) / "mink.png"
        groups = {d: [it.mink for it in items if it.dataset == d and it.mink is not None] for d in ("gsm8k-test", "gsm8k-ref")}
        histogram_png(groups, "Min-K% (mean log p of the lowest 20% tokens)", png)
        extra["histogram"] = dg.MetadataValue.md(png_markdown(png, "Min-K% histogram"))
    return _summary(context, contam_db, "membership_scores", metrics, rows, extra)


@dg.asset(**_COMMON, deps=["checkpoints"], check_specs=_needs("recitation_rate", "HumanEval or MBPP problems"),
          description="HumanEval and MBPP recitation: greedy completions compared "
          "with the reference solutions after normalisation (exact and >= 0.9 similar), pass@1 when execution is enabled.")
def recitation_rate(
    context: dg.AssetExecutionContext,
    contam_settings: ContamSettings,
    contam_db: ContamDB,
    checkpoint_loader: CheckpointLoader,
    probe_settings: ProbeSettings,
) -> dg.MaterializeResult:
    from contam_assets.model.recitation import recitation_metrics, run_recitation

    info = resolve_checkpoint(context.partition_key, contam_settings, checkpoint_loader, contam_db)
    opts = probe_options(contam_settings, probe_settings)
    if opts.execute and not sandbox_status().ok:  # never run generated code unisolated
        raise dg.Failure(description=f"execute_code is on but the sandbox is unavailable: {sandbox_status().reason}")
    inputs = pin.code_problems(opts)
    if not pin.all_problems(inputs):
        return skip_for_missing_inputs(context, "no code problems: " + _why(inputs.skipped, ("humaneval", "mbpp")))
    lm = load_model(context, checkpoint_loader, info)
    results = run_recitation(lm, pin.all_problems(inputs), opts.code_max_new_tokens, opts.execute,
                             opts.exec_limits(), opts.exec_workers, log=context.log.info)
    metrics = recitation_metrics(results)
    rows = [(r.benchmark, r.task_id, "exact", float(r.exact)) for r in results]
    rows += [(r.benchmark, r.task_id, "similarity", r.similarity) for r in results]
    rows += [(r.benchmark, r.task_id, "passed", float(r.status == "passed")) for r in results if r.status is not None]
    recited = [r.task_id for r in results if r.exact]
    extra = {
        "recited": dg.MetadataValue.md(", ".join(md_text(t) for t in recited[:50]) + (" …" if len(recited) > 50 else "") or "none"),
        "execution": "on" if opts.execute else "off (set probe_settings.execute_code for pass@1)",
        "skipped": dg.MetadataValue.md(skipped_md(inputs.skipped)),
    }
    return _summary(context, contam_db, "recitation_rate", metrics, rows, extra)


@dg.asset(**_COMMON, deps=["checkpoints"], check_specs=_needs("fresh_set_gap", "GSM8K train and test, and a fresh set"),
          description="GSM1k-style gap: n-shot GSM8K test accuracy minus accuracy on a "
          "fresh GSM-style set (probe_settings.fresh_file), last-number answer extraction, greedy decoding.")
def fresh_set_gap(
    context: dg.AssetExecutionContext,
    contam_settings: ContamSettings,
    contam_db: ContamDB,
    checkpoint_loader: CheckpointLoader,
    probe_settings: ProbeSettings,
) -> dg.MaterializeResult:
    from contam_assets.model.probe_run import fresh_gap_metrics

    opts = probe_options(contam_settings, probe_settings)
    inputs = pin.gsm_sets(opts)
    if "fresh" not in inputs.values:
        return skip_for_missing_inputs(context, inputs.skipped["fresh"])
    info = resolve_checkpoint(context.partition_key, contam_settings, checkpoint_loader, contam_db)
    lm = load_model(context, checkpoint_loader, info)
    metrics, items = fresh_gap_metrics(lm, opts, inputs, context.log.info)  # incl. fresh/dropped-gsm8k-questions
    rows = [(i.dataset, i.item, "correct", float(i.correct)) for i in items]
    rows += [(i.dataset, i.item, "predicted", i.predicted) for i in items]
    return _summary(context, contam_db, "fresh_set_gap", metrics, rows, {"fresh_file": opts.fresh_file or ""})
