"""`mix_conservation` checks the shards of its own run (a run per shard over a backfill must not re-read every mix
file each time), and a check run without partitions checks every shard: a tampered mix file is found by the run
that covers it, and only by that one."""

from __future__ import annotations

import dagster as dg
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from contam_assets.defs.data import assets as A
from contam_assets.defs.data import outputs as O
from contam_assets.defs.resources import ContamDB
from contam_assets.store.pool import shard_path
from contam_assets_tests.support.automation import (
    referenced_pool,
    resources,
    scan,
)

SHARDS = ["part-000.jsonl", "part-001.jsonl", "part-002.jsonl"]


def _check(result) -> dict:
    [ev] = result.get_asset_check_evaluations()
    return {"passed": ev.passed, **{k: v.value for k, v in ev.metadata.items()}}


def _mix(s, inst, **kw):
    return dg.materialize([O.decontaminated_mix, O.mix_conservation], instance=inst, resources=resources(s),
                          raise_on_error=False, **kw)


def test_mix_conservation_checks_its_runs_shards(tmp_path, shared_data, monkeypatch):
    s, inst = referenced_pool(tmp_path, shared_data, monkeypatch, docs=18)
    scan(s, inst, SHARDS)
    assert dg.materialize([A.removals], instance=inst, resources=resources(s)).success

    # a run per shard: each check reads its own shard's file only
    for k, shard in enumerate(SHARDS):
        c = _check(_mix(s, inst, partition_key=shard))
        assert c == {**c, "passed": True, "shards_checked": 1, "scope": "this run's 1 partition(s)", "violations": 0}, (k, c)

    # a shard's mix file gains a line behind the tables' back
    victim = shard_path(s.out_path / "mix", SHARDS[2])
    victim.write_bytes(victim.read_bytes() + b'{"text": "an extra line"}\n')

    # a run over the first two shards does not read it; a run over the range that holds it finds it
    c = _check(_mix(s, inst, tags={ASSET_PARTITION_RANGE_START_TAG: SHARDS[0], ASSET_PARTITION_RANGE_END_TAG: SHARDS[1]}))
    assert (c["passed"], c["shards_checked"], c["scope"]) == (True, 2, "this run's 2 partition(s)")

    # the check on its own, without partitions, checks every shard and reports the tampered one
    ctx = dg.build_asset_check_context(resources={"contam_settings": s, "contam_db": ContamDB(path=str(s.db_path))},
                                       instance=inst)
    ev = O.mix_conservation(ctx)
    assert not ev.passed
    assert (ev.metadata["shards_checked"].value, ev.metadata["violations"].value) == (3, 1)
    assert "part\\-002\\.jsonl" in ev.metadata["details"].value and "file line count" in ev.metadata["details"].value
