"""The review page: `contam review OUT --serve` (FastAPI, loopback by default).

``GET /``                 matches of the output folder, filtered (task, suite, reason, source, shard, score,
                          status) and paged; each shows the training document as it is in the pool with the
                          matched spans marked, the evaluation item beside it, and why it matched
``POST /decisions``       accept / reject one match (form): written by store.reviews, as `contam review --accept`
``POST /apply``           apply the decisions: runs `contam apply OUT` (removals, report, mix)
``GET /api/matches``      the same selection as JSON;  ``GET /api/filters``  the values each filter offers
``POST /api/decisions``   ``{"match_ids": [...], "decision": "accept"|"reject", "note": ""}``
``POST /api/apply``       ``{}`` (or no body);  ``GET /healthz``

Who may call these, and from where, is review_guard's: the Host header, the origin of a
state-changing request and the server's token (printed in the URL at start; the forms
carry it as a hidden field, ``/api/*`` take it as ``X-Contam-Token``).  The JSON
endpoints accept ``application/json`` only, which a cross-site form cannot send.  A status
banner shows only what this server did: a redirect names a message it stored (``flash``),
never the message's text.  The DuckDB file is opened per request through store.connect
(its lock), so the CLI and Dagster runs can write meanwhile.
"""

from __future__ import annotations

import json
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode

from fastapi import FastAPI, Form, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from jinja2 import Environment, PackageLoader, select_autoescape
from pydantic import BaseModel

from contam_assets import store
from contam_assets.report.html import marked_eval_text
from contam_assets.report.raw_text import raw_documents
from contam_assets.report.thorough_sections import evidence_text
from contam_assets.store import reviews
from contam_assets.web.review_data import (
    DEFAULT_REASON,
    FILTER_COLUMNS,
    PAGE_SIZE,
    STATUSES,
    Filters,
    filter_options,
    query_matches,
    totals,
)
from contam_assets.web.review_guard import Guard, new_token, safe_back, same_token, with_param

_ENV = Environment(loader=PackageLoader("contam_assets.web", "templates"), autoescape=select_autoescape(["html"]))
# fields of a match row the JSON API returns (the full row holds the document text twice)
API_FIELDS = ("match_id", "shard", "line", "doc_id", "source", "task", "suite", "split", "instance_index", "subject",
              "score", "required_score", "flagged", "needs_review", "question_overlap", "answer_overlap",
              "passage_overlap", "n_matched_ngrams", "why_reason", "decision", "removed")


@dataclass
class ReviewConfig:
    out_dir: Path
    pool_dir: Path | None
    content_key: str = "text"
    tokenizer: str = "cl100k"
    unescape: bool = True
    reviewer: str = "reviewer"
    page_size: int = PAGE_SIZE
    host: str = "127.0.0.1"  # what --host bound: the Host header may name it (review_guard.trusted_hosts)
    port: int = 8300


class DecisionBody(BaseModel):
    match_ids: list[str]
    decision: str
    note: str = ""
    reviewer: str | None = None


ApplyFn = Callable[[], tuple[bool, str]]
FLASHES_KEPT = 64


class Flashes:
    """Messages of what this server did, each under a random id a redirect names (the newest FLASHES_KEPT kept)."""

    def __init__(self, kept: int = FLASHES_KEPT):
        self._items: OrderedDict[str, dict] = OrderedDict()
        self._kept, self._lock = kept, threading.Lock()

    def add(self, ok: bool, text: str) -> str:
        key = secrets.token_urlsafe(12)
        with self._lock:
            self._items[key] = {"ok": ok, "text": text}
            while len(self._items) > self._kept:
                self._items.popitem(last=False)
        return key

    def get(self, key: str) -> dict | None:
        with self._lock:
            return self._items.get(key)


def _filters(task="", suite="", reason="", source="", shard="", min_score="", max_score="", status="") -> Filters:
    def num(v):
        try:
            return float(v) if str(v).strip() else None
        except ValueError as exc:
            raise HTTPException(400, f"score filters must be numbers, got {v!r}") from exc
    if status not in STATUSES:
        raise HTTPException(400, f"status must be one of {', '.join(k for k in STATUSES if k)}")
    return Filters(task=task, suite=suite, reason=reason, source=source, shard=shard, min_score=num(min_score),
                   max_score=num(max_score), status=status)


def _why(m: dict) -> list[str]:
    """Why the detector stored (and maybe flagged) this match, in words."""
    fmt = lambda v: "–" if v is None else f"{v:.3f}"  # noqa: E731
    out = [f"score {m['score']:.3f} {'≥' if m['score'] >= m['required_score'] else '<'} {m['required_score']:.3f} needed "
           f"for a document of {m['doc_tokens']} tokens ({'flagged' if m['flagged'] else 'stored as a near miss'})",
           f"overlap: question {fmt(m['question_overlap'])}, answer {fmt(m['answer_overlap'])}, passage "
           f"{fmt(m['passage_overlap'])}; {m['n_matched_ngrams']} matched n-grams",
           f"reason: {m.get('why_reason') or DEFAULT_REASON}"]
    if m.get("evidence"):  # a paraphrase or translation row: what its verifier matched
        out.append(f"evidence: {evidence_text(m['evidence'])}")
    if m["needs_review"] and m.get("why_reason") in ("paraphrase", "translation"):
        out.append(f"a {m['why_reason']} found by meaning: it removes the document only once a reviewer accepts it")
    elif m["needs_review"]:
        out.append(f"{m['suite']} is a derived suite: its matches remove a document only once a reviewer accepts them")
    if m.get("decision"):
        out.append(f"decision: {m['decision']} (latest, on this match or its instance)")
    out.append("document removed from the mix" if m.get("removed") else "document kept in the mix")
    return out


