"""One shard, start to end: what a scan engine's worker runs (no database access).

`run_shard_job` carries out a plan (rescan/plan.py): a full scan from the shard's text
that caches its token stream, a scan of the cached stream, or an incremental scan of
some tasks; the caller writes the outcome (rescan/state.py).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from contam_assets.detector.config import DetectConfig
from contam_assets.detector.index import NgramIndex
from contam_assets.detector.matches import Reference, candidates, rows_for_doc
from contam_assets.detector.text import clean_words, join_words
from contam_assets.detector.tokenize import get_tokenizer
from contam_assets.rescan import token_cache
from contam_assets.rescan.incremental import StaleStream, scan_stream
from contam_assets.rescan.plan import ShardPlan, shard_identity
from contam_assets.rescan.shard import ShardOutcome, match_frame, read_batches, shard_stats_row
from contam_assets.store.pool import Reject


def tokenize_and_scan(path: Path, shard: str, index: NgramIndex, ref: Reference, cfg: DetectConfig, content_key: str,
                      preset: str, digest: str, cache_root: Path | None, fingerprint: str | None = None,
                      identity: str | None = None) -> ShardOutcome:
    """Full scan from the shard's text (as rescan.shard.scan_shard), caching the token stream on the way."""
    t0 = time.perf_counter()
    if fingerprint is None or identity is None:
        fingerprint, identity = shard_identity(path)
    key = token_cache.cache_key(identity, cfg, content_key)
    writer = token_cache.StreamWriter(cache_root, shard, key, cfg.tokenizer) if cache_root else None
    tok = get_tokenizer(cfg.tokenizer)
    rows: list[dict] = []
    rejects: list[Reject] = []
    counters = Counter()

    try:
        for batch in read_batches(path, shard, content_key, cfg.max_doc_bytes, counters, rejects):
            words = [clean_words(d.text, cfg.clean_options) for d in batch]
            encoded = tok.encode_words(words)
            for doc, tokens in zip(batch, encoded):
                if writer:
                    writer.add(doc.line, tokens)
                counters["tokens"] += len(tokens)
                if len(tokens) < cfg.min_doc_tokens:
                    counters["too_short"] += 1  # decon rule: documents under 10 tokens are not scanned
                else:
                    counters["scanned"] += 1
            for i, (doc, tokens, cands) in enumerate(zip(batch, encoded, candidates(index, ref, encoded, words, cfg))):
                if cands:
                    rows.extend(rows_for_doc(doc, shard, join_words(words[i]), tokens, cands, ref, tok, preset))
    except BaseException:
        if writer:
            writer.abort()
        raise
    reasons = json.dumps(dict(Counter(r.reason.split(" ")[0] for r in rejects)), sort_keys=True)
    if writer:
        writer.commit(dict(shard=shard, shard_fingerprint=fingerprint, read=counters["read"], rejected=len(rejects),
                           bytes=counters["bytes"], reject_reasons=reasons))
    matches = match_frame(rows)
    stats = shard_stats_row(shard, counters, len(rejects), reasons, matches, time.perf_counter() - t0, preset, digest, fingerprint)
    tasks = sorted(set(ref.records["task"].to_list()))
    return ShardOutcome(shard, "full", matches, stats, rejects, key if writer else None, tasks, tasks,
                        docs_scanned=counters["scanned"])


@dataclass
class ShardJob:
    shard: str
    path: str
    plan: ShardPlan
    cfg: DetectConfig
    content_key: str
    preset: str
    digest: str
    cache_root: str | None  # None: no token cache
    fingerprint: str
    identity: str


def run_shard_job(job: ShardJob, index: NgramIndex, ref: Reference) -> ShardOutcome:
    """Carry out a plan; no database access (the caller writes the outcome)."""
    path = Path(job.path)
    plan = job.plan
    root = Path(job.cache_root) if job.cache_root else None
    if plan.mode == "current":
        return ShardOutcome(job.shard, "current", match_frame([]), {}, None, plan.stream_key, [], [])
    stream = token_cache.load(root, job.shard, plan.stream_key) if (root and plan.stream_key) else None
    args = (path, job.shard, index, ref, job.cfg, job.content_key, job.preset, job.digest)
    if plan.mode == "incremental":
        if not plan.add:
            return ShardOutcome(job.shard, "incremental", match_frame([]), {}, None, plan.stream_key, [], plan.drop)
        if stream is not None:
            try:
                out = scan_stream(stream, *args, tasks=plan.add)
                out.drop = plan.drop
                return out
            except StaleStream:
                pass
        return tokenize_and_scan(*args, cache_root=root, fingerprint=job.fingerprint, identity=job.identity)  # no usable stream: scan in full
    if stream is not None:
        try:
            return scan_stream(stream, *args)
        except StaleStream:
            pass
    return tokenize_and_scan(*args, cache_root=root, fingerprint=job.fingerprint, identity=job.identity)


_REFERENCES: dict[str, Reference] = {}


def run_shard_job_shared(job: ShardJob, index: NgramIndex, records: pl.DataFrame) -> ShardOutcome:
    """Entry point for engine workers: `run_shard_job`, building the Reference once per process and index."""
    ref = _REFERENCES.get(job.digest)
    if ref is None:
        _REFERENCES.clear()
        ref = _REFERENCES[job.digest] = Reference(records)
    return run_shard_job(job, index, ref)
