"""The API beside bad files: every good report listed, no 5xx, no hang, no server path in any answer.

One real report (GSM8K items against a training file that holds ten of
them) is written by ``evaluate``; the others are copies with a planted
defect each, or good copies under names that need percent-encoding.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
from concurrent.futures import ThreadPoolExecutor, wait
from urllib.parse import quote

import pytest

from contam_assets import store
from contam_assets.evaluation.checkpoint_report import dumps, evaluate
from contam_assets.evaluation.config import parse_config
from contam_assets.testing.experiments import (
    add_checkpoint,
    api_server,
    gsm8k_rows,
    write_jsonl,
    write_probe_metrics,
)

L = "/api/evaluations"
# names a client must percent-encode: unicode, space, '+', '%', '&', '#', '?', '='
ODD = {"uni-é中": ["step 1+%", "a&b=c#d?"], "sp ace+plus%25": ["s"]}
# report.json files with one planted defect -> the kind the listing gives them
BAD = {
    "recipe-int": "invalid", "score-text": "invalid", "deep": "malformed", "fifo": "not_a_file",
    "folder": "not_a_file", "huge": "too_large", "surrogate": "malformed", "latin1": "malformed",
    "no-schema": "invalid", "truncated": "malformed",
}


def _write(path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.write_bytes if isinstance(text, bytes) else path.write_text)(text)


def _plant(out, good: dict) -> None:
    def report(exp):
        return out / exp / "eval" / "s1" / "report.json"

    bad = copy.deepcopy(good)
    bad["recipe"] = 123
    _write(report("recipe-int"), json.dumps(bad))
    bad = copy.deepcopy(good)
    bad["scores"] = {"x": "high"}
    _write(report("score-text"), json.dumps(bad))
    _write(report("deep"), "[" * 100_000 + "]" * 100_000)
    report("fifo").parent.mkdir(parents=True)
    os.mkfifo(report("fifo"))
    report("folder").mkdir(parents=True)
    with open(report("huge").parent.mkdir(parents=True) or report("huge"), "wb") as f:
        f.truncate(9 * 1024 * 1024)  # sparse: over the 8 MiB limit, costs no disk
    _write(report("surrogate"), json.dumps(good).replace('"recipe": "mix-a"', '"recipe": "\\udcff"'))
    _write(report("latin1"), json.dumps(good).replace("mix-a", "mix-\u00e9").encode("latin-1"))
    _write(report("no-schema"), json.dumps({k: v for k, v in good.items() if k != "schema"}))
    _write(report("truncated"), dumps(good)[:-40])
    nan = copy.deepcopy(good)  # NaN and overflowing numbers are served as null: a good report
    nan["scores"] = {"loss/gsm8k-test": float("nan"), "big": 1.0}
    _write(report("nan"), json.dumps(nan).replace("1.0}", "1e999}"))
    for exp, stages in ODD.items():
        for stage in stages:
            odd = copy.deepcopy(good)
            odd["model"] |= {"experiment": exp, "stage": stage}
            _write(out / exp / "eval" / stage / "report.json", dumps(odd))
    # a name that is not UTF-8 cannot be asked for: listed as an error, never a 500
    os.makedirs(os.fsencode(out) + b"/bytes-\xff/eval/s1")
    with open(os.fsencode(out) + b"/bytes-\xff/eval/s1/report.json", "w") as f:
        f.write(dumps(good))


@pytest.fixture(scope="module")
def served(tmp_path_factory, shared_data):
    base = tmp_path_factory.mktemp("hard")
    root = base / "root"
    out = root / "output"
    config = parse_config({"benchmarks": [{"name": "gsm8k-test", "path": str(shared_data / "gsm8k_test.jsonl"),
                                           "limit": 40}]}, base)
    db = base / "contam.duckdb"
    write_probe_metrics(db, [("alpha/step-000200", "ppl_probe", "loss/gsm8k-test", 0.5)])
    write_jsonl(out / "alpha" / "data" / "train.jsonl", gsm8k_rows(shared_data)[:10] + [{"text": "unrelated"}])
    for stage, step in (("step-000100", 100), ("step-000200", 200)):
        add_checkpoint(out, "alpha", stage, step, recipe="mix-a")
        ev = evaluate(out, "alpha", stage, config=config, benchmarks_dir=None,
                      connect=lambda: store.connect(db, read_only=True))
    _plant(out, ev.report)
    with api_server(root, str(root)) as (client, proc):
        yield client, base, out, ev.report


def _no_leak(resp, base, text: str | None = None) -> None:
    """An error body (or the listing's errors) names no server path and no code location."""
    text = resp.text if text is None else text
    assert str(base) not in text and base.name not in text, text[:300]
    assert "Traceback" not in text and '.py"' not in text and ".py:" not in text, text[:300]


def test_listing_answers_with_every_good_report_and_each_bad_one_in_errors(served):
    client, base, out, good = served
    r = client.get(L, params={"output_dir": "output"})
    assert r.status_code == 200, r.text
    body = r.json()
    _no_leak(r, base, json.dumps(body["errors"], ensure_ascii=False))  # reports themselves hold paths
    listed = {(e["experiment"], e["stage"]) for e in body["evaluations"]}
    expected = {("alpha", "step-000100"), ("alpha", "step-000200"), ("nan", "s1")}
    expected |= {(exp, stage) for exp, stages in ODD.items() for stage in stages}
    assert listed == expected and body["count"] == len(expected)
    kinds = {e["experiment"]: e["kind"] for e in body["errors"]}
    assert kinds == BAD | {"bytes-\ufffd": "bad_name"}
    for e in body["errors"]:
        if e["kind"] == "bad_name":  # the experiment's folder name is the problem: nothing below it is read
            assert e["stage"] is None and e["path"] == "bytes-\ufffd" and e["error"] == "experiment name is not valid UTF-8"
            continue
        assert e["stage"] == "s1" and e["path"] == f"{e['experiment']}/eval/s1/report.json"
        assert 0 < len(e["error"]) < 200
    msgs = {e["experiment"]: e["error"] for e in body["errors"]}
    assert msgs["recipe-int"] == "`recipe` must be a string or null"
    assert msgs["score-text"] == "`scores.x` must be a number or null"
    assert msgs["deep"] == "JSON nested deeper than 32 levels"
    assert msgs["fifo"] == "not a regular file (a FIFO)" and msgs["folder"] == "not a regular file (a folder)"
    nan = next(e for e in body["evaluations"] if e["experiment"] == "nan")
    assert nan["scores"] == {"loss/gsm8k-test": None, "big": None}
    alpha = [e for e in body["evaluations"] if e["experiment"] == "alpha"]
    assert alpha[-1]["scores"] == {"loss/gsm8k-test": 0.5} and alpha[-1]["contamination"]["exact"] == 10


def test_every_listed_report_can_be_fetched_by_its_url_and_by_encoded_names(served):
    client, base, out, good = served
    body = client.get(L, params={"output_dir": "output"}).json()
    for e in body["evaluations"]:
        exp, stage = e["experiment"], e["stage"]
        assert e["url"] == f"{L}/{quote(exp, safe='')}?stage={quote(stage, safe='')}&output_dir=output"
        by_url = client.get(e["url"])
        by_params = client.get(f"{L}/{quote(exp, safe='')}", params={"output_dir": "output", "stage": stage})
        assert by_url.status_code == 200 and by_params.status_code == 200, (exp, stage, by_url.text)
        assert by_url.json() == by_params.json()
        assert by_url.json()["model"]["stage"] == (good["model"]["stage"] if exp == "nan" else stage)
    latest = client.get(f"{L}/{quote('uni-é中', safe='')}", params={"output_dir": "output"})
    assert latest.status_code == 200 and latest.json()["model"]["stage"] == "step 1+%"  # no step: by name
    nan = client.get(f"{L}/nan", params={"output_dir": "output", "stage": "s1"})
    assert nan.status_code == 200 and nan.json()["scores"] == {"loss/gsm8k-test": None, "big": None}


def test_one_bad_report_is_a_422_with_its_kind(served):
    client, base, out, _ = served
    for exp, kind in BAD.items():
        for params in ({"output_dir": "output", "stage": "s1"}, {"output_dir": "output"}):
            r = client.get(f"{L}/{exp}", params=params)
            assert r.status_code == 422, (exp, r.text)
            _no_leak(r, base)
            assert r.json()["error"] == "malformed_report" and r.json()["kind"] == kind
    r = client.get(f"{L}/{quote('bytes-ÿ', safe='')}", params={"output_dir": "output"})
    assert r.status_code == 404


def test_long_names_and_paths_are_clean_4xx(served):
    client, base, out, _ = served
    long = "x" * 300
    cases = [(f"{L}/{long}", {"output_dir": "output"}), (f"{L}/alpha", {"output_dir": "output", "stage": long}),
             (L, {"output_dir": f"output/{long}"}), (L, {"output_dir": "output", "experiment": long}),
             (f"{L}/{'é' * 200}", {"output_dir": "output"})]
    for path, params in cases:
        r = client.get(path, params=params)
        assert r.status_code == 400, (path[:60], r.text)
        _no_leak(r, base)
        assert "255" in r.json()["message"]
    # every component short, the whole path past PATH_MAX once joined to the server's folder: not found
    r = client.get(L, params={"output_dir": "/".join(["output"] + ["a" * 250] * 16)})
    assert r.status_code == 404 and r.json()["error"] == "not_found"
    _no_leak(r, base)


def test_a_fifo_never_hangs_concurrent_listings(served):
    client, base, out, _ = served

    def hit(i):
        if i % 3 == 2:
            return client.get(f"{L}/fifo", params={"output_dir": "output", "stage": "s1"}).status_code
        return client.get(L, params={"output_dir": "output", "experiment": "fifo" if i % 3 else ""}).status_code

    with ThreadPoolExecutor(max_workers=16) as pool:
        futures = [pool.submit(hit, i) for i in range(90)]
        done, pending = wait(futures, timeout=60)  # a hang guard, not a speed test
    assert not pending
    codes = sorted({f.result() for f in done})
    assert codes == [200, 422]


def test_etag_and_last_modified(served):
    client, base, out, good = served
    params = {"output_dir": "output", "experiment": "alpha"}
    first = client.get(L, params=params)
    etag, last = first.headers["etag"], first.headers["last-modified"]
    assert client.get(L, params=params, headers={"If-None-Match": etag}).status_code == 304
    assert client.get(L, params=params, headers={"If-Modified-Since": last}).status_code == 304
    assert client.get(L, params={"output_dir": "output"}, headers={"If-None-Match": etag}).status_code == 200
    one = client.get(f"{L}/alpha", params={"output_dir": "output"})
    assert client.get(f"{L}/alpha", params={"output_dir": "output"},
                      headers={"If-None-Match": one.headers["etag"]}).status_code == 304

    path = out / "alpha" / "eval" / "step-000200" / "report.json"
    text = path.read_text()
    changed = copy.deepcopy(good)
    changed["scores"] = {"loss/gsm8k-test": 0.25}
    try:
        path.write_text(dumps(changed))  # in place: same inode, new mtime
        again = client.get(L, params=params, headers={"If-None-Match": etag})
        assert again.status_code == 200 and again.headers["etag"] != etag
        assert again.json()["evaluations"][-1]["scores"] == {"loss/gsm8k-test": 0.25}
        assert client.get(L, params=params, headers={"If-Modified-Since": last}).status_code == 200
        assert client.get(f"{L}/alpha", params={"output_dir": "output"},
                          headers={"If-None-Match": one.headers["etag"]}).json()["scores"] == {"loss/gsm8k-test": 0.25}
        tmp = path.with_name("new.json")
        tmp.write_text("{ broken")
        os.replace(tmp, path)  # atomic replace: new inode
        body = client.get(L, params=params).json()
        assert [e["stage"] for e in body["evaluations"]] == ["step-000100"]
        assert [(e["stage"], e["kind"]) for e in body["errors"]] == [("step-000200", "malformed")]
        shutil.rmtree(path.parent)  # a stage removed
        body = client.get(L, params=params).json()
        assert [e["stage"] for e in body["evaluations"]] == ["step-000100"] and body["errors"] == []
    finally:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert client.get(L, params=params).json()["count"] == 2
