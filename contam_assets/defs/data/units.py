"""The `shards` partitions as work units (store/units.py): which pool files a partition key stands for, the
partitions a pool's units need, and runs over stretches of consecutive partitions.  Dagster glue; the rule itself is
store/units.py's."""

from __future__ import annotations

import os
from typing import Callable

import dagster as dg

from contam_assets.defs.partitions import shards_partitions
from contam_assets.defs.resources import ContamSettings
from contam_assets.rescan import watch
from contam_assets.store.units import Units, looks_grouped, plan_units


def partition_files(settings: ContamSettings, keys: list[str]) -> dict[str, list[str]]:
    """Partition key -> the pool files it stands for (store/units.py); a file's own key needs no listing."""
    if not any(looks_grouped(k) for k in keys):
        return {k: [k] for k in keys}
    units = watch.pool_units(watch.pool_listing(settings.pool_path, settings.follow_links, settings.pool_pattern))
    stale = [k for k in keys if looks_grouped(k) and k not in units.files]
    if stale:
        raise dg.Failure(f"{len(stale)} partition(s) stand for a group of files the pool no longer holds as one (files "
                         f"were added or removed since), e.g. {stale[0]!r}: run `contam detect`, or let "
                         "new_shards_sensor add the current groups")
    return {k: units.files.get(k, [k]) for k in keys}


def pool_units(listing) -> Units:
    """The work units of a pool listing (store/units.py): a partition per big file, one per group of small ones."""
    sizes = {}
    for shard in listing.shards:
        try:
            sizes[shard] = os.stat(listing.paths[shard]).st_size
        except OSError:  # gone since it was listed: a unit alone, its scan reports it
            sizes[shard] = 0
    return plan_units(sizes)


def sync_partitions(instance: dg.DagsterInstance, units: Units) -> None:
    """The `shards` partitions of this pool's current units: new units added; the partitions of groups the pool no
    longer holds as such, and of files that now sit in a group, deleted (their files' rows stay: tables are kept
    per file, and retire_missing removes only files that left the pool)."""
    known = instance.get_dynamic_partitions(shards_partitions.name)
    have = set(known)
    new = [k for k in units.keys if k not in have]
    if new:
        instance.add_dynamic_partitions(shards_partitions.name, new)
    for key in known:
        if key in units.files:
            continue
        if looks_grouped(key) or units.is_group(units.unit_of.get(key, "")):
            instance.delete_dynamic_partition(shards_partitions.name, key)


def stretches(keys: list[str], wanted: list[str]) -> list[list[str]]:
    """The runs of consecutive partition ``keys`` that are all in ``wanted``: a ranged run covers only these (an
    instance shared with another pool or output folder holds partitions this run must not touch)."""
    keep, out, cur = set(wanted), [], []
    for k in keys:
        if k in keep:
            cur.append(k)
        elif cur:
            out, cur = out + [cur], []
    return out + ([cur] if cur else [])


def uncovered(parts: list[list[str]], keys: list[str], log: Callable[[str], None], units: Units) -> dict[str, str]:
    """The shards no partition stands for (removed from the instance while this run ran): failed, not skipped."""
    covered = {k for part in parts for k in part}
    failed = {s: "no partition in the Dagster instance (removed while this run ran?)"
              for k in keys if k not in covered for s in units.files_of([k])}
    for shard, why in failed.items():
        log(f"  {shard} failed: {why}")
    return failed


