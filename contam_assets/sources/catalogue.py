"""Where task specs live: the project's data/tasks, or the catalogue shipped with the package (no Dagster here, so
`contam detect` checks task names before it imports Dagster)."""

from __future__ import annotations

from pathlib import Path

from contam_assets.settings import DEFAULT_TASKS_DIR  # noqa: F401 - the project's data/tasks, imported from here too

PACKAGE = Path(__file__).resolve().parents[1]
# specs over the Hub's own layouts, no data (docs/benchmarks.md); `--tasks-dir catalogue`
CATALOGUE_DIR = PACKAGE / "catalogue"


def resolve_tasks_dir(value: str | None) -> Path:
    """A task folder as the user named it: "" is data/tasks, "catalogue" the shipped catalogue (unless a folder
    of that name is where the command runs)."""
    if not value:
        return DEFAULT_TASKS_DIR
    if value == "catalogue" and not Path(value).is_dir():
        return CATALOGUE_DIR
    return Path(value).resolve()
