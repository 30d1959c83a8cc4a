"""The code location: every definition under ``contam_assets/defs/``, loaded the way dg projects load them.

``[tool.dg]`` in pyproject.toml names this module; ``dg dev``, ``dg check defs``,
``dg list defs``, ``dagster dev`` (pyproject.toml or workspace.yaml) and the dagster
CLI all load ``defs`` from here under one code location name, ``contam_assets``.
``load_from_defs_folder`` imports each module under ``defs/`` and collects what it
declares (assets, checks, jobs, sensors, schedules, and the resources of the
``@dg.definitions`` functions), so a new file there loads without being listed.
The settings (contam_assets/settings.py) are read from the environment when the location loads, not when this module
is imported.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

CODE_LOCATION = "contam_assets"


def build_definitions() -> dg.Definitions:
    """The whole graph (tests and the runner call this; tools call ``defs``)."""
    return dg.load_from_defs_folder(path_within_project=Path(__file__).resolve().parent)


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions()
