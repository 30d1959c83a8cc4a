"""Load on the evaluation API: 2,000 reports, 20 concurrent clients.

Writes one real report with ``evaluate`` (every default benchmark of
--data, a train.jsonl that holds 30 GSM8K test items and 10 HumanEval
solutions, 30 probe metrics in DuckDB), copies it to --reports report
files (--experiments experiments, the rest as stages; steps, scores and
recipes vary), starts ``contam api`` in a subprocess and measures, from a
second process, the time to the last byte of each answer:

* ``cold``: the first listing (index built: every report read once);
* ``1 client, gzip``: listings one after the other, ``Accept-Encoding: gzip``
  as browsers, curl ``--compressed``, requests and httpx send it;
* ``N clients, gzip``: N threads, each with its own keep-alive connection,
  listing as fast as answers come (the target: p99 under 200 ms for 2,000
  reports and 20 clients);
* ``N clients, identity``: the same without compression (the whole JSON);
* ``N clients, If-None-Match``: the same with the last ETag (304 answers);
* ``N clients, one report``: ``GET /api/evaluations/{experiment}`` (latest);
* ``N clients while reports change``: listings while another thread rewrites
  one report every 100 ms;
* ``rewrite listed after``: one more rewrite, then listings until it shows.

Times are to the last byte of the answer (gzip answers are not decompressed
in the timed loop; the script checks once that they decompress to the same
bytes).  Every scenario runs against a server with ``CONTAM_API_FRESH_S=1``
(the default) and one with ``0`` (every listing re-checks the folder).

    python benchmarks/api_load.py

Options: --data (default CONTAM_SHARED_DATA, else ../shared/data), --out (default a new folder under
the system's temporary folder; printed, results.json inside), --reports,
--experiments, --clients, --requests, --fresh.
"""

from __future__ import annotations

import argparse
import copy
import http.client
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlencode

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from contam_assets import store  # noqa: E402
from contam_assets.evaluation.checkpoint_report import dumps, evaluate  # noqa: E402
from contam_assets.evaluation.config import EvaluationConfig  # noqa: E402
from contam_assets.testing.experiments import (  # noqa: E402
    add_checkpoint,
    start_api,
    write_jsonl,
    write_probe_metrics,
)

L = "/api/evaluations"
METRICS = [
    "gsm8k-train-ppl", "gsm8k-test-ppl", "gsm8k-ref-ppl", "delta1", "delta2", "loss/gsm8k-train", "loss/gsm8k-test",
    "loss/gsm8k-ref", "bpb/gsm8k-train", "bpb/gsm8k-test", "bpb/gsm8k-ref", "bpb/humaneval", "bpb/mbpp",
    "llpc/gsm8k-test", "llpc/gsm8k-ref", "mink/auc", "mink/k", "minkpp/auc", "minkpp/k",
    "recitation/humaneval/exact", "recitation/humaneval/similar", "recitation/humaneval/pass@1",
    "recitation/humaneval/n", "recitation/mbpp/exact", "recitation/mbpp/similar", "recitation/mbpp/pass@1",
    "recitation/mbpp/n", "fresh/gsm8k-acc", "fresh/fresh-acc", "fresh/gap",
]


