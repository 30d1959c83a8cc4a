"""The real HTTP server (``contam api`` under uvicorn, in a subprocess) on 127.0.0.1."""

from __future__ import annotations

import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor, wait

import pytest

from contam_assets import store
from contam_assets.evaluation.checkpoint_report import evaluate
from contam_assets.evaluation.config import parse_config
from contam_assets.testing.experiments import (
    add_checkpoint,
    api_server,
    gsm8k_rows,
    write_jsonl,
    write_probe_metrics,
)


@pytest.fixture(scope="module")
def server(tmp_path_factory, shared_data):
    """Reports under <root>/output, a folder outside the root, symlinks in and out; the server runs in <root>."""
    base = tmp_path_factory.mktemp("api")
    root = base / "root"
    out = root / "output"
    outside = base / "outside"
    test = gsm8k_rows(shared_data)
    config = parse_config({"benchmarks": [{"name": "gsm8k-test", "path": str(shared_data / "gsm8k_test.jsonl"),
                                           "limit": 40}]}, base)
    db = base / "contam.duckdb"
    write_probe_metrics(db, [("alpha/step-000200", "ppl_probe", "loss/gsm8k-test", 0.5),
                             ("beta/step-000100", "ppl_probe", "loss/gsm8k-test", 0.9)])
    runs = {"alpha": ("mix-a", [("base", 0, True), ("step-000100", 100, False), ("step-000200", 200, False)], 10),
            "beta": ("mix-b", [("step-000100", 100, False)], 0)}
    for exp, (recipe, stages, leaked) in runs.items():
        write_jsonl(out / exp / "data" / "train.jsonl", test[:leaked] + [{"text": "unrelated row"}])
        for stage, step, is_base in stages:
            add_checkpoint(out, exp, stage, step, is_base, recipe)
            evaluate(out, exp, stage, config=config, benchmarks_dir=None, connect=lambda: store.connect(db, read_only=True))
    broken = out / "broken" / "eval" / "s1" / "report.json"
    broken.parent.mkdir(parents=True)
    broken.write_text("{ not json")
    # a valid report outside the root, reachable only through symlinks
    shutil.copytree(out / "beta", outside / "evil")
    os.symlink(outside / "evil", out / "escape")  # experiment folder leaving the root
    os.symlink(outside, root / "link_out")  # output folder leaving the root
    (out / "gamma" / "eval").mkdir(parents=True)
    os.symlink(outside / "evil" / "eval" / "step-000100", out / "gamma" / "eval" / "s1")  # stage leaving the root
    os.symlink(out, root / "link_in")  # symlink that stays inside

    with api_server(root, f"{root},{base / 'nonexistent-root'}") as (client, _proc):
        yield client, root, out, outside


def _error(resp, status: int, code: str) -> str:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert body["error"] == code and body["message"]
    return body["message"]


def test_list_every_report(server):
    client, root, out, _ = server
    r = client.get("/api/evaluations", params={"output_dir": "./output"})
    assert r.status_code == 200
    body = r.json()
    assert body["count"] == 4
    assert [(e["experiment"], e["stage"]) for e in body["evaluations"]] == [
        ("alpha", "base"), ("alpha", "step-000100"), ("alpha", "step-000200"), ("beta", "step-000100")]
    a200 = body["evaluations"][2]
    assert a200["recipe"] == "mix-a" and a200["model"]["step"] == 200 and a200["scores"] == {"loss/gsm8k-test": 0.5}
    assert a200["contamination"]["exact"] == 10 and a200["contamination"]["items"] == 40
    assert body["evaluations"][0]["contamination"] is None  # base
    errors = {e["experiment"]: e for e in body["errors"]}
    assert set(errors) == {"broken", "escape", "gamma"}
    assert errors["gamma"]["kind"] == "refused"
    assert errors["broken"]["kind"] == "malformed" and "not valid JSON" in errors["broken"]["error"]
    assert errors["escape"]["kind"] == "refused" and "outside the allowed roots" in errors["escape"]["error"]
    assert errors["broken"]["path"] == "broken/eval/s1/report.json"
    # absolute path inside the root, and a symlink that stays inside, give the same list
    for od in (str(out), "link_in", "output/"):
        r2 = client.get("/api/evaluations", params={"output_dir": od})
        assert r2.status_code == 200 and r2.json()["count"] == 4


def test_filters(server):
    client = server[0]

    def stages(**params):
        r = client.get("/api/evaluations", params={"output_dir": "output", **params})
        assert r.status_code == 200, r.text
        return [(e["experiment"], e["stage"]) for e in r.json()["evaluations"]]

    assert stages(recipe="mix-b") == [("beta", "step-000100")]
    assert stages(experiment="alpha") == [("alpha", "base"), ("alpha", "step-000100"), ("alpha", "step-000200")]
    assert stages(recipe="mix-a", experiment="beta") == []
    assert len(stages(recipe="", experiment="")) == 4
    assert stages(experiment="nobody") == []


