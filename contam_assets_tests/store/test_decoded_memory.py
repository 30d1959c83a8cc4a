"""Memory bounded by decoded bytes, not file size: Parquet and Arrow files of a few KB whose dictionary-encoded text
column decodes to megabytes (in the tests, against a lowered bound) or gigabytes (one subprocess), read, scanned,
mixed and cut for an estimate a bounded slice at a time, with exact accounting and the mix equal to what is kept."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import duckdb
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

from contam_assets.estimate.blocks import cut_row_group
from contam_assets.rescan import shard as shard_mod
from contam_assets.rescan.shard import read_batches
from contam_assets.store.documents import BATCH_BYTES, Document, Reject
from contam_assets.store.readers import arrow as arrow_mod
from contam_assets.store.readers import columns, read_unit
from contam_assets.store.readers import parquet as parquet_mod
from contam_assets.store.readers.arrow import ArrowReader
from contam_assets.store.readers.parquet import ParquetReader
from contam_assets.testing.pool_formats import CLEAN, contam, docs, tasks_dir, write_jsonl

WORDS = "the baker kneads the bread while the oven warms the kitchen before the market opens. "


def text_of(n: int, seed: str = "") -> str:
    return (seed + WORDS * (n // len(WORDS) + 1))[:n]


def repeated(path, n_rows: int, texts: list[str], row_group_size: int | None = None) -> None:
    """A Parquet file whose ``text`` column is dictionary-encoded: row i holds texts[i % len(texts)] (a plain string
    column to readers: the Arrow schema is not stored)."""
    col = pa.DictionaryArray.from_arrays(pa.array([i % len(texts) for i in range(n_rows)], pa.int32()), pa.array(texts))
    table = pa.table({"id": [f"r{i}" for i in range(n_rows)], "text": col})
    pq.write_table(table, path, compression="zstd", row_group_size=row_group_size or n_rows, store_schema=False)


@pytest.fixture
def bound(monkeypatch):
    """Lower the decoded-bytes bound of every stage to ``n`` bytes."""
    def lower(n: int) -> int:
        for mod in (columns, parquet_mod, shard_mod):
            monkeypatch.setattr(mod, "BATCH_BYTES", n)
        return n
    return lower


def decoded_text_bytes(table: pa.Table) -> int:
    return sum(len(t.encode()) for t in table.column("text").to_pylist())


def test_scan_batches_hold_a_bounded_number_of_bytes(tmp_path):
    """100 rows of one 1 MiB string (a file of a few KB): batches of 32 documents (BATCH_BYTES), not 256 (256 MiB)."""
    path = tmp_path / "big.parquet"
    repeated(path, 100, [text_of(1 << 20)])
    assert path.stat().st_size < 20_000
    counters, rejects = Counter(), []
    sizes = [len(b) for b in read_batches(path, "big.parquet", "text", 8 << 20, counters, rejects)]
    assert BATCH_BYTES == 32 << 20 and sizes == [32, 32, 32, 4]
    assert [len(b) for b in read_batches(path, "big.parquet", "text", 8 << 20, Counter(), [], max_bytes=3 << 20)] \
        == [3] * 33 + [1]
    assert counters["read"] == 100 and counters["bytes"] == 100 << 20 and rejects == []


def test_parquet_mix_decodes_and_writes_a_bounded_slice_at_a_time(tmp_path, bound):
    limit = bound(50_000)
    src = tmp_path / "src.parquet"
    texts = [text_of(10_000, "one "), text_of(10_000, "two "), text_of(10_000, "three ")]
    pq.write_table(pa.table({"id": [f"r{i}" for i in range(60)], "text": [texts[i % 3] for i in range(60)]}), src,
                   compression="zstd", row_group_size=60)  # one row group, dictionary-encoded by the writer
    counts = ParquetReader().write_mix(src, tmp_path / "mix.parquet", "text", {5, 40}, {7, 59}, None)
    assert dict(counts) == {"written": 56, "dropped": 2, "rejected": 2, "read": 60}
    pf = pq.ParquetFile(tmp_path / "mix.parquet")
    assert pf.schema_arrow == pq.ParquetFile(src).schema_arrow
    groups = [pf.read_row_group(i) for i in range(pf.metadata.num_row_groups)]
    assert len(groups) > 10 and max(decoded_text_bytes(g) for g in groups) <= limit
    kept = [i for i in range(60) if i not in {5, 40, 7, 59}]
    out = pq.read_table(tmp_path / "mix.parquet")
    assert out.column("id").to_pylist() == [f"r{i}" for i in kept]
    assert out.column("text").to_pylist() == [texts[i % 3] for i in kept]


def test_a_row_group_cut_for_an_estimate_is_copied_a_bounded_slice_at_a_time(tmp_path, bound):
    limit = bound(30_000)
    src = tmp_path / "src.parquet"
    repeated(src, 40, [text_of(8_000, "a "), text_of(8_000, "b ")], row_group_size=20)
    cut_row_group(src, tmp_path / "block.parquet", 1)
    pf = pq.ParquetFile(tmp_path / "block.parquet")
    groups = [pf.read_row_group(i) for i in range(pf.metadata.num_row_groups)]
    assert len(groups) > 1 and max(decoded_text_bytes(g) for g in groups) <= limit
    assert pq.read_table(tmp_path / "block.parquet") == pq.read_table(src).slice(20, 20)


def test_an_arrow_dictionary_batch_is_read_and_mixed_in_bounded_slices(tmp_path, bound):
    limit = bound(40_000)
    texts = [text_of(10_000, "left "), text_of(10_000, "right ")]
    col = pa.DictionaryArray.from_arrays(pa.array([i % 2 for i in range(30)], pa.int32()), pa.array(texts))
    src = tmp_path / "src.arrow"
    feather.write_feather(pa.table({"id": [f"r{i}" for i in range(30)], "text": col}), src, compression="uncompressed")
    items = list(read_unit(src, src.name))
    assert [(d.line, d.doc_id, d.text) for d in items] == [(i, f"r{i}", texts[i % 2]) for i in range(30)]
    counts = ArrowReader().write_mix(src, tmp_path / "mix.arrow", "text", {3}, {4}, None)
    assert dict(counts) == {"written": 28, "dropped": 1, "rejected": 1, "read": 30}
    with pa.memory_map(str(tmp_path / "mix.arrow")) as fh:
        reader = pa.ipc.open_file(fh)
        batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
        out = reader.read_all()
    assert len(batches) > 5 and max(decoded_text_bytes(pa.Table.from_batches([b])) for b in batches) <= limit
    assert out.column("text").to_pylist() == [texts[i % 2] for i in range(30) if i not in {3, 4}]
    assert out.schema == feather.read_table(src).schema and arrow_mod.ArrowReader().rows(tmp_path / "mix.arrow") == 28


MIX_2GB = """
import json, sys
import pyarrow as pa, pyarrow.parquet as pq
from pathlib import Path
from contam_assets.store.readers.parquet import ParquetReader
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
text = ("the baker kneads the bread while the oven warms. " * 30000)[: 1 << 20]
col = pa.DictionaryArray.from_arrays(pa.array([0] * 2100, pa.int32()), pa.array([text]))
pq.write_table(pa.table({"id": [f"r{i}" for i in range(2100)], "text": col}), src, compression="zstd",
               row_group_size=2100, store_schema=False)
