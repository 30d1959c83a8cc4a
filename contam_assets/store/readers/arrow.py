"""Arrow IPC units: Feather v2 / IPC files (`.feather`, `.arrow`, `.ipc`) and IPC streams (what `datasets`
`save_to_disk` writes as `data-*.arrow`), read through a memory map; one record batch at a time, in slices of about
BATCH_BYTES decoded (columns.bounded_slices; a dictionary column is measured by the values its rows expand to).

The mix of an Arrow unit is written in the unit's own form (file or stream) with its schema.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Iterator

import pyarrow as pa

from contam_assets.store.documents import Document, Reject, StreamFailure
from contam_assets.store.location import is_url, open_unit
from contam_assets.store.readers.columns import bounded_slices, columns_for, documents_of, field_names, filter_table

ERRORS = (OSError, EOFError, pa.ArrowException)


def _source(path):
    """A local unit memory-mapped; a unit of a remote pool opened in place, read by range requests."""
    if is_url(path):
        return open_unit(path, ranges=True)
    return pa.memory_map(str(path))


def _open(source):
    """(reader, is_file): the IPC file reader, else the stream reader."""
    try:
        return pa.ipc.open_file(source), True
    except pa.ArrowInvalid:
        source.seek(0)
        return pa.ipc.open_stream(source), False


def _batches(reader, is_file: bool) -> Iterator[pa.RecordBatch]:
    if is_file:
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i)
    else:
        yield from reader


class ArrowReader:
    name = "arrow"
    suffixes = (".arrow", ".feather", ".ipc")

    def read(self, path: Path, shard: str, content_key: str = "text",
             max_doc_bytes: int = 8 << 20) -> Iterator[Document | Reject | StreamFailure]:
        line = 0
        try:
            with _source(path) as src:
                reader, is_file = _open(src)
                for batch in _batches(reader, is_file):
                    batch = batch.select(columns_for(batch.schema.names, content_key))
                    for _, part in bounded_slices(batch):
                        yield from documents_of(part, line, shard, content_key, max_doc_bytes)
                        line += part.num_rows
        except ERRORS as exc:
            yield StreamFailure(line, "read_error", f"{type(exc).__name__}: {exc}", None)

    def sample_fields(self, path: Path, content_key: str, rows: int) -> tuple[bool, dict[str, int]]:
        try:
            with _source(path) as src:
                names = field_names(_open(src)[0].schema)
        except ERRORS:
            return True, {}
        return content_key in names, {k: int(v) for k, v in names.items()}

    def rows(self, path: Path) -> int:
        with _source(path) as src:
            reader, is_file = _open(src)
            return sum(b.num_rows for b in _batches(reader, is_file))

    def write_mix(self, src: Path, tmp: Path, content_key: str, drop: set[int], rejected: set[int], cut) -> Counter:
        counts: Counter = Counter()
        with _source(src) as source:
            reader, is_file = _open(source)
            schema = reader.schema
            new = pa.ipc.new_file if is_file else pa.ipc.new_stream
            with pa.OSFile(str(tmp), "wb") as sink, new(sink, schema) as w:
                start = 0
                for batch in _batches(reader, is_file):
                    for _, part in bounded_slices(batch):  # a dictionary column decoded a bounded slice at a time
                        out = filter_table(pa.Table.from_batches([part], schema), start, content_key, drop, rejected,
                                           cut, counts)
                        start += part.num_rows
                        if out.num_rows:
                            w.write_table(out)
        return counts
