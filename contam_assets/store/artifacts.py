"""Files the data side keeps beside the DuckDB database.

<out>/index/<digest>/records.parquet   reference records (what a match says about the instance)
<out>/index/<digest>/records.arrow     the same records as one uncompressed Arrow IPC file, mapped by each reader
<out>/index/<digest>/index/             the n-gram index: one .npy per array and meta.json, mapped by each reader
<out>/index/current.json               digest of the index the last `ngram_index` run built
<out>/mix/<shard>                      decontaminated mix (same relative paths as the pool)
<out>/rejected/<shard>.jsonl           documents rejected as bad input, with the reason
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.ipc as pa_ipc

from contam_assets.detector.config import DetectConfig
from contam_assets.detector.index import NgramIndex
from contam_assets.store.faults import fault_point
from contam_assets.store.files import atomic_write_text, temp_path
from contam_assets.store.location import is_url
from contam_assets.store.mirror import local_rel, remove_literal
from contam_assets.store.pool import (
    STREAM_ERRORS,
    Reject,
    StreamError,
    iter_lines,
    open_binary,
    open_writer,
    shard_path,
)
from contam_assets.store.readers import is_jsonl, reader_for


def reference_digest(records: pl.DataFrame, cfg: DetectConfig) -> str:
    digest = RecordsDigest(cfg)
    digest.add(records)
    return digest.hexdigest()


DIGEST_ROWS = 100_000  # records written as CSV at once by reference_digest
DIGEST_COLUMNS = ["record_id", "suite", "split", "instance_index", "question", "answer", "passage", "indexed"]


class RecordsDigest:
    """`reference_digest` of the records given a table at a time (``add``, the tables in order): the digest of the
    CSV of them all (the header once), written ``DIGEST_ROWS`` rows at a time, without that whole text (and its
    encoded copy) in memory."""

    def __init__(self, cfg: DetectConfig):
        self.h, self.header = hashlib.sha256(json.dumps(cfg.reference_key(), sort_keys=True).encode()), True

    def add(self, records: pl.DataFrame) -> None:
        table = records.select(DIGEST_COLUMNS)
        for start in range(0, table.height, DIGEST_ROWS):
            self.h.update(table.slice(start, DIGEST_ROWS).write_csv(include_header=self.header).encode())
            self.header = False

    def hexdigest(self) -> str:
        h = self.h.copy()
        if self.header:  # no record: the CSV's header alone
            h.update(pl.DataFrame(schema=dict.fromkeys(DIGEST_COLUMNS, pl.Utf8)).write_csv().encode())
        return h.hexdigest()[:16]


def index_dir(out_dir: Path, digest: str) -> Path:
    return Path(out_dir) / "index" / digest


def save_index(out_dir: Path, digest: str, records: pl.DataFrame, index: NgramIndex, records_from: Path | None = None) -> Path:
    """Records and index under <out>/index/<digest>/, each written whole under a temporary name, then current.json.
    ``records_from``: a folder whose records files hold ``records`` (`reference_records`): linked, not written."""
    d = index_dir(out_dir, digest)
    d.mkdir(parents=True, exist_ok=True)
    if records_from is None or not _link_records(Path(records_from), d):
        write_records(d, records)
    fault_point("index_save")
    index.save(d / "index")
    (d / "index.npz").unlink(missing_ok=True)  # an index of the earlier format (one .npz), built again
    _set_current(out_dir, {"digest": digest})
    return d


_DIGEST_NAME = re.compile(r"[0-9a-f]{16}")  # an index folder's name (RecordsDigest.hexdigest)


def _set_current(out_dir: Path, current: dict) -> None:
    """current.json written (with ``previous``: the last other index that was current), then every index folder
    removed but those two (a run still scanning with the previous one keeps its files; an older one is 26-28 GB at
    6.1 M instances, and a grow or a changed task makes a new one each time)."""
    index_root = Path(out_dir) / "index"
    try:
        before = json.loads((index_root / "current.json").read_text())
    except (OSError, ValueError):
        before = None
    before = before if isinstance(before, dict) else {}
    previous = before.get("previous") if before.get("digest") == current.get("digest") else before.get("digest")
    atomic_write_text(index_root / "current.json", json.dumps({**current, "previous": previous}))
    keep = {current.get("digest"), previous}
    for child in index_root.iterdir():
        if child.name not in keep and _DIGEST_NAME.fullmatch(child.name) and child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)


RECORDS_FILE = "records.parquet"  # the records, compressed (what the tables and an older folder hold)
RECORDS_MAPPED = "records.arrow"  # the same, uncompressed Arrow IPC: mapped by every process that reads the folder


def has_index(out_dir: Path, digest: str) -> bool:
    d = index_dir(out_dir, digest)
    return NgramIndex.is_saved(d / "index") and (d / RECORDS_FILE).exists()  # an earlier format's: built again


def current_digest(out_dir: Path) -> str:
    p = Path(out_dir) / "index" / "current.json"
    if not p.exists():
        raise FileNotFoundError(f"no n-gram index under {out_dir}; materialize `ngram_index` (or run `contam detect`) first")
    return json.loads(p.read_text())["digest"]


def mark_current(out_dir: Path, digest: str, inputs: str | None) -> None:
    """current.json: the index ``digest`` is the current one, built from the reference set of ``inputs`` (the
    digest of what that set was built from, `registry.inputs_digest`; None: not known)."""
    _set_current(out_dir, {"digest": digest, "inputs": inputs})


def digest_for_inputs(out_dir: Path, inputs: str | None) -> str | None:
    """The current index's digest where it was built from the reference set of ``inputs`` and is saved whole (its
    task hashes too): a rerun with unchanged inputs takes it without reading the records; else None."""
    p = Path(out_dir) / "index" / "current.json"
    try:
        current = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    digest = current.get("digest") if isinstance(current, dict) else None
    if not inputs or current.get("inputs") != inputs or not isinstance(digest, str) or not has_index(out_dir, digest):
        return None
    return digest if (index_dir(out_dir, digest) / "task_hashes.json").is_file() else None


def load_index(out_dir: Path, digest: str | None = None) -> tuple[NgramIndex, pl.DataFrame, str]:
    digest = digest or current_digest(out_dir)
    return *read_index_dir(index_dir(out_dir, digest)), digest


def read_index_dir(d: Path) -> tuple[NgramIndex, pl.DataFrame]:
    """The index and reference records kept in one index folder (`save_index`)."""
    return NgramIndex.load(Path(d) / "index"), read_records(d)


REFERENCE_RECORDS = "reference"  # <out>/index/reference/: the records `reference_set` last wrote
REFERENCE_INPUTS = "inputs.json"  # there: the inputs digest they were built from and their count, written last


def reference_records_dir(out_dir: Path) -> Path:
    return Path(out_dir) / "index" / REFERENCE_RECORDS


def forget_reference_records(out_dir: Path) -> None:
    """Before the folder's records are written again: no reader takes them for the set they held."""
    (reference_records_dir(out_dir) / REFERENCE_INPUTS).unlink(missing_ok=True)


