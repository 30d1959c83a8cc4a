"""HTTP API over the evaluation reports of an output folder (FastAPI, served by uvicorn).

``GET /api/evaluations?output_dir=&recipe=&experiment=``
    Every report ``<output_dir>/<experiment>/eval/<stage>/report.json``:
    experiment, stage, recipe, model, headline scores, benchmark values,
    headline contamination.  ``recipe``/``experiment`` filter when non-empty.
    Unreadable report files are listed under ``errors``.
``GET /api/evaluations/{experiment}?output_dir=&stage=``
    One report in full: the given ``stage``, else the latest (highest step;
    reports without a step come first; ties by stage name).
``GET /openapi.json``, ``/docs``
    The schema.

``output_dir`` must lie inside one of the roots in ``API_PATHS`` (separated
by ``,`` or ``:``; unset = the server's working directory).  Relative
``output_dir`` values resolve against the server's working directory.  Errors
are JSON ``{"error": code, "message": text}``:

* 400 ``bad_request``: missing/empty/overlong ``output_dir``, NUL byte, a
  ``..`` component (refused even when it would stay inside a root), a bad
  experiment or stage name (allowed: letters, digits, ``._=+@-``);
* 403 ``outside_roots``: the real path (symlinks resolved) is outside every root;
* 404 ``not_found``: the folder, experiment or stage does not exist;
* 500 ``malformed_report``: the one requested report file is unreadable.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Query
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from contam_assets.evaluation.report import REPORT_FILE
from contam_assets.evaluation.reports import MalformedReport, collect, read_report, summary

MAX_PATH_CHARS = 4096
NAME_RE = re.compile(r"[A-Za-z0-9._=+@-]{1,200}")


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class ErrorBody(BaseModel):
    error: str
    message: str


class Summary(BaseModel):
    experiment: str
    stage: str
    recipe: str | None
    model: dict[str, Any]
    scores: dict[str, float | None]
    benchmarks: dict[str, dict[str, Any]]
    contamination: dict[str, Any] | None


class ReportErrorEntry(BaseModel):
    experiment: str
    stage: str
    path: str
    kind: str  # "malformed" (unreadable file) or "refused" (symlink leaving the roots)
    error: str


class EvaluationList(BaseModel):
    output_dir: str
    count: int
    evaluations: list[Summary]
    errors: list[ReportErrorEntry]


ERRORS = {
    400: {"model": ErrorBody, "description": "malformed input or a `..` component"},
    403: {"model": ErrorBody, "description": "outside every API_PATHS root"},
    404: {"model": ErrorBody, "description": "folder, experiment or stage not found"},
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


class PathGuard:
    def __init__(self, roots: list[Path], cwd: Path):
        self.roots, self.cwd = roots, cwd

    def inside(self, real: Path) -> bool:
        return any(real == r or real.is_relative_to(r) for r in self.roots)

    def output_dir(self, raw: str | None) -> Path:
        if raw is None or not raw.strip():
            raise ApiError(400, "bad_request", "query parameter output_dir is required")
        if len(raw) > MAX_PATH_CHARS:
            raise ApiError(400, "bad_request", f"output_dir is longer than {MAX_PATH_CHARS} characters")
        if "\x00" in raw:
            raise ApiError(400, "bad_request", "output_dir contains a NUL byte")
        if ".." in re.split(r"[\\/]", raw):
            raise ApiError(400, "bad_request", "output_dir must not contain '..'")
        p = Path(raw)
        real = Path(os.path.realpath(p if p.is_absolute() else self.cwd / p))
        if not self.inside(real):
            raise ApiError(403, "outside_roots", f"output_dir {raw!r} is outside the allowed roots (API_PATHS)")
        if not real.is_dir():
            raise ApiError(404, "not_found", f"output_dir {raw!r} is not an existing folder")
        return real

    def name(self, value: str, what: str) -> str:
        if not NAME_RE.fullmatch(value) or value in (".", ".."):
            raise ApiError(400, "bad_request", f"invalid {what} name {value[:80]!r} (allowed: letters, digits, ._=+@-)")
        return value

    def existing(self, path: Path, what: str) -> Path:
        real = Path(os.path.realpath(path))
        if not self.inside(real):
            raise ApiError(403, "outside_roots", f"{what} leads outside the allowed roots (symlink)")
        if not real.exists():
            raise ApiError(404, "not_found", f"{what} not found")
        return real


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": code, "message": message})


def create_app(roots: list[str | Path] | None = None, cwd: str | Path | None = None) -> FastAPI:
    """The app; ``roots`` default to API_PATHS (or, unset, the working directory)."""
    cwd = Path(os.path.realpath(cwd or os.getcwd()))
    if roots is None:
        resolved = parse_roots(os.environ.get("API_PATHS"), cwd)
    else:
        resolved = [Path(os.path.realpath(cwd / Path(r))) for r in roots]
    guard = PathGuard(resolved or [cwd], cwd)

    app = FastAPI(
        title="contam-assets evaluations",
        version="1",
        description="Evaluation reports with contamination. output_dir must lie inside API_PATHS.",
    )
    app.state.guard = guard

    @app.exception_handler(ApiError)
    async def _api_error(_request, exc: ApiError):
        return _error(exc.status, exc.code, exc.message)

    @app.exception_handler(RequestValidationError)
    async def _validation(_request, exc: RequestValidationError):
        msgs = "; ".join(f"{'.'.join(str(x) for x in e.get('loc', ()))}: {e.get('msg')}" for e in exc.errors())
        return _error(400, "bad_request", msgs[:500])

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request, exc: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return _error(exc.status_code, code, str(exc.detail))

    @app.exception_handler(Exception)
    async def _internal(_request, exc: Exception):  # pragma: no cover - last resort
        return _error(500, "internal_error", f"{type(exc).__name__}: {exc}"[:500])

    @app.get("/api/evaluations", response_model=EvaluationList, responses=ERRORS,
             summary="List every evaluation report under an output folder")
    def list_evaluations(
        output_dir: str | None = Query(None, description="folder of experiments, inside API_PATHS"),
        recipe: str | None = Query(None, description="only reports with this recipe (empty = all)"),
        experiment: str | None = Query(None, description="only this experiment (empty = all)"),
    ) -> dict:
        out = guard.output_dir(output_dir)
        if experiment:
            guard.name(experiment, "experiment")
        good, errors = collect(out, experiment or None, allow=guard.inside)
        if recipe:
            good = [(rf, r) for rf, r in good if r.get("recipe") == recipe]
        items = [summary(rf, r) for rf, r in good]
        return {"output_dir": output_dir, "count": len(items), "evaluations": items, "errors": errors}

    @app.get("/api/evaluations/{experiment}", responses=ERRORS | {500: {"model": ErrorBody}},
             summary="One evaluation report in full (given stage, else the latest step)")
    def get_evaluation(
        experiment: str,
        output_dir: str | None = Query(None, description="folder of experiments, inside API_PATHS"),
        stage: str | None = Query(None, description="stage folder (default: the latest step)"),
    ) -> JSONResponse:
        out = guard.output_dir(output_dir)
        guard.name(experiment, "experiment")
        guard.existing(out / experiment / "eval", f"experiment {experiment!r}")
        if stage:
            guard.name(stage, "stage")
            path = guard.existing(out / experiment / "eval" / stage / REPORT_FILE, f"stage {stage!r} of {experiment!r}")
            try:
                return JSONResponse(read_report(path))
            except MalformedReport as exc:
                raise ApiError(500, "malformed_report", f"{experiment}/eval/{stage}/{REPORT_FILE}: {exc}") from exc
        good, errors = collect(out, experiment, allow=guard.inside)
        if good:
            return JSONResponse(good[-1][1])
        if errors:
            e = errors[-1]
            if e["kind"] == "refused":
                raise ApiError(403, "outside_roots", f"{e['path']}: {e['error']}")
            raise ApiError(500, "malformed_report", f"{e['path']}: {e['error']}")
        raise ApiError(404, "not_found", f"experiment {experiment!r} has no evaluation reports")

    return app


def serve(host: str = "127.0.0.1", port: int = 8000, roots: list[str] | None = None, log_level: str = "info") -> None:
    import uvicorn

    app = create_app(roots)
    print(f"contam api: roots {', '.join(str(r) for r in app.state.guard.roots)}", flush=True)
    uvicorn.run(app, host=host, port=port, log_level=log_level, limit_concurrency=256, timeout_keep_alive=5)
