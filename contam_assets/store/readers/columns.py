"""What the columnar readers (Parquet, Arrow IPC) share: a record batch's rows as documents, a table's rows
filtered and cut for the mix, and the door's look at a schema.

``content_key`` names a column; dots walk struct fields (``metadata.text``), as a dotted JSON key walks nested
objects.  The document id is the ``id`` column when there is one (as in JSONL), else ``<unit>:<row>``; ``source``
likewise.  A row is a document's "line": its position in the unit, counted from 0 across row groups and batches.
"""

from __future__ import annotations

from typing import Callable, Iterator

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from contam_assets.store.documents import Document, Reject, safe_text

BATCH = 4096  # rows taken from a unit at a time
REJECT_PREFIX = 1024


def columns_for(names: list[str], content_key: str) -> list[str]:
    """The columns a scan reads (projection): the content column's top level, id and source where present."""
    return [c for c in dict.fromkeys([content_key.split(".")[0], "id", "source"]) if c in names]


def field_names(schema: pa.Schema, prefix: str = "") -> dict[str, bool]:
    """Every column and struct field as a dotted name -> whether it holds strings."""
    out: dict[str, bool] = {}
    for f in schema:
        name = prefix + f.name
        if pa.types.is_struct(f.type):
            out.update(field_names(pa.schema(list(f.type)), name + "."))
        else:
            out[name] = pa.types.is_string(f.type) or pa.types.is_large_string(f.type) or pa.types.is_string_view(f.type)
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


def _reject_raw(row: dict) -> bytes:
    return orjson.dumps(row, default=str)[:REJECT_PREFIX]


def documents_of(batch: pa.RecordBatch, start: int, shard: str, content_key: str,
                 max_doc_bytes: int) -> Iterator[Document | Reject]:
    """The rows of one batch as documents (or counted rejects), numbered from ``start``."""
    n = batch.num_rows
    col = content_column(batch, content_key)
    names = batch.schema.names
    ids = batch.column("id").to_pylist() if "id" in names else None
    sources = batch.column("source").to_pylist() if "source" in names else None
    if col is None:
        for j in range(n):
            yield Reject(start + j, f"missing_content_key ({content_key!r})", _reject_raw({"id": ids[j] if ids else None}))
        return
    texts = col.to_pylist()
    is_text = pa.types.is_string(col.type) or pa.types.is_large_string(col.type) or pa.types.is_string_view(col.type)
    sizes = pc.binary_length(col).to_pylist() if is_text else [0] * n
    for j, text in enumerate(texts):
        line = start + j
        if text is None:
            yield Reject(line, f"missing_content_key ({content_key!r})", _reject_raw({"id": ids[j] if ids else None}))
            continue
        if not is_text:
            yield Reject(line, f"content_not_a_string ({type(text).__name__})", _reject_raw({content_key: text}))
            continue
        size = sizes[j]
        if size > max_doc_bytes:
            yield Reject(line, f"too_large ({size} bytes > {max_doc_bytes})", text.encode("utf-8", "replace")[:REJECT_PREFIX])
            continue
        if not text or text.isspace():
            yield Reject(line, "empty_text", _reject_raw({content_key: text}))
            continue
        doc_id = ids[j] if ids else None
        source = sources[j] if sources else None
        yield Document(line=line, doc_id=safe_text(str(doc_id)) if doc_id is not None else f"{shard}:{line}",
                       source=safe_text(str(source)) if source is not None else None, text=text, n_bytes=size, raw=b"")


def _with_content(table: pa.Table, content_key: str, values: list) -> pa.Table:
    """``table`` with its content column (or struct field) replaced by ``values``."""
    top, *rest = content_key.split(".")
    i = table.schema.get_field_index(top)
    old = table.column(top)
    if not rest:
        return table.set_column(i, table.schema.field(i), pa.array(values, type=old.type))
    struct = old.combine_chunks()

    def rebuild(arr: pa.StructArray, path: list[str], vals: list) -> pa.StructArray:
        children = []
        for k, f in enumerate(arr.type):
            child = arr.field(k)
            if f.name == path[0]:
                child = pa.array(vals, type=f.type) if len(path) == 1 else rebuild(child, path[1:], vals)
            children.append(child)
        return pa.StructArray.from_arrays(children, fields=list(arr.type), mask=arr.is_null() if arr.null_count else None)

    return table.set_column(i, table.schema.field(i), rebuild(struct, rest, values))


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
        col = content_column(out, content_key).to_pylist()
        for k, text in new_text.items():
            col[k] = text
        out = _with_content(out, content_key, col)
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
