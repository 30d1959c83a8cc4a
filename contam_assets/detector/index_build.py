"""Building the IDF n-gram index (detector/index.py) from the reference records.

``build_index`` works in bounded batches: each batch's n-grams are hashed and spilled to files split by the top bits
of their hash, each file sorted on its own, so the build holds one batch and two buckets (the next one sorted ahead)
besides the index it writes (its per-record and per-bucket steps compiled: index_kernel.py).  ``build_index_whole`` is the plain
one-pass definition it must equal array for array.
"""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import polars as pl

from contam_assets.detector import index_kernel as ik
from contam_assets.detector import record_tokens
from contam_assets.detector.config import DetectConfig
from contam_assets.detector.index import NgramIndex, _csr, _per_record, _segment_sums, _unique_tokens, encode_texts
from contam_assets.detector.ngrams import ngram_hash, segment_ngram_hashes, unique_per_segment


def build_index_whole(records: pl.DataFrame, cfg: DetectConfig, progress=None) -> NgramIndex:
    """``build_index`` with every record's tokens and n-grams in memory at once and one sort of them all: the plain
    definition the batched build must equal array for array (test_index_build_batched.py); it needs about
    14 bytes of memory per byte of benchmark text."""
    step = progress.indexed if progress is not None else (lambda what, share: None)
    recs = records.filter(pl.col("indexed")).sort("record_id")
    n_rec = recs.height
    if n_rec == 0:
        raise ValueError("no reference record is indexable (check the benchmark folder and task filter)")
    N = float(n_rec)
    n, an, pn = cfg.ngram_size, cfg.answer_ngram_size, cfg.passage_ngram_size

    step("tokenizing questions", 0.0)
    q_tokens = encode_texts(recs["question"].to_list(), cfg)
    step("tokenizing answers and passages", 0.3)
    answers = recs["answer"].to_list() if cfg.index_answers else [None] * n_rec
    passages = recs["passage"].to_list() if cfg.index_passages else [None] * n_rec
    a_tokens = encode_texts([a or "" for a in answers], cfg)
    p_tokens = encode_texts([p or "" for p in passages], cfg)

    step("question n-grams", 0.5)  # -- question postings: unique n-grams per record
    q_len = np.array([len(t) for t in q_tokens], dtype=np.int32)
    h, seg = segment_ngram_hashes(q_tokens, n)
    # decon rule: a question shorter than n tokens is one n-gram of all its tokens
    short = [i for i, t in enumerate(q_tokens) if 0 < len(t) < n]
    h = np.concatenate([h, np.array([ngram_hash(q_tokens[i]) for i in short], dtype=np.uint64)])
    seg = np.concatenate([seg, np.array(short, dtype=np.int64)])
    all_h, seg = unique_per_segment(h, seg)  # per record, in record order: what np.unique per record gives
    del h  # each temporary of the question postings freed once used: the build's peak is their sum
    q_unique = np.bincount(seg, minlength=n_rec).astype(np.int32)
    all_d = seg.astype(np.int32)
    order = np.lexsort((all_d, all_h))
    all_h, all_d = all_h[order], all_d[order]
    del order, seg
    q_keys, first, df = np.unique(all_h, return_index=True, return_counts=True)
    q_offsets = np.append(first, len(all_h)).astype(np.int64)
    del all_h, first
    # decon rule: idf = ln(N / df) over indexed records
    q_idf = np.log(N / df)
    q_idf_sum = np.zeros(n_rec, dtype=np.float64)
    np.add.at(q_idf_sum, all_d, np.repeat(q_idf, df))  # each posting's key idf, added in postings order
    # decon rule: an n-gram in more than max(2*floor(sqrt(N)), 2000) records is hot
    hot_threshold = max(2 * int(math.isqrt(n_rec)), 2000)
    hot = df > hot_threshold

    from contam_assets.detector import key_table

    bloom_bits = key_table.filter_bits(len(q_keys))
    bloom = key_table.key_filter(q_keys, bloom_bits)

    step("token frequencies and answer n-grams", 0.75)
    # -- token frequencies (decon: per field, unique tokens per record) ---------
    uniq = [_unique_tokens(f) for f in (q_tokens, a_tokens, p_tokens)]
    vocab, tok_df = np.unique(np.concatenate([u for u, _ in uniq]), return_counts=True)
    del q_tokens

    # -- answers --------------------------------------------------------------
    a_len = np.array([len(t) for t in a_tokens], dtype=np.int32)
    a_vals, a_seg = uniq[1]
    a_unique = np.bincount(a_seg, minlength=n_rec).astype(np.int32)
    # the idf sum of an answer's distinct tokens is > 0 exactly when one of them has idf > 0
    a_short_ok = np.bincount(a_seg, weights=np.log(N / tok_df[np.searchsorted(vocab, a_vals)]) > 0, minlength=n_rec) > 0
    long_answer = a_len > cfg.short_answer_token_threshold
    a_ng_off, a_ng_keys = _per_record(*unique_per_segment(*segment_ngram_hashes(a_tokens, an, long_answer)), n_rec)
    a_vocab, a_df = np.unique(a_ng_keys, return_counts=True)  # df over records (keys unique per record)
    a_ng_idf = np.log(N / a_df[np.searchsorted(a_vocab, a_ng_keys)]) if len(a_ng_keys) else np.zeros(0)
    a_idf_total = _segment_sums(a_ng_idf, a_ng_off)
    a_tok_off, a_tok = _csr(a_tokens, np.uint64)

    # -- passages -------------------------------------------------------------
    p_len = np.array([len(t) for t in p_tokens], dtype=np.int32)
    p_ng_off, p_ng_keys = _per_record(*unique_per_segment(*segment_ngram_hashes(p_tokens, pn)), n_rec)
    p_vocab, p_df = np.unique(p_ng_keys, return_counts=True)
    p_ng_idf = np.log(N / p_df[np.searchsorted(p_vocab, p_ng_keys)]) if len(p_ng_keys) else np.zeros(0)
    p_idf_total = _segment_sums(p_ng_idf, p_ng_off)

    index = NgramIndex(
        record_ids=recs["record_id"].to_numpy().astype(np.int32),
        q_keys=q_keys, q_offsets=q_offsets, q_docs=all_d, q_idf=q_idf, hot=hot,
        q_len=q_len, q_unique=q_unique, q_idf_sum=q_idf_sum, bloom=bloom, bloom_bits=bloom_bits,
        a_len=a_len, a_unique=a_unique, a_tok_off=a_tok_off, a_tok=a_tok, a_short_ok=a_short_ok,
        a_ng_off=a_ng_off, a_ng_keys=a_ng_keys, a_ng_idf=np.asarray(a_ng_idf, dtype=np.float64), a_idf_total=a_idf_total,
        p_len=p_len, p_ng_off=p_ng_off, p_ng_keys=p_ng_keys, p_ng_idf=np.asarray(p_ng_idf, dtype=np.float64),
        p_idf_total=p_idf_total, hot_threshold=hot_threshold,
        config_json=json.dumps(cfg.reference_key(), sort_keys=True),
    )
    index.__dict__.update(_tok_vocab=vocab, _tok_df=tok_df)  # the token document frequencies, kept to grow it
    return index


