"""Training pool: shard discovery and robust reading.

A pool is a folder of `.json` / `.jsonl` shards, plain or compressed (`.gz`, `.zst`,
`.zstd`, `.bz2`, `.xz`: decon's set).  A dotted content key (`metadata.text`) names a
nested field, as in decon.  Every line
is one document; a line that cannot be used (not UTF-8, malformed JSON, no
content key, empty text, too large) is returned as a :class:`Reject` with its
raw bytes, so it is counted and kept for review instead of being lost.
"""

from __future__ import annotations

import base64
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import orjson
import xxhash

from contam_assets.detector.compression import DATA_SUFFIXES, STREAM_ERRORS, open_binary, open_writer  # noqa: F401

SHARD_SUFFIXES = DATA_SUFFIXES  # .json / .jsonl, plain or .gz .zst .zstd .bz2 .xz (decon's set)


@dataclass
class Document:
    line: int
    doc_id: str
    source: str | None
    text: str
    n_bytes: int
    raw: bytes


@dataclass
class Reject:
    line: int
    reason: str
    raw: bytes

    def to_json(self) -> dict:
        try:
            raw_text, encoding = self.raw.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            raw_text, encoding = base64.b64encode(self.raw).decode("ascii"), "base64"
        return {"line": self.line, "reason": self.reason, "encoding": encoding, "raw": raw_text}


def is_shard(path: Path) -> bool:
    return path.is_file() and path.name.endswith(SHARD_SUFFIXES) and not path.name.startswith(".")


@dataclass
class PoolEntry:
    path: str  # relative to the pool, POSIX style
    reason: str


@dataclass
class PoolListing:
    shards: list[str]  # shard keys, sorted
    skipped: list[PoolEntry]  # everything else in the pool, with the reason it is not scanned


def list_pool(pool_dir: Path) -> PoolListing:
    """Every file under the pool: the shards, and the others with the reason each is skipped."""
    pool_dir = Path(pool_dir)
    shards: list[str] = []
    skipped: list[PoolEntry] = []
    if not pool_dir.is_dir():
        return PoolListing(shards, skipped)
    for root, dirs, names in os.walk(pool_dir):
        dirs.sort()
        rel_root = Path(root).relative_to(pool_dir)
        for name in sorted(names):
            rel = (rel_root / name).as_posix()
            if name.startswith("."):
                skipped.append(PoolEntry(rel, "hidden file"))
            elif not name.endswith(SHARD_SUFFIXES):
                skipped.append(PoolEntry(rel, "not a .json/.jsonl file (plain, .gz, .zst, .zstd, .bz2, .xz)"))
            elif not (Path(root) / name).is_file():
                skipped.append(PoolEntry(rel, "not a regular file"))
            else:
                shards.append(rel)
    return PoolListing(sorted(shards), skipped)


def list_shards(pool_dir: Path) -> list[str]:
    """Shard keys (paths relative to the pool, POSIX style), sorted."""
    return list_pool(pool_dir).shards


def shard_fingerprint(path: Path) -> str:
    """Cheap content identity of a shard (size + mtime + xxhash of the first and last MiB)."""
    st = path.stat()
    h = xxhash.xxh3_64()
    with open(path, "rb") as fh:
        h.update(fh.read(1 << 20))
        if st.st_size > (2 << 20):
            fh.seek(-(1 << 20), io.SEEK_END)
            h.update(fh.read(1 << 20))
    return f"{st.st_size}-{h.hexdigest()}"


def parse_line(raw: bytes, line: int, shard: str, content_key: str, max_doc_bytes: int) -> Document | Reject:
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
            return Document(line=line, doc_id=str(doc_id) if doc_id is not None else f"{shard}:{line}",
                            source=str(source) if source is not None else None, text=text, n_bytes=len(body), raw=body)
    return parse_line_plain(body, line, shard, content_key)


_PLAIN = (str, int, type(None))


def content_of(obj: dict, key: str):
    """The value at ``key``; a dotted key walks nested objects (decon's get_nested_json_val). None if absent."""
    if "." not in key:
        return obj.get(key)
    cur = obj
    for part in key.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


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
    doc_id = str(doc_id) if doc_id is not None else f"{shard}:{line}"
    source = obj.get("source")
    return Document(line=line, doc_id=doc_id, source=str(source) if source is not None else None,
                    text=text, n_bytes=len(body), raw=body)


def read_shard(path: Path, shard: str, content_key: str = "text", max_doc_bytes: int = 8 << 20) -> Iterator[Document | Reject]:
    """Documents and rejects of one shard, in line order."""
    line = -1
    try:
        with open_binary(path) as fh:
            for line, raw in enumerate(fh):
                yield parse_line(raw, line, shard, content_key, max_doc_bytes)
    except STREAM_ERRORS as exc:
        # A truncated or corrupt compressed file: everything read so far stands, the rest is reported.
        yield Reject(line + 1, f"unreadable_rest_of_shard ({type(exc).__name__}: {exc})", b"")
