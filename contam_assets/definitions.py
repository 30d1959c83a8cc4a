"""Entry point for ``dagster dev`` (see workspace.yaml) and the CLI.

Each module or package under ``contam_assets/defs/`` exports ``defs``; they are
merged here so one code location shows the whole graph.  Shared resources live
in ``contam_assets/defs/resources.py``; domain packages add resources under
keys of their own.
"""

from __future__ import annotations

import importlib
import pkgutil

import dagster as dg

from contam_assets import defs as _defs_pkg


def build_definitions() -> dg.Definitions:
    parts = []
    for info in sorted(pkgutil.iter_modules(_defs_pkg.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{_defs_pkg.__name__}.{info.name}")
        d = getattr(module, "defs", None)
        if isinstance(d, dg.Definitions):
            parts.append(d)
    return dg.Definitions.merge(*parts)


defs = build_definitions()
