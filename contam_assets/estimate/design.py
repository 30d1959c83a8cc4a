"""The sampling design: units of a pool, and a seeded stratified random sample of them.

A *unit* is what the sample reads whole: a shard (`shard_units`), or a block of a shard (`block_units`): a byte
range [start, end) of a plain JSON/JSONL shard, holding the lines that start in it (cut at line boundaries, so
every line is in exactly one block), or one row group of a Parquet shard.  A compressed or Arrow shard cannot be
read in part and stays one unit.  `choose_units` takes whole shards when the sample would hold at least
MIN_UNITS of them (or the whole pool), else blocks of about F * pool bytes / MIN_UNITS bytes: with a few
dozen shards, contamination clustered in some of them is missed by the sample too often for any interval to
be honest (docs/estimate.md), while blocks of every shard spread the sample across all of them.  Units are
grouped in *strata* by the shard's top-level folder (a pool's source folders; a flat pool is one stratum).
Within stratum h, n_h of its N_h units are drawn by simple random sampling without replacement,
n_h = min(N_h, max(1, round(F * N_h))): every stratum is sampled, so every stratum's total is estimated from its
own units.  The draw is seeded (numpy PCG64) over the units sorted by key, so the same pool, fraction and seed
give the same sample.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from contam_assets.store.location import open_unit, unit_info

ROOT_STRATUM = "(root)"
MIN_UNITS = 100  # fewer sampled shards than this: the units are blocks of shards (`choose_units`)
MIN_BLOCK_BYTES = 512  # the smallest block of a JSON/JSONL shard
UNIT_KINDS = ("auto", "shard", "block")


@dataclass(frozen=True)
class PoolUnit:
    key: str  # the unit's own key: the shard's, or for a block the shard's with `.b<start>.jsonl` / `.rg<i>.parquet`
    shard: str  # the shard it is read from
    stratum: str
    bytes: int
    start: int = 0  # a JSON/JSONL block: its byte range [start, end) of the shard; a row group: its index in start
    end: int = -1  # -1: the whole shard (a shard unit, or a row group)
    kind: str = "shard"  # shard | bytes | row_group


@dataclass
class Sample:
    fraction: float
    seed: int
    units: list[PoolUnit]  # the sampled units, sorted by key
    pool_units: dict[str, int]  # stratum -> N_h
    pool_bytes: int
    strata: list[str] = field(default_factory=list)
    unit: str = "shard"  # shard | block: what the units are
    block_bytes: int = 0  # the block size of JSON/JSONL shards (blocks only)

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


def shard_units(shards: list[str], paths: dict[str, os.PathLike]) -> list[PoolUnit]:
    """The units of a pool listing: one per shard, its size on disk as its bytes."""
    return [PoolUnit(key=s, shard=s, stratum=stratum_of(s), bytes=unit_info(paths[s])[0]) for s in sorted(shards)]


def _cuttable(shard: str) -> str:
    """How a shard can be read in part: 'bytes' (plain JSON/JSONL), 'row_group' (Parquet) or '' (whole only)."""
    if shard.endswith((".jsonl", ".json")):
        return "bytes"
    return "row_group" if shard.endswith(".parquet") else ""


def block_units(shards: list[str], paths: dict[str, os.PathLike], block_bytes: int) -> list[PoolUnit]:
    """The blocks of a pool listing: byte ranges of ``block_bytes`` of its plain JSON/JSONL shards, the row groups of
    its Parquet shards (their compressed size as bytes; a footer that cannot be read: the whole shard), and every
    other shard whole."""
    out = []
    for s in sorted(shards):
        size, how = unit_info(paths[s])[0], _cuttable(s)
        if how == "bytes" and size > block_bytes:
            out += [PoolUnit(key=f"{s}.b{start:012d}.jsonl", shard=s, stratum=stratum_of(s), start=start,
                         end=min(size, start + block_bytes), bytes=min(size, start + block_bytes) - start, kind="bytes")
                    for start in range(0, size, block_bytes)]
        elif how == "row_group" and (groups := _row_group_bytes(paths[s])) and len(groups) > 1:
            out += [PoolUnit(key=f"{s}.rg{i:06d}.parquet", shard=s, stratum=stratum_of(s), start=i, bytes=b, kind="row_group")
                    for i, b in enumerate(groups)]
        else:
            out.append(PoolUnit(key=s, shard=s, stratum=stratum_of(s), bytes=size))
    return out


def _row_group_bytes(path: os.PathLike) -> list[int]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        with open_unit(path, ranges=True) as fh:  # a remote unit: its footer only, by range requests
            meta = pq.ParquetFile(fh).metadata
    except (OSError, pa.ArrowException):
        return []  # the scan reports it
    return [compressed_bytes(meta.row_group(i)) for i in range(meta.num_row_groups)]


def compressed_bytes(group) -> int:
    """A Parquet row group's bytes on disk: the compressed sizes of its column chunks."""
    return sum(group.column(c).total_compressed_size for c in range(group.num_columns)) or group.total_byte_size


