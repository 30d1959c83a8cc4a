"""The review server against cross-site, rebinding and token attacks, as curl would send them to a real `contam review --serve`.

One server (uvicorn on 127.0.0.1, the real `contam apply` behind its Apply) over a small
detected folder in which one derived-suite match is accepted but not applied: an apply
that ran would take its document out of the mix.  Every attack is refused and leaves the
decisions, the removals and the mix as they were.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from contam_assets import store
from contam_assets.web.review_guard import TOKEN_HEADER, safe_back, trusted_hosts
from contam_assets_tests.support.review import detect, free_port, stop, wait_for_review


@pytest.fixture(scope="module")
def served(tmp_path_factory, shared_data):
    root = tmp_path_factory.mktemp("review_security")
    out = detect(root, shared_data)
    port, log = free_port(), root / "serve.log"
    env = {**os.environ, "DAGSTER_HOME": str(out / ".dagster_home")}
    with log.open("w") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "contam_assets.cli", "review", str(out), "--serve", "--port", str(port)],
                                env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = wait_for_review(proc, log)
        base, token = url.split("/?token=")
        with httpx.Client(base_url=base, timeout=120) as c:
            pending = c.get("/api/matches", params={"status": "pending"}, headers={TOKEN_HEADER: token}).json()["matches"]
            held = pending[0]
            r = c.post("/api/decisions", json={"match_ids": [held["match_id"]], "decision": "accept"},
                       headers={TOKEN_HEADER: token})
            assert r.json() == {"recorded": 1}, r.text
            yield {"base": base, "token": token, "out": out, "port": port, "held": held, "client": c, "url": url}
    finally:
        stop(proc)


def state(out: Path) -> tuple:
    """What an attack could change: the decisions, the removals and the mix files."""
    with store.connect(out / "contam.duckdb", read_only=True) as con:
        decisions = con.execute("select match_id, decision, reviewer from review_decisions order by all").fetchall()
        removals = con.execute("select shard, line from removals order by all").fetchall()
    mix = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((out / "mix").glob("*.jsonl"))}
    return decisions, removals, mix


def test_the_issue_s_cross_site_post_to_api_apply_and_its_variants_are_refused_and_nothing_is_written(served):
    c, token, out = served["client"], served["token"], served["out"]
    before = state(out)
    assert f"doc-{served['held']['line']}" in (out / "mix" / "code.jsonl").read_text()  # accepted, not yet applied
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    attacks = [
        ({"Origin": "http://evil.example", **form}, "x=1", 403),  # a cross-site form post, as curl sends it
        (form, "x=1", 403),  # no Origin, no token
        ({"Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"}, "{}", 403),
        ({"Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:1", TOKEN_HEADER: token,
          "Content-Type": "application/json"}, "{}", 403),  # another port of this host, even holding the token
        ({"Origin": "null", TOKEN_HEADER: token, "Content-Type": "application/json"}, "{}", 403),
        ({TOKEN_HEADER: token, **form}, "x=1", 415),  # the token, but a form's content type
        ({TOKEN_HEADER: token, "Content-Type": "text/plain"}, "{}", 415),
        ({TOKEN_HEADER: "x" + token, "Content-Type": "application/json"}, "{}", 403),
        ({"Content-Type": "application/json"}, "{}", 403),
    ]
    for headers, body, status in attacks:
        r = c.post("/api/apply", headers=headers, content=body)
        assert r.status_code == status, (headers, r.status_code, r.text)
        assert "output" not in r.json()
    assert state(out) == before
    assert f"doc-{served['held']['line']}" in (out / "mix" / "code.jsonl").read_text()


def test_forms_need_the_token_and_the_page_s_own_origin(served):
    c, base, token, out = served["client"], served["base"], served["token"], served["out"]
    mid = served["held"]["match_id"]
    own = {"Origin": base}
    before = state(out)
    refused = [
        (own, {"match_id": mid, "decision": "reject"}),  # no token
        (own, {"match_id": mid, "decision": "reject", "token": "forged"}),
        ({"Origin": "http://evil.example"}, {"match_id": mid, "decision": "reject", "token": token}),
        ({"Origin": f"http://127.0.0.1:{served['port'] + 1}", "Sec-Fetch-Site": "same-site"},
         {"match_id": mid, "decision": "reject", "token": token}),
        ({"Sec-Fetch-Site": "cross-site"}, {"match_id": mid, "decision": "reject", "token": token}),
    ]
    for headers, data in refused:
        r = c.post("/decisions", headers=headers, data=data)
        assert r.status_code == 403, (headers, data, r.status_code, r.text)
    for headers, data in [(own, {"back": "/"}), ({"Origin": "http://evil.example"}, {"token": token})]:
        assert c.post("/apply", headers=headers, data=data).status_code == 403
    assert state(out) == before
    # the page's own form, from its own origin: written
    r = c.post("/decisions", headers={**own, "Sec-Fetch-Site": "same-origin"},
               data={"match_id": mid, "decision": "accept", "token": token, "back": "/?status=decided"})
    assert r.status_code == 303 and r.headers["location"].startswith("/?status=decided&flash="), r.text
    assert len(state(out)[0]) == len(before[0]) + 1


def test_a_foreign_host_is_refused_on_every_route_and_learns_nothing(served):
    c, token, port = served["client"], served["token"], served["port"]
    cookie = {"Cookie": f"contam_review_{port}={token}", TOKEN_HEADER: token}
    for host in (f"rebind.attacker.example:{port}", "rebind.attacker.example", f"127.0.0.1:{port + 1}",
                 f"localhost.attacker.example:{port}", f"127.0.0.1:{port}.evil", ""):
        for method, path in (("GET", "/"), ("GET", f"/?token={token}"), ("GET", "/api/matches"), ("GET", "/healthz"),
                             ("POST", "/api/apply"), ("GET", "/nosuch")):
            r = c.request(method, path, headers={**cookie, "Host": host, "Content-Type": "application/json"},
                          content="{}" if method == "POST" else None)
            assert r.status_code == 400, (host, method, path, r.status_code)
            assert token not in r.text and "doc-" not in r.text and "set-cookie" not in r.headers
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", f"LocalHost:{port}"):
        r = c.get("/", headers={TOKEN_HEADER: token, "Host": host})
        assert r.status_code == 200 and "article" in r.text, host


def test_reading_needs_the_printed_token_which_becomes_a_cookie(served):
    base, token, port = served["base"], served["token"], served["port"]
    with httpx.Client(base_url=base, timeout=60) as fresh:  # no cookie, no header
        for path in ("/", "/?suite=humaneval", "/api/matches", "/api/filters", f"/?token=x{token}"):
            r = fresh.get(path)
            assert r.status_code == 403 and token not in r.text and "doc-" not in r.text, path
            assert "set-cookie" not in r.headers
        assert fresh.get("/healthz").status_code == 200
        r = fresh.get(served["url"].replace("/?token=", "/?suite=humaneval&token="))
        assert r.status_code == 303 and r.headers["location"] == "/?suite=humaneval"
        cookie = r.headers["set-cookie"]
        assert cookie.startswith(f"contam_review_{port}={token};") and "HttpOnly" in cookie and "samesite=lax" in cookie.lower()
        page = fresh.get("/?suite=humaneval")  # the cookie, now held
        assert page.status_code == 200 and "article" in page.text
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        assert page.headers["x-frame-options"] == "DENY" and page.headers["referrer-policy"] == "same-origin"
        assert fresh.get("/api/matches").status_code == 200


def test_banners_show_only_what_the_server_did(served):
    c, base, token = served["client"], served["base"], served["token"]
    h = {TOKEN_HEADER: token}
    for params in ({"msg": "applied: all clean"}, {"flash": "applied: all clean"}, {"flash": "AAAAAAAAAAAAAAAA"}):
        page = c.get("/", params=params, headers=h).text
        assert 'id="flash"' not in page and "all clean" not in page, params
    r = c.post("/decisions", headers={"Origin": base},
               data={"match_id": served["held"]["match_id"], "decision": "accept", "token": token, "back": "/?msg=fake"})
    assert r.status_code == 303
    shown = c.get(r.headers["location"], headers=h).text
    flash = re.search(r'<div class="flash" id="flash">([^<]*)</div>', shown)
    assert flash and flash.group(1) == f"recorded 1 decision: accept {served['held']['match_id']}", shown[:3000]


@pytest.mark.parametrize("back", ["/\\evil.example", "//evil.example", "/\\/evil.example", "http://evil.example/",
                                  "https:evil.example", "javascript:alert(1)", "/\t/evil.example", "/\n/evil.example",
                                  " /", "", "evil.example", "/nosuch", "/%0a/evil.example/x", "/?a=1#frag"])
def test_back_goes_to_this_page_only(back):
    assert safe_back(back) == "/"


def test_back_keeps_the_page_s_own_query():
    assert safe_back("/?suite=humaneval_solution&status=pending&page=2") == "/?suite=humaneval_solution&status=pending&page=2"


def test_a_foreign_back_redirects_home(served):
    c, base, token = served["client"], served["base"], served["token"]
    r = c.post("/decisions", headers={"Origin": base},
               data={"match_id": served["held"]["match_id"], "decision": "accept", "token": token, "back": "/\\evil.example"})
    assert r.status_code == 303 and re.fullmatch(r"/\?flash=[\w-]+", r.headers["location"]), r.headers["location"]


def test_json_endpoints_take_application_json_only(served):
    c, token, out = served["client"], served["token"], served["out"]
    mid = served["held"]["match_id"]
    before = state(out)
    body = '{"match_ids": ["%s"], "decision": "reject"}' % mid
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None,
                  "application/json-seq", "text/json"):
        headers = {TOKEN_HEADER: token, **({"Content-Type": ctype} if ctype else {})}
        r = c.post("/api/decisions", headers=headers, content=body)
        assert r.status_code == 415, (ctype, r.status_code, r.text)
    assert state(out) == before
    r = c.post("/api/decisions", headers={TOKEN_HEADER: token, "Content-Type": "application/json; charset=utf-8"},
               content=body)
    assert r.json() == {"recorded": 1}
    assert c.post("/api/apply", headers={TOKEN_HEADER: token, "Content-Type": "application/json"},
                  content="[1]").status_code == 400


def test_serve_on_a_busy_port_is_one_line_before_any_url(served):
    out = served["out"]
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        for args, words in ((["--port", str(port)], f"port {port} on 127.0.0.1 is in use"),
                            (["--port", str(served["port"])], f"port {served['port']} on 127.0.0.1 is in use"),
                            (["--host", "no-such-host.invalid", "--port", str(free_port())], "not an address to listen on"),
                            (["--port", "0"], "--port must be 1..65535")):
            r = subprocess.run([sys.executable, "-m", "contam_assets.cli", "review", str(out), "--serve", *args],
                               capture_output=True, text=True, timeout=120)
            assert r.returncode == 2 and r.stdout == "", (args, r.returncode, r.stdout, r.stderr)
            assert len(r.stderr.splitlines()) == 1 and words in r.stderr, r.stderr


def test_the_trusted_hosts_are_loopback_and_the_host_served_with_the_port():
    assert trusted_hosts("127.0.0.1", 8300) == {"127.0.0.1:8300", "localhost:8300", "[::1]:8300"}
    assert trusted_hosts("::1", 9) == {"127.0.0.1:9", "localhost:9", "[::1]:9"}
    assert trusted_hosts("Review.Lan", 8300) - trusted_hosts("127.0.0.1", 8300) == {"review.lan:8300"}
    assert trusted_hosts("0.0.0.0", 8300) - trusted_hosts("127.0.0.1", 8300) == {"0.0.0.0:8300"}
    assert trusted_hosts("fe80::1", 80) >= {"[fe80::1]:80", "[fe80::1]", "localhost"}  # port 80 may go unnamed
