"""Incremental rescans: scan a cached token stream for some tasks only.

IDF (decision, see docs/automation.md): decon's IDF is ln(N/df) over *all* indexed
records, so a new task changes N and the df of shared n-grams.  The rows of an added
task are computed with the new global index, exactly as a full rescan would compute
them: a candidate of a record can only come from a cluster started at a non-hot
question n-gram whose postings hold that record, so every document without such an
n-gram yields no row for the task, and every document with one is scanned with the
full index by the unchanged scanner.  decon's walk samples every few n-grams and resumes
after each cluster's end, so the task's records can move where it looks in such a
document and find (or miss) another task's record there: those documents' rows of every
task are replaced by the new walk's (`ShardOutcome.lines`).  Elsewhere, rows of untouched
tasks keep the scores of the index they were scanned with
(`shard_task_scans.index_digest`); the nightly check rescans such shards in full.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Iterator

import numpy as np
import polars as pl

from contam_assets.detector import compiled, key_table
from contam_assets.detector.config import DetectConfig
from contam_assets.detector.index import NgramIndex, encode_texts
from contam_assets.detector.matches import Reference, rows_for_doc
from contam_assets.detector.ngrams import ngram_hash, ngram_hashes, segment_ngram_hashes
from contam_assets.detector.scan import scan_many
from contam_assets.detector.text import clean_words, join_words
from contam_assets.detector.thorough import ensure_extras, finish
from contam_assets.detector.tokenize import get_tokenizer
from contam_assets.rescan.shard import BATCH, MatchSink, ShardOutcome, outcome_rows, shard_stats_row
from contam_assets.store import token_cache
from contam_assets.store.compression import StreamError
from contam_assets.store.pool import Document, open_binary, parse_line

PREFILTER_TOKENS = 1 << 22  # tokens hashed at once by the n-gram prefilter


def task_locals(index: NgramIndex, records: pl.DataFrame, tasks: list[str]) -> np.ndarray:
    """Index positions (locals) of the indexed records of `tasks`."""
    ids = records.filter(pl.col("task").is_in(tasks) & pl.col("indexed"))["record_id"].to_numpy()
    pos = np.searchsorted(index.record_ids, ids)
    ok = pos < index.n_records
    pos, ids = pos[ok], ids[ok]
    return pos[index.record_ids[pos] == ids]


def start_keys(index: NgramIndex, locals_: np.ndarray | None = None) -> np.ndarray:
    """Sorted question n-gram hashes that can start a cluster holding one of `locals_` (all records if None),
    and with `locals_` also those that are hot only through them.

    decon rule (scan.find_clusters): a cluster starts only at a non-hot n-gram, and its
    candidates are the records in that n-gram's postings.  The sampled walk that finds the clusters
    resumes after each one's end, so where it looks next depends on every record: a document where
    `locals_`' records start a cluster, lengthen one, or make an n-gram hot may give other records'
    rows too, and is walked again for every task (scan_stream).
    """
    usable = ~index.hot
    if locals_ is None:
        return index.q_keys[usable]
    wanted = np.zeros(index.n_records, dtype=bool)
    wanted[locals_] = True
    key_of_pair = np.repeat(np.arange(len(index.q_keys)), np.diff(index.q_offsets))
    theirs = np.bincount(key_of_pair[wanted[index.q_docs]], minlength=len(index.q_keys))
    # hot only with them: the n-gram started clusters of other records before they were added
    made_hot = index.hot & (np.diff(index.q_offsets) - theirs <= index.hot_threshold)
    return index.q_keys[(theirs > 0) & (usable | made_hot)]


TABLE_MAX_KEYS = 1 << 22  # a KeySet builds its directory (key_table.directory_for) for at most this many keys


class KeySet:
    """Sorted n-gram hashes with a key filter in front (key_table.key_filter: most lookups are misses); with numba,
    the directory of their top bits too (key_table.directory_for), up to TABLE_MAX_KEYS keys (one task's start keys, the
    whole of today's registry; not the production registry's ~70 million, whose index already holds one).
    ``lead``: the gate of key_table.docs_with_key, where `lead_gate` could make one."""

    def __init__(self, keys: np.ndarray):
        self.keys = keys
        small = len(keys) <= TABLE_MAX_KEYS
        self.slots = key_table.directory_for(keys) if key_table.AVAILABLE and small else None
        self.bits = _filter_bits(len(keys))
        self.filter = key_table.key_filter(keys, self.bits)
        self.lead: tuple[np.ndarray, int] | None = None
        self.skip: np.ndarray | None = None  # a bool per key: True where the key is not in the set (of_index)

    @classmethod
    def of_index(cls, index: NgramIndex) -> "KeySet":
        """Every usable question key (``start_keys(index, None)``) over the index's own arrays: its q_keys with its
        hot mask as ``skip``, its Bloom filter and its lookup table, mapped from the index folder and shared by every
        process that loads it (a scan worker adds no copy of them; the table is built here, once, where the index
        has none and its keys are few enough)."""
        keys = cls.__new__(cls)
        keys.keys, keys.filter, keys.bits, keys.lead = index.q_keys, index.bloom, index.bloom_bits, None
        keys.skip = index.hot if index.hot.any() else None
        table = index.__dict__.get("_dir")
        if table is None and key_table.AVAILABLE and len(index.q_keys) <= TABLE_MAX_KEYS:
            table = index.__dict__["_dir"] = key_table.directory_for(index.q_keys)  # what index.lookup builds
        keys.slots = table if isinstance(table, np.ndarray) else None
        return keys

    def contains(self, h: np.ndarray) -> np.ndarray:
        out = np.zeros(len(h), dtype=bool)
        if len(self.keys) == 0 or len(h) == 0:
            return out
        maybe = np.flatnonzero(key_table.may_hold(self.filter, self.bits, h))
        if len(maybe):
            hm = h[maybe]
            pos = np.minimum(np.searchsorted(self.keys, hm), len(self.keys) - 1)
            hit = self.keys[pos] == hm
            if self.skip is not None:
                hit &= ~self.skip[pos]
            out[maybe[hit]] = True
        return out


def _filter_bits(n: int) -> int:
    return int(min(30, max(12, np.ceil(np.log2(max(1, n) * 32)))))


LEAD_MAX_BITS = 23  # a lead gate of at most 1 MB


def lead_gate(records: pl.DataFrame, tasks: list[str], cfg: DetectConfig, keys: KeySet) -> tuple[np.ndarray, int] | None:
    """The lead gate of `keys` (key_table.docs_with_key): a bit filter of the first three tokens of every key's
    n-gram, found by tokenizing the tasks' questions again as build_index did (encode_texts).

    None (every position hashed) unless each key is accounted for: found among those questions' n-grams, or the
    one n-gram of a question under n tokens (decon rule, index.py), which no document's n-gram equals.
    """
    n = cfg.ngram_size
    if n < 3 or not len(keys.keys):
        return None
    questions = records.filter(pl.col("task").is_in(tasks) & pl.col("indexed"))["question"].to_list()
    tokens = [t for t in encode_texts(questions, cfg) if len(t)]
    full = [t for t in tokens if len(t) >= n]
    if not full:
        return None
    hashes, _ = segment_ngram_hashes(full, n)
    leads = np.concatenate([key_table.lead_values(t, n) for t in full])
    hit = keys.contains(hashes)
    missing = np.setdiff1d(keys.keys, hashes[hit], assume_unique=False)
    if len(missing):
        short = np.array([ngram_hash(t) for t in tokens if len(t) < n], dtype=np.uint64)
        if not np.isin(missing, short).all():
            return None  # a key whose n-gram these questions do not give: gating on them could miss it
    leads = np.unique(leads[hit])
    bits = min(_filter_bits(len(leads)), LEAD_MAX_BITS)
    if len(leads) > (1 << bits) // 8:
        return None  # over an eighth of the bits set: the gate would pass too much to pay for itself
    return key_table.bit_filter(leads, bits), bits


_SELECTIONS: dict = {}


def selection(index: NgramIndex, records: pl.DataFrame, tasks: list[str] | None,
              cfg: DetectConfig | None = None) -> tuple[np.ndarray | None, KeySet]:
    """(locals of `tasks`' records or None for all, the start keys that can reach them), memoized per index.

    With `tasks` and `cfg` (and numba), the keys carry a lead gate (`lead_gate`); for all tasks they are the index's
    own arrays (`KeySet.of_index`)."""
    gate = tasks is not None and cfg is not None and key_table.AVAILABLE
    key = (id(index), id(records), tuple(tasks) if tasks is not None else None,
           json.dumps(cfg.reference_key(), sort_keys=True) if gate else None)
    hit = _SELECTIONS.get(key)
    if hit is not None and hit[0] is index and hit[1] is records:
        return hit[2], hit[3]
    locals_ = None if tasks is None else task_locals(index, records, tasks)
    keys = KeySet.of_index(index) if tasks is None else KeySet(start_keys(index, locals_))
    if gate and keys.slots is not None:
        keys.lead = lead_gate(records, tasks, cfg, keys)
    if len(_SELECTIONS) > 8:
        _SELECTIONS.clear()
    _SELECTIONS[key] = (index, records, locals_, keys)
    return locals_, keys


def docs_containing(stream: token_cache.TokenStream, keys: KeySet, n: int, min_tokens: int) -> np.ndarray:
    """Positions of the stream's documents (at least `min_tokens` long) holding an n-gram in `keys`."""
    if len(keys.keys) == 0 or stream.n_docs == 0:
        return np.zeros(0, dtype=np.int64)
    if keys.slots is not None and compiled.enabled():
        return key_table.docs_with_key(stream.tokens, stream.offsets, n, min_tokens, keys.keys, keys.slots,
                                       keys.filter, keys.bits, keys.lead, keys.skip)
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


BLOCK = 1 << 20  # bytes read at once while looking for given lines


def iter_raw_lines_at(fh, lines: list[int], max_bytes: int) -> Iterator[tuple[int, bytes | None]]:
    """(line, its bytes) for each of `lines` (ascending, distinct); None for a line over `max_bytes`.

    Numbers lines as store.pool.iter_lines does (split after each newline; a last line without one
    counts), but finds them by counting newlines a block at a time: no Python step per line of the shard.
    """
    limit = max_bytes + 2  # iter_lines: a body of max_bytes plus "\r\n"
    want, no = 0, 0  # next wanted line; the line the block's first byte belongs to
    held: list[bytes] = []  # the part of line `no` read in earlier blocks (kept only when it is wanted)
    held_size = 0
    while want < len(lines):
        block = fh.read(BLOCK)
        if not block:
            break
        ends = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10)
        while want < len(lines) and lines[want] < no + len(ends):
            i = lines[want] - no
            a, b = (int(ends[i - 1]) + 1 if i else 0), int(ends[i]) + 1
            if i == 0 and held_size:
                yield lines[want], b"".join(held) + block[:b] if held_size + b <= limit else None
            else:
                yield lines[want], block[a:b] if b - a <= limit else None
            want += 1
        tail = int(ends[-1]) + 1 if len(ends) else 0
        if len(ends):
            no += len(ends)
            held, held_size = [], 0
        if want < len(lines) and lines[want] == no and tail < len(block):
            if held_size <= limit:
                held.append(block[tail:])
            held_size += len(block) - tail
    if want < len(lines) and lines[want] == no and held_size:  # the last line, without a newline
        yield no, b"".join(held) if held_size < limit else None


