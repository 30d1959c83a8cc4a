"""What the columnar readers (Parquet, Arrow IPC) share: a record batch's rows as documents, a table's rows
filtered and cut for the mix, and the door's look at a schema.

``content_key`` names a column; dots walk struct fields (``metadata.text``), as a dotted JSON key walks nested
objects.  The document id is the ``id`` column when there is one (as in JSONL), else ``<unit>:<row>``; ``source``
likewise.  A row is a document's "line": its position in the unit, counted from 0 across row groups and batches.
"""

from __future__ import annotations

from typing import Callable, Iterator

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from contam_assets.store.documents import BATCH_BYTES, Document, Reject, safe_text

BATCH = 4096  # rows taken from a unit at a time, at most (and about BATCH_BYTES decoded: bounded_slices)
REJECT_PREFIX = 1024


def columns_for(names: list[str], content_key: str) -> list[str]:
    """The columns a scan reads (projection): the content column's top level, id and source where present."""
    return [c for c in dict.fromkeys([content_key.split(".")[0], "id", "source"]) if c in names]


def is_text_type(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


def holds_text(t: pa.DataType) -> bool:
    """A string column, or a dictionary of strings (what pandas writes for a categorical)."""
    return is_text_type(t) or (pa.types.is_dictionary(t) and is_text_type(t.value_type))


def field_names(schema: pa.Schema, prefix: str = "") -> dict[str, bool]:
    """Every column and struct field as a dotted name -> whether it holds strings."""
    out: dict[str, bool] = {}
    for f in schema:
        name = prefix + f.name
        if pa.types.is_struct(f.type):
            out.update(field_names(pa.schema(list(f.type)), name + "."))
        else:
            out[name] = holds_text(f.type)
    return out


def has_field(schema: pa.Schema, content_key: str) -> bool:
    return content_key in field_names(schema)


def content_column(batch: pa.RecordBatch | pa.Table, content_key: str):
    """The content column (a struct field for a dotted key); None when the batch has no such field."""
    top, *rest = content_key.split(".")
    if top not in batch.schema.names:
        return None
    col = batch.column(top)
    if rest:
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        try:
            col = pc.struct_field(col, rest)
        except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError, TypeError):
            return None
    return col


def _value_bytes(col: pa.Array) -> np.ndarray | None:
    """Each row's decoded bytes of a (dictionary of) string or binary column, without decoding it; None for others."""
    dictionary = pa.types.is_dictionary(col.type)
    values = col.dictionary if dictionary else col
    t = values.type
    if not (is_text_type(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t)):
        return None
    try:
        lengths = pc.binary_length(values)
    except pa.ArrowNotImplementedError:  # a string view
        lengths = pc.binary_length(values.cast(pa.large_binary()))
    lengths = lengths.fill_null(0).to_numpy(zero_copy_only=False)
    if dictionary:
        idx = col.indices.fill_null(0).to_numpy(zero_copy_only=False)
        return lengths[idx] if len(lengths) else np.zeros(len(col), dtype=np.int64)
    return lengths


def row_bytes(batch: pa.RecordBatch | pa.Table) -> np.ndarray:
    """Each row's decoded size in bytes, summed over the columns: a dictionary column counts the values its rows
    expand to (a few bytes on disk can stand for megabytes), another column its buffers spread evenly over the rows."""
    n = batch.num_rows
    total = np.zeros(n, dtype=np.int64)
    for col in batch.columns:
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
        sizes = _value_bytes(col)
        if sizes is None:
            total += col.nbytes // max(1, n)
        else:
            total += sizes.astype(np.int64) + 8  # the value and its offset
    return total


def bounded_slices(batch: pa.RecordBatch | pa.Table, max_bytes: int | None = None,
                   max_rows: int = BATCH) -> Iterator[tuple[int, pa.RecordBatch | pa.Table]]:
    """(offset, slice) pieces of ``batch`` in order, each of at most ``max_rows`` rows and about ``max_bytes``
    (BATCH_BYTES) decoded (row_bytes; one row at least, however large): what a stage may decode and hold at once."""
    max_bytes = max_bytes or BATCH_BYTES
    sizes = np.cumsum(row_bytes(batch)) if batch.num_rows else np.zeros(0, dtype=np.int64)
    start, base = 0, 0
    while start < batch.num_rows:
        end = int(np.searchsorted(sizes, base + max_bytes, side="right"))
        end = min(max(end, start + 1), start + max_rows, batch.num_rows)
        yield start, batch.slice(start, end - start)
        base = int(sizes[end - 1])
        start = end


