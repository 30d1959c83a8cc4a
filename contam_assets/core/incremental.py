"""Incremental rescans: bring one shard's matches up to date with the current index.

A shard's matches depend on the shard's bytes, the detector settings and the reference
set.  `plan_shard` compares what a shard was last scanned with (table `shard_scans`,
see core/scan_state.py) with the current state and picks the cheapest correct work:

- ``full``: never scanned, the shard changed, or the detector settings changed (or a
  full rescan was asked for).  The text is tokenized once and the token stream cached
  (core/token_cache.py); when a valid stream is cached already, it is scanned instead.
- ``incremental``: only tasks were added, changed or removed.  Rows of removed and
  changed tasks are deleted; added and changed tasks are scanned from the cached token
  stream, and only in documents that contain one of their question n-grams.
- ``current``: nothing to do.

IDF (decision, see docs/automation.md): decon's IDF is ln(N/df) over *all* indexed
records, so a new task changes N and the df of shared n-grams.  The rows of an added
task are computed with the new global index, exactly as a full rescan would compute
them: a candidate of a record can only come from a cluster started at a non-hot
question n-gram whose postings hold that record, so every document without such an
n-gram yields no row for the task, and every document with one is scanned with the
full index by the unchanged scanner, the result filtered to the task's records.  Rows
of untouched tasks keep the scores of the index they were scanned with
(`shard_task_scans.index_digest`); the nightly check rescans such shards in full.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from contam_assets.core import token_cache
from contam_assets.detector.config import DetectConfig
from contam_assets.core.detect import BATCH, read_batches
from contam_assets.detector.matches import MATCH_SCHEMA, Reference, rows_for_doc
from contam_assets.detector.index import NgramIndex
from contam_assets.detector.ngrams import ngram_hashes
from contam_assets.store.pool import Document, Reject, open_binary, parse_line, shard_fingerprint
from contam_assets.detector import scan as _scan
from contam_assets.detector import text as _text
from contam_assets.detector.scan import scan_tokens
from contam_assets.detector.text import clean_text
from contam_assets.detector.tokenize import Tokenizer, get_tokenizer


PREFILTER_TOKENS = 1 << 22  # tokens hashed at once by the n-gram prefilter

TASK_HASH_COLUMNS = ["suite", "split", "instance_index", "subject", "choice_index", "is_correct", "derived",
                     "question", "answer", "passage", "indexed"]


# -- the detector's batched calls (used when core.text/tokenize/scan offer them) --------

def clean_and_encode(docs: list[Document], cfg: DetectConfig, tok: Tokenizer):
    """Token ids of documents and a function giving document i's cleaned text (as core.detect does it)."""
    opts = cfg.clean_options
    clean_words = getattr(_text, "clean_words", None)
    if clean_words is not None and hasattr(tok, "encode_words"):
        words = [clean_words(d.text, opts) for d in docs]
        return tok.encode_words(words), lambda i: _text.join_words(words[i])
    cleaned = [clean_text(d.text, opts) for d in docs]
    return tok.encode_many(cleaned), cleaned.__getitem__


def scan_all(index: NgramIndex, docs: list[np.ndarray], cfg: DetectConfig) -> list[list]:
    """``[scan_tokens(index, t, cfg) for t in docs]`` (batched when core.scan offers scan_many)."""
    many = getattr(_scan, "scan_many", None)
    if many is not None:
        return many(index, docs, cfg)
    return [scan_tokens(index, t, cfg) for t in docs]


# -- what a task is ------------------------------------------------------------

def task_hashes(records: pl.DataFrame, cfg: DetectConfig) -> dict[str, str]:
    """Content hash per task of its reference records (what a rescan of that task depends on).

    A spec edit that leaves the records alone (a description) changes nothing; a new
    benchmark file behind an unchanged spec does.
    """
    prefix = json.dumps(cfg.reference_key(), sort_keys=True).encode()
    out = {}
    for (task,), df in records.sort("record_id").group_by("task", maintain_order=True):
        h = hashlib.sha256(prefix)
        h.update(df.select(TASK_HASH_COLUMNS).write_csv().encode())
        out[task] = h.hexdigest()[:16]
    return dict(sorted(out.items()))


