"""``contam``: the command line.  Subcommands live in ``contam_assets/commands/``.

Each module there defines ``register(subparsers)`` which adds its subcommand(s)
and sets ``func`` (a callable taking the parsed args and returning an exit code).
Heavy imports (torch, dagster) happen inside the handlers, so ``contam --help``
stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from contam_assets import commands as _commands_pkg


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
        print(f"contam {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    # `python -m contam_assets.cli`: run the importable module's main so CliError is one class
    from contam_assets.cli import main as _main

    sys.exit(_main())
