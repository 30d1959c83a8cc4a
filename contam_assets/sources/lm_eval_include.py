"""Which YAML of an lm-eval include folder lm_eval could not read, and why.

lm_eval indexes every ``**/*.yaml`` of an include folder and skips, with a debug log only, a file it cannot read
(bad YAML syntax, an ``include:`` of a file that is not there, an include cycle): the tasks of that file then
look unknown, or are silently missing from a group.  Here every file of the folder that lm_eval's index did not
take is read again as lm_eval reads it (its own loader, ``!function`` tags left unresolved, so no task code is
imported); the first that fails is named with its reason in one line.  A file that reads but defines no task
(a template other YAMLs include) is no error.
"""

from __future__ import annotations

from pathlib import Path

IGNORED_PARTS = {"__pycache__", ".ipynb_checkpoints"}  # folders lm_eval's index does not look into


def broken_yaml(include: str | Path, tm) -> str | None:
    """One line naming the first YAML of ``include`` that lm_eval could not read and why, else None.  ``tm``: the
    TaskManager built over the folder (its index says which files were taken)."""
    try:
        from lm_eval.tasks._yaml_loader import load_yaml
    except ImportError:  # another lm_eval layout: nothing to say beyond what lm_eval says
        return None
    folder = Path(include).resolve()
    indexed = {Path(e.yaml_path).resolve() for e in tm.task_index.values() if getattr(e, "yaml_path", None)}
    for path in sorted(folder.glob("**/*.yaml"), key=lambda p: p.as_posix()):
        if IGNORED_PARTS & set(path.parts) or path.resolve() in indexed:
            continue
        try:
            load_yaml(path, resolve_func=False, recursive=True)
        except Exception as exc:  # noqa: BLE001 - lm_eval skips the file on any error; name it with its reason
            reason = " ".join(str(exc).split())[:300] or type(exc).__name__
            return f"lm-eval include folder {folder}: {path.relative_to(folder)} cannot be read: {reason}"
    return None
