"""Pools in Parquet, Arrow IPC/Feather, `datasets` save_to_disk folders, Hub cache snapshots, a single file and a
glob, beside JSONL: every planted GSM8K copy removed, the mix in the unit's own format, per-file accounting."""

from __future__ import annotations

import json

import duckdb
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

from contam_assets.testing.pool_formats import (
    contam,
    docs,
    hf_cache,
    ids,
    save_to_disk,
    tasks_dir,
    write_feather,
    write_jsonl,
    write_parquet,
)


def detect(pool, out, tasks, shared_data, home, *extra):
    return contam("detect", "--pool", pool, "--out", out, "--benchmarks", shared_data, "--tasks-dir", tasks, *extra,
                  env_extra={"DAGSTER_HOME": str(home)})


@pytest.fixture(scope="module")
def mixed(tmp_path_factory, shared_data):
    """One pool holding a JSONL file, a Parquet file, a Feather file and a save_to_disk folder; one run."""
    tmp = tmp_path_factory.mktemp("mixed")
    pool = tmp / "pool"
    rows = {
        "a.jsonl": docs(shared_data, "a", 2, 4, 0),
        "b.parquet": docs(shared_data, "b", 2, 5, 10),
        "c.feather": docs(shared_data, "c", 1, 3, 20),
        "hfds/data-00000-of-00001.arrow": docs(shared_data, "d", 2, 3, 30),
    }
    write_jsonl(pool / "a.jsonl", rows["a.jsonl"])
    write_parquet(pool / "b.parquet", rows["b.parquet"])
    write_feather(pool / "c.feather", rows["c.feather"])
    save_to_disk(pool / "hfds", rows["hfds/data-00000-of-00001.arrow"])
    out = tmp / "out"
    r = detect(pool, out, tasks_dir(tmp / "tasks"), shared_data, tmp / "home")
    return dict(r=r, pool=pool, out=out, rows=rows)


def test_every_format_is_read_and_every_planted_copy_removed(mixed):
    r = mixed["r"]
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "shards 4  documents read 22  removed 7  kept 15  rejected 0" in r.stdout
    with duckdb.connect(str(mixed["out"] / "contam.duckdb"), read_only=True) as con:
        stats = {s: (rd, rm, k) for s, rd, rm, k in con.execute("select shard, read, removed, kept from shard_stats").fetchall()}
        removed = sorted(d for (d,) in con.execute("select doc_id from removals").fetchall())
    assert stats == {"a.jsonl": (6, 2, 4), "b.parquet": (7, 2, 5), "c.feather": (4, 1, 3),
                     "hfds/data-00000-of-00001.arrow": (5, 2, 3)}  # document accounting per file
    assert removed == sorted(d["id"] for rows in mixed["rows"].values() for d in rows if d["id"].startswith("p-"))


def test_the_datasets_metadata_files_are_never_units(mixed):
    r = mixed["r"]
    for name in ("hfds/state.json", "hfds/dataset_info.json"):
        assert f"skipped {name}: datasets_metadata" in r.stdout


def test_the_parquet_mix_keeps_schema_compression_and_layout_and_equals_the_kept_rows(mixed):
    src = pq.ParquetFile(mixed["pool"] / "b.parquet")
    mix = pq.ParquetFile(mixed["out"] / "mix" / "b.parquet")
    assert mix.schema_arrow == src.schema_arrow
    assert mix.metadata.num_row_groups == src.metadata.num_row_groups
    assert {mix.metadata.row_group(0).column(i).compression for i in range(mix.metadata.num_columns)} == {"ZSTD"}
    kept = [d for d in mixed["rows"]["b.parquet"] if not d["id"].startswith("p-")]
    assert mix.read().to_pylist() == kept  # row for row, every column


def test_arrow_mixes_are_written_in_their_own_form(mixed):
    mix = feather.read_table(mixed["out"] / "mix" / "c.feather")
    assert ids(mix) == [d["id"] for d in mixed["rows"]["c.feather"] if not d["id"].startswith("p-")]
    with pa.memory_map(str(mixed["out"] / "mix" / "hfds" / "data-00000-of-00001.arrow")) as src:
        stream = pa.ipc.open_stream(src).read_all()  # datasets' own form: an IPC stream
    assert ids(stream) == [d["id"] for d in mixed["rows"]["hfds/data-00000-of-00001.arrow"] if not d["id"].startswith("p-")]


def test_a_struct_field_and_span_removal_rewrite_the_text_column(tmp_path, shared_data):
    rows = [{"id": d["id"], "meta": {"text": d["text"], "lang": "en"}} for d in docs(shared_data, "s", 2, 3, 40)]
    pool = tmp_path / "pool"
    write_parquet(pool / "part-0.parquet", rows, compression="snappy", row_group_size=2)
    out = tmp_path / "out"
    r = detect(pool, out, tasks_dir(tmp_path / "tasks"), shared_data, tmp_path / "home", "--content-key", "meta.text",
               "--removal", "span")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "removed 2" in r.stdout
    mix = pq.read_table(out / "mix" / "part-0.parquet")
    assert mix.schema == pq.read_schema(pool / "part-0.parquet")
    got = {row["id"]: row["meta"] for row in mix.to_pylist()}
    planted = [d for d in rows if d["id"].startswith("p-")]
    for d in planted:  # the copies are cut out of the struct field, the host text and the other field kept
        if d["id"] in got:
            assert "Notes from class." in got[d["id"]]["text"] and got[d["id"]]["lang"] == "en"
            assert "####" not in got[d["id"]]["text"]
    assert [got[d["id"]] for d in rows if not d["id"].startswith("p-")] == [d["meta"] for d in rows if not d["id"].startswith("p-")]


