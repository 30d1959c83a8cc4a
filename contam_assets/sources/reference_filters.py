"""The decon filters of the reference records (`reference.py` states the rules), the costly part on every core.

The filters split in two.  What a record's own texts decide (`chunk_verdicts`): its token count and unique words
against the minimums, its computed fingerprint, whether its cleaned question is empty, and the token ids the index
build reads; cleaning and tokenizing every distinct text is most of the filters' CPU, and no record depends on another
here.  What depends on the order (`apply_verdicts`): the duplicate check, a suite's fingerprints kept so far carried
from record to record, and the skip reason the rules give in their order.  `filtered_part` applies both to a table of
read records.  `FilterPool` computes the first part of the tables spilled to an Arrow file in worker processes (each
reads its table from the file by number: no text is sent to it), at most ``workers + 1`` tables at a time, and hands
them back in the order asked; the caller applies the second part in record order, so the records, ids and
stats are those of one process, byte for byte.
"""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import re
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.ipc as pa_ipc

from contam_assets.detector.build_budget import worker_count
from contam_assets.detector.record_tokens import ChunkTexts
from contam_assets.detector.tokenize import get_tokenizer

MAX_AHEAD = 8  # tables asked of the workers at a time, at most (each result a table's verdicts and ids: ~30 MB)


def fingerprint(passage: str | None, question: str | None, answer: str | None) -> str:
    # decon rule: sha256 over passage + question + answer, first 16 hex chars
    content = f"{passage or ''}{question or ''}{answer or ''}"
    return hashlib.sha256(content.encode("utf-8")).hexdigest()[:16]


_HEX16 = re.compile(r"[0-9a-f]{16}")


def _seen_key(fp: str) -> int | str:
    """What the duplicate check keeps of a fingerprint: a 16-hex one (every computed one) as its number, 36 bytes
    instead of 65 (a registry of millions), any other as it is (a number never equals a string: the same answers)."""
    return int(fp, 16) if len(fp) == 16 and _HEX16.fullmatch(fp) else fp


def too_few_unique_words(text: str, minimum: int) -> bool:
    """decon rule: a record whose text has fewer than eval_min_unique_word_count distinct words (``str.split``) is
    skipped; equal to ``len(set(text.split())) < minimum``.  The first ``2 * minimum`` words settle most records: as
    many distinct words as the minimum among them pass the record, and a text with no more words than those is
    answered by their set; any other text counts every word."""
    if minimum <= 0:
        return False
    prefix = 2 * minimum
    head = text.split(maxsplit=prefix)  # the first ``prefix`` words, then the rest of the text unsplit
    if len(head) <= prefix:
        return len(set(head)) < minimum
    if len(set(head[:prefix])) >= minimum:
        return False
    return len(set(text.split())) < minimum


def in_str_split_form(cleaned: str) -> bool:
    """``" ".join(cleaned.split()) == cleaned`` for a cleaned text (``b" ".join(bytes.split())`` decoded, as
    `text.join_words` gives): an ASCII one differs only where it holds whitespace that ``str.split`` splits and
    ``bytes.split`` does not (\\x1c-\\x1f); another (\\x85, \\xa0, \\u2000-\\u200a, \\u3000 ...) is compared whole."""
    if cleaned.isascii():
        return "\x1c" not in cleaned and "\x1d" not in cleaned and "\x1e" not in cleaned and "\x1f" not in cleaned
    return " ".join(cleaned.split()) == cleaned


@dataclass
class Verdicts:
    """The order-free part of the filters of a chunk of records, one entry a record: ``rule`` the reason the token
    and unique-word minimums give (else None), ``computed`` the fingerprint of its texts, ``empty`` whether its cleaned
    question is empty; ``ids`` the chunk's token ids (`ChunkTexts.flat`), or None when not asked."""
    rule: list
    computed: list
    empty: list
    ids: list | None


