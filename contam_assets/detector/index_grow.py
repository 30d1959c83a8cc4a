"""Growing a saved n-gram index by the tasks that changed, instead of building it again.

When a task is added, removed or changed, every record of the other tasks keeps its n-grams; what changes is N
(the number of indexed records), so every idf, and the document frequency of the n-grams the changed records hold.
``grow_index`` tokenizes and hashes only the changed tasks' records (``build_index`` on them alone, in memory) and
writes the new index from the saved one:

- question postings: the saved (key, record) pairs, a range of keys at a time, the removed records' pairs left
  out, the others' record positions moved to their new places, merged with the added records' pairs; document
  frequencies are the postings' lengths, the idf ln(N / df) of each key and the per-record idf sums follow in key
  order, as the build adds them (bit for bit);
- answer and passage n-grams: per record, copied; the document frequency of a saved value is recovered from its
  idf (df = N / e^idf, rounded, and checked: ln(N / df) gives the saved idf back, else the index is built again),
  moved by the added and removed records' own counts, and the idf written again with the new N;
- token document frequencies (``_tok_vocab``, ``_tok_df``, kept by the build): moved by the changed records'
  counts; an answer's "idf sum > 0" flag changes only where the set of tokens in at least N (field, record)
  pairs changes, and is computed again for every record then;
- the lookup table, the Bloom filter and the scan's bounds as the build writes them.

The index it gives equals ``build_index`` of the new records, array for array and file for file
(test_index_grow.py).  It applies where the tasks kept are the same records in the same order (their task hashes,
rescan/plan.py, are equal and their records keep their relative order) and the index was saved with its token
document frequencies; ``grow_index`` returns None otherwise, and the caller builds the index.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from contam_assets.detector import compiled, key_table
from contam_assets.detector import index_build as ixb
from contam_assets.detector.config import DetectConfig
from contam_assets.detector.index import NgramIndex

PAIR_STEP = 1 << 22  # saved question (key, record) pairs merged at once
VALUE_STEP = 1 << 22  # answer and passage values (keys, idf, tokens) copied at once
MAX_SHARE = 0.5  # a change of more than this share of the indexed records is built again, not grown


@dataclass
class Change:
    """Where each saved record goes: ``old_to_new`` (per saved local position, its new one; -1 removed) and the new
    local positions of the records to index from their text (``added``, ascending)."""

    old_to_new: np.ndarray
    added: np.ndarray
    n_old: int
    n_new: int
    changed: list[str]  # tasks added, removed or changed

    @property
    def removed(self) -> np.ndarray:
        return np.flatnonzero(self.old_to_new < 0)


def _indexed_tasks(records) -> pl.Series:
    """The task of every indexed record, in record order (what local positions are)."""
    lf = records.lazy() if isinstance(records, pl.DataFrame) else records
    return lf.select("record_id", "task", "indexed").filter(pl.col("indexed")).sort("record_id").collect()["task"]


def plan_change(old_records, old_hashes: dict[str, str], records, hashes: dict[str, str]) -> Change | None:
    """The ``Change`` from the saved records to ``records`` (DataFrames or LazyFrames), or None where the tasks kept
    (equal task hashes) do not keep their records' relative order."""
    kept = sorted(t for t, h in hashes.items() if old_hashes.get(t) == h)
    old_t, new_t = _indexed_tasks(old_records), _indexed_tasks(records)
    old_k, new_k = old_t.is_in(kept).to_numpy(), new_t.is_in(kept).to_numpy()
    if int(old_k.sum()) != int(new_k.sum()) or not old_t.filter(old_k).equals(new_t.filter(new_k)):
        return None
    old_to_new = np.full(len(old_t), -1, dtype=np.int64)
    old_to_new[old_k] = np.flatnonzero(new_k)
    changed = sorted((set(hashes) | set(old_hashes)) - set(kept))
    return Change(old_to_new, np.flatnonzero(~new_k), len(old_t), len(new_t), changed)


def _part(records, positions_of: np.ndarray, cfg: DetectConfig) -> NgramIndex | None:
    """``build_index`` of the indexed records at the local positions ``positions_of`` alone (in memory)."""
    if not len(positions_of):
        return None
    rows = (records.lazy() if isinstance(records, pl.DataFrame) else records).filter(pl.col("indexed")).sort("record_id")
    rows = rows.with_row_index("_pos").join(pl.LazyFrame({"_pos": positions_of}, schema={"_pos": pl.UInt32}), on="_pos")
    part = rows.drop("_pos").sort("record_id").collect()
    return ixb.build_index(part, cfg)


