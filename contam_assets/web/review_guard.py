"""Who may use the review page, and from where (the rules docs/robustness.md states for `contam review --serve`).

The server runs on the reviewer's machine; any web page the reviewer opens can make the
browser send requests to it, and a DNS-rebinding domain can make the browser treat it as
that domain's own origin.  ``Guard`` (ASGI middleware, in front of every route) answers:

* a ``Host`` header other than ``127.0.0.1``, ``localhost``, ``[::1]`` or the ``--host``
  value, each with the server's port: 400 on every route, before anything is read;
* a state-changing request (any method but GET/HEAD) whose ``Sec-Fetch-Site`` is not
  ``same-origin`` (or ``none``), or whose ``Origin`` is not the page's own: 403;
* every route but ``/healthz`` needs the server's token, a per-process secret printed in
  the URL at start (``/?token=…``).  ``GET /?token=…`` with the right token sets it as a
  cookie (HttpOnly, SameSite=Lax, named after the port) and redirects to the same page
  without it; reads (``GET``) take that cookie or the ``X-Contam-Token`` header;
  ``POST /api/*`` take the header only (a cookie rides along with any page's request) and
  ``application/json`` only (415 otherwise); the page's forms carry the token as a hidden
  field, which the form routes check (``same_token``);
* every answer carries a content policy (no script, no frame, forms to this origin only),
  ``nosniff``, ``Referrer-Policy: same-origin`` and ``no-store``.
"""

from __future__ import annotations

import secrets
from urllib.parse import parse_qsl, urlencode, urlsplit

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response

TOKEN_HEADER = "X-Contam-Token"
TOKEN_PARAM = "token"  # the query parameter of the printed URL and the forms' hidden field
LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
OPEN_PATHS = frozenset({"/healthz"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",  # not no-referrer: with it a browser sends its forms' Origin as null
    "cache-control": "no-store",
}
NEEDS_TOKEN = ("<!doctype html><meta charset=utf-8><title>contam review: token needed</title>"
               "<p>This review page needs its token: open the URL that <code>contam review OUT --serve</code> "
               "printed when it started (it ends in <code>/?token=…</code>).</p>")


def new_token() -> str:
    return secrets.token_urlsafe(32)


def url_host(host: str) -> str:
    """``host`` as it stands in a URL and a ``Host`` header (an IPv6 address in brackets), lower case."""
    host = host.strip().lower()
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def trusted_hosts(bind_host: str, port: int) -> frozenset[str]:
    """The ``Host`` header values the server answers: the loopback names and ``--host``, with the port."""
    names = {*LOOPBACK, url_host(bind_host)}
    return frozenset({f"{n}:{port}" for n in names} | (names if port == 80 else set()))


def cookie_name(port: int) -> str:
    return f"contam_review_{port}"  # cookies are shared by every port of a host: one name per server port


def same_token(given: str | None, token: str) -> bool:
    return given is not None and secrets.compare_digest(given.encode("utf-8", "replace"), token.encode())


def cross_site(headers: Headers, host: str) -> str | None:
    """Why a state-changing request does not come from the page itself, or None when it may."""
    site = headers.get("sec-fetch-site")
    if site is not None and site.lower() not in ("same-origin", "none"):
        return f"Sec-Fetch-Site: {site}"
    origin = headers.get("origin")
    if origin is not None and origin.lower() != f"http://{host}":
        return "Origin is not this page"
    return None


def safe_back(back: str) -> str:
    """Where a form returns to: ``/`` with a query of this page, else ``/`` (never another host or scheme)."""
    if not back.startswith("/") or back.startswith(("//", "/\\")):
        return "/"
    if any(not (0x20 < ord(ch) < 0x7F) or ch == "\\" for ch in back):  # a browser drops tabs and newlines: "/\t/x" is "//x"
        return "/"
    parts = urlsplit(back)
    if parts.scheme or parts.netloc or parts.path != "/" or parts.fragment:
        return "/"
    return back


def with_param(target: str, key: str, value: str) -> str:
    return f"{target}{'&' if '?' in target else '?'}{urlencode({key: value})}"


def _json_media(headers: Headers) -> bool:
    return headers.get("content-type", "").split(";")[0].strip().lower() == "application/json"


class Guard:
    """The host, origin and token checks in front of the review app (pure ASGI: 404s and errors are guarded too)."""

    def __init__(self, app, *, token: str, bind_host: str, port: int):
        self.app, self.token, self.port = app, token, port
        self.hosts = trusted_hosts(bind_host, port)
        self.cookie = cookie_name(port)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_guarded(message):
            if message["type"] == "http.response.start":
                present = {k.lower() for k, _ in message.get("headers", [])}
                message = {**message, "headers": [*message.get("headers", []),
                                                  *((k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()
                                                    if k.encode() not in present)]}
            await send(message)

        refusal = self.refusal(scope)
        if refusal is not None:
            return await refusal(scope, receive, send_guarded)
        return await self.app(scope, receive, send_guarded)

    def refusal(self, scope) -> Response | None:
        headers = Headers(scope=scope)
        host = headers.get("host", "").lower()
        if host not in self.hosts:
            return PlainTextResponse(f"unknown Host: this review server answers 127.0.0.1, localhost, [::1] and its "
                                     f"--host, on port {self.port}", status_code=400)
        path, method = scope["path"], scope["method"]
        if path in OPEN_PATHS:
            return None
        if method not in SAFE_METHODS:
            why = cross_site(headers, host)
            if why is not None:
                return JSONResponse({"detail": f"refused: a request from another site ({why})"}, status_code=403)
            if path.startswith("/api/"):
                if not same_token(headers.get(TOKEN_HEADER), self.token):
                    return JSONResponse({"detail": f"missing or wrong {TOKEN_HEADER} header"}, status_code=403)
                if not _json_media(headers):
                    return JSONResponse({"detail": "Content-Type must be application/json"}, status_code=415)
            return None  # the form routes check the hidden token field
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        if path == "/" and any(k == TOKEN_PARAM for k, _ in query):
            if not same_token(dict(query)[TOKEN_PARAM], self.token):
                return HTMLResponse(NEEDS_TOKEN, status_code=403)
            rest = urlencode([(k, v) for k, v in query if k != TOKEN_PARAM])
            r = RedirectResponse("/" + (f"?{rest}" if rest else ""), status_code=303)
            r.set_cookie(self.cookie, self.token, httponly=True, samesite="lax", path="/")
            return r
        cookie = Request(scope).cookies.get(self.cookie)
        if same_token(headers.get(TOKEN_HEADER), self.token) or same_token(cookie, self.token):
            return None
        if path.startswith("/api/"):
            return JSONResponse({"detail": f"missing or wrong {TOKEN_HEADER} header"}, status_code=403)
        return HTMLResponse(NEEDS_TOKEN, status_code=403)

