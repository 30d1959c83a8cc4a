"""A scan run over several partitions (a ranged run: a backfill's single run, `contam detect` on several processes)
in which one shard fails: the partitions whose files all finished are materialized with their own figures, the
failed one is not, and the run fails with its one-line reason; the good shards' rows are in the tables."""

from __future__ import annotations

import dagster as dg
import pytest

from contam_assets.defs.data import runs
from contam_assets.defs.launch import StepFailed, data_definitions, data_side, execute
from contam_assets.store.artifacts import rejected_path
from contam_assets_tests.support.automation import (
    referenced_pool,
    table,
)

SHARDS = ["part-000.jsonl", "part-001.jsonl", "part-002.jsonl"]
KEY = dg.AssetKey("shard_matches")


@pytest.fixture
def broken(tmp_path, shared_data, monkeypatch):
    """part-001.jsonl has a line that is no JSON, and its rejected-lines file is taken by a folder: writing its rows
    raises, for this shard only."""
    s, inst = referenced_pool(tmp_path, shared_data, monkeypatch)
    with open(s.pool_path / SHARDS[1], "ab") as fh:
        fh.write(b"{not json\n")
    inst.add_dynamic_partitions("shards", SHARDS)
    (rejected_path(s.out_path, SHARDS[1]) / "taken").mkdir(parents=True)
    return s, inst


def _requested(auto: dg.Definitions, assets: list, inst, cursor):
    tick = dg.evaluate_automation_conditions(defs=auto, instance=inst, cursor=cursor)
    return {a.key.to_user_string(): tick.get_requested_partitions(a.key) for a in assets if tick.get_num_requested(a.key)}, tick.cursor


@pytest.mark.filterwarnings("ignore:Parameter `include_sources`:dagster._utils.warnings.BetaWarning")
def test_a_ranged_scan_that_fails_partway_materializes_the_partitions_that_finished(broken):
    s, inst = broken
    defs = data_definitions(s)
    assets, checks = data_side(defs)
    auto = dg.Definitions(assets=assets, asset_checks=checks, resources=defs.resources)
    cursor = dg.evaluate_automation_conditions(defs=auto, instance=inst).cursor
    with pytest.raises(StepFailed) as exc:
        execute(defs, runs.scan_request(SHARDS, listed=True), inst, log=lambda _: None)
    assert str(exc.value).startswith("1 of 3 shard(s) failed (the others were written): part-001.jsonl: ")
    assert "\n" not in str(exc.value)
    run = inst.get_runs(limit=1)[0]
    assert run.status == dg.DagsterRunStatus.FAILURE
    assert inst.get_materialized_partitions(KEY) == {SHARDS[0], SHARDS[2]}
    # only the failed partition is left for a backfill's retry, the sensors and the next run
    assert set(inst.get_dynamic_partitions("shards")) - inst.get_materialized_partitions(KEY) == {SHARDS[1]}
    status = dict(table(s, "select shard, status from shard_stats").iter_rows())
    assert status == {SHARDS[0]: "ok", SHARDS[1]: "failed", SHARDS[2]: "ok"}
    read = dict(table(s, "select shard, read from shard_stats").iter_rows())
    for shard in (SHARDS[0], SHARDS[2]):  # each partition's own figures, as a run that succeeds gives them
        [rec] = inst.fetch_materializations(dg.AssetRecordsFilter(asset_key=KEY, asset_partitions=[shard]), limit=1).records
        meta = rec.asset_materialization.metadata
        assert meta["documents_read"].value == read[shard] == 12 and meta["status"].value == "ok"
        assert meta["run_failed_partway"].value == str(exc.value)[:500]
        assert rec.run_id == run.run_id
    assert table(s, "select count(*) n from matches where shard in ('part-000.jsonl', 'part-002.jsonl')")["n"][0] > 0
    # the blocking shard_accounting check did not run in the failed run: the removals' automation waits for it, and
    # moves once it passed over the tables that hold the finished partitions' rows
    wanted, cursor = _requested(auto, assets, inst, cursor)
    assert wanted == {}
    keys = [k for c in checks for k in c.check_keys if k.name == "shard_accounting"]
    assert dg.materialize(assets + checks, selection=dg.AssetSelection.checks(*keys), resources=auto.resources,
                          instance=inst).success
    assert _requested(auto, assets, inst, cursor)[0] == {"removals": {None}}


def test_a_run_of_one_partition_that_fails_materializes_nothing(broken):
    s, inst = broken
    with pytest.raises(StepFailed):
        execute(data_definitions(s), runs.scan_request([SHARDS[1]], listed=True), inst, log=lambda _: None)
    assert inst.get_materialized_partitions(KEY) == set()
