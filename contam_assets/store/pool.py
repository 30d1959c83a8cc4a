"""Training pool: shard discovery and robust reading.

A pool is a folder of `.json` / `.jsonl` shards, plain or compressed (`.gz`, `.zst`,
`.zstd`, `.bz2`, `.xz`: decon's set).  A dotted content key (`metadata.text`) names a
nested field, as in decon.  Every line is one document; a line that cannot be used
(not UTF-8, malformed JSON, no content key, empty text, too large) is returned as a
:class:`Reject` with its raw bytes (a too-large line: its first KiB; the line itself is
never held), so it is counted and kept for review instead of being lost.  A stream that
breaks (truncated or corrupt compression) ends with a :class:`StreamFailure`, never
silently: the shard is then incomplete.

The listing (:func:`list_pool`) reports everything it does not read — hidden files,
other suffixes, unreadable files and folders, FIFOs and other special files, dangling
symlinks, symlinks that leave the pool (not followed unless asked), loops — by name.
A file name that is not valid UTF-8 gets a shard key with its bytes escaped
(``caf\xe9.jsonl``); :func:`shard_path` maps a key back to the file.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import orjson
import xxhash

from contam_assets.detector.compression import (  # noqa: F401  (open_writer: part of this module's API)
    DATA_SUFFIXES,
    STREAM_ERRORS,
    NotRegularFile,
    StreamError,
    file_kind,
    open_binary,
    open_regular,
    open_writer,
)

SHARD_SUFFIXES = DATA_SUFFIXES  # .json / .jsonl, plain or .gz .zst .zstd .bz2 .xz (decon's set)
BOM = b"\xef\xbb\xbf"
REJECT_PREFIX = 1024  # bytes of a too-large line kept for the rejected file
DRAIN = 1 << 20  # bytes read at a time while skipping the rest of a too-large line


def safe_text(s: str | None) -> str | None:
    """A string that encodes as UTF-8: lone surrogates (JSON "\\udfff") become their escape ``\\udfff``."""
    if s is None:
        return None
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "backslashreplace").decode("utf-8")


@dataclass
class Document:
    line: int
    doc_id: str
    source: str | None
    text: str
    n_bytes: int
    raw: bytes
    offset: int = -1  # where its line starts in the (decompressed) shard, as read_shard read it (-1: not known)


@dataclass
class Reject:
    line: int
    reason: str
    raw: bytes  # the line (a too-large line: its first REJECT_PREFIX bytes)

    def to_json(self) -> dict:
        try:
            raw_text, encoding = self.raw.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            raw_text, encoding = base64.b64encode(self.raw).decode("ascii"), "base64"
        return {"line": self.line, "reason": self.reason, "encoding": encoding, "raw": raw_text}


def is_shard(path: Path) -> bool:
    return path.is_file() and path.name.endswith(SHARD_SUFFIXES) and not path.name.startswith(".")


def shard_key(rel: str) -> str:
    """The shard key of a relative path: the path itself, or with undecodable bytes escaped (``\\xe9``)."""
    raw = os.fsencode(rel)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("utf-8", "backslashreplace")


_ESCAPED = re.compile(rb"\\x([0-9a-f]{2})")


def shard_path(pool_dir: Path, key: str) -> Path:
    """The file of a shard key (see :func:`shard_key`)."""
    p = Path(pool_dir) / key
    if "\\x" not in key or os.path.lexists(p):
        return p
    raw = _ESCAPED.sub(lambda m: bytes([int(m.group(1), 16)]), key.encode("utf-8"))
    return Path(pool_dir) / os.fsdecode(raw)


@dataclass
class PoolEntry:
    path: str  # relative to the pool, POSIX style (undecodable bytes escaped)
    reason: str


@dataclass
class PoolListing:
    shards: list[str]  # shard keys, sorted
    skipped: list[PoolEntry]  # everything else in the pool, with the reason it is not read
    paths: dict[str, Path] = field(default_factory=dict)  # shard key -> the file to open


SKIP_SUFFIX = "not a .json/.jsonl file (plain, .gz, .zst, .zstd, .bz2, .xz)"


def list_pool(pool_dir: Path, follow_symlinks: bool = False) -> PoolListing:
    """Every entry under the pool: the shards, and the rest with the reason each is not read.

    Symlinks are followed when they stay inside the pool; one that leads outside is
    reported as ``outside_pool`` (``follow_symlinks`` reads it).  Nothing is opened here.
    """
    pool_dir = Path(pool_dir)
    listing = PoolListing([], [])
    if not pool_dir.is_dir():
        return listing
    root = os.path.realpath(pool_dir)

    def skip(rel: str, reason: str) -> None:
        listing.skipped.append(PoolEntry(shard_key(rel), reason))

    def walk(folder: str, rel: str, seen: frozenset) -> None:
        try:
            entries = sorted(os.scandir(folder), key=lambda e: os.fsencode(e.name))
        except OSError as exc:
            skip(rel or ".", f"unreadable_folder ({exc.strerror or exc})")
            return
        for e in entries:
            r = f"{rel}/{e.name}" if rel else e.name
            if e.name.startswith("."):
                skip(r, "hidden")
                continue
            if e.is_symlink():
                target = os.path.realpath(e.path)
                if not os.path.exists(target):
                    skip(r, "dangling_symlink")
                    continue
                if not (target == root or target.startswith(root + os.sep)) and not follow_symlinks:
                    skip(r, "outside_pool (a symlink to a path outside the pool; --follow-symlinks reads it)")
                    continue
            try:
                st = os.stat(e.path)
            except OSError as exc:
                skip(r, f"unreadable ({exc.strerror or exc})")
                continue
            if stat.S_ISDIR(st.st_mode):
                real = os.path.realpath(e.path)
                if real in seen:
                    skip(r, "symlink_loop")
                else:
                    walk(e.path, r, seen | {real})
            elif not e.name.endswith(SHARD_SUFFIXES):
                skip(r, SKIP_SUFFIX)
            elif not stat.S_ISREG(st.st_mode):
                skip(r, f"not_a_regular_file ({file_kind(st.st_mode)})")
            elif not os.access(e.path, os.R_OK):
                skip(r, "unreadable (permission denied)")
            else:
                key = shard_key(r)
                listing.shards.append(key)
                listing.paths[key] = Path(e.path)

    walk(str(pool_dir), "", frozenset({root}))
    listing.shards.sort()
    return listing


def check_shard(pool_dir: Path, key: str, follow_symlinks: bool = False) -> tuple[Path | None, str | None]:
    """(the file, None) when the shard key names a readable regular file inside the pool, else (None, why)."""
    path = shard_path(pool_dir, key)
    root = os.path.realpath(pool_dir)
    if not os.path.lexists(path):
        return None, "not found in the pool"
    real = os.path.realpath(path)
    if not os.path.exists(real):
        return None, "dangling_symlink"
    if not (real.startswith(root + os.sep)) and not follow_symlinks:
        return None, "outside_pool (a symlink to a path outside the pool; --follow-symlinks reads it)"
    try:
        st = os.stat(path)
    except OSError as exc:
        return None, f"unreadable ({exc.strerror or exc})"
    if not stat.S_ISREG(st.st_mode):
        return None, f"not_a_regular_file ({file_kind(st.st_mode)})"
    if not os.access(path, os.R_OK):
        return None, "unreadable (permission denied)"
    return path, None


def list_shards(pool_dir: Path, follow_symlinks: bool = False) -> list[str]:
    """Shard keys (paths relative to the pool, POSIX style), sorted."""
    return list_pool(pool_dir, follow_symlinks).shards


def shard_fingerprint(path: Path) -> str:
    """Cheap content identity of a shard (size + mtime + xxhash of the first and last MiB)."""
    st = path.stat()
    h = xxhash.xxh3_64()
    with open_regular(path) as fh:
        h.update(fh.read(1 << 20))
        if st.st_size > (2 << 20):
            fh.seek(-(1 << 20), io.SEEK_END)
            h.update(fh.read(1 << 20))
    return f"{st.st_size}-{h.hexdigest()}"


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
    doc_id = safe_text(str(doc_id)) if doc_id is not None else f"{shard}:{line}"
    source = obj.get("source")
    return Document(line=line, doc_id=doc_id, source=safe_text(str(source)) if source is not None else None,
                    text=text, n_bytes=len(body), raw=body)


@dataclass
class StreamFailure:
    """The stream of a shard broke after `line` lines (truncated or corrupt compression, or a read error)."""

    line: int  # lines read before the failure (the next line's number)
    kind: str  # truncated | corrupt | read_error
    detail: str
    offset: int | None  # compressed byte offset the decoder had reached (None: unknown)

    @property
    def reason(self) -> str:
        where = f" at compressed byte {self.offset:,}" if self.offset is not None else ""
        return f"{self.kind}{where} after line {self.line}: {self.detail}"


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