def chunk_verdicts(records: list[dict], cfg, ids: bool = True) -> Verdicts:
    """``records``: dicts with question, answer and passage (the same-answer rule applied)."""
    tok = get_tokenizer(cfg.tokenizer)
    texts = ChunkTexts(records, cfg)  # each distinct text cleaned and tokenized once, as the index build does it
    clean = texts.cleaned.__getitem__
    parts_of = []
    for r in records:
        parts = []
        if cfg.index_passages and r["passage"]:
            parts.append(clean(r["passage"]))
        parts.append(clean(r["question"] or ""))
        if cfg.index_answers and r["answer"]:
            parts.append(clean(r["answer"]))
        parts_of.append([p for p in parts if p])
    # Every tokenizer encodes the " ".join of texts in cleaned form as their ids back to back (the word
    # rule, tokenize.py), so a record's tokens are counted once per distinct part; a record with a part
    # that is not in that form (str.split sees whitespace the cleaner kept) is encoded whole, as decon does.
    odd = {c for c in dict.fromkeys(texts.cleaned.values()) if not in_str_split_form(c)}
    whole = {i: " ".join(parts) for i, parts in enumerate(parts_of) if odd and not odd.isdisjoint(parts)}
    ids_of = {}  # cleaned text in cleaned form -> its ids (those of any text it is cleaned from: the same words)
    for raw, c in texts.cleaned.items():
        if c and c not in odd and c not in ids_of:
            ids_of[c] = texts.ids[raw]
    non_space = dict(zip(ids_of, tok.count_non_space_many(list(ids_of.values())).tolist()))
    whole_count = dict(zip(whole, tok.count_non_space_many(tok.encode_many(list(whole.values()))).tolist()))
    out = Verdicts([], [], [], texts.flat() if ids else None)
    for i, (r, parts) in enumerate(zip(records, parts_of)):
        n_tokens = whole_count[i] if i in whole else sum(non_space.get(p, 0) for p in parts)
        rule = None
        if cfg.eval_min_token_length and n_tokens < cfg.eval_min_token_length:
            rule = "min_tokens"  # decon rule: fewer than eval_min_token_length tokens
        elif cfg.eval_min_unique_words and too_few_unique_words(" ".join(parts), cfg.eval_min_unique_words):
            rule = "min_unique_words"  # decon rule: fewer than eval_min_unique_word_count words
        out.rule.append(rule)
        out.computed.append(fingerprint(r["passage"], r["question"], r["answer"]))
        out.empty.append(not clean(r["question"] or ""))
    return out


def apply_verdicts(suites: list, given: list, v: Verdicts, cfg, seen: dict[str, set]) -> tuple[list, list, list]:
    """The order-dependent part, in record order: each record's fingerprint, whether it is indexed and its skip reason.
    ``given``: the fingerprint each record's file carries (decon reference files), else None; ``seen``: suite -> the
    keys (`_seen_key`) of the fingerprints of its records kept so far, carried from chunk to chunk."""
    fps, indexed, reasons = [], [], []
    for suite, g, rule, computed, empty in zip(suites, given, v.rule, v.computed, v.empty):
        fps.append(g or computed)
        # dedup_by=fingerprint (decon): only records with a fingerprint field are deduplicated, by that field
        dedup_key = g if cfg.dedup_by == "fingerprint" else computed
        kept = seen.get(suite) or seen.setdefault(suite, set())
        reason = rule
        if reason is None and cfg.eval_dedup and dedup_key is not None and _seen_key(dedup_key) in kept:
            reason = "duplicate"  # decon rule: exact duplicates dropped per suite (eval_key) by fingerprint
        elif reason is None and empty:
            reason = "empty_question"
        if cfg.eval_dedup and reason is None and dedup_key is not None:
            kept.add(_seen_key(dedup_key))
        indexed.append(reason is None)
        reasons.append(reason)
    return fps, indexed, reasons


def _filter_chunk(records: list[dict], cfg, seen: dict[str, set], ids_out: list | None = None) -> None:
    """Both parts on a list of record dicts, their fingerprint, indexed and skip_reason set in place; ``ids_out``:
    given, the chunk's token ids appended."""
    v = chunk_verdicts(records, cfg, ids=ids_out is not None)
    fps, indexed, reasons = apply_verdicts([r["suite"] for r in records], [r.get("fingerprint") for r in records], v, cfg, seen)
    if ids_out is not None:
        ids_out.append(v.ids)
    for r, fp, ok, reason in zip(records, fps, indexed, reasons):
        r["fingerprint"], r["indexed"], r["skip_reason"] = fp, ok, reason


def with_same_rule(part: pl.DataFrame, same: list[str]) -> pl.DataFrame:
    # seed 003: a suite whose answers are all the same string is indexed on its question alone
    if same:
        part = part.with_columns(answer=pl.when(pl.col("suite").is_in(same)).then(None).otherwise(pl.col("answer")))
    return part


def table_verdicts(part: pl.DataFrame, cfg, chunk: int, ids: bool) -> Iterator[Verdicts]:
    """The order-free part of a table of records (the same-answer rule applied), ``chunk`` records at a time."""
    recs = part.select("question", "answer", "passage").to_dicts()
    return (chunk_verdicts(recs[s:s + chunk], cfg, ids) for s in range(0, len(recs), chunk))


def filtered_part(part: pl.DataFrame, same: list[str], cfg, seen: dict, first_id: int, total: int, progress,
                  ids_out: list | None, chunk: int, verdicts: Iterable[Verdicts] | None = None) -> pl.DataFrame:
    """`reference.filtered_part`; ``verdicts``: the table's order-free part computed elsewhere (`FilterPool`),
    else computed here."""
    part = with_same_rule(part, same)
    if verdicts is None:
        verdicts = table_verdicts(part, cfg, chunk, ids_out is not None)
    suites, given = part["suite"].to_list(), part["fingerprint"].to_list()
    fps: list = []
    indexed: list = []
    reasons: list = []
    start = 0
    for v in verdicts:
        n = len(v.rule)
        f, i, r = apply_verdicts(suites[start:start + n], given[start:start + n], v, cfg, seen)
        fps += f
        indexed += i
        reasons += r
        if ids_out is not None:
            ids_out.append(v.ids)
        start += n
        if progress is not None:
            progress.filtered(first_id + start, total)
    return part.with_columns(record_id=pl.int_range(first_id, first_id + part.height, dtype=pl.Int32),
                             fingerprint=pl.Series(fps, dtype=pl.Utf8), indexed=pl.Series(indexed, dtype=pl.Boolean),
                             skip_reason=pl.Series(reasons, dtype=pl.Utf8))


