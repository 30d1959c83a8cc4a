"""HTTP API over the evaluation reports of an output folder (FastAPI, served by uvicorn).

``GET /api/evaluations?output_dir=&recipe=&experiment=``
    Every report ``<output_dir>/<experiment>/eval/<stage>/report.json``:
    experiment, stage, recipe, model, headline scores, benchmark values,
    headline contamination and the ``url`` of the report in full.
    ``recipe``/``experiment`` filter when non-empty.  Reports that cannot be
    read or validated are listed under ``errors``; the good ones are always
    listed.  Answered from an index per folder (``report_index``), with an
    ``ETag`` and ``Last-Modified``.
``GET /api/evaluations/{experiment}?output_dir=&stage=``
    One report in full: the given ``stage``, else the latest (highest step;
    reports without a step come first; ties by stage name).
``GET /openapi.json``, ``/docs``
    The schema.

``output_dir`` must lie inside one of the roots in ``API_PATHS`` (separated
by ``,`` or ``:``; unset = the server's working directory).  Relative
``output_dir`` values resolve against the server's working directory.  Errors
are JSON ``{"error": code, "message": text}`` (docs/evaluation.md has the table);
no answer names a server path the request did not name, nor a traceback.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel

from contam_assets import settings
from contam_assets.evaluation.checkpoint_report import REPORT_FILE
from contam_assets.evaluation.report_files import read_report
from contam_assets.evaluation.safeio import Refused, components_problem, json_bytes, name_problem
from contam_assets.web.http_common import ApiError, Body, cached, install_error_handlers
from contam_assets.web.http_common import serve as serve_app
from contam_assets.web.report_index import IndexBusy, Indexes, racy_until

MAX_PATH_CHARS = 4096
ROUTE = "/api/evaluations"


class ErrorBody(BaseModel):
    error: str
    message: str
    kind: str | None = None


class Summary(BaseModel):
    experiment: str
    stage: str
    recipe: str | None
    model: dict[str, Any]
    scores: dict[str, float | None]
    benchmarks: dict[str, dict[str, Any]]
    contamination: dict[str, Any] | None
    url: str


class ReportErrorEntry(BaseModel):
    experiment: str
    stage: str | None
    path: str
    kind: str  # refused, bad_name, not_a_file, too_large, unreadable, malformed, invalid (report_files)
    error: str


class EvaluationList(BaseModel):
    output_dir: str
    count: int
    evaluations: list[Summary]
    errors: list[ReportErrorEntry]


ERRORS = {
    400: {"model": ErrorBody, "description": "malformed input, a `..` component, a name over 255 bytes"},
    403: {"model": ErrorBody, "description": "outside every API_PATHS root"},
    404: {"model": ErrorBody, "description": "folder, experiment or stage not found"},
    503: {"model": ErrorBody, "description": "the report index stayed busy (a hung file system)"},
}


def parse_roots(value: str | None, cwd: Path) -> list[Path]:
    """API_PATHS -> real root paths (``,`` or ``:`` separated; relative to ``cwd``)."""
    roots = []
    for part in re.split(r"[,:]", value or ""):
        part = part.strip()
        if part:
            p = Path(part) if Path(part).is_absolute() else cwd / part
            roots.append(Path(os.path.realpath(p)))
    return roots


def _shown(value: str) -> str:
    return repr(value[:80] + ("…" if len(value) > 80 else ""))


class PathGuard:
    """What a request may name: an output folder inside the roots, then plain names below it."""

    def __init__(self, roots: list[Path], cwd: Path):
        self.roots, self.cwd = roots, cwd
        self._root_strs = [str(r) for r in roots]

    def inside(self, real: str | Path) -> bool:
        real = str(real)
        return any(real == r or real.startswith(r.rstrip("/") + "/") for r in self._root_strs)

    def output_dir(self, raw: str | None) -> str:
        if raw is None or not raw.strip():
            raise ApiError(400, "bad_request", "query parameter output_dir is required")
        if len(raw) > MAX_PATH_CHARS:
            raise ApiError(400, "bad_request", f"output_dir is longer than {MAX_PATH_CHARS} characters")
        if "\x00" in raw:
            raise ApiError(400, "bad_request", "output_dir contains a NUL byte")
        if ".." in re.split(r"[\\/]", raw):
            raise ApiError(400, "bad_request", "output_dir must not contain '..'")
        problem = components_problem(raw)
        if problem:
            raise ApiError(400, "bad_request", f"output_dir: {problem}")
        p = Path(raw)
        real = os.path.realpath(p if p.is_absolute() else self.cwd / p)
        if not self.inside(real):
            raise ApiError(403, "outside_roots", f"output_dir {_shown(raw)} is outside the allowed roots (API_PATHS)")
        try:
            is_dir = stat.S_ISDIR(os.stat(real).st_mode)
        except OSError:
            is_dir = False
        if not is_dir:
            raise ApiError(404, "not_found", f"output_dir {_shown(raw)} is not an existing folder")
        return real

    def name(self, value: str, what: str) -> str:
        problem = name_problem(value)
        if problem:
            raise ApiError(400, "bad_request", f"invalid {what} name {_shown(value)}: {problem}")
        return value

    def follow(self, path: str, what: str) -> str:
        """``path`` (a symlink resolved when it stays inside the roots); 403 outside, 404 missing."""
        try:
            lst = os.lstat(path)
        except OSError:
            raise ApiError(404, "not_found", f"{what} not found") from None
        if not stat.S_ISLNK(lst.st_mode):
            return path
        real = os.path.realpath(path)
        if not self.inside(real):
            raise ApiError(403, "outside_roots", f"{what} leads outside the allowed roots (symlink)")
        if not os.path.exists(real):
            raise ApiError(404, "not_found", f"{what} not found")
        return real


def _etag(*parts) -> str:
    return '"' + hashlib.blake2b(repr(parts).encode("utf-8", "surrogatepass"), digest_size=12).hexdigest() + '"'


class ReportCache:
    """Full report answers by real path, kept while the file's lstat key is unchanged (the last ``size``)."""

    def __init__(self, size: int = 64):
        self.size, self._items, self._lock = size, OrderedDict(), threading.Lock()

    def get(self, path: str, where: str) -> tuple[Body, str, float]:
        try:
            lst = os.lstat(path)
        except OSError:
            raise ApiError(404, "not_found", f"{where} not found") from None
        key = (lst.st_dev, lst.st_ino, lst.st_size, lst.st_mtime_ns, lst.st_ctime_ns, lst.st_mode)
        with self._lock:
            hit = self._items.get(path)
        if hit is not None and hit[0] == key and not racy_until(lst):
            return hit[1:]
        try:
            body = Body(json_bytes(read_report(path, lst)))
        except Refused as exc:
            raise ApiError(422, "malformed_report", f"{where}: {exc.message}", kind=exc.kind) from None
        entry = (key, body, _etag(path, *key), lst.st_mtime)
        with self._lock:
            self._items[path] = entry
            self._items.move_to_end(path)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return entry[1:]