def _reject_raw(row: dict) -> bytes:
    return orjson.dumps(row, default=str)[:REJECT_PREFIX]


def _small_values(batch: pa.RecordBatch, name: str) -> list | None:
    """An id/source column as Python values, strings cut to REJECT_PREFIX bytes and decoded leniently (neither a
    huge nor an invalid UTF-8 id costs more than its prefix); None when the batch has no such column."""
    if name not in batch.schema.names:
        return None
    col = batch.column(name)
    dictionary = pa.types.is_dictionary(col.type)
    values = col.dictionary if dictionary else col
    if not (is_text_type(values.type) or pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type)):
        return col.to_pylist()
    cut = pc.binary_slice(values.cast(pa.large_binary()), 0, REJECT_PREFIX)
    cut = (cut.take(col.indices) if dictionary else cut).to_pylist()
    return [v.decode("utf-8", "replace") if v is not None else None for v in cut]


class _Content:
    """The content column seen as bytes without converting it: each row's size and null flag, a row's first bytes,
    and the bytes of chosen rows (a dictionary column decoded for those rows only)."""

    def __init__(self, col: pa.Array):
        self.col = col
        t = col.type
        self.dict = pa.types.is_dictionary(t) and is_text_type(t.value_type)
        self.is_text = self.dict or is_text_type(t)
        if self.dict:
            self.values = col.dictionary.cast(pa.large_binary())
            self.sizes = pc.binary_length(self.values).take(col.indices).to_pylist()
        elif self.is_text:
            self.values = col.cast(pa.large_binary())
            self.sizes = pc.binary_length(self.values).to_pylist()
        self.nulls = col.is_null().to_pylist()

    def prefix(self, j: int) -> bytes:
        k = self.col.indices[j].as_py() if self.dict else j
        return self.values[k].as_buffer()[:REJECT_PREFIX].to_pybytes()

    def take(self, rows: list[int]) -> list[str] | list[bytes]:
        """The rows' texts; their bytes instead when one of them is not UTF-8."""
        if rows[-1] - rows[0] + 1 == len(rows):
            part = self.col.slice(rows[0], len(rows))
        else:
            part = self.col.take(pa.array(rows, type=pa.int64()))
        if self.dict:
            part = part.cast(self.col.type.value_type)
        try:
            return part.to_pylist()
        except UnicodeDecodeError:
            return part.cast(pa.large_binary()).to_pylist()


def _groups(rows: list[int], sizes: list[int]) -> Iterator[list[int]]:
    """``rows`` in order, in groups of about BATCH_BYTES bytes at most (one row at least)."""
    group: list[int] = []
    total = 0
    for j in rows:
        if group and total + sizes[j] > BATCH_BYTES:
            yield group
            group, total = [], 0
        group.append(j)
        total += sizes[j]
    if group:
        yield group


def documents_of(batch: pa.RecordBatch, start: int, shard: str, content_key: str,
                 max_doc_bytes: int) -> Iterator[Document | Reject]:
    """The rows of one batch as documents (or counted rejects), numbered from ``start``.

    Sizes come first, from the Arrow buffers: only rows within ``max_doc_bytes`` become Python strings, about
    BATCH_BYTES at a time; a row over the limit is a ``too_large`` reject and one whose bytes are not UTF-8 (neither
    the Parquet nor the Arrow writer checks) an ``invalid_utf8`` reject, the row's first bytes kept as its raw."""
    n = batch.num_rows
    col = content_column(batch, content_key)
    ids = _small_values(batch, "id")
    sources = _small_values(batch, "source")
    if col is None:
        for j in range(n):
            yield Reject(start + j, f"missing_content_key ({content_key!r})", _reject_raw({"id": ids[j] if ids else None}))
        return
    c = _Content(col)
    ok = [j for j in range(n) if c.is_text and not c.nulls[j] and c.sizes[j] <= max_doc_bytes]
    groups = _groups(ok, c.sizes) if ok else iter(())
    fetched: dict[int, str | bytes] = {}
    for j in range(n):
        line = start + j
        if c.nulls[j]:
            yield Reject(line, f"missing_content_key ({content_key!r})", _reject_raw({"id": ids[j] if ids else None}))
            continue
        if not c.is_text:
            value = col[j].as_py()
            if isinstance(value, (bytes, str)):
                value = value[:REJECT_PREFIX]
            yield Reject(line, f"content_not_a_string ({type(value).__name__})", _reject_raw({content_key: value}))
            continue
        size = c.sizes[j]
        if size > max_doc_bytes:
            yield Reject(line, f"too_large ({size} bytes > {max_doc_bytes})", c.prefix(j))
            continue
        if j not in fetched:
            rows = next(groups)
            fetched = dict(zip(rows, c.take(rows)))
        text = fetched.pop(j)
        if isinstance(text, bytes):
            try:
                text = text.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield Reject(line, f"invalid_utf8 (byte {exc.start})", text[:REJECT_PREFIX])
                continue
        if not text or text.isspace():
            yield Reject(line, "empty_text", _reject_raw({content_key: text}))
            continue
        doc_id = ids[j] if ids else None
        source = sources[j] if sources else None
        yield Document(line=line, doc_id=safe_text(str(doc_id)) if doc_id is not None else f"{shard}:{line}",
                       source=safe_text(str(source)) if source is not None else None, text=text, n_bytes=size, raw=b"")


