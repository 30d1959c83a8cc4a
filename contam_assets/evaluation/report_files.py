"""Finding and reading the report files under an output folder, safely.

``<output_dir>/<experiment>/eval/<stage>/report.json``: ``walk`` lists them
(names starting with ``.`` are skipped, e.g. ``eval/.cache``), ``read_report``
reads and validates one.  Nothing here raises for a bad file: the walker
yields an entry with an error ``kind`` and the reader raises ``Refused``,
whose message holds no server path and no code location.

Error kinds (``Refused.kind`` or ``Found.kind``):

* ``refused`` — a folder or file reached through a symlink that leaves the
  allowed roots; it is never opened or listed;
* ``bad_name`` — an experiment or stage name that is not valid UTF-8 (it
  could not be asked for by name);
* ``not_a_file`` — ``report.json`` is a FIFO, socket, device or folder (never opened);
* ``too_large`` — over ``MAX_REPORT_BYTES``;
* ``unreadable`` — an OS error (permissions, a folder that cannot be listed);
* ``malformed`` — not UTF-8, not JSON, or nested deeper than ``MAX_DEPTH``;
* ``invalid`` — JSON, but not a report: wrong ``schema`` or a field of the wrong type.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from pydantic import BaseModel, ConfigDict, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError

from contam_assets.evaluation.checkpoint_report import REPORT_FILE, SCHEMA
from contam_assets.evaluation.safeio import Refused, display_name, loads_bounded, name_problem, os_message, read_regular

MAX_REPORT_BYTES = 8 * 1024 * 1024
MAX_DEPTH = 32  # a report nests 5 levels deep


# -- the shape a report must have (pydantic's strict types: validated in Rust, bools are not numbers) -------
Number = StrictFloat | None  # an int passes too
Integer = StrictInt | None
Text = StrictStr | None


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ModelShape(_Open):
    stage: StrictStr
    step: Integer = None
    is_base: StrictBool = False
    checkpoint: Text = None
    experiment: Text = None


class BenchmarkShape(_Open):
    metric: Text = None
    value: Number = None


class ContaminationShape(_Open):
    items: Integer = None
    exact: Integer = None
    near: Integer = None
    exact_rate: Number = None
    near_rate: Number = None
    share_mean: Number = None
    flagged: list[Any] = []


class ReportShape(_Open):
    """The fields the API and the comparison read; other fields pass unchecked (``schema`` is checked before)."""

    model: ModelShape
    recipe: Text = None
    scores: dict[str, Number]
    benchmarks: dict[str, BenchmarkShape]
    contamination: ContaminationShape | None


_MESSAGES = {"missing": "is missing", "model_type": "must be an object", "dict_type": "must be an object",
             "list_type": "must be a list", "float_type": "must be a number", "int_type": "must be an integer",
             "string_type": "must be a string", "bool_type": "must be true or false"}
_NOT_NULL = {("model", "stage"), ("model", "is_base")}


def validation_message(exc: ValidationError) -> str:
    """The first problem as ``field.path: message`` (no input values, no code locations)."""
    errors = exc.errors(include_url=False, include_context=False, include_input=False)
    first = errors[0]
    loc = ".".join(str(p) for p in first["loc"]) or "report"
    msg = _MESSAGES.get(first["type"]) or first["msg"]
    if first["type"] in ("float_type", "int_type", "string_type") and tuple(first["loc"]) not in _NOT_NULL:
        msg += " or null"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"`{loc}` {msg}{more}"


def validate_report(data: Any) -> dict:
    """``data`` if it has the shape of a report, else Refused(kind="invalid")."""
    if not isinstance(data, dict):
        raise Refused("invalid", "not a JSON object")
    if data.get("schema") != SCHEMA:
        raise Refused("invalid", f"`schema` is {str(data.get('schema'))[:60]!r}, expected {SCHEMA!r}")
    try:
        ReportShape.model_validate(data)
    except ValidationError as exc:
        raise Refused("invalid", validation_message(exc)) from None
    return data


def read_report(path: str | os.PathLike, lstat_result: os.stat_result | None = None) -> dict:
    """Read, parse and check one report file (a resolved path); raises Refused."""
    data = read_regular(path, MAX_REPORT_BYTES, lstat_result)
    return validate_report(loads_bounded(data, MAX_DEPTH))


# -- walking an output folder ----------------------------------------------------------
def file_key(st: os.stat_result | None) -> tuple | None:
    """What changes when a file is replaced or written: device, inode, size, mtime, ctime, type."""
    return None if st is None else (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)


def dir_key(st: os.stat_result | None) -> tuple | None:
    """What changes when a folder gains, loses or renames an entry, or its permissions change."""
    return None if st is None else (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)


def lstat_key(path: str) -> tuple | None:
    try:
        return file_key(os.lstat(path))
    except FileNotFoundError:
        return None
    except OSError as exc:
        return ("error", exc.errno)


@dataclass(frozen=True)
class Found:
    """One stage folder's report.json (``path`` set), or a problem found on the way (``kind`` set).

    ``watch`` holds (path, lstat key) pairs whose change means this entry must
    be looked at again: the report file, and the symlink leading to it if any.
    ``kind == "missing"``: a stage folder without a report yet (watched, not listed).
    """

    experiment: str
    stage: str | None
    rel: str  # shown to clients: relative to the output folder
    folder: str = ""  # the experiment's folder name as on disk (``experiment`` is it made printable)
    path: str | None = None  # real path of the file to read
    lstat: os.stat_result | None = None
    kind: str | None = None
    error: str | None = None
    watch: tuple = ()

    @property
    def key(self) -> tuple:
        return (self.path, self.watch)

    def error_entry(self, kind: str | None = None, error: str | None = None) -> dict:
        return {"experiment": self.experiment, "stage": self.stage, "path": self.rel,
                "kind": kind or self.kind, "error": error or self.error}


Entry = tuple[str, bool, bool]  # name, is a symlink, is a folder (the symlink's target for symlinks)
Lister = Callable[[str, os.stat_result], list[Entry]]


def list_dir(path: str, _st: os.stat_result) -> list[Entry]:
    """Names in a folder with their types, from one scandir (d_type; no stat per entry)."""
    with os.scandir(path) as it:
        return sorted((e.name, e.is_symlink(), e.is_dir()) for e in it)


def _resolve(path: str, is_link: bool, inside: Callable[[str], bool]) -> str | None:
    """``path`` itself, or the real path of a symlink when it stays inside the roots (else None)."""
    if not is_link:
        return path
    real = os.path.realpath(path)
    return real if inside(real) else None


def folder_stat(path: str) -> os.stat_result | None:
    """stat of a folder (following a symlink), None when it is missing or not a folder."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st if stat.S_ISDIR(st.st_mode) else None


