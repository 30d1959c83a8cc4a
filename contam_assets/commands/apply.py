"""`contam apply`: re-apply review decisions (removals, report, mix) without rescanning."""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("apply", help="apply review decisions: recompute removals, the report and the mix")
    p.add_argument("out", help="output folder of `contam detect`")
    p.add_argument("--pool", help="pool folder (default: the one recorded by the last scan)")
    p.add_argument("--dagster-home")
    p.set_defaults(func=run)


def run(args) -> int:
    from contam_assets import runner
    from contam_assets.cli import CliError
    from contam_assets.commands.detect import exit_code, precheck, print_summary, say
    from contam_assets.commands.review import db_path
    from contam_assets.store.location import scheme_of

    out = Path(args.out).resolve()
    db_path(out)  # validates the folder
    precheck(args)  # a folder it cannot write in, a Dagster home it cannot write: one line, before any work
    settings = runner.recorded_settings(out)
    if settings is None:
        raise CliError(f"{out}/run.json missing: run `contam detect` first")
    # the folder named on the command line, even when it was moved or copied since the scan
    settings = settings.model_copy(update={"out_dir": str(out)})
    if args.pool:
        spec = args.pool if scheme_of(args.pool) else os.path.abspath(os.path.expanduser(args.pool))  # a URL as given
        settings = settings.model_copy(update={"pool_dir": spec})
    if not settings.pool_path.is_dir():
        raise CliError(f"pool not found: {settings.pool_location.display} (pass --pool)")
    instance = runner.instance_for(out, args.dagster_home)
    try:
        s = runner.run_apply(settings, instance, log=say)
    except (FileNotFoundError, RuntimeError) as exc:
        raise CliError(str(exc)) from exc
    print_summary(s)
    return exit_code(s)