INDEX_BATCH = 50_000  # reference records tokenized and hashed at once: the build's working set besides the index
BUCKET_BITS = 6  # n-gram pairs spilled to 2**6 files by the top bits of their hash, each sorted on its own
SUM_STEP = 1 << 22  # values summed at once by the per-record idf totals


class _Spill:
    """Arrays appended to files on disk, one file per name (and bucket), read back whole or per bucket: what the
    build keeps of every record until it can be sorted lives on disk, not in memory."""

    def __init__(self, folder: Path):
        self.folder, self.dtypes, self.sizes = folder, {}, {}

    def add(self, name: str, values: np.ndarray) -> None:
        self.dtypes.setdefault(name, values.dtype)
        if not len(values):
            return
        with open(self.folder / name, "ab") as fh:
            np.ascontiguousarray(values, dtype=self.dtypes[name]).tofile(fh)
        self.sizes[name] = self.sizes.get(name, 0) + len(values)

    def add_buckets(self, name: str, keys: np.ndarray, other: tuple[str, np.ndarray]) -> None:
        """``keys`` (uint64 hashes) and an array aligned with them, each appended to the file of its key's bucket;
        the order within a bucket is the order of arrival."""
        if not len(keys):
            return
        keys, values, starts = ik.by_bucket(keys, other[1], BUCKET_BITS)
        bounds = starts.tolist()
        for g in range(len(bounds) - 1):
            if bounds[g + 1] > bounds[g]:
                self.add(f"{name}.{g}", keys[bounds[g]:bounds[g + 1]])
                self.add(f"{other[0]}.{g}", values[bounds[g]:bounds[g + 1]])

    def add_groups(self, group: np.ndarray, *arrays: tuple[str, np.ndarray]) -> None:
        """Arrays aligned with ``group`` (int64 >= 0), each appended to the file ``<name>.<group>``, in order of
        arrival within a group."""
        if not len(group):
            return
        order, starts = ik.group_order(group, int(group.max()) + 1)
        bounds = starts.tolist()
        for arr_name, arr in arrays:
            sorted_arr = arr[order]
            for g in range(len(bounds) - 1):
                if bounds[g + 1] > bounds[g]:
                    self.add(f"{arr_name}.{g}", sorted_arr[bounds[g]:bounds[g + 1]])

    def read(self, name: str, dtype=None) -> np.ndarray:
        dtype = self.dtypes.get(name, dtype)
        path = self.folder / name
        if dtype is None or not path.exists():
            return np.zeros(0, dtype=dtype or np.uint64)
        out = np.fromfile(path, dtype=dtype)
        path.unlink()
        return out


