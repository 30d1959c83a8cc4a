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

import io
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import xxhash

from contam_assets.store.compression import (  # noqa: F401  (open_writer: part of this module's API)
    DATA_SUFFIXES,
    STREAM_ERRORS,
    NotRegularFile,
    StreamError,
    file_kind,
    open_binary,
    open_regular,
    open_writer,
)
from contam_assets.store.documents import (  # noqa: F401  (part of this module's API)
    Document,
    Reject,
    StreamFailure,
    content_of,
    safe_text,
)
from contam_assets.store.location import (
    Location,
    StoreRoot,
    hf_blobs,
    is_url,
    matches,
    remember_listing,
    remote_files,
    resolve,
    unit_info,
    version_ns,
)
from contam_assets.store.mirror import key_skips, local_rel
from contam_assets.store.readers import FORMATS, UNIT_SUFFIXES, read_unit
from contam_assets.store.readers.jsonl import (  # noqa: F401  (part of this module's API)
    BOM,
    REJECT_PREFIX,
    iter_lines,
    parse_line,
    parse_line_plain,
)

SHARD_SUFFIXES = UNIT_SUFFIXES  # every format a reader is registered for (store/readers)


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
    """The file of a shard key (see :func:`shard_key`), in a pool or in an output folder: the key's own path, else
    its bounded local name (store/location.local_rel: a key with a part too long for a file name).  In a remote pool
    (a StoreRoot): the object's URL (the root itself when the pool is that one object)."""
    if isinstance(pool_dir, StoreRoot) or is_url(pool_dir):
        root = StoreRoot(str(pool_dir))
        return root if _single_object(root, key) else root / key
    p = Path(pool_dir) / key
    if not os.path.lexists(p) and local_rel(key) != key:
        return Path(pool_dir) / local_rel(key)
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
    paths: dict[str, Path] = field(default_factory=dict)  # shard key -> the file to open (a remote pool: its URL)
    listed: dict[str, tuple[int, int]] = field(default_factory=dict)  # a remote pool: key -> (size, version_ns)

    def stat(self, key: str) -> tuple[int, int]:
        """(size, mtime_ns) of a listed shard: a remote object's as listed (its version for the mtime), a local
        file's stat now.  OSError when a local file is gone."""
        if key in self.listed:
            return self.listed[key]
        st = os.stat(self.paths[key])
        return st.st_size, st.st_mtime_ns


def _single_object(root: StoreRoot, key: str) -> bool:
    """A remote pool given as one object (``s3://bucket/pool/a.jsonl``): its one key is the object's name."""
    return "/" not in key and key == root.name and key.endswith(SHARD_SUFFIXES)


SKIP_SUFFIX = f"not a pool file ({FORMATS})"


# metadata files of a `datasets` save_to_disk folder (and of a DatasetDict above it): never units
DATASETS_METADATA = ("state.json", "dataset_info.json")
DATASETS_DICT = "dataset_dict.json"


def list_pool(pool_dir: Path, follow_symlinks: bool = False, pattern: str = "") -> PoolListing:
    """Every entry under the pool: the shards, and the rest with the reason each is not read.

    Symlinks are followed when they stay inside the pool (in a Hub cache snapshot: or lead into its
    repository's ``blobs/``); one that leads elsewhere is reported as ``outside_pool`` (``follow_symlinks``
    reads it).  Nothing is opened here.
    ``pattern`` (a glob relative to the pool, from store/location.py): only the files it matches
    belong to the pool (glob rules: ``**/`` any number of folders); the others are not listed at all.
    A folder holding ``state.json`` and ``dataset_info.json`` is a `datasets` save_to_disk folder:
    those (and a ``dataset_dict.json``) are skipped as its metadata, its ``.arrow`` files are units.
    """
    if isinstance(pool_dir, StoreRoot) or is_url(pool_dir):
        return list_remote(resolve(str(pool_dir), must_exist=False), pattern)
    pool_dir = Path(pool_dir)
    listing = PoolListing([], [])
    if not pool_dir.is_dir():
        return listing
    root = os.path.realpath(pool_dir)
    inside = _inside(root, hf_blobs(root))

    def skip(rel: str, reason: str) -> None:
        listing.skipped.append(PoolEntry(shard_key(rel), reason))

    def walk(folder: str, rel: str, seen: frozenset) -> None:
        try:
            entries = sorted(os.scandir(folder), key=lambda e: os.fsencode(e.name))
        except OSError as exc:
            skip(rel or ".", f"unreadable_folder ({exc.strerror or exc})")
            return
        names = {e.name for e in entries}
        meta = set(DATASETS_METADATA) if names >= set(DATASETS_METADATA) else set()
        meta |= {DATASETS_DICT} if DATASETS_DICT in names else set()
        for e in entries:
            r = f"{rel}/{e.name}" if rel else e.name
            if pattern and not e.is_dir() and not matches(r, pattern):
                continue
            if e.name in meta:
                skip(r, "datasets_metadata (a `datasets` save_to_disk file, not data)")
                continue
            if e.name.startswith("."):
                skip(r, "hidden")
                continue
            if e.is_symlink():
                target = os.path.realpath(e.path)
                if not os.path.exists(target):
                    skip(r, "dangling_symlink")
                    continue
                if not (target == root or inside(target)) and not follow_symlinks:
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


