"""Work done in the step's own process (one worker) runs with the step's heap frozen (gc.freeze), so the cyclic
collector does not walk Dagster's, DuckDB's and the index's objects on every full collection; the heap is
unfrozen after each shard, also when a shard fails, and each shard's result or error comes back in order."""

from __future__ import annotations

import gc

from contam_assets.executor import engines as engine_mod
from contam_assets.executor import mix as mix_mod


def _recorder(seen: list, fail: str):
    def fn(job, *args):
        seen.append((job, gc.get_freeze_count()))
        if job == fail:
            raise ValueError(f"{job} is unreadable")
        return f"done {job}"
    return fn


def test_scans_in_the_step_run_with_the_heap_frozen(monkeypatch):
    seen: list = []
    monkeypatch.setattr(engine_mod, "run_shard_work", _recorder(seen, fail="b"))
    out = list(engine_mod.scan_local(["a", "b", "c"], index=None, ref=None, workers=1))
    assert [j for j, _ in seen] == ["a", "b", "c"] and all(frozen > 0 for _, frozen in seen)
    assert [(j, str(r)) for j, r in out] == [("a", "done a"), ("b", "b is unreadable"), ("c", "done c")]
    assert gc.get_freeze_count() == 0


def test_mix_writes_in_the_step_run_with_the_heap_frozen(monkeypatch):
    seen: list = []
    monkeypatch.setattr(mix_mod, "write_mix_work", _recorder(seen, fail="a"))
    out = list(mix_mod._written(["a", "b"], workers=1, idle=lambda: None))
    assert all(frozen > 0 for _, frozen in seen) and len(seen) == 2
    assert [(j, str(r)) for j, r in out] == [("a", "a is unreadable"), ("b", "done b")]
    assert gc.get_freeze_count() == 0
