"""`contam estimate`: how contaminated a pool is, from a random sample of its shards, before a full scan."""

from __future__ import annotations

import argparse
import json
import math

from contam_assets.settings import add_flag, fill_args


def detect_args(args) -> argparse.Namespace:
    """The arguments of a `contam detect` of the same pool and settings: detect's own defaults for everything
    `contam estimate` does not ask for, so the sample is scanned as a full run with these flags scans it."""
    from contam_assets.commands import detect

    parser = argparse.ArgumentParser(add_help=False)
    detect.register(parser.add_subparsers())
    full = fill_args(parser.parse_args(["detect", "--pool", str(args.pool), "--out", str(args.out)]))
    for k, v in vars(args).items():
        setattr(full, k, v)
    return full


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("estimate", help="estimate a pool's contamination from a random sample of its shards, with 95 %% "
                       "intervals, before a full scan",
                       description="Scan a seeded stratified random sample of whole shards (or of blocks of shards, "
                                   "when the pool has too few shards) with the detector and settings of a full run, and estimate for the whole pool, per task and split: documents removed "
                                   "and held for review and their tokens, copies per benchmark item and the share of items "
                                   "present (docs/estimate.md).  A sample of whole shards keeps its rows in OUT: `contam detect` "
                                   "with the same OUT does not scan those shards again.")
    p.add_argument("--pool", required=True, help="pool: a folder, file, glob or URL of JSON/JSONL, Parquet or Arrow files "
                   "(docs/pools.md)")
    p.add_argument("--fraction", required=True, type=float, help="share of the shards to sample, in (0, 1], e.g. 0.026")
    p.add_argument("--seed", type=int, default=0, help="seed of the sample (default 0)")
    p.add_argument("--out", required=True, help="output folder (contam.duckdb, estimate.json, tables/pool_estimates/, "
                                                "report.html)")
    add_flag(p, "benchmarks_dir", "--benchmarks", dest="benchmarks")
    add_flag(p, "tasks")
    add_flag(p, "tasks_dir")
    add_flag(p, "preset")
    p.add_argument("--unit", choices=["auto", "shard", "block"], default="auto",
                   help="what the sample draws: auto (default: whole shards when the sample holds at least 100, else "
                        "blocks of shards: byte ranges of JSON/JSONL cut at line boundaries, Parquet row groups), "
                        "shard or block")
    p.add_argument("--by", choices=["source"], help="source: also estimate per document source (the `source` field)")
    add_flag(p, "content_key", later=True)
    p.add_argument("--dagster-home", help="Dagster instance folder (default: $DAGSTER_HOME, else OUT/.dagster_home)")
    p.set_defaults(func=run)


def run_estimate(settings, instance, fraction: float, seed: int = 0,
                 by_source: bool = False, log=print, unit: str = "auto") -> dict:
    """`contam estimate`: the reference set and index, then `estimate_pool` (the sampled shards scanned as a full run
    scans them, the estimate written), then the removals and the report; estimate.json's object with the stages'
    seconds under `seconds`."""
    from contam_assets import runner
    from contam_assets.defs.data import estimate as data_estimate
    from contam_assets.defs.data.jobs import reference_job, report_job
    from contam_assets.report.run_summary import Clock
    from contam_assets.store.files import atomic_write_text, sweep_temp_files
    from contam_assets.store.pool import list_pool

    defs = runner.data_definitions(settings)
    clock = Clock()
    sweep_temp_files(settings.out_path)
    listing = list_pool(settings.pool_path, settings.follow_symlinks)
    if not listing.shards:
        raise FileNotFoundError(f"no .json/.jsonl shards (plain, .gz, .zst, .zstd, .bz2, .xz) in {settings.pool_path}")
    atomic_write_text(settings.out_path / "run.json", json.dumps(runner.settings_record(settings), indent=2))
    log("reference set and index")
    runner._run_job(defs, reference_job, instance, log=log)
    clock.lap("reference")
    log(f"estimate from a {fraction:g} sample of {len(listing.shards)} shard(s)")
    runner._run_job(defs, data_estimate.estimate_job, instance, log=log,
                    ops={"pool_estimate": {"config": {"fraction": fraction, "seed": seed, "by_source": by_source,
                                                           "unit": unit}}})
    clock.lap("sample")
    result = json.loads((settings.out_path / "estimate.json").read_text())
    # a block sample leaves OUT's own matches as they were: their removals stand, the report is rendered again
    runner._run_job(defs, report_job, instance, log=log,
                    assets=["removal_report"] if result.get("unit") == "block" else None)
    clock.lap("report")
    return result | {"seconds": clock.laps}


def run(args) -> int:
    from contam_assets.cli import CliError
    from contam_assets.commands.detect import settings_from_args
    from contam_assets.estimate.design import check_fraction

    if math.isnan(args.fraction):
        raise CliError("--fraction must be in (0, 1], got nan")
    try:
        check_fraction(args.fraction)
    except ValueError as exc:
        raise CliError(f"--fraction: {exc}") from None
    if args.tasks and not [t for t in args.tasks.split(",") if t.strip()]:
        raise CliError("--tasks names no task")
    settings = settings_from_args(detect_args(args))
    from contam_assets import runner
    from contam_assets.estimate.pool import sentences
    from contam_assets.report.inert import term_text
    from contam_assets.store.pool import list_pool

    if not list_pool(settings.pool_path, settings.follow_symlinks).shards:
        raise CliError(f"no .json/.jsonl shards (plain, .gz, .zst, .zstd, .bz2, .xz) in {settings.pool_path}")
    instance = runner.instance_for(settings.out_path, args.dagster_home)
    try:
        result = run_estimate(settings, instance, args.fraction, args.seed, by_source=args.by == "source",
                              unit=args.unit)
    except (FileNotFoundError, runner.StepFailed) as exc:
        raise CliError(str(exc)) from exc
    s = result["sampled"]
    what = "shard(s)" if result.get("unit", "shard") == "shard" else f"blocks of {result['block_bytes']:,} bytes"
    print(f"\nsampled {s['units']} of {result['pool']['units']} {what}: {s['documents']:,} documents, "
          f"{s['bytes']:,} of {result['pool']['bytes']:,} bytes (seed {result['seed']})")
    for unit in result["not_scanned"]:
        print(f"not scanned (left out of the estimate): {term_text(unit)}")
    if not result["tasks"]:
        raise CliError("no task with indexed items: nothing to estimate")
    for line in sentences(result):
        print(term_text(line))
    print("seconds " + "  ".join(f"{k} {v:.2f}" for k, v in result["seconds"].items()))
    out = settings.out_path
    print(f"estimate {out / 'estimate.json'}\ntable   {out / 'contam.duckdb'} (pool_estimates; "
          f"{out / 'tables' / 'pool_estimates'}/)"
          f"\nreport  {out / 'report.html'}")
    return 0
