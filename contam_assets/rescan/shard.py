"""Scan one shard in full: read documents, run the detector, collect match rows and counters.

The first case of keeping a pool current (rescan/plan.py): a shard never seen, or
changed, is read and scanned from its text.  `ShardOutcome` is what any scan of a
shard hands back to be written (rescan/state.py).
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import polars as pl

from contam_assets.detector.config import DetectConfig
from contam_assets.detector.index import NgramIndex
from contam_assets.detector.matches import MATCH_SCHEMA, Reference, scan_documents
from contam_assets.store.pool import Document, Reject, read_shard

BATCH = 256  # documents read, tokenized and scanned together


@dataclass
class ShardResult:
    shard: str
    matches: pl.DataFrame
    stats: dict
    rejects: list[Reject] = field(default_factory=list)
    prefiltered: int = 0  # documents the prefilter cleared without tokenizing (cfg.prefilter)


def read_batches(path: Path, shard: str, content_key: str, max_doc_bytes: int, counters: Counter,
                 rejects: list[Reject], size: int = BATCH) -> Iterator[list[Document]]:
    """Documents of a shard in batches; counts `read` and `bytes` and collects rejects on the way."""
    batch: list[Document] = []
    for item in read_shard(path, shard, content_key, max_doc_bytes):
        counters["read"] += 1
        if isinstance(item, Reject):
            rejects.append(item)
            continue
        counters["bytes"] += item.n_bytes
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def scan_shard(path: Path, shard: str, index: NgramIndex, ref: Reference, cfg: DetectConfig, content_key: str = "text",
               preset: str = "default", index_digest: str = "") -> ShardResult:
    t0 = time.perf_counter()
    rows: list[dict] = []
    rejects: list[Reject] = []
    counters = Counter()
    for batch in read_batches(path, shard, content_key, cfg.max_doc_bytes, counters, rejects):
        r, c = scan_documents(batch, shard, index, ref, cfg, preset)
        rows.extend(r)
        counters.update(c)
    matches = match_frame(rows)
    reasons = json.dumps(dict(Counter(r.reason.split(" ")[0] for r in rejects)), sort_keys=True)
    stats = shard_stats_row(shard, counters, len(rejects), reasons, matches, time.perf_counter() - t0, preset,
                            index_digest, fingerprint="")
    return ShardResult(shard=shard, matches=matches, stats=stats, rejects=rejects, prefiltered=counters["prefiltered"])


@dataclass
class ShardOutcome:
    shard: str
    mode: str
    matches: pl.DataFrame
    stats: dict  # a shard_stats row (full scans) or the counters of an incremental scan
    rejects: list[Reject] | None  # None: unchanged since the last full scan (not re-read)
    stream_key: str | None
    tasks: list[str]  # tasks whose rows `matches` holds in full
    drop: list[str]  # tasks whose old rows are replaced
    docs_scanned: int = 0  # documents the scanner looked at
    worker: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")  # process that scanned it


def shard_stats_row(shard: str, counters: Counter, n_rejects: int, reject_reasons: str, matches: pl.DataFrame, seconds: float,
           preset: str, digest: str, fingerprint: str) -> dict:
    """The shard_stats row of a scan (every scan path writes the same columns)."""
    rows = matches.height > 0
    flagged_lines = set(matches.filter(pl.col("flagged"))["line"].to_list()) if rows else set()
    primary = set(matches.filter(pl.col("flagged") & ~pl.col("needs_review"))["line"].to_list()) if rows else set()
    return dict(
        shard=shard, read=counters["read"], scanned=counters["scanned"], too_short=counters["too_short"],
        rejected=n_rejects, flagged=len(flagged_lines), pending_review=len(flagged_lines - primary),
        removed=len(primary), kept=counters["read"] - n_rejects - len(primary), bytes=counters["bytes"],
        tokens=counters["tokens"], candidates=matches.height, seconds=round(seconds, 3), shard_fingerprint=fingerprint,
        reject_reasons=reject_reasons, preset=preset, index_digest=digest,
    )


def match_frame(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=MATCH_SCHEMA) if rows else pl.DataFrame(schema=MATCH_SCHEMA)
