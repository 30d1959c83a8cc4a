"""Proxy ablation arms: tokenizer -> exposure -> arm_mix (per arm) -> arm_checkpoints (per arm).

The checkpoint folders land under ``<experiments_dir>/<experiment>/checkpoints/<stage>/``;
the model side's checkpoint sensor adds them as ``checkpoints`` partitions
(this package does not register partitions itself, so there is one owner of
that partition set).
"""


import json

import dagster as dg

from contam_assets.defs.arms.resources import ArmsSettings
from contam_assets.defs.meta import MODEL_OWNERS, tags
from contam_assets.defs.partitions import arms_partitions
from contam_assets.defs.resources import ContamDB, ContamSettings
from contam_assets.report.render import md_table

GROUP = "arms"
_ARMS = dict(group_name=GROUP, owners=MODEL_OWNERS, tags=tags("model", "arms"))
REMOVALS = dg.AssetKey("removals")
MIX = dg.AssetKey("decontaminated_mix")


def _md_table(rows: list[dict]) -> str:
    """Per-source rows (sources come from the pool: md_table makes every cell inert)."""
    return md_table(None, [{c: f"{v:.4g}" if isinstance(v, float) else v for c, v in r.items()} for r in rows])


def _experiment(arm: str, arms_settings: ArmsSettings) -> str:
    from contam_assets.model.arms.train import experiment_name

    return experiment_name(arm, arms_settings.seed)


def _inputs(settings: ContamSettings, db: ContamDB):
    from contam_assets.model.arms.inputs import load_arm_inputs

    try:
        return load_arm_inputs(settings.pool_path, settings.out_path / "mix", db.resolved(), settings.content_key)
    except (FileNotFoundError, LookupError) as exc:
        raise dg.Failure(str(exc)) from exc


def _skips(context, inputs) -> dict:
    if inputs.skipped_removed:
        context.log.warning(f"removed documents not found in the pool: {dict(inputs.skipped_removed)}")
    if inputs.skipped_mix:
        context.log.warning(f"unusable lines in the decontaminated mix: {dict(inputs.skipped_mix)}")
    return {
        "removed_docs_missing": inputs.missing_removed,
        "skipped": dg.MetadataValue.json({"removed": dict(inputs.skipped_removed), "mix": dict(inputs.skipped_mix)}),
    }


@dg.asset(**_ARMS, kinds={"python"})
def arms_tokenizer(context: dg.AssetExecutionContext, contam_settings: ContamSettings,
                   arms_settings: ArmsSettings) -> dg.MaterializeResult:
    """Byte-level BPE trained on the natural pool; shared by every arm (<out>/arms/tokenizer/)."""
    from contam_assets.model.arms.pipeline import ensure_tokenizer, tokenizer_dir

    folder = tokenizer_dir(contam_settings.out_path)
    try:
        tok, meta = ensure_tokenizer(contam_settings.pool_path, folder, contam_settings.content_key,
                                     arms_settings.vocab_size, arms_settings.tokenizer_max_chars, retrain=True,
                                     log=context.log.info)
    except (FileNotFoundError, ValueError) as exc:
        raise dg.Failure(str(exc)) from exc
    return dg.MaterializeResult(metadata={
        "path": dg.MetadataValue.path(str(folder)), "vocab_size": len(tok),
        "documents": meta["documents"], "chars": meta["chars"], "shards": len(meta["shards"]),
        "skipped": dg.MetadataValue.json(meta.get("skipped", {})),
    })


@dg.asset(**_ARMS, kinds={"python", "duckdb"},
          deps=[REMOVALS, dg.AssetDep(MIX, partition_mapping=dg.AllPartitionMapping()), arms_tokenizer])
def exposure(context: dg.AssetExecutionContext, contam_settings: ContamSettings, contam_db: ContamDB,
             arms_settings: ArmsSettings) -> dg.MaterializeResult:
    """Per source: expected reads of a removed document in the proxy run and at target scale (seed 003)."""
    from contam_assets.model.arms.pipeline import compute_exposure, source_stats, tokenizer_dir, write_exposure
    from contam_assets.model.arms.tokenizer import load_tokenizer, token_counter

    inputs = _inputs(contam_settings, contam_db)
    tok = load_tokenizer(tokenizer_dir(contam_settings.out_path))
    stats = source_stats(inputs, token_counter(tok))
    config = arms_settings.train_config()
    try:
        report = compute_exposure(stats, config.effective_budget, arms_settings.proxy_weight_map(),
                                  arms_settings.target_scale())
    except ValueError as exc:
        raise dg.Failure(str(exc)) from exc
    write_exposure(contam_db.resolved(), contam_settings.out_path, report)
    return dg.MaterializeResult(metadata={
        "exposure": dg.MetadataValue.md(report.markdown()),
        "proxy_budget_tokens": config.effective_budget,
        "proxy_exposure_mean_removed": report.proxy_mean_removed,
        "target_exposure_mean_removed": report.target_mean_removed,
        "contaminated_share_proxy": report.contaminated_share_proxy,
        "contaminated_share_target": report.contaminated_share_target,
        "removed_docs": sum(r.removed_docs for r in report.rows),
        **_skips(context, inputs),
    })


