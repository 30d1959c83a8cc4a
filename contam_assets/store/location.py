"""Where a pool (or an output folder) is: the one place that turns ``--pool`` / ``--out`` into an fsspec filesystem
and a root.

A location is a folder, a single file, a glob (``pool/**/*.parquet``), or a URL: ``file://``, ``memory://``,
``s3://``, ``gs://``/``gcs://``, ``hf://``, ``az://``/``abfs://``.  :func:`resolve` parses and checks it and
raises :class:`LocationError` with one line (the scheme and what is missing: the package, the credentials, the
bucket or path).  A :class:`Location` holds no credentials and no open filesystem, so it pickles into worker
processes and Ray tasks; :meth:`Location.filesystem` builds the filesystem there from the store's standard
environment and config (``AWS_*`` and ``AWS_ENDPOINT_URL``, ``GOOGLE_APPLICATION_CREDENTIALS``, ``HF_TOKEN``,
``AZURE_STORAGE_*``).

A remote pool is read where it is: the listing is the store's own (:func:`remote_files`: each object's size and
version, its ETag or generation, so a changed object is a changed shard), and every stage opens a unit through
:func:`open_unit` (a path or a URL): JSON/JSONL streamed and decompressed as it arrives, Parquet and Arrow by
range requests (their footer and the columns read).  Nothing of the pool is copied to local disk.  A Hugging Face
Hub cache folder (``datasets--owner--name``) resolves to its current snapshot; its symlinks into the cache's
``blobs/`` are read.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import io
import os
import re
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from contam_assets import settings

# scheme -> (the fsspec protocol, the package that provides it, what its credentials come from)
SCHEMES = {
    "file": ("file", "", ""),
    "memory": ("memory", "", ""),
    "s3": ("s3", "s3fs", "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE (AWS_ENDPOINT_URL for another endpoint)"),
    "gs": ("gcs", "gcsfs", "GOOGLE_APPLICATION_CREDENTIALS or gcloud's default credentials"),
    "gcs": ("gcs", "gcsfs", "GOOGLE_APPLICATION_CREDENTIALS or gcloud's default credentials"),
    "hf": ("hf", "huggingface_hub", "HF_TOKEN or `hf auth login`"),
    "az": ("abfs", "adlfs", "AZURE_STORAGE_CONNECTION_STRING or AZURE_STORAGE_ACCOUNT_NAME with a key"),
    "abfs": ("abfs", "adlfs", "AZURE_STORAGE_CONNECTION_STRING or AZURE_STORAGE_ACCOUNT_NAME with a key"),
}
GLOB_CHARS = "*?["
RETRIES = 4  # attempts of a remote call that fails with a transient error
BACKOFF_S = 0.5  # first wait between attempts (doubled each time)


class LocationError(ValueError):
    """A location that cannot be used; the message is one line naming the scheme and what is missing."""


@dataclass(frozen=True)
class Location:
    protocol: str  # the fsspec protocol: file, memory, s3, gcs, hf, abfs
    root: str  # the folder: an absolute path (file) or the path inside the store, without the scheme
    pattern: str = ""  # "" = every file under root; else a glob relative to root (a single file: its name)
    spec: str = ""  # as the user gave it
    scheme: str = "file"  # as the user wrote it (s3, gs, az, ...)
    hf_cache: bool = False  # a Hugging Face Hub cache snapshot: its symlinks into blobs/ are read

    @property
    def is_local(self) -> bool:
        return self.protocol == "file"

    @property
    def local_root(self) -> Path:
        if not self.is_local:
            raise LocationError(f"{self.scheme}:// location {self.display}: not a local folder")
        return Path(self.root)

    @property
    def read_root(self) -> "Path | StoreRoot":
        """What the pool's units are read under: the local folder, or the store's URL (a :class:`StoreRoot`)."""
        return self.local_root if self.is_local else StoreRoot(self.url())

    @property
    def display(self) -> str:
        """The location as text for a table, a log or a report: never credentials (a URL's user:password is cut)."""
        return redact(self.spec or self.url())

    def url(self, rel: str = "") -> str:
        path = f"{self.root.rstrip('/')}/{rel}" if rel else self.root
        return path if self.is_local else f"{self.scheme}://{path}"

    def filesystem(self):
        """The fsspec filesystem of this location, credentials from the store's own environment and config."""
        return filesystem(self.scheme)

    def open(self, rel: str, mode: str = "rb"):
        return self.filesystem().open(self.url(rel) if not self.is_local else os.path.join(self.root, rel), mode)


def is_url(path) -> bool:
    """True for a store URL (``s3://…``, ``memory://…``): read through fsspec, not the local file system."""
    text = str(path)
    return "://" in text and not text.startswith("file://")


class StoreRoot(str):
    """A remote pool's root as its URL (``s3://bucket/prefix``): what the pool is read under, in place.  Text, so it
    pickles into worker processes and Ray tasks; ``root / key`` is the key's URL."""

    def __truediv__(self, rel) -> "StoreRoot":
        return StoreRoot(f"{self.rstrip('/')}/{rel}")

    def is_dir(self) -> bool:
        return True  # checked where the location was resolved (check_remote): the listing says what it holds

    @property
    def name(self) -> str:
        return self.rstrip("/").rsplit("/", 1)[-1]


def pool_root(path) -> "Path | StoreRoot":
    """A pool's root from its text (a worker's job holds text): a local folder's Path, a store URL's StoreRoot."""
    return StoreRoot(str(path)) if is_url(path) else Path(path)


class NotRegularFile(OSError):
    """The path is not a regular file (a FIFO, socket, device or folder)."""


def open_regular(path) -> io.BufferedReader:
    """The file opened for reading if it is a regular file; never blocks on a FIFO.  A store URL (``s3://…``, a unit
    of a remote pool) is opened in place, streamed (:func:`open_unit`)."""
    if is_url(path):
        return open_unit(path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(f"not a regular file ({file_kind(mode)}): {Path(path).name}")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "folder"), (stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"), (stat.S_ISLNK, "symlink")):
        if test(mode):
            return name
    return "regular file" if stat.S_ISREG(mode) else "special file"


class ObjectGone(Exception):
    """An object of a remote pool was listed and is gone from the store now (deleted since): its unit fails with
    this one line (never a StreamFailure: nothing of it was read)."""


STREAM_BLOCK = 8 << 20  # bytes one read of a streamed object asks the store for (a JSONL unit: read ahead)


def open_unit(path, ranges: bool = False):
    """The one way a pool unit is opened for reading: a local path (a regular file, never a FIFO:
    compression.open_regular), or a store URL opened with fsspec (with retries on transient errors).  ``ranges``:
    the reader seeks (Parquet's footer and column chunks, Arrow's batches): each read is the exact range asked for;
    else the object is streamed in STREAM_BLOCK reads ahead.  ObjectGone (one line) when the object was deleted."""
    if not is_url(path):
        return open_regular(path)
    url = str(path)
    fs = filesystem(scheme_of(url))
    try:
        if ranges:
            return retrying(fs.open, url, "rb", cache_type="none")
        # a buffered reader over the object: readline(limit) and read(n) as over a local file, STREAM_BLOCK fetched
        # at a time (fsspec's read-ahead), so a unit of any size holds about one block in memory, none on disk
        return io.BufferedReader(retrying(fs.open, url, "rb", block_size=STREAM_BLOCK, cache_type="readahead"), 1 << 16)
    except FileNotFoundError:
        raise ObjectGone(f"{redact(url)} is gone from the store (deleted since the pool was listed)") from None


def object_version(info: dict) -> str:
    """An object's version as its store gives it: the ETag (S3, Azure), the generation (GCS), else its mtime."""
    for k in ("ETag", "etag", "generation", "version_id", "last_commit", "mtime", "LastModified", "last_modified",
              "created"):
        v = info.get(k)
        if v not in (None, ""):
            return str(getattr(v, "oid", v)).strip('"')
    return ""


def version_ns(version: str) -> int:
    """A listed object's version as a number where a local file has its mtime in nanoseconds: the same version, the
    same number; a changed object (a new ETag or generation) a different one."""
    return int(hashlib.blake2b(version.encode(), digest_size=7).hexdigest(), 16)


_LISTED: dict[str, tuple[int, int, float]] = {}  # URL -> (size, version_ns, when listed), the pool's latest listing
_LISTED_LOCK = threading.Lock()
LISTING_TTL = 300.0  # seconds a listing answers for its objects; older, unit_info asks the store (a long-lived process)


def remember_listing(root: str, objects: dict[str, tuple[int, int]]) -> None:
    """A pool's listing (URL -> size and version_ns), what ``unit_info`` answers from in this process: planning asks
    the store nothing per unit.  Each listing of the root replaces the last (an object gone since is forgotten)."""
    top = str(root).rstrip("/")
    with _LISTED_LOCK:
        for url in [u for u in _LISTED if u == top or u.startswith(top + "/")]:
            del _LISTED[url]
        now = time.monotonic()
        _LISTED.update({url: (size, version, now) for url, (size, version) in objects.items()})


def unit_info(path) -> tuple[int, int]:
    """(size, mtime_ns) of a unit: a local file's stat, or a store object's size and version_ns: as the pool's listing
    in this process gave them (``remember_listing``), else one request.  FileNotFoundError when it is not there."""
    if not is_url(path):
        st = os.stat(path)
        return st.st_size, st.st_mtime_ns
    url = str(path)
    listed = _LISTED.get(url)
    if listed is not None and time.monotonic() - listed[2] < LISTING_TTL:
        return listed[0], listed[1]
    info = retrying(filesystem(scheme_of(url)).info, url)
    if info.get("type") == "directory":
        raise IsADirectoryError(url)
    return int(info.get("size") or 0), version_ns(object_version(info))


def _userinfo_end(text: str) -> int:
    """Where a URL's user info ends (the index of its last '@' after '://'), else -1.  urlsplit's netloc stops at
    the first '/', so a password with a '/' in it (AWS secret keys often have one) is also caught: any '@' after a
    ':' past the scheme ends user info; a path's '@' with no ':' before it (``hf://datasets/o/n@rev``) does not."""
    if "://" not in text:
        return -1
    start = text.index("://") + 3
    try:
        netloc = urlsplit(text).netloc
    except ValueError:  # a malformed port or IPv6 host: judged by the ':' rule below
        netloc = ""
    if "@" in netloc:
        return start + netloc.rindex("@")
    rest = text[start:]
    if ":" in rest and "@" in rest and rest.index(":") < rest.rindex("@"):
        return start + rest.rindex("@")
    return -1


def has_userinfo(text: str) -> bool:
    """True for a URL with a user (and maybe password) part."""
    return _userinfo_end(text) >= 0


def redact(text: str) -> str:
    """A URL without a user:password part: everything up to the last '@' of its user info is cut."""
    end = _userinfo_end(text)
    return text if end < 0 else f"{text.split('://', 1)[0]}://***{text[end:]}"


def scheme_of(spec: str) -> str:
    """The URL scheme of a location ('' for a plain path)."""
    if "://" not in spec:
        return ""
    return spec.split("://", 1)[0].lower()


STORE_ENV = ("AWS_", "GOOGLE_", "GCS", "HF_", "HUGGING_FACE", "AZURE_")  # what a store's filesystem is built from
_FILESYSTEMS: dict[tuple, object] = {}


def filesystem(scheme: str):
    """fsspec's filesystem for a scheme; LocationError naming the package to install when it is missing.  One instance
    per process and state of the stores' environment variables: fsspec's own instance cache is keyed by the
    constructor's arguments only, so an endpoint or credentials set later in the same process (a new
    AWS_ENDPOINT_URL) would otherwise keep reaching the first one."""
    import fsspec

    protocol, package, _ = SCHEMES[scheme]
    try:
        cls = fsspec.get_filesystem_class(protocol)
    except (ImportError, ValueError):
        raise LocationError(f"{scheme}:// needs the {package} package (pip install {package})") from None
    key = (protocol, os.getpid(), tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith(STORE_ENV))))
    fs = _FILESYSTEMS.get(key)
    if fs is None:
        fs = _FILESYSTEMS[key] = cls(skip_instance_cache=True)
    return fs


