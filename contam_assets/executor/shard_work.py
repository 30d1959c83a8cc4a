"""One shard, start to end: what a scan engine's worker runs (no database access).

`run_shard_work` carries out a plan (rescan/plan.py): a full scan from the shard's text
that caches its token stream, a scan of the cached stream, or an incremental scan of
some tasks; the caller writes the outcome (rescan/state.py).
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from contam_assets.detector.config import DetectConfig
from contam_assets.detector.index import NgramIndex
from contam_assets.detector.matches import Reference, Words, candidates, rows_for_doc, tokenize_batch
from contam_assets.detector.ngrams import ngram_hashes
from contam_assets.detector.prefilter import ensure_prefilter
from contam_assets.detector.text import join_words
from contam_assets.detector.tokenize import get_tokenizer
from contam_assets.paraphrase.crosslingual import crosslingual_rows
from contam_assets.paraphrase.stage import paraphrase_rows
from contam_assets.rescan.incremental import StaleStream, scan_stream, selection
from contam_assets.rescan.plan import ShardPlan, shard_identity
from contam_assets.rescan.shard import (
    MatchSink,
    ShardOutcome,
    match_frame,
    outcome_rows,
    read_batches,
    reject_reasons,
    shard_stats_row,
    status_of,
)
from contam_assets.store import token_cache
from contam_assets.store.artifacts import records_from_ipc
from contam_assets.store.faults import fault_point
from contam_assets.store.mirror import local_rel
from contam_assets.store.pool import Reject, StreamFailure
from contam_assets.store.readers import is_jsonl


def tokenize_and_scan(path: Path, shard: str, index: NgramIndex, ref: Reference, cfg: DetectConfig, content_key: str,
                      preset: str, digest: str, cache_root: Path | None, fingerprint: str | None = None,
                      identity: str | None = None, parts: Path | None = None,
                      tasks: list[str] | None = None) -> ShardOutcome:
    """Full scan from the shard's text (as rescan.shard.scan_shard), caching the token stream on the way.

    ``parts``: the Parquet file the match rows go to (None: kept in memory).  The token stream of a
    shard whose stream broke is not cached (a later rescan reads the shard again).

    With ``cfg.prefilter`` the documents the prefilter clears are not tokenized (and no token stream
    is cached: it would miss them); with ``tasks`` as well, of the documents the prefilter passes only those
    holding an n-gram that lets ``tasks``' records change the walk (incremental.start_keys) are scanned, and
    every task's rows of them are made, as a cached stream's rescan makes them (incremental.scan_stream):
    the text rescan of a shard for some tasks (an incremental outcome).
    """
    t0 = time.perf_counter()
    if fingerprint is None or identity is None:
        fingerprint, identity = shard_identity(path)
    key = token_cache.cache_key(identity, cfg, content_key)
    pf = ensure_prefilter(index, ref.records, cfg) if cfg.prefilter else None
    keys = selection(index, ref.records, tasks, cfg)[1] if tasks is not None else None
    walked: list[int] | None = [] if tasks is not None else None  # lines whose rows of every task are made again
    writer = token_cache.StreamWriter(cache_root, shard, key, cfg.tokenizer) if cache_root and pf is None else None
    tok = get_tokenizer(cfg.tokenizer)
    sink = MatchSink(parts)
    rejects: list[Reject] = []
    failures: list[StreamFailure] = []
    counters = Counter()

    try:
        for batch in read_batches(path, shard, content_key, cfg.max_doc_bytes, counters, rejects, failures):
            batch, encoded, words, cleared = tokenize_batch(batch, cfg, pf)
            if pf is not None:
                counters["prefiltered"] += cleared
                counters["scanned"] += cleared
            for doc, tokens in zip(batch, encoded):
                if writer:
                    writer.add(doc.line, tokens, doc.raw, doc.offset)
                counters["tokens"] += len(tokens)
                if len(tokens) < cfg.min_doc_tokens:
                    counters["too_short"] += 1  # decon rule: documents under 10 tokens are not scanned
                else:
                    counters["scanned"] += 1
            if keys is not None:  # the documents the tasks' records can change, walked again for every task
                hit = [i for i, t in enumerate(encoded) if len(t) >= cfg.min_doc_tokens
                       and keys.contains(ngram_hashes(np.asarray(t, dtype=np.uint64), cfg.ngram_size)).any()]
                batch, encoded, words = [batch[i] for i in hit], [encoded[i] for i in hit], Words([words.parts[i] for i in hit])
                walked.extend(doc.line for doc in batch)
            rows: list[dict] = []
            for i, (doc, tokens, cands) in enumerate(zip(batch, encoded, candidates(index, ref, encoded, words, cfg))):
                if cands:
                    rows.extend(rows_for_doc(doc, shard, join_words(words[i]), tokens, cands, ref, tok, preset, cfg.threshold))
            if cfg.paraphrase:  # the paraphrase part, after the n-gram rows of the same documents
                rows.extend(paraphrase_rows(batch, shard, ref, cfg, preset, rows))
            if cfg.crosslingual:  # translations into other languages, after the other rows of the same documents
                rows.extend(crosslingual_rows(batch, shard, ref, preset, rows))
            sink.extend(rows)
            fault_point("scan")
        matches = sink.close()
    except BaseException:
        sink.abort()
        if writer:
            writer.abort()
        raise
    reasons = reject_reasons(rejects)
    if writer and failures:
        writer.abort()  # an incomplete stream is never cached
        writer = None
    if writer:
        writer.commit(stream_meta(shard, fingerprint, counters, rejects), rejects)
    stats = shard_stats_row(shard, counters, len(rejects), reasons, sink, time.perf_counter() - t0, preset, digest,
                            fingerprint, status=status_of(failures, counters["read"]))
    if tasks is not None:
        return ShardOutcome(shard, "incremental", stats=stats, rejects=None, stream_key=None, tasks=sorted(tasks),
                            drop=[], docs_scanned=counters["scanned"] - counters["prefiltered"], lines=walked,
                            **outcome_rows(sink, matches))
    tasks = list(ref.tasks)
    return ShardOutcome(shard, "full", stats=stats, rejects=rejects, stream_key=key if writer else None, tasks=tasks,
                        drop=tasks, docs_scanned=counters["scanned"] - counters["prefiltered"], **outcome_rows(sink, matches))


def stream_meta(shard: str, fingerprint: str, counters: Counter, rejects: list[Reject]) -> dict:
    """What a cached token stream records of its shard's read (scan_stream's counters come from it)."""
    return dict(shard=shard, shard_fingerprint=fingerprint, read=counters["read"], rejected=len(rejects),
                bytes=counters["bytes"], reject_reasons=reject_reasons(rejects))


def cache_stream(path: Path, shard: str, cfg: DetectConfig, content_key: str, cache_root: Path, fingerprint: str,
                 identity: str, stop: Callable[[], bool] = lambda: False) -> str:
    """Tokenize a shard into its cached token stream, nothing else (no index needed): the stream
    tokenize_and_scan writes, so a later scan of the shard reads it instead of tokenizing.

    'cached'; 'broken' when the shard's stream broke (nothing is cached, as tokenize_and_scan does);
    'stopped' when ``stop()`` turned true between two batches (nothing is cached)."""
    writer = token_cache.StreamWriter(cache_root, shard, token_cache.cache_key(identity, cfg, content_key), cfg.tokenizer)
    rejects: list[Reject] = []
    failures: list[StreamFailure] = []
    counters = Counter()
    try:
        for batch in read_batches(path, shard, content_key, cfg.max_doc_bytes, counters, rejects, failures):
            if stop():
                writer.abort()
                return "stopped"
            batch, encoded, _, _ = tokenize_batch(batch, cfg)
            for doc, tokens in zip(batch, encoded):
                writer.add(doc.line, tokens, doc.raw, doc.offset)
    except BaseException:
        writer.abort()
        raise
    if failures:
        writer.abort()
        return "broken"
    writer.commit(stream_meta(shard, fingerprint, counters, rejects), rejects)
    return "cached"


@dataclass
class ShardWork:
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
    parts_dir: str | None = None  # where match rows are written as Parquet (None: returned in memory)
    source: object = None  # a remote pool: its store.location.Location (no credentials), the shard read from there
    size: int = -1  # the shard's size as listed (-1: not known); a fetched copy of another size is refused

    def parts(self) -> Path | None:
        """This shard's Parquet part (a fresh name per job, so two runs never share one)."""
        if not self.parts_dir:
            return None
        return Path(self.parts_dir) / "matches" / f"{local_rel(self.shard)}.{os.getpid()}-{uuid.uuid4().hex[:8]}.parquet"


