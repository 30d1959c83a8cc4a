"""Opening benchmark and training files in every compression decon reads, and knowing when one is broken.

`.gz`, `.zst` / `.zstd`, `.bz2` and `.xz` (stdlib gzip, bz2 and lzma, the zstandard
package); anything else is read as it is.  A reader never returns the bytes of a
broken stream as if they were the end of the file: a truncated or corrupt stream
raises :class:`StreamError` (with the compressed byte offset the decoder had reached)
as soon as the decoder knows — for gzip's CRC that is the end of the member, so
callers that copy data out (the mix) must read a shard to its end first.  zstandard's
own stream reader returns a truncated frame's bytes as if the file ended there, so
zstd frames are decoded here with the frame-end check.

Only regular files are opened, without blocking: a FIFO or device named like a shard
is refused (:class:`NotRegularFile`) instead of hanging the reader; a unit of a remote pool (a URL) is
streamed from its store (``open_regular`` and ``NotRegularFile`` live in store/location.py, with the URL-aware
``open_unit``; they are re-exported here).
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import zlib
from pathlib import Path

import zstandard

from contam_assets.store.location import (  # noqa: F401  (part of this module's API)
    NotRegularFile,
    file_kind,
    open_regular,
)

COMPRESSIONS = (".gz", ".zst", ".zstd", ".bz2", ".xz")
# decon's SUPPORTED_DATA_EXTENSIONS: JSON / JSONL, plain or compressed
DATA_SUFFIXES = tuple(f"{base}{c}" for base in (".jsonl", ".json") for c in ("",) + COMPRESSIONS)
CHUNK = 1 << 16  # compressed bytes fed to a decoder at a time


class StreamError(Exception):
    """A compressed stream is truncated or corrupt."""

    def __init__(self, kind: str, detail: str, offset: int):
        super().__init__(f"{kind} at compressed byte {offset:,}: {detail}")
        self.kind, self.detail, self.offset = kind, detail, offset  # kind: truncated | corrupt


# errors a reader raises on a file that cannot be read to its end
STREAM_ERRORS = (StreamError, OSError, EOFError)


def compression_of(name: str) -> str:
    """The compression suffix of a file name ('' for none)."""
    for c in COMPRESSIONS:
        if name.endswith(c):
            return c
    return ""


class _Checked(io.RawIOBase):
    """A decoder's output; its errors become StreamError with the compressed offset reached."""

    def __init__(self, inner, raw: io.BufferedReader):
        self._inner, self._raw = inner, raw

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        try:
            return self._inner.readinto(b)
        except EOFError as exc:
            raise StreamError("truncated", str(exc), self._raw.tell()) from None
        except (OSError, zlib.error, lzma.LZMAError, ValueError) as exc:
            raise StreamError("corrupt", f"{type(exc).__name__}: {exc}", self._raw.tell()) from None

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._raw.close()
            super().close()


class _Zstd(io.RawIOBase):
    """zstd frames, one after another; a file that ends inside a frame raises StreamError."""

    def __init__(self, raw: io.BufferedReader):
        self._raw = raw
        self._dctx = zstandard.ZstdDecompressor()
        self._dobj = self._dctx.decompressobj()
        self._out = b""  # decoded bytes not handed out yet, from self._pos on
        self._pos = 0
        self._in_frame = False  # input of the current frame seen
        self._done = False

    def readable(self) -> bool:
        return True

    def _feed(self, data: bytes) -> bytes:
        parts = []
        while data:
            try:
                parts.append(self._dobj.decompress(data))
            except zstandard.ZstdError as exc:
                raise StreamError("corrupt", f"ZstdError: {exc}", self._raw.tell()) from None
            self._in_frame = True
            if self._dobj.eof:  # the frame ended: what follows is the next frame
                data = self._dobj.unused_data
                self._dobj = self._dctx.decompressobj()
                self._in_frame = False
            else:
                data = b""
        return b"".join(parts)

    def readinto(self, b) -> int:
        while self._pos >= len(self._out) and not self._done:
            data = self._raw.read(CHUNK)
            if not data:
                self._done = True
                if self._in_frame:
                    raise StreamError("truncated", "the file ends inside a zstd frame", self._raw.tell())
                break
            self._out, self._pos = self._feed(data), 0
        n = min(len(b), len(self._out) - self._pos)
        b[:n] = self._out[self._pos:self._pos + n]
        self._pos += n
        return n

    def close(self) -> None:
        self._raw.close()
        super().close()


def open_binary(path: Path | str) -> io.BufferedIOBase:
    """A binary reader of the decompressed content of a regular file (StreamError when the stream breaks)."""
    c = compression_of(str(path))
    raw = open_regular(path)
    try:
        if c == ".gz":
            return io.BufferedReader(_Checked(gzip.GzipFile(fileobj=raw, mode="rb"), raw), CHUNK)
        if c in (".zst", ".zstd"):
            return io.BufferedReader(_Zstd(raw), CHUNK)
        if c == ".bz2":
            return io.BufferedReader(_Checked(bz2.BZ2File(raw, "rb"), raw), CHUNK)
        if c == ".xz":
            return io.BufferedReader(_Checked(lzma.LZMAFile(raw, "rb"), raw), CHUNK)
    except BaseException:
        raw.close()
        raise
    return raw


class _GzipWriter(gzip.GzipFile):
    """gzip at level 6 with no file name and a zero mtime in its header: the same lines give the same bytes
    (the file is written under a temporary name, at any time)."""

    def __init__(self, path: Path | str):
        raw = open(path, "wb")
        super().__init__(filename="", mode="wb", compresslevel=6, fileobj=raw, mtime=0)
        self.myfileobj = raw  # closed with the writer, as gzip.open's own file is


def open_writer(path: Path | str, like: str | None = None) -> io.BufferedIOBase:
    """A binary writer compressing as the file name (or the name `like`) implies."""
    c = compression_of(like or Path(path).name)
    if c == ".gz":
        return _GzipWriter(path)
    if c in (".zst", ".zstd"):
        return zstandard.ZstdCompressor(level=3).stream_writer(open(path, "wb"), closefd=True)
    if c == ".bz2":
        return bz2.open(path, "wb")
    if c == ".xz":
        return lzma.open(path, "wb")
    return open(path, "wb")


def open_text(path: Path | str) -> io.TextIOBase:
    """A UTF-8 text reader of the decompressed content (undecodable bytes replaced)."""
    return io.TextIOWrapper(open_binary(path), encoding="utf-8", errors="replace", newline="")
