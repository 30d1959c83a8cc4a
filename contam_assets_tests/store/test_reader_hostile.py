"""Hostile columnar units: rows far over the size limit in a file of a few hundred bytes, string columns holding
invalid UTF-8 (neither writer checks), and a dictionary-encoded (categorical) text column: every row a document or
a counted reject, the reader's memory bounded, the shard's other rows read."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import duckdb
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest

from contam_assets.store.documents import Document, Reject
from contam_assets.store.readers import read_unit
from contam_assets.store.readers.parquet import ParquetReader
from contam_assets.testing.pool_formats import contam, docs, tasks_dir, write_jsonl


def accounting(path, max_doc_bytes=8 << 20):
    items = list(read_unit(path, path.name, "text", max_doc_bytes))
    reasons = Counter(i.reason.split(" ")[0] for i in items if isinstance(i, Reject))
    return len(items), reasons, [d.text for d in items if isinstance(d, Document)]


def bad_utf8_table(texts: list[bytes]) -> pa.Table:
    """A string column whose bytes are not all UTF-8 (the buffers of a binary column, unchecked)."""
    raw = pa.array(texts, type=pa.binary())
    return pa.table({"id": [f"r{i}" for i in range(len(texts))],
                     "text": pa.Array.from_buffers(pa.string(), len(raw), raw.buffers())})


TEXTS = [b"first good row", b"bad \xff\xfe bytes", b"second good row", b"cut \xe2\x82", b"third good row"]


@pytest.mark.parametrize("fmt", ["parquet", "arrow"])
def test_invalid_utf8_rows_are_counted_rejects_and_the_others_read(tmp_path, fmt):
    path = tmp_path / f"bad.{fmt}"
    table = bad_utf8_table(TEXTS)
    pq.write_table(table, path, row_group_size=2) if fmt == "parquet" else feather.write_feather(table, path)
    n, reasons, texts = accounting(path)
    assert (n, reasons, texts) == (5, {"invalid_utf8": 2}, ["first good row", "second good row", "third good row"])
    rejects = [i for i in read_unit(path, path.name) if isinstance(i, Reject)]
    assert [(r.line, r.reason, r.raw) for r in rejects] == [(1, "invalid_utf8 (byte 4)", b"bad \xff\xfe bytes"),
                                                           (3, "invalid_utf8 (byte 4)", b"cut \xe2\x82")]


def test_a_categorical_text_column_is_read_as_text(tmp_path):
    path = tmp_path / "cat.parquet"
    col = pa.array(["red apples", "green pears", "red apples", None, "  "]).dictionary_encode()
    pq.write_table(pa.table({"text": col}), path)
    assert pq.ParquetFile(path).schema_arrow.field("text").type == pa.dictionary(pa.int32(), pa.string())
    assert accounting(path) == (5, {"missing_content_key": 1, "empty_text": 1},
                                ["red apples", "green pears", "red apples"])


def test_rows_over_the_limit_are_too_large_rejects_beside_normal_rows(tmp_path):
    path = tmp_path / "mixed.parquet"
    pq.write_table(pa.table({"text": ["short one", "x" * 5000, "short two", "y" * 5000]}), path, compression="zstd")
    assert accounting(path, max_doc_bytes=1000) == (4, {"too_large": 2}, ["short one", "short two"])


WRITE = """
import sys, pyarrow as pa, pyarrow.parquet as pq
big = "a" * (16 << 20)
pq.write_table(pa.table({"text": pa.array([big] * 48, type=pa.large_string())}), sys.argv[1], compression="zstd",
               row_group_size=48, use_dictionary=sys.argv[2] == "dict")
"""
READ = """
import sys
from collections import Counter
from pathlib import Path
from contam_assets.store.readers import read_unit
from contam_assets.store.readers.parquet import ParquetReader
p = Path(sys.argv[1])
if sys.argv[2] == "read":
    c = Counter(i.reason.split(" ")[0] for i in read_unit(p, p.name))
else:  # the mix: every row rejected but one dropped and one kept
    c = ParquetReader().write_mix(p, p.with_name("mix.parquet"), "text", {1}, set(range(2, 48)), None)
# VmHWM is this address space's peak; ru_maxrss would also count the parent's resident set at fork (it survives
# execve on Linux), which is the whole test session's when the suite has grown
hwm_kb = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(dict(c), hwm_kb // 1024)
"""


def test_a_small_file_of_huge_rows_is_read_in_bounded_memory(tmp_path):
    """48 rows of 16 MB (over the 8 MB limit) in a ~1 KB zstd file: all too_large, peak RSS far below the ~2.4 GB
    the whole batch took as Python strings."""
    path = tmp_path / "bomb.parquet"
    subprocess.run([sys.executable, "-c", WRITE, str(path), "dict"], check=True)
    assert path.stat().st_size < 10_000
    for how, want in [("read", "{'too_large': 48}"), ("mix", "{'written': 1, 'dropped': 1, 'rejected': 46, 'read': 48}")]:
        out = subprocess.run([sys.executable, "-c", READ, str(path), how], capture_output=True, text=True,
                             check=True).stdout
        counts, peak_mb = out.rsplit(" ", 1)
        assert counts == want and int(peak_mb) < 600, out
    assert pq.read_table(tmp_path / "mix.parquet").column("text").to_pylist() == ["a" * (16 << 20)]


def test_the_mix_of_a_categorical_column_cuts_in_place_and_keeps_the_type(tmp_path):
    src = tmp_path / "cat.parquet"
    pq.write_table(pa.table({"text": pa.array(["keep me", "drop me", "cut me here"]).dictionary_encode()}), src)
    counts = ParquetReader().write_mix(src, tmp_path / "mix.parquet", "text", {1, 2}, set(),
                                       lambda line, raw: None if line == 1 else b'{"text": "cut"}')
    out = pq.read_table(tmp_path / "mix.parquet")
    assert dict(counts) == {"written": 1, "dropped": 1, "cut": 1, "read": 3}
    assert out.column("text").to_pylist() == ["keep me", "cut"] and pa.types.is_dictionary(out.schema.field("text").type)


def test_detect_counts_the_bad_row_and_removes_the_planted_copy(tmp_path, shared_data):
    pool = tmp_path / "pool"
    pool.mkdir()
    pq.write_table(bad_utf8_table(TEXTS), pool / "bad.parquet")
    write_jsonl(pool / "good.jsonl", docs(shared_data, "g", 1, 2, 0))
    out = tmp_path / "out"
    r = contam("detect", "--pool", pool, "--out", out, "--benchmarks", shared_data, "--tasks-dir",
               tasks_dir(tmp_path / "tasks"), env_extra={"DAGSTER_HOME": str(tmp_path / "home")})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    with duckdb.connect(str(out / "contam.duckdb"), read_only=True) as con:
        stats = dict(con.execute("select shard, (read, rejected, removed, kept) from shard_stats").fetchall())
        reasons = con.execute("select reject_reasons from shard_stats where shard = 'bad.parquet'").fetchone()[0]
        removed = [d for (d,) in con.execute("select doc_id from removals").fetchall()]
    assert removed == ["p-g-0"]
    assert "invalid_utf8" in str(reasons), reasons
    assert stats["good.jsonl"][2:] == (1, 2) and stats["bad.parquet"][1] == 2, stats