class _NpyOut:
    """A 1-D .npy file written a chunk at a time (never whole in memory): its header, the same length for every
    shape (numpy pads it for any length), is written when it is closed.  The bytes are those ``np.save`` writes."""

    HEADER = 128

    def __init__(self, path: Path, dtype):
        self.path, self.dtype, self.n = Path(path), np.dtype(dtype), 0
        self.fh = open(self.path, "wb")
        self.fh.write(b"\0" * self.HEADER)

    def add(self, values) -> None:
        a = np.ascontiguousarray(values, dtype=self.dtype)
        a.tofile(self.fh)
        self.n += len(a)

    def close(self) -> Path:
        head = io.BytesIO()
        np.lib.format.write_array_header_1_0(head, {"descr": np.lib.format.dtype_to_descr(self.dtype),
                                                    "fortran_order": False, "shape": (self.n,)})
        assert len(head.getvalue()) == self.HEADER
        self.fh.seek(0)
        self.fh.write(head.getvalue())
        self.fh.close()
        return self.path


def _npy_chunks(path: Path, dtype, step: int, start: int = 0, stop: int | None = None):
    """Values ``start:stop`` of a 1-D .npy file written by ``_NpyOut``, ``step`` at a time (read, not mapped: the
    pages read stay the page cache's, not the process's)."""
    dtype = np.dtype(dtype)
    with open(path, "rb") as fh:
        fh.seek(_NpyOut.HEADER + start * dtype.itemsize)
        left = None if stop is None else stop - start
        while left is None or left > 0:
            part = np.fromfile(fh, dtype=dtype, count=step if left is None else min(step, left))
            if not len(part):
                return
            if left is not None:
                left -= len(part)
            yield part


class _SegmentSums:
    """``_segment_sums(values, offsets)`` of values that arrive a chunk at a time, in order: the running sum is
    carried from chunk to chunk, so every partial sum is the one the whole-array cumsum gives (bit for bit)."""

    def __init__(self, offsets: np.ndarray):
        self.offsets = offsets
        self.cs_at = np.zeros(len(offsets), dtype=np.float64)  # cumulative sum before position offsets[i]
        self.carry, self.seen = 0.0, 0

    def add(self, values: np.ndarray) -> None:
        if not len(values):
            return
        a, offsets = self.seen, self.offsets
        chunk = np.asarray(values, dtype=np.float64).copy()
        chunk[0] = self.carry + chunk[0] if a else chunk[0]
        cs = np.cumsum(chunk)
        sel = slice(int(np.searchsorted(offsets, a + 1, side="left")), int(np.searchsorted(offsets, a + len(chunk), side="right")))
        self.cs_at[sel] = cs[offsets[sel] - a - 1]
        self.carry, self.seen = float(cs[-1]), a + len(chunk)

    def sums(self) -> np.ndarray:
        n = len(self.offsets) - 1
        return self.cs_at[1:n + 1] - self.cs_at[:n]


