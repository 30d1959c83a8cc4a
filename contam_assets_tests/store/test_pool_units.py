"""Partitions as work units (store/units.py): a pool of many small files is scanned and mixed in groups of files,
with the same tables and mix files as one partition per file; a rerun rescans nothing; a file added or removed
changes only its own group; the sensor and the runner agree on the partitions."""

from __future__ import annotations

import random

import dagster as dg
import pytest

from contam_assets.defs.data.sensors import new_shards_sensor
from contam_assets.runner import run_detect
from contam_assets.store import units as units_mod
from contam_assets.store.units import group_key, looks_grouped, plan_units
from contam_assets_tests.support.automation import instance, make_tasks_dir, matches, settings, stats, table, write_pool

N_FILES = 24


def _names(n: int, folder: str = "d") -> dict[str, int]:
    return {f"{folder}/{i:05d}.jsonl": 100 for i in range(n)}


def test_a_pool_up_to_the_limit_keeps_a_partition_per_file():
    sizes = _names(50)
    u = plan_units(sizes, min_files=50, every=4)
    assert u.keys == sorted(sizes) and all(u.files[k] == [k] for k in u.keys)


def test_every_file_sits_in_one_unit_in_path_order_and_big_files_stand_alone():
    sizes = _names(3000) | {"d/00100.big.jsonl": 64 << 20, "e/huge.parquet": 1 << 30}
    u = plan_units(sizes, min_files=1000, every=64)
    flat = [f for k in u.keys for f in u.files[k]]
    assert sorted(flat) == sorted(sizes) and len(flat) == len(set(flat))
    assert u.files["d/00100.big.jsonl"] == ["d/00100.big.jsonl"] and u.files["e/huge.parquet"] == ["e/huge.parquet"]
    groups = [k for k in u.keys if u.is_group(k)]
    assert groups and all(looks_grouped(k) and k == group_key(u.files[k]) for k in groups)
    assert 3000 / len(groups) > 16  # groups, not files
    assert max(len(u.files[k]) for k in groups) <= 4 * 64
    assert u.files_of(groups[:2]) == u.files[groups[0]] + u.files[groups[1]]
    assert u.keys_of(u.files[groups[1]][:3] + ["not/in/the/pool.jsonl"]) == [groups[1], "not/in/the/pool.jsonl"]


def test_byte_and_count_caps_cut_a_group():
    sizes = {f"d/{i:04d}.jsonl": 10 for i in range(2000)}
    u = plan_units(sizes, min_files=10, every=10**9, max_files=100, max_bytes=10**9)  # no content boundary at all
    assert [len(v) for v in u.files.values()] == [100] * 20
    u = plan_units(sizes, min_files=10, every=10**9, max_files=10**6, max_bytes=250)
    assert {len(v) for v in u.files.values()} == {25}


def test_adding_or_removing_a_file_changes_only_its_own_group():
    rng = random.Random(7)
    sizes = _names(4000)
    before = plan_units(sizes, min_files=100, every=32)
    for _ in range(40):
        changed = dict(sizes)
        if rng.random() < 0.5:
            changed[f"d/{rng.randrange(4000):05d}x.jsonl"] = 100  # sorts right after an existing file
        else:
            del changed[f"d/{rng.randrange(4000):05d}.jsonl"]
        after = plan_units(changed, min_files=100, every=32)
        gone, new = set(before.keys) - set(after.keys), set(after.keys) - set(before.keys)
        assert 1 <= len(gone) <= 2 and 1 <= len(new) <= 2, (gone, new)  # two when the file was a boundary


def test_a_file_named_like_a_group_key_keeps_its_own_key():
    members = [f"d/{i:05d}.jsonl" for i in range(3)]
    sizes = {m: 1 for m in members} | {group_key(members): 10}  # a big file: a unit alone, beside the group
    u = plan_units(sizes, min_files=1, every=10**9, small_bytes=10)
    assert group_key(members) in u.files and u.files[group_key(members)] == [group_key(members)]
    assert any(k.endswith("~") and looks_grouped(k) for k in u.keys)


