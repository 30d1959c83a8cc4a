"""IDF n-gram index of the reference set (decon's reference index, in numpy arrays).

Questions are indexed as `ngram_size`-grams in an inverted index (sorted 64-bit
n-gram hashes -> postings of record positions); answers as `answer_ngram_size`-grams
and passages as `passage_ngram_size`-grams per record.  IDF = ln(N / df) with N the
number of indexed records.  A key filter over the question n-gram hashes (``bloom``: a
word-blocked Bloom filter, three bits of one 64-bit word per key, key_table.key_filter) lets
the scanner skip almost every miss without a search.
"""

from __future__ import annotations

import json
import mmap
import os
import shutil
import uuid
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import xxhash

from contam_assets.detector import compiled
from contam_assets.detector.config import DetectConfig
from contam_assets.detector.ngrams import unique_per_segment
from contam_assets.detector.text import clean_text
from contam_assets.detector.tokenize import get_tokenizer

FORMAT_VERSION = 3  # a folder of .npy files (one per array) and meta.json, mapped when loaded; 3: the key filter
# sets three bits of a word per key (2: one bit)


def write_npz(path: Path, meta: dict, arrays: dict[str, np.ndarray]) -> None:
    """``arrays`` and ``meta`` (as JSON, key __meta__) in one .npz, written whole under a temporary name first
    (unique: two writers never collide)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}.npz")
    try:
        np.savez(tmp, __meta__=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), **arrays)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


@dataclass
class NgramIndex:
    record_ids: np.ndarray  # int32: local position -> reference record_id
    # question inverted index
    q_keys: np.ndarray  # uint64, sorted unique n-gram hashes
    q_offsets: np.ndarray  # int64, len(q_keys)+1
    q_docs: np.ndarray  # int32 local positions
    q_idf: np.ndarray  # float64 per key
    hot: np.ndarray  # bool per key
    q_len: np.ndarray  # int32 question tokens per record
    q_unique: np.ndarray  # int32 unique question n-grams per record
    q_idf_sum: np.ndarray  # float64 per record
    bloom: np.ndarray  # uint64 words: the key filter of q_keys (key_table.key_filter)
    bloom_bits: int
    # answers
    a_len: np.ndarray  # int32 total answer tokens (0 = no answer)
    a_unique: np.ndarray  # int32 unique answer tokens
    a_tok_off: np.ndarray
    a_tok: np.ndarray  # uint64 ordered answer tokens
    a_short_ok: np.ndarray  # bool: answer token idf sum > 0
    a_ng_off: np.ndarray
    a_ng_keys: np.ndarray  # uint64 sorted unique per record
    a_ng_idf: np.ndarray  # float64 aligned with a_ng_keys
    a_idf_total: np.ndarray
    # passages
    p_len: np.ndarray
    p_ng_off: np.ndarray
    p_ng_keys: np.ndarray
    p_ng_idf: np.ndarray
    p_idf_total: np.ndarray
    hot_threshold: int = 0
    config_json: str = "{}"
    # tables computed on the index that save() keeps beside its arrays, mapped by every process that loads it: the
    # lookup table, and the scan's per-key and per-record bounds (key_min_total, record_max_idf), which the batched
    # build writes as it goes; an index saved without them computes them when first asked.  The build also keeps
    # the document frequency of every token (_tok_vocab, _tok_df: what an answer's idf sum depends on), which
    # growing the index by a task needs (detector/index_grow.py); an index without them is built again instead
    SAVED_EXTRAS = ("_dir", "_key_min_total", "_record_max_idf", "_tok_vocab", "_tok_df")
    GROW_EXTRAS = ("_tok_vocab", "_tok_df")

    @property
    def n_records(self) -> int:
        return len(self.record_ids)

    @property
    def has_answer(self) -> np.ndarray:
        return self.a_len > 0

    @property
    def has_passage(self) -> np.ndarray:
        return self.p_len > 0

    # -- lookups -------------------------------------------------------------
    def bloom_test(self, hashes: np.ndarray) -> np.ndarray:
        """True where a hash may be a question n-gram (no false negatives)."""
        from contam_assets.detector.key_table import may_hold

        return may_hold(self.bloom, self.bloom_bits, hashes)

    def lookup(self, hashes: np.ndarray) -> np.ndarray:
        """Position in q_keys of every hash, -1 where it is not a question n-gram (int64)."""
        table = self.__dict__.get("_dir")
        if table is None:
            from contam_assets.detector import key_table

            table = self.__dict__["_dir"] = key_table.directory_for(self.q_keys) if key_table.AVAILABLE else False
        if table is not False and len(self.q_keys) and compiled.enabled():  # the directory of the keys (key_table.py)
            from contam_assets.detector.key_table import positions

            return positions(hashes, self.q_keys, table, self.bloom, self.bloom_bits)
        return self.lookup_reference(hashes)

    def lookup_reference(self, hashes: np.ndarray) -> np.ndarray:
        """``lookup`` by the key filter and a binary search of q_keys (numpy)."""
        keys = np.full(len(hashes), -1, dtype=np.int64)
        maybe = np.flatnonzero(self.bloom_test(hashes))
        if len(maybe) and len(self.q_keys):
            h = hashes[maybe]
            pos = np.minimum(np.searchsorted(self.q_keys, h), len(self.q_keys) - 1)
            found = self.q_keys[pos] == h
            keys[maybe[found]] = pos[found]
        return keys

    def key_min_total(self) -> np.ndarray:
        """Per question key: the smallest q_idf_sum among the records holding it (saved with the index, mapped;
        computed and kept here where the index has none)."""
        cached = self.__dict__.get("_key_min_total")
        if cached is None:
            if len(self.q_docs):
                cached = np.minimum.reduceat(self.q_idf_sum[self.q_docs], self.q_offsets[:-1])
            else:
                cached = np.zeros(0)
            self.__dict__["_key_min_total"] = cached
        return cached

    def record_max_idf(self) -> np.ndarray:
        """Per record: the largest idf among its question keys, 0 for a record without keys (saved with the index,
        mapped; computed and kept here where the index has none)."""
        cached = self.__dict__.get("_record_max_idf")
        if cached is None:
            cached = np.zeros(self.n_records)
            np.maximum.at(cached, self.q_docs, np.repeat(self.q_idf, np.diff(self.q_offsets)))
            self.__dict__["_record_max_idf"] = cached
        return cached

    def key_of(self, h) -> int:
        """Position of hash ``h`` in q_keys, or -1."""
        i = int(np.searchsorted(self.q_keys, h))
        if i < len(self.q_keys) and self.q_keys[i] == h:
            return i
        return -1

    def postings(self, key: int) -> np.ndarray:
        return self.q_docs[self.q_offsets[key] : self.q_offsets[key + 1]]

    def answer_keys(self, local: int) -> tuple[np.ndarray, np.ndarray]:
        s, e = self.a_ng_off[local], self.a_ng_off[local + 1]
        return self.a_ng_keys[s:e], self.a_ng_idf[s:e]

    def answer_tokens(self, local: int) -> np.ndarray:
        return self.a_tok[self.a_tok_off[local] : self.a_tok_off[local + 1]]

    def passage_keys(self, local: int) -> tuple[np.ndarray, np.ndarray]:
        s, e = self.p_ng_off[local], self.p_ng_off[local + 1]
        return self.p_ng_keys[s:e], self.p_ng_idf[s:e]

    # -- persistence ---------------------------------------------------------
    def save(self, path: Path) -> None:
        """A folder of one .npy per array, meta.json and (where numba is installed) the lookup table ``_dir``,
        written under a temporary name and renamed into place whole."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        arrays = {f.name: getattr(self, f.name) for f in fields(self) if isinstance(getattr(self, f.name), np.ndarray)}
        from contam_assets.detector import key_table

        if key_table.AVAILABLE and len(self.q_keys):  # built once here, mapped by every process that loads the index
            table = self.__dict__.get("_dir")
            arrays["_dir"] = table if isinstance(table, np.ndarray) else key_table.directory_for(self.q_keys)
        arrays["_key_min_total"], arrays["_record_max_idf"] = self.key_min_total(), self.record_max_idf()
        arrays |= {name: self.__dict__[name] for name in self.GROW_EXTRAS if isinstance(self.__dict__.get(name), np.ndarray)}
        meta = dict(version=FORMAT_VERSION, bloom_bits=self.bloom_bits, hot_threshold=self.hot_threshold,
                    config_json=self.config_json, arrays=sorted(arrays))
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        old = path.with_name(f".{path.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        files = self.__dict__.get("_files", {})  # name -> (file, array): arrays already written as .npy (mapped)
        try:
            tmp.mkdir()
            for name, a in arrays.items():
                src, same = files.get(name, (None, None))
                if src is not None and same is a and Path(src).exists():  # its file, linked (or copied) into place
                    try:
                        os.link(src, tmp / f"{name}.npy")
                    except OSError:
                        shutil.copyfile(src, tmp / f"{name}.npy")
                    continue
                np.save(tmp / f"{name}.npy", np.ascontiguousarray(a), allow_pickle=False)
            h = xxhash.xxh3_64()  # keys_digest, from the files just written: every process that loads it reads it here
            for name in ("q_keys", "record_ids"):
                _hash_npy_data(tmp / f"{name}.npy", h)
            meta["keys_digest"] = h.hexdigest()
            (tmp / "meta.json").write_text(json.dumps(meta))
            if path.exists():
                path.rename(old)
            tmp.rename(path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.rmtree(old, ignore_errors=True)
        self.__dict__["_keys_digest"] = meta["keys_digest"]
        staging = self.__dict__.pop("_staging", None)  # the build's own folder of arrays: linked, no longer needed
        if staging is not None:
            self.__dict__["_files"] = {name: (path / f"{name}.npy", a) for name, (_, a) in files.items()}
            shutil.rmtree(staging, ignore_errors=True)

    def in_memory(self) -> "NgramIndex":
        """A copy of this index with every array (its saved extras too) read into memory: what a build or a grow
        without a spill folder returns once its folder of mapped arrays is removed."""
        index = NgramIndex(**{f: np.array(v) if isinstance(v, np.ndarray) else v
                              for f, v in self.__dict__.items() if f in NgramIndex.__dataclass_fields__})
        for name in NgramIndex.SAVED_EXTRAS:
            if isinstance(self.__dict__.get(name), np.ndarray):
                index.__dict__[name] = np.array(self.__dict__[name])
        return index

    @classmethod
    def mapped(cls, folder: Path, **meta) -> "NgramIndex":
        """The index whose arrays are the .npy files of ``folder`` (as ``save`` writes them, written by the build),
        mapped copy-on-write; ``meta``: bloom_bits, hot_threshold, config_json.  ``save`` links those files."""
        folder = Path(folder)
        known = {f.name for f in fields(cls)}
        arrays = {p.stem: np.asarray(np.load(p, mmap_mode="c", allow_pickle=False))
                  for p in sorted(folder.glob("*.npy")) if p.stem in known or p.stem in cls.SAVED_EXTRAS}
        extras = {name: arrays.pop(name) for name in cls.SAVED_EXTRAS if name in arrays}
        index = cls(**arrays, **meta)
        index.__dict__.update(extras)
        index.__dict__["_files"] = {name: (folder / f"{name}.npy", a) for name, a in [*arrays.items(), *extras.items()]}
        index.__dict__["_folder_files"] = _stamped(folder / "q_keys.npy", folder / "record_ids.npy")
        return index

    @staticmethod
    def is_saved(path: Path) -> bool:
        """Whether folder ``path`` holds an index saved in this format (an earlier format's counts as none: the
        index step builds it again)."""
        try:
            return json.loads((Path(path) / "meta.json").read_text()).get("version") == FORMAT_VERSION
        except (OSError, ValueError, AttributeError):
            return False

    @classmethod
    def load(cls, path: Path) -> "NgramIndex":
        """The index saved in folder ``path``, its arrays mapped copy-on-write: every process that loads it shares
        the file's pages (a page written to becomes that process's own)."""
        path = Path(path)
        if not (path / "meta.json").exists() and (path.with_name("index.npz")).exists():
            raise ValueError(f"{path.parent}: the n-gram index is in an earlier format (index.npz); rebuild it: run "
                             f"`contam detect` or materialize `ngram_index`")
        meta = json.loads((path / "meta.json").read_text())  # FileNotFoundError where there is no index
        if meta.get("version") != FORMAT_VERSION:
            raise ValueError(f"{path}: index format {meta.get('version')} != {FORMAT_VERSION}; rebuild it")
        known = {f.name for f in fields(cls)}
        arrays = {k: np.asarray(np.load(path / f"{k}.npy", mmap_mode="c", allow_pickle=False))
                  for k in meta["arrays"] if k in known or k in cls.SAVED_EXTRAS}
        extras = {name: arrays.pop(name) for name in cls.SAVED_EXTRAS if name in arrays}
        index = cls(**arrays, bloom_bits=meta["bloom_bits"], hot_threshold=meta["hot_threshold"],
                    config_json=meta["config_json"])
        index.__dict__.update(extras)
        index.__dict__["_folder_files"] = _stamped(path / "q_keys.npy", path / "record_ids.npy")
        if isinstance(meta.get("keys_digest"), str):
            index.__dict__["_keys_digest"] = meta["keys_digest"]
        return index

    def keys_digest(self) -> str:
        """xxh3 of the question keys and record ids: tells two indexes apart without a copy.  A saved index keeps it
        in meta.json; one mapped from a folder without it hashes the two files' data with reads, not through its
        mapping: a scan worker that checks it holds the step's index does not map every page of the keys (2.4 GB
        at 294 M keys) for it."""
        saved = self.__dict__.get("_keys_digest")
        if saved is not None:  # written into meta.json by ``save`` from the same files
            return saved
        files = self.__dict__.get("_folder_files") or ()
        h = xxhash.xxh3_64()
        if len(files) == 2 and all(_same_file(f) and _same_array_file(f[0], a) for f, a in zip(files, (self.q_keys, self.record_ids))):
            for path, _ in files:
                _hash_npy_data(path, h)
        else:
            h.update(np.ascontiguousarray(self.q_keys))
            h.update(np.ascontiguousarray(self.record_ids))
        return h.hexdigest()

    def release_mapped(self, budget: int | None = None) -> bool:
        """Once this process holds more than ``budget`` bytes of mapped files' pages (None: the scan_mapped_budget
        setting; 0: never), give back the pages of the index's mapped arrays (madvise DONTNEED): they stay in the
        page cache, and a later read maps them again.  A lookup maps more than the page it reads (the kernel maps
        the page cache's large folios around it), so without this a scanning process soon maps most of the index's
        files; with it, what it holds of them is bounded by the budget and one batch's reads.  The budget counts
        every mapped file's pages the process holds (the index's, the records', the libraries'), and only the
        index's are given back.  Nothing writes into the index's arrays (mapped copy-on-write, a written page
        would be the process's own and lost here).  Returns whether it gave them back."""
        if budget is None:
            budget = mapped_budget()
        if budget <= 0 or _mapped_resident() <= budget:
            return False
        done = set()
        for a in [getattr(self, f.name) for f in fields(self)] + [self.__dict__.get(n) for n in self.SAVED_EXTRAS]:
            m = _mapping_of(a)
            if m is not None and id(m) not in done:
                done.add(id(m))
                m.madvise(mmap.MADV_DONTNEED)
        return bool(done)

    def nbytes(self) -> int:
        return sum(getattr(self, f.name).nbytes for f in fields(self) if isinstance(getattr(self, f.name), np.ndarray))


def _csr(chunks: list[np.ndarray], dtype) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.zeros(len(chunks) + 1, dtype=np.int64)
    if chunks:
        offsets[1:] = np.cumsum([len(c) for c in chunks])
    flat = np.concatenate(chunks).astype(dtype) if chunks and offsets[-1] else np.zeros(0, dtype=dtype)
    return offsets, flat


def _per_record(values: np.ndarray, seg: np.ndarray, n_rec: int) -> tuple[np.ndarray, np.ndarray]:
    """CSR (offsets, values) of values grouped by record (seg ascending)."""
    offsets = np.zeros(n_rec + 1, dtype=np.int64)
    np.cumsum(np.bincount(seg, minlength=n_rec), out=offsets[1:])
    return offsets, values.astype(np.uint64)


def _unique_tokens(tokens: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Distinct tokens of each record (sorted) and their record ids."""
    lens = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
    flat = np.concatenate(tokens).astype(np.uint64) if lens.sum() else np.zeros(0, dtype=np.uint64)
    return unique_per_segment(flat, np.repeat(np.arange(len(tokens)), lens))


def _segment_sums(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    cs = np.concatenate([[0.0], np.cumsum(np.asarray(values, dtype=np.float64))])
    return cs[offsets[1:]] - cs[offsets[:-1]]


ENCODE_CHUNK = 10_000  # texts cleaned and tokenized at once


def encode_texts(texts: list[str], cfg: DetectConfig, cleaned_out: list | None = None) -> list[np.ndarray]:
    """Clean and tokenize texts, encoding each distinct text once (MMLU repeats questions per choice)."""
    tok = get_tokenizer(cfg.tokenizer)
    opts = cfg.clean_options
    out: list[np.ndarray] = []
    for start in range(0, len(texts), ENCODE_CHUNK):  # bounded: a chunk's cleaned texts and ids at a time
        chunk = texts[start:start + ENCODE_CHUNK]
        by_raw = {t: clean_text(t, opts) if t else "" for t in dict.fromkeys(chunk)}  # each distinct text cleaned once
        cleaned = [by_raw[t] for t in chunk]
        if cleaned_out is not None:
            cleaned_out.extend(cleaned)
        distinct = list(dict.fromkeys(cleaned))
        enc = dict(zip(distinct, _compact(tok.encode_many(distinct))))
        out.extend(enc[c] for c in cleaned)
    return out


def _compact(arrays: list[np.ndarray]) -> list[np.ndarray]:
    """The same ids as views of one array of their total length: the compiled walk returns views of buffers sized
    for the text's bytes (a few times the ids), which the views would otherwise keep alive."""
    if len(arrays) < 2 or len({a.dtype for a in arrays}) != 1:
        return arrays
    return np.split(np.concatenate(arrays), np.cumsum([len(a) for a in arrays[:-1]]))


def _stamped(*paths: Path) -> tuple:
    """(path, (inode, size, modification time)) of each file as mapped now, or None for one that cannot be read:
    `_same_file` tells later whether the path still names that file (a folder saved again names new ones)."""
    out = []
    for path in paths:
        try:
            st = path.stat()
            out.append((path, (st.st_ino, st.st_size, st.st_mtime_ns)))
        except OSError:
            out.append((path, None))
    return tuple(out)


def _same_file(stamped: tuple) -> bool:
    path, stamp = stamped
    return stamp is not None and _stamped(path)[0][1] == stamp


def _same_array_file(path: Path, a: np.ndarray) -> bool:
    """Whether .npy file ``path`` holds an array of ``a``'s dtype and length, laid out as ``a`` is (C order):
    its data hashes as ``a``'s bytes would."""
    try:
        with open(path, "rb") as fh:
            shape, fortran, dtype = _npy_header(fh)
    except (OSError, ValueError):
        return False
    return not fortran and dtype == a.dtype and shape == a.shape and a.flags.c_contiguous


def _npy_header(fh) -> tuple:
    """(shape, fortran order, dtype) of the .npy file open as ``fh``, which is left at the start of its data."""
    version = np.lib.format.read_magic(fh)
    read = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}.get(version)
    if read is None:
        raise ValueError(f"npy format {version}")
    return read(fh)


def _hash_npy_data(path: Path, h, chunk: int = 1 << 24) -> None:
    """Feed the data of .npy file ``path`` (after its header) to hash ``h``, ``chunk`` bytes a read."""
    with open(path, "rb") as fh:
        _npy_header(fh)
        buf = bytearray(chunk)
        view = memoryview(buf)
        while n := fh.readinto(buf):
            h.update(view[:n])


def _mapping_of(a) -> "mmap.mmap | None":
    """The mmap an array's memory is a view of (its base chain), or None (an array in memory, or no madvise here)."""
    while isinstance(a, np.ndarray) or isinstance(a, mmap.mmap):
        if isinstance(a, mmap.mmap):
            return a if hasattr(a, "madvise") and hasattr(mmap, "MADV_DONTNEED") else None
        a = a.base
    return None


def _mapped_resident() -> int:
    """Bytes of this process's resident pages that are files' (and shared memory's) pages: /proc/self/statm's
    third field; 0 where there is no such file."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[2]) * mmap.PAGESIZE
    except (OSError, ValueError, IndexError):
        return 0


def mapped_budget() -> int:
    """The scan_mapped_budget setting in bytes (read on every call: a test or a benchmark may set it in between)."""
    from contam_assets.detector.build_budget import size_bytes
    from contam_assets.settings import env_value, var

    return size_bytes(str(env_value("scan_mapped_budget")), var("scan_mapped_budget"))