def iter_documents_at(path: Path, shard: str, content_key: str, max_doc_bytes: int,
                      lines: set[int]) -> Iterator[tuple[int, Document | None]]:
    """(line, document or None) for each of `lines`, in line order: one pass, parsing only those lines."""
    if not lines:
        return
    with open_binary(path) as fh:
        for no, raw in iter_raw_lines_at(fh, sorted(lines), max_doc_bytes):
            item = parse_line(raw, no, shard, content_key, max_doc_bytes) if raw is not None else None
            yield no, item if isinstance(item, Document) else None


def iter_documents_from(path: Path, shard: str, content_key: str, max_doc_bytes: int,
                        wanted: list[tuple[int, int]]) -> Iterator[tuple[int, Document | None]]:
    """(line, document or None) for each (line, where it starts) of ``wanted`` (ascending, as a cached stream
    recorded them: Document.offset).  The shard is read a block at a time and its newlines up to each start counted
    (a count, not their positions: a fraction of finding them); a line that does not start there, or not as that
    line, is None, and so is every one after it.  None too for a line over the size limit or not JSON; whether a
    line read here is still the document the stream holds is for its check value to say (TokenStream.holds)."""
    if not wanted:
        return
    limit = max_doc_bytes + 2  # store.pool.iter_lines: a body of max_doc_bytes plus "\r\n"
    with open_binary(path) as fh:
        reader = _Blocks(fh)
        lost = False
        for line, start in wanted:
            lost = lost or not reader.count_to(start) or reader.newlines != line  # not as the stream recorded it
            raw = b"" if lost else reader.line(limit)
            whole = raw and (len(raw) < limit or raw.endswith(b"\n"))
            item = parse_line(raw, line, shard, content_key, max_doc_bytes) if whole else None
            yield line, item if isinstance(item, Document) else None