def sample_size(units: list[PoolUnit], fraction: float) -> int:
    """How many of ``units`` a stratified sample at ``fraction`` draws."""
    by: dict[str, int] = {}
    for u in units:
        by[u.stratum] = by.get(u.stratum, 0) + 1
    return sum(allocation(n, fraction) for n in by.values())


def choose_units(shards: list[str], paths: dict[str, os.PathLike], fraction: float, unit: str = "auto",
                 min_units: int = MIN_UNITS) -> tuple[list[PoolUnit], str, int]:
    """(units, 'shard' or 'block', block bytes) of a pool for a sample at ``fraction``: whole shards when ``unit`` is
    'shard', or when it is 'auto' and the sample would hold at least ``min_units`` shards (or every shard); else
    blocks of max(MIN_BLOCK_BYTES, F * pool bytes / min_units) bytes (`block_units`)."""
    if unit not in UNIT_KINDS:
        raise ValueError(f"the unit must be one of {', '.join(UNIT_KINDS)}, got {unit!r}")
    fraction = check_fraction(fraction)
    shards_ = shard_units(shards, paths)
    n = sample_size(shards_, fraction)
    if unit == "shard" or (unit == "auto" and (n >= min(min_units, len(shards_)))):
        return shards_, "shard", 0
    pool_bytes = sum(u.bytes for u in shards_)
    block = max(MIN_BLOCK_BYTES, int(np.ceil(fraction * pool_bytes / max(1, min_units))))
    return block_units(shards, paths, block), "block", block


def check_fraction(fraction: float) -> float:
    """The fraction, or ValueError naming the range."""
    if not (isinstance(fraction, (int, float)) and 0.0 < float(fraction) <= 1.0):
        raise ValueError(f"the fraction must be in (0, 1], got {fraction!r}")
    return float(fraction)


def allocation(n_units: int, fraction: float) -> int:
    """n_h: how many of a stratum's N_h units are sampled."""
    return min(n_units, max(1, int(np.floor(fraction * n_units + 0.5))))


def stratified_sample(units: list[PoolUnit], fraction: float, seed: int = 0, unit: str = "shard",
                      block_bytes: int = 0) -> Sample:
    """The seeded stratified sample of ``units`` at ``fraction`` (see the module's description)."""
    fraction = check_fraction(fraction)
    if not units:
        raise ValueError("no units to sample from (an empty pool)")
    rng = np.random.default_rng(seed)
    by: dict[str, list[PoolUnit]] = {}
    for u in sorted(units, key=lambda u: u.key):
        by.setdefault(u.stratum, []).append(u)
    chosen: list[PoolUnit] = []
    for name in sorted(by):
        members = by[name]
        n = allocation(len(members), fraction)
        pick = rng.choice(len(members), size=n, replace=False) if n < len(members) else np.arange(len(members))
        chosen += [members[i] for i in sorted(pick)]
    return Sample(fraction=fraction, seed=int(seed), units=sorted(chosen, key=lambda u: u.key),
                  pool_units={k: len(v) for k, v in sorted(by.items())}, pool_bytes=sum(u.bytes for u in units),
                  strata=sorted(by), unit=unit, block_bytes=block_bytes)


def design_text(unit: str = "shard", block_bytes: int = 0) -> str:
    """The design in one sentence, for estimate.json."""
    what = ("whole shards" if unit == "shard" else
            f"blocks of shards ({block_bytes:,}-byte ranges of JSON/JSONL shards cut at line boundaries, Parquet row "
            "groups, other shards whole)")
    return DESIGN.replace("whole shards", what).replace("sampled shards", "sampled units").replace(
        "contaminated shards", "contaminated units")


DESIGN = ("stratified by the shard's top-level folder; within each stratum a simple random sample of whole shards "
          "without replacement, n_h = min(N_h, max(1, round(F * N_h))), seeded; Horvitz-Thompson totals; 95 % intervals "
          "by a Rao-Wu rescaled cluster bootstrap over the sampled shards (finite-population corrected) with a "
          "hypergeometric allowance for contaminated shards the sample missed; share of items present by Chao2 for "
          "sampling without replacement (Chao & Lin 2012) with a log-normal interval")