def list_remote(loc: Location, pattern: str = "") -> PoolListing:
    """A remote pool listed by its store (one listing call, retried on transient errors): every object its pattern
    admits is a shard (its key, its URL, its size and version: ETag or generation) or skipped with its reason
    (mirror.key_skips; a name no reader takes; a `datasets` metadata file).  Nothing is opened or copied."""
    if pattern and not loc.pattern:
        loc = Location(loc.protocol, loc.root, pattern, loc.spec, loc.scheme)
    listing = PoolListing([], [])
    files = remote_files(loc)
    root = StoreRoot(loc.url())
    skipped = key_skips(files)
    folders: dict[str, set[str]] = {}
    for rel in files:
        folders.setdefault(rel.rsplit("/", 1)[0] if "/" in rel else "", set()).add(rel.rsplit("/", 1)[-1])
    for rel, info in sorted(files.items()):
        name = rel.rsplit("/", 1)[-1]
        names = folders[rel.rsplit("/", 1)[0] if "/" in rel else ""]
        meta = (set(DATASETS_METADATA) if names >= set(DATASETS_METADATA) else set()) | {DATASETS_DICT}
        if rel in skipped:
            listing.skipped.append(PoolEntry(rel, skipped[rel]))
        elif name in meta:
            listing.skipped.append(PoolEntry(rel, "datasets_metadata (a `datasets` save_to_disk file, not data)"))
        elif not name.endswith(SHARD_SUFFIXES):
            listing.skipped.append(PoolEntry(rel, SKIP_SUFFIX))
        else:
            listing.shards.append(rel)
            listing.paths[rel] = shard_path(root, rel)
            listing.listed[rel] = (int(info.get("size") or 0), version_ns(info.get("etag") or ""))
    remember_listing(root, {str(listing.paths[k]): v for k, v in listing.listed.items()})  # no request per unit later
    return listing


def _inside(root: str, blobs: str | None):
    """A test: is a real path inside the pool (or, for a Hub cache snapshot, inside its repository's blobs/)?"""
    tops = [root] + ([blobs] if blobs else [])
    return lambda real: any(real.startswith(top + os.sep) for top in tops)


def check_shard(pool_dir: Path, key: str, follow_symlinks: bool = False) -> tuple[Path | None, str | None]:
    """(the file, None) when the shard key names a readable regular file inside the pool, else (None, why).  In a
    remote pool: (the object's URL, None) when the store has it (one request), else (None, why)."""
    path = shard_path(pool_dir, key)
    if isinstance(path, StoreRoot):
        try:
            unit_info(path)
        except FileNotFoundError:
            return None, "not found in the pool (gone from the store since it was listed)"
        except OSError as exc:
            return None, f"unreadable ({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''})"
        return path, None
    root = os.path.realpath(pool_dir)
    if not os.path.lexists(path):
        return None, "not found in the pool"
    real = os.path.realpath(path)
    if not os.path.exists(real):
        return None, "dangling_symlink"
    if not _inside(root, hf_blobs(root))(real) and not follow_symlinks:
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


def list_shards(pool_dir: Path, follow_symlinks: bool = False, pattern: str = "") -> list[str]:
    """Shard keys (paths relative to the pool, POSIX style), sorted."""
    return list_pool(pool_dir, follow_symlinks, pattern).shards


def unit_stat(path) -> tuple[int, int]:
    """(size, mtime_ns) of a unit: a local file's, or a remote object's size and version (store/location.unit_info)."""
    return unit_info(path)


def remote_fingerprint(size: int, version: int) -> str:
    """A remote object's fingerprint: its size and its version (store/location.version_ns of its ETag or generation)."""
    return f"{size}-v{version:x}"


def shard_fingerprint(path: Path) -> str:
    """Cheap content identity of a shard (size + mtime + xxhash of the first and last MiB).  A remote object: its size
    and a hash of its version (ETag or generation) as the store lists it; nothing of it is read."""
    if is_url(path):
        return remote_fingerprint(*unit_info(path))
    st = path.stat()
    h = xxhash.xxh3_64()
    with open_regular(path) as fh:
        h.update(fh.read(1 << 20))
        if st.st_size > (2 << 20):
            fh.seek(-(1 << 20), io.SEEK_END)
            h.update(fh.read(1 << 20))
    return f"{st.st_size}-{h.hexdigest()}"


def read_shard(path: Path, shard: str, content_key: str = "text",
               max_doc_bytes: int = 8 << 20) -> Iterator[Document | Reject | StreamFailure]:
    """Documents and rejects of one unit, in row order, by its format's reader; a StreamFailure last when it broke."""
    return read_unit(path, shard, content_key, max_doc_bytes)