def test_one_report_in_full(server):
    client, _, out, _ = server
    r = client.get("/api/evaluations/alpha", params={"output_dir": "output"})
    assert r.status_code == 200
    assert r.json() == json.loads((out / "alpha" / "eval" / "step-000200" / "report.json").read_text())  # latest step
    r = client.get("/api/evaluations/alpha", params={"output_dir": "output", "stage": "base"})
    assert r.status_code == 200 and r.json()["contamination"] is None and r.json()["model"]["is_base"] is True
    r = client.get("/api/evaluations/beta", params={"output_dir": "output"})
    assert r.json()["contamination"]["exact"] == 0


def test_refusals(server):
    client, root, out, outside = server
    get = lambda path, **p: client.get(path, params=p)  # noqa: E731
    L = "/api/evaluations"
    assert "'..'" in _error(get(L, output_dir="output/../output"), 400, "bad_request")
    _error(get(L, output_dir="../outside"), 400, "bad_request")
    _error(get(L, output_dir=f"{out}/../output"), 400, "bad_request")
    _error(get(L), 400, "bad_request")  # output_dir missing
    _error(get(L, output_dir=""), 400, "bad_request")
    _error(get(L, output_dir="output\x00x"), 400, "bad_request")
    _error(get(L, output_dir="x" * 5000), 400, "bad_request")
    _error(get(L, output_dir="output", experiment="a/b"), 400, "bad_request")
    _error(get(L, output_dir="output", experiment="é" * 128), 400, "bad_request")  # 256 bytes
    _error(get(L, output_dir=str(outside)), 403, "outside_roots")  # absolute path elsewhere
    _error(get(L, output_dir="/etc"), 403, "outside_roots")
    _error(get(L, output_dir="link_out"), 403, "outside_roots")  # symlink leaving the root
    _error(get(L, output_dir="missing"), 404, "not_found")
    _error(get(L, output_dir="output/alpha/data/train.jsonl"), 404, "not_found")  # not a folder
    _error(get(f"{L}/escape", output_dir="output"), 403, "outside_roots")  # experiment symlink leaving
    _error(get(f"{L}/gamma", output_dir="output"), 403, "outside_roots")  # its only report leaves the root
    _error(get(f"{L}/gamma", output_dir="output", stage="s1"), 403, "outside_roots")
    _error(get(f"{L}/nobody", output_dir="output"), 404, "not_found")
    _error(get(f"{L}/alpha", output_dir="output", stage="step-999"), 404, "not_found")
    _error(get(f"{L}/alpha", output_dir="output", stage="a b"), 404, "not_found")  # a legal name, no such stage
    _error(get(f"{L}/alpha", output_dir="output", stage=".."), 400, "bad_request")
    _error(get(f"{L}/alpha", output_dir="output/../output"), 400, "bad_request")
    assert "not valid JSON" in _error(get(f"{L}/broken", output_dir="output"), 422, "malformed_report")
    _error(get(f"{L}/broken", output_dir="output", stage="s1"), 422, "malformed_report")
    _error(get("/api/nothing"), 404, "not_found")


def test_openapi_schema(server):
    client = server[0]
    spec = client.get("/openapi.json").json()
    assert set(spec["paths"]) >= {"/api/evaluations", "/api/evaluations/{experiment}"}
    params = {p["name"] for p in spec["paths"]["/api/evaluations"]["get"]["parameters"]}
    assert params == {"output_dir", "recipe", "experiment"}
    assert {"400", "403", "404"} <= set(spec["paths"]["/api/evaluations"]["get"]["responses"])


def test_burst_of_bad_requests_leaves_it_answering(server):
    client, _, _, outside = server
    bad = [
        ("/api/evaluations", {"output_dir": "../x"}),
        ("/api/evaluations", {"output_dir": str(outside)}),
        ("/api/evaluations", {"output_dir": "nope"}),
        ("/api/evaluations", {}),
        ("/api/evaluations/..evil", {"output_dir": "output", "stage": "../../etc"}),
        ("/api/evaluations/broken", {"output_dir": "link_out"}),
        ("/api/evaluations", {"output_dir": "y" * 4097}),
        ("/api/evaluations/%2e%2e", {"output_dir": "output"}),
    ]

    def hit(i: int) -> int:
        path, params = bad[i % len(bad)]
        return client.get(path, params=params).status_code  # httpx.Client is thread-safe

    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = [pool.submit(hit, i) for i in range(200)]
        done, pending = wait(futures, timeout=120)  # a hang guard, not a speed test
    assert not pending
    codes = [f.result() for f in done]
    assert len(codes) == 200 and set(codes) <= {400, 403, 404}
    r = client.get("/api/evaluations", params={"output_dir": "output"})
    assert r.status_code == 200 and r.json()["count"] == 4