def _batches(records, size: int):
    """The indexed records in record_id order, ``size`` rows of ``records`` at a time (never the whole table's
    texts as Python strings at once); ``records``: a table, or a file of them in record_id order read a batch at a
    time (store/artifacts.RecordFile: ``batches(size)``)."""
    if isinstance(records, pl.DataFrame):
        records = records if records["record_id"].is_sorted() else records.sort("record_id")
    parts = ((records.slice(a, size) for a in range(0, records.height, size))
             if isinstance(records, pl.DataFrame) else records.batches(size))
    for part in parts:
        if (part := part.filter(pl.col("indexed"))).height:
            yield part


def _chunked_segment_sums(values: np.ndarray, offsets: np.ndarray, step: int | None = None) -> np.ndarray:
    """``_segment_sums`` without a cumulative sum of the whole array at once (``_SegmentSums``, ``step`` values at a
    time): every partial sum is the one the whole-array cumsum gives (bit for bit)."""
    step = step or SUM_STEP
    if len(values) <= step:
        return _segment_sums(values, offsets)
    sums = _SegmentSums(offsets)
    for a in range(0, len(values), step):
        sums.add(values[a:a + step])
    return sums.sums()


def _spill_ngrams(spill: _Spill, out: _NpyOut, name: str, keys: np.ndarray, before: int) -> int:
    """A batch's per-record n-gram keys: in order into the index's array ``out``, and by bucket with their
    positions (for their document frequencies) into the spill."""
    out.add(keys)
    spill.add_buckets(f"{name}k", keys, (f"{name}p", np.arange(before, before + len(keys), dtype=np.int64)))
    return before + len(keys)