def mark_reference_records(out_dir: Path, inputs: str, records: int) -> None:
    """The records written in `reference_records_dir` are the reference set of ``inputs`` (once its tables hold them)."""
    atomic_write_text(reference_records_dir(out_dir) / REFERENCE_INPUTS, json.dumps({"inputs": inputs, "records": records}))


def reference_records(out_dir: Path, inputs: str | None, records: int | None) -> Path | None:
    """The folder of the records `reference_set` wrote for ``inputs`` (``records`` of them), or None where it holds
    no such set (an output of an earlier version, a build that stopped midway)."""
    d = reference_records_dir(out_dir)
    try:
        mark = json.loads((d / REFERENCE_INPUTS).read_text())
    except (OSError, ValueError):
        return None
    ok = (isinstance(mark, dict) and inputs is not None and mark.get("inputs") == inputs and mark.get("records") == records
          and (d / RECORDS_FILE).is_file() and (d / RECORDS_MAPPED).is_file())
    return d if ok else None


SUMMARY_COLUMNS = ("task", "suite", "split", "subject", "instance_index", "derived", "indexed", "skip_reason")


def record_columns(d: Path, questions: bool = False) -> pl.DataFrame:
    """The columns of the records of folder ``d`` that `reference_set`'s summary and counts read (no texts; with
    ``questions``, the question too: the short-question count of `skips.covered_short`)."""
    return pl.read_parquet(Path(d) / RECORDS_FILE, columns=[*SUMMARY_COLUMNS, *(["question"] if questions else [])])


def _link_records(src: Path, d: Path) -> bool:
    """The records files of folder ``src`` linked into ``d`` (each under a temporary name, renamed into place); False
    where the file system cannot link them."""
    for name in (RECORDS_FILE, RECORDS_MAPPED):
        tmp = temp_path(d / name)
        try:
            os.link(src / name, tmp)
            os.replace(tmp, d / name)
        except OSError:
            return False
        finally:
            tmp.unlink(missing_ok=True)
    return True


