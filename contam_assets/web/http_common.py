"""The pieces every contam-assets HTTP app shares (FastAPI under uvicorn).

* ``ApiError`` and ``install_error_handlers(app)``: every error is JSON
  ``{"error": code, "message": text}`` (plus optional fields such as
  ``kind``); an unexpected exception answers 500 ``internal_error`` with a
  fixed message — the traceback goes to the server log, never into a body.
* ``cached(request, body, etag, last_modified)``: a ``Response`` carrying
  ``ETag``, ``Last-Modified`` and ``Cache-Control: no-cache``, or ``304 Not
  Modified`` when ``If-None-Match`` (or, without it, ``If-Modified-Since``)
  says the client already holds it.  A ``Body`` is sent gzip-compressed to
  clients that accept it, compressed once and remembered.
* ``serve(app, host, port)``: uvicorn that stops on SIGTERM or SIGINT within
  ``STOP_WITHIN_S`` whatever its requests are doing: a graceful shutdown of
  at most ``GRACE_S``, then a watchdog ends the process (a worker thread or
  an event loop stuck in a system call cannot hold it up; see ``_SignalStop``).
"""

from __future__ import annotations

import contextlib
import gzip
import logging
import os
import signal
import struct
import sys
import threading
import zlib
from email.utils import formatdate, parsedate_to_datetime
from typing import Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("contam_assets.http")
GRACE_S = 0.5
STOP_WITHIN_S = 0.9
MAX_MESSAGE = 500


class ApiError(Exception):
    """An answer other than 2xx: HTTP status, machine-readable code, message without server paths."""

    def __init__(self, status: int, code: str, message: str, **extra):
        super().__init__(message)
        self.status, self.code, self.message, self.extra = status, code, message, extra


def error_response(status: int, code: str, message: str, **extra) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": code, "message": message[:MAX_MESSAGE]} | extra)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_request, exc: ApiError):
        return error_response(exc.status, exc.code, exc.message, **exc.extra)

    @app.exception_handler(RequestValidationError)
    async def _validation(_request, exc: RequestValidationError):
        msgs = "; ".join(f"{'.'.join(str(x) for x in e.get('loc', ()))}: {e.get('msg')}" for e in exc.errors())
        return error_response(400, "bad_request", msgs)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request, exc: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error_response(exc.status_code, code, str(exc.detail))

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception):
        log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
        return error_response(500, "internal_error", "internal error; the server log has the details")


GZIP_MIN_BYTES = 1024


_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # deflate, no name, mtime 0, OS unknown
_DEFLATE_END = zlib.compressobj(1, zlib.DEFLATED, -15).flush()  # an empty final block


def deflate_part(raw: bytes) -> bytes:
    """``raw`` as raw deflate blocks that end on a byte boundary (a sync flush, not final).

    Parts compressed on their own can be joined into one gzip stream by
    ``gzip_join``; deflate looks back only 32 KiB, so parts of that size or
    more compress almost as well as one stream, and a changed part is the
    only one compressed again.
    """
    c = zlib.compressobj(1, zlib.DEFLATED, -15)
    return c.compress(raw) + c.flush(zlib.Z_SYNC_FLUSH)


def gzip_join(raw_parts: list[bytes], deflated_parts: list[bytes]) -> bytes:
    """One gzip member (RFC 1952) from parts made by ``deflate_part`` and their uncompressed bytes."""
    crc, size = 0, 0
    for raw in raw_parts:
        crc, size = zlib.crc32(raw, crc), size + len(raw)
    return b"".join([_GZIP_HEADER, *deflated_parts, _DEFLATE_END, struct.pack("<II", crc, size & 0xFFFFFFFF)])


class Body:
    """Response bytes (given, or built on first use) and their gzip form, each made once and kept.

    Every request that shares a Body waits for the one build instead of
    building it again.  ``gzipped`` builds the gzip form (default: gzip
    level 1 of the bytes; fast, about 8x on JSON).
    """

    def __init__(self, raw: bytes | Callable[[], bytes], gzipped: Callable[[], bytes] | None = None):
        self._raw, self._build = (raw, None) if isinstance(raw, bytes) else (None, raw)
        self._gz: bytes | None = None
        self._gz_build = gzipped
        self._lock = threading.RLock()

    @property
    def raw(self) -> bytes:
        if self._raw is None:
            with self._lock:
                if self._raw is None:
                    self._raw, self._build = self._build(), None
        return self._raw

    @property
    def compressible(self) -> bool:
        return self._gz_build is not None or len(self.raw) >= GZIP_MIN_BYTES

    def gzipped(self) -> bytes:
        if self._gz is None:
            with self._lock:
                if self._gz is None:
                    build = self._gz_build or (lambda: gzip.compress(self.raw, compresslevel=1, mtime=0))
                    self._gz, self._gz_build = build(), None
        return self._gz


