"""`contam demo`: the embedded default — build a small pool with planted benchmark items and run the graph."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from contam_assets.settings import add_flag, var


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="build a demo pool with planted benchmark copies and run the whole data graph")
    add_flag(p, "out_dir", "--out", dest="out", doc="output folder")
    add_flag(p, "benchmarks_dir", "--benchmarks", dest="benchmarks")
    p.add_argument("--docs", type=int, default=1500, help="documents in the demo pool")
    p.add_argument("--seed", type=int, default=0)
    add_flag(p, "preset")
    p.add_argument("--dagster-home")
    p.set_defaults(func=run)


def run(args) -> int:
    from contam_assets.commands.detect import precheck, print_summary, say

    precheck(args)  # --out and --dagster-home: one line, before any work (and before Dagster is imported)
    from contam_assets import runner
    from contam_assets.cli import CliError
    from contam_assets.defs.resources import ContamSettings
    from contam_assets.demo import build_demo_pool
    from contam_assets.detector.config import preset
    from contam_assets.settings import DEFAULT_TASKS_DIR
    from contam_assets.sources.reference import build_reference_set
    from contam_assets.sources.registry import load_registry
    from contam_assets.store.files import atomic_write_text

    out = Path(args.out).resolve()
    bench = Path(args.benchmarks).resolve() if args.benchmarks else None
    if bench is not None and not bench.is_dir():
        raise CliError(f"benchmark folder not found: {bench}")
    try:
        runner.check_environment()
    except ValueError as exc:
        raise CliError(str(exc)) from None
    cfg = preset(args.preset)
    print(f"building the demo pool ({args.docs} documents, benchmarks: {bench or 'embedded HumanEval'})")
    records, _ = build_reference_set(load_registry(DEFAULT_TASKS_DIR), bench, cfg)
    pool = out / "demo_pool"
    planted = build_demo_pool(pool, records, n_docs=args.docs, seed=args.seed)
    atomic_write_text(out / "demo_truth.jsonl", "".join(json.dumps(p.__dict__) + "\n" for p in planted))
    settings = ContamSettings(out_dir=str(out), pool_dir=str(pool), benchmarks_dir=str(bench) if bench else "", preset=args.preset)
    instance = runner.instance_for(out, args.dagster_home)
    try:
        s = runner.run_detect(settings, instance, log=say)
    except (FileNotFoundError, RuntimeError) as exc:
        raise CliError(str(exc)) from exc
    print(f"\nplanted {len(planted)} benchmark copies (truth: {out / 'demo_truth.jsonl'})")
    print_summary(s)
    home = instance.root_directory
    print(f"\nLook at: the report  file://{s['report']}\n"
          f"         the review  contam review {out} --top 5\n"
          f"         the UI      DAGSTER_HOME={home} {var('out_dir')}={out} {var('pool_dir')}={pool} dagster dev")
    return 0