def write_records(d: Path, records: pl.DataFrame) -> None:
    """``records.parquet`` and ``records.arrow`` (uncompressed Arrow IPC, texts as string views: `map_records`) in
    folder ``d``, each written under a temporary name and renamed into place."""
    for name in ("records.tokens.json", "records.tokens.arrow"):  # the filters' kept ids (record_tokens.py): not these
        (Path(d) / name).unlink(missing_ok=True)
    for name, write in ((RECORDS_FILE, records.write_parquet),
                        (RECORDS_MAPPED, lambda p: records.write_ipc(p, compression="uncompressed",
                                                                     compat_level=pl.CompatLevel.newest()))):
        tmp = temp_path(Path(d) / name)
        try:
            write(tmp)
            os.replace(tmp, Path(d) / name)  # a process that maps the earlier file keeps its pages (another inode)
        finally:
            tmp.unlink(missing_ok=True)


class RecordsWriter:
    """``records.parquet`` and ``records.arrow`` of folder ``d`` written a table at a time (the tables of one set,
    in record order; ``schema``: polars' schema of an empty set), each under a temporary name renamed into place
    when the block ends without an error (else removed).  The files hold what ``write_records`` writes for the
    whole table: the same rows, columns and types (``records.arrow`` a record batch per table)."""

    def __init__(self, d: Path, schema: dict):
        self.d, self.schema, self.rows = Path(d), schema, 0
        for name in ("records.tokens.json", "records.tokens.arrow"):  # kept ids: written again by kept_tokens.TokenWriter
            (self.d / name).unlink(missing_ok=True)
        self.tmp = {name: temp_path(self.d / name) for name in (RECORDS_FILE, RECORDS_MAPPED)}
        self._pq = self._ipc = self._sink = None

    def write(self, df: pl.DataFrame) -> None:
        import pyarrow.parquet as pq

        viewed, plain = df.to_arrow(compat_level=pl.CompatLevel.newest()), df.to_arrow()
        if self._ipc is None:
            self._sink = pa.OSFile(str(self.tmp[RECORDS_MAPPED]), "wb")
            self._ipc = pa_ipc.new_file(self._sink, viewed.schema)
            self._pq = pq.ParquetWriter(str(self.tmp[RECORDS_FILE]), plain.schema, compression="zstd")
        self._ipc.write_table(viewed)
        self._pq.write_table(plain)
        self.rows += df.height

    def __enter__(self) -> "RecordsWriter":
        return self

    def __exit__(self, kind, exc, tb) -> None:
        try:
            if self._ipc is not None:
                self._ipc.close()
                self._sink.close()
                self._pq.close()
            if kind is None:
                if self._ipc is None:  # nothing written: the files of an empty set
                    write_records(self.d, pl.DataFrame(schema=self.schema))
                else:
                    for name, tmp in self.tmp.items():
                        os.replace(tmp, self.d / name)
        finally:
            for tmp in self.tmp.values():
                tmp.unlink(missing_ok=True)


def read_records(d: Path) -> pl.DataFrame:
    """The reference records of an index folder, over the pages of its ``records.arrow`` (`map_records`); a folder
    saved without that file (or with one this version cannot map) is read from ``records.parquet``, whole."""
    mapped = Path(d) / RECORDS_MAPPED
    if mapped.is_file():
        try:
            return map_records(mapped)
        except (OSError, pa.ArrowException):
            pass
    return pl.read_parquet(Path(d) / RECORDS_FILE)


