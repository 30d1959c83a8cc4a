"""The mix on several cores: one run's mix files written by worker processes are byte for byte the serial loop's,
with the same tables; a shard whose write fails is recorded and the others are written."""

from __future__ import annotations

import gzip
import json
import shutil

import dagster as dg
import zstandard
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG

from contam_assets.defs.data import assets as A
from contam_assets.defs.data import outputs as O
from contam_assets.defs.data.engine import ScanEngine
from contam_assets.defs.resources import ContamDB
from contam_assets_tests.support.automation import (
    build_reference,
    instance,
    make_tasks_dir,
    settings,
    table,
    write_pool,
)

SHARDS = ["part-000.jsonl", "part-001.jsonl.gz", "part-002.jsonl.zst", "part-003.jsonl.gz"]


def _pool(tmp_path, shared_data):
    pool = tmp_path / "pool"
    write_pool(pool, shared_data, n_shards=4, docs=30)
    raw = {k: (pool / f"part-{k:03d}.jsonl").read_bytes() for k in (1, 2, 3)}
    for k in (1, 2, 3):
        (pool / f"part-{k:03d}.jsonl").unlink()
    (pool / SHARDS[1]).write_bytes(gzip.compress(raw[1]))
    (pool / SHARDS[2]).write_bytes(zstandard.ZstdCompressor().compress(raw[2]))
    whole = gzip.compress(raw[3])
    (pool / SHARDS[3]).write_bytes(whole[: len(whole) // 2])  # truncated: its stream breaks, the mix quarantines it
    return pool


def _resources(s, workers: int) -> dict:
    return {"contam_settings": s, "contam_db": ContamDB(path=str(s.db_path)), "contam_scan_engine": ScanEngine(workers=workers)}


def _ranged(assets, s, inst, workers: int):
    return dg.materialize(assets, instance=inst, resources=_resources(s, workers), raise_on_error=False,
                          tags={ASSET_PARTITION_RANGE_START_TAG: SHARDS[0], ASSET_PARTITION_RANGE_END_TAG: SHARDS[-1]})


def _files(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _state(s) -> dict:
    """The mix_state files, with the out folder's own path left out."""
    return {k: v.replace(str(s.out_path).encode(), b"<out>") for k, v in _files(s.out_path / "mix_state").items()}


def _tables(s) -> dict:
    out = str(s.out_path).replace("'", "''")
    return {t: table(s, sql) for t, sql in {
        "mix_stats": f"select * replace (replace(path, '{out}', '<out>') as path) from mix_stats order by rowid",
        "cuts": "select * from cuts order by rowid",
        "errors": "select shard, step, message from shard_errors order by rowid",
        "stats": "select shard, status from shard_stats order by shard"}.items()}


def _run(tmp_path, shared_data, pool, tasks, name: str, workers: int, monkeypatch):
    monkeypatch.setenv("CONTAM_SCAN_WORKERS", str(workers))
    s = settings(tmp_path / name, pool, tasks, shared_data, removal="span")
    inst = instance(tmp_path / f"home_{name}")
    build_reference(s, inst)
    inst.add_dynamic_partitions("shards", SHARDS)
    assert _ranged([A.shard_matches], s, inst, workers).success
    assert dg.materialize([A.removals], instance=inst, resources=_resources(s, workers)).success
    r = _ranged([O.decontaminated_mix], s, inst, workers)
    assert r.success
    mats = r.asset_materializations_for_node("decontaminated_mix")
    run = mats[0].metadata["run_totals"].value
    # each partition shows its own shard's mix_stats row; the run's sums are under run_totals
    rows = {r["shard"]: r for r in table(s, "select * from mix_stats").to_dicts()}
    assert sorted(m.partition for m in mats) == sorted(SHARDS)
    for m in mats:
        own = rows[m.partition]
        assert {k: m.metadata[f"documents_{k}"].value for k in ("written", "dropped", "cut")} == \
            {k: own[k] or 0 for k in ("written", "dropped", "cut")}, m.partition
        assert m.metadata["status"].value == (own["status"] or "ok")
    return s, inst, {k: run[k] for k in ("shards_quarantined", "shards_unchanged", "documents_cut", "documents_dropped")}


def test_two_workers_write_the_mix_of_the_serial_loop_and_a_failed_shard_stays_alone(tmp_path, shared_data, monkeypatch):
    pool, tasks = _pool(tmp_path, shared_data), make_tasks_dir(tmp_path / "tasks")
    serial, _, md1 = _run(tmp_path, shared_data, pool, tasks, "serial", 1, monkeypatch)
    two, inst, md2 = _run(tmp_path, shared_data, pool, tasks, "two", 2, monkeypatch)
    assert md1 == md2 and md2["shards_quarantined"] == 1 and md2["shards_unchanged"] == 0
    assert md2["documents_cut"] + md2["documents_dropped"] > 0
    files = _files(two.out_path / "mix")
    assert sorted(files) == SHARDS[:3]  # the truncated shard is quarantined: no mix file
    assert files == _files(serial.out_path / "mix")  # byte for byte, gz and zst included
    assert _state(two) == _state(serial)
    t1, t2 = _tables(serial), _tables(two)
    for name in t1:
        assert t2[name].equals(t1[name]), name
    assert t2["mix_stats"]["shard"].to_list() == SHARDS  # written in the shards' order
    assert t2["stats"]["status"].to_list()[:3] == ["ok"] * 3 and t2["stats"]["status"][3] in ("incomplete", "failed")
    assert t2["cuts"].height > 0 and t2["errors"].height == 0
    unpack = {".jsonl": bytes, ".gz": gzip.decompress, ".zst": lambda b: zstandard.ZstdDecompressor().decompressobj().decompress(b)}
    for row in t2["mix_stats"].head(3).to_dicts():  # each file holds the lines the table counts, all JSON
        lines = unpack["." + row["shard"].rsplit(".", 1)[1]](files[row["shard"]]).splitlines()
        assert len(lines) == row["written"] + row["cut"] and all(json.loads(x) for x in lines)

    # the plain shard changes after its scan: its rewrite fails (MixError in a worker); the others are rewritten
    shutil.rmtree(two.out_path / "mix_state")
    for shard in SHARDS[:3]:
        (two.out_path / "mix" / shard).unlink()
    with open(pool / SHARDS[0], "a") as fh:
        fh.write(json.dumps({"id": "late", "text": "a line added after the scan"}) + "\n")
    r = _ranged([O.decontaminated_mix], two, inst, 2)
    assert not r.success
    errors = table(two, "select shard, step, message from shard_errors order by rowid").to_dicts()
    assert [(e["shard"], e["step"]) for e in errors] == [(SHARDS[0], "mix")]
    assert "changed since" in errors[0]["message"]
    assert sorted(_files(two.out_path / "mix")) == SHARDS[1:3]  # the others are written, byte for byte as before
    assert all(_files(two.out_path / "mix")[k] == files[k] for k in SHARDS[1:3])
    assert sorted(p.name for p in (two.out_path / "mix_state").iterdir()) == [f"{k}.json" for k in SHARDS[1:3]]
    after = _tables(two)["mix_stats"]
    assert after.filter(after["shard"] != SHARDS[0]).equals(t2["mix_stats"].filter(t2["mix_stats"]["shard"] != SHARDS[0]))