def current_outcome(job: ShardWork) -> ShardOutcome:
    """The outcome of a shard whose rows are current: nothing read, nothing written."""
    return ShardOutcome(job.shard, "current", match_frame([]), {}, None, job.plan.stream_key, [], [])


def run_shard_work(job: ShardWork, index: NgramIndex, ref: Reference) -> ShardOutcome:
    """Carry out a plan; no database access (the caller writes the outcome)."""
    path = job.path if "://" in job.path else Path(job.path)  # a URL: a unit of a remote pool, read in place
    plan = job.plan
    # token streams are cached for JSON/JSONL units only (their rescans re-read lines by byte offset); a Parquet or
    # Arrow unit takes the plain path: read and scanned in full whenever it is scanned
    root = Path(job.cache_root) if job.cache_root and is_jsonl(job.shard) else None
    if plan.mode == "current":
        return current_outcome(job)
    # a cached stream holds tokens, not the text the paraphrase and crosslingual parts embed: with either on, the text
    # is read again
    embeds = job.cfg.paraphrase or job.cfg.crosslingual
    stream = token_cache.load(root, job.shard, plan.stream_key) if (root and plan.stream_key and not embeds) else None
    args = (path, job.shard, index, ref, job.cfg, job.content_key, job.preset, job.digest)
    if plan.mode == "incremental":
        if not plan.add:
            return ShardOutcome(job.shard, "incremental", match_frame([]), {}, None, plan.stream_key, [], plan.drop)
        if stream is not None:
            try:
                out = scan_stream(stream, *args, tasks=plan.add, parts=job.parts())
                out.drop = plan.drop
                return out
            except StaleStream:
                # dropped: the full scan below caches the shard anew (with the prefilter on, nothing is cached)
                token_cache.discard(root, job.shard, plan.stream_key)
        if job.cfg.prefilter:  # no usable stream: the per-task rescan, its prefilter on the shard's text
            out = tokenize_and_scan(*args, cache_root=None, fingerprint=job.fingerprint, identity=job.identity,
                                    parts=job.parts(), tasks=plan.add)
            out.drop = plan.drop
            return out
        # no usable stream: scan in full
        return tokenize_and_scan(*args, cache_root=root, fingerprint=job.fingerprint, identity=job.identity, parts=job.parts())
    if stream is not None:
        try:
            return scan_stream(stream, *args, parts=job.parts())
        except StaleStream:
            token_cache.discard(root, job.shard, plan.stream_key)
    return tokenize_and_scan(*args, cache_root=root, fingerprint=job.fingerprint, identity=job.identity, parts=job.parts())