@pytest.fixture(scope="module")
def grouped(tmp_path_factory, shared_data):
    """One pool of N_FILES small files, detected twice: in groups (limits lowered) and one partition per file."""
    root = tmp_path_factory.mktemp("units")
    pool, tasks = root / "pool", make_tasks_dir(root / "tasks")
    write_pool(pool, shared_data, n_shards=N_FILES, docs=3)
    mp = pytest.MonkeyPatch()
    mp.setattr(units_mod, "GROUP_MIN_FILES", 8)
    mp.setattr(units_mod, "GROUP_EVERY", 4)
    grouped_s = settings(root / "out-grouped", pool, tasks, shared_data)
    inst = instance(root / "home-grouped")
    first = run_detect(grouped_s, inst, log=lambda _: None)
    mp.setattr(units_mod, "GROUP_MIN_FILES", 10**6)
    per_file_s = settings(root / "out-per-file", pool, tasks, shared_data)
    per_file = run_detect(per_file_s, instance(root / "home-per-file"), log=lambda _: None)
    mp.setattr(units_mod, "GROUP_MIN_FILES", 8)
    yield dict(root=root, pool=pool, s=grouped_s, inst=inst, first=first, per_file=per_file, per_file_s=per_file_s,
               shared=shared_data)
    mp.undo()


def test_groups_give_the_tables_and_mix_of_a_partition_per_file(grouped):
    s, inst = grouped["s"], grouped["inst"]
    keys = inst.get_dynamic_partitions("shards")
    assert 1 < len(keys) < N_FILES and any(looks_grouped(k) for k in keys)
    first, per_file = grouped["first"], grouped["per_file"]
    assert first["shards"] == per_file["shards"] == N_FILES and first["failed"] == {} == per_file["failed"]
    assert first["removed"] == per_file["removed"] > 0 and first["read"] == per_file["read"] == 3 * N_FILES
    assert stats(s).drop("scanned_at", strict=False).equals(stats(grouped["per_file_s"]).drop("scanned_at", strict=False))
    assert matches(s).drop("scanned_at", strict=False).equals(matches(grouped["per_file_s"]).drop("scanned_at", strict=False))
    for f in sorted(grouped["pool"].glob("*.jsonl")):
        assert (s.out_path / "mix" / f.name).read_bytes() == (grouped["per_file_s"].out_path / "mix" / f.name).read_bytes()
    # a group's materialization sums its files' counts
    key = next(k for k in keys if looks_grouped(k))
    rec = inst.fetch_materializations(dg.AssetRecordsFilter(asset_key=dg.AssetKey("shard_matches"),
                                                            asset_partitions=[key]), limit=1).records[0]
    md = rec.event_log_entry.asset_materialization.metadata
    files = units_mod.plan_units({f.name: f.stat().st_size for f in grouped["pool"].glob("*.jsonl")}).files[key]
    read = table(s, "select sum(read) n from shard_stats where shard in (select unnest(?::varchar[]))", [files])["n"][0]
    assert md["files"].value == len(files) and md["documents_read"].value == read


def test_an_unchanged_rerun_scans_nothing_and_a_change_touches_one_group(grouped):
    s, inst, pool = grouped["s"], grouped["inst"], grouped["pool"]
    before = inst.get_dynamic_partitions("shards")
    again = run_detect(s, inst, log=lambda _: None)
    assert again["removed"] == grouped["first"]["removed"] and inst.get_dynamic_partitions("shards") == before
    key = next(k for k in before if looks_grouped(k))
    rec = inst.fetch_materializations(dg.AssetRecordsFilter(asset_key=dg.AssetKey("shard_matches"),
                                                            asset_partitions=[key]), limit=1).records[0]
    assert rec.event_log_entry.asset_materialization.metadata["scan_mode"].value.startswith("current ")
    # one file removed, one added: its rows retired, the new one scanned, the other groups kept
    gone = sorted(pool.glob("*.jsonl"))[5]
    gone.unlink()
    (pool / "part-010b.jsonl").write_text((pool / "part-010.jsonl").read_text())
    third = run_detect(s, inst, log=lambda _: None)
    after = inst.get_dynamic_partitions("shards")
    assert third["retired"] == [gone.name] and third["shards"] == N_FILES and third["failed"] == {}
    assert len(set(before) - set(after)) <= 4 and len(set(after) - set(before)) <= 4
    assert table(s, "select count(*) n from shard_stats where shard = 'part-010b.jsonl'")["n"][0] == 1
    assert (s.out_path / "mix" / "part-010b.jsonl").read_bytes() == (s.out_path / "mix" / "part-010.jsonl").read_bytes()
    # the sensor sees the same units: nothing new, nothing stale
    r = new_shards_sensor(dg.build_sensor_context(instance=inst, resources={"contam_settings": s}))
    assert r.run_requests == [] and not r.dynamic_partitions_requests