def _finder(vocab: np.ndarray):
    """``find(keys)``: the position of every key in ``vocab`` (sorted, distinct uint64), -1 where absent."""
    if not len(vocab):
        return lambda keys: np.full(len(keys), -1, dtype=np.int64)
    if key_table.AVAILABLE and compiled.enabled():
        bits = key_table.filter_bits(len(vocab))
        table, bloom = key_table.directory_for(vocab), key_table.key_filter(vocab, bits)
        return lambda keys: key_table.positions(keys, vocab, table, bloom, bits)

    def find(keys):
        pos = np.minimum(np.searchsorted(vocab, keys), len(vocab) - 1)
        return np.where(vocab[pos] == keys, pos, -1)
    return find


def _counts(keys: np.ndarray):
    """(``find`` over the distinct keys, the distinct keys, how many records hold each)."""
    vals, counts = np.unique(keys, return_counts=True)
    return _finder(vals), vals, counts.astype(np.int64)


def _lookup(find, counts: np.ndarray, keys: np.ndarray) -> np.ndarray:
    if not len(counts):
        return np.zeros(len(keys), dtype=np.int64)
    pos = find(keys)
    return np.where(pos >= 0, counts[np.maximum(pos, 0)], 0)


class NotExact(ValueError):
    """A saved idf does not give its document frequency back exactly: the index is built again."""


def _df_of(N: float, idf: np.ndarray) -> np.ndarray:
    """The document frequencies the saved ``idf`` = ln(N / df) were computed from (checked)."""
    df = np.rint(N / np.exp(idf)).astype(np.int64)
    if len(df) and (df.min() < 1 or not np.array_equal(np.log(N / np.maximum(df, 1)), idf)):
        raise NotExact("a saved idf does not give its document frequency back")
    return df


def _runs(ch: Change) -> list[tuple[bool, int, int]]:
    """The new records in order as stretches of consecutive saved (False) or added (True) records:
    (added?, first, end) in the saved index's or the added part's positions."""
    if not ch.n_new:
        return []
    src, part = np.empty(ch.n_new, dtype=np.int64), np.zeros(ch.n_new, dtype=bool)
    kept = np.flatnonzero(ch.old_to_new >= 0)
    src[ch.old_to_new[kept]] = kept
    src[ch.added], part[ch.added] = np.arange(len(ch.added)), True
    cut = np.flatnonzero((part[1:] != part[:-1]) | (src[1:] != src[:-1] + 1)) + 1
    starts, ends = np.r_[0, cut], np.r_[cut, ch.n_new]
    return [(bool(part[s]), int(src[s]), int(src[s] + e - s)) for s, e in zip(starts.tolist(), ends.tolist())]


def _per_record(ch: Change, old: np.ndarray, part: np.ndarray | None, dtype) -> np.ndarray:
    out = np.zeros(ch.n_new, dtype=dtype)
    kept = ch.old_to_new >= 0
    out[ch.old_to_new[kept]] = np.asarray(old)[kept]
    if part is not None:
        out[ch.added] = part
    return out


def _copy(out: ixb._NpyOut, runs, old_vals, old_off, part_vals, part_off) -> None:
    """Per-record values (CSR) of the new records in order, copied from the saved index and the added part."""
    for is_part, s0, s1 in runs:
        vals, off = (part_vals, part_off) if is_part else (old_vals, old_off)
        a, e = int(off[s0]), int(off[s1])
        for s in range(a, e, VALUE_STEP):
            out.add(vals[s:min(e, s + VALUE_STEP)])


def _offsets(lens: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lens, dtype=np.int64)]).astype(np.int64)


