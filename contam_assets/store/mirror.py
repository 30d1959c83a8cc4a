"""A remote pool's local copy: the one place object keys become local files (store/location.py says where a pool is).

:func:`mirror` fetches what is new or changed and removes what left the store; every key ends as a local file or as
a skipped key with its reason, which the pool listing reads (:func:`mirror_keys`, table `pool_skips`).  A key with a
part too long for a file name gets a bounded local name (:func:`local_rel`); every file made from a shard key under
an output folder (mix, rejected lines, token cache, mix state, match parts) is named the same way.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
from pathlib import Path

from contam_assets.store.location import Location, LocationError, _first_line, check_remote, remote_files, retrying

MIRROR_STATE = ".contam-mirror.json"
MIRROR_KEYS = ".contam-keys.json"  # beside a mirror: its local names that are not their keys, and the keys not mirrored
# A path part longer than this (UTF-8 bytes) gets a bounded local name (`local_rel`): file systems allow 255 bytes,
# and the files made from a key add to it (".jsonl" for rejected lines, ".<name>.tmp-<pid>-<random>" while written).
NAME_MAX_BYTES = 200
_SUFFIX = re.compile(r"(?:\.[A-Za-z0-9]{1,8}){1,3}\Z")


def mirror(loc: Location, folder: Path, log=print) -> Location:
    """A local copy of a remote location in ``folder``: files fetched when new or changed, removed when gone.

    Every key ends either as a local file or in the skipped keys with its reason (:func:`mirror_keys`, which the
    pool listing reads: `pool_skips`): a key that is no path (an empty, '.' or '..' part, a control character), a
    hidden one, one that is also the folder of other keys, one whose fetch or local write fails.  A key with a part
    too long for a local file name is fetched under a bounded name (:func:`local_rel`); the listing gives its file
    the key back, so tables, partitions and the report show the key."""
    check_remote(loc)  # LocationError (one line): no package, no credentials, no bucket or path
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state_path = folder.with_name(folder.name + MIRROR_STATE)  # beside the copy, not in the pool
    try:
        state = json.loads(state_path.read_text()) if state_path.exists() else {}
    except (OSError, json.JSONDecodeError):
        state = {}
    files = remote_files(loc)
    fs = loc.filesystem()
    single = not loc.pattern and len(files) == 1 and next(iter(files)) == loc.root.rsplit("/", 1)[-1]
    fetched = 0
    skipped = {rel: "a key with an empty, '.' or '..' part, or a control character" for rel in files if unsafe_key(rel)}
    skipped |= {rel: "hidden" for rel in files if rel not in skipped and any(p.startswith(".") for p in rel.split("/"))}
    safe = set(files) - set(skipped)
    folders = {rel.rsplit("/", 1)[0] for rel in safe if "/" in rel}
    folders |= {f.rsplit("/", i)[0] for f in list(folders) for i in range(1, f.count("/") + 1)}
    skipped |= {rel: "a key that is also the folder of other keys" for rel in safe & folders}
    local = {rel: local_rel(rel) for rel in set(files) - set(skipped)}
    claimed: dict[str, list[str]] = {}
    for rel, name in local.items():
        claimed.setdefault(name, []).append(rel)
    for name, rels in claimed.items():  # a bounded name that is also another key (planted): the long key is not read
        for rel in rels if len(rels) > 1 else []:
            if rel != name:
                skipped[rel] = "its bounded local name is another key's"
                local.pop(rel)
    for rel in sorted(state):
        if rel not in files or rel in skipped:  # gone from the store (or no longer mirrored): removed first, so a
            _remove(folder, rel)                # file that became a folder (or the reverse) does not block the fetch
            state.pop(rel, None)
    for rel in sorted(skipped):  # not fetched, said once each (the key escaped: it is text from the store)
        log(f"pool {loc.display}: skipped {rel!r} ({skipped[rel]})")
        files.pop(rel)
    for rel, info in sorted(files.items()):
        dst = folder / local[rel]
        if state.get(rel) == info and dst.is_file():
            continue
        tmp = dst.with_name(f".{dst.name}.part")
        src = loc.url() if single else loc.url(rel)
        try:
            dst.parent.mkdir(parents=True, exist_ok=True)
            retrying(fs.get_file, src, str(tmp))
            if dst.is_dir() and not dst.is_symlink():
                dst.rmdir()  # a folder an earlier copy left (OSError when it is not empty: a file of the mirror)
            os.replace(tmp, dst)
            remove_literal(folder, rel)
        except OSError as exc:  # this key only: the others are still mirrored and read
            if isinstance(exc, (FileExistsError, IsADirectoryError, NotADirectoryError)):  # a file where a folder
                why = "its folder is a file" + (" in the mirror" if isinstance(exc.filename, str) and  # must be
                                                exc.filename.startswith(str(folder)) else " in the store")
            else:
                why = f"not fetched: {type(exc).__name__}: {_first_line(exc)}"
            log(f"pool {loc.display}: skipped {rel!r} ({why})")
            skipped[rel] = why
            tmp.unlink(missing_ok=True)
            _remove(folder, rel)  # and the empty folders made for it (and an older copy: no longer mirrored)
            state.pop(rel, None)
            continue
        state[rel] = info
        fetched += 1
    for rel in skipped:
        files.pop(rel, None)
    state_path.write_text(json.dumps(state, sort_keys=True))
    keys = {"names": {local[rel]: rel for rel in files if local[rel] != rel}, "skipped": dict(sorted(skipped.items()))}
    folder.with_name(folder.name + MIRROR_KEYS).write_text(json.dumps(keys, sort_keys=True))
    log(f"pool {loc.display}: {len(files)} file(s), {fetched} fetched into {folder}"
        + (f", {len(skipped)} key(s) skipped" if skipped else ""))
    return Location("file", str(folder.resolve()), "", loc.spec)


def local_rel(key: str) -> str:
    """The relative path a key (an object key, a shard key) has on local disk: the key itself, except that a part
    longer than NAME_MAX_BYTES becomes its first 100 bytes, '~', 16 hex digits of the whole part's SHA-256 and its
    suffix (``.jsonl.gz``): bounded, and the same key always gets the same name."""
    return "/".join(_bounded(part) for part in key.split("/"))


def remove_literal(root: Path, rel: str, suffix: str = "") -> None:
    """Once ``root/local_rel(rel)+suffix`` is written: the file an earlier version wrote under the literal name
    ``root/rel+suffix`` (a part of 201 to 255 bytes was kept as it was) removed, so the folder does not hold both
    copies. Nothing when the names agree, or the literal name is too long for the file system to have held."""
    if local_rel(rel) == rel:
        return
    try:
        (Path(root) / f"{rel}{suffix}").unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        if exc.errno not in (errno.ENAMETOOLONG, errno.ENOTDIR):
            raise


def _bounded(part: str) -> str:
    raw = part.encode("utf-8", "surrogatepass")
    if len(raw) <= NAME_MAX_BYTES:
        return part
    m = _SUFFIX.search(part)
    suffix = m.group(0) if m else ""
    head = raw[: 100].decode("utf-8", "ignore")
    return f"{head}~{hashlib.sha256(raw).hexdigest()[:16]}{suffix}"


def mirror_keys(folder: Path) -> tuple[dict[str, str], dict[str, str]]:
    """What :func:`mirror` left beside ``folder``: (local name -> key, for the names that are not their keys;
    key -> why it was not mirrored).  Empty for a folder that is no mirror."""
    path = Path(folder).with_name(Path(folder).name + MIRROR_KEYS)
    try:
        keys = json.loads(path.read_text())
        return dict(keys.get("names") or {}), dict(keys.get("skipped") or {})
    except (OSError, ValueError, AttributeError):
        return {}, {}


def mirror_or_fail(loc: Location, folder: Path, log=print) -> Location:
    """:func:`mirror`, with any OSError or ValueError (a disk that is full, a copy folder that is a file, a key the
    local filesystem refuses) turned into a LocationError of one line (control characters escaped)."""
    try:
        return mirror(loc, folder, log)
    except LocationError:
        raise
    except (OSError, ValueError) as exc:
        line = _first_line(exc).encode("ascii", "backslashreplace").decode()
        line = "".join(c if c.isprintable() else repr(c)[1:-1] for c in line)
        raise LocationError(f"{loc.scheme}://: the pool {loc.display} could not be mirrored into {folder}: "
                            f"{type(exc).__name__}: {line}") from None


def unsafe_key(rel: str) -> bool:
    """True for an object key that cannot be a path inside the mirror: an empty, '.' or '..' part (it would land
    elsewhere, or name another key), or a control character (NUL is no file name; an escape sequence is shown)."""
    return any(part in ("", ".", "..") for part in rel.split("/")) or any(ord(c) < 32 or ord(c) == 127 for c in rel)


def _remove(folder: Path, rel: str) -> None:
    """A mirrored file removed, and the folders it leaves empty (up to the mirror's own folder)."""
    if unsafe_key(rel):  # never from this module's own state file; refused all the same
        return
    path = folder / local_rel(rel)
    if path.is_file() or path.is_symlink():
        path.unlink()
    remove_literal(folder, rel)
    for parent in path.parents:
        if parent == folder or folder not in parent.parents:
            break
        try:
            parent.rmdir()
        except OSError:  # not empty (or gone): the ones above are not empty either
            break
