"""Calibration and cost of `contam estimate` (docs/estimate.md).

For each planted rate (share of documents quoting a GSM8K test item with its solution), a pool of --shards shards
of --docs documents is generated in two sources (web: three quarters of the shards, code: the rest).  The leaks
are clustered: --hot of the contaminated documents sit in a tenth of the shards, the rest anywhere; the items
they quote are skewed (a few items many times, most once or never).  Each pool is scanned whole, once, with the
real `contam detect` (GSM8K test only); its tables give the true pool figures (the estimate at fraction 1, the
same definitions).  Then --samples seeded samples at --fraction are estimated from the stored rows of their units
(--unit, as `contam estimate` chooses them: whole shards, or blocks of shards when the sample would hold fewer than
100 shards): documents are scanned independently of each other, so a sampled unit's rows are the rows a scan of
the sample alone writes (tests/test_estimate_cli.py checks that `contam detect` keeps a sample's scans of whole
shards as they are, and that a block sample at F = 1 gives the full run's figures).  For blocks, the full run's
rows are regrouped by the byte offset of each document's line into the blocks' keys (`block_view`).
Reported per rate and measure: how often the 95 % interval holds the true figure, the estimates' median
relative error, and the sample's bytes over the pool's, over F.

Cost (--cost, on the pool of the --cost-rate): a real `contam estimate --fraction F` and a real `contam detect`,
each into a fresh output folder, their wall seconds and stages.

    python benchmarks/estimate_calibration.py --out /tmp/estimate-calibration
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TASK = """name = "gsm8k"\nkind = "qa"\nlanguage = "en"\n[fields]\nquestion = "question"\nanswer = "answer"
[[splits]]\nname = "test"\nfile = "gsm8k_test.jsonl"\n"""
MEASURES = ("removed_documents", "copies_per_item", "items_present_share")
WORDS = ("garden weather bread village river morning market station letter winter harvest table lamp window road "
         "teacher music paper garden story kitchen bicycle mountain").split()


def make_pool(folder: Path, gsm: list[dict], shards: int, docs: int, rate: float, hot_share: float, seed: int) -> int:
    rng = random.Random(seed)
    n_total = shards * docs
    n_leak = max(1, round(rate * n_total))
    names = [("web" if i < shards * 3 // 4 else "code", i) for i in range(shards)]
    hot = set(rng.sample(range(shards), max(1, shards // 10)))
    slots: dict[int, list[int]] = {}
    hot_list = sorted(hot)
    for _ in range(n_leak):
        s = rng.choice(hot_list) if rng.random() < hot_share else rng.randrange(shards)
        taken = slots.setdefault(s, [])
        if len(taken) >= docs:
            continue
        free = [d for d in range(docs) if d not in set(taken)] if 2 * len(taken) >= docs else None
        d = rng.choice(free) if free is not None else rng.randrange(docs)
        while free is None and d in taken:
            d = rng.randrange(docs)
        taken.append(d)
    planted = 0
    for (source, i) in names:
        (folder / source).mkdir(parents=True, exist_ok=True)
        rows = []
        leak = set(slots.get(i, []))
        for d in range(docs):
            text = " ".join(rng.choice(WORDS) for _ in range(60))
            if d in leak:
                g = gsm[min(len(gsm) - 1, int(len(gsm) * rng.random() ** 3))]
                text = f"{text}\nWorked example.\n{g['question']}\n{g['answer']}\n{text[:80]}"
                planted += 1
            rows.append(json.dumps({"id": f"{source}-{i}-{d}", "source": source, "text": text}))
        (folder / source / f"part-{i:04d}.jsonl").write_text("\n".join(rows) + "\n")
    return planted


def block_view(full_db: Path, listing, units: list, block_bytes: int):
    """An in-memory database holding the full run's rows regrouped into blocks: `shard` is the key of the block each
    document's line starts in, `shard_stats` one row per block (its documents; its tokens in proportion)."""
    import duckdb
    import polars as pl

    key_of = {(u.shard, u.start): u.key for u in units}
    mapping, stats = [], []
    with duckdb.connect(str(full_db), read_only=True) as full:
        per_shard = {r[0]: r[1:] for r in full.execute("select shard, read, tokens from shard_stats").fetchall()}
        con = duckdb.connect()
        for name in ("instances", "review_decisions", "matches", "removals"):
            con.register("rows", full.sql(f"select * from {name}").to_arrow_table())
            con.execute(f"create table {name} as select * from rows")
            con.unregister("rows")
    for shard in listing.shards:
        data = Path(listing.paths[shard]).read_bytes()
        starts = [0] + [i + 1 for i, b in enumerate(data) if b == 10 and i + 1 < len(data)]
        read, tokens = per_shard.get(shard, (0, 0))
        blocks: dict[str, int] = {}
        for line, off in enumerate(starts):
            start = off // block_bytes * block_bytes
            key = key_of.get((shard, start), shard)
            mapping.append((shard, line, key))
            blocks[key] = blocks.get(key, 0) + 1
        for key, n in blocks.items():
            stats.append((key, n, round(tokens * n / max(1, len(starts)))))
        for u in units:
            if u.shard == shard and u.key not in blocks:
                stats.append((u.key, 0, 0))
    con.register("mapping", pl.DataFrame(mapping, schema=["shard", "line", "unit"], orient="row").to_arrow())
    for name in ("matches", "removals"):
        con.execute(f"update {name} t set shard = m.unit from mapping m where m.shard = t.shard and m.line = t.line")
    con.register("stats", pl.DataFrame(stats, schema=["shard", "read", "tokens"], orient="row").to_arrow())
    con.execute("create table shard_stats as select shard, read, 0 as bytes, tokens, 'ok' as status "
                "from stats")
    return con