def grow_index(old: NgramIndex, old_records, old_hashes: dict[str, str], records: pl.DataFrame,
               hashes: dict[str, str], cfg: DetectConfig, spill_dir: Path | None = None, progress=None,
               max_share: float = MAX_SHARE) -> NgramIndex | None:
    """The index ``build_index(records, cfg)`` gives, from ``old`` (the index of ``old_records``, whose task hashes
    are ``old_hashes``) and the changed tasks' records alone; None where it cannot be grown exactly (another
    config, an index saved without its token frequencies, tasks reordered, more than ``max_share`` of the records
    changed), and the caller builds it.  ``spill_dir``: as ``build_index``'s (None: in memory)."""
    step = progress.indexed if progress is not None else (lambda what, share: None)
    if old.config_json != json.dumps(cfg.reference_key(), sort_keys=True):
        return None
    if any(not isinstance(old.__dict__.get(n), np.ndarray) for n in NgramIndex.GROW_EXTRAS):
        return None
    ch = plan_change(old_records, old_hashes, records, hashes)
    if ch is None or not ch.n_new or len(ch.added) + len(ch.removed) > max_share * ch.n_new:
        return None
    step(f"indexing {len(ch.changed)} changed task(s): {len(ch.added):,} records in, {len(ch.removed):,} out", 0.0)
    added, removed = _part(records, ch.added, cfg), _part(old_records, ch.removed, cfg)
    if spill_dir is not None:
        Path(spill_dir).mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f".index-arrays.tmp-{os.getpid()}.", dir=spill_dir))
    try:
        index = _grow_into(old, ch, added, removed, records, folder, step)
    except NotExact:
        shutil.rmtree(folder, ignore_errors=True)
        return None
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    if spill_dir is None:  # in memory, as build_index gives it without a spill folder
        index = index.in_memory()
        shutil.rmtree(folder, ignore_errors=True)
    else:
        index.__dict__["_staging"] = folder
    return index


def _grow_into(old: NgramIndex, ch: Change, added: NgramIndex | None, removed: NgramIndex | None,
               records: pl.DataFrame, folder: Path, step) -> NgramIndex:
    N_old, N = float(ch.n_old), float(ch.n_new)
    n_rec = ch.n_new
    runs = _runs(ch)
    hot_threshold = max(2 * int(math.isqrt(n_rec)), 2000)
    step("question postings", 0.2)
    q_idf_sum, max_idf, n_keys = _merge_postings(old, ch, added, N, hot_threshold, folder)
    ixb._key_min_total(folder, q_idf_sum, n_keys)
    np.save(folder / "_record_max_idf.npy", max_idf, allow_pickle=False)
    del max_idf
    bloom_bits = _bloom_and_slots(folder, n_keys)

    step("answer and passage n-grams", 0.7)
    small = {"record_ids": records.filter(pl.col("indexed")).sort("record_id")["record_id"].to_numpy().astype(np.int32)}
    for name in ("q_len", "q_unique", "a_len", "a_unique", "p_len"):
        small[name] = _per_record(ch, getattr(old, name), None if added is None else getattr(added, name), np.int32)
    small["a_tok_off"] = _offsets(small["a_len"])
    a_tok = ixb._NpyOut(folder / "a_tok.npy", np.uint64)
    _copy(a_tok, runs, old.a_tok, old.a_tok_off, *((added.a_tok, added.a_tok_off) if added else (None, None)))
    a_tok.close()
    for name in ("a", "p"):
        off_name = f"{name}_ng_off"
        lens = _per_record(ch, np.diff(getattr(old, off_name)),
                           None if added is None else np.diff(getattr(added, off_name)), np.int64)
        small[off_name] = off = _offsets(lens)
        keys_out = ixb._NpyOut(folder / f"{name}_ng_keys.npy", np.uint64)
        _copy(keys_out, runs, getattr(old, f"{name}_ng_keys"), getattr(old, off_name),
              *((getattr(added, f"{name}_ng_keys"), getattr(added, off_name)) if added else (None, None)))
        keys_out.close()
        idf_out, sums = ixb._NpyOut(folder / f"{name}_ng_idf.npy", np.float64), ixb._SegmentSums(off)
        _ngram_idf(name, old, added, removed, runs, N_old, N, idf_out, sums)
        idf_out.close()
        small[f"{name}_idf_total"] = sums.sums()

    vocab, tok_df = _token_df(old, added, removed)
    small["_tok_vocab"], small["_tok_df"] = vocab, tok_df
    small["a_short_ok"] = _short_ok(old, ch, added, vocab, tok_df, N_old, N, small["a_tok_off"], folder)
    small["q_idf_sum"] = q_idf_sum
    for name, arr in small.items():
        np.save(folder / f"{name}.npy", np.ascontiguousarray(arr), allow_pickle=False)
    return NgramIndex.mapped(folder, bloom_bits=bloom_bits, hot_threshold=hot_threshold, config_json=old.config_json)


