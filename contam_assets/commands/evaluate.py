"""``contam evaluate``: write evaluation reports without Dagster (same core as the asset)."""

from __future__ import annotations

from pathlib import Path

from contam_assets.settings import add_flag


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "evaluate",
        help="write <experiments>/<experiment>/eval/<stage>/report.json for checkpoints",
        description="Build the evaluation report (model, scores from probe_metrics, benchmark values, "
        "contamination against <experiment>/data/train.jsonl) of each checkpoint, and send it to wandb "
        "when the evaluation config enables the tracker. See docs/evaluation.md.",
    )
    p.add_argument("checkpoints", nargs="*", metavar="EXPERIMENT/STAGE",
                   help="checkpoints to evaluate (default: every checkpoint folder under the experiments folder)")
    add_flag(p, "experiments_dir", "--experiments", dest="experiments")
    add_flag(p, "eval_config", "--config", dest="config")
    p.add_argument("--db", default=None, help="DuckDB file with probe_metrics (default <out_dir setting>/contam.duckdb)")
    p.add_argument("--no-cache", action="store_true", help="recompute contamination even when cached")
    p.set_defaults(func=_run)


def _run(args) -> int:

    from contam_assets import store
    from contam_assets.cli import CliError
    from contam_assets.defs.resources import ContamSettings
    from contam_assets.evaluation.checkpoint_report import ReportError, evaluate
    from contam_assets.evaluation.config import ConfigError, load_config
    from contam_assets.evaluation.tracker import TrackerError, send_report

    settings = ContamSettings.from_env(experiments_dir=args.experiments)
    try:
        config = load_config(args.config or None)
    except ConfigError as exc:
        raise CliError(str(exc)) from exc
    exp_dir = settings.experiments_path
    keys = args.checkpoints or sorted(
        f"{p.parent.parent.name}/{p.name}" for p in exp_dir.glob("*/checkpoints/*") if p.is_dir()
    )
    if not keys:
        raise CliError(f"no checkpoints under {exp_dir}/*/checkpoints/")
    db = Path(args.db).resolve() if args.db else settings.db_path
    connect = (lambda: store.connect(db, read_only=True)) if db.exists() else None
    failed = 0
    for key in keys:
        if key.count("/") != 1:
            raise CliError(f"checkpoint {key!r} must be EXPERIMENT/STAGE")
        experiment, stage = key.split("/")
        try:
            ev = evaluate(exp_dir, experiment, stage, config=config, benchmarks_dir=settings.benchmarks_path,
                          connect=connect, content_key=settings.content_key, use_cache=not args.no_cache)
        except ReportError as exc:
            print(f"{key}: error: {exc}")
            failed += 1
            continue
        c = ev.report["contamination"]
        what = "base (contamination null)" if c is None else (
            f"items {c['items']} exact {c['exact']} near {c['near']} share_mean {c['share_mean']}")
        try:
            sent = send_report(ev.path, ev.report, config.tracker, exp_dir / "wandb")
        except TrackerError as exc:
            print(f"{key}: {ev.path} ({'written' if ev.changed else 'unchanged'}; {what}; tracker: error: {exc})")
            failed += 1
            continue
        run = f", run {sent.run_id}" if sent.run_id else ""
        print(f"{key}: {ev.path} ({'written' if ev.changed else 'unchanged'}; {what}; tracker: {sent.reason}{run})")
    return 1 if failed else 0