def scan_config_digest(cfg: DetectConfig, content_key: str) -> str:
    """Detector settings a shard's rows depend on (a change forces a full rescan)."""
    return hashlib.sha256(f"{cfg.digest()}\x1f{content_key}".encode()).hexdigest()[:16]


def task_locals(index: NgramIndex, records: pl.DataFrame, tasks: list[str]) -> np.ndarray:
    """Index positions (locals) of the indexed records of `tasks`."""
    ids = records.filter(pl.col("task").is_in(tasks) & pl.col("indexed"))["record_id"].to_numpy()
    pos = np.searchsorted(index.record_ids, ids)
    ok = pos < index.n_records
    pos, ids = pos[ok], ids[ok]
    return pos[index.record_ids[pos] == ids]


def start_keys(index: NgramIndex, locals_: np.ndarray | None = None) -> np.ndarray:
    """Sorted question n-gram hashes that can start a cluster holding one of `locals_` (all records if None).

    decon rule (scan.find_clusters): a cluster starts only at a non-hot n-gram, and its
    candidates are the records in that n-gram's postings.
    """
    usable = ~index.hot
    if locals_ is None:
        return index.q_keys[usable]
    wanted = np.zeros(index.n_records, dtype=bool)
    wanted[locals_] = True
    key_of_pair = np.repeat(np.arange(len(index.q_keys)), np.diff(index.q_offsets))
    sel = np.zeros(len(index.q_keys), dtype=bool)
    sel[key_of_pair[wanted[index.q_docs]]] = True
    return index.q_keys[sel & usable]


class KeySet:
    """Sorted n-gram hashes with a bit filter in front (most lookups are misses)."""

    def __init__(self, keys: np.ndarray):
        self.keys = keys
        self.bits = int(min(30, max(12, np.ceil(np.log2(max(1, len(keys)) * 32)))))
        self.filter = np.zeros((1 << self.bits) // 64, dtype=np.uint64)
        b = keys >> np.uint64(64 - self.bits)
        np.bitwise_or.at(self.filter, (b >> np.uint64(6)).astype(np.int64), np.left_shift(np.uint64(1), b & np.uint64(63)))

    def contains(self, h: np.ndarray) -> np.ndarray:
        out = np.zeros(len(h), dtype=bool)
        if len(self.keys) == 0 or len(h) == 0:
            return out
        b = h >> np.uint64(64 - self.bits)
        maybe = np.flatnonzero((self.filter[(b >> np.uint64(6)).astype(np.int64)] >> (b & np.uint64(63))) & np.uint64(1))
        if len(maybe):
            hm = h[maybe]
            pos = np.minimum(np.searchsorted(self.keys, hm), len(self.keys) - 1)
            out[maybe[self.keys[pos] == hm]] = True
        return out


_SELECTIONS: dict = {}


def selection(index: NgramIndex, records: pl.DataFrame, tasks: list[str] | None) -> tuple[np.ndarray | None, KeySet]:
    """(locals of `tasks`' records or None for all, the start keys that can reach them), memoized per index."""
    key = (id(index), id(records), tuple(tasks) if tasks is not None else None)
    hit = _SELECTIONS.get(key)
    if hit is not None and hit[0] is index and hit[1] is records:
        return hit[2], hit[3]
    locals_ = None if tasks is None else task_locals(index, records, tasks)
    keys = KeySet(start_keys(index, locals_))
    if len(_SELECTIONS) > 8:
        _SELECTIONS.clear()
    _SELECTIONS[key] = (index, records, locals_, keys)
    return locals_, keys


def docs_containing(stream: token_cache.TokenStream, keys: KeySet, n: int, min_tokens: int) -> np.ndarray:
    """Positions of the stream's documents (at least `min_tokens` long) holding an n-gram in `keys`."""
    if len(keys.keys) == 0 or stream.n_docs == 0:
        return np.zeros(0, dtype=np.int64)
    off = stream.offsets
    found = []
    i = 0
    while i < stream.n_docs:
        j = int(np.searchsorted(off, off[i] + PREFILTER_TOKENS, side="right")) - 1
        j = min(max(j, i + 1), stream.n_docs)
        s, e = int(off[i]), int(off[j])
        h = ngram_hashes(np.asarray(stream.tokens[s:e], dtype=np.uint64), n)
        if len(h):
            at = np.flatnonzero(keys.contains(h)) + s
            doc = np.searchsorted(off, at, side="right") - 1
            inside = at + n <= off[doc + 1]  # n-grams across a document boundary do not exist
            found.append(np.unique(doc[inside]))
        i = j
    docs = np.unique(np.concatenate(found)) if found else np.zeros(0, dtype=np.int64)
    return docs[stream.lengths()[docs] >= min_tokens]


# -- plans ---------------------------------------------------------------------

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
               stream_key: str, stream_ok: bool, mode: str = "auto") -> ShardPlan:
    """Cheapest work that leaves the shard's rows equal to a full scan's, for the changed tasks."""
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
    if changed and not stream_ok:
        return ShardPlan("full", "tasks changed but no cached token stream")
    return ShardPlan("incremental", "tasks changed", add=changed, drop=sorted(set(changed) | set(removed)),
                     stream_key=key)


