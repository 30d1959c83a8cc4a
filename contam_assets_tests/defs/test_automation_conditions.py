"""Declarative automation of the data side, evaluated tick by tick on a real instance and real scans.

removals follow new scans, report and mix follow new removals (the mix only for scanned
shards), a failed blocking check (shard_accounting) stops the propagation, and nothing is requested twice.
"""

from __future__ import annotations

import dagster as dg
import pytest

from contam_assets import store
from contam_assets.defs.data import assets as A
from contam_assets.defs.data import checks as C
from contam_assets.runner import DATA_ASSETS, DATA_CHECKS
from contam_assets_tests.support.automation import instance, make_tasks_dir, resources, settings, write_pool

# dg.evaluate_automation_conditions (Dagster's own tester) selects with a beta parameter; our definitions do not
pytestmark = pytest.mark.filterwarnings("ignore:Parameter `include_sources`:dagster._utils.warnings.BetaWarning")

SHARDS = ["part-000.jsonl", "part-001.jsonl", "part-002.jsonl"]
WATCHED = ("removals", "removal_report", "decontaminated_mix", "shard_matches", "ngram_index")


def _requested(result) -> dict:
    return {k: sorted(p or "" for p in result.get_requested_partitions(dg.AssetKey(k))) for k in WATCHED
            if result.get_num_requested(dg.AssetKey(k))}


@pytest.fixture(scope="module")
def world(tmp_path_factory, shared_data):
    root = tmp_path_factory.mktemp("automation")
    pool, tasks = root / "pool", make_tasks_dir(root / "tasks")
    write_pool(pool, shared_data, n_shards=3, docs=20)
    s = settings(root / "out", pool, tasks, shared_data)
    inst = instance(root / "home")
    defs = dg.Definitions(assets=DATA_ASSETS, asset_checks=DATA_CHECKS, resources=resources(s))
    return dict(s=s, inst=inst, defs=defs)


def test_scans_then_removals_then_report_and_mix_of_scanned_shards(world):
    s, inst, defs = world["s"], world["inst"], world["defs"]
    tick = dg.evaluate_automation_conditions(defs=defs, instance=inst)
    assert tick.total_requested == 0  # nothing scanned: nothing moves (no removals of an empty pool)
    r = dg.materialize([A.task_registry, A.reference_set, A.ngram_index], resources=resources(s), instance=inst)
    assert r.success
    inst.add_dynamic_partitions("shards", SHARDS)
    tick = dg.evaluate_automation_conditions(defs=defs, instance=inst, cursor=tick.cursor)
    assert _requested(tick) == {}  # the sensors start scans, not automation
    for shard in SHARDS[:2]:
        assert dg.materialize([A.shard_matches, C.shard_accounting, C.shard_conservation], partition_key=shard, resources=resources(s),
                              instance=inst).success
    tick = dg.evaluate_automation_conditions(defs=defs, instance=inst, cursor=tick.cursor)
    assert _requested(tick) == {"removals": [""]}
    again = dg.evaluate_automation_conditions(defs=defs, instance=inst, cursor=tick.cursor)
    assert _requested(again) == {}  # handled: not requested twice
    assert dg.materialize([A.removals, C.removals_consistent, C.scan_state_current], selection=[A.removals],
                          resources=resources(s), instance=inst).success
    tick = dg.evaluate_automation_conditions(defs=defs, instance=inst, cursor=again.cursor)
    # the mix of the never-scanned shard is not requested (it would fail): its shard_matches partition is missing
    assert _requested(tick) == {"removal_report": [""], "decontaminated_mix": SHARDS[:2]}
    world["cursor"] = tick.cursor


def test_a_failed_blocking_check_stops_the_removals(world):
    s, inst, defs = world["s"], world["inst"], world["defs"]
    assert dg.materialize([A.shard_matches, C.shard_accounting, C.shard_conservation], partition_key=SHARDS[2], resources=resources(s),
                          instance=inst).success
    with store.connect(s.db_path) as con:  # a scan whose counts no longer add up
        con.execute("update shard_stats set read = read + 1 where shard = ?", [SHARDS[2]])
    check = dg.materialize([A.shard_matches, C.shard_accounting], selection=dg.AssetSelection.checks(C.shard_accounting),
                           resources=resources(s), instance=inst, raise_on_error=False)
    assert [c.passed for c in check.get_asset_check_evaluations()] == [False]
    tick = dg.evaluate_automation_conditions(defs=defs, instance=inst, cursor=world["cursor"])
    assert "removals" not in _requested(tick)
    with store.connect(s.db_path) as con:
        con.execute("update shard_stats set read = read - 1 where shard = ?", [SHARDS[2]])
    check = dg.materialize([A.shard_matches, C.shard_accounting], selection=dg.AssetSelection.checks(C.shard_accounting),
                           resources=resources(s), instance=inst)
    assert [c.passed for c in check.get_asset_check_evaluations()] == [True]
    tick = dg.evaluate_automation_conditions(defs=defs, instance=inst, cursor=tick.cursor)
    assert "removals" in _requested(tick)


def test_scan_state_check_is_not_part_of_a_shard_run(world):
    s, inst = world["s"], world["inst"]
    r = dg.materialize(DATA_ASSETS + DATA_CHECKS, selection=dg.AssetSelection.assets(A.shard_matches),
                       partition_key=SHARDS[0], resources=resources(s), instance=inst)
    assert r.success
    assert {c.check_name for c in r.get_asset_check_evaluations()} == {"shard_accounting", "shard_conservation"}
