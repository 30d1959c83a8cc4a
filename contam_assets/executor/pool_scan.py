"""A run's shard scans on the cores of this machine: a pool of worker processes (no database access).

Each worker maps the index and the reference records once, when it starts (from the index's
folder where the step names it, store/artifacts.read_index_dir: the page cache holds one copy for
every worker; else handed over pickled), and then
scans whole shards (`run_shard_work_shared`: it reads the shard itself, writes its match rows
to a Parquet part and returns the outcome).  Results are handed back **in the order of the
jobs** (processes.map_in_order), so the caller (the step process, the only DuckDB writer)
writes exactly what the serial engine writes, in the same order.  At most ``4 x workers``
shards are in flight (a slow shard does not idle the others), so memory stays bounded by
the workers, not by the run.

A shard whose scan raises yields its exception; the others go on.  A worker that dies
(OOM killer, SIGKILL) breaks the pool: the shards it broke are tried again one at a time
in a fresh pool, and only the one that kills its worker again fails (``WorkerDied``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import fields
from pathlib import Path

import polars as pl

from contam_assets.detector.index import NgramIndex
from contam_assets.executor.processes import WorkerDied, available_cpus, map_in_order
from contam_assets.executor.shard_work import ShardWork, run_shard_work_shared
from contam_assets.rescan.shard import ShardOutcome
from contam_assets.store.artifacts import read_index_dir

__all__ = ["WorkerDied", "available_cpus", "scan_in_processes"]

_WORKER: dict = {}


def _init(index: NgramIndex, records: pl.DataFrame) -> None:
    _WORKER["index"], _WORKER["records"] = index, records


# what NgramIndex keeps of the folder it was read from: each worker has its own from the folder it reads
_FOLDER_OWN = ("_files", "_folder_files", "_keys_digest", "_staging")


def fingerprint(index: NgramIndex, records: pl.DataFrame) -> tuple:
    """What tells two indexes apart: counts, settings and a hash of the keys and record ids (milliseconds)."""
    return (len(index.q_keys), len(index.record_ids), records.height, index.bloom_bits, index.hot_threshold,
            index.config_json, index.keys_digest())


def loaded_kernels() -> dict[str, int]:
    """Compiled versions each of the scan's kernels holds in this process (0: it loads them at its first call;
    executor/preload.py loads them in the forkserver, before any worker is forked)."""
    from contam_assets.detector import key_table, reach_kernel, text_kernel, walk_kernel, word_kernel

    kernels = {"text_kernel._map": getattr(text_kernel, "_map", None), "word_kernel._encode": getattr(word_kernel, "_encode", None),
               "key_table._fill": getattr(key_table, "_fill", None), "key_table._positions": getattr(key_table, "_positions", None),
               "key_table._docs_with_key": getattr(key_table, "_docs_with_key", None),
               "key_table._docs_with_key_gated": getattr(key_table, "_docs_with_key_gated", None),
               "walk_kernel._walk": walk_kernel._walk, "reach_kernel._reach": reach_kernel._reach,
               "reach_kernel._reach_many": reach_kernel._reach_many,
               "walk_kernel._walk_many": walk_kernel._walk_many,
               "walk_kernel._answer_hits": walk_kernel._answer_hits}
    return {name: len(getattr(k, "signatures", ())) for name, k in kernels.items()}


def _init_from(folder: str, extras: dict, expected: tuple) -> None:
    """The index and records read by each worker from the index's own folder, all at once, instead of pickled
    through one pipe per worker while the step waits (98 MB for today's registry: 0.8-1.7 s of the step for two
    workers, ~0.1 s this way).  ``extras``: what the step computed on its index (the prefilter, lookup tables)."""
    try:
        index, records = read_index_dir(Path(folder))
        found = fingerprint(index, records)
        if found != expected:
            raise ValueError(f"holds another index than the step's ({found[:3]} keys, records, rows against "
                             f"{expected[:3]}, or other contents)")
        index.__dict__.update(extras)
        _init(index, records)
    except Exception as exc:  # noqa: BLE001 - each shard of this worker fails with the reason, the pool lives on
        _WORKER["error"] = f"the scan worker could not read the index at {folder}: {type(exc).__name__}: {exc}"


def _scan(job: ShardWork) -> ShardOutcome:
    if "error" in _WORKER:
        raise RuntimeError(_WORKER["error"])
    return run_shard_work_shared(job, _WORKER["index"], _WORKER["records"])


def scan_in_processes(jobs: list[ShardWork], index: NgramIndex, records: pl.DataFrame, workers: int,
                      idle: Callable[[], None] | None = None,
                      source: Path | None = None) -> Iterator[tuple[ShardWork, ShardOutcome | Exception]]:
    """(job, outcome or exception) for every job, in the jobs' order, scanned by ``workers`` processes;
    ``idle()`` is called while the next outcome is not back yet.  ``source``: the index folder ``index`` and
    ``records`` were read from unchanged (`artifacts.read_index_dir`); the workers then read them from there."""
    if source is None:
        init, initargs = _init, (index, records)
    else:
        names = {f.name for f in fields(index)}
        # the lookup table is saved in the folder (mapped by each worker, or built there when absent): never pickled
        extras = {k: v for k, v in index.__dict__.items() if k not in names and k not in NgramIndex.SAVED_EXTRAS
                  and k not in _FOLDER_OWN}
        init, initargs = _init_from, (str(source), extras, fingerprint(index, records))
    yield from map_in_order(_scan, jobs, workers, preload=["contam_assets.executor.pool_scan"], init=init,
                            initargs=initargs, label=lambda j: f"scanning {j.shard}", idle=idle)
