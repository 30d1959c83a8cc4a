"""`contam estimate` as a user runs it: bad input, a fraction of 1 against the full run, a clean pool, a single
shard, a planted pool whose figures are known, and a later `contam detect` reusing the sample's scans."""

from __future__ import annotations

import json
import random

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from contam_assets_tests.e2e.test_cli_data import contam
from contam_assets_tests.support.automation import GSM8K_TEST_ONLY as GSM_TEST_ONLY

CLEAN = "A clean document about gardening, the weather and the price of bread in the village, nothing more. "


def write_pool(folder, gsm, shards: dict[str, int], rate: dict[str, float], docs=12, seed=0) -> dict:
    """Shards of ``docs`` documents; a document quotes a GSM8K test item with its source's ``rate``. The truth."""
    rng = random.Random(seed)
    truth = {"removed": 0, "items": set(), "copies": 0}
    for source, n in shards.items():
        (folder / source).mkdir(parents=True, exist_ok=True)
        for s in range(n):
            rows = []
            for i in range(docs):
                if rng.random() < rate[source]:
                    k = rng.randrange(40)
                    g = gsm[k]
                    rows.append({"id": f"{source}{s}-{i}", "source": source,
                                 "text": f"Worked example.\n{g['question']}\n{g['answer']}\nThat is all."})
                    truth["removed"] += 1
                    truth["items"].add(k)
                    truth["copies"] += 1
                else:
                    rows.append({"id": f"{source}{s}-{i}", "source": source, "text": CLEAN + str(rng.random())})
            (folder / source / f"part-{s:03d}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return truth


@pytest.fixture(scope="module")
def setup(tmp_path_factory, shared_data):
    base = tmp_path_factory.mktemp("estimate")
    (base / "tasks").mkdir()
    (base / "tasks" / "gsm8k.toml").write_text(GSM_TEST_ONLY)
    gsm = [json.loads(line) for line in open(shared_data / "gsm8k_test.jsonl")]
    return base, gsm


def estimate(base, shared_data, pool, out, *extra):
    return contam("estimate", "--pool", pool, "--out", out, "--benchmarks", shared_data, "--tasks-dir", base / "tasks",
                  *extra, env_extra={"DAGSTER_HOME": str(base / "home")})


def test_bad_input_is_one_line_and_exit_2(setup, shared_data, tmp_path):
    base, gsm = setup
    pool = tmp_path / "pool"
    write_pool(pool, gsm, {"web": 1}, {"web": 0.0})
    for bad in ("0", "-0.5", "1.5", "nan"):
        r = estimate(base, shared_data, pool, tmp_path / "out", "--fraction", bad)
        assert r.returncode == 2 and "--fraction" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    (tmp_path / "empty").mkdir()
    r = estimate(base, shared_data, tmp_path / "empty", tmp_path / "out", "--fraction", "0.5")
    assert r.returncode == 2 and "no .json/.jsonl shards" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = estimate(base, shared_data, pool, tmp_path / "out", "--fraction", "0.5", "--tasks", ",")
    assert r.returncode == 2 and "names no task" in r.stderr
    r = estimate(base, shared_data, pool, tmp_path / "out", "--fraction", "0.5", "--tasks", "nosuchtask")
    assert r.returncode == 2 and "unknown task" in r.stderr
    keyed = tmp_path / "keyed"  # the text under `content`: every document would be rejected
    keyed.mkdir()
    (keyed / "p.jsonl").write_text("".join(json.dumps({"content": f"text {i}"}) + "\n" for i in range(20)))
    r = estimate(base, shared_data, keyed, tmp_path / "out_keyed", "--fraction", "0.5")
    assert r.returncode == 2 and "no 'text' in p.jsonl; it has: content — pass --content-key content" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    long_lines = tmp_path / "long_lines"  # one 100 kB line per shard: a 0.05 sample of 512-byte blocks holds no line start
    long_lines.mkdir()
    for i in range(3):
        (long_lines / f"s{i}.jsonl").write_text(json.dumps({"text": "word " * 20000}) + "\n")
    r = estimate(base, shared_data, long_lines, tmp_path / "out_long", "--fraction", "0.05", "--seed", "1")
    assert r.returncode == 2 and r.stderr.strip() == (
        "contam estimate: error: the sample of 29 block(s) of 512 bytes of 3 shard(s) holds no document (every "
        "sampled block lies inside a line longer than a block: pass a larger --fraction or --unit shard)"), r.stderr
    assert not (tmp_path / "out_long" / "estimate.json").exists()  # no estimate of nothing
    broken = tmp_path / "broken"  # not gzip at all: the one sampled shard's stream fails
    broken.mkdir()
    (broken / "a.jsonl.gz").write_bytes(b"Q\x90" + bytes(range(256)) * 4)
    r = estimate(base, shared_data, broken, tmp_path / "out_broken", "--fraction", "1")
    assert r.returncode == 2 and r.stderr.startswith("contam estimate: error: none of the 1 sampled shard(s) could be "
                                                     "scanned: a.jsonl.gz: corrupt at compressed byte"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "out_broken" / "estimate.json").exists()


def test_fraction_one_equals_the_full_run_and_detect_reuses_the_scans(setup, shared_data, tmp_path):
    base, gsm = setup
    pool = tmp_path / "pool"
    truth = write_pool(pool, gsm, {"web": 3, "code": 2}, {"web": 0.1, "code": 0.5}, seed=1)
    out = tmp_path / "out"
    r = estimate(base, shared_data, pool, out, "--fraction", "1", "--by", "source")
    assert r.returncode == 0, r.stderr[-3000:]
    est = json.loads((out / "estimate.json").read_text())
    assert est["sampled"]["units"] == est["pool"]["units"] == 5
    test = est["tasks"]["gsm8k"]["splits"]["test"]
    for m in ("removed_documents", "copies_per_item", "items_present_share", "held_documents"):
        assert test[m]["estimate"] == test[m]["low"] == test[m]["high"], (m, test[m])
    assert test["removed_documents"]["estimate"] == truth["removed"]
    assert test["items_present_share"]["estimate"] == pytest.approx(len(truth["items"]) / 1319, abs=1e-6)
    assert test["copies_per_item"]["estimate"] == pytest.approx(truth["copies"] / 1319, abs=1e-6)
    assert set(est["sources"]) == {"web", "code"}
    assert sum(s["gsm8k"]["removed_documents"]["estimate"] for s in est["sources"].values()) == truth["removed"]
    assert f"gsm8k test: ~{100 * len(truth['items']) / 1319:.0f} % of items present" in r.stdout
    with duckdb.connect(str(out / "contam.duckdb"), read_only=True) as con:
        before = dict(con.execute("select shard, scanned_at from shard_scans").fetchall())
        rows = con.execute("select count(*) from pool_estimates where measure = 'removed_documents'").fetchone()[0]
    assert rows == 1 + 1 + 2  # task, its split, two sources
    assert (out / "tables" / "pool_estimates" / "part-0.parquet").exists() and "Pool estimate from a 1 sample" in (out / "report.html").read_text()
    r = contam("detect", "--pool", pool, "--out", out, "--benchmarks", shared_data, "--tasks-dir", base / "tasks",
               env_extra={"DAGSTER_HOME": str(base / "home")})
    assert r.returncode == 0, r.stderr[-3000:]
    with duckdb.connect(str(out / "contam.duckdb"), read_only=True) as con:
        after = dict(con.execute("select shard, scanned_at from shard_scans").fetchall())
        removed = con.execute("select count(*) from removals").fetchone()[0]
    assert after == before  # every shard the estimate scanned is current: the full run scanned none again
    assert removed == truth["removed"] == test["removed_documents"]["estimate"]


def test_a_clean_pool_and_a_single_shard(setup, shared_data, tmp_path):
    base, gsm = setup
    pool = tmp_path / "clean"
    write_pool(pool, gsm, {"web": 8}, {"web": 0.0}, seed=2)
    r = estimate(base, shared_data, pool, tmp_path / "out", "--fraction", "0.25")
    assert r.returncode == 0, r.stderr[-3000:]
    test = json.loads((tmp_path / "out" / "estimate.json").read_text())["tasks"]["gsm8k"]["splits"]["test"]
    assert test["removed_documents"]["estimate"] == 0 and test["removed_documents"]["low"] == 0
    assert test["removed_documents"]["high"] > 0  # 0 in 2 of 8 shards does not prove the others clean
    assert test["items_present_share"]["low"] == 0
    one = tmp_path / "one"
    truth = write_pool(one, gsm, {"web": 1}, {"web": 0.3}, seed=3)
    (one / "web" / "part-000.jsonl").rename(one / "only.jsonl")
    r = estimate(base, shared_data, one, tmp_path / "out1", "--fraction", "0.026")
    assert r.returncode == 0, r.stderr[-3000:]
    est = json.loads((tmp_path / "out1" / "estimate.json").read_text())
    test = est["tasks"]["gsm8k"]["splits"]["test"]
    assert est["sampled"]["units"] == 1 and test["removed_documents"] == {"estimate": truth["removed"],
                                                                          "low": truth["removed"],
                                                                          "high": truth["removed"]}


def test_a_planted_pool_is_estimated_close_to_its_truth(setup, shared_data, tmp_path):
    """One real sample, then (the pool scanned whole by `contam detect`, reusing the sample's scans) 30 seeded
    samples estimated from the stored rows of their shards, as `pool_estimate` estimates them."""
    from contam_assets.estimate import pool as estimate_pool
    from contam_assets.estimate.design import shard_units, stratified_sample
    from contam_assets.store.pool import list_pool

    base, gsm = setup
    pool = tmp_path / "planted"
    truth = write_pool(pool, gsm, {"web": 30, "code": 10}, {"web": 0.1, "code": 0.3}, seed=4)
    out = tmp_path / "out"
    r = estimate(base, shared_data, pool, out, "--fraction", "0.25", "--seed", "3", "--unit", "shard")
    assert r.returncode == 0, r.stderr[-3000:]
    est = json.loads((out / "estimate.json").read_text())
    rem = est["tasks"]["gsm8k"]["splits"]["test"]["removed_documents"]
    assert est["unit"] == "shard" and est["sampled"]["units"] == 8 + 3 and est["sampled"]["bytes"] <= 1.2 * 11 / 40 * est["pool"]["bytes"]
    assert abs(rem["estimate"] - truth["removed"]) < 0.5 * truth["removed"]
    r = contam("detect", "--pool", pool, "--out", out, "--benchmarks", shared_data, "--tasks-dir", base / "tasks",
               env_extra={"DAGSTER_HOME": str(base / "home")})
    assert r.returncode == 0, r.stderr[-3000:]
    listing = list_pool(pool)
    units = shard_units(listing.shards, listing.paths)
    covered, estimates, share_covered = 0, [], 0
    with duckdb.connect(str(out / "contam.duckdb"), read_only=True) as con:
        for seed in range(30):
            got = estimate_pool.estimate(con, stratified_sample(units, 0.25, seed), replicates=300)
            t = got["tasks"]["gsm8k"]["splits"]["test"]
            covered += t["removed_documents"]["low"] <= truth["removed"] <= t["removed_documents"]["high"]
            share_covered += t["items_present_share"]["low"] <= len(truth["items"]) / 1319 <= t["items_present_share"]["high"]
            estimates.append(t["removed_documents"]["estimate"])
    assert covered >= 25 and share_covered >= 25, (covered, share_covered)
    assert sum(estimates) / len(estimates) == pytest.approx(truth["removed"], rel=0.1)


def test_blocks_of_shards_cover_every_document_once_and_leave_the_full_run_s_tables_alone(setup, shared_data, tmp_path):
    """A pool of few shards is sampled in blocks (auto); at F = 1 the blocks give exactly the full run's figures (every
    line of every shard in one block, whatever the block size); the blocks' rows stay out of OUT's own tables."""
    base, gsm = setup
    pool = tmp_path / "few"
    truth = write_pool(pool, gsm, {"web": 3, "code": 2}, {"web": 0.2, "code": 0.5}, docs=40, seed=5)
    (pool / "web" / "part-000.jsonl").write_text((pool / "web" / "part-000.jsonl").read_text().rstrip("\n"))  # no final newline
    out = tmp_path / "out"
    r = estimate(base, shared_data, pool, out, "--fraction", "1", "--unit", "block")
    assert r.returncode == 0, r.stderr[-3000:]
    est = json.loads((out / "estimate.json").read_text())
    test = est["tasks"]["gsm8k"]["splits"]["test"]
    assert est["unit"] == "block" and est["sampled"]["units"] == est["pool"]["units"] > 5
    assert est["sampled"]["documents"] == est["pool"]["documents"]["estimate"] == 5 * 40
    assert test["removed_documents"] == {"estimate": truth["removed"], "low": truth["removed"], "high": truth["removed"]}
    assert test["copies_per_item"]["estimate"] == pytest.approx(truth["copies"] / 1319, abs=1e-6)
    assert test["items_present_share"]["estimate"] == pytest.approx(len(truth["items"]) / 1319, abs=1e-6)
    assert f"sampled {est['pool']['units']} of {est['pool']['units']} blocks of {est['block_bytes']:,} bytes" in r.stdout
    assert f"of its {est['pool']['units']} blocks of shards" in (out / "report.html").read_text()
    r = estimate(base, shared_data, pool, out, "--fraction", "0.1", "--seed", "2")  # auto: 1 of 5 shards is too few
    assert r.returncode == 0, r.stderr[-3000:]
    est = json.loads((out / "estimate.json").read_text())
    assert est["unit"] == "block" and est["sampled"]["bytes"] <= 1.2 * 0.1 * est["pool"]["bytes"] + 512
    assert est["not_scanned"] == [] and est["sampled"]["units"] >= 5
    with duckdb.connect(str(out / "contam.duckdb"), read_only=True) as con:
        assert con.execute("select count(*) from shard_stats").fetchone()[0] == 0  # OUT's own tables untouched
        assert con.execute("select distinct unit from pool_estimates").fetchall() == [("block",)]
    parquet = tmp_path / "few_parquet"  # the same documents as Parquet: a block is a row group
    for f in pool.rglob("*.jsonl"):
        rows = [json.loads(line) for line in f.read_text().splitlines()]
        (parquet / f.parent.name).mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), parquet / f.parent.name / (f.stem + ".parquet"), row_group_size=8)
    r = estimate(base, shared_data, parquet, tmp_path / "out_parquet", "--fraction", "1", "--unit", "block")
    assert r.returncode == 0, r.stderr[-3000:]
    est = json.loads((tmp_path / "out_parquet" / "estimate.json").read_text())
    assert est["sampled"]["units"] == 5 * 40 // 8 and est["sampled"]["documents"] == 5 * 40
    assert est["tasks"]["gsm8k"]["splits"]["test"]["removed_documents"]["estimate"] == truth["removed"]


