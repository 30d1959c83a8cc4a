"""The review page in a real headless Chromium (Debian's /usr/bin/chromium driven by Playwright; no browser download).

`contam review contam_out --serve` as the README writes it: open the URL it printed (its
token), filter to the derived suite, accept one of its matches, find the decision in
DuckDB; then pages of another origin (a second loopback server) post to /api/apply,
/apply and /decisions and fetch /api/decisions in the same browser, and nothing is
written; then press Apply, and find the document gone from the decontaminated mix (and
the other derived-suite copies still in it).  .ci/run installs chromium; without it the test fails and says so
(CONTAM_SKIP_BROWSER=1 skips it on a machine without a browser).
"""

from __future__ import annotations

import html
import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from contam_assets import store
from contam_assets_tests.support.doc_commands import command
from contam_assets_tests.support.review import DERIVED, PRIMARY, detect, free_port, stop, wait_for_review

CHROMIUM = Path(os.environ.get("CONTAM_CHROMIUM", "/usr/bin/chromium"))
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run"]


@pytest.fixture(scope="module")
def browser():
    if os.environ.get("CONTAM_SKIP_BROWSER") == "1":
        pytest.skip("CONTAM_SKIP_BROWSER=1")
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} not found: install Debian's chromium (apt-get install -y chromium chromium-driver, "
                    "as .ci/run does) or set CONTAM_SKIP_BROWSER=1")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=FLAGS)  # a fresh profile per launch
        yield b
        b.close()