def _merge_postings(old: NgramIndex, ch: Change, added: NgramIndex | None, N: float, hot_threshold: int,
                    folder: Path) -> tuple[np.ndarray, np.ndarray, int]:
    """The new question postings into ``folder`` (q_keys, q_offsets, q_docs, q_idf, hot), a range of keys at a
    time in key order; the per-record idf sums and largest idf, added in key order as the build adds them."""
    q_idf_sum = np.zeros(ch.n_new, dtype=np.float64)
    max_idf = np.zeros(ch.n_new, dtype=np.float64)
    q = {name: ixb._NpyOut(folder / f"{name}.npy", dt) for name, dt in (
        ("q_keys", np.uint64), ("q_offsets", np.int64), ("q_docs", np.int32), ("q_idf", np.float64), ("hot", np.bool_))}
    okeys, ooff, odocs = old.q_keys, np.asarray(old.q_offsets), old.q_docs
    remap = ch.old_to_new.astype(np.int32)
    if added is not None:
        akeys, aoff, adocs = added.q_keys, np.asarray(added.q_offsets), ch.added.astype(np.int32)[added.q_docs]
    else:
        akeys, aoff, adocs = np.zeros(0, np.uint64), np.zeros(1, np.int64), np.zeros(0, np.int32)
    K = len(okeys)
    n_keys = n_pairs = 0
    i0 = j0 = 0
    while True:
        i1 = K if K == 0 else min(K, max(i0 + 1, int(np.searchsorted(ooff, ooff[i0] + PAIR_STEP, side="right")) - 1))
        j1 = int(np.searchsorted(akeys, okeys[i1])) if i1 < K else len(akeys)
        okc, offc = np.asarray(okeys[i0:i1]), ooff[i0:i1 + 1] - ooff[i0]
        docs = remap[np.asarray(odocs[ooff[i0]:ooff[i1]])] if i1 > i0 else np.zeros(0, np.int32)
        keep = docs >= 0
        whole = bool(keep.all())
        if j1 == j0:  # no added pair here: the saved keys in order, each with its postings kept
            df = np.diff(offc) if whole else np.add.reduceat(keep.astype(np.int64), offc[:-1])
            if not whole:
                docs, held = docs[keep], df > 0
                okc, df = okc[held], df[held]
            uk = okc
        else:
            keys = np.repeat(okc, np.diff(offc))
            if not whole:
                keys, docs = keys[keep], docs[keep]
            keys = np.concatenate([keys, np.repeat(np.asarray(akeys[j0:j1]), np.diff(aoff[j0:j1 + 1]))])
            docs = np.concatenate([docs, adocs[aoff[j0]:aoff[j1]]])
            order = np.lexsort((docs, keys))
            keys, docs = keys[order], docs[order]
            del order
            start = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if len(keys) else np.zeros(0, np.int64)
            uk, df = keys[start], np.diff(np.r_[start, len(keys)]).astype(np.int64)
            del keys, start
        if len(uk):
            first = np.r_[0, np.cumsum(df)[:-1]].astype(np.int64)
            ixb.add_postings(q, uk, first + n_pairs, docs, df, N, hot_threshold, q_idf_sum, max_idf)
            n_keys += len(uk)
            n_pairs += len(docs)
        i0, j0 = i1, j1
        if i1 >= K:
            break
    q["q_offsets"].add(np.array([n_pairs], dtype=np.int64))
    for o in q.values():
        o.close()
    return q_idf_sum, max_idf, n_keys


def _bloom_and_slots(folder: Path, n_keys: int) -> int:
    """The key filter (saved as bloom.npy) and the lookup table (_dir.npy) of the keys written, as the build
    makes them; the filter's bits."""
    bloom_bits = key_table.filter_bits(n_keys)
    bloom = key_table.empty_filter(bloom_bits)
    table = key_table.empty_directory(n_keys) if key_table.AVAILABLE and n_keys else None
    for chunk in ixb._npy_chunks(folder / "q_keys.npy", np.uint64, 1 << 22):
        key_table.add_to_filter(bloom, chunk, bloom_bits)
        if table is not None:
            key_table.count_keys(table, chunk)
    if table is not None:
        np.save(folder / "_dir.npy", key_table.finish_directory(table), allow_pickle=False)
    np.save(folder / "bloom.npy", bloom, allow_pickle=False)
    return bloom_bits


