"""A mix run over several partitions (a ranged write_mix run: a backfill's single run, `contam detect` mixing in
ranged runs) in which one shard's mix cannot be written: the partitions whose mix finished are materialized with
their own figures, the failed one is not (the next run retries only it), and the run fails with its one-line reason;
a run of that one partition materializes nothing, as before.  `contam detect` says the same either way."""

from __future__ import annotations

import re

import dagster as dg
import pytest

from contam_assets.defs.data import runs
from contam_assets.defs.launch import StepFailed, data_definitions, execute
from contam_assets.store.pool import shard_path
from contam_assets_tests.support.automation import (
    TEMP_NAME,
    contam_detect,
    instance,
    make_tasks_dir,
    referenced_pool,
    scan,
    settings,
    table,
    write_pool,
)

SHARDS = ["part-000.jsonl", "part-001.jsonl", "part-002.jsonl"]
KEY = dg.AssetKey("decontaminated_mix")


def _block(s) -> None:
    """part-001.jsonl's mix file path is taken by a folder: its mix cannot be written, the others' can."""
    (shard_path(s.out_path / "mix", SHARDS[1]) / "taken").mkdir(parents=True)


@pytest.fixture
def scanned(tmp_path, shared_data, monkeypatch):
    """Three partitions scanned and their removals applied; part-001.jsonl's mix path blocked."""
    s, inst = referenced_pool(tmp_path, shared_data, monkeypatch)
    scan(s, inst, SHARDS)
    execute(data_definitions(s), runs.job_request("apply_reviews"), inst, log=lambda _: None)
    _block(s)
    return s, inst


def test_a_ranged_mix_that_fails_partway_materializes_the_partitions_that_finished(scanned):
    s, inst = scanned
    defs = data_definitions(s)
    with pytest.raises(StepFailed) as exc:
        execute(defs, runs.mix_request(SHARDS), inst, log=lambda _: None)
    why = str(exc.value)
    assert why.startswith("mix of 1 shard(s) not written: part-001.jsonl: ") and "\n" not in why
    run = inst.get_runs(limit=1)[0]
    assert run.status == dg.DagsterRunStatus.FAILURE and run.tags.get("dagster/asset_partition_range_start") == SHARDS[0]
    assert inst.get_materialized_partitions(KEY) == {SHARDS[0], SHARDS[2]}
    assert set(inst.get_dynamic_partitions("shards")) - inst.get_materialized_partitions(KEY) == {SHARDS[1]}
    # the good mixes are on disk, recorded; the failed one is recorded as the mix step's error
    mix = s.out_path / "mix"
    assert shard_path(mix, SHARDS[0]).is_file() and shard_path(mix, SHARDS[2]).is_file()
    assert shard_path(mix, SHARDS[1]).is_dir()
    written = dict(table(s, "select shard, written from mix_stats").iter_rows())
    assert set(written) == {SHARDS[0], SHARDS[2]} and all(n > 0 for n in written.values())
    assert table(s, "select shard, step from shard_errors").rows() == [(SHARDS[1], "mix")]
    for shard in (SHARDS[0], SHARDS[2]):  # each partition's own figures, as a run that succeeds gives them
        [rec] = inst.fetch_materializations(dg.AssetRecordsFilter(asset_key=KEY, asset_partitions=[shard]), limit=1).records
        meta = {k: v.value for k, v in rec.asset_materialization.metadata.items()}
        assert meta["documents_written"] == written[shard] and meta["status"] == "ok" and meta["unchanged"] is False
        assert meta["path"] == str(shard_path(mix, shard))
        assert meta["run_failed_partway"] == why[:500]
        assert rec.run_id == run.run_id
    # the next run of the failed partition alone, once its path is free, writes it; the others stay as they were
    shard_path(mix, SHARDS[1]).joinpath("taken").rmdir()
    shard_path(mix, SHARDS[1]).rmdir()
    execute(defs, runs.mix_request([SHARDS[1]]), inst, log=lambda _: None)
    assert inst.get_materialized_partitions(KEY) == set(SHARDS)
    assert shard_path(mix, SHARDS[1]).is_file() and table(s, "select count(*) n from shard_errors")["n"][0] == 0


def test_a_mix_run_of_one_partition_that_fails_materializes_nothing(scanned):
    s, inst = scanned
    with pytest.raises(StepFailed) as exc:
        execute(data_definitions(s), runs.mix_request([SHARDS[1]]), inst, log=lambda _: None)
    assert str(exc.value).startswith("mix of 1 shard(s) not written: part-001.jsonl: ")
    assert inst.get_materialized_partitions(KEY) == set()
    assert table(s, "select shard, step from shard_errors").rows() == [(SHARDS[1], "mix")]


def _said(printed: str, out) -> list[str]:
    """What `contam detect` printed, without times and the output folder's path."""
    text = re.sub(TEMP_NAME, ".tmp-X", printed.replace(str(out), "OUT"))
    return [line for line in text.splitlines() if not line.startswith("seconds ")]


def test_contam_detect_says_the_same_whether_it_mixes_ranged_or_per_shard(tmp_path, shared_data, monkeypatch):
    """The mix of part-001.jsonl fails in both: the ranged mix run materializes the others, and the summary `contam
    detect` prints (read from the tables) names the failed shard and counts the same files as a run per shard does."""
    monkeypatch.setenv("CONTAM_SCAN_WORKERS", "1")
    pool, tasks = tmp_path / "pool", make_tasks_dir(tmp_path / "tasks")
    write_pool(pool, shared_data, n_shards=3, docs=12)
    said = {}
    for how in ("ranged", "per-shard"):
        monkeypatch.setenv("CONTAM_DETECT_RUNS", how)
        s = settings(tmp_path / how, pool, tasks, shared_data)
        _block(s)
        rc, printed = contam_detect(s, tmp_path / f"home-{how}")
        assert rc == 1, printed[-3000:]
        lines = printed.splitlines()
        assert any(line.startswith("FAILED part-001.jsonl") for line in lines), printed[-3000:]
        assert "3 pool file(s) listed, 2 ok, 0 incomplete, 1 failed, 0 skipped" in lines, printed[-3000:]
        summary = lines[next(i for i, line in enumerate(lines) if "pool file(s) listed" in line):]
        said[how] = _said("\n".join(summary), s.out_path)
        report = (s.out_path / "report.html").read_text()
        section = report[report.index("shards that failed a step"):]
        assert "part-001.jsonl" in section[:2000] and "mix" in section[:2000]
        # ranged (one run over the three) or a run each: the two whose mix finished are materialized
        assert instance(tmp_path / f"home-{how}").get_materialized_partitions(KEY) == {SHARDS[0], SHARDS[2]}, how
    assert said["ranged"] == said["per-shard"]
