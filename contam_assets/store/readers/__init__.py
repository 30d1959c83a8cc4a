"""One reader per format a pool unit comes in, behind one interface, registered in :data:`READERS`.

A reader has ``name``, ``suffixes`` and:

- ``read(path, unit, content_key, max_doc_bytes)``: the unit's documents and counted rejects in row order
  (store/documents.py), a ``StreamFailure`` last when it could not be read to its end;
- ``sample_fields(path, content_key, rows)``: (whether the first ``rows`` rows, or the schema, hold the
  content key; the keys or columns seen), for the door (store/door.py);
- columnar readers also ``rows(path)`` and ``write_mix(src, tmp, content_key, drop, rejected, cut)``.

The pool listing (store/pool.py) takes a file as a unit when :func:`reader_for` knows its name.
"""

from __future__ import annotations

from pathlib import Path

from contam_assets.store.readers.arrow import ArrowReader
from contam_assets.store.readers.jsonl import JsonlReader
from contam_assets.store.readers.parquet import ParquetReader

READERS = (JsonlReader(), ParquetReader(), ArrowReader())
UNIT_SUFFIXES = tuple(s for r in READERS for s in r.suffixes)
FORMATS = ".json/.jsonl (plain, .gz, .zst, .zstd, .bz2, .xz), .parquet, .arrow/.feather/.ipc"


def reader_for(name: str):
    """The reader of a unit named ``name`` (its file name or key), or None."""
    best, n = None, 0
    for r in READERS:
        for s in r.suffixes:
            if name.endswith(s) and len(s) > n:
                best, n = r, len(s)
    return best


def is_jsonl(name: str) -> bool:
    """True for a JSON/JSONL unit: the byte-level paths (cached token streams, line offsets) apply to it."""
    return isinstance(reader_for(name), JsonlReader)


def read_unit(path: Path, unit: str, content_key: str = "text", max_doc_bytes: int = 8 << 20):
    """The documents of one unit, by its reader (JSONL when the name says nothing else)."""
    reader = reader_for(unit) or reader_for(Path(path).name) or READERS[0]
    return reader.read(path, unit, content_key, max_doc_bytes)
