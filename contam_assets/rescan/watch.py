"""Cheap change detection for sensors and the nightly check (no Dagster here).

Sensors run every minute, so nothing here reads file contents: task specs are hashed
(they are small), benchmark source files and pool shards are identified by
(size, mtime_ns).  What a scan actually used is recorded by the scan itself
(rescan/state.py), with a content fingerprint.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from contam_assets.rescan.plan import ShardState
from contam_assets.sources.registry import TaskSpec, load_registry, locate, spec_digest
from contam_assets.store.pool import list_pool
from contam_assets.store.units import Units, plan_units


def spec_snapshot(tasks_dir: Path | None, only: list[str] | None, benchmarks_dir: Path | None,
                  extra_specs: list[TaskSpec] = ()) -> dict[str, str]:
    """task -> hash of its spec and of the (size, mtime) of its source files.

    ``tasks_dir`` None: no registry (only ``extra_specs``, e.g. a decon reference folder).
    Raises registry.TaskSpecError for an unreadable spec (the sensor tick fails loudly
    and keeps its cursor).
    """
    out = {}
    specs = (load_registry(Path(tasks_dir), only or None) if tasks_dir is not None else []) + list(extra_specs)
    for spec in specs:
        h = hashlib.sha256(spec_digest(spec).encode())
        for split in spec.splits:
            for f in locate(spec, split, benchmarks_dir).files:
                st = os.stat(f)
                h.update(f"\x1f{split.name}\x1f{Path(f).name}\x1f{st.st_size}\x1f{st.st_mtime_ns}".encode())
        out[spec.name] = h.hexdigest()[:16]
    return dict(sorted(out.items()))


def digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def pool_listing(pool_dir: Path, follow_symlinks: bool = False, pattern: str = "") -> dict[str, tuple[int, int]]:
    """shard -> (size, mtime_ns) for every shard file of the pool."""
    listing = list_pool(pool_dir, follow_symlinks, pattern)  # a remote pool: the store's listing (size, version)
    out = {}
    for s in listing.shards:
        try:
            out[s] = listing.stat(s)
        except OSError:  # removed while listing, or unreadable now: it is not a shard this tick
            continue
    return out


def pool_units(listing: dict[str, tuple[int, int]]) -> Units:
    """The work units (partitions) of a pool listing (store/units.py)."""
    return plan_units({s: size for s, (size, _) in listing.items()})


@dataclass
class Consistency:
    """Where the tables disagree with the pool and the registry."""

    unregistered: list[str] = field(default_factory=list)  # shard file without a partition
    unscanned: list[str] = field(default_factory=list)  # partition with a file, never scanned
    changed: list[str] = field(default_factory=list)  # file differs from the one scanned
    task_stale: list[str] = field(default_factory=list)  # scanned with another task set / task content
    idf_stale: list[str] = field(default_factory=list)  # some rows scored with an older index (IDF drift)
    missing: list[str] = field(default_factory=list)  # partition whose file is gone from the pool

    def counts(self) -> dict[str, int]:
        return {k: len(v) for k, v in self.__dict__.items()}

    @property
    def ok(self) -> bool:
        return not any(self.__dict__.values())


def check_consistency(listing: dict[str, tuple[int, int]], partitions: list[str], states: dict[str, ShardState],
                      signatures: dict[str, tuple[int, int]], tasks_now: dict[str, str], index_digest: str) -> Consistency:
    """Per pool file; a file is registered when its unit (store/units.py) is a partition; a partition is missing
    when it is no unit of the pool (its file gone, or its group regrouped)."""
    c = Consistency()
    parts = set(partitions)
    units = pool_units(listing)
    c.unregistered = sorted(s for s in listing if units.unit_of[s] not in parts)
    c.missing = sorted(p for p in partitions if p not in units.files)
    for shard in sorted(listing):
        if units.unit_of[shard] not in parts:
            continue
        st = states.get(shard)
        if st is None:
            c.unscanned.append(shard)
        elif signatures.get(shard) != listing[shard]:
            c.changed.append(shard)
        elif st.tasks != tasks_now:
            c.task_stale.append(shard)
        elif any(d != index_digest for d in st.task_digests.values()):
            c.idf_stale.append(shard)
    return c


def tasks_needing_rescan(states: dict[str, ShardState], tasks_now: dict[str, str]) -> list[str]:
    """Scanned shards whose task set or task content differs from the current index."""
    return sorted(s for s, st in states.items() if st.tasks != tasks_now)
