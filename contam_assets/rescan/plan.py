"""What a shard needs: a full scan, an incremental scan of changed tasks, or nothing.

A shard's matches depend on the shard's bytes, the detector settings and the reference
set.  `plan_shard` compares what a shard was last scanned with (table `shard_scans`,
see rescan/state.py) with the current state and picks the cheapest correct work:

- ``full``: never scanned, the shard changed, or the detector settings changed (or a
  full rescan was asked for).  The text is tokenized once and the token stream cached
  (store/token_cache.py); when a valid stream is cached already, it is scanned instead.
- ``incremental``: only tasks were added, changed or removed.  Rows of removed and
  changed tasks are deleted; added and changed tasks are scanned from the cached token
  stream, and only in documents that contain one of their question n-grams
  (rescan/incremental.py).
- ``current``: nothing to do.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from contam_assets.detector.config import DetectConfig
from contam_assets.detector.versions import source_digest
from contam_assets.store.location import is_url
from contam_assets.store.pool import remote_fingerprint, shard_fingerprint, unit_stat

TASK_HASH_COLUMNS = ["suite", "split", "instance_index", "subject", "choice_index", "is_correct", "derived",
                     "question", "answer", "passage", "indexed"]


def task_hashes(records: pl.DataFrame, cfg: DetectConfig) -> dict[str, str]:
    """Content hash per task of its reference records (what a rescan of that task depends on).

    A spec edit that leaves the records alone (a description) changes nothing; a new
    benchmark file behind an unchanged spec does.
    """
    hasher = TaskHasher(cfg)
    hasher.add(records.sort("record_id"))
    return hasher.hashes()


class TaskHasher:
    """`task_hashes` of the records given a table at a time (``add``, the tables in record_id order, one after
    another): the same hashes.  A task's rows may span tables; its hash reads the CSV of its rows, the header once."""

    def __init__(self, cfg: DetectConfig):
        self.prefix, self.h = json.dumps(cfg.reference_key(), sort_keys=True).encode(), {}

    def add(self, records: pl.DataFrame) -> None:
        for (task,), df in records.group_by("task", maintain_order=True):
            first = task not in self.h
            if first:
                self.h[task] = hashlib.sha256(self.prefix)
            self.h[task].update(df.select(TASK_HASH_COLUMNS).write_csv(include_header=first).encode())

    def hashes(self) -> dict[str, str]:
        return dict(sorted((task, h.hexdigest()[:16]) for task, h in self.h.items()))


def scan_config_digest(cfg: DetectConfig, content_key: str) -> str:
    """Detector settings a shard's rows depend on (a change forces a full rescan).  The opt-in parts'
    code counts as a setting of the shards they ran on: an upgraded verifier rescans those, and only those."""
    parts = f"\x1f{source_digest('paraphrase')}" if cfg.paraphrase or cfg.crosslingual else ""
    return hashlib.sha256(f"{cfg.digest()}\x1f{content_key}{parts}".encode()).hexdigest()[:16]


def shard_identity(path: Path) -> tuple[str, str]:
    """(content fingerprint, identity): the identity adds the mtime, so an edit that keeps the
    size and the first and last MiB still counts as a change."""
    if is_url(path):  # a remote object: its size and version (ETag or generation) for the mtime, one request
        size, version = unit_stat(path)
        fp = remote_fingerprint(size, version)
        return fp, f"{fp}@{version}"
    fp = shard_fingerprint(path)
    return fp, f"{fp}@{path.stat().st_mtime_ns}"


@dataclass
class ShardState:
    """What a shard was last scanned with (rows of shard_scans / shard_task_scans)."""

    identity: str  # "<shard_fingerprint>@<mtime_ns>" of the file the last scan read
    scan_config: str
    stream_key: str | None
    index_digest: str
    tasks: dict[str, str] = field(default_factory=dict)  # task -> task hash
    task_digests: dict[str, str] = field(default_factory=dict)  # task -> index digest its rows were scored with


@dataclass
class ShardPlan:
    mode: str  # full | incremental | current
    reason: str
    add: list[str] = field(default_factory=list)  # tasks to scan (incremental)
    drop: list[str] = field(default_factory=list)  # tasks whose rows are deleted first (incremental)
    stream_key: str | None = None  # cached stream to scan, when there is a valid one

    def describe(self) -> str:
        if self.mode == "incremental":
            return f"incremental (+{','.join(self.add) or '-'} / -{','.join(self.drop) or '-'})"
        return f"{self.mode} ({self.reason})"


def plan_shard(state: ShardState | None, identity: str, scan_config: str, tasks_now: dict[str, str],
               stream_key: str, stream_ok: bool, mode: str = "auto", text_rescan: bool = False) -> ShardPlan:
    """Cheapest work that leaves the shard's rows equal to a full scan's, for the changed tasks.

    ``text_rescan`` (the prefilter is on): changed tasks without a cached stream are rescanned from
    the text with their own prefilter (jobs.tokenize_and_scan), not in full."""
    key = stream_key if stream_ok else None
    if mode not in ("auto", "full"):
        raise ValueError(f"scan mode must be 'auto' or 'full', got {mode!r}")
    if state is None:
        return ShardPlan("full", "never scanned", stream_key=key)
    if state.identity != identity:
        return ShardPlan("full", "shard changed")
    if state.scan_config != scan_config:
        return ShardPlan("full", "detector settings changed", stream_key=key)
    if mode == "full":
        return ShardPlan("full", "full rescan requested", stream_key=key)
    changed = sorted(t for t, h in tasks_now.items() if state.tasks.get(t) != h)
    removed = sorted(set(state.tasks) - set(tasks_now))
    if not changed and not removed:
        return ShardPlan("current", "up to date")
    if changed and not stream_ok and not text_rescan:
        return ShardPlan("full", "tasks changed but no cached token stream")
    return ShardPlan("incremental", "tasks changed" if stream_ok else "tasks changed: per-task prefilter rescan", add=changed, drop=sorted(set(changed) | set(removed)),
                     stream_key=key)


TASK_HASHES_FILE = "task_hashes.json"


def load_task_hashes(index_dir: Path, records: pl.DataFrame | None, cfg: DetectConfig) -> dict[str, str]:
    """Task hashes of an index (saved beside it by `ngram_index`; computed from `records` when absent)."""
    p = Path(index_dir) / TASK_HASHES_FILE
    if p.is_file():
        return json.loads(p.read_text())
    if records is None:
        records = pl.read_parquet(Path(index_dir) / "records.parquet")
    return task_hashes(records, cfg)
