"""The review page's HTTP side: filters over the columns that exist, decisions as the CLI writes them, apply."""

from __future__ import annotations

import shutil

import pytest
from fastapi.testclient import TestClient

from contam_assets import store
from contam_assets.commands.review_serve import make_apply
from contam_assets.web.review_app import ReviewConfig, create_app
from contam_assets.web.review_guard import TOKEN_HEADER
from contam_assets_tests.support.review import DERIVED, PRIMARY, detect


@pytest.fixture(scope="module")
def out(tmp_path_factory, shared_data):
    return detect(tmp_path_factory.mktemp("review"), shared_data)


def _client(out, apply=lambda: (True, "applied")):
    """A client as the API user is one: the server's own Host, its token in the header."""
    app = create_app(ReviewConfig(out_dir=out, pool_dir=out.parent / "pool", reviewer="tester"), apply)
    return TestClient(app, base_url="http://127.0.0.1:8300", headers={TOKEN_HEADER: app.state.token})


def test_filters_and_raw_text(out):
    c = _client(out)
    f = c.get("/api/filters").json()["filters"]
    assert f["suite"] == ["humaneval", "humaneval_solution"] and f["reason"] == ["question+answer", "solution_only"]
    derived = c.get("/api/matches", params={"suite": "humaneval_solution"}).json()
    # the primary copy also quotes the solution: that document is removed already, the others wait
    assert {m["line"]: m["removed"] for m in derived["matches"]} == {**{k: False for k in DERIVED}, **{k: True for k in PRIMARY}}
    assert all(m["needs_review"] for m in derived["matches"])
    pending = c.get("/api/matches", params={"status": "pending"}).json()
    assert {m["line"] for m in pending["matches"]} == set(DERIVED)
    assert pending["counts"]["pending_matches"] == len(DERIVED) == pending["counts"]["documents"]
    primary = c.get("/api/matches", params={"suite": "humaneval", "min_score": "0.9"}).json()
    assert {m["line"] for m in primary["matches"]} == set(PRIMARY) and all(m["removed"] for m in primary["matches"])
    assert c.get("/api/matches", params={"reason": "answer-only"}).json()["counts"]["matches"] == 0
    assert c.get("/api/matches", params={"shard": "code.jsonl", "max_score": "0.1"}).json()["counts"]["matches"] == 0
    assert c.get("/api/matches", params={"min_score": "high"}).status_code == 400
    page = c.get("/", params={"suite": "humaneval_solution"}).text
    # the raw document: JSON escapes and case as in the pool, the matched code marked
    assert 'snippet = {&#34;completion&#34;' in page or "snippet = {&quot;completion&quot;" in page
    assert '<mark class="question">' in page and "raw text" in page


def test_the_reason_column_is_filtered_and_a_null_reads_as_decons(out, tmp_path):
    copy = tmp_path / "out"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns(".dagster_home", "token_cache"))
    with store.connect(copy / "contam.duckdb") as con:
        con.execute("update matches set reason = case when needs_review then 'solution' else null end")
    c = _client(copy)
    assert c.get("/api/filters").json()["filters"]["reason"] == ["question+answer", "solution"]
    got = c.get("/api/matches", params={"reason": "solution"}).json()["matches"]
    assert {m["line"] for m in got} == set(DERIVED) | set(PRIMARY) and {m["why_reason"] for m in got} == {"solution"}
    assert {m["line"] for m in c.get("/api/matches", params={"reason": "question+answer"}).json()["matches"]} >= set(PRIMARY)


def test_decisions_are_written_as_the_cli_writes_them_and_forms_need_the_token(out, tmp_path):
    copy = tmp_path / "out"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns(".dagster_home", "token_cache"))
    c = _client(copy)
    mid = c.get("/api/matches", params={"status": "pending"}).json()["matches"][0]["match_id"]
    assert c.post("/api/decisions", json={"match_ids": ["nope"], "decision": "accept"}).status_code == 400
    assert c.post("/api/decisions", json={"match_ids": [mid], "decision": "maybe"}).status_code == 400
    assert c.post("/decisions", data={"match_id": mid, "decision": "accept", "token": "forged"}).status_code == 403
    token = c.app.state.token
    r = c.post("/decisions", data={"match_id": mid, "decision": "accept", "token": token, "back": "/?suite=x"},
               follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/?suite=x&flash=")
    assert f"recorded 1 decision: accept {mid}" in c.get(r.headers["location"]).text
    with store.connect(copy / "contam.duckdb", read_only=True) as con:
        rows = con.execute("select match_id, suite, split, instance_index, decision, reviewer from review_decisions").fetchall()
        hit = con.execute("select suite, split, instance_index from matches where match_id = ?", [mid]).fetchone()
    assert rows == [(mid, *hit, "accept", "tester")]
    assert c.get("/api/matches", params={"status": "decided"}).json()["matches"][0]["decision"] == "accept"


def test_apply_runs_contam_apply(out, tmp_path):
    copy = tmp_path / "out"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns(".dagster_home", "token_cache"))
    c = _client(copy, make_apply(copy, str(tmp_path / "home")))
    mid = c.get("/api/matches", params={"status": "pending"}).json()["matches"][0]
    assert c.post("/api/decisions", json={"match_ids": [mid["match_id"]], "decision": "accept"}).json() == {"recorded": 1}
    r = c.post("/api/apply", json={})
    assert r.status_code == 200 and "removed" in r.json()["output"], r.text
    with store.connect(copy / "contam.duckdb", read_only=True) as con:
        removed = {x[0] for x in con.execute("select line from removals").fetchall()}
    assert removed == set(PRIMARY) | {mid["line"]}