def accepts_gzip(request: Request) -> bool:
    for part in request.headers.get("accept-encoding", "").split(","):
        token, _, params = part.strip().partition(";")
        if token.strip().lower() in ("gzip", "x-gzip", "*"):
            q = params.strip().lower()
            return not (q.startswith("q=") and q[2:].strip() in ("0", "0.0", "0.00", "0.000"))
    return False


def http_date(ts: float) -> str:
    return formatdate(int(ts), usegmt=True)


def _etag_matches(header: str, etag: str) -> bool:
    tags = [t.strip() for t in header.split(",")]
    return "*" in tags or any(t.removeprefix("W/") == etag for t in tags)


def not_modified(request: Request, etag: str, last_modified: float | None) -> bool:
    inm = request.headers.get("if-none-match")
    if inm is not None:
        return _etag_matches(inm, etag)
    ims = request.headers.get("if-modified-since")
    if ims and last_modified is not None:
        try:
            return int(last_modified) <= parsedate_to_datetime(ims).timestamp()
        except (TypeError, ValueError, IndexError, OverflowError):
            return False
    return False


def cached(request: Request, body: bytes | Body, etag: str, last_modified: float | None,
           media_type: str = "application/json") -> Response:
    """200 with validators, or 304; ``etag`` is a quoted strong tag (the gzip form gets ``-gz`` in it)."""
    headers = {"Cache-Control": "no-cache"}
    content = body
    if isinstance(body, Body):
        headers["Vary"] = "Accept-Encoding"
        if accepts_gzip(request) and body.compressible:
            content, etag = body.gzipped, etag[:-1] + '-gz"'
            headers["Content-Encoding"] = "gzip"
        else:
            content = lambda: body.raw  # noqa: E731
    headers["ETag"] = etag
    if last_modified is not None:
        headers["Last-Modified"] = http_date(last_modified)
    if not_modified(request, etag, last_modified):
        headers.pop("Content-Encoding", None)
        return Response(status_code=304, headers=headers)
    return Response(content=content() if callable(content) else content, media_type=media_type, headers=headers)


def _end_process(sig: int) -> None:
    """Exit at once with the status a shell reports for ``sig`` (128 + signal number)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(128 + sig)


class _SignalStop:
    """SIGTERM/SIGINT taken by a thread of its own, so a stuck main thread or event loop cannot delay them.

    The signals are blocked in the serving thread before uvicorn starts any
    thread (threads inherit the mask) and received with ``sigwait`` here; a
    signal asks uvicorn to shut down gracefully (at most ``GRACE_S`` for open
    requests) and arms a watchdog that ends the process ``STOP_WITHIN_S``
    after the signal in any case.
    """

    SIGNALS = {signal.SIGTERM, signal.SIGINT}

    def __init__(self, server):
        self.server, self.received = server, None
        if threading.current_thread() is threading.main_thread():
            signal.pthread_sigmask(signal.SIG_BLOCK, self.SIGNALS)
            threading.Thread(target=self._wait, name="contam-signals", daemon=True).start()

    def _wait(self) -> None:
        while True:
            self.stop(signal.sigwait(self.SIGNALS))

    def stop(self, sig: int) -> None:
        if self.received is not None:
            self.server.force_exit = True  # a second signal: skip what is left of the graceful part
            return
        self.received = sig
        self.server.should_exit = True
        watchdog = threading.Timer(STOP_WITHIN_S, self._late, (sig,))
        watchdog.daemon = True
        watchdog.start()

    @staticmethod
    def _late(sig: int) -> None:
        log.error("still running %.1fs after signal %d: stopping now", STOP_WITHIN_S, sig)
        _end_process(sig)

    def finish(self) -> None:
        if self.received is not None:
            _end_process(self.received)


def serve(app: FastAPI, host: str, port: int, log_level: str = "info", **uvicorn_options) -> None:
    """Run ``app`` with uvicorn until SIGTERM/SIGINT; the process then ends within ``STOP_WITHIN_S``.

    Exit status after a signal: 128 + its number (143 for SIGTERM, 130 for SIGINT).
    """
    import uvicorn

    stopper: _SignalStop | None = None

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame):  # a signal that reached a thread started before serve()
            stopper.stop(sig)

    options = {"limit_concurrency": 256, "timeout_keep_alive": 5} | uvicorn_options
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, timeout_graceful_shutdown=GRACE_S,
                            **options)
    server = Server(config)
    stopper = _SignalStop(server)
    try:
        server.run()
    finally:
        stopper.finish()