def test_the_sensor_requests_a_changed_group_and_retires_only_files_that_left(grouped):
    s, inst, pool = grouped["s"], grouped["inst"], grouped["pool"]
    r0 = new_shards_sensor(dg.build_sensor_context(instance=inst, resources={"contam_settings": s}))
    (pool / "part-003a.jsonl").write_text((pool / "part-003.jsonl").read_text())
    r1 = new_shards_sensor(dg.build_sensor_context(instance=inst, cursor=r0.cursor, resources={"contam_settings": s}))
    adds = [r for r in r1.dynamic_partitions_requests if isinstance(r, dg.AddDynamicPartitionsRequest)]
    deletes = [r for r in r1.dynamic_partitions_requests if isinstance(r, dg.DeleteDynamicPartitionsRequest)]
    new_keys = adds[0].partition_keys
    assert 1 <= len(new_keys) <= 2 and sorted(r.partition_key for r in r1.run_requests) == sorted(new_keys)
    assert any("part-003a.jsonl" in units_mod.plan_units(
        {f.name: f.stat().st_size for f in pool.glob("*.jsonl")}).files[k] for k in new_keys)
    assert deletes and all(looks_grouped(k) for k in deletes[0].partition_keys)
    # the files of the regrouped partition are still in the pool: their rows stay
    assert table(s, "select count(*) n from shard_stats")["n"][0] == N_FILES
    (pool / "part-003a.jsonl").unlink()


def test_a_partition_of_a_group_the_pool_no_longer_holds_fails_in_one_line(grouped):
    from contam_assets.defs.data.units import partition_files

    stale = "part-000.jsonl (+3 files, deadbeef)"
    with pytest.raises(dg.Failure, match=r"^1 partition\(s\) stand for a group of files the pool no longer holds"):
        partition_files(grouped["s"], [stale])
    assert partition_files(grouped["s"], ["part-001.jsonl"]) == {"part-001.jsonl": ["part-001.jsonl"]}  # no listing


def test_hostile_file_names_are_grouped_and_every_document_accounted(tmp_path, shared_data, monkeypatch):
    monkeypatch.setattr(units_mod, "GROUP_MIN_FILES", 4)
    monkeypatch.setattr(units_mod, "GROUP_EVERY", 1000)
    pool, tasks = tmp_path / "pool", make_tasks_dir(tmp_path / "tasks")
    pool.mkdir()
    names = [f"f{i:02d}.jsonl" for i in range(6)] + ["a\nb.jsonl", "a...b.jsonl", "\u202eevil.jsonl",
                                                     "f00.jsonl (+3 files, deadbeef).jsonl"]
    for i, n in enumerate(names):
        (pool / n).write_text("".join(f'{{"id": "{i}-{j}", "text": "document {j} of a file with words"}}\n'
                                      for j in range(i + 1)))
    s = settings(tmp_path / "out", pool, tasks, shared_data)
    inst = instance(tmp_path / "home")
    res = run_detect(s, inst, log=lambda _: None)
    keys = inst.get_dynamic_partitions("shards")
    assert len(keys) == 1 and looks_grouped(keys[0])
    assert res["shards"] == len(names) and res["failed"] == {}
    assert res["read"] == res["kept"] == sum(range(1, len(names) + 1))
    assert sorted(table(s, "select shard from shard_stats")["shard"]) == sorted(names)
    for i, n in enumerate(names):
        assert len((s.out_path / "mix" / n).read_text().splitlines()) == i + 1