@dg.asset(**_ARMS, kinds={"python"}, partitions_def=arms_partitions,
          deps=[REMOVALS, dg.AssetDep(MIX, partition_mapping=dg.AllPartitionMapping()), arms_tokenizer, exposure])
def arm_mix(context: dg.AssetExecutionContext, contam_settings: ContamSettings, contam_db: ContamDB,
            arms_settings: ArmsSettings) -> dg.MaterializeResult:
    """The arm's training stream: <experiments>/<experiment>/data/train.jsonl (+ data/mix.json)."""
    from contam_assets.model.arms.pipeline import make_arm_mix, read_target_exposure, tokenizer_dir, write_arm_mix
    from contam_assets.model.arms.tokenizer import load_tokenizer

    arm = context.partition_key
    inputs = _inputs(contam_settings, contam_db)
    tok = load_tokenizer(tokenizer_dir(contam_settings.out_path))
    target = read_target_exposure(contam_db.resolved()) if arm == "target_exposure" else None
    experiment = _experiment(arm, arms_settings)
    exp_dir = contam_settings.experiments_path / experiment
    try:
        mix = make_arm_mix(arm, inputs, tok, arms_settings.train_config(), arms_settings.seed, target,
                           arms_settings.proxy_weight_map())
    except ValueError as exc:
        raise dg.Failure(f"arm {arm}: {exc}") from exc
    summary = write_arm_mix(mix, exp_dir, extra={"experiment": experiment})
    return dg.MaterializeResult(metadata={
        "experiment": experiment, "path": dg.MetadataValue.path(str(exp_dir / "data" / "train.jsonl")),
        "documents": summary["rows"], "tokens": summary["tokens"], "epochs_read": summary["epochs_read"],
        "readded_docs": summary["readded_docs"], "readded_copies": summary["readded_copies"],
        "by_source": dg.MetadataValue.md(_md_table(summary["by_source"])),
        **_skips(context, inputs),
    })


# Training uses every core it is given: limit the pool to one run at a time with
# `dagster instance concurrency set arms_training 1` (or give each run fewer threads).
@dg.asset(**_ARMS, kinds={"pytorch"}, partitions_def=arms_partitions, deps=[arm_mix],
          pool="arms_training")
def arm_checkpoints(context: dg.AssetExecutionContext, contam_settings: ContamSettings,
                    arms_settings: ArmsSettings) -> dg.MaterializeResult:
    """A small GPT-2 trained on the arm's stream; checkpoint folders at a few steps."""
    from contam_assets.model.arms.pipeline import tokenizer_dir, train_experiment
    from contam_assets.model.arms.plots import loss_curve_png, markdown_image
    from contam_assets.model.arms.tokenizer import load_tokenizer

    arm = context.partition_key
    experiment = _experiment(arm, arms_settings)
    exp_dir = contam_settings.experiments_path / experiment
    if not (exp_dir / "data" / "train.jsonl").is_file():
        raise dg.Failure(f"no training stream at {exp_dir / 'data' / 'train.jsonl'}: materialize arm_mix[{arm}] first")
    mix_meta = json.loads((exp_dir / "data" / "mix.json").read_text())
    config = arms_settings.train_config()
    if mix_meta.get("budget_tokens") != config.effective_budget or mix_meta.get("seed") != arms_settings.seed:
        raise dg.Failure(f"arm_mix[{arm}] was built for budget {mix_meta.get('budget_tokens')} / seed "
                         f"{mix_meta.get('seed')}, not {config.effective_budget} / {arms_settings.seed}: re-materialize it")
    tok = load_tokenizer(tokenizer_dir(contam_settings.out_path))
    try:
        result = train_experiment(exp_dir, experiment, tok, config, recipe=arm, log=context.log.info)
    except (ValueError, FloatingPointError) as exc:
        raise dg.Failure(f"arm {arm}: {exc}") from exc
    png = loss_curve_png(result.losses, config.tokens_per_step, f"{experiment}: training loss")
    return dg.MaterializeResult(metadata={
        "experiment": experiment,
        "checkpoints": dg.MetadataValue.json(result.checkpoints),
        "tokens_seen": result.tokens_seen, "steps": result.steps_done, "steps_planned": result.steps_planned,
        "wall_s": round(result.wall_s, 1), "final_loss": result.losses[-1], "stopped_early": result.stopped_early,
        "loss_curve": dg.MetadataValue.md(markdown_image(png, "loss curve")),
        "path": dg.MetadataValue.path(str(exp_dir / "checkpoints")),
    })
