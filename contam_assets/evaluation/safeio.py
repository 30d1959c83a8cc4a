"""Reading files and names a server does not control, without hanging, crashing or leaking paths.

Small functions, independent of the rest of the project, for any HTTP
server of contam-assets (the evaluation API; a review page can use the same):

* ``check_name`` — one path component from a request: not empty, not ``.``
  or ``..``, no ``/`` or NUL, valid UTF-8, at most 255 bytes (the limit of
  Linux and macOS file systems, so a longer name is refused before any
  system call sees it).
* ``read_regular`` — the bytes of a regular file, at most ``max_bytes``.
  The type is checked with ``lstat`` first and again with ``fstat`` on the
  descriptor; the file is opened ``O_NONBLOCK | O_NOFOLLOW | O_NOCTTY``, one
  path component at a time (``open_no_symlinks``), so a FIFO, socket, device
  or symlink swapped in at the last moment is refused instead of blocking the
  reader or leading outside the checked path (opening a FIFO for reading
  without ``O_NONBLOCK`` waits for a writer forever).
* ``loads_bounded`` — JSON with a nesting limit (a 100,000-deep file is
  refused, never a crash), NaN / Infinity / overflowing numbers read as ``None``.
* ``json_bytes`` — UTF-8 JSON that never holds a non-finite number.

Every failure is a ``Refused`` with a ``kind`` and a short message that
holds no path, no errno text beyond ``strerror`` and no code location.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
from typing import Any

MAX_NAME_BYTES = 255
DEFAULT_MAX_BYTES = 8 * 1024 * 1024
DEFAULT_MAX_DEPTH = 64
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC


class Refused(ValueError):
    """A file or name that cannot be served; ``kind`` names the reason, ``message`` says it without paths.

    Kinds: ``bad_name``, ``not_a_file`` (FIFO, socket, device, folder),
    ``too_large``, ``unreadable`` (an OS error), ``malformed`` (not UTF-8,
    not JSON, nested too deep).
    """

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind, self.message = kind, message


def display_name(name: str) -> str:
    """A file name as printable text (bytes that are not UTF-8 become U+FFFD)."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be one path component, or None."""
    if not name:
        return "name is empty"
    if name in (".", ".."):
        return f"name {name!r} is not allowed"
    if "/" in name or "\x00" in name:
        return "name contains '/' or a NUL byte"
    return _component_size_problem(name, "name")


def _component_size_problem(part: str, what: str) -> str | None:
    """``part`` not valid UTF-8, or over MAX_NAME_BYTES bytes (one path component's limit), or None."""
    try:
        size = len(part.encode("utf-8"))
    except UnicodeEncodeError:
        return f"{what} is not valid UTF-8"
    if size > MAX_NAME_BYTES:
        return f"{what} is {size} bytes long, more than {MAX_NAME_BYTES}"
    return None


def check_name(name: str, what: str = "name") -> str:
    problem = name_problem(name)
    if problem:
        raise Refused("bad_name", f"invalid {what}: {problem}")
    return name


def components_problem(path: str) -> str | None:
    """A component of ``path`` longer than 255 bytes (or not UTF-8), or None."""
    for part in re.split(r"[\\/]", path):
        problem = _component_size_problem(part, "a path component")
        if problem:
            return problem
    return None


def file_type(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISLNK, "a symlink"), (stat.S_ISREG, "a regular file")):
        if test(mode):
            return name
    return "a special file"


def os_message(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def open_no_symlinks(path: str | os.PathLike, flags: int = _OPEN_FLAGS) -> int:
    """A descriptor for ``path`` opened one component at a time, none of them followed if it is a symlink.

    For a path already resolved and checked (``os.path.realpath``, then "is
    it inside the roots"): a symlink swapped in at any component after the
    check makes the open fail (ELOOP/ENOTDIR) instead of leading elsewhere.
    """
    parts = [p for p in os.path.abspath(path).split(os.sep) if p]
    if not parts:
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
    fd = os.open(os.sep, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return os.open(parts[-1], flags, dir_fd=fd)
    finally:
        os.close(fd)


def read_regular(path: str | os.PathLike, max_bytes: int = DEFAULT_MAX_BYTES,
                 lstat_result: os.stat_result | None = None) -> bytes:
    """The bytes of the regular file ``path``, a resolved path (no component is followed if a symlink)."""
    try:
        st = lstat_result or os.lstat(path)
    except OSError as exc:
        raise Refused("unreadable", f"cannot read: {os_message(exc)}") from None
    if not stat.S_ISREG(st.st_mode):
        raise Refused("not_a_file", f"not a regular file ({file_type(st.st_mode)})")
    if st.st_size > max_bytes:
        raise Refused("too_large", f"{st.st_size} bytes, more than the limit of {max_bytes}")
    try:
        fd = open_no_symlinks(path)
    except OSError as exc:
        raise Refused("unreadable", f"cannot open: {os_message(exc)}") from None
    try:
        fst = os.fstat(fd)
        if not stat.S_ISREG(fst.st_mode) or (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):
            raise Refused("not_a_file", "the file was replaced while it was opened")
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise Refused("unreadable", f"cannot read: {os_message(exc)}") from None
    finally:
        os.close(fd)
    if size > max_bytes:
        raise Refused("too_large", f"grew past the limit of {max_bytes} bytes while read")
    return b"".join(chunks)


def _bounded(obj: Any, max_depth: int) -> Any:
    """Check the nesting depth of parsed JSON and replace non-finite floats by None, in one iterative walk."""
    stack = [(obj, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > max_depth:
            raise Refused("malformed", f"JSON nested deeper than {max_depth} levels")
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in items:
            if isinstance(value, float):
                if not math.isfinite(value):
                    node[key] = None
            elif isinstance(value, (dict, list)):
                stack.append((value, depth + 1))
    return obj


def loads_bounded(data: bytes | str, max_depth: int = DEFAULT_MAX_DEPTH) -> Any:
    """Parse JSON with a depth limit; NaN, ±Infinity and numbers beyond float range become None.

    The C parser guards its own recursion (a 100,000-deep file raises
    RecursionError at about 1,000 levels, well inside the stack), so the
    limit is checked on the parsed value without recursion.
    """
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise Refused("malformed", f"not UTF-8 text (byte {exc.start})") from None
    else:
        text = data
    try:
        value = json.loads(text, parse_constant=lambda _c: None)
    except json.JSONDecodeError as exc:
        raise Refused("malformed", f"not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:
        raise Refused("malformed", f"JSON nested deeper than {max_depth} levels") from None
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        raise Refused("malformed", f"not valid JSON: {str(exc)[:120]}") from None
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return _bounded(value, max_depth) if isinstance(value, (dict, list)) else value


def finite(obj: Any) -> Any:
    """``obj`` with every NaN / ±Infinity float replaced by None (dicts and lists copied)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def json_bytes(obj: Any) -> bytes:
    """Compact UTF-8 JSON; raises Refused when text holds an unpaired surrogate (``"\\udcff"`` in a file)."""
    try:
        text = json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except ValueError:
        text = json.dumps(finite(obj), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise Refused("malformed", "text holds an unpaired UTF-16 surrogate escape") from None