_REFERENCES: dict[str, Reference] = {}


def run_shard_work_shared(job: ShardWork, index: NgramIndex, records) -> ShardOutcome:
    """Entry point for engine workers: `run_shard_work`, building the Reference once per process and index.
    ``records``: a polars table, or the bytes of an Arrow IPC file (a Ray task's, `engines.ray_records`, in the
    node's object store: the table is taken over them, nothing copied)."""
    ref = _REFERENCES.get(job.digest)
    if ref is None:
        _REFERENCES.clear()
        if not isinstance(records, pl.DataFrame):
            records = records_from_ipc(records)
        ref = _REFERENCES[job.digest] = Reference(records)
    out = run_shard_work(job, index, ref)
    out.node = _ray_node()
    return out


def _refuse_changed(job: ShardWork, size: int) -> None:
    """OSError when the store's copy of the job's shard is not the size the pool listed."""
    if job.size >= 0 and size != job.size:
        raise OSError(f"{job.shard}: {size} bytes in the store, {job.size} when listed (changed since; list the pool "
                      "again)")


def run_shard_work_detached(job: ShardWork, index: NgramIndex, records) -> ShardOutcome:
    """Entry point for a worker that shares no folder with the driver (a Ray node of its own): the shard is read from
    the remote pool where it is (JSON/JSONL streamed, Parquet and Arrow by range requests: the footer and the columns
    scanned), scanned with no token cache, and its match rows come back in the outcome (not as a Parquet part in the
    driver's folder).  Nothing of it is written to the node's disk."""
    import dataclasses

    from contam_assets.store.location import retrying

    if job.plan.mode == "current":
        return current_outcome(job)
    url = job.source.url(job.shard) if "://" not in job.path else job.path
    _refuse_changed(job, retrying(job.source.filesystem().size, url))
    return run_shard_work_shared(dataclasses.replace(job, path=url, parts_dir=None, cache_root=None), index, records)


def _ray_node() -> str:
    """The Ray node whose worker this process is ('' outside Ray; ray is never imported here)."""
    ray = sys.modules.get("ray")
    return ray.get_runtime_context().get_node_id() if ray is not None and ray.is_initialized() else ""