# -- scanning ------------------------------------------------------------------

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


def _stats(shard: str, counters: Counter, n_rejects: int, reject_reasons: str, matches: pl.DataFrame, seconds: float,
           preset: str, digest: str, fingerprint: str) -> dict:
    # the same shard_stats row as core.detect.scan_shard
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


def _frame(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=MATCH_SCHEMA) if rows else pl.DataFrame(schema=MATCH_SCHEMA)


def shard_identity(path: Path) -> tuple[str, str]:
    """(content fingerprint, identity): the identity adds the mtime, so an edit that keeps the
    size and the first and last MiB still counts as a change."""
    fp = shard_fingerprint(path)
    return fp, f"{fp}@{path.stat().st_mtime_ns}"


def tokenize_and_scan(path: Path, shard: str, index: NgramIndex, ref: Reference, cfg: DetectConfig, content_key: str,
                      preset: str, digest: str, cache_root: Path | None, fingerprint: str | None = None,
                      identity: str | None = None) -> ShardOutcome:
    """Full scan from the shard's text (as core.detect.scan_shard), caching the token stream on the way."""
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
            encoded, cleaned = clean_and_encode(batch, cfg, tok)
            for doc, tokens in zip(batch, encoded):
                if writer:
                    writer.add(doc.line, tokens)
                counters["tokens"] += len(tokens)
                if len(tokens) < cfg.min_doc_tokens:
                    counters["too_short"] += 1  # decon rule: documents under 10 tokens are not scanned
                else:
                    counters["scanned"] += 1
            for i, (doc, tokens, cands) in enumerate(zip(batch, encoded, scan_all(index, encoded, cfg))):
                if cands:
                    rows.extend(rows_for_doc(doc, shard, cleaned(i), tokens, cands, ref, tok, preset))
    except BaseException:
        if writer:
            writer.abort()
        raise
    reasons = json.dumps(dict(Counter(r.reason.split(" ")[0] for r in rejects)), sort_keys=True)
    if writer:
        writer.commit(dict(shard=shard, shard_fingerprint=fingerprint, read=counters["read"], rejected=len(rejects),
                           bytes=counters["bytes"], reject_reasons=reasons))
    matches = _frame(rows)
    stats = _stats(shard, counters, len(rejects), reasons, matches, time.perf_counter() - t0, preset, digest, fingerprint)
    tasks = sorted(set(ref.records["task"].to_list()))
    return ShardOutcome(shard, "full", matches, stats, rejects, key if writer else None, tasks, tasks,
                        docs_scanned=counters["scanned"])


def read_lines(path: Path, shard: str, content_key: str, max_doc_bytes: int, lines: set[int]) -> dict[int, Document]:
    """The documents at `lines` of a shard (one pass, parsing only those lines)."""
    out: dict[int, Document] = {}
    if not lines:
        return out
    last = max(lines)
    with open_binary(path) as fh:
        for no, raw in enumerate(fh):
            if no in lines:
                item = parse_line(raw, no, shard, content_key, max_doc_bytes)
                if isinstance(item, Document):
                    out[no] = item
            if no >= last:
                break
    return out


