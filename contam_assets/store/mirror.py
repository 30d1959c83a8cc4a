"""Object keys of a remote pool and the local names made from them (store/location.py says where a pool is; a remote
pool is read in place, never copied).

:func:`key_skips` says which listed keys are not read, with the reason (table `pool_skips`): a key that is no safe
path, a hidden one, one that is also the folder of other keys, one whose bounded name is another key.  A key with a
part too long for a file name gets a bounded local name (:func:`local_rel`): every file made from a shard key under an
output folder (mix, rejected lines, token cache, mix state, match parts) is named that way.
"""

from __future__ import annotations

import errno
import hashlib
import re
from pathlib import Path

# A path part longer than this (UTF-8 bytes) gets a bounded local name (`local_rel`): file systems allow 255 bytes,
# and the files made from a key add to it (".jsonl" for rejected lines, ".<name>.tmp-<pid>-<random>" while written).
NAME_MAX_BYTES = 200
_SUFFIX = re.compile(r"(?:\.[A-Za-z0-9]{1,8}){1,3}\Z")


def key_skips(keys) -> dict[str, str]:
    """The listed object keys that are not read, each with its reason: a key that is no path (an empty, '.' or '..'
    part, a control character: the files named from it would land elsewhere), a hidden one, one that is also the folder
    of other keys (its mix file and theirs cannot both exist), one whose bounded local name (:func:`local_rel`) is
    another key (the long key is not read)."""
    keys = set(keys)
    skipped = {rel: "a key with an empty, '.' or '..' part, or a control character" for rel in keys if unsafe_key(rel)}
    skipped |= {rel: "hidden" for rel in keys if rel not in skipped and any(p.startswith(".") for p in rel.split("/"))}
    safe = keys - set(skipped)
    folders = {rel.rsplit("/", 1)[0] for rel in safe if "/" in rel}
    folders |= {f.rsplit("/", i)[0] for f in list(folders) for i in range(1, f.count("/") + 1)}
    skipped |= {rel: "a key that is also the folder of other keys" for rel in safe & folders}
    claimed: dict[str, list[str]] = {}
    for rel in sorted(keys - set(skipped)):
        claimed.setdefault(local_rel(rel), []).append(rel)
    for name, rels in claimed.items():  # a bounded name that is also another key (planted): the long key is not read
        for rel in rels if len(rels) > 1 else []:
            if rel != name:
                skipped[rel] = "its bounded local name is another key's"
    return dict(sorted(skipped.items()))


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


def unsafe_key(rel: str) -> bool:
    """True for an object key that cannot be a local path: an empty, '.' or '..' part (it would land
    elsewhere, or name another key), or a control character (NUL is no file name; an escape sequence is shown)."""
    return any(part in ("", ".", "..") for part in rel.split("/")) or any(ord(c) < 32 or ord(c) == 127 for c in rel)