def create_app(roots: list[str | Path] | None = None, cwd: str | Path | None = None,
               fresh_s: float | None = None) -> FastAPI:
    """The app; ``roots`` default to API_PATHS (or, unset, the working directory).

    ``fresh_s``: how old (seconds) a listing may be — the api_fresh_s setting,
    default 1.0; 0 re-checks the folder for every request (report_index).
    """
    if fresh_s is None:
        fresh_s = settings.env_value("api_fresh_s")  # ValueError naming the variable when it is not a number
    if not 0 <= fresh_s <= 3600:
        raise ValueError(f"fresh_s must be between 0 and 3600 seconds, got {fresh_s}")
    cwd = Path(os.path.realpath(cwd or os.getcwd()))
    if roots is None:
        resolved = parse_roots(os.environ.get("API_PATHS"), cwd)
    else:
        resolved = [Path(os.path.realpath(cwd / Path(r))) for r in roots]
    guard = PathGuard(resolved or [cwd], cwd)
    indexes = Indexes(guard.inside, route=ROUTE, fresh_s=fresh_s)
    reports = ReportCache()

    app = FastAPI(
        title="contam-assets evaluations",
        version="2",
        description="Evaluation reports with contamination. output_dir must lie inside API_PATHS.",
    )
    app.state.guard = guard
    app.state.indexes = indexes
    install_error_handlers(app)

    def snapshot(real: str):
        try:
            return indexes.get(real).refresh()
        except IndexBusy as exc:
            raise ApiError(503, "busy", str(exc)) from None

    @app.get(ROUTE, response_model=EvaluationList, responses=ERRORS,
             summary="List every evaluation report under an output folder")
    def list_evaluations(
        request: Request,
        output_dir: str | None = Query(None, description="folder of experiments, inside API_PATHS"),
        recipe: str | None = Query(None, description="only reports with this recipe (empty = all)"),
        experiment: str | None = Query(None, description="only this experiment (empty = all)"),
    ) -> Response:
        real = guard.output_dir(output_dir)
        if experiment:
            guard.name(experiment, "experiment")
        index = indexes.get(real)
        try:
            body, generation = index.listing(output_dir, recipe or "", experiment or "")
        except IndexBusy as exc:
            raise ApiError(503, "busy", str(exc)) from None
        etag = _etag(index.token, generation, output_dir, recipe or "", experiment or "")
        return cached(request, body, etag, index.changed_at)

    @app.get(ROUTE + "/{experiment}", responses=ERRORS | {422: {"model": ErrorBody}},
             summary="One evaluation report in full (given stage, else the latest step)")
    def get_evaluation(
        request: Request,
        experiment: str,
        output_dir: str | None = Query(None, description="folder of experiments, inside API_PATHS"),
        stage: str | None = Query(None, description="stage folder (default: the latest step)"),
    ) -> Response:
        real = guard.output_dir(output_dir)
        guard.name(experiment, "experiment")
        exp = guard.follow(os.path.join(real, experiment), f"experiment {_shown(experiment)}")
        eval_dir = guard.follow(os.path.join(exp, "eval"), f"experiment {_shown(experiment)}")
        if stage:
            guard.name(stage, "stage")
            where = f"stage {_shown(stage)} of {_shown(experiment)}"
            folder = guard.follow(os.path.join(eval_dir, stage), where)
            path = guard.follow(os.path.join(folder, REPORT_FILE), where)
            return cached(request, *reports.get(path, f"{experiment}/eval/{stage}/{REPORT_FILE}"))
        good, errors, _ = snapshot(real)
        mine = [it for it in good if it.experiment == experiment]
        if mine:
            return cached(request, *reports.get(mine[-1].path, f"{experiment}/eval/{mine[-1].stage}/{REPORT_FILE}"))
        errors = [e for e in errors if e["experiment"] == experiment]
        if errors:
            e = errors[-1]
            if e["kind"] == "refused":
                raise ApiError(403, "outside_roots", f"{e['path']}: {e['error']}")
            raise ApiError(422, "malformed_report", f"{e['path']}: {e['error']}", kind=e["kind"])
        raise ApiError(404, "not_found", f"experiment {_shown(experiment)} has no evaluation reports")

    return app


def serve(host: str = "127.0.0.1", port: int = 8000, roots: list[str] | None = None, log_level: str = "info",
          fresh_s: float | None = None) -> None:
    app = create_app(roots, fresh_s=fresh_s)
    print(f"contam api: roots {', '.join(str(r) for r in app.state.guard.roots)}", flush=True)
    serve_app(app, host, port, log_level)
