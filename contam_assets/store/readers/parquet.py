"""Parquet units (`.parquet`): pyarrow's ParquetFile, batches of rows with column projection.

A scan reads only the content column (its top level, for a dotted struct field), ``id`` and ``source``
(columns.py).  The mix of a Parquet unit is a Parquet file with the input's schema (and its metadata),
its compression and one row group per input row group, the removed rows left out; a row group that decodes to
more than BATCH_BYTES is written as several of about that size.  String and binary columns are read as stored,
dictionary-encoded, and decoded a bounded slice of rows at a time (columns.bounded_slices): a file of a few KB whose
dictionary holds one long string repeated in every row is never expanded whole.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from contam_assets.store.documents import Document, Reject, StreamFailure
from contam_assets.store.location import open_unit
from contam_assets.store.readers.columns import (
    BATCH,
    BATCH_BYTES,
    bounded_slices,
    columns_for,
    documents_of,
    field_names,
    filter_table,
)

ERRORS = (OSError, EOFError, pa.ArrowException)


def open_source(path: Path | str):
    """The unit opened for reading: a local regular file, or an object of a remote pool by its URL (``s3://…``: the
    reads are range requests of fsspec's file, so only the footer and the column chunks read are fetched)."""
    return open_unit(path, ranges=True)  # pyarrow asks for exact ranges


def batch_rows(row_group: pq.RowGroupMetaData) -> int:
    """Rows per batch for one row group: about BATCH_BYTES of (uncompressed) data, BATCH rows at most, 1 at least;
    a file of huge rows is read a few rows at a time however small it is compressed."""
    per_row = row_group.total_byte_size / max(1, row_group.num_rows)
    return max(1, min(BATCH, int(BATCH_BYTES // max(1.0, per_row))))


def _stored_kind(t: pa.DataType) -> bool:
    return any(f(t) for f in (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary, pa.types.is_large_binary))


def _as_stored(fh, content_key: str | None) -> pq.ParquetFile:
    """The file with its content, id and source string columns (``content_key`` None: every string and binary
    column) kept dictionary-encoded as stored: a huge value repeated in many rows (a few bytes on disk) is never
    expanded before its size is checked."""
    schema = pq.ParquetFile(fh).schema_arrow
    fh.seek(0)
    names = schema.names if content_key is None else columns_for(schema.names, content_key)
    return pq.ParquetFile(fh, read_dictionary=[c for c in names if _stored_kind(schema.field(c).type)])


def _pieces(pf: pq.ParquetFile, i: int) -> Iterator[pa.RecordBatch]:
    """Row group ``i`` in slices of about BATCH_BYTES decoded (columns.bounded_slices), in row order."""
    for batch in pf.iter_batches(batch_size=batch_rows(pf.metadata.row_group(i)), row_groups=[i]):
        for _, part in bounded_slices(batch):
            yield part


def copy_rows(src: Path, dst: Path, row_groups: list[int] | None = None, content_key: str = "text",
              drop: set[int] = frozenset(), rejected: set[int] = frozenset(), cut=None) -> Counter:
    """``src`` (its ``row_groups``, all by default) copied to ``dst`` with its schema and compression, without the
    dropped and rejected rows (numbered across the row groups copied); rows are decoded and written a bounded slice
    at a time, one output row group per input row group unless it decodes to more than BATCH_BYTES."""
    counts: Counter = Counter()
    with open_source(src) as fh:
        schema = pq.ParquetFile(fh).schema_arrow
        fh.seek(0)
        pf = _as_stored(fh, None)
        meta = pf.metadata
        compression = meta.row_group(0).column(0).compression if meta.num_row_groups and meta.num_columns else "NONE"
        with pq.ParquetWriter(dst, schema, compression=None if compression == "UNCOMPRESSED" else compression.lower()) as w:
            start = 0
            for i in range(meta.num_row_groups) if row_groups is None else row_groups:
                held: list[pa.Table] = []
                size, wrote = 0, False
                for part in _pieces(pf, i):
                    out = filter_table(pa.Table.from_batches([part]), start, content_key, drop, rejected, cut, counts)
                    start += part.num_rows
                    if not out.num_rows:
                        continue
                    out = out.cast(schema)  # this slice decoded, no more
                    if held and size + out.nbytes > BATCH_BYTES:
                        w.write_table(pa.concat_tables(held), row_group_size=sum(t.num_rows for t in held))
                        held, size, wrote = [], 0, True
                    held.append(out)
                    size += out.nbytes
                if held or not wrote:  # a row group whose rows all went is kept, empty
                    rows = sum(t.num_rows for t in held)
                    w.write_table(pa.concat_tables(held) if held else schema.empty_table(), row_group_size=max(1, rows))
    return Counter({**{k: v for k, v in counts.items() if k != "read"}, "read": counts["read"]})  # as one pass counts


class ParquetReader:
    name = "parquet"
    suffixes = (".parquet",)

    def read(self, path: Path, shard: str, content_key: str = "text",
             max_doc_bytes: int = 8 << 20) -> Iterator[Document | Reject | StreamFailure]:
        line = 0
        try:
            with open_source(path) as fh:
                pf = _as_stored(fh, content_key)
                cols = columns_for(pf.schema_arrow.names, content_key)
                for i in range(pf.metadata.num_row_groups):
                    size = batch_rows(pf.metadata.row_group(i))
                    for batch in pf.iter_batches(batch_size=size, row_groups=[i], columns=cols):
                        yield from documents_of(batch, line, shard, content_key, max_doc_bytes)
                        line += batch.num_rows
        except ERRORS as exc:
            yield StreamFailure(line, "read_error", f"{type(exc).__name__}: {exc}", None)

    def sample_fields(self, path: Path, content_key: str, rows: int) -> tuple[bool, dict[str, int]]:
        """(the schema has the content column or struct field, every field -> 1 if it holds strings else 0)."""
        try:
            with open_source(path) as fh:
                names = field_names(pq.ParquetFile(fh).schema_arrow)
        except ERRORS:
            return True, {}  # unreadable: the scan reports it
        return content_key in names, {k: int(v) for k, v in names.items()}

    def rows(self, path: Path) -> int:
        with open_source(path) as fh:
            return pq.ParquetFile(fh).metadata.num_rows

    def write_mix(self, src: Path, tmp: Path, content_key: str, drop: set[int], rejected: set[int], cut) -> Counter:
        """Copy ``src`` to ``tmp`` without the dropped and rejected rows (span removal: the text column rewritten)."""
        return copy_rows(src, tmp, None, content_key, drop, rejected, cut)