# -- the order-free part in worker processes ------------------------------------------------------------------------

def filter_workers(n_tables: int, workers: int) -> int:
    """Processes the filters of ``n_tables`` tables use (`worker_count`); fewer than two tables: the build's own."""
    return 1 if n_tables < 2 else min(worker_count(workers), n_tables)


def read_table(raw: str | Path, batch: int) -> pl.DataFrame:
    """Record batch ``batch`` of the spill ``raw`` (read, not mapped: that table's pages alone)."""
    with pa.OSFile(str(raw), "rb") as src:
        return pl.from_arrow(pa_ipc.open_file(src).get_batch(batch))


def _spilled_table(raw: str, batch: int, same: list[str], cfg, chunk: int, ids: bool) -> tuple[int, list[Verdicts]]:
    """In a worker: the order-free part of one spilled table, with the worker's process id; ids that fit 32 bits
    sent as such (the same values, half the bytes: about 0.5 KB a record)."""
    out = list(table_verdicts(with_same_rule(read_table(raw, batch), same), cfg, chunk, ids))
    for v in out:
        if v.ids is not None:
            v.ids = [(vals.astype(np.uint32) if len(vals) and int(vals.max()) < 1 << 32 else vals, lens) for vals, lens in v.ids]
    return os.getpid(), out


def _start_worker(parent: int, cfg) -> None:
    """A worker's start: it leaves when the build's process is gone (started from the forkserver, it is not the
    build's child), and loads the tokenizer and the compiled cleaning and word walks now, while the build reads."""
    def watch():
        while True:
            time.sleep(1.0)
            try:
                os.kill(parent, 0)
            except ProcessLookupError:
                os._exit(1)

    threading.Thread(target=watch, daemon=True, name="contam-filters-watch").start()
    try:
        from contam_assets.detector.text import translate_bytes

        get_tokenizer(cfg.tokenizer).encode_translated([translate_bytes("Warm up: 3 + 4 = 7.", cfg.clean_options)])
    except Exception:  # noqa: BLE001 - the worker's first table meets the same error and reports it
        pass


def _context():
    # the build holds polars' and pyarrow's threads: workers start from a forkserver (else spawned), never forked
    if "forkserver" in mp.get_all_start_methods():
        return mp.get_context("forkserver")
    return mp.get_context("spawn")


class FilterPool:
    """The worker processes of a build's filters (the build_workers setting, `worker_count`): ``start`` them once the
    build has spilled two tables (they load what they need while it reads on), ``verdicts`` for the spilled tables;
    with fewer than two processes or tables, none is started and the build computes every table itself."""

    def __init__(self, cfg, workers: int):
        self.cfg, self.n, self.pool, self.pids, self.broken = cfg, worker_count(workers), None, [], False

    def start(self) -> None:
        if self.pool is None and self.n >= 2:
            self.pool = ProcessPoolExecutor(max_workers=self.n, mp_context=_context(), initializer=_start_worker,
                                            initargs=(os.getpid(), self.cfg))
            for _ in range(self.n):  # a task each: every worker starts now
                self.pool.submit(os.getpid)

    def verdicts(self, raw: Path, batches: list[int], same: list[str], chunk: int, ids: bool) -> Iterator[list[Verdicts] | None]:
        """For each of ``batches`` (record batches of the spill ``raw``), in that order: its order-free part
        (`table_verdicts`) from the workers, at most ``workers + 1`` tables asked at a time (the one handed back among
        them), each worker's process id kept in ``pids``; with one process (`filter_workers`), None for each (the
        caller computes it itself)."""
        n = filter_workers(len(batches), self.n)
        if n < 2:
            yield from (None for _ in batches)
            return
        self.start()
        todo, window = deque(batches), deque()
        while todo or window:
            try:
                while todo and len(window) < min(n + 1, MAX_AHEAD):
                    window.append(self.pool.submit(_spilled_table, str(raw), todo[0], same, self.cfg, chunk, ids))
                    todo.popleft()
                pid, verdicts = window[0].result()
            except BrokenProcessPool:  # a worker killed (the kernel, a signal): the build computes the rest itself
                self.broken = True
                yield from (None for _ in range(len(window) + len(todo)))
                return
            window.popleft()
            self.pids.append(pid)
            yield verdicts
            del verdicts

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None

    def __enter__(self) -> "FilterPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