class RecordFile:
    """The records of an uncompressed Arrow IPC file (``records.arrow``) read, not mapped, a record batch at a time:
    what `build_index` and the index step's digests take in place of the mapped table, so each batch's texts pass
    through this process's memory once and are freed, and none of the file's pages counts in its memory (a mapped
    table's pages count once touched).  ``batches(size)``: the rows as tables, in the file's order, at most ``size``
    rows each; ``source[name]``: one column, whole (read for the small columns alone: ``indexed``)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        with pa.OSFile(str(self.path)) as fh:
            self.schema = pa_ipc.open_file(fh).schema

    def batches(self, size: int | None = None, columns: list[str] | None = None):
        fields = None if columns is None else [self.schema.get_field_index(c) for c in columns]
        # read through malloc, not pyarrow's default pool (which keeps a freed batch's pages for the next one)
        with pa.OSFile(str(self.path), memory_pool=pa.system_memory_pool()) as fh:
            reader = pa_ipc.open_file(fh, options=pa_ipc.IpcReadOptions(included_fields=fields))
            for i in range(reader.num_record_batches):
                part = pl.from_arrow(reader.get_batch(i))
                step = size or max(1, part.height)
                for start in range(0, part.height, step):
                    yield part.slice(start, step)

    def __getitem__(self, name: str) -> pl.Series:
        parts = [part[name] for part in self.batches(columns=[name])]
        return pl.concat(parts) if parts else pl.from_arrow(self.schema.empty_table())[name]


def records_to_ipc(records: pl.DataFrame):
    """The records as the bytes of one Arrow IPC file (a numpy uint8 array: Ray's object store keeps it as it is and
    hands each task a view of it, which `records_from_ipc` takes without a copy)."""
    import numpy as np

    sink = pa.BufferOutputStream()
    records.write_ipc(sink, compression="uncompressed", compat_level=pl.CompatLevel.newest())
    return np.frombuffer(sink.getvalue(), dtype=np.uint8)


def records_from_ipc(data) -> pl.DataFrame:
    """The table of `records_to_ipc`'s bytes, over those bytes (nothing copied, as `map_records`)."""
    return pl.from_arrow(pa_ipc.open_file(pa.py_buffer(data)).read_all(), rechunk=False)


def map_records(path: Path) -> pl.DataFrame:
    """A table over a mapped uncompressed Arrow IPC file, nothing copied: polars takes the file's buffers as they are
    (texts as string views, as polars writes them), so a process reads only the pages of the rows and columns it
    touches, and every process that maps the file shares those pages in the page cache.  Its record batches stay
    chunks of the table (a rechunk would copy every text)."""
    table = pa_ipc.open_file(pa.memory_map(str(path), "r")).read_all()
    return pl.from_arrow(table, rechunk=False)


def rejected_path(out_dir: Path, shard: str) -> Path:
    """<out>/rejected/<shard>.jsonl (a part too long for a file name bounded: store/location.local_rel)."""
    return Path(out_dir) / "rejected" / f"{local_rel(shard)}.jsonl"