def build(out: Path, data: Path, n_reports: int, n_experiments: int) -> tuple[Path, int]:
    experiments = out / "experiments"
    seeds = out / "seed"  # the real report's own experiment, outside the served folder
    seed = seeds / "seed"
    rows = [json.loads(line) for line in (data / "gsm8k_test.jsonl").read_text().splitlines()[:30]]
    write_jsonl(seed / "data" / "train.jsonl", rows + [{"text": "an unrelated training row"}] * 100)
    add_checkpoint(seeds, "seed", "step-000100", 100, recipe="seed-mix")
    db = out / "contam.duckdb"
    write_probe_metrics(db, [("seed/step-000100", "probes", m, round(random.Random(m).random(), 6)) for m in METRICS])
    ev = evaluate(seeds, "seed", "step-000100", config=EvaluationConfig(), benchmarks_dir=data,
                  connect=lambda: store.connect(db, read_only=True))
    template = ev.report
    rng = random.Random(0)
    per = max(1, n_reports // n_experiments)
    for i in range(n_reports):
        exp, step = f"exp-{i // per:03d}", (i % per + 1) * 100
        rep = copy.deepcopy(template)
        stage = f"step-{step:06d}"
        rep["model"] |= {"checkpoint": f"{exp}/{stage}", "experiment": exp, "stage": stage, "step": step}
        rep["recipe"] = f"recipe-{(i // per) % 7}"
        rep["scores"] = {k: round(v * (0.8 + 0.4 * rng.random()), 6) for k, v in rep["scores"].items()}
        path = experiments / exp / "eval" / stage / "report.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dumps(rep))
    return experiments, len(dumps(template))


def percentiles(ms: list[float]) -> dict:
    qs = statistics.quantiles(ms, n=100, method="inclusive")
    return {"n": len(ms), "p50_ms": round(qs[49], 1), "p99_ms": round(qs[98], 1), "max_ms": round(max(ms), 1)}


def run_clients(url: str, n_clients: int, per_client: int, path: str, params: dict, headers: dict | None = None,
                expect: int = 200, name: str = "") -> dict:
    """``n_clients`` threads, one keep-alive http.client connection each, every answer read to its last byte."""
    host, port = url.split("//")[1].split(":")
    target = f"{path}?{urlencode(params)}"

    def client(_i):
        times = []
        conn = http.client.HTTPConnection(host, int(port), timeout=120)
        try:
            for _ in range(per_client):
                t0 = time.perf_counter()
                conn.request("GET", target, headers=headers or {})
                r = conn.getresponse()
                body = r.read()
                times.append((time.perf_counter() - t0) * 1000)
                assert r.status == expect, (r.status, body[:200])
        finally:
            conn.close()
        return times

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=n_clients) as pool:
        all_times = [t for ts in pool.map(client, range(n_clients)) for t in ts]
    wall = time.perf_counter() - t0
    out = percentiles(all_times) | {"requests_per_s": round(len(all_times) / wall, 1)}
    print(f"  {name or path}: {out}", flush=True)
    return out