c = ParquetReader().write_mix(src, dst, "text", {0}, {1}, None)
hwm_kb = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(src.stat().st_size, hwm_kb // 1024, json.dumps(c))
"""


def test_a_file_of_kilobytes_decoding_past_2_gib_is_mixed_in_bounded_memory(tmp_path):
    """One row group of 2,100 rows of one 1 MiB string (2.05 GiB decoded, past 32-bit offsets) in a file of a few KB:
    the mix is written whole (it overflowed the binary array's capacity) and the process stays far below 2 GB."""
    src, dst = tmp_path / "big.parquet", tmp_path / "mix.parquet"
    out = subprocess.run([sys.executable, "-c", MIX_2GB, str(src), str(dst)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    size, peak_mb, counts = out.stdout.split(" ", 2)
    assert int(size) < 30_000 and json.loads(counts) == {"written": 2098, "dropped": 1, "rejected": 1, "read": 2100}
    assert int(peak_mb) < 700, out.stdout
    pf = pq.ParquetFile(dst, read_dictionary=["text"])
    assert pf.metadata.num_rows == 2098 and pf.schema_arrow.field("text").type == pa.dictionary(pa.int32(), pa.string())
    ids, values = [], set()
    for batch in pf.iter_batches(batch_size=512):
        ids += batch.column("id").to_pylist()
        values |= set(batch.column("text").dictionary.to_pylist())
    assert ids == [f"r{i}" for i in range(2, 2100)]
    assert values == {("the baker kneads the bread while the oven warms. " * 30000)[: 1 << 20]}


def test_detect_accounts_for_every_row_of_a_small_file_that_decodes_large(tmp_path, shared_data):
    """A one-row-group Parquet file: 3 planted GSM8K copies, 40 rows of one 20 KB string and one row over
    --max-doc-bytes; beside it a JSONL shard.  Every row read, the long one rejected with its reason, the copies removed,
    and the mix exactly the clean rows."""
    pool = tmp_path / "pool"
    pool.mkdir()
    planted = docs(shared_data, "q", 3, 0, 0)
    filler = (CLEAN * 250)[:20_000]
    rows = ([{"id": d["id"], "text": d["text"]} for d in planted] + [{"id": f"c{i}", "text": filler} for i in range(40)]
            + [{"id": "huge", "text": text_of(300_000)}])
    pq.write_table(pa.Table.from_pylist(rows), pool / "big.parquet", compression="zstd", row_group_size=len(rows))
    assert (pool / "big.parquet").stat().st_size < 20_000
    write_jsonl(pool / "small.jsonl", docs(shared_data, "j", 1, 2, 3))
    out = tmp_path / "out"
    r = contam("detect", "--pool", pool, "--out", out, "--benchmarks", shared_data, "--tasks-dir",
               tasks_dir(tmp_path / "tasks"), "--max-doc-bytes", "200000",
               env_extra={"DAGSTER_HOME": str(tmp_path / "home")})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "shards 2  documents read 47  removed 4  kept 42  rejected 1  pending review 0" in r.stdout, r.stdout
    with duckdb.connect(str(out / "contam.duckdb"), read_only=True) as con:
        stats = dict(con.execute("select shard, (read, rejected, removed, kept, reject_reasons, status) "
                                 "from shard_stats").fetchall())
        removed = sorted(d for (d,) in con.execute("select doc_id from removals").fetchall())
    assert stats["big.parquet"] == (44, 1, 3, 40, '{"too_large": 1}', "ok")
    assert stats["small.jsonl"] == (3, 0, 1, 2, "{}", "ok")
    assert removed == ["p-j-0", "p-q-0", "p-q-1", "p-q-2"]
    rejected = [json.loads(line) for line in (out / "rejected" / "big.parquet.jsonl").read_text().splitlines()]
    assert [(x["line"], x["reason"]) for x in rejected] == [(43, "too_large (300000 bytes > 200000)")]
    mix = pq.read_table(out / "mix" / "big.parquet")
    assert mix.column("id").to_pylist() == [f"c{i}" for i in range(40)]
    assert mix.column("text").to_pylist() == [filler] * 40
    assert [json.loads(line)["id"] for line in (out / "mix" / "small.jsonl").read_text().splitlines()] == ["c-j-0", "c-j-1"]


def test_a_reject_and_a_document_of_a_dictionary_batch_keep_their_lines(tmp_path, bound):
    """Rows over max_doc_bytes in a dictionary column are too_large rejects at their own lines, under any bound."""
    bound(25_000)
    path = tmp_path / "mixed.parquet"
    repeated(path, 12, [text_of(10_000, "ok "), text_of(30_000, "long ")])
    items = list(read_unit(path, path.name, "text", 20_000))
    assert [(i.line, type(i).__name__) for i in items] == [(k, "Document" if k % 2 == 0 else "Reject") for k in range(12)]
    assert {i.reason for i in items if isinstance(i, Reject)} == {"too_large (30000 bytes > 20000)"}
    assert all(isinstance(i, Document) and i.text == text_of(10_000, "ok ") for i in items[::2])