def _replaced(arr: pa.Array, new_text: dict[int, str]) -> pa.Array:
    """``arr`` with the rows in ``new_text`` replaced (Arrow kernels: the other rows never become Python strings)."""
    typ = arr.type
    plain = arr.cast(typ.value_type) if pa.types.is_dictionary(typ) else arr
    mask = pa.array([k in new_text for k in range(len(plain))], type=pa.bool_())
    out = pc.replace_with_mask(plain, mask, pa.array([new_text[k] for k in sorted(new_text)], type=plain.type))
    return out.cast(typ) if pa.types.is_dictionary(typ) else out


def _with_content(table: pa.Table, content_key: str, new_text: dict[int, str]) -> pa.Table:
    """``table`` with its content column (or struct field) rows in ``new_text`` replaced."""
    top, *rest = content_key.split(".")
    i = table.schema.get_field_index(top)
    old = table.column(top).combine_chunks()
    if not rest:
        return table.set_column(i, table.schema.field(i), _replaced(old, new_text))

    def rebuild(arr: pa.StructArray, path: list[str]) -> pa.StructArray:
        children = []
        for k, f in enumerate(arr.type):
            child = arr.field(k)
            if f.name == path[0]:
                child = _replaced(child, new_text) if len(path) == 1 else rebuild(child, path[1:])
            children.append(child)
        return pa.StructArray.from_arrays(children, fields=list(arr.type), mask=arr.is_null() if arr.null_count else None)

    return table.set_column(i, table.schema.field(i), rebuild(old, rest))


def filter_table(table: pa.Table, start: int, content_key: str, drop: set[int], rejected: set[int],
                 cut: Callable[[int, bytes], bytes | None] | None, counts: dict) -> pa.Table:
    """The rows of ``table`` (numbered from ``start``) the mix keeps: rejected and dropped rows left out, a dropped
    row that span removal cuts kept with its new text.  ``counts`` gets written / dropped / rejected / cut / read."""
    n = table.num_rows
    keep = []
    new_text: dict[int, str] = {}
    for j in range(n):
        line = start + j
        if line in rejected:
            counts["rejected"] += 1
            continue
        if line in drop:
            text = cut_text(table, j, content_key, cut, line) if cut is not None else None
            if text is None:
                counts["dropped"] += 1
                continue
            new_text[len(keep)] = text
            counts["cut"] += 1
        else:
            counts["written"] += 1
        keep.append(j)
    counts["read"] += n
    out = table.take(pa.array(keep, type=pa.int64())) if len(keep) < n else table
    if new_text:
        out = _with_content(out, content_key, new_text)
    return out


def cut_text(table: pa.Table, j: int, content_key: str, cut, line: int) -> str | None:
    """Span removal of one row: the cutter works on a JSON line ({content_key: text}); its new text, or None."""
    text = content_column(table.slice(j, 1), content_key).to_pylist()[0]
    if not isinstance(text, str):
        return None
    new = cut(line, orjson.dumps({content_key: text}))
    if new is None:
        return None
    return orjson.loads(new)[content_key]
