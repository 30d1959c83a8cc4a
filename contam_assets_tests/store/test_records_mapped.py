"""The reference records of an index folder are mapped, not copied: a scanning process holds the pages of the
records it reads (a match's row), shared with every other process that maps the file; an older folder without the
mapped file is read from its Parquet file; Ray's object store gets the records as the bytes of an Arrow IPC file, which
travel out of band."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys

import polars as pl

from contam_assets.detector.matches import Reference
from contam_assets.executor.engines import ray_records
from contam_assets.store import artifacts

N = 20_000
TEXT = 2_000  # bytes of question text a record: 40 MB in all


def _records(n: int = N) -> pl.DataFrame:
    """Records with the columns a match row reads, every question its own text of TEXT bytes."""
    ids = pl.int_range(0, n, dtype=pl.Int32, eager=True)
    return pl.DataFrame({
        "record_id": ids, "task": (ids % 7).cast(pl.Utf8).map_elements(lambda t: f"task{t}", return_dtype=pl.Utf8),
        "suite": pl.repeat("s", n, eager=True), "split": pl.repeat("test", n, eager=True),
        "instance_index": ids, "subject": pl.repeat(None, n, dtype=pl.Utf8, eager=True),
        "choice_index": pl.repeat(None, n, dtype=pl.Int32, eager=True), "is_correct": pl.repeat(None, n, dtype=pl.Boolean, eager=True),
        "derived": pl.repeat(False, n, eager=True), "indexed": pl.repeat(True, n, eager=True),
        "question": ids.map_elements(lambda i: (f"question {i} " * (TEXT // 10))[:TEXT], return_dtype=pl.Utf8),
        "answer": ids.cast(pl.Utf8), "passage": pl.repeat(None, n, dtype=pl.Utf8, eager=True),
        "twins": pl.repeat(None, n, dtype=pl.Utf8, eager=True)})


READER = """
import json, sys
from contam_assets.detector.matches import Reference
from contam_assets.store import artifacts

def anon():
    return next(int(l.split()[1]) for l in open("/proc/self/smaps_rollup") if l.startswith("Anonymous:")) * 1024

before = anon()
ref = Reference(artifacts.read_records(sys.argv[1]))
rows = [ref.get(i) for i in range(0, ref.records.height, ref.records.height // 50)]
tasks = ref.tasks
maps = [l for l in open("/proc/self/maps") if l.rstrip().endswith("records.arrow")]
print(json.dumps({"grew": anon() - before, "mapped": bool(maps), "tasks": tasks, "q": rows[3]["question"]}))
"""


def test_a_scanning_process_maps_the_records_instead_of_copying_them(tmp_path):
    records = _records()
    artifacts.write_records(tmp_path, records)
    assert {p.name for p in tmp_path.iterdir()} == {"records.parquet", "records.arrow"}  # no temporary left
    # a fresh process, as a scan worker: its own memory grows by far less than the texts it could read
    out = subprocess.run([sys.executable, "-c", READER, str(tmp_path)], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["mapped"] and got["tasks"] == [f"task{t}" for t in range(7)]
    assert got["q"] == records["question"][3 * (N // 50)]
    assert got["grew"] < N * TEXT / 4, got["grew"]
    # the mapped table is the table written, row for row
    mapped = artifacts.read_records(tmp_path)
    assert mapped.equals(records) and Reference(mapped).get(N - 1) == records.row(N - 1, named=True)


def test_a_folder_without_the_mapped_file_reads_its_parquet(tmp_path):
    records = _records(500)
    artifacts.write_records(tmp_path, records)
    (tmp_path / "records.arrow").unlink()  # a folder saved before the mapped file
    assert artifacts.read_records(tmp_path).equals(records)
    artifacts.write_records(tmp_path, records)
    data = (tmp_path / "records.arrow").read_bytes()
    (tmp_path / "records.arrow").write_bytes(data[: len(data) // 2])  # cut short: not mappable, the Parquet file read
    assert artifacts.read_records(tmp_path).equals(records)


def test_ray_gets_the_records_with_their_texts_out_of_band(tmp_path):
    records = _records(2_000)
    artifacts.write_records(tmp_path, records)
    data = ray_records(Reference(artifacts.read_records(tmp_path)))
    buffers: list = []
    inline = pickle.dumps(data, protocol=5, buffer_callback=buffers.append)
    texts = int(records["question"].str.len_bytes().sum())
    assert len(inline) < texts / 20 and sum(len(b.raw()) for b in buffers) >= texts
    back = artifacts.records_from_ipc(pickle.loads(inline, buffers=buffers))
    assert back.equals(records)