def test_a_single_file_a_glob_and_a_hub_cache_snapshot(tmp_path, shared_data):
    pool = tmp_path / "pool"
    write_parquet(pool / "sub" / "part-0.parquet", docs(shared_data, "f", 2, 2, 50))
    write_jsonl(pool / "sub" / "part-1.jsonl", docs(shared_data, "g", 1, 2, 60))
    write_jsonl(pool / "other.jsonl", docs(shared_data, "h", 1, 1, 70))
    tasks = tasks_dir(tmp_path / "tasks")
    r = detect(pool / "sub" / "part-0.parquet", tmp_path / "o1", tasks, shared_data, tmp_path / "home")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "shards 1  documents read 4  removed 2" in r.stdout
    r = detect(f"{pool}/**/*.jsonl", tmp_path / "o2", tasks, shared_data, tmp_path / "home")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "shards 2  documents read 5  removed 2" in r.stdout  # other.jsonl and sub/part-1.jsonl, not the parquet
    cache = hf_cache(tmp_path / "hub", docs(shared_data, "i", 2, 2, 80))
    r = detect(cache, tmp_path / "o3", tasks, shared_data, tmp_path / "home")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "shards 1  documents read 4  removed 2" in r.stdout and "outside_pool" not in r.stdout
    assert (tmp_path / "o3" / "mix" / "data" / "train-00000-of-00001.parquet").is_file()


def test_the_door_names_the_keys_and_the_flag(tmp_path, shared_data):
    tasks = tasks_dir(tmp_path / "tasks")
    pool = tmp_path / "pool"
    write_jsonl(pool / "part-0.jsonl", [{"id": d["id"], "content": d["text"]} for d in docs(shared_data, "k", 1, 3, 90)])
    r = detect(pool, tmp_path / "out", tasks, shared_data, tmp_path / "home")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "contam detect: error: no 'text' in part-0.jsonl; it has: id, content — pass --content-key content"], r.stderr
    pq_pool = tmp_path / "pq"
    write_parquet(pq_pool / "x.parquet", [{"id": d["id"], "raw_content": d["text"], "url": d["url"]}
                                          for d in docs(shared_data, "l", 1, 1, 95)])
    r = detect(pq_pool, tmp_path / "out2", tasks, shared_data, tmp_path / "home")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "contam detect: error: no 'text' in x.parquet; it has: id, raw_content, url — pass --content-key raw_content"], r.stderr


def test_a_run_that_rejects_every_document_exits_non_zero(tmp_path, shared_data):
    pool = tmp_path / "pool"
    pool.mkdir()
    (pool / "broken.jsonl").write_text("not json at all\n{'single': 'quotes'}\n")
    r = detect(pool, tmp_path / "out", tasks_dir(tmp_path / "tasks"), shared_data, tmp_path / "home")
    assert r.returncode == 1 and "every document read was rejected (2)" in r.stdout, r.stdout[-2000:] + r.stderr


@pytest.mark.parametrize("spec, line", [
    ("gs://bucket/pool", "gs:// needs the gcsfs package (pip install gcsfs)"),
    ("az://container/pool", "az:// needs the adlfs package (pip install adlfs)"),
    ("ftp2://host/pool", "ftp2:// is not a storage this tool reads"),
    ("s3://", "s3:// needs a bucket (or repository) and a path"),
    ("{tmp}/missing", "pool not found: {tmp}/missing"),
    ("{tmp}/*.parquet", "pool: no file matches {tmp}/*.parquet"),
])
def test_a_location_that_cannot_be_used_is_one_line(tmp_path, spec, line):
    spec, line = spec.format(tmp=tmp_path), line.format(tmp=tmp_path)
    r = contam("detect", "--pool", spec, "--out", tmp_path / "out")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and line in r.stderr, r.stderr


def test_s3_without_credentials_is_one_line(tmp_path):
    env = {"AWS_EC2_METADATA_DISABLED": "true", "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
           "AWS_CONFIG_FILE": str(tmp_path / "none")}
    r = contam("detect", "--pool", "s3://bucket/fineweb/data", "--out", tmp_path / "out", env_extra=env,
               unset=("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "s3://: no credentials for s3://bucket/fineweb/data; set AWS_ACCESS_KEY_ID" in r.stderr


def test_run_json_records_the_pool_as_given(mixed):
    rec = json.loads((mixed["out"] / "run.json").read_text())
    assert rec["pool_dir"] == str(mixed["pool"])


def test_the_user_tables_are_also_parquet_files_polars_reads(mixed):
    import polars as pl

    with duckdb.connect(str(mixed["out"] / "contam.duckdb"), read_only=True) as con:
        for table in ("removals", "shard_stats", "matches", "instances"):
            want = con.sql(f"select * from {table}").pl()
            got = pl.read_parquet(mixed["out"] / "tables" / table / "part-0.parquet")
            assert got.columns == want.columns and got.height == want.height > 0, table
            assert got.sort(got.columns[:3]).equals(want.sort(want.columns[:3])), table