def create_app(config: ReviewConfig, apply: ApplyFn) -> FastAPI:
    app = FastAPI(title="contam-assets review", version="1", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.token = token = new_token()
    app.state.last_apply = None
    app.state.flashes = flashes = Flashes()
    app.add_middleware(Guard, token=token, bind_host=config.host, port=config.port)
    applying = threading.Lock()  # one apply at a time: a second is refused, not queued
    db = Path(config.out_dir) / "contam.duckdb"

    def connect(read_only=True):
        if not db.exists():
            raise HTTPException(404, f"{db} not found: run `contam detect --out {config.out_dir}` first")
        return store.connect(db, read_only=read_only)

    def record(match_ids: list[str], decision: str, note: str, reviewer: str | None) -> int:
        with connect(read_only=False) as con:
            from contam_assets.store import tables

            tables.ensure_schema(con)
            try:
                return reviews.record(con, reviews.for_matches(con, match_ids, decision), reviewer or config.reviewer, note)
            except reviews.DecisionError as exc:
                raise HTTPException(400, str(exc)) from exc

    def run_apply() -> tuple[bool, str] | None:
        if not applying.acquire(blocking=False):
            return None
        try:
            ok, text = apply()
        finally:
            applying.release()
        app.state.last_apply = {"ok": ok, "output": text}
        return ok, text

    def back_to(back: str, ok: bool, text: str) -> RedirectResponse:
        return RedirectResponse(with_param(safe_back(back), "flash", flashes.add(ok, text)), status_code=303)

    def check_form(token: str) -> None:
        if not same_token(token, app.state.token):
            raise HTTPException(403, "stale or foreign form: reload the review page")

    @app.get("/healthz")
    def healthz():
        return {"ok": True, "db": str(db), "exists": db.exists()}

    @app.get("/api/filters")
    def api_filters():
        with connect() as con:
            return {"filters": filter_options(con), "statuses": STATUSES}

    @app.get("/api/matches")
    def api_matches(task: str = "", suite: str = "", reason: str = "", source: str = "", shard: str = "",
                    min_score: str = "", max_score: str = "", status: str = "", page: int = Query(1, ge=1)):
        f = _filters(task, suite, reason, source, shard, min_score, max_score, status)
        with connect() as con:
            rows, counts = query_matches(con, f, page, config.page_size)
        return {"counts": counts, "matches": [{k: r.get(k) for k in API_FIELDS} for r in rows]}

    @app.post("/api/decisions")
    def api_decisions(body: DecisionBody):
        return {"recorded": record(body.match_ids, body.decision, body.note, body.reviewer)}

    @app.post("/api/apply")
    async def api_apply(request: Request):
        raw = await request.body()
        try:
            body = json.loads(raw) if raw.strip() else {}
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise HTTPException(400, "the body must be a JSON object ({}) or empty")
        from starlette.concurrency import run_in_threadpool

        done = await run_in_threadpool(run_apply)
        if done is None:
            raise HTTPException(409, "an apply is running: wait for it")
        return JSONResponse({"ok": done[0], "output": done[1]}, status_code=200 if done[0] else 500)

    @app.post("/decisions")
    def form_decision(match_id: str = Form(...), decision: str = Form(...), token: str = Form(""), back: str = Form(""),
                      note: str = Form("")):
        check_form(token)
        n = record([match_id], decision, note, None)
        return back_to(back, True, f"recorded {n} decision: {decision} {match_id}")

    @app.post("/apply")
    def form_apply(token: str = Form(""), back: str = Form("")):
        check_form(token)
        done = run_apply()
        if done is None:
            return back_to(back, False, "apply failed: another apply is running; reload when it ends")
        ok, text = done
        last = text.strip().splitlines()[-1] if text.strip() else ""
        return back_to(back, ok, ("applied: " if ok else "apply failed: ") + last)

    @app.get("/", response_class=HTMLResponse)
    def page(request: Request, task: str = "", suite: str = "", reason: str = "", source: str = "", shard: str = "",
             min_score: str = "", max_score: str = "", status: str = "", page: int = Query(1, ge=1), flash: str = ""):
        f = _filters(task, suite, reason, source, shard, min_score, max_score, status)
        with connect() as con:
            rows, counts = query_matches(con, f, page, config.page_size)
            options = filter_options(con)
            total = totals(con)
        raws = raw_documents(config.pool_dir, rows, config.content_key, config.tokenizer, config.unescape) if rows else {}
        cards = []
        for m in rows:
            train = " ".join(s["text"] for s in _segments(m) if s["kind"] == "question")
            raw = raws.get(m["match_id"])
            cards.append({"m": m, "why": _why(m), "eval_html": marked_eval_text(m["eval_question"] or "", train),
                          "doc_html": raw.html() if raw is not None else "", "doc_note": raw.note if raw else "",
                          "raw": raw is not None and raw.text is not None})
        query = f.query()
        here = "/?" + urlencode({**query, "page": page})
        links = {p: "/?" + urlencode({**query, "page": p}) for p in range(1, counts["pages"] + 1)}
        return _ENV.get_template("review.html").render(
            cards=cards, counts=counts, totals=total, options=options, filters=f, statuses=STATUSES,
            filter_columns=FILTER_COLUMNS, token=app.state.token, here=here, pages=links, flash=flashes.get(flash),
            last_apply=app.state.last_apply, out_dir=str(config.out_dir), pool_dir=str(config.pool_dir or ""))

    return app


def _segments(m: dict) -> list[dict]:
    return json.loads(m["training_segments"] or "[]")