def _ngram_idf(spill: _Spill, name: str, N: float, total: int, out: _NpyOut, sums: _SegmentSums) -> None:
    """The idf of every spilled per-record key ``name``, ln(N / df) with df the number of records holding the key
    (keys are unique per record), counted a bucket of the key space at a time; the values are put back in key
    position order a range of positions at a time (``SUM_STEP``), appended to ``out`` and summed per record."""
    for b in range(1 << BUCKET_BITS):
        kb, pb = spill.read(f"{name}k.{b}", np.uint64), spill.read(f"{name}p.{b}", np.int64)
        if not len(kb):
            continue
        kb, order = ik.sort_pairs(kb, np.arange(len(kb), dtype=np.int64), 64 - BUCKET_BITS)
        _, df = ik.runs(kb)
        vals = np.empty(len(kb), dtype=np.float64)
        vals[order] = np.log(N / np.repeat(df, df))  # back in the order of arrival: positions ascending
        spill.add_groups(pb // SUM_STEP, (f"{name}ip", pb), (f"{name}iv", vals))
        del kb, pb, order, df, vals
    for r in range(-(-total // SUM_STEP)):
        start = r * SUM_STEP
        vals = np.zeros(min(SUM_STEP, total - start), dtype=np.float64)
        vals[spill.read(f"{name}ip.{r}", np.int64) - start] = spill.read(f"{name}iv.{r}", np.float64)
        out.add(vals)
        sums.add(vals)


def add_postings(q: dict, keys, offsets, docs, df, N: float, hot_threshold: int, q_idf_sum, max_idf) -> None:
    """Question keys in order, their postings' offsets, postings and counts appended to the index's files ``q``, their
    idf added to each record's total and largest (the build's and the grow's); decon rule: idf = ln(N / df)."""
    ik.idf_totals(idf := np.log(N / df), df, docs, q_idf_sum, max_idf)
    for name, values in zip(("q_keys", "q_offsets", "q_docs", "q_idf", "hot"), (keys, offsets, docs, idf, df > hot_threshold)):
        q[name].add(values)


def _sorted_bucket(spill: _Spill, b: int) -> tuple[np.ndarray, np.ndarray]:
    """Bucket ``b``'s question (key, record) pairs sorted by key, records ascending within a key (their arrival)."""
    return ik.sort_pairs(spill.read(f"q.{b}", np.uint64), spill.read(f"qd.{b}", np.int32), 64 - BUCKET_BITS)


def _short_ok(read, a_tok_off: np.ndarray, vocab: np.ndarray, tok_df: np.ndarray, N: float,
              step: int = 1 << 16) -> np.ndarray:
    """Per record: the idf sum of its answer's distinct tokens is > 0, i.e. one of them has idf > 0 (records
    ``step`` at a time; ``read(a, b)``: the answer tokens a:b)."""
    n_rec = len(a_tok_off) - 1
    out = np.zeros(n_rec, dtype=bool)
    positive = np.log(N / tok_df) > 0  # per token of the vocabulary: idf > 0
    for s in range(0, n_rec, step):
        e = min(n_rec, s + step)
        flags = ik.vocabulary_flags(vocab, positive, read(int(a_tok_off[s]), int(a_tok_off[e])))
        seen = np.concatenate([[0], np.cumsum(flags, dtype=np.int64)])  # a record's tokens: any of them positive
        off = a_tok_off[s:e + 1] - a_tok_off[s]
        out[s:e] = seen[off[1:]] > seen[off[:-1]]
    return out


KEY_STEP = 1 << 20  # question keys whose smallest record idf total is computed at once


def _key_min_total(folder: Path, q_idf_sum: np.ndarray, n_keys: int) -> None:
    """``NgramIndex.key_min_total`` (the smallest q_idf_sum among the records holding each question key) into
    ``folder/_key_min_total.npy``, ``KEY_STEP`` keys at a time from the postings written there: the scan maps it
    instead of computing it (and a float per posting) in every process."""
    out = _NpyOut(folder / "_key_min_total.npy", np.float64)
    offsets = np.load(folder / "q_offsets.npy", mmap_mode="r")
    for k in range(0, n_keys, KEY_STEP):
        off = np.array(offsets[k:min(n_keys, k + KEY_STEP) + 1])
        docs = next(_npy_chunks(folder / "q_docs.npy", np.int32, int(off[-1] - off[0]), int(off[0]), int(off[-1])))
        out.add(np.minimum.reduceat(q_idf_sum[docs], off[:-1] - off[0]))  # every key has a posting: no empty range
        del off, docs
    out.close()


def build_index(records: pl.DataFrame, cfg: DetectConfig, progress=None, batch: int = INDEX_BATCH,
                spill_dir: Path | None = None) -> NgramIndex:
    """Index the records with indexed == True (a table, or a file of them: ``_batches``); ``progress``: a
    build_budget.BuildProgress, or None; ``spill_dir``: the folder that holds the spill files (gigabytes for a large
    reference set) in a temporary folder named as store/files.py names temporaries, so a killed build's leftovers are
    swept (None: the system's $TMPDIR).

    Built in bounded memory: ``batch`` records at a time are tokenized and their n-grams hashed; the question
    (n-gram, record) pairs and the answer and passage n-grams go to files on disk by the top bits of their hash,
    and each of those buckets is then sorted on its own, in key order, into the postings, document frequencies
    and idf: the same arrays (bit for bit) a sort of every n-gram at once gives.  The index's large arrays are
    written a bucket (or a range) at a time straight into .npy files, never held whole: with ``spill_dir`` they
    stay in a temporary folder there and the index returned maps them (``NgramIndex.save`` links them into
    place); without, they are read into memory and the files removed."""

    step = progress.indexed if progress is not None else (lambda what, share: None)
    n_rec = int(records["indexed"].sum())
    if n_rec == 0:
        raise ValueError("no reference record is indexable (check the benchmark folder and task filter)")
    N = float(n_rec)
    n, an, pn = cfg.ngram_size, cfg.answer_ngram_size, cfg.passage_ngram_size
    if spill_dir is not None:
        Path(spill_dir).mkdir(parents=True, exist_ok=True)
    prefix = f".index-spill.tmp-{os.getpid()}." if spill_dir is not None else "contam-index-"
    with tempfile.TemporaryDirectory(prefix=prefix, dir=spill_dir) as tmp:
        spill = _Spill(Path(tmp))
        folder = (Path(tempfile.mkdtemp(prefix=f".index-arrays.tmp-{os.getpid()}.", dir=spill_dir))
                  if spill_dir is not None else Path(tmp) / "arrays")
        folder.mkdir(exist_ok=True)
        try:
            index = _build_into(records, cfg, step, batch, spill, folder, n_rec, N, n, an, pn)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        if spill_dir is None:  # in memory, the files removed with the temporary folder
            index = index.in_memory()
        else:
            index.__dict__["_staging"] = folder
    return index


def _build_into(records: pl.DataFrame, cfg: DetectConfig, step, batch: int, spill: _Spill, folder: Path, n_rec: int,
                N: float, n: int, an: int, pn: int) -> NgramIndex:
    """``build_index``'s work, its arrays written into ``folder`` (one .npy each, as ``NgramIndex.save`` writes
    them) and mapped by the index returned."""
    outs = {name: _NpyOut(folder / f"{name}.npy", dt) for name, dt in (
        ("a_tok", np.uint64), ("a_ng_keys", np.uint64), ("p_ng_keys", np.uint64))}
    rid, q_len, q_unique, a_len, a_unique, a_ng_n, p_len, p_ng_n = ([] for _ in range(8))
    vocab = np.zeros(0, dtype=np.uint64)
    tok_df = np.zeros(0, dtype=np.int64)
    done = 0
    n_ng = {"a": 0, "p": 0}  # answer and passage n-grams written so far
    # each batch's texts' ids back to back, and offsets: kept by the decon filters beside a records file, else made here
    for part, (q_tok, q_off), (a_tok, a_off), (p_tok, p_off) in record_tokens.encoded_batches(
            records, batch, cfg, _batches):
        m = part.height
        step("each batch's token ids and n-grams", 0.7 * done / n_rec)
        rid.append(part["record_id"].to_numpy().astype(np.int32))
        del part
        # -- question (n-gram, record) pairs, unique per record (decon rule: a question shorter than n tokens is
        # one n-gram of all its tokens) --------------------------------------
        q_len.append(np.diff(q_off).astype(np.int32))
        h, cnt = ik.ngram_sets(q_tok, q_off, n, short=True)
        q_unique.append(cnt.astype(np.int32))
        spill.add_buckets("q", h, ("qd", np.repeat(np.arange(done, done + m, dtype=np.int32), cnt)))
        del h, cnt
        # -- token frequencies (decon: per field, unique tokens per record) --
        uniq = [ik.ngram_sets(t, o, 1, hashed=False) for t, o in ((q_tok, q_off), (a_tok, a_off), (p_tok, p_off))]
        v, c = ik.value_counts(np.concatenate([u for u, _ in uniq]))
        vocab, inv = np.unique(np.concatenate([vocab, v]), return_inverse=True)
        tok_df = np.bincount(inv, weights=np.concatenate([tok_df, c]), minlength=len(vocab)).astype(np.int64)
        del q_tok
        # -- answers ---------------------------------------------------------
        al = np.diff(a_off).astype(np.int32)
        a_len.append(al)
        a_unique.append(uniq[1][1].astype(np.int32))
        k, cnt = ik.ngram_sets(a_tok, a_off, an, use=al > cfg.short_answer_token_threshold)
        a_ng_n.append(cnt)
        n_ng["a"] = _spill_ngrams(spill, outs["a_ng_keys"], "a", k, n_ng["a"])
        if len(a_tok):
            outs["a_tok"].add(a_tok)
        # -- passages --------------------------------------------------------
        p_len.append(np.diff(p_off).astype(np.int32))
        k, cnt = ik.ngram_sets(p_tok, p_off, pn)
        p_ng_n.append(cnt)
        n_ng["p"] = _spill_ngrams(spill, outs["p_ng_keys"], "p", k, n_ng["p"])
        del a_tok, p_tok, uniq, k, cnt
        done += m
    assert done == n_rec
    cat = lambda parts, dt: np.concatenate(parts).astype(dt) if parts else np.zeros(0, dtype=dt)  # noqa: E731
    small = {"record_ids": cat(rid, np.int32)}
    q_len, q_unique, a_len, a_unique, p_len = (cat(x, np.int32) for x in (q_len, q_unique, a_len, a_unique, p_len))
    a_ng_off, p_ng_off = (np.concatenate([[0], np.cumsum(cat(x, np.int64))]).astype(np.int64) for x in (a_ng_n, p_ng_n))
    for o in outs.values():
        o.close()
    step("question postings", 0.7)
    # -- question postings, a bucket of the key space at a time, in key order, straight into the index's files --
    hot_threshold = max(2 * int(math.isqrt(n_rec)), 2000)  # decon rule: an n-gram in more records is hot
    q_idf_sum, max_idf = np.zeros(n_rec), np.zeros(n_rec)  # per record: its keys' idf total, and largest (the scan's bound)
    q = {name: _NpyOut(folder / f"{name}.npy", dt) for name, dt in (
        ("q_keys", np.uint64), ("q_offsets", np.int64), ("q_docs", np.int32), ("q_idf", np.float64), ("hot", np.bool_))}
    n_keys = n_pairs = 0
    # the next bucket read back and sorted in one background thread (the sort's kernel releases the GIL) while this
    # one's totals and files are made: held at once, this bucket's arrays and the next's; written in bucket order
    with ThreadPoolExecutor(1) as ahead:
        sorted_next = ahead.submit(_sorted_bucket, spill, 0)
        for b in range(1 << BUCKET_BITS):
            hb, db = sorted_next.result()
            sorted_next = ahead.submit(_sorted_bucket, spill, b + 1) if b + 1 < 1 << BUCKET_BITS else None
            if not len(hb):
                continue
            first, df = ik.runs(hb)
            keys = hb[first]
            del hb
            add_postings(q, keys, first + n_pairs, db, df, N, hot_threshold, q_idf_sum, max_idf)
            n_keys += len(keys)
            n_pairs += len(db)
            del keys, first, df, db
    q["q_offsets"].add(np.array([n_pairs], dtype=np.int64))
    for o in q.values():
        o.close()
    _key_min_total(folder, q_idf_sum, n_keys)
    np.save(folder / "_record_max_idf.npy", max_idf, allow_pickle=False)
    del max_idf
    from contam_assets.detector import key_table

    bloom_bits = key_table.filter_bits(n_keys)
    bloom = key_table.empty_filter(bloom_bits)
    table = key_table.empty_directory(n_keys) if key_table.AVAILABLE and n_keys else None
    for chunk in _npy_chunks(folder / "q_keys.npy", np.uint64, 1 << 22):
        key_table.add_to_filter(bloom, chunk, bloom_bits)
        if table is not None:  # the lookup table: the directory of the keys' top bits, counted a chunk at a time
            key_table.count_keys(table, chunk)
    if table is not None:
        np.save(folder / "_dir.npy", key_table.finish_directory(table), allow_pickle=False)
        del table

    step("answer and passage n-grams", 0.85)
    a_tok_off = np.concatenate([[0], np.cumsum(a_len, dtype=np.int64)]).astype(np.int64)
    a_tok_path = folder / "a_tok.npy"
    a_short_ok = _short_ok(lambda a, e: next(_npy_chunks(a_tok_path, np.uint64, max(1, e - a), a, e), np.zeros(0, np.uint64)),
                           a_tok_off, vocab, tok_df, N)
    totals = {}
    for name, off, total in (("a", a_ng_off, n_ng["a"]), ("p", p_ng_off, n_ng["p"])):
        out, sums = _NpyOut(folder / f"{name}_ng_idf.npy", np.float64), _SegmentSums(off)
        _ngram_idf(spill, name, N, total, out, sums)
        out.close()
        totals[name] = sums.sums()
    small |= dict(q_len=q_len, q_unique=q_unique, q_idf_sum=q_idf_sum, bloom=bloom, a_len=a_len, a_unique=a_unique,
                  a_tok_off=a_tok_off, a_short_ok=a_short_ok, a_ng_off=a_ng_off, a_idf_total=totals["a"], p_len=p_len,
                  p_ng_off=p_ng_off, p_idf_total=totals["p"], _tok_vocab=vocab, _tok_df=tok_df)
    for name, arr in small.items():
        np.save(folder / f"{name}.npy", np.ascontiguousarray(arr), allow_pickle=False)
    del small, q_len, q_unique, q_idf_sum, bloom, a_len, a_unique, a_tok_off, a_short_ok, a_ng_off, p_len, p_ng_off, totals
    return NgramIndex.mapped(folder, bloom_bits=bloom_bits, hot_threshold=hot_threshold,
                             config_json=json.dumps(cfg.reference_key(), sort_keys=True))