class StaleStream(RuntimeError):
    """The cached stream does not match the shard's text any more."""


def scan_stream(stream: token_cache.TokenStream, path: Path, shard: str, index: NgramIndex, ref: Reference,
                cfg: DetectConfig, content_key: str, preset: str, digest: str,
                tasks: list[str] | None = None) -> ShardOutcome:
    """Scan a cached token stream: every task (tasks=None, a full scan) or only `tasks` (incremental)."""
    t0 = time.perf_counter()
    locals_, keys = selection(index, ref.records, tasks)
    keep = None
    if locals_ is not None:
        keep = np.zeros(index.n_records, dtype=bool)
        keep[locals_] = True
    docs = docs_containing(stream, keys, cfg.ngram_size, cfg.min_doc_tokens)
    found: dict[int, tuple[np.ndarray, list]] = {}
    for start in range(0, len(docs), BATCH):
        part = [int(i) for i in docs[start : start + BATCH]]
        tokens = [stream.doc(i) for i in part]
        for i, toks, cands in zip(part, tokens, scan_all(index, tokens, cfg)):
            if keep is not None:
                cands = [c for c in cands if keep[c.local]]
            if cands:
                found[int(stream.lines[i])] = (toks, cands)
    tok = get_tokenizer(cfg.tokenizer)
    texts = read_lines(path, shard, content_key, cfg.max_doc_bytes, set(found))
    rows: list[dict] = []
    for line in sorted(found):
        tokens, cands = found[line]
        doc = texts.get(line)
        cleaned = clean_text(doc.text, cfg.clean_options) if doc else ""
        if doc is None or len(tok.encode(cleaned)) != len(tokens):
            raise StaleStream(f"{shard}: line {line} no longer matches the cached token stream")
        rows.extend(rows_for_doc(doc, shard, cleaned, tokens, cands, ref, tok, preset))
    matches = _frame(rows)
    lengths = stream.lengths()
    scanned = int((lengths >= cfg.min_doc_tokens).sum())
    counters = Counter(read=int(stream.meta["read"]), bytes=int(stream.meta["bytes"]), tokens=int(stream.offsets[-1]),
                       scanned=scanned, too_short=stream.n_docs - scanned)
    stats = _stats(shard, counters, int(stream.meta["rejected"]), stream.meta["reject_reasons"], matches,
                   time.perf_counter() - t0, preset, digest, stream.meta["shard_fingerprint"])
    all_tasks = sorted(set(ref.records["task"].to_list()))
    if tasks is None:
        return ShardOutcome(shard, "full", matches, stats, None, stream.key, all_tasks, all_tasks, docs_scanned=len(docs))
    return ShardOutcome(shard, "incremental", matches, stats, None, stream.key, sorted(tasks), [], docs_scanned=len(docs))


# -- one shard, start to end (what an engine worker runs) --------------------------

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
        return ShardOutcome(job.shard, "current", _frame([]), {}, None, plan.stream_key, [], [])
    stream = token_cache.load(root, job.shard, plan.stream_key) if (root and plan.stream_key) else None
    args = (path, job.shard, index, ref, job.cfg, job.content_key, job.preset, job.digest)
    if plan.mode == "incremental":
        if not plan.add:
            return ShardOutcome(job.shard, "incremental", _frame([]), {}, None, plan.stream_key, [], plan.drop)
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


TASK_HASHES_FILE = "task_hashes.json"


def load_task_hashes(index_dir: Path, records: pl.DataFrame | None, cfg: DetectConfig) -> dict[str, str]:
    """Task hashes of an index (saved beside it by `ngram_index`; computed from `records` when absent)."""
    p = Path(index_dir) / TASK_HASHES_FILE
    if p.is_file():
        return json.loads(p.read_text())
    if records is None:
        records = pl.read_parquet(Path(index_dir) / "records.parquet")
    return task_hashes(records, cfg)
