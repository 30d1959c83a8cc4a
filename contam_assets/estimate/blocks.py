"""The blocks of a block sample (estimate/design.py) cut out of their shards, each into a file of its own that the
scan of a full run reads as a shard: only the block's bytes (and the rest of its last line) are read.

- A JSON/JSONL block [start, end) holds the lines that *start* in it: reading starts at start - 1 (a newline there
  means a line starts at start; anything else is the tail of the previous block's last line, skipped) and stops at
  the first line that starts at or after end.  Every line of a shard is in exactly one block, whatever the block
  size (a line longer than a block leaves the blocks it spans empty).
- A Parquet row group is written as a Parquet file of that one row group, with the shard's schema, a bounded slice of
  rows at a time (store/readers/parquet.copy_rows).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from contam_assets.estimate.design import PoolUnit, compressed_bytes
from contam_assets.store.location import open_unit

COPY_CHUNK = 1 << 20


def _copy_line(src, dst) -> int:
    """Copy the rest of the current line (its newline included) from ``src`` to ``dst`` in chunks; the bytes copied."""
    n = 0
    while True:
        chunk = src.readline(COPY_CHUNK)
        if not chunk:
            return n
        dst.write(chunk)
        n += len(chunk)
        if chunk.endswith(b"\n"):
            return n


def _skip_line(src) -> None:
    while (chunk := src.readline(COPY_CHUNK)) and not chunk.endswith(b"\n"):
        pass


def cut_bytes(src: Path, dst: Path, start: int, end: int) -> int:
    """The lines of ``src`` that start in [start, end) copied to ``dst``; the bytes read."""
    with open_unit(src) as fh, open(dst, "wb") as out:  # a remote unit: read from the store, only this range
        if start > 0:
            fh.seek(start - 1)
            if fh.read(1) != b"\n":
                _skip_line(fh)
        while fh.tell() < end and _copy_line(fh, out):
            pass
        return fh.tell() - max(0, start - 1)


def cut_row_group(src: Path, dst: Path, index: int) -> int:
    """Row group ``index`` of the Parquet file ``src`` written to ``dst``; the bytes of the row group."""
    import pyarrow.parquet as pq

    from contam_assets.store.readers.parquet import copy_rows

    copy_rows(src, dst, [index])  # decoded a bounded slice at a time: a small row group can decode to gigabytes
    with open_unit(src, ranges=True) as fh:
        return compressed_bytes(pq.ParquetFile(fh).metadata.row_group(index))


def cut(unit: PoolUnit, src: Path, folder: Path) -> int:
    """The unit's block written under ``folder`` at its key (a shard unit: the shard copied); the bytes read."""
    dst = folder / unit.key
    dst.parent.mkdir(parents=True, exist_ok=True)
    if unit.kind == "bytes":
        return cut_bytes(src, dst, unit.start, unit.end)
    if unit.kind == "row_group":
        return cut_row_group(src, dst, unit.start)
    with open_unit(src) as fh, open(dst, "wb") as out:
        shutil.copyfileobj(fh, out)
    return unit.bytes
