"""The sampling design: units of a pool, and a seeded stratified random sample of them.

A *unit* is what the sample reads whole; today that is a shard (`pool_units`, the one place that says
so: a Parquet row group or a byte block of JSONL cut at line boundaries would be further units of the
same shard, with their own key and byte count).  Units are grouped in *strata* by the shard's top-level
folder (a pool's source folders; a flat pool is one stratum).  Within stratum h, n_h of its N_h units are
drawn by simple random sampling without replacement, n_h = min(N_h, max(1, round(F * N_h))): every stratum
is sampled, so every stratum's total is estimated from its own units.  The draw is seeded (numpy PCG64)
over the units sorted by key, so the same pool, fraction and seed give the same sample.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

ROOT_STRATUM = "(root)"


@dataclass(frozen=True)
class Unit:
    key: str  # the unit's own key (a shard key today)
    shard: str  # the shard it is read from
    stratum: str
    bytes: int


@dataclass
class Sample:
    fraction: float
    seed: int
    units: list[Unit]  # the sampled units, sorted by key
    pool_units: dict[str, int]  # stratum -> N_h
    pool_bytes: int
    strata: list[str] = field(default_factory=list)

    @property
    def shards(self) -> list[str]:
        return sorted({u.shard for u in self.units})

    @property
    def bytes(self) -> int:
        return sum(u.bytes for u in self.units)


def stratum_of(shard: str) -> str:
    """A shard's stratum: its top-level folder (`web/part-1.jsonl` -> `web`), ROOT_STRATUM at the top."""
    head, sep, _ = shard.partition("/")
    return head if sep else ROOT_STRATUM


def pool_units(shards: list[str], paths: dict[str, os.PathLike]) -> list[Unit]:
    """The units of a pool listing: one per shard, its size on disk as its bytes."""
    return [Unit(key=s, shard=s, stratum=stratum_of(s), bytes=os.stat(paths[s]).st_size) for s in sorted(shards)]


def check_fraction(fraction: float) -> float:
    """The fraction, or ValueError naming the range."""
    if not (isinstance(fraction, (int, float)) and 0.0 < float(fraction) <= 1.0):
        raise ValueError(f"the fraction must be in (0, 1], got {fraction!r}")
    return float(fraction)


def allocation(n_units: int, fraction: float) -> int:
    """n_h: how many of a stratum's N_h units are sampled."""
    return min(n_units, max(1, int(np.floor(fraction * n_units + 0.5))))


def stratified_sample(units: list[Unit], fraction: float, seed: int = 0) -> Sample:
    """The seeded stratified sample of ``units`` at ``fraction`` (see the module's description)."""
    fraction = check_fraction(fraction)
    if not units:
        raise ValueError("no units to sample from (an empty pool)")
    rng = np.random.default_rng(seed)
    by: dict[str, list[Unit]] = {}
    for u in sorted(units, key=lambda u: u.key):
        by.setdefault(u.stratum, []).append(u)
    chosen: list[Unit] = []
    for name in sorted(by):
        members = by[name]
        n = allocation(len(members), fraction)
        pick = rng.choice(len(members), size=n, replace=False) if n < len(members) else np.arange(len(members))
        chosen += [members[i] for i in sorted(pick)]
    return Sample(fraction=fraction, seed=int(seed), units=sorted(chosen, key=lambda u: u.key),
                  pool_units={k: len(v) for k, v in sorted(by.items())}, pool_bytes=sum(u.bytes for u in units),
                  strata=sorted(by))


DESIGN = ("stratified by the shard's top-level folder; within each stratum a simple random sample of whole shards "
          "without replacement, n_h = min(N_h, max(1, round(F * N_h))), seeded; Horvitz-Thompson totals; 95 % intervals "
          "by a Rao-Wu rescaled cluster bootstrap over the sampled shards (finite-population corrected) with a "
          "hypergeometric allowance for contaminated shards the sample missed; share of items present by Chao2 for "
          "sampling without replacement (Chao & Lin 2012) with a log-normal interval")