def test_the_sensor_asks_for_a_new_estimate_when_the_pool_changes(setup, tmp_path, monkeypatch):
    import dagster as dg

    from contam_assets.defs.data.estimate import pool_estimate_sensor
    from contam_assets.defs.resources import ContamSettings

    base, gsm = setup
    pool = tmp_path / "pool"
    write_pool(pool, gsm, {"web": 2}, {"web": 0.0})
    settings = ContamSettings(out_dir=str(tmp_path / "out"), pool_dir=str(pool))
    monkeypatch.setenv("CONTAM_ESTIMATE_FRACTION", "0.1")
    with dg.instance_for_test() as instance:
        first = pool_estimate_sensor(dg.build_sensor_context(instance=instance, resources={"contam_settings": settings}))
        assert len(first.run_requests) == 1
        assert first.run_requests[0].run_config == {"ops": {"pool_estimate": {"config": {"fraction": 0.1, "seed": 0}}}}
        again = pool_estimate_sensor(dg.build_sensor_context(instance=instance, cursor=first.cursor,
                                                             resources={"contam_settings": settings}))
        assert not again.run_requests and again.skip_reason
        write_pool(pool, gsm, {"web": 3}, {"web": 0.0})  # the pool grew by a shard
        grown = pool_estimate_sensor(dg.build_sensor_context(instance=instance, cursor=first.cursor,
                                                             resources={"contam_settings": settings}))
        assert len(grown.run_requests) == 1 and grown.run_requests[0].run_key != first.run_requests[0].run_key


def test_the_docs_commands_run_as_written(shared_data, tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    from contam_assets_tests.support.doc_commands import ROOT, command

    (tmp_path / "benchmarks").symlink_to(ROOT / "benchmarks")
    (tmp_path / "data").symlink_to(shared_data)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "DAGSTER_HOME": str(tmp_path / "home")}
    for start in ("python benchmarks/estimate_calibration.py", "contam estimate"):
        r = subprocess.run(["bash", "-c", command("docs/estimate.md", start)], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=1200)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "gsm8k test: ~" in r.stdout and "% of items present" in r.stdout
    est = json.loads((tmp_path / "estimate" / "estimate.json").read_text())
    # 4 of the 40 shards would be too few: blocks of every shard, a tenth of them
    assert est["unit"] == "block" and est["sampled"]["units"] > 3 + 1 and "web" in est["sources"]
    assert est["sampled"]["bytes"] <= 1.2 * 0.1 * est["pool"]["bytes"]
    assert json.loads((tmp_path / "calib" / "calibration.json").read_text())["rates"]["0.05"]["coverage"]
