"""The review page in a real headless Chromium (Debian's /usr/bin/chromium driven by Playwright; no browser download).

`contam review contam_out --serve` as the README writes it: load the page, filter to the
derived suite, accept one of its matches, find the decision in DuckDB, press Apply, and
find the document gone from the decontaminated mix (and the other derived-suite copies
still in it).  .ci/run installs chromium; without it the test fails and says so
(CONTAM_SKIP_BROWSER=1 skips it on a machine without a browser).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from contam_assets import store
from contam_assets_tests.doc_commands import command
from contam_assets_tests.review_helpers import DERIVED, PRIMARY, detect, free_port

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
    port = free_port()
    env = {**os.environ, "CONTAM_REVIEW_PORT": str(port), "DAGSTER_HOME": str(out / ".dagster_home"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    cmd = command("README.md", "contam review contam_out --serve")
    proc = subprocess.Popen(["bash", "-c", cmd], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while True:
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=5) as r:
                assert json.loads(r.read())["exists"]
            break
        except OSError:
            assert proc.poll() is None and time.time() < deadline, proc.stdout.read().decode()[-3000:]
            time.sleep(0.5)
    yield {"url": url, "out": out}
    os.killpg(proc.pid, signal.SIGINT)
    proc.wait(timeout=30)


def _mix_ids(out: Path) -> set[str]:
    return {json.loads(line)["id"] for line in (out / "mix" / "code.jsonl").read_text().splitlines()}


def test_filter_accept_a_derived_match_and_apply_removes_the_document(browser, server):
    out = server["out"]
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    page.set_default_timeout(60_000)
    page.goto(server["url"] + "/")
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

    with page.expect_navigation():
        first.locator("button.accept").click()
    assert "recorded 1 decision: accept" in page.locator("#flash").inner_text()
    with store.connect(out / "contam.duckdb", read_only=True) as con:
        rows = con.execute("select match_id, decision from review_decisions").fetchall()
    assert rows == [(mid, "accept")]
    assert page.locator("article.match").count() == len(DERIVED) - 1  # decided: no longer pending

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