class _Blocks:
    """A binary stream read BLOCK bytes at a time: the newlines before a position counted, a line cut out."""

    def __init__(self, fh):
        self.fh, self.buf, self.base = fh, b"", 0  # the block held, where it starts in the stream
        self.pos = self.newlines = 0  # bytes passed; newlines among them (the number of the line starting at pos)

    def _next(self) -> bool:
        """Hold the block that starts at pos (pos is at the end of the one held); False at the end of the stream."""
        self.base, self.buf = self.pos, self.fh.read(BLOCK)
        return bool(self.buf)

    def count_to(self, start: int) -> bool:
        """Pass up to ``start``, counting the newlines; False when the stream ends before it or pos is past it."""
        while self.pos < start:
            if self.pos == self.base + len(self.buf) and not self._next():
                return False
            lo, hi = self.pos - self.base, min(start - self.base, len(self.buf))
            self.newlines += int(np.count_nonzero(np.frombuffer(self.buf, dtype=np.uint8, count=hi - lo, offset=lo) == 10))
            self.pos = self.base + hi
        return self.pos == start

    def line(self, limit: int) -> bytes:
        """The bytes from pos through the next newline, at most ``limit`` of them (as readline(limit) gives)."""
        parts, size = [], 0
        while size < limit:
            if self.pos == self.base + len(self.buf) and not self._next():
                break
            lo = self.pos - self.base
            end = self.buf.find(b"\n", lo, lo + limit - size)
            hi = min(len(self.buf), lo + limit - size) if end < 0 else end + 1
            parts.append(self.buf[lo:hi])
            size += hi - lo
            self.pos = self.base + hi
            if end >= 0:
                self.newlines += 1
                break
        return b"".join(parts)


