"""Opening benchmark and training files in every compression decon reads.

`.gz`, `.zst` / `.zstd`, `.bz2` and `.xz` (stdlib bz2 and lzma, the zstandard package);
anything else is read as it is.  The reader of a compressed stream raises when the
stream is truncated or corrupt, at the point where it notices; callers decide what a
partly read file means (store/pool.py counts it).
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
from pathlib import Path

import zstandard

COMPRESSIONS = (".gz", ".zst", ".zstd", ".bz2", ".xz")
# decon's SUPPORTED_DATA_EXTENSIONS: JSON / JSONL, plain or compressed
DATA_SUFFIXES = tuple(f"{base}{c}" for base in (".jsonl", ".json") for c in ("",) + COMPRESSIONS)
# errors a decoder raises on a truncated or corrupt stream
STREAM_ERRORS = (OSError, EOFError, zstandard.ZstdError, lzma.LZMAError)


def compression_of(name: str) -> str:
    """The compression suffix of a file name ('' for none)."""
    for c in COMPRESSIONS:
        if name.endswith(c):
            return c
    return ""


def open_binary(path: Path | str) -> io.BufferedIOBase:
    """A binary reader of the decompressed content."""
    path = Path(path)
    c = compression_of(path.name)
    if c == ".gz":
        return gzip.open(path, "rb")
    if c in (".zst", ".zstd"):
        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(open(path, "rb"), closefd=True))
    if c == ".bz2":
        return bz2.open(path, "rb")
    if c == ".xz":
        return lzma.open(path, "rb")
    return open(path, "rb")


def open_writer(path: Path | str, like: str | None = None) -> io.BufferedIOBase:
    """A binary writer compressing as the file name (or the name `like`) implies."""
    c = compression_of(like or Path(path).name)
    if c == ".gz":
        return gzip.open(path, "wb", compresslevel=6)
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