URL_GLOB_CHARS = "*"  # in a URL only '*' (and '**') select: '?' and '[' are characters of an object key


def _split_glob(path: str, chars: str = GLOB_CHARS, literal=lambda prefix: False) -> tuple[str, str]:
    """(the folder before the first part with a glob character, the rest).  A part is taken as written where
    ``literal(the path up to it)`` says that path exists: a folder whose name holds a glob character."""
    parts = path.split("/")
    for i, part in enumerate(parts):
        if any(c in part for c in chars) and not literal("/".join(parts[: i + 1])):
            return "/".join(parts[:i]) or "/", "/".join(parts[i:])
    return path, ""


def _escape_glob(text: str, chars: str = GLOB_CHARS) -> str:
    """``text`` with each of ``chars`` matching only itself in a glob (``a?.jsonl`` -> ``a[?].jsonl``)."""
    return "".join(f"[{c}]" if c in chars else c for c in text)


def hf_snapshot(folder: Path) -> Path | None:
    """The current snapshot of a Hugging Face Hub cache folder (``datasets--owner--name``), else None."""
    if (folder / "snapshots").is_dir() and (folder / "refs").is_dir():
        ref = folder / "refs" / "main"
        if ref.is_file():
            snap = folder / "snapshots" / ref.read_text().strip()
            if snap.is_dir():
                return snap
        snaps = sorted((p for p in (folder / "snapshots").iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
        return snaps[-1] if snaps else None
    return None


def _in_hf_snapshot(folder: Path) -> bool:
    """True for a folder inside a Hub cache snapshot (``.../snapshots/<rev>/...`` beside ``blobs/``)."""
    return any(a.name == "snapshots" and (a.parent / "blobs").is_dir() for a in folder.parents)


def hf_blobs(folder: Path | str) -> str | None:
    """The real path of the ``blobs/`` folder of the Hub cache repository a snapshot folder is in, else None: the
    only place a snapshot's symlinks may lead (a link anywhere else is not the cache's and is not read)."""
    real = Path(os.path.realpath(folder))
    for a in (real, *real.parents):
        if a.name == "snapshots" and (a.parent / "blobs").is_dir():
            return os.path.realpath(a.parent / "blobs")
    return None


def resolve(spec: str, what: str = "pool", must_exist: bool = True) -> Location:
    """The location of a ``--pool`` / ``--out`` value (see the module's doc); LocationError with one line."""
    spec = str(spec).strip()
    if not spec:
        raise LocationError(f"no {what}: pass a folder, a file, a glob or a URL")
    scheme = scheme_of(spec)
    if scheme and scheme not in SCHEMES:
        raise LocationError(f"{scheme}:// is not a storage this tool reads (use one of: "
                            f"{', '.join(s + '://' for s in SCHEMES)}, or a folder)")
    if scheme and has_userinfo(spec):
        creds = SCHEMES[scheme][2] or "the store's own environment"
        raise LocationError(f"{what} {redact(spec)}: credentials in a URL are not accepted: put them in the "
                            f"environment ({creds})")
    if scheme in ("", "file"):
        return _resolve_local(spec.split("://", 1)[1] if scheme else spec, spec, what, must_exist)
    protocol = SCHEMES[scheme][0]
    path = spec.split("://", 1)[1].rstrip("/")
    if scheme != "memory" and not path:
        raise LocationError(f"{scheme}:// needs a bucket (or repository) and a path: {redact(spec)}")
    root, pattern = _split_glob(path, URL_GLOB_CHARS)
    pattern = _escape_glob(pattern, "?[")  # a key's own '?' and '[' (docs/pools.md)
    if scheme == "memory":
        root = "/" + root.lstrip("/")
    loc = Location(protocol, root, pattern, spec, scheme)
    if must_exist:
        check_remote(loc, what)
    return loc


def _resolve_local(path: str, spec: str, what: str, must_exist: bool) -> Location:
    p = Path(path).expanduser()
    if any(c in path for c in GLOB_CHARS) and not p.exists():  # a path that exists is that path, whatever its name
        root, pattern = _split_glob(str(p.absolute()), literal=os.path.isdir)
        if must_exist and not glob.glob(os.path.join(glob.escape(root), pattern), recursive=True):
            raise LocationError(f"{what}: no file matches {spec}")
        return Location("file", str(Path(root).resolve()), pattern, spec)
    if p.is_file():
        return Location("file", str(p.resolve().parent), _escape_glob(p.name), spec)
    if p.is_dir():
        snap = hf_snapshot(p)
        if snap is not None:
            return Location("file", str(snap.resolve()), "", spec, hf_cache=True)
        return Location("file", str(p.resolve()), "", spec, hf_cache=_in_hf_snapshot(p.resolve()))
    if must_exist:
        raise LocationError(f"{what} not found: {spec}")
    return Location("file", str(p.resolve()), "", spec)


def retrying(call, *args, **kwargs):
    """A remote call with retries and back-off on transient errors (timeouts, connection resets, 5xx)."""
    for attempt in range(RETRIES):
        try:
            return call(*args, **kwargs)
        except (FileNotFoundError, PermissionError, FileExistsError, IsADirectoryError, NotADirectoryError,
                LocationError):  # not transient: the same answer again
            raise
        except (OSError, TimeoutError, ConnectionError):
            if attempt == RETRIES - 1:
                raise
            time.sleep(BACKOFF_S * 2 ** attempt)


def check_remote(loc: Location, what: str = "pool") -> None:
    """LocationError (one line) when the store cannot be reached: no package, no credentials, no bucket or path."""
    fs = loc.filesystem()
    _, _, creds = SCHEMES[loc.scheme]
    try:
        ok = retrying(fs.exists, loc.url())
    except LocationError:
        raise
    except PermissionError as exc:
        raise LocationError(f"{loc.scheme}://: access denied to {loc.display} ({_first_line(exc)}); "
                            f"credentials come from {creds}") from None
    except Exception as exc:  # noqa: BLE001 - botocore's NoCredentialsError and the like: one line, never a trace
        name = type(exc).__name__
        if "Credential" in name or "credential" in str(exc) or "Profile" in name:
            raise LocationError(f"{loc.scheme}://: no credentials for {loc.display}; set {creds}") from None
        raise LocationError(f"{loc.scheme}://: cannot reach {loc.display}: {name}: {_first_line(exc)}") from None
    if not ok:
        bucket = loc.root.split("/", 1)[0]
        has_bucket = loc.scheme == "memory" or _exists(fs, f"{loc.scheme}://{bucket}")
        raise LocationError(f"{what} not found: {loc.display}" + ("" if has_bucket else f" (no bucket {bucket!r})"))


def check_bucket(loc: Location) -> None:
    """LocationError (one line) when a remote --out's bucket cannot be reached (its path may not exist yet)."""
    bucket = loc.root.strip("/").split("/", 1)[0]
    if loc.scheme == "memory":
        return
    check_remote(Location(loc.protocol, bucket, "", f"{loc.scheme}://{bucket}", loc.scheme), "out bucket")


def _exists(fs, url: str) -> bool:
    try:
        return bool(fs.exists(url))
    except Exception:  # noqa: BLE001
        return False


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [""])[0][:200]


def remote_files(loc: Location) -> dict[str, dict]:
    """Every file under a remote location that its pattern admits: relative path -> {size, etag}."""
    fs = loc.filesystem()
    base = loc.root.strip("/")
    found = retrying(fs.find, loc.url(), detail=True)
    out = {}
    for name, info in found.items():
        if info.get("type") == "directory":
            continue
        key = name.lstrip("/")  # memory:// names start with '/'; an empty part inside the key is kept (unsafe)
        if base and key.startswith(base + "/"):
            rel = key[len(base) + 1:]
        elif key == base or not base:
            rel = key
        else:
            rel = name
        if not rel:  # the location is itself one file
            rel = base.rsplit("/", 1)[-1]
        if not matches(rel, loc.pattern):
            continue
        out[rel] = {"size": info.get("size"), "etag": object_version(info)}
    return out


@functools.lru_cache(maxsize=64)
def glob_regex(pattern: str) -> re.Pattern:
    """A glob as Python's glob reads it: ``*`` and ``?`` within one folder name, ``**/`` any number of folders."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 2:]:
            j = pattern.index("]", i + 2)
            body = pattern[i + 1:j]
            body = ("^" + body[1:] if body.startswith("!") else body).replace("\\", "\\\\").replace("[", "\\[")
            out.append("[" + body + "]")
            i = j + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def matches(rel: str, pattern: str) -> bool:
    """True when the relative path ``rel`` is selected by ``pattern`` ('' selects everything)."""
    return not pattern or bool(glob_regex(pattern).match(rel))


def work_folder(loc: Location) -> Path:
    """The local folder a run with a remote ``--out`` works in (kept between runs: scan state, token cache,
    Dagster home): the work_dir setting, else ~/.cache/contam-assets/out/<scheme>/<bucket and path>."""
    base = Path(settings.env_value("work_dir") or Path.home() / ".cache" / "contam-assets" / "out")
    return base / loc.scheme / (loc.root.strip("/").replace("..", "_") or "root")