def experiment_entries(root: str, lister: Lister = list_dir) -> list[Entry]:
    """The entries of ``root`` that may be experiments (folders or symlinks, no leading ``.``)."""
    st = folder_stat(root)
    if st is None:
        return []
    return [e for e in lister(root, st) if not e[0].startswith(".") and (e[1] or e[2])]


def walk(root: str, inside: Callable[[str], bool] = lambda _p: True, experiment: str | None = None,
         lister: Lister = list_dir, missing: bool = False) -> Iterator[Found]:
    """Every report under ``root`` (a real path), in name order; problems are yielded, never raised.

    Symlinks are followed only when their real path satisfies ``inside``;
    a folder whose name starts with ``.`` is skipped.  ``lister`` lists a
    folder given its stat (the index passes a cached one); ``missing`` also
    yields stage folders without a report (kind ``missing``).
    """
    if experiment is not None:
        try:
            experiments = [(experiment, stat.S_ISLNK(os.lstat(os.path.join(root, experiment)).st_mode), True)]
        except OSError:
            return
    else:
        try:
            experiments = experiment_entries(root, lister)
        except OSError as exc:
            yield Found(".", None, ".", kind="unreadable", error=f"cannot list the output folder: {os_message(exc)}")
            return
    for name, is_link, _is_dir in experiments:
        for found in _walk_experiment(root, name, is_link, inside, lister):
            if missing or found.kind != "missing":
                yield found


def _walk_experiment(root: str, name: str, is_link: bool, inside, lister: Lister) -> Iterator[Found]:
    shown = display_name(name)
    exp_path = _resolve(os.path.join(root, name), is_link, inside)
    if exp_path is None:
        yield Found(shown, None, shown, name, kind="refused",
                    error="the folder lies outside the allowed roots (symlink)")
        return
    eval_path = os.path.join(exp_path, "eval")
    try:
        eval_link = stat.S_ISLNK(os.lstat(eval_path).st_mode)
    except OSError:
        return  # no eval folder: an experiment without reports
    real_eval = _resolve(eval_path, eval_link, inside)
    if real_eval is None:
        yield Found(shown, None, f"{shown}/eval", name, kind="refused",
                    error="the eval folder lies outside the allowed roots (symlink)")
        return
    eval_st = folder_stat(real_eval)
    if eval_st is None:
        return
    if name_problem(name):
        yield Found(shown, None, shown, name, kind="bad_name", error=f"experiment {name_problem(name)}")
        return
    try:
        stages = lister(real_eval, eval_st)
    except OSError as exc:
        yield Found(shown, None, f"{shown}/eval", name, kind="unreadable", error=f"cannot list: {os_message(exc)}")
        return
    for stage, s_link, s_dir in stages:
        if stage.startswith(".") or not (s_dir or s_link):
            continue
        yield _stage(real_eval, name, stage, s_link, inside)


def _stage(real_eval: str, experiment: str, stage: str, is_link: bool, inside) -> Found:
    shown = display_name(stage)
    rel = f"{display_name(experiment)}/eval/{shown}/{REPORT_FILE}"
    base = Found(display_name(experiment), shown, rel, experiment)
    stage_path = _resolve(os.path.join(real_eval, stage), is_link, inside)
    if stage_path is None:
        return _with(base, "refused", "the stage folder lies outside the allowed roots (symlink)")
    path = os.path.join(stage_path, REPORT_FILE)
    try:
        lst = os.lstat(path)
    except FileNotFoundError:
        return _with(base, "missing", "no report yet", [(path, None)])
    except OSError as exc:
        return _with(base, "unreadable", f"cannot read: {os_message(exc)}", [(path, ("error", exc.errno))])
    watch = [(path, file_key(lst))]
    if stat.S_ISLNK(lst.st_mode):
        path = _resolve(path, True, inside)
        if path is None:
            return _with(base, "refused", "the file lies outside the allowed roots (symlink)", watch)
        watch.append((path, lstat_key(path)))
        try:
            lst = os.lstat(path)
        except OSError as exc:
            return _with(base, "unreadable", f"cannot read: {os_message(exc)}", watch)
    if name_problem(stage):
        return _with(base, "bad_name", f"stage {name_problem(stage)}", watch)
    return Found(base.experiment, base.stage, rel, experiment, path=path, lstat=lst, watch=tuple(watch))


def _with(base: Found, kind: str, error: str, watch=()) -> Found:
    return Found(base.experiment, base.stage, base.rel, base.folder, kind=kind, error=error, watch=tuple(watch))
