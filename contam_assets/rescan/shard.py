"""Scan one shard in full: read documents, run the detector, collect match rows and counters.

The first case of keeping a pool current (rescan/plan.py): a shard never seen, or
changed, is read and scanned from its text.  `ShardOutcome` is what any scan of a
shard hands back to be written (rescan/state.py).

A shard's status says whether its stream could be read to its end: ``ok``; or
``incomplete`` (the compressed stream broke after some lines: those are scanned and
their matches kept, the shard gets no mix file until it is replaced or accepted); or
``failed`` (nothing could be read, or a step raised).  Match rows are kept in bounded
batches (`MatchSink`), spilled to a Parquet part when a folder for parts is given, so a
shard where every document matches costs no more memory than any other.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import polars as pl

from contam_assets.detector.config import DetectConfig
from contam_assets.detector.index import NgramIndex
from contam_assets.detector.matches import MATCH_SCHEMA, Reference, scan_documents
from contam_assets.store.documents import BATCH_BYTES
from contam_assets.store.pool import Document, Reject, StreamFailure, read_shard, safe_text

BATCH = 256  # documents read, tokenized and scanned together
SINK_ROWS = 4096  # match rows held in memory before they are written out as one Parquet row group
TOP = 10  # best rows a sink keeps for asset metadata
TOP_FIELDS = ("shard", "line", "task", "suite", "split", "instance_index", "score", "flagged", "needs_review")


def _top_key(r: dict) -> tuple:
    return r["flagged"], r["score"]

OK, INCOMPLETE, FAILED = "ok", "incomplete", "failed"


@dataclass
class ShardResult:
    shard: str
    matches: pl.DataFrame
    stats: dict
    rejects: list[Reject] = field(default_factory=list)
    prefiltered: int = 0  # documents the prefilter cleared without tokenizing (cfg.prefilter)


def read_batches(path: Path, shard: str, content_key: str, max_doc_bytes: int, counters: Counter,
                 rejects: list[Reject], failures: list[StreamFailure] | None = None,
                 size: int = BATCH, max_bytes: int | None = None) -> Iterator[list[Document]]:
    """Documents of a shard in batches of ``size`` documents and about ``max_bytes`` (BATCH_BYTES) of text at most (one
    document at least); counts `read` and `bytes`, collects rejects and a stream failure on the way."""
    max_bytes = max_bytes or BATCH_BYTES
    batch: list[Document] = []
    held = 0
    for item in read_shard(path, shard, content_key, max_doc_bytes):
        if isinstance(item, StreamFailure):
            if failures is not None:
                failures.append(item)
            continue
        counters["read"] += 1
        if isinstance(item, Reject):
            rejects.append(item)
            continue
        counters["bytes"] += item.n_bytes
        if batch and held + item.n_bytes > max_bytes:
            yield batch
            batch, held = [], 0
        batch.append(item)
        held += item.n_bytes
        if len(batch) >= size:
            yield batch
            batch, held = [], 0
    if batch:
        yield batch


def reject_reasons(rejects: list[Reject]) -> str:
    """Rejects per reason (its first word), as JSON: shard_stats.reject_reasons."""
    return json.dumps(dict(Counter(r.reason.split(" ")[0] for r in rejects)), sort_keys=True)


def status_of(failures: list[StreamFailure], read: int) -> dict:
    """status / status_reason / error_offset / error_line of a shard read with these stream failures."""
    if not failures:
        return dict(status=OK, status_reason=None, error_offset=None, error_line=None)
    f = failures[0]
    return dict(status=INCOMPLETE if read else FAILED, status_reason=f.reason, error_offset=f.offset, error_line=f.line)


def match_frame(rows: list[dict]) -> pl.DataFrame:
    """Match rows as a frame of MATCH_SCHEMA; text with lone surrogates is stored escaped."""
    if not rows:
        return pl.DataFrame(schema=MATCH_SCHEMA)
    try:
        return pl.DataFrame(rows, schema=MATCH_SCHEMA)
    except Exception:  # noqa: BLE001 - polars refuses strings that are not valid UTF-8 (lone surrogates)
        return pl.DataFrame([{k: safe_text(v) if isinstance(v, str) else v for k, v in r.items()} for r in rows],
                            schema=MATCH_SCHEMA)


class MatchSink:
    """The match rows of one shard, held at most SINK_ROWS at a time.

    With ``path`` the rows go to a Parquet file (written under a temporary name, renamed
    on :meth:`close`); without, they are kept as frames and concatenated at the end.
    The counts the shard_stats row needs (flagged lines, primary flagged lines) and the
    best rows are kept on the way.
    """

    def __init__(self, path: Path | None = None):
        self.path = Path(path) if path else None
        self._tmp = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}") if path else None
        self._rows: list[dict] = []
        self._frames: list[pl.DataFrame] = []
        self._writer = None
        self.n = 0
        self.flagged_lines: set[int] = set()
        self.primary_lines: set[int] = set()
        self.top: list[dict] = []

    def extend(self, rows: list[dict]) -> None:
        for r in rows:
            if r["flagged"]:
                self.flagged_lines.add(r["line"])
                if not r["needs_review"]:
                    self.primary_lines.add(r["line"])
        self._rows.extend(rows)
        self.n += len(rows)
        if len(self._rows) >= SINK_ROWS:
            self._flush()

    def _flush(self) -> None:
        if not self._rows:
            return
        df = match_frame(self._rows)
        # the best rows so far, flagged first, then by score (ties in the order the rows came: a stable sort)
        best = [{k: safe_text(r[k]) if isinstance(r[k], str) else r[k] for k in TOP_FIELDS}  # as match_frame stores text
                for r in sorted(self._rows, key=_top_key, reverse=True)[:TOP]]
        self._rows = []
        self.top = sorted(self.top + best, key=_top_key, reverse=True)[:TOP]
        if self.path is None:
            self._frames.append(df)
            return
        import pyarrow.parquet as pq

        table = df.to_arrow()
        if self._writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = pq.ParquetWriter(self._tmp, table.schema)
        self._writer.write_table(table)

    def close(self) -> pl.DataFrame | None:
        """The frame (in memory) or None (written to `path`).  No rows: an empty frame, and no file (a pool of many
        small shards, most without a match, would pay a file written and read back for each)."""
        self._flush()
        if self.path is None:
            return pl.concat(self._frames) if self._frames else match_frame([])
        if self._writer is None:
            return match_frame([])
        self._writer.close()
        os.replace(self._tmp, self.path)
        return None

    def abort(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)


def scan_shard(path: Path, shard: str, index: NgramIndex, ref: Reference, cfg: DetectConfig, content_key: str = "text",
               preset: str = "default", index_digest: str = "") -> ShardResult:
    t0 = time.perf_counter()
    sink = MatchSink()
    rejects: list[Reject] = []
    failures: list[StreamFailure] = []
    counters = Counter()
    for batch in read_batches(path, shard, content_key, cfg.max_doc_bytes, counters, rejects, failures):
        r, c = scan_documents(batch, shard, index, ref, cfg, preset)
        if cfg.paraphrase:  # the paraphrase part, after the n-gram rows of the same documents
            from contam_assets.paraphrase.stage import paraphrase_rows

            r += paraphrase_rows(batch, shard, ref, cfg, preset, r)
        if cfg.crosslingual:  # translations into other languages (contam_assets/paraphrase/crosslingual.py)
            from contam_assets.paraphrase.crosslingual import crosslingual_rows

            r += crosslingual_rows(batch, shard, ref, preset, r)
        sink.extend(r)
        counters.update(c)
    matches = sink.close()
    reasons = reject_reasons(rejects)
    stats = shard_stats_row(shard, counters, len(rejects), reasons, sink, time.perf_counter() - t0, preset,
                            index_digest, fingerprint="", status=status_of(failures, counters["read"]))
    return ShardResult(shard=shard, matches=matches, stats=stats, rejects=rejects, prefiltered=counters["prefiltered"])


@dataclass
class ShardOutcome:
    shard: str
    mode: str
    matches: pl.DataFrame | None  # None: the rows are in the Parquet file `matches_path`
    stats: dict  # a shard_stats row (full scans) or the counters of an incremental scan
    rejects: list[Reject] | None  # None: unchanged since the last full scan (not re-read)
    stream_key: str | None
    tasks: list[str]  # tasks whose rows `matches` holds in full
    drop: list[str]  # tasks whose old rows are replaced
    docs_scanned: int = 0  # documents the scanner looked at
    worker: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")  # process that scanned it
    node: str = ""  # the Ray node that scanned it ('' in-process)
    attempts: int = 1  # 2 or more: an engine submitted it again after its worker or node died
    matches_path: str | None = None
    n_matches: int = 0
    top: list[dict] = field(default_factory=list)  # the best rows, for metadata
    lines: list[int] | None = None  # incremental: the lines walked again, whose rows of every task `matches` replaces


def outcome_rows(sink: MatchSink, matches: pl.DataFrame | None) -> dict:
    """The ShardOutcome fields of a closed sink."""
    return dict(matches=matches, matches_path=str(sink.path) if sink.path and matches is None else None, n_matches=sink.n,
                top=sink.top)


def shard_stats_row(shard: str, counters: Counter, n_rejects: int, reject_reasons: str, sink: MatchSink, seconds: float,
                    preset: str, digest: str, fingerprint: str, status: dict | None = None) -> dict:
    """The shard_stats row of a scan (every scan path writes the same columns)."""
    return dict(
        shard=shard, read=counters["read"], scanned=counters["scanned"], too_short=counters["too_short"],
        rejected=n_rejects, flagged=len(sink.flagged_lines), pending_review=len(sink.flagged_lines - sink.primary_lines),
        removed=len(sink.primary_lines), kept=counters["read"] - n_rejects - len(sink.primary_lines),
        bytes=counters["bytes"], tokens=counters["tokens"], candidates=sink.n, seconds=round(seconds, 3),
        shard_fingerprint=fingerprint, reject_reasons=reject_reasons, preset=preset, index_digest=digest,
        **(status or status_of([], counters["read"])), prefiltered=counters["prefiltered"],
    )
