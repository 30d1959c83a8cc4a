"""File writes that never leave half a file behind, and the sweep of what a killed process left.

Every temporary file or folder of contam-assets is named ``.<name>.tmp-<pid>-<random>``
(a token-cache stream: ``.tmp-<key>-<pid>-<random>``) beside its target and renamed over
the target when complete.  Two processes never share a temporary name; a process killed
mid-write leaves its temporary behind, and :func:`sweep_temp_files` removes those whose
process is gone (or that are older than a day: another machine's on shared storage).  With
``only_stale=True`` it removes only those older than a day, whatever their pid says: the sweep a
scan run does, since on a shared folder or in a per-run container a pid that is not alive here may
be a live process of another node or run.
"""

from __future__ import annotations

import os
import re
import shutil
import time
import uuid
from pathlib import Path

_TEMP = re.compile(r"^\.(?:.+\.tmp-|tmp-[0-9a-f]+-)(?P<pid>\d+)(?:-[0-9a-f]{8})?(?:\..*)?$")
STALE_S = 24 * 3600


def temp_path(path: Path) -> Path:
    """A fresh temporary name beside `path` (same suffix, so writers that pick a format by name still do)."""
    path = Path(path)
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}{''.join(path.suffixes[-1:])}")


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` to a temporary file beside `path`, then rename it over `path`."""
    atomic_write_bytes(path, text.encode("utf-8", "backslashreplace"))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def process_alive(pid: int) -> bool:
    """True while process ``pid`` runs on this host (or cannot be signalled: someone else's)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_temp_files(root: Path, only_stale: bool = False) -> list[Path]:
    """Remove the temporaries under `root` left by processes that no longer run (``only_stale``: only those older
    than STALE_S, whatever their pid); the paths removed."""
    root = Path(root)
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    now = time.time()
    for folder, dirs, names in os.walk(root):
        for name in list(dirs) + names:
            m = _TEMP.match(name)
            if not m:
                continue
            p = Path(folder) / name
            try:
                old = now - p.lstat().st_mtime > STALE_S
            except OSError:
                continue
            if not old and (only_stale or process_alive(int(m.group("pid")))):
                continue
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
                dirs.remove(name)
            else:
                p.unlink(missing_ok=True)
            removed.append(p)
    return removed