def write_rejects(out_dir: Path, shard: str, rejects: list[Reject]) -> Path | None:
    path = rejected_path(out_dir, shard)
    remove_literal(Path(out_dir) / "rejected", shard, ".jsonl")  # a copy an earlier version named literally
    if not rejects:
        if path.exists():
            path.unlink()
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    try:  # a line at a time (a reject keeps at most its first KiB): the file is never built whole in memory
        with open(tmp, "w", encoding="utf-8", errors="backslashreplace", newline="") as fh:
            for r in rejects:
                fh.write(json.dumps(r.to_json(), ensure_ascii=False) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def mix_path(out_dir: Path, pool_dir: Path, shard: str) -> Path:
    """<out>/mix/ + the shard's path in the pool (its own bytes, when its name is not UTF-8)."""
    return Path(out_dir) / "mix" / local_rel(_pool_rel(pool_dir, shard))


def _pool_rel(pool_dir: Path, shard: str) -> str:
    """The shard's path relative to its pool: a local file's own (its bytes, when its name is not UTF-8), a remote
    object's key."""
    if is_url(pool_dir):
        return shard
    return os.path.relpath(shard_path(pool_dir, shard), pool_dir)


def display_path(p: Path) -> str:
    """A path as text that any table can hold: undecodable bytes escaped as in shard keys."""
    return os.fsencode(str(p)).decode("utf-8", "backslashreplace")


class MixError(RuntimeError):
    """The mix of one shard could not be written (the shard is unreadable, or changed since its scan)."""


def write_mix_shard(pool_dir: Path, out_dir: Path, shard: str, drop: set[int], rejected: set[int],
                    expected_read: int | None = None, max_doc_bytes: int = 8 << 20, src: Path | None = None,
                    accept_broken: bool = False, cut=None) -> dict:
    """Copy a shard to <out>/mix/<shard> without the dropped and rejected lines, atomically.

    Lines are copied byte for byte (same format and compression as the input).  The copy
    is renamed into place only when the whole shard was read, its stream intact, and (with
    ``expected_read``) it has as many lines as its scan read; otherwise MixError and no file.
    ``accept_broken``: a reviewer accepted the shard although its stream breaks: its lines up to
    the break are written (status ``accepted_incomplete``).
    ``cut`` (span removal, store/cuts.SpanCutter): a dropped line is replaced by ``cut(line, raw)``
    instead, counted as ``cut``; a None from it drops the line after all.
    """
    src = src or shard_path(pool_dir, shard)
    dst = mix_path(out_dir, pool_dir, shard)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(dst)
    if not is_jsonl(shard):
        res = _write_columnar_mix(src, dst, tmp, shard, drop, rejected, expected_read, cut)
        _remove_literal_mix(out_dir, pool_dir, shard)
        return res
    written = dropped = skipped = read = n_cut = 0
    status = "ok"
    try:
        with open_binary(src) as fin, open_writer(tmp, like=dst.name) as fout:
            for line_no, (raw, size) in enumerate(_lines_until_break(fin, max_doc_bytes, accept_broken)):
                if raw is None:
                    status = "accepted_incomplete"
                    break
                read += 1
                if line_no in rejected:
                    skipped += 1
                    continue
                if line_no in drop:
                    new = cut(line_no, raw.rstrip(b"\r\n")) if cut is not None else None  # span removal hook
                    if new is None:
                        dropped += 1
                    else:
                        fout.write(new + b"\n")
                        n_cut += 1
                    continue
                if size is not None:
                    raise MixError(f"line {line_no} is over {max_doc_bytes} bytes but was not rejected by the scan")
                fout.write(raw if raw.endswith(b"\n") else raw + b"\n")
                written += 1
                if written % 4096 == 0:
                    fault_point("mix_write")
        if expected_read is not None and read != expected_read:
            raise MixError(f"the shard has {read} lines, its scan read {expected_read}: it changed since; rescan it")
        tmp.replace(dst)
    except STREAM_ERRORS as exc:
        raise MixError(f"cannot read the shard to its end: {exc}") from None
    finally:
        tmp.unlink(missing_ok=True)
    _remove_literal_mix(out_dir, pool_dir, shard)
    return {"shard": shard, "written": written, "dropped": dropped, "rejected": skipped, "path": display_path(dst),
            "status": status, "cut": n_cut}


def _remove_literal_mix(out_dir: Path, pool_dir: Path, shard: str) -> None:
    """The mix file an earlier version wrote under the shard's literal name (mix_path bounds it now), removed."""
    rel = _pool_rel(pool_dir, shard)
    # a pool file under its literal name, or a local copy under the key's bounded name: the key named the old copy
    remove_literal(Path(out_dir) / "mix", shard if rel != shard and local_rel(shard) == rel else rel)


def _write_columnar_mix(src: Path, dst: Path, tmp: Path, shard: str, drop: set[int], rejected: set[int],
                        expected_read: int | None, cut) -> dict:
    """The mix of a Parquet or Arrow unit, in its own format (store/readers): rows instead of lines."""
    reader = reader_for(shard)
    try:
        counts = reader.write_mix(src, tmp, getattr(cut, "content_key", "text"), drop, rejected, cut)
        if expected_read is not None and counts["read"] != expected_read:
            raise MixError(f"the unit has {counts['read']} rows, its scan read {expected_read}: it changed since; rescan it")
        tmp.replace(dst)
    except (OSError, EOFError, pa.ArrowException) as exc:
        raise MixError(f"cannot read the unit to its end: {type(exc).__name__}: {exc}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return {"shard": shard, "written": counts["written"], "dropped": counts["dropped"], "rejected": counts["rejected"],
            "path": display_path(dst), "status": "ok", "cut": counts["cut"]}


def _lines_until_break(fin, max_doc_bytes: int, accept_broken: bool):
    """iter_lines; with accept_broken, a broken stream ends with (None, None) instead of raising."""
    try:
        yield from iter_lines(fin, max_doc_bytes)
    except StreamError:
        if not accept_broken:
            raise
        yield None, None


def remove_outputs(out_dir: Path, shard: str, rejected: bool = True) -> list[str]:
    """Delete a shard's mix file (and its rejected file); the paths removed (relative to out_dir)."""
    gone = []
    paths = [shard_path(Path(out_dir) / "mix", shard)] + ([rejected_path(out_dir, shard)] if rejected else [])
    for p in paths:
        if p.is_file() or p.is_symlink():
            p.unlink()
            gone.append(display_path(p.relative_to(out_dir)))
    return gone


def count_lines(path: Path) -> int:
    """Lines of the decompressed file as a line-by-line read counts them: its newlines, plus a last line without one.
    A Parquet or Arrow file: its rows."""
    if not is_jsonl(Path(path).name):
        return reader_for(Path(path).name).rows(path)
    n, last = 0, b"\n"
    with open_binary(path) as fh:
        while chunk := fh.read(1 << 20):
            n, last = n + chunk.count(b"\n"), chunk[-1:]
    return n + (last != b"\n")
