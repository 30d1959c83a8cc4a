"""The data-side Dagster graph end to end: tables, re-runs, bad input, review decisions, concurrency, mix."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import dagster as dg
import pytest
import zstandard

from contam_assets import store
from contam_assets.defs.data import assets as A
from contam_assets.defs.data import checks as C
from contam_assets.defs.data.engine import engine_from_env
from contam_assets.defs.partitions import shards_partitions
from contam_assets.defs.resources import ContamDB, ContamSettings
from contam_assets.demo import HostText
from contam_assets.runner import run_apply, run_detect
from contam_assets.store.artifacts import count_lines

TASKS = "gsm8k,humaneval"


def _jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(l) for l in fh]


def write_pool(pool: Path, shared: Path) -> dict:
    """Three shards (plain, gz, zst) with planted items and bad lines; returns the truth."""
    gsm = _jsonl(shared / "gsm8k_test.jsonl")
    he = _jsonl(shared / "HumanEval.jsonl.gz")
    host = HostText(5)
    truth = {"flag": {}, "review": {}, "bad": {}}
    shards = {"a/clean.jsonl": [], "b/planted.jsonl.gz": [], "c/code.jsonl.zst": []}
    for i in range(40):
        shards["a/clean.jsonl"].append(json.dumps({"id": f"a{i}", "source": "web", "text": host.document()}).encode())
    for i in range(30):
        text = host.document()
        if i % 5 == 0:
            g = gsm[i]
            text = f"{host.paragraph()}\n\n{g['question']}\n{g['answer']}\n\n{host.paragraph()}"
            truth["flag"][("b/planted.jsonl.gz", i)] = ("gsm8k", "test", i)
        shards["b/planted.jsonl.gz"].append(json.dumps({"id": f"b{i}", "source": "math", "text": text}).encode())
    for i in range(20):
        text = host.code_document()
        if i in (11, 12):
            text += "\nsnippet = " + json.dumps({"completion": he[i]["canonical_solution"]})
            truth["review"][("c/code.jsonl.zst", i)] = ("humaneval_solution", "test", i)
        shards["c/code.jsonl.zst"].append(json.dumps({"id": f"c{i}", "source": "code", "text": text}).encode())
    # bad input: every kind is counted, none crashes the shard
    bad = [b'{"id": "x", "text": "unterminated', b'{"id": "y", "text": "caf\xe9"}', b'{"id": "z", "body": "no text key"}',
           b'{"id": "w", "text": ""}', b'["not", "an", "object"]', json.dumps({"id": "big", "text": "word " * (10 * 1024 * 1024)}).encode()]
    start = len(shards["a/clean.jsonl"])
    shards["a/clean.jsonl"].extend(bad)
    truth["bad"] = {("a/clean.jsonl", start + k) for k in range(len(bad))}
    for name, lines in shards.items():
        path = pool / name
        path.parent.mkdir(parents=True, exist_ok=True)
        data = b"\n".join(lines) + b"\n"
        if name.endswith(".gz"):
            data = gzip.compress(data)
        elif name.endswith(".zst"):
            data = zstandard.ZstdCompressor().compress(data)
        path.write_bytes(data)
    return truth


@pytest.fixture(scope="module")
def detected(tmp_path_factory, shared_data):
    root = tmp_path_factory.mktemp("graph")
    pool, out = root / "pool", root / "out"
    truth = write_pool(pool, shared_data)
    settings = ContamSettings(out_dir=str(out), pool_dir=str(pool), benchmarks_dir=str(shared_data), tasks=TASKS)
    home = root / "dagster_home"
    home.mkdir()
    instance = dg.DagsterInstance.local_temp(str(home))
    summary = run_detect(settings, instance, log=lambda m: None)
    return dict(settings=settings, instance=instance, truth=truth, summary=summary, pool=pool, out=out)


def q(settings, sql, params=()):
    with store.connect(settings.db_path, read_only=True) as con:
        return con.execute(sql, list(params)).fetchall()


def test_tables_hold_flagged_matches_with_identity(detected):
    s, truth = detected["settings"], detected["truth"]
    rows = q(s, "select shard, line, task, split, instance_index, flagged, needs_review from matches where flagged and not needs_review")
    got = {(r[0], r[1]): (r[2], r[3], r[4]) for r in rows if r[2] == "gsm8k"}
    assert got == truth["flag"]
    removed = {(r[0], r[1]) for r in q(s, "select shard, line from removals")}
    assert removed == set(truth["flag"])  # derived-suite matches wait for review


def test_counts_conserve_and_bad_input_is_counted(detected):
    s, truth = detected["settings"], detected["truth"]
    rows = q(s, "select shard, read, kept, removed, rejected, reject_reasons from shard_stats order by shard")
    by = {r[0]: r for r in rows}
    for shard, read, kept, removed, rejected, _ in rows:
        assert read == kept + removed + rejected
    assert by["a/clean.jsonl"][1] == 46 and by["a/clean.jsonl"][4] == 6
    reasons = json.loads(by["a/clean.jsonl"][5])
    assert set(reasons) == {"malformed_json", "not_utf8", "missing_content_key", "empty_text", "not_an_object", "too_large"}
    rej = [json.loads(l) for l in (detected["out"] / "rejected" / "a/clean.jsonl.jsonl").read_text().splitlines()]
    assert {("a/clean.jsonl", r["line"]) for r in rej} == truth["bad"]
    big = next(r for r in rej if r["reason"].startswith("too_large"))
    # counted with its size while streaming, never held whole: the rejected file keeps its first KiB
    assert int(big["reason"].split("(")[1].split()[0]) > 50 * 1024 * 1024 and len(big["raw"]) == 1024


def test_derived_suite_matches_need_review(detected):
    s, truth = detected["settings"], detected["truth"]
    rows = q(s, "select shard, line, suite, split, instance_index from matches where needs_review and flagged and suite = 'humaneval_solution'")
    assert {(r[0], r[1]): (r[2], r[3], r[4]) for r in rows} == truth["review"]
    pending = q(s, "select sum(pending_review) from shard_stats")[0][0]
    assert pending == len(truth["review"])


def test_report_and_mix(detected):
    out, s, truth = detected["out"], detected["settings"], detected["truth"]
    page = (out / "report.html").read_text()
    assert "Top matches" in page and "gsm8k" in page and "<mark" in page and "data:image/png;base64," in page
    for shard, read, removed, rejected in q(s, "select shard, read, removed, rejected from shard_stats"):
        assert count_lines(out / "mix" / shard) == read - removed - rejected
    with gzip.open(out / "mix" / "b/planted.jsonl.gz", "rt") as fh:
        ids = {json.loads(l)["id"] for l in fh}
    assert not ids & {f"b{i}" for (_, i) in truth["flag"]}
    assert len(ids) == 30 - len(truth["flag"])


def test_rematerializing_a_shard_gives_the_same_rows(detected):
    s, inst = detected["settings"], detected["instance"]
    before = q(s, "select * from matches order by match_id")
    res = {"contam_settings": s, "contam_db": ContamDB(path=str(s.db_path)), "contam_scan_engine": engine_from_env()}
    for _ in range(2):
        r = dg.materialize([A.shard_matches, C.shard_conservation], partition_key="b/planted.jsonl.gz", resources=res, instance=inst)
        assert r.success
        checks = r.get_asset_check_evaluations()
        assert checks and all(c.passed for c in checks)
    after = q(s, "select * from matches order by match_id")
    assert before == after
    assert q(s, "select count(*), count(distinct match_id) from matches")[0] == (len(before), len(before))


def test_review_decision_applies_to_removals_and_mix(detected, tmp_path, monkeypatch):
    """Applied by ranged mix runs over 2 workers, then by a run per shard (CONTAM_SCAN_WORKERS=1)."""
    s, inst, truth, out = detected["settings"], detected["instance"], detected["truth"], detected["out"]
    from contam_assets.cli import main

    (shard, line), _ = next(iter(sorted(truth["review"].items())))
    mid = q(s, "select match_id from matches where shard = ? and line = ? and needs_review and flagged", [shard, line])[0][0]
    assert main(["review", str(out), "--accept", mid, "--reviewer", "test"]) == 0
    assert main(["review", str(out), "--accept", "nope"]) == 2
    monkeypatch.setenv("CONTAM_SCAN_WORKERS", "2")
    runs = len(inst.get_runs())
    run_apply(s, inst, log=lambda m: None)
    assert len(inst.get_runs()) == runs + 3  # apply_reviews, one write_mix over the 3 shards, publish_outputs
    removed = {(r[0], r[1]) for r in q(s, "select shard, line from removals")}
    assert (shard, line) in removed
    other = [k for k in truth["review"] if k != (shard, line)][0]
    assert other not in removed
    with zstandard.open(out / "mix" / "c/code.jsonl.zst", "rt") as fh:
        ids = {json.loads(l)["id"] for l in fh}
    assert f"c{line}" not in ids and f"c{other[1]}" in ids
    # reject it again: the document comes back
    assert main(["review", str(out), "--reject", mid]) == 0
    monkeypatch.setenv("CONTAM_SCAN_WORKERS", "1")
    runs = len(inst.get_runs())
    run_apply(s, inst, log=lambda m: None)
    assert len(inst.get_runs()) == runs + 5  # apply_reviews, a write_mix per shard, publish_outputs
    assert (shard, line) not in {(r[0], r[1]) for r in q(s, "select shard, line from removals")}
    with zstandard.open(out / "mix" / "c/code.jsonl.zst", "rt") as fh:
        assert f"c{line}" in {json.loads(l)["id"] for l in fh}


def test_two_shard_runs_in_parallel_processes_lose_no_rows(detected, tmp_path):
    s = detected["settings"]
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").touch()
    script = textwrap.dedent(f"""
        import sys, dagster as dg
        from contam_assets.defs.data import assets as A
        from contam_assets.defs.data.engine import engine_from_env
        from contam_assets.defs.resources import ContamDB, ContamSettings
        s = ContamSettings(out_dir={s.out_dir!r}, pool_dir={s.pool_dir!r}, benchmarks_dir={s.benchmarks_dir!r}, tasks={s.tasks!r})
        inst = dg.DagsterInstance.get()
        r = dg.materialize([A.shard_matches], partition_key=sys.argv[1], instance=inst,
                           resources={{"contam_settings": s, "contam_db": ContamDB(path={str(s.db_path)!r}),
                                      "contam_scan_engine": engine_from_env()}})
        sys.exit(0 if r.success else 1)
    """)
    before = q(s, "select shard, count(*) from matches group by 1 order by 1")
    env = {**__import__("os").environ, "DAGSTER_HOME": str(home)}
    with dg.DagsterInstance.local_temp(str(home)) as inst:
        inst.add_dynamic_partitions(shards_partitions.name, ["a/clean.jsonl", "b/planted.jsonl.gz", "c/code.jsonl.zst"])
    procs = [subprocess.Popen([sys.executable, "-c", script, shard], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for shard in ("b/planted.jsonl.gz", "c/code.jsonl.zst", "a/clean.jsonl")]
    outs = [p.communicate(timeout=600)[0].decode() for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert q(s, "select shard, count(*) from matches group by 1 order by 1") == before
    assert q(s, "select count(*) from shard_stats")[0][0] == 3


def test_missing_shard_fails_its_partition_with_a_clear_message(detected):
    s, inst = detected["settings"], detected["instance"]
    inst.add_dynamic_partitions(shards_partitions.name, ["gone.jsonl"])
    r = dg.materialize([A.shard_matches], partition_key="gone.jsonl", instance=inst, raise_on_error=False,
                       resources={"contam_settings": s, "contam_db": ContamDB(path=str(s.db_path)),
                                  "contam_scan_engine": engine_from_env()})
    assert not r.success
    msgs = [e.step_failure_data.error.message for e in r.all_events if e.event_type_value == "STEP_FAILURE"]
    assert any("not found in the pool" in m for m in msgs)


def test_definitions_load_with_the_whole_graph():
    from contam_assets.definitions import build_definitions

    keys = {k.to_user_string() for k in build_definitions().get_repository_def().asset_graph.get_all_asset_keys()}
    assert {"task_registry", "reference_set", "ngram_index", "shard_matches", "removals", "removal_report",
            "decontaminated_mix"} <= keys


def test_new_shards_sensor_adds_partitions_once(detected, tmp_path):
    s = detected["settings"]
    from contam_assets.defs.data.sensors import new_shards_sensor

    with dg.instance_for_test() as inst:
        ctx = dg.build_sensor_context(instance=inst, resources={"contam_settings": s})
        r1 = new_shards_sensor(ctx)
        assert len(r1.run_requests) == 3
        assert r1.dynamic_partitions_requests[0].partition_keys == ["a/clean.jsonl", "b/planted.jsonl.gz", "c/code.jsonl.zst"]
        inst.add_dynamic_partitions(shards_partitions.name, r1.dynamic_partitions_requests[0].partition_keys)
        r2 = new_shards_sensor(dg.build_sensor_context(instance=inst, cursor=r1.cursor, resources={"contam_settings": s}))
        assert r2.run_requests == [] and not r2.dynamic_partitions_requests


def test_a_dagster_home_shared_by_two_pools_scans_only_this_pools_shards(tmp_path, shared_data, monkeypatch):
    """`contam detect` with a DAGSTER_HOME that already holds another pool's shard partitions: its ranged runs
    cover only this pool's shards (two stretches here, b and d around the other pool's c), every one of them is
    scanned and mixed, and the other pool's partitions are left alone."""
    monkeypatch.setenv("CONTAM_DETECT_RUNS", "ranged")
    monkeypatch.setenv("CONTAM_SCAN_WORKERS", "1")
    gsm = _jsonl(shared_data / "gsm8k_test.jsonl")
    host = HostText(11)

    def pool(root: Path, names: list[str], planted: str) -> Path:
        root.mkdir()
        for n in names:
            docs = [host.document() for _ in range(6)]
            if n == planted:
                docs[2] = f"{host.paragraph()}\n\n{gsm[3]['question']}\n{gsm[3]['answer']}"
            (root / n).write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")
        return root

    home = tmp_path / "dagster_home"
    home.mkdir()
    instance = dg.DagsterInstance.local_temp(str(home))
    first = ContamSettings(out_dir=str(tmp_path / "out1"), pool_dir=str(pool(tmp_path / "pool1", ["a.jsonl", "b.jsonl", "c.jsonl"], "a.jsonl")),
                           benchmarks_dir=str(shared_data), tasks="gsm8k")
    assert run_detect(first, instance, log=lambda m: None)["failed"] == {}
    second = ContamSettings(out_dir=str(tmp_path / "out2"), pool_dir=str(pool(tmp_path / "pool2", ["b.jsonl", "d.jsonl"], "d.jsonl")),
                            benchmarks_dir=str(shared_data), tasks="gsm8k")
    lines: list[str] = []
    summary = run_detect(second, instance, log=lines.append)
    assert summary["failed"] == {} and summary["shards"] == 2 and summary["removed"] == 1, (summary, lines)
    assert "scan 2 shard(s) on 1 processes" in lines
    assert q(second, "select shard, read, removed from shard_stats order by shard") == [("b.jsonl", 6, 0), ("d.jsonl", 6, 1)]
    assert q(second, "select shard, line from removals") == [("d.jsonl", 2)]
    assert sorted(p.name for p in (second.out_path / "mix").iterdir()) == ["b.jsonl", "d.jsonl"]
    assert count_lines(second.out_path / "mix" / "d.jsonl") == 5
    assert instance.get_dynamic_partitions(shards_partitions.name) == ["a.jsonl", "b.jsonl", "c.jsonl", "d.jsonl"]
    # a shard with no partition (another pool's run retired it meanwhile) is a failure, not a silent skip
    from contam_assets.runner import data_definitions, scan_range

    lines.clear()
    failed = scan_range(second, data_definitions(second), instance, 1, ["b.jsonl", "zz.jsonl"], lines.append)
    assert failed == {"zz.jsonl": "no partition in the Dagster instance (removed while this run ran?)"}, lines
