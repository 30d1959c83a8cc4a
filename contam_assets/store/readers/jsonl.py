"""JSON / JSONL units, plain or compressed (`.gz`, `.zst`, `.zstd`, `.bz2`, `.xz`: decon's set): one document a line.

A line that cannot be used (not UTF-8, malformed JSON, no content key, empty text, too large) is a
:class:`Reject` with its raw bytes (a too-large line: its first KiB; the line itself is never held).
A stream that breaks (truncated or corrupt compression) ends with a :class:`StreamFailure`.  This is
the project's fastest path (orjson, one pass, no copy of a line); the cached token streams and the
byte-level rescans (rescan/incremental.py) exist for this format only.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Iterator

import orjson

from contam_assets.store.compression import DATA_SUFFIXES, StreamError, open_binary
from contam_assets.store.documents import PLAIN as _PLAIN
from contam_assets.store.documents import Document, Reject, StreamFailure, content_of, safe_text

BOM = b"\xef\xbb\xbf"
REJECT_PREFIX = 1024  # bytes of a too-large line kept for the rejected file
DRAIN = 1 << 20  # bytes read at a time while skipping the rest of a too-large line
SAMPLE_BYTES = 4 << 20  # bytes of a unit the door reads at most


def parse_line(raw: bytes, line: int, shard: str, content_key: str, max_doc_bytes: int) -> Document | Reject:
    if line == 0 and raw.startswith(BOM):
        raw = raw[len(BOM):]  # beyond decon: a UTF-8 byte-order mark before the first line is not content
    body = raw.rstrip(b"\r\n")
    if len(body) > max_doc_bytes:
        return Reject(line, f"too_large ({len(body)} bytes > {max_doc_bytes})", body)
    if not body or body.isspace():
        return Reject(line, "empty_line", body)
    # Fast path: orjson parses and checks UTF-8 in one go.  Its result is used only where it
    # is certain to equal json's (an object whose content is a non-blank string and whose id
    # and source are absent, strings or small integers); everything else, including every
    # error, goes through the plain path below, whose values and reject reasons are the
    # reference.  (orjson reads integers beyond 64 bits as floats and refuses NaN.)
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        obj = None
    if type(obj) is dict:
        text, doc_id, source = content_of(obj, content_key), obj.get("id"), obj.get("source")
        if type(text) is str and not (text.isspace() or not text) and type(doc_id) in _PLAIN and type(source) in _PLAIN:
            return Document(line=line, doc_id=safe_text(str(doc_id)) if doc_id is not None else f"{shard}:{line}",
                            source=safe_text(str(source)) if source is not None else None, text=text, n_bytes=len(body),
                            raw=body)
    return parse_line_plain(body, line, shard, content_key)


def parse_line_plain(body: bytes, line: int, shard: str, content_key: str) -> Document | Reject:
    """The reference parser (json module) of a line that is neither too large nor blank."""
    try:
        s = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Reject(line, f"not_utf8 (byte {exc.start})", body)
    try:
        obj = json.loads(s)
    except RecursionError:
        return Reject(line, "malformed_json (nested too deeply)", body)
    except json.JSONDecodeError as exc:
        return Reject(line, f"malformed_json ({exc.msg} at {exc.pos})", body)
    if not isinstance(obj, dict):
        return Reject(line, "not_an_object", body)
    text = content_of(obj, content_key)
    if text is None:
        return Reject(line, f"missing_content_key ({content_key!r})", body)
    if not isinstance(text, str):
        return Reject(line, f"content_not_a_string ({type(text).__name__})", body)
    if not text.strip():
        return Reject(line, "empty_text", body)
    doc_id = obj.get("id")
    doc_id = safe_text(str(doc_id)) if doc_id is not None else f"{shard}:{line}"
    source = obj.get("source")
    return Document(line=line, doc_id=doc_id, source=safe_text(str(source)) if source is not None else None,
                    text=text, n_bytes=len(body), raw=body)


def iter_lines(fh: io.BufferedIOBase, max_bytes: int, where: list[int] | None = None) -> Iterator[tuple[bytes, int | None]]:
    """(line, None) for each line of a stream; (first REJECT_PREFIX bytes, size) for a line over `max_bytes`.

    A line is never held beyond max_bytes + 2 bytes: the rest of a too-large line is read and dropped.
    ``where`` (a one-item list): set to the byte offset at which each yielded line starts, before it is yielded.
    """
    limit = max_bytes + 2  # a body of max_bytes plus "\r\n"
    pos = 0  # bytes read before this line
    while True:
        line = fh.readline(limit)
        if not line:
            return
        if where is not None:
            where[0] = pos
        if len(line) < limit or line.endswith(b"\n"):
            pos += len(line)
            yield line, None
            continue
        size, prefix = len(line), line[:REJECT_PREFIX]
        while not line.endswith(b"\n"):
            line = fh.readline(DRAIN)
            if not line:
                break
            size += len(line)
        pos += size
        yield prefix, size - (2 if line.endswith(b"\r\n") else 1 if line.endswith(b"\n") else 0)


def read_shard(path: Path, shard: str, content_key: str = "text",
               max_doc_bytes: int = 8 << 20) -> Iterator[Document | Reject | StreamFailure]:
    """Documents and rejects of one shard, in line order; a :class:`StreamFailure` last when the stream broke."""
    line = 0
    where = [0]
    try:
        with open_binary(path) as fh:
            for raw, size in iter_lines(fh, max_doc_bytes, where):
                if size is not None:
                    yield Reject(line, f"too_large ({size} bytes > {max_doc_bytes})", raw)
                else:
                    item = parse_line(raw, line, shard, content_key, max_doc_bytes)
                    if type(item) is Document:
                        item.offset = where[0]
                    yield item
                line += 1
    except StreamError as exc:
        yield StreamFailure(line, exc.kind, exc.detail, exc.offset)
    except (OSError, EOFError) as exc:
        yield StreamFailure(line, "read_error", f"{type(exc).__name__}: {exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}", None)


class JsonlReader:
    """The JSON / JSONL reader (see the module's doc)."""

    name = "jsonl"
    suffixes = DATA_SUFFIXES

    def read(self, path: Path, shard: str, content_key: str = "text",
             max_doc_bytes: int = 8 << 20) -> Iterator[Document | Reject | StreamFailure]:
        return read_shard(path, shard, content_key, max_doc_bytes)

    def sample_fields(self, path: Path, content_key: str, rows: int) -> tuple[bool, dict[str, int]]:
        """(a sampled line holds the content key, every top-level key seen -> characters of string values)."""
        keys: dict[str, int] = {}
        seen = 0
        try:
            with open_binary(path) as fh:
                for n, (raw, size) in enumerate(iter_lines(fh, SAMPLE_BYTES)):
                    if n >= rows:
                        break
                    try:
                        obj = orjson.loads(raw)
                    except orjson.JSONDecodeError:
                        continue
                    if type(obj) is not dict:
                        continue
                    seen += 1
                    if content_of(obj, content_key) is not None:
                        return True, keys
                    for k, v in obj.items():
                        keys[k] = keys.get(k, 0) + (len(v) if isinstance(v, str) else 0)
        except (StreamError, OSError, EOFError):
            return True, keys  # a broken stream is the scan's to report, per line
        return not seen, keys  # no JSON object at all: the scan counts its lines as rejects
