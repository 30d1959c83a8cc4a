"""Which Python an lm-eval task would run when it is built, found without running it.

lm_eval runs a task's code when it builds the task: every ``!function module.name`` tag of its YAML (and of the
YAMLs it ``include:``s) imports ``module.py`` from beside that YAML (or an importable module of that name), and
``class: !function`` builds a Python task class.  Indexing the YAMLs does not (lm_eval's TaskManager reads them with
functions unresolved), so a task's names and group members are known before anything is imported.

Here every YAML a name reaches (its own, its includes, a group's members, a tag's tasks) is read with a loader that
records each ``!function`` tag instead of resolving it, and each tag is resolved to the file lm_eval would import.
Code inside the installed lm_eval package is installed code, like lm_eval itself; any other file is the user's
task code, which runs only when they say so (``--trust-task-code``).
"""

from __future__ import annotations

import importlib.util
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

from contam_assets import settings


@dataclass(frozen=True)
class TaskCode:
    module: Path  # the Python file lm_eval would import
    yaml: Path  # the YAML whose !function tag names it


class _Function:
    def __init__(self, spec: str):
        self.spec = spec


class _Loader(yaml.SafeLoader):
    pass


_Loader.add_constructor("!function", lambda loader, node: _Function(str(loader.construct_scalar(node))))


def installed_root() -> Path | None:
    """The installed lm_eval package's folder (located, not imported), or None."""
    found = importlib.util.find_spec("lm_eval")
    return Path(found.origin).resolve().parent if found and found.origin else None


def _foreign(code: list[TaskCode]) -> list[TaskCode]:
    root = installed_root()
    return [c for c in code if root is None or not c.module.is_relative_to(root)]


def include_code(folder: Path) -> list[TaskCode]:
    """The code outside the installed lm_eval that any YAML of an include folder names (lm_eval indexes every
    ``**/*.yaml`` of it): empty means no task of the folder can run the user's code."""
    seen: set[Path] = set()
    return list(dict.fromkeys(c for p in sorted(Path(folder).glob("**/*.yaml")) if "__pycache__" not in p.parts
                              for c in _foreign(yaml_code(p, seen))))


def _functions(value) -> list[str]:
    if isinstance(value, _Function):
        return [value.spec]
    if isinstance(value, dict):
        return [f for v in value.values() for f in _functions(v)]
    if isinstance(value, list):
        return [f for v in value for f in _functions(v)]
    return []


def _module_file(spec: str, base: Path) -> Path | None:
    """The file lm_eval imports for ``!function spec`` in a YAML under ``base``: ``module.py`` beside the YAML,
    else the importable module's file (located, not imported)."""
    mod, _, _ = spec.rpartition(".")
    if not mod:
        return None
    beside = (base / f"{mod.replace('.', '/')}.py").resolve()
    if beside.exists():
        return beside
    try:
        found = importlib.util.find_spec(mod.split(".")[0])
    except (ImportError, ValueError):
        return None
    if not found:
        return None
    if found.origin and Path(found.origin).is_file():
        return Path(found.origin).resolve()
    # a namespace package (no file of its own), a built-in or frozen module: lm_eval would still import it, so it
    # is code outside lm_eval, named by its first folder or else by the module's name
    places = list(found.submodule_search_locations or [])
    return Path(places[0]).resolve() if places else Path(mod)


SANDBOX_HINT = "a task template reached for Python internals; templates render sandboxed without --trust-task-code"


@contextmanager
def template_sandbox(trusted: bool):
    """While building and reading tasks: lm_eval renders ``doc_to_text`` / ``doc_to_target`` / ``doc_to_choice``
    with its own unsandboxed Jinja environment (``lm_eval.utils.env``), through which a template of an include
    folder could run any Python.  Untrusted, that environment is swapped for an immutable sandboxed one with the
    same settings and filters (ordinary templates render the same; ``__globals__`` and the like raise
    SecurityError), and put back after."""
    try:
        import lm_eval.utils as lm_utils
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        yield
        return
    original = getattr(lm_utils, "env", None)
    if trusted or original is None:
        yield
        return
    sandboxed = ImmutableSandboxedEnvironment(loader=original.loader, undefined=original.undefined,
                                              keep_trailing_newline=original.keep_trailing_newline)
    sandboxed.filters.update({k: v for k, v in original.filters.items() if k not in sandboxed.filters})
    lm_utils.env = sandboxed
    try:
        yield
    finally:
        lm_utils.env = original


def yaml_code(path: Path, seen: set[Path] | None = None) -> list[TaskCode]:
    """The code the ``!function`` tags of one YAML and its includes name (unreadable YAML: none; lm_eval skips it)."""
    path = path.expanduser().resolve()
    seen = set() if seen is None else seen
    if path in seen:
        return []
    seen.add(path)
    try:
        cfg = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return []
    if not isinstance(cfg, dict):
        return []
    out = [TaskCode(module=m, yaml=path) for f in _functions(cfg) if (m := _module_file(f, path.parent)) is not None]
    for inc in _includes(cfg):  # the file's own, and those of a group's inline task configs
        out += yaml_code(Path(inc) if Path(inc).is_absolute() else path.parent / inc, seen)
    return out


def _includes(value) -> list[str]:
    if isinstance(value, list):
        return [i for v in value for i in _includes(v)]
    if not isinstance(value, dict):
        return []
    own = value.get("include") or []
    own = [i for i in (own if isinstance(own, list) else [own]) if isinstance(i, str)]
    return own + [i for k, v in value.items() if k != "include" for i in _includes(v)]


def _members(tm, name: str) -> list[str]:
    entry = tm.task_index.get(name)
    kind = getattr(getattr(entry, "kind", None), "name", "")
    if kind == "TAG":
        return sorted(n for n, e in tm.task_index.items() if name in (e.tags or ()))
    if kind == "GROUP":
        out = []
        for t in (entry.cfg or {}).get("task", []) or []:
            if isinstance(t, str):
                out.append(t)
            elif isinstance(t, dict) and isinstance(t.get("task"), str):
                out.append(t["task"])
        return out
    return []


def task_code(tm, names: list[str]) -> list[TaskCode]:
    """Every file of code that building these tasks, groups or tags would import, outside the installed lm_eval."""
    out, seen_names, seen_yaml = [], set(), set()
    todo = list(names)
    while todo:
        name = todo.pop(0)
        if name in seen_names:
            continue
        seen_names.add(name)
        entry = tm.task_index.get(name)
        if entry is None:
            continue
        if getattr(entry, "yaml_path", None):
            out += _foreign(yaml_code(Path(entry.yaml_path), seen_yaml))
        todo += _members(tm, name)
    return list(dict.fromkeys(out))


def refusal(code: list[TaskCode]) -> str:
    """The one line `contam detect` prints when task code would run without --trust-task-code."""
    first = code[0]
    more = f" and {len(code) - 1} more file(s)" if len(code) > 1 else ""
    return (f"lm-eval task code would run: {first.module} (a !function of {first.yaml}){more}; "
            f"pass --trust-task-code ({settings.var('trust_task_code')}=1) to run it")
