"""`contam arms`: train the proxy ablation arms of seed 003 after `contam detect`."""

from __future__ import annotations

import argparse
from pathlib import Path

from contam_assets.settings import add_flag

ARM_NAMES = ("decontaminated", "natural", "full", "target_exposure")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "arms",
        help="train the proxy ablation arms (decontaminated, natural, full, target_exposure) on CPU",
        description="Reads OUT/contam.duckdb (removals) and OUT/mix/ written by `contam detect --pool POOL --out OUT`, "
        "trains one small GPT-2 per arm and seed, and writes checkpoint folders under the experiments folder.",
    )
    add_flag(p, "pool_dir", "--pool", dest="pool", later=True, doc="the pool `contam detect` scanned")
    add_flag(p, "out_dir", "--out", dest="out", later=True, doc="the output folder of `contam detect`")
    add_flag(p, "experiments_dir", "--experiments", dest="experiments", later=True)
    p.add_argument("--arms", default=",".join(ARM_NAMES), help="comma-separated arms (default: all four)")
    p.add_argument("--seed", default="0", help="seed, or comma-separated seeds for repeated runs (e.g. 0,1,2)")
    from contam_assets.model.arms.train import TrainConfig

    d = TrainConfig()
    p.add_argument("--budget-tokens", type=int, default=d.budget_tokens, help="tokens each arm trains on (default %(default)s)")
    p.add_argument("--max-minutes", type=float, default=0.0, help="wall-clock cap per arm (0 = none)")
    p.add_argument("--vocab-size", type=int, default=4096)
    p.add_argument("--block-size", type=int, default=d.block_size)
    p.add_argument("--batch-size", type=int, default=d.batch_size)
    p.add_argument("--n-layer", type=int, default=d.n_layer)
    p.add_argument("--n-embd", type=int, default=d.n_embd)
    p.add_argument("--n-head", type=int, default=d.n_head)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--warmup-steps", type=int, default=d.warmup_steps)
    p.add_argument("--checkpoints", type=int, default=d.n_checkpoints, help="checkpoints per arm, evenly spaced")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = every core)")
    p.add_argument("--weights", default="", help="proxy mix epochs per source, e.g. math=2,web=0.5 (default 1 each)")
    p.add_argument("--target-weights", default="", help="production mix epochs per source (default: see docs/arms.md)")
    p.add_argument("--target-budget-tokens", type=float, default=0.0,
                   help="production budget in tokens (0 = one pass over the production mix)")
    add_flag(p, "content_key", later=True)
    p.set_defaults(func=run)


def _int_list(spec: str, what: str) -> list[int]:
    from contam_assets.cli import CliError

    try:
        out = [int(s) for s in spec.split(",") if s.strip()]
    except ValueError:
        raise CliError(f"bad {what} {spec!r}: expected integers separated by commas") from None
    if not out:
        raise CliError(f"no {what} given")
    return out


def run(args) -> int:
    from contam_assets.cli import CliError
    from contam_assets.defs.resources import ContamSettings
    from contam_assets.model.arms.exposure import DEFAULT_TARGET_WEIGHTS, TargetScale, parse_weights
    from contam_assets.model.arms.inputs import load_arm_inputs
    from contam_assets.model.arms.pipeline import ArmsPlan, run_arms
    from contam_assets.model.arms.train import TrainConfig

    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARM_NAMES]
    if unknown or not arms:
        raise CliError(f"unknown arm(s) {unknown or args.arms!r}; choose from {', '.join(ARM_NAMES)}")
    seeds = _int_list(args.seed, "seed")
    settings = ContamSettings.from_env(
        out_dir=str(Path(args.out).resolve()) if args.out else None,
        pool_dir=str(Path(args.pool).resolve()) if args.pool else None,
        experiments_dir=str(Path(args.experiments).resolve()) if args.experiments else None,
        content_key=args.content_key,
    )
    if not settings.pool_path.is_dir():
        raise CliError(f"pool folder not found: {settings.pool_path} (give --pool)")
    try:
        proxy_weights = parse_weights(args.weights)
        target_weights = parse_weights(args.target_weights) if args.target_weights else dict(DEFAULT_TARGET_WEIGHTS)
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    config = TrainConfig(
        budget_tokens=args.budget_tokens, block_size=args.block_size, batch_size=args.batch_size,
        n_layer=args.n_layer, n_embd=args.n_embd, n_head=args.n_head, lr=args.lr,
        warmup_steps=args.warmup_steps, n_checkpoints=args.checkpoints, max_minutes=args.max_minutes, num_threads=args.threads,
    )
    try:
        config.validate()
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    plan = ArmsPlan(arms=arms, seeds=seeds, config=config, proxy_weights=proxy_weights,
                    target=TargetScale(weights=target_weights, budget_tokens=args.target_budget_tokens),
                    vocab_size=args.vocab_size, default_seed=0)
    try:
        inputs = load_arm_inputs(settings.pool_path, settings.out_path / "mix", settings.db_path, settings.content_key)
    except (FileNotFoundError, LookupError) as exc:
        raise CliError(str(exc)) from exc
    if inputs.missing_removed:
        print(f"warning: {inputs.missing_removed} removed document(s) not found in the pool: {dict(inputs.skipped_removed)}")
    if inputs.skipped_mix:
        print(f"warning: unusable lines in the mix: {dict(inputs.skipped_mix)}")
    print(f"pool {settings.pool_path}: {len(inputs.decontaminated):,} documents in the mix, {len(inputs.removed):,} removed")
    try:
        report, runs = run_arms(plan, inputs, settings.pool_path, settings.out_path, settings.experiments_path,
                                settings.content_key, log=print)
    except (FileNotFoundError, ValueError) as exc:
        raise CliError(str(exc)) from exc
    print("\nexposure of a removed document, per source")
    print(report.markdown())
    print(f"mean over removed documents: proxy {report.proxy_mean_removed:.4f}, target {report.target_mean_removed:.3f}\n")
    print("| experiment | documents | re-added copies | steps | tokens | final loss | wall s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in runs:
        res = r.result
        flag = " (wall-clock cap)" if res.stopped_early else ""
        print(f"| {r.experiment} | {r.mix['rows']:,} | {r.mix['readded_copies']:,} | {res.steps_done}{flag} "
              f"| {res.tokens_seen:,} | {res.losses[-1]:.3f} | {res.wall_s:.0f} |")
    print(f"\ncheckpoints under {settings.experiments_path}/<experiment>/checkpoints/")
    return 0