def _ngram_idf(name: str, old: NgramIndex, added: NgramIndex | None, removed: NgramIndex | None, runs,
               N_old: float, N: float, out: ixb._NpyOut, sums: ixb._SegmentSums) -> None:
    """The idf of every answer (``name`` "a") or passage ("p") n-gram of the new records in order, ln(N / df):
    a saved value's df recovered from its idf and moved by the added and removed records' counts."""
    old_keys, old_idf = getattr(old, f"{name}_ng_keys"), getattr(old, f"{name}_ng_idf")
    empty = np.zeros(0, dtype=np.uint64)
    find_a, va, ca = _counts(getattr(added, f"{name}_ng_keys") if added is not None else empty)
    find_r, _, cr = _counts(getattr(removed, f"{name}_ng_keys") if removed is not None else empty)
    df_added = np.zeros(len(va), dtype=np.int64)  # the added records' keys: df among the saved records
    if len(va):
        for s in range(0, len(old_keys), VALUE_STEP):
            pos = find_a(np.asarray(old_keys[s:s + VALUE_STEP]))
            hit = np.flatnonzero(pos >= 0)
            if len(hit):
                df_added[pos[hit]] = _df_of(N_old, np.asarray(old_idf[s:s + VALUE_STEP])[hit])
        df_added += ca - _lookup(find_r, cr, va)
    for is_part, s0, s1 in runs:
        if is_part:
            off, keys = getattr(added, f"{name}_ng_off"), getattr(added, f"{name}_ng_keys")
            k = keys[int(off[s0]):int(off[s1])]
            vals = np.log(N / df_added[find_a(k)]) if len(k) else np.zeros(0)
            out.add(vals)
            sums.add(vals)
            continue
        off = getattr(old, f"{name}_ng_off")
        a, e = int(off[s0]), int(off[s1])
        for s in range(a, e, VALUE_STEP):
            k = np.asarray(old_keys[s:min(e, s + VALUE_STEP)])
            df = _df_of(N_old, np.asarray(old_idf[s:min(e, s + VALUE_STEP)]))
            df += _lookup(find_a, ca, k) - _lookup(find_r, cr, k)
            vals = np.log(N / df)
            out.add(vals)
            sums.add(vals)


def _token_df(old: NgramIndex, added: NgramIndex | None, removed: NgramIndex | None) -> tuple[np.ndarray, np.ndarray]:
    """The token document frequencies of the new records: the saved ones plus the added records' less the removed
    records' (a token no record holds any more leaves the vocabulary, as in a build)."""
    parts = [(np.asarray(old._tok_vocab), np.asarray(old._tok_df))]
    parts += [(p._tok_vocab, sign * np.asarray(p._tok_df)) for p, sign in ((added, 1), (removed, -1)) if p is not None]
    vocab, inv = np.unique(np.concatenate([v for v, _ in parts]), return_inverse=True)
    df = np.bincount(inv, weights=np.concatenate([c for _, c in parts]), minlength=len(vocab)).astype(np.int64)
    if len(df) and df.min() < 0:
        raise NotExact("the removed records hold tokens the saved frequencies do not count")
    keep = df > 0
    return vocab[keep], df[keep]


def _short_ok(old: NgramIndex, ch: Change, added: NgramIndex | None, vocab: np.ndarray, tok_df: np.ndarray,
              N_old: float, N: float, a_tok_off: np.ndarray, folder: Path) -> np.ndarray:
    """Per new record: its answer's token idf sum is > 0, i.e. one of its distinct tokens is in fewer than N
    (field, record) pairs.  The saved records keep their flag while the set of tokens in N or more is the same;
    else every record's is computed again."""
    full_old = np.asarray(old._tok_vocab)[np.asarray(old._tok_df) >= N_old]
    full_new = vocab[tok_df >= N]
    if not np.array_equal(full_old, full_new):
        path = folder / "a_tok.npy"
        return ixb._short_ok(lambda a, e: next(ixb._npy_chunks(path, np.uint64, max(1, e - a), a, e),
                                               np.zeros(0, np.uint64)), a_tok_off, vocab, tok_df, N)
    part = None
    if added is not None:
        part = ixb._short_ok(lambda a, e: added.a_tok[a:e], added.a_tok_off, vocab, tok_df, N)
    return _per_record(ch, old.a_short_ok, part, np.bool_)
