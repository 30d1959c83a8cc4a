"""Building the IDF n-gram index (detector/index.py) from the reference records.

``build_index`` works in bounded batches: each batch's n-grams are hashed and spilled to files split by the top bits
of their hash, each file sorted on its own, so the build holds one batch and one bucket besides the index it
writes.  ``build_index_whole`` is the plain one-pass definition it must equal array for array.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

import numpy as np
import polars as pl

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

    step("question n-grams", 0.5)
    # -- question postings: unique n-grams per record --------------------------
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
    key_of_pair = np.repeat(np.arange(len(q_keys)), df)
    q_idf_sum = np.zeros(n_rec, dtype=np.float64)
    np.add.at(q_idf_sum, all_d, q_idf[key_of_pair])
    del key_of_pair
    # decon rule: an n-gram in more than max(2*floor(sqrt(N)), 2000) records is hot
    hot_threshold = max(2 * int(math.isqrt(n_rec)), 2000)
    hot = df > hot_threshold

    bloom_bits = int(min(32, max(16, math.ceil(math.log2(max(1, len(q_keys)) * 16)))))
    bloom = np.zeros((1 << bloom_bits) // 64, dtype=np.uint64)
    bidx = q_keys >> np.uint64(64 - bloom_bits)
    np.bitwise_or.at(bloom, (bidx >> np.uint64(6)).astype(np.int64), np.left_shift(np.uint64(1), bidx & np.uint64(63)))
    del bidx

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
        if not len(values):
            self.dtypes.setdefault(name, values.dtype)
            return
        self.dtypes.setdefault(name, values.dtype)
        with open(self.folder / name, "ab") as fh:
            np.ascontiguousarray(values, dtype=self.dtypes[name]).tofile(fh)
        self.sizes[name] = self.sizes.get(name, 0) + len(values)

    def add_buckets(self, name: str, keys: np.ndarray, *others: tuple[str, np.ndarray]) -> None:
        """``keys`` (uint64 hashes) and arrays aligned with them, each appended to the file of its key's bucket;
        the order within a bucket is the order of arrival."""
        if not len(keys):
            return
        bucket = (keys >> np.uint64(64 - BUCKET_BITS)).astype(np.int64)
        order = np.argsort(bucket, kind="stable")
        bounds = np.searchsorted(bucket[order], np.arange((1 << BUCKET_BITS) + 1))
        for arr_name, arr in ((name, keys), *others):
            sorted_arr = arr[order]
            for b in np.flatnonzero(np.diff(bounds)).tolist():
                self.add(f"{arr_name}.{b}", sorted_arr[bounds[b]:bounds[b + 1]])

    def read(self, name: str, dtype=None) -> np.ndarray:
        dtype = self.dtypes.get(name, dtype)
        path = self.folder / name
        if dtype is None or not path.exists():
            return np.zeros(0, dtype=dtype or np.uint64)
        out = np.fromfile(path, dtype=dtype)
        path.unlink()
        return out


def _batches(records: pl.DataFrame, size: int):
    """The indexed records in record_id order, ``size`` rows of ``records`` at a time (never the whole table's
    texts as Python strings at once)."""
    if not records["record_id"].is_sorted():
        records = records.sort("record_id")
    for start in range(0, records.height, size):
        part = records.slice(start, size).filter(pl.col("indexed"))
        if part.height:
            yield part


def _chunked_segment_sums(values: np.ndarray, offsets: np.ndarray, step: int | None = None) -> np.ndarray:
    """``_segment_sums`` without a cumulative sum of the whole array at once: the running sum is carried from
    chunk to chunk, so every partial sum is the one the whole-array cumsum gives (bit for bit)."""
    n = len(offsets) - 1
    step = step or SUM_STEP
    if len(values) <= step:
        return _segment_sums(values, offsets)
    cs_at = np.zeros(len(offsets), dtype=np.float64)  # cumulative sum before position offsets[i]
    carry = 0.0
    for a in range(0, len(values), step):
        chunk = np.asarray(values[a:a + step], dtype=np.float64).copy()
        chunk[0] = carry + chunk[0] if a else chunk[0]
        cs = np.cumsum(chunk)
        sel = slice(int(np.searchsorted(offsets, a + 1, side="left")), int(np.searchsorted(offsets, a + len(chunk), side="right")))
        cs_at[sel] = cs[offsets[sel] - a - 1]
        carry = float(cs[-1])
    return cs_at[1:n + 1] - cs_at[:n]


def _spill_ngrams(spill: _Spill, name: str, keys: np.ndarray, before: int) -> int:
    """A batch's per-record n-gram keys: in order (the index's array), and by bucket with their positions (for
    their document frequencies)."""
    spill.add(f"{name}_keys", keys)
    spill.add_buckets(f"{name}k", keys, (f"{name}p", np.arange(before, before + len(keys), dtype=np.int64)))
    return before + len(keys)


def _ngram_idf(spill: _Spill, name: str, N: float) -> tuple[np.ndarray, np.ndarray]:
    """The spilled per-record keys ``name`` and the idf of each, ln(N / df) with df the number of records holding
    the key (keys are unique per record), counted a bucket at a time."""
    keys = spill.read(f"{name}_keys", np.uint64)
    idf = np.zeros(len(keys), dtype=np.float64)
    for b in range(1 << BUCKET_BITS):
        kb, pb = spill.read(f"{name}k.{b}", np.uint64), spill.read(f"{name}p.{b}", np.int64)
        if not len(kb):
            continue
        order = np.argsort(kb)
        _, df = np.unique(kb[order], return_counts=True)
        idf[pb[order]] = np.log(N / np.repeat(df, df))
    return keys, idf


def _short_ok(a_tok: np.ndarray, a_tok_off: np.ndarray, vocab: np.ndarray, tok_df: np.ndarray, N: float,
              step: int = 1 << 16) -> np.ndarray:
    """Per record: the idf sum of its answer's distinct tokens is > 0, i.e. one of them has idf > 0 (records
    ``step`` at a time)."""
    n_rec = len(a_tok_off) - 1
    out = np.zeros(n_rec, dtype=bool)
    for s in range(0, n_rec, step):
        e = min(n_rec, s + step)
        lens = np.diff(a_tok_off[s:e + 1])
        vals, seg = unique_per_segment(a_tok[a_tok_off[s]:a_tok_off[e]], np.repeat(np.arange(e - s), lens))
        out[s:e] = np.bincount(seg, weights=np.log(N / tok_df[np.searchsorted(vocab, vals)]) > 0, minlength=e - s) > 0
    return out


def build_index(records: pl.DataFrame, cfg: DetectConfig, progress=None, batch: int = INDEX_BATCH,
                spill_dir: Path | None = None) -> NgramIndex:
    """Index the records with indexed == True; ``progress``: a build_budget.BuildProgress, or None; ``spill_dir``:
    the folder that holds the spill files (gigabytes for a large reference set) in a temporary folder named as
    store/files.py names temporaries, so a killed build's leftovers are swept (None: the system's $TMPDIR).

    Built in bounded memory: ``batch`` records at a time are tokenized and their n-grams hashed; the question
    (n-gram, record) pairs and the answer and passage n-grams go to files on disk by the top bits of their hash,
    and each of those buckets is then sorted on its own, in key order, into the postings, document frequencies
    and idf: the same arrays (bit for bit) a sort of every n-gram at once gives."""

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
        rid, q_len, q_unique, a_len, a_unique, a_ng_n, p_len, p_ng_n = ([] for _ in range(8))
        vocab = np.zeros(0, dtype=np.uint64)
        tok_df = np.zeros(0, dtype=np.int64)
        done = 0
        n_ng = {"a": 0, "p": 0}  # answer and passage n-grams spilled so far
        for part in _batches(records, batch):
            m = part.height
            step("tokenizing and hashing", 0.7 * done / n_rec)
            rid.append(part["record_id"].to_numpy().astype(np.int32))
            q_tokens = encode_texts(part["question"].to_list(), cfg)
            a_tokens = encode_texts([a or "" for a in part["answer"].to_list()] if cfg.index_answers else [""] * m, cfg)
            p_tokens = encode_texts([p or "" for p in part["passage"].to_list()] if cfg.index_passages else [""] * m, cfg)
            # -- question (n-gram, record) pairs, unique per record -------------
            q_len.append(np.fromiter(map(len, q_tokens), dtype=np.int32, count=m))
            h, seg = segment_ngram_hashes(q_tokens, n)
            # decon rule: a question shorter than n tokens is one n-gram of all its tokens
            short = [i for i, t in enumerate(q_tokens) if 0 < len(t) < n]
            if short:
                h = np.concatenate([h, np.array([ngram_hash(q_tokens[i]) for i in short], dtype=np.uint64)])
                seg = np.concatenate([seg, np.array(short, dtype=np.int64)])
            h, seg = unique_per_segment(h, seg)  # per record, in record order
            q_unique.append(np.bincount(seg, minlength=m).astype(np.int32))
            spill.add_buckets("q", h, ("qd", (seg + done).astype(np.int32)))
            del h, seg
            # -- token frequencies (decon: per field, unique tokens per record) --
            uniq = [_unique_tokens(f) for f in (q_tokens, a_tokens, p_tokens)]
            v, c = np.unique(np.concatenate([u for u, _ in uniq]), return_counts=True)
            vocab, inv = np.unique(np.concatenate([vocab, v]), return_inverse=True)
            tok_df = np.bincount(inv, weights=np.concatenate([tok_df, c]), minlength=len(vocab)).astype(np.int64)
            del q_tokens
            # -- answers ---------------------------------------------------------
            al = np.fromiter(map(len, a_tokens), dtype=np.int32, count=m)
            a_len.append(al)
            a_unique.append(np.bincount(uniq[1][1], minlength=m).astype(np.int32))
            long_answer = al > cfg.short_answer_token_threshold
            k, s = unique_per_segment(*segment_ngram_hashes(a_tokens, an, long_answer))
            a_ng_n.append(np.bincount(s, minlength=m))
            n_ng["a"] = _spill_ngrams(spill, "a", k.astype(np.uint64), n_ng["a"])
            spill.add("a_tok", np.concatenate(a_tokens).astype(np.uint64) if al.sum() else np.zeros(0, dtype=np.uint64))
            # -- passages --------------------------------------------------------
            p_len.append(np.fromiter(map(len, p_tokens), dtype=np.int32, count=m))
            k, s = unique_per_segment(*segment_ngram_hashes(p_tokens, pn))
            p_ng_n.append(np.bincount(s, minlength=m))
            n_ng["p"] = _spill_ngrams(spill, "p", k.astype(np.uint64), n_ng["p"])
            del a_tokens, p_tokens, uniq, k, s
            done += m
        assert done == n_rec
        cat = lambda parts, dt: np.concatenate(parts).astype(dt) if parts else np.zeros(0, dtype=dt)  # noqa: E731
        q_len, q_unique, a_len, a_unique, p_len = (cat(x, np.int32) for x in (q_len, q_unique, a_len, a_unique, p_len))
        a_ng_off, p_ng_off = (np.concatenate([[0], np.cumsum(cat(x, np.int64))]).astype(np.int64) for x in (a_ng_n, p_ng_n))

        step("question postings", 0.7)
        # -- question postings, a bucket of the key space at a time, in key order --
        hot_threshold = max(2 * int(math.isqrt(n_rec)), 2000)  # decon rule: an n-gram in more records is hot
        q_idf_sum = np.zeros(n_rec, dtype=np.float64)
        n_keys = n_pairs = 0
        for b in range(1 << BUCKET_BITS):
            hb, db = spill.read(f"q.{b}", np.uint64), spill.read(f"qd.{b}", np.int32)
            if not len(hb):
                continue
            order = np.argsort(hb, kind="stable")  # records ascending within a key: they arrived in record order
            hb, db = hb[order], db[order]
            del order
            keys, first, df = np.unique(hb, return_index=True, return_counts=True)
            del hb
            idf = np.log(N / df)  # decon rule: idf = ln(N / df) over indexed records
            np.add.at(q_idf_sum, db, np.repeat(idf, df))
            spill.add("q_keys", keys)
            spill.add("q_first", (first + n_pairs).astype(np.int64))
            spill.add("q_docs", db)
            spill.add("q_idf", idf)
            n_keys += len(keys)
            n_pairs += len(db)
            del keys, first, df, db, idf
        q_keys = spill.read("q_keys", np.uint64)
        bloom_bits = int(min(32, max(16, math.ceil(math.log2(max(1, len(q_keys)) * 16)))))
        bloom = np.zeros((1 << bloom_bits) // 64, dtype=np.uint64)
        for a in range(0, len(q_keys), 1 << 22):
            bidx = q_keys[a:a + (1 << 22)] >> np.uint64(64 - bloom_bits)
            np.bitwise_or.at(bloom, (bidx >> np.uint64(6)).astype(np.int64), np.left_shift(np.uint64(1), bidx & np.uint64(63)))
        q_offsets = np.append(spill.read("q_first", np.int64), n_pairs).astype(np.int64)
        q_docs = spill.read("q_docs", np.int32)
        q_idf = spill.read("q_idf", np.float64)
        hot = np.diff(q_offsets) > hot_threshold

        step("answer and passage n-grams", 0.85)
        a_tok = spill.read("a_tok", np.uint64)
        a_tok_off = np.concatenate([[0], np.cumsum(a_len, dtype=np.int64)]).astype(np.int64)
        a_short_ok = _short_ok(a_tok, a_tok_off, vocab, tok_df, N)
        a_ng_keys, a_ng_idf = _ngram_idf(spill, "a", N)
        p_ng_keys, p_ng_idf = _ngram_idf(spill, "p", N)
        a_idf_total = _chunked_segment_sums(a_ng_idf, a_ng_off)
        p_idf_total = _chunked_segment_sums(p_ng_idf, p_ng_off)
    return NgramIndex(
        record_ids=cat(rid, np.int32),
        q_keys=q_keys, q_offsets=q_offsets, q_docs=q_docs, q_idf=q_idf, hot=hot,
        q_len=q_len, q_unique=q_unique, q_idf_sum=q_idf_sum, bloom=bloom, bloom_bits=bloom_bits,
        a_len=a_len, a_unique=a_unique, a_tok_off=a_tok_off, a_tok=a_tok, a_short_ok=a_short_ok,
        a_ng_off=a_ng_off, a_ng_keys=a_ng_keys, a_ng_idf=np.asarray(a_ng_idf, dtype=np.float64), a_idf_total=a_idf_total,
        p_len=p_len, p_ng_off=p_ng_off, p_ng_keys=p_ng_keys, p_ng_idf=np.asarray(p_ng_idf, dtype=np.float64),
        p_idf_total=p_idf_total, hot_threshold=hot_threshold,
        config_json=json.dumps(cfg.reference_key(), sort_keys=True),
    )
