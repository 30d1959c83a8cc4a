"""The `shards` partitions as work units (store/units.py): which pool files a partition key stands for, the
units of a pool listing.  Dagster glue; the rule itself is store/units.py's, the partitions and runs a pool needs
defs/data/runs.py's."""

from __future__ import annotations

import dagster as dg

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
            sizes[shard] = listing.stat(shard)[0]  # a remote object: its size as listed
        except OSError:  # gone since it was listed: a unit alone, its scan reports it
            sizes[shard] = 0
    return plan_units(sizes)
