"""Work units: what one partition of the `shards` asset stands for (docs/pools.md "Partitions and work units").

A pool file is a *shard*: every table (shard_stats, matches, mix_stats, scan state) keeps one row set per file.
A Dagster partition is a *unit*: one file, or a stable group of small files, so that a pool of many
small files does not pay Dagster's per-partition bookkeeping (a planned and a materialization event per asset,
run, metadata) once per file.

The rule:

- a file of ``SMALL_FILE_BYTES`` or more is a unit alone, keyed by its path: a pool of big shards keeps a
  partition per file, as a big file's scan outweighs a partition's bookkeeping;
- a pool of at most ``GROUP_MIN_FILES`` small files keeps a unit per file too (each file's materialization is then
  its own; a partition costs ~50 ms of Dagster bookkeeping per asset and run, so 64 small files cost a few seconds);
- in a pool of more small files, they, in path order, are cut into groups at *content-defined* boundaries: a group
  ends after a file whose path hashes to 0 modulo ``GROUP_EVERY`` (or at 4 × ``GROUP_EVERY`` files /
  ``GROUP_MAX_BYTES`` bytes).  Adding or removing a file changes only the group it falls in (and, when it is a
  boundary, its neighbour), never the rest of the pool: the other units keep their keys, their partitions and
  their materializations.  A pool whose small files grow past ``GROUP_MIN_FILES`` is regrouped once.
- a group's key names its first file, how many more it holds and a digest of its members' paths:
  ``docs/000.jsonl (+127 files, 1f3c9a2b)``; a change of membership is a new key.

Pure: no Dagster, no I/O (the sizes come from the caller's listing).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from contam_assets import settings

SMALL_FILE_BYTES = settings.env_value("unit_small_bytes")
GROUP_MIN_FILES = settings.env_value("unit_min_files")
GROUP_EVERY = settings.env_value("unit_every")
GROUP_MAX_BYTES = 256 << 20


@dataclass
class Units:
    """unit key -> its files (name order); file -> its unit key."""

    files: dict[str, list[str]] = field(default_factory=dict)
    unit_of: dict[str, str] = field(default_factory=dict)

    @classmethod
    def one_per_file(cls, shards) -> "Units":
        """A unit per file, keyed by its path."""
        return cls(files={s: [s] for s in shards}, unit_of={s: s for s in shards})

    @property
    def keys(self) -> list[str]:
        return list(self.files)

    def files_of(self, keys) -> list[str]:
        """The files of ``keys`` (in the keys' order); a key that is no unit of this listing stands for itself."""
        return [f for k in keys for f in self.files.get(k, [k])]

    def keys_of(self, shards) -> list[str]:
        """The units holding ``shards`` (each once, in unit order); a file of no unit is its own key."""
        wanted = {self.unit_of.get(s, s) for s in shards}
        return [k for k in self.files if k in wanted] + sorted(wanted - set(self.files))

    def is_group(self, key: str) -> bool:
        return len(self.files.get(key, ())) > 1


_GROUP_KEY = re.compile(r" \(\+\d+ files, [0-9a-f]{8}\)~*$")


def looks_grouped(key: str) -> bool:
    """Whether a partition key has a group key's shape (a pool without groups never needs its listing planned)."""
    return bool(_GROUP_KEY.search(key))


def group_first(key: str) -> str | None:
    """The first file a group key names (``docs/000.jsonl (+127 files, 1f3c9a2b)`` -> ``docs/000.jsonl``); None for
    a key without a group key's shape."""
    m = _GROUP_KEY.search(key)
    return key[:m.start()] if m else None


def _boundary(name: str, every: int) -> bool:
    """A content-defined cut after this file: its name's hash is 0 modulo ``every`` (same name, same answer)."""
    h = int.from_bytes(hashlib.blake2b(name.encode("utf-8", "backslashreplace"), digest_size=8).digest(), "big")
    return h % every == 0


def group_key(members: list[str]) -> str:
    """The key of a group of files: its first file, how many more, a digest of every member's name."""
    h = hashlib.blake2b("\x1f".join(members).encode("utf-8", "backslashreplace"), digest_size=4).hexdigest()
    return f"{members[0]} (+{len(members) - 1} files, {h})"


def plan_units(sizes: dict[str, int], *, small_bytes: int | None = None, min_files: int | None = None,
               every: int | None = None, max_files: int | None = None, max_bytes: int | None = None) -> Units:
    """The units of a pool listing (shard key -> size in bytes), by the rule in this module's docstring, in path
    order (a big file's unit where its path falls; a group where its first file falls).  A limit not given is the
    module's (read at each call)."""
    small_bytes = SMALL_FILE_BYTES if small_bytes is None else small_bytes
    min_files = GROUP_MIN_FILES if min_files is None else min_files
    every = GROUP_EVERY if every is None else every
    max_files = max_files or 4 * every
    max_bytes = GROUP_MAX_BYTES if max_bytes is None else max_bytes
    units = Units()

    def add(members: list[str]) -> None:
        key = members[0] if len(members) == 1 else group_key(members)
        while key in sizes and len(members) > 1:  # a file named like a group key keeps its own key
            key += "~"
        units.files[key] = members
        for m in members:
            units.unit_of[m] = key

    names = sorted(sizes)
    if sum(sizes[s] < small_bytes for s in names) <= min_files:
        return Units.one_per_file(names)
    group: list[str] = []
    group_bytes = 0
    for s in names:
        if sizes[s] >= small_bytes:
            add([s])
            continue
        if group and (len(group) >= max_files or group_bytes + sizes[s] > max_bytes):
            add(group)
            group, group_bytes = [], 0
        group.append(s)
        group_bytes += sizes[s]
        if _boundary(s, every):
            add(group)
            group, group_bytes = [], 0
    if group:
        add(group)
    return units