def read_lines(path: Path, shard: str, content_key: str, max_doc_bytes: int, lines: set[int]) -> dict[int, Document]:
    """The documents at `lines` of a shard (one pass, parsing only those lines)."""
    return {no: d for no, d in iter_documents_at(path, shard, content_key, max_doc_bytes, lines) if d is not None}


class StaleStream(RuntimeError):
    """The cached stream does not match the shard's text any more."""


def scan_stream(stream: token_cache.TokenStream, path: Path, shard: str, index: NgramIndex, ref: Reference,
                cfg: DetectConfig, content_key: str, preset: str, digest: str,
                tasks: list[str] | None = None, parts: Path | None = None) -> ShardOutcome:
    """Scan a cached token stream: every task (tasks=None, a full scan) or only `tasks` (incremental).

    An incremental scan walks the documents where `tasks`' records can change the walk (`start_keys`) with the
    whole index, and hands on every task's rows of them (`ShardOutcome.lines`): what a full scan gives there."""
    t0 = time.perf_counter()
    _, keys = selection(index, ref.records, tasks, cfg)
    docs = docs_containing(stream, keys, cfg.ngram_size, cfg.min_doc_tokens)
    extras = ensure_extras(index, ref.records, cfg)
    found: dict[int, tuple[int, np.ndarray, list, np.ndarray | None]] = {}
    for start in range(0, len(docs), BATCH):
        part = [int(i) for i in docs[start : start + BATCH]]
        tokens = [stream.doc(i) for i in part]
        gated: dict = {}
        for j, (i, toks, cands) in enumerate(zip(part, tokens, scan_many(index, tokens, cfg, extras, gated))):
            if cands or j in gated:  # with the thorough rules, finished below (they look at every candidate)
                found[int(stream.lines[i])] = (i, toks, cands, gated.get(j))
    tok = get_tokenizer(cfg.tokenizer)
    # the cleaned text is needed for the thorough rules' words, a tokenizer that reads spans from it, or a stream
    # without check values (made by hand), whose ids are checked against it
    need_text = extras is not None or not tok.spans_from_ids or stream.checks is None
    sink = MatchSink(parts)
    try:
        seen = 0
        starts = stream.starts
        if starts is not None and all(starts[v[0]] >= 0 for v in found.values()):  # read up to where each starts
            docs_read = iter_documents_from(path, shard, content_key, cfg.max_doc_bytes,
                                            sorted((line, int(starts[v[0]])) for line, v in found.items()))
        else:  # found by counting newlines
            docs_read = iter_documents_at(path, shard, content_key, cfg.max_doc_bytes, set(found))
        for line, doc in docs_read:
            seen += 1
            i, tokens, cands, present = found[line]
            words, cleaned = None, None
            if doc is not None and need_text:
                words = clean_words(doc.text, cfg.clean_options)
                cleaned = join_words(words)
            if doc is None or not (stream.holds(i, doc.raw) if stream.checks is not None else tok.stands_for(cleaned, tokens)):
                # the line changed under the cached stream, or the stream's ids did
                raise StaleStream(f"{shard}: line {line} no longer matches the cached token stream")
            if extras is not None:
                cands = finish(extras, index, tokens, words, cands, cfg, present)
            if cands:
                sink.extend(rows_for_doc(doc, shard, cleaned, tokens, cands, ref, tok, preset, cfg.threshold))
        if seen != len(found):
            raise StaleStream(f"{shard}: the file ends before line {max(found)} of the cached token stream")
        matches = sink.close()
    except (StreamError, EOFError) as exc:  # a compressed shard that breaks where the stream read it whole
        sink.abort()
        raise StaleStream(f"{shard}: the shard breaks where the cached token stream read it whole ({exc})") from exc
    except BaseException:
        sink.abort()
        raise
    lengths = stream.lengths()
    scanned = int((lengths >= cfg.min_doc_tokens).sum())
    counters = Counter(read=int(stream.meta["read"]), bytes=int(stream.meta["bytes"]), tokens=int(stream.offsets[-1]),
                       scanned=scanned, too_short=stream.n_docs - scanned)
    stats = shard_stats_row(shard, counters, int(stream.meta["rejected"]), stream.meta["reject_reasons"], sink,
                            time.perf_counter() - t0, preset, digest, stream.meta["shard_fingerprint"])
    all_tasks = list(ref.tasks)
    mode, done = ("full", all_tasks) if tasks is None else ("incremental", sorted(tasks))
    # a full scan from the stream hands on the rejects it cached (a first scan of the shard in this output folder
    # needs them: the mix leaves those lines out); an incremental one leaves the last full scan's in place
    rejects = stream.rejects if tasks is None else None
    return ShardOutcome(shard, mode, stats=stats, rejects=rejects, stream_key=stream.key, tasks=done,
                        drop=all_tasks if tasks is None else [], docs_scanned=len(docs),
                        lines=None if tasks is None else stream.lines[docs].tolist(), **outcome_rows(sink, matches))