def scenarios(url: str, experiments: Path, args) -> dict:
    params = {"output_dir": str(experiments)}
    results: dict = {}
    with httpx.Client(base_url=url, timeout=300) as c:
        t0 = time.perf_counter()
        first = c.get(L, params=params)
        results["cold"] = {"ms": round((time.perf_counter() - t0) * 1000, 1)}
        body = first.json()
        assert first.status_code == 200 and body["count"] == args.reports and not body["errors"], body["errors"]
        results["listing_bytes"] = len(first.content)
    print(f"  cold listing {results['cold']['ms']} ms, {results['listing_bytes']} bytes", flush=True)
    with httpx.Client(base_url=url, timeout=300) as c:  # the gzip form is the same listing
        gz = c.get(L, params=params, headers={"Accept-Encoding": "gzip"})
        assert gz.headers["content-encoding"] == "gzip" and gz.content == first.content
        results["listing_bytes_gzip"] = int(gz.headers["content-length"])
        etag = gz.headers["etag"]
    n, gzip = args.clients, {"Accept-Encoding": "gzip"}
    results["1 client, gzip"] = run_clients(url, 1, 50, L, params, gzip, name="1 client, gzip")
    results[f"{n} clients, gzip"] = run_clients(url, n, args.requests, L, params, gzip, name=f"{n} clients, gzip")
    results[f"{n} clients, identity"] = run_clients(url, n, args.requests, L, params, name=f"{n} clients, identity")
    results[f"{n} clients, If-None-Match"] = run_clients(url, n, args.requests, L, params, gzip | {"If-None-Match": etag},
                                                         expect=304, name="If-None-Match")
    results[f"{n} clients, one report"] = run_clients(url, n, args.requests, f"{L}/exp-042", params, gzip,
                                                      name="one report")
    stop = threading.Event()
    target = experiments / "exp-007" / "eval" / "step-000300" / "report.json"
    text, writes = target.read_text(), [0]

    def writer():
        while not stop.wait(0.1):
            rep = json.loads(text)
            rep["scores"]["delta1"] = writes[0]
            tmp = target.with_name(".report.json.tmp")
            tmp.write_text(dumps(rep))
            os.replace(tmp, target)
            writes[0] += 1

    w = threading.Thread(target=writer)
    w.start()
    try:
        results[f"{n} clients while reports change"] = run_clients(url, n, args.requests, L, params, gzip,
                                                                   name="while reports change")
    finally:
        stop.set()
        w.join()
    results[f"{n} clients while reports change"]["rewrites"] = writes[0]
    # how soon a rewrite is listed: write once more, then list until it shows
    rep = json.loads(text)
    rep["scores"]["delta1"] = -1.0
    target.write_text(dumps(rep))
    t0 = time.perf_counter()
    with httpx.Client(base_url=url, timeout=60) as c:
        while True:
            body = c.get(L, params=params | {"experiment": "exp-007"}).json()
            if body["evaluations"][2]["scores"]["delta1"] == -1.0:
                break
            assert time.perf_counter() - t0 < 30, "a rewritten report was not listed within 30 s"
    results["rewrite listed after"] = {"ms": round((time.perf_counter() - t0) * 1000, 1)}
    target.write_text(text)
    return results


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", type=Path, default=Path(os.environ.get("CONTAM_SHARED_DATA") or ROOT.parent / "shared" / "data"))
    ap.add_argument("--out", type=Path, default=None, help="working folder (default: a new temporary folder)")
    ap.add_argument("--reports", type=int, default=2000)
    ap.add_argument("--experiments", type=int, default=100)
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--requests", type=int, default=25, help="requests per client in each concurrent phase")
    ap.add_argument("--fresh", type=float, nargs="+", default=[1.0, 0.0],
                    help="CONTAM_API_FRESH_S values to run the server with (1.0 = the default, 0 = strict)")
    args = ap.parse_args()
    if args.out is None:
        args.out = Path(tempfile.mkdtemp(prefix="contam_api_load-"))
    elif args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    experiments, report_bytes = build(args.out, args.data, args.reports, args.experiments)
    print(f"wrote {args.reports} reports of {report_bytes} bytes in {time.perf_counter() - t0:.1f}s", flush=True)

    results = {}
    load_before = os.getloadavg()[0]
    for fresh in args.fresh:
        print(f"server with CONTAM_API_FRESH_S={fresh}", flush=True)
        proc, url = start_api(args.out, str(args.out), fresh_s=fresh)
        try:
            results[f"fresh_s={fresh}"] = scenarios(url, experiments, args)
        finally:
            proc.terminate()
            proc.wait(timeout=20)
    machine = {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
               "python": platform.python_version(), "reports": args.reports, "report_bytes": report_bytes,
               "clients": args.clients, "load_average_before": round(load_before, 2),
               "load_average_after": round(os.getloadavg()[0], 2)}
    out = {"machine": machine, "results": results}
    (args.out / "results.json").write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))
    print(f"results: {args.out / 'results.json'}")
    print("\n| server | scenario | requests | p50 ms | p99 ms | max ms | requests/s |\n|---|---|---:|---:|---:|---:|---:|")
    for server, res in results.items():
        for name, r in res.items():
            if isinstance(r, dict) and "p50_ms" in r:
                print(f"| {server} | {name} | {r['n']} | {r['p50_ms']} | {r['p99_ms']} | {r['max_ms']} | "
                      f"{r['requests_per_s']} |")

if __name__ == "__main__":
    main()
