"""Benchmark files as the Hugging Face Hub and `datasets` ship them: Parquet, Arrow, JSON and folders of them.

- ``.parquet`` (the Hub's own layout, ``main/test-00000-of-00001.parquet``) and ``.arrow`` (what
  ``Dataset.save_to_disk`` and the ``datasets`` cache write: Arrow IPC streams, or IPC files) are read with
  pyarrow, a record batch at a time; nested columns come back as dicts and lists (``answer.value``).
- ``.json`` is a JSON array of objects, or JSON lines (the Hub stores both under that suffix).
- a folder given as a split: a ``save_to_disk`` folder (its ``state.json`` lists its Arrow files in order), a
  Hub-cache dataset folder (``datasets--org--name``: the snapshot its ``refs/main`` names, else the only one),
  or any folder of data files (read recursively, sorted).

pyarrow is imported inside the readers only: the detector's own modules import numpy, polars, tiktoken,
xxhash and datasketch (docs/detector.md, "The code"); reading these formats is the one place that needs pyarrow.
"""

from __future__ import annotations

import io
import itertools
import json
import os
from pathlib import Path
from typing import Iterator

HF_SUFFIXES = (".parquet", ".arrow")
DATA_FILE_SUFFIXES = (".parquet", ".arrow", ".jsonl", ".json", ".csv", ".jsonl.gz", ".jsonl.zst", ".json.gz",
                      ".csv.gz")
_NOT_DATA = {"state.json", "dataset_info.json", "dataset_dict.json", "dataset_infos.json"}
BATCH_ROWS = 4096


def is_hf_file(path: str) -> bool:
    return path.endswith(HF_SUFFIXES)


def iter_hf_rows(path: str) -> Iterator[tuple[int, dict | None, str | None]]:
    """(row index, row, None) for every row of a Parquet or Arrow file; an unreadable file raises OSError
    (pyarrow's ArrowInvalid is one) with the reader's message."""
    import pyarrow as pa

    i = 0
    batches = _batches(path, pa)
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except pa.ArrowException as exc:  # a truncated or corrupt file, found while reading
            raise OSError(f"{type(exc).__name__}: {exc}") from None
        for row in batch.to_pylist():
            yield i, row, None
            i += 1


def _batches(path: str, pa):
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        try:
            pf = pq.ParquetFile(path)
        except pa.ArrowException as exc:
            raise OSError(f"not a Parquet file ({exc})") from None
        yield from pf.iter_batches(batch_size=BATCH_ROWS)
        return
    with pa.memory_map(path) as source:  # datasets writes IPC streams; others write IPC files
        try:
            reader = pa.ipc.open_stream(source)
        except pa.ArrowInvalid:
            source.seek(0)
            try:
                reader = pa.ipc.open_file(source)
            except pa.ArrowInvalid as exc:
                raise OSError(f"not an Arrow IPC stream or file ({exc})") from None
            for k in range(reader.num_record_batches):
                yield reader.get_batch(k)
            return
        yield from reader


def json_array_rows(fh) -> tuple[list | None, Iterator[str]]:
    """A ``.json`` file's rows when it holds one JSON array, else (None, its lines, from the first)."""
    consumed = ""
    ch = fh.read(1)
    while ch and ch.isspace():
        consumed += ch
        ch = fh.read(1)
    if ch != "[":
        return None, itertools.chain(io.StringIO(consumed + ch + fh.readline()), fh)
    try:
        rows = json.loads(ch + fh.read())
    except json.JSONDecodeError as exc:
        raise OSError(f"malformed JSON array: {exc.msg} at line {exc.lineno + consumed.count(chr(10))}") from None
    return rows, iter(())


def hub_roots(benchmarks_dir: Path, repo: str) -> list[Path]:
    """Where a Hub dataset repository ``org/name`` may sit in a benchmark folder, in the order looked at: a Hub
    cache (``datasets--org--name``, the snapshot ``refs/main`` names, else the only one), a
    ``snapshot_download(local_dir=...)`` copy as ``org/name``, ``org--name`` or ``name``."""
    org, _, name = repo.partition("/")
    out = []
    cache = benchmarks_dir / f"datasets--{org}--{name}"
    if (cache / "snapshots").is_dir():
        ref = cache / "refs" / "main"
        rev = ref.read_text().strip() if ref.is_file() else ""
        snaps = sorted(p for p in (cache / "snapshots").iterdir() if p.is_dir())
        if rev and (cache / "snapshots" / rev).is_dir():
            out.append(cache / "snapshots" / rev)
        elif len(snaps) == 1:
            out.append(snaps[0])
    out += [benchmarks_dir / org / name, benchmarks_dir / f"{org}--{name}", benchmarks_dir / name]
    return [p for p in out if p.is_dir()]


def expand_folder(folder: Path) -> list[str]:
    """The data files a folder stands for, in reading order (see the module's docstring)."""
    snapshots = folder / "snapshots"
    if snapshots.is_dir():  # a Hub-cache repository folder: datasets--org--name
        ref = folder / "refs" / "main"
        rev = ref.read_text().strip() if ref.is_file() else ""
        snaps = sorted(p for p in snapshots.iterdir() if p.is_dir())
        pick = snapshots / rev if rev and (snapshots / rev).is_dir() else (snaps[0] if len(snaps) == 1 else None)
        if pick is None:
            return []
        folder = pick
    state = folder / "state.json"
    if state.is_file():  # Dataset.save_to_disk
        try:
            names = [d["filename"] for d in json.loads(state.read_text()).get("_data_files", [])]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            names = []
        if names:
            return [str(folder / n) for n in names]
    out = []
    for root, dirs, files in os.walk(folder, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        out += [os.path.join(root, n) for n in files
                if n.endswith(DATA_FILE_SUFFIXES) and n not in _NOT_DATA and not n.startswith(".")]
    return sorted(out)