def contam(*args, home: Path) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "contam_assets.cli", *map(str, args)], capture_output=True, text=True,
                       env={**os.environ, "DAGSTER_HOME": str(home)})
    if r.returncode != 0:
        raise SystemExit(f"contam {args[0]} failed: {r.stderr[-2000:]}")
    return time.perf_counter() - t0, r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--benchmarks", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--shards", type=int, default=400)
    ap.add_argument("--docs", type=int, default=25)
    ap.add_argument("--rates", default="0.0001,0.001,0.01,0.05", help="planted rates to calibrate ('' : none, --cost only)")
    ap.add_argument("--hot", type=float, default=0.7, help="share of the leaks in the hot tenth of the shards")
    ap.add_argument("--fraction", type=float, default=0.026)
    ap.add_argument("--samples", type=int, default=40)
    ap.add_argument("--replicates", type=int, default=500)
    ap.add_argument("--unit", choices=["auto", "shard", "block"], default="auto",
                    help="what the samples draw (as contam estimate --unit)")
    ap.add_argument("--cost", action="store_true")
    ap.add_argument("--cost-rate", type=float, default=0.01)
    a = ap.parse_args()
    import duckdb

    from contam_assets.estimate import pool as estimate_pool
    from contam_assets.estimate.design import choose_units, shard_units, stratified_sample
    from contam_assets.store.pool import list_pool

    out = Path(a.out).resolve()
    (out / "tasks").mkdir(parents=True, exist_ok=True)
    (out / "tasks" / "gsm8k.toml").write_text(TASK)
    gsm = [json.loads(line) for line in open(Path(a.benchmarks) / "gsm8k_test.jsonl")]
    common = ["--benchmarks", a.benchmarks, "--tasks-dir", out / "tasks"]
    results = {"fraction": a.fraction, "samples": a.samples, "shards": a.shards, "docs_per_shard": a.docs,
               "hot": a.hot, "unit": a.unit, "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
               "date": time.strftime("%Y-%m-%d", time.gmtime()), "rates": {}}
    for rate in [float(r) for r in a.rates.split(",") if r.strip()]:
        pool, full = out / f"pool-{rate:g}", out / f"full-{rate:g}"
        if not pool.exists():
            make_pool(pool, gsm, a.shards, a.docs, rate, a.hot, seed=int(rate * 1e6))
        if not (full / "contam.duckdb").exists():
            wall, _ = contam("detect", "--pool", pool, "--out", full, *common, home=out / "home")
            print(f"rate {rate:g}: full scan {wall:.1f}s", flush=True)
        listing = list_pool(pool)
        with duckdb.connect(str(full / "contam.duckdb"), read_only=True) as con:
            true = estimate_pool.estimate(con, stratified_sample(shard_units(listing.shards, listing.paths), 1.0),
                                          replicates=10)["tasks"]["gsm8k"]["splits"]["test"]
        units, kind, block = choose_units(listing.shards, listing.paths, a.fraction, a.unit)
        results["rates"][f"{rate:g}"] = {"unit": kind, "block_bytes": block, "units": len(units)}
        con = block_view(full / "contam.duckdb", listing, units, block) if kind == "block" else \
            duckdb.connect(str(full / "contam.duckdb"), read_only=True)
        with con:
            if kind == "block":  # the regrouping loses and adds nothing: the census of the blocks is the full run
                census = estimate_pool.estimate(con, stratified_sample(units, 1.0, unit=kind, block_bytes=block),
                                                replicates=10)["tasks"]["gsm8k"]["splits"]["test"]
                assert all(census[m]["estimate"] == true[m]["estimate"] for m in MEASURES), (census, true)
            cover = {m: 0 for m in MEASURES}
            errors = {m: [] for m in MEASURES}
            width = {m: [] for m in MEASURES}
            byte_ratio = []
            for seed in range(a.samples):
                s = stratified_sample(units, a.fraction, seed, unit=kind, block_bytes=block)
                got = estimate_pool.estimate(con, s, replicates=a.replicates)
                t = got["tasks"]["gsm8k"]["splits"]["test"]
                byte_ratio.append(got["sampled"]["bytes"] / got["pool"]["bytes"] / a.fraction)
                for m in MEASURES:
                    v = true[m]["estimate"]
                    cover[m] += t[m]["low"] - 1e-9 <= v <= t[m]["high"] + 1e-9
                    errors[m].append(abs(t[m]["estimate"] - v) / v if v else float(t[m]["estimate"] > 0))
                    width[m].append(t[m]["high"] - t[m]["low"])
        results["rates"][f"{rate:g}"] |= {
            "sampled_units": len(s.units),
            "true": {m: true[m]["estimate"] for m in MEASURES},
            "coverage": {m: cover[m] / a.samples for m in MEASURES},
            "median_relative_error": {m: statistics.median(errors[m]) for m in MEASURES},
            "median_width": {m: statistics.median(width[m]) for m in MEASURES},
            "bytes_over_F": max(byte_ratio)}
        print(json.dumps({rate: results["rates"][f"{rate:g}"]}), flush=True)
    if a.cost:
        pool = out / f"pool-{a.cost_rate:g}"
        if not pool.exists():
            make_pool(pool, gsm, a.shards, a.docs, a.cost_rate, a.hot, seed=int(a.cost_rate * 1e6))
        for d in ("cost-estimate", "cost-full"):
            subprocess.run(["rm", "-rf", str(out / d)], check=True)
        t_est, r = contam("estimate", "--pool", pool, "--out", out / "cost-estimate", "--fraction", a.fraction, *common,
                          home=out / "home-cost")
        t_full, rf = contam("detect", "--pool", pool, "--out", out / "cost-full", *common, home=out / "home-cost")
        stages = [line for line in rf.stdout.splitlines() if line.startswith("seconds ")]
        ref = float(stages[0].split("reference ")[1].split()[0]) if stages else 0.0
        est = json.loads((out / "cost-estimate" / "estimate.json").read_text())
        est_stages = [line for line in r.stdout.splitlines() if line.startswith("seconds ")]
        results["cost"] = {"estimate_wall_s": round(t_est, 1), "full_wall_s": round(t_full, 1),
                           "estimate_stages": est_stages[0] if est_stages else "",
                           "full_stages": stages[0] if stages else "", "full_reference_s": ref,
                           "target_s": round(1.5 * a.fraction * t_full + ref, 1),
                           "bytes_read_over_pool": est["sampled"]["bytes"] / est["pool"]["bytes"],
                           "bytes_target": 1.2 * a.fraction}
        print(json.dumps(results["cost"]), flush=True)
    (out / "calibration.json").write_text(json.dumps(results, indent=1))
    print("\n| rate | true removed | true copies/item | true share | coverage removed | copies | share | "
          "median rel. error removed | bytes / (F x pool) |\n|---|---|---|---|---|---|---|---|---|")
    for rate, r in results["rates"].items():
        t, c, e = r["true"], r["coverage"], r["median_relative_error"]
        print(f"| {rate} | {t['removed_documents']:.0f} | {t['copies_per_item']:.3f} | {t['items_present_share']:.3f} | "
              f"{c['removed_documents']:.2f} | {c['copies_per_item']:.2f} | {c['items_present_share']:.2f} | "
              f"{e['removed_documents']:.2f} | {r['bytes_over_F']:.2f} |")


if __name__ == "__main__":
    main()