@pytest.fixture
def server(tmp_path, shared_data):
    out = detect(tmp_path, shared_data)
    port, log = free_port(), tmp_path / "serve.log"
    env = {**os.environ, "CONTAM_REVIEW_PORT": str(port), "DAGSTER_HOME": str(out / ".dagster_home"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    cmd = command("README.md", "contam review contam_out --serve")
    with log.open("w") as fh:
        proc = subprocess.Popen(["bash", "-c", cmd], cwd=tmp_path, env=env, stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        url = wait_for_review(proc, log)  # the URL it printed, with the server's token
        yield {"url": f"http://127.0.0.1:{port}", "login": url, "out": out}
    finally:
        stop(proc)


class _Attacker(http.server.BaseHTTPRequestHandler):
    pages: dict[str, str] = {}

    def do_GET(self):  # noqa: N802 (http.server's name)
        body = self.pages.get(self.path, "").encode()
        self.send_response(200 if body else 404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def attacker():
    """A second loopback server on another port: another origin, the same site (127.0.0.1), pages that post at once."""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), _Attacker)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", _Attacker.pages
    srv.shutdown()
    srv.server_close()


def _autopost(action: str, fields: dict) -> str:
    inputs = "".join(f'<input name="{html.escape(k)}" value="{html.escape(v)}">' for k, v in fields.items())
    return (f'<!doctype html><title>prize</title><form id="f" method="post" action="{html.escape(action)}">{inputs}</form>'
            '<script>document.getElementById("f").submit()</script>')


def _mix_ids(out: Path) -> set[str]:
    return {json.loads(line)["id"] for line in (out / "mix" / "code.jsonl").read_text().splitlines()}


def _state(out: Path) -> tuple:
    with store.connect(out / "contam.duckdb", read_only=True) as con:
        return (con.execute("select match_id, decision from review_decisions order by all").fetchall(),
                con.execute("select shard, line from removals order by all").fetchall(),
                (out / "mix" / "code.jsonl").read_bytes())


def _cross_origin_attacks(page, server, attacker, mid: str, token: str) -> None:
    """Pages of another origin post to the review server in the reviewer's browser (its cookie held): all refused."""
    base, (origin, pages) = server["url"], attacker
    pages.update({
        "/api-apply.html": _autopost(base + "/api/apply", {"x": "1"}),  # a cross-site form post to the API
        "/form-apply.html": _autopost(base + "/apply", {"token": token, "back": "/"}),  # even with a leaked token
        "/decide.html": _autopost(base + "/decisions", {"token": token, "match_id": mid, "decision": "reject", "back": "/"}),
        "/blank.html": "<!doctype html><title>blank</title>",
    })
    for name, path in (("/api-apply.html", "/api/apply"), ("/form-apply.html", "/apply"), ("/decide.html", "/decisions")):
        with page.expect_response(lambda r, path=path: r.url == base + path) as got:
            page.goto(origin + name)
        assert got.value.status == 403, (name, got.value.status, got.value.text())
        assert "refused" in got.value.text() or "X-Contam-Token" in got.value.text()
    page.goto(origin + "/blank.html")  # a script's fetch, which the page cannot read but the server would act on
    kind = page.evaluate("""([url, mid]) => fetch(url, {method: "POST", mode: "no-cors", credentials: "include",
        headers: {"Content-Type": "text/plain"}, body: JSON.stringify({match_ids: [mid], decision: "reject"})})
        .then(r => r.type)""", [base + "/api/decisions", mid])
    assert kind == "opaque"


def test_filter_accept_refuse_a_cross_origin_page_then_apply_removes_the_document(browser, server, attacker):
    out = server["out"]
    bare = browser.new_page()
    assert bare.goto(server["url"] + "/").status == 403 and "needs its token" in bare.content()  # no token, no page
    bare.close()
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    page.set_default_timeout(60_000)
    page.goto(server["login"])  # the printed URL: its token becomes a cookie, the address bar loses it
    assert page.url == server["url"] + "/"
    assert page.locator("article.match").count() >= len(DERIVED) + len(PRIMARY)
    assert page.locator("#k-pending").inner_text() == str(len(DERIVED))

    page.select_option("#f-suite", "humaneval_solution")
    page.select_option("#f-status", "pending")
    with page.expect_navigation():
        page.click("#filter")
    assert "suite=humaneval_solution" in page.url
    cards = page.locator("article.match")
    assert cards.count() == len(DERIVED)
    assert {cards.nth(i).get_attribute("data-suite") for i in range(cards.count())} == {"humaneval_solution"}
    first = cards.first
    mid, line = first.get_attribute("data-match-id"), int(first.get_attribute("data-line"))
    assert line in DERIVED
    # the raw document with the matched solution marked, the evaluation item beside it, and why it matched
    assert first.locator("mark.question").count() >= 1 and "raw text" in first.inner_text().lower()
    assert "derived suite" in first.locator("ul.why").inner_text()
    assert f"doc-{line}" in _mix_ids(out)
    token = page.locator('form.apply input[name="token"]').get_attribute("value")

    with page.expect_navigation():
        first.locator("button.accept").click()
    assert "recorded 1 decision: accept" in page.locator("#flash").inner_text()
    with store.connect(out / "contam.duckdb", read_only=True) as con:
        rows = con.execute("select match_id, decision from review_decisions").fetchall()
    assert rows == [(mid, "accept")]
    assert page.locator("article.match").count() == len(DERIVED) - 1  # decided: no longer pending

    before = _state(out)  # an apply now would take doc-<line> out of the mix; a reject would keep it
    _cross_origin_attacks(page, server, attacker, mid, token)
    assert _state(out) == before and f"doc-{line}" in _mix_ids(out)

    page.goto(server["url"] + "/?suite=humaneval_solution&status=pending")  # the same-origin page still works
    with page.expect_navigation(timeout=600_000):
        page.click("#apply")
    assert "applied" in page.locator("#flash").inner_text(), page.locator("#flash").inner_text()
    kept = _mix_ids(out)
    assert f"doc-{line}" not in kept
    assert all(f"doc-{k}" in kept for k in DERIVED if k != line) and not any(f"doc-{k}" in kept for k in PRIMARY)
    with store.connect(out / "contam.duckdb", read_only=True) as con:
        assert con.execute("select count(*) from removals where line = ?", [line]).fetchone()[0] == 1
        assert con.execute("select sum(pending_review) from shard_stats").fetchone()[0] == len(DERIVED) - 1
    page.goto(server["url"] + "/?suite=humaneval_solution&status=decided")
    assert "removed" in page.locator(f'article[data-match-id="{mid}"] header').inner_text()
    page.close()
