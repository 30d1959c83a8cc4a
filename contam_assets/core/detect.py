"""Scan one shard: read documents, run the detector, collect match rows and counters."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import polars as pl

from contam_assets.store.pool import Document, Reject, read_shard
from contam_assets.detector.config import DetectConfig
from contam_assets.detector.index import NgramIndex
from contam_assets.detector.matches import MATCH_SCHEMA, Reference, scan_documents

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
    matches = pl.DataFrame(rows, schema=MATCH_SCHEMA) if rows else pl.DataFrame(schema=MATCH_SCHEMA)
    flagged_lines = set(matches.filter(pl.col("flagged"))["line"].to_list()) if rows else set()
    primary_flagged = set(matches.filter(pl.col("flagged") & ~pl.col("needs_review"))["line"].to_list()) if rows else set()
    stats = dict(
        shard=shard, read=counters["read"], scanned=counters["scanned"], too_short=counters["too_short"],
        rejected=len(rejects), flagged=len(flagged_lines), pending_review=len(flagged_lines - primary_flagged),
        removed=len(primary_flagged), kept=counters["read"] - len(rejects) - len(primary_flagged),
        bytes=counters["bytes"], tokens=counters["tokens"], candidates=matches.height,
        seconds=round(time.perf_counter() - t0, 3), shard_fingerprint="",
        reject_reasons=json.dumps(dict(Counter(r.reason.split(" ")[0] for r in rejects)), sort_keys=True),
        preset=preset, index_digest=index_digest,
    )
    return ShardResult(shard=shard, matches=matches, stats=stats, rejects=rejects, prefiltered=counters["prefiltered"])
