"""``contam``: the command line.  Subcommands live in ``contam_assets/commands/``.

Each module there defines ``register(subparsers)`` which adds its subcommand(s)
and sets ``func`` (a callable taking the parsed args and returning an exit code).
Heavy imports (torch, dagster) happen inside the handlers, so ``contam --help``
stays fast.
"""

from __future__ import annotations

import argparse
import atexit
import importlib
import os
import pkgutil
import sys
import threading

from contam_assets import commands as _commands_pkg
from contam_assets.report.inert import term_text


class CliError(Exception):
    """A user error: printed as one clear line, exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="contam", description="Measure and remove benchmark contamination.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(_commands_pkg.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{_commands_pkg.__name__}.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        rc = args.func(args)
    except CliError as exc:
        print(f"contam {args.command}: error: {term_text(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return int(rc or 0)


def entry() -> None:
    """The ``contam`` command: ``main``, then exit without the interpreter tearing down the heap object by object.

    A `contam detect` ends holding the reference set, the index and Dagster's modules: freeing them one by one
    took 1–2 s of one core after the summary was printed.  The exit handlers still run (logging, wandb, the
    process pools') and the streams are flushed; where a thread other than this one still runs, the ordinary
    exit waits for it.
    """
    rc = main()
    if threading.active_count() > 1:
        sys.exit(rc)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):  # a closed pipe or stream, or none: what a normal exit loses too
            pass
    os._exit(rc)


if __name__ == "__main__":  # pragma: no cover
    # `python -m contam_assets.cli`: run the importable module's entry so CliError is one class
    from contam_assets.cli import entry as _entry

    _entry()
