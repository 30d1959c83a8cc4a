"""The reference records' token ids, made once: the decon filters clean and tokenize every text to count its tokens
(`sources/reference._filter_chunk`), and the index build needs the same ids (`index_build.build_index`).

``ChunkTexts``: a chunk of records' texts, each distinct one cleaned and tokenized once, as the index build does it
(`index_kernel.encode_flat`: `text.translate_bytes`, then the tokenizer's word walk), with its cleaned form (equal to
`text.clean_text`) for the filters' word rules.  ``sources/kept_tokens.TokenWriter`` keeps those ids beside the records file
(``records.tokens.arrow``: one row a record, a list of ids per text the index reads, a record batch per table) and
stamps them (``records.tokens.json``) with the records file's size, time and inode and the settings that give the
ids; ``encoded_batches`` hands the build its batches with those ids where the stamp and the settings match, and
cleans and tokenizes the texts itself where they do not (a table, a file written another way, other settings).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as pa_ipc

from contam_assets.detector.text import MAX_WORD_CHARS, _split_long, join_words, translate_bytes

TOKENS_FILE = "records.tokens.arrow"
TOKENS_STAMP = "records.tokens.json"
FIELDS = ("question", "answer", "passage")


def _fields(cfg) -> tuple[tuple[str, bool], ...]:
    """The texts the index reads of a record: its question, and its answer and passage where the settings index them."""
    return (("question", True), ("answer", cfg.index_answers), ("passage", cfg.index_passages))


def settings_key(cfg) -> str:
    """What the ids depend on: the tokenizer, the cleaning, and which texts are indexed."""
    return json.dumps([cfg.tokenizer, asdict(cfg.clean_options), bool(cfg.index_answers), bool(cfg.index_passages)],
                      sort_keys=True)


def cleaned_form(translated: bytes) -> str:
    """``join_words(split_translated(translated))`` (`text.py`), the words' lengths looked at only where one can
    be longer than MAX_WORD_CHARS bytes (the word rule cuts it): n words take their n - 1 separators and at least
    a byte each of the n - 1 others, so the longest is at most ``len(translated) - 2 * (n - 1)`` bytes."""
    words = translated.split()
    if len(translated) - 2 * (len(words) - 1) > MAX_WORD_CHARS and max(map(len, words), default=0) > MAX_WORD_CHARS:
        words = _split_long(words)  # what split_translated does then, without splitting again
    return join_words(words)


class ChunkTexts:
    """The texts the index reads of ``records`` (dicts with question, answer, passage; None as ""), each distinct text
    cleaned and tokenized once: ``cleaned[text]`` (`text.clean_text`'s result) and ``ids[text]`` (the ids
    `index_kernel.encode_flat` gives it)."""

    def __init__(self, records: list[dict], cfg):
        from contam_assets.detector.tokenize import get_tokenizer

        self.records, self.fields = records, _fields(cfg)
        opts = cfg.clean_options
        raw = list(dict.fromkeys([""] + [r[f] or "" for f, on in self.fields if on for r in records]))
        translated = [translate_bytes(t, opts) if t else b"" for t in raw]
        self.cleaned = {t: cleaned_form(b) for t, b in zip(raw, translated)}
        self.ids = dict(zip(raw, get_tokenizer(cfg.tokenizer).encode_translated(translated)))

    def flat(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per field (question, answer, passage): every record's ids back to back (uint64) and their counts (int64);
        a field the index does not read holds none."""
        out = []
        for f, on in self.fields:
            if not on:
                out.append((np.zeros(0, dtype=np.uint64), np.zeros(len(self.records), dtype=np.int64)))
                continue
            ids = [self.ids[r[f] or ""] for r in self.records]
            lens = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
            out.append(((np.concatenate(ids).astype(np.uint64) if lens.sum() else np.zeros(0, dtype=np.uint64)), lens))
        return out


def id_type(cfg):
    # cl100k and the bytes tokenizer's ids fit 32 bits; the word tokenizer's are 64-bit hashes
    return pa.uint64() if cfg.tokenizer == "word" else pa.uint32()


def file_stamp(path: Path) -> list[int]:
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def forget(folder: Path) -> None:
    """The ids kept in ``folder`` removed (its records are about to be written another way)."""
    (Path(folder) / TOKENS_STAMP).unlink(missing_ok=True)
    (Path(folder) / TOKENS_FILE).unlink(missing_ok=True)


def saved(records, cfg) -> Path | None:
    """The ids file kept for ``records`` (an `artifacts.RecordFile`) under ``cfg``'s settings, or None."""
    path = getattr(records, "path", None)
    if path is None:
        return None
    folder = Path(path).parent
    try:
        stamp = json.loads((folder / TOKENS_STAMP).read_text())
        ok = (stamp["records"] == file_stamp(Path(path)) and stamp["settings"] == settings_key(cfg)
              and (folder / TOKENS_FILE).is_file() and _rows(folder / TOKENS_FILE) == stamp["rows"] == _rows(path))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return folder / TOKENS_FILE if ok else None


def _rows(path) -> int:
    """Rows of an Arrow IPC file (mapped: its batches' headers read, not their data)."""
    with pa.memory_map(str(path)) as fh:
        return pa_ipc.open_file(fh).count_rows()


class _Rows:
    """The ids file's rows in order, ``take(n)``: the next ``n`` as one table (read, not mapped, a record batch at a
    time: one table's ids held, whatever the batches of the records file)."""

    def __init__(self, path: Path):
        self.path, self.fh = path, pa.OSFile(str(path), memory_pool=pa.system_memory_pool())
        self.reader, self.next, self.held = pa_ipc.open_file(self.fh), 0, []

    def take(self, n: int) -> pa.Table:
        while sum(b.num_rows for b in self.held) < n and self.next < self.reader.num_record_batches:
            self.held.append(self.reader.get_batch(self.next))
            self.next += 1
        table = pa.Table.from_batches(self.held, schema=self.reader.schema)
        if table.num_rows < n:
            raise ValueError(f"{self.path}: fewer rows than the records")
        self.held = table.slice(n).to_batches()
        return table.slice(0, n)

    def close(self) -> None:
        self.fh.close()


def _flat(column) -> tuple[np.ndarray, np.ndarray]:
    col = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    lens = pc.list_value_length(col).to_numpy(zero_copy_only=False).astype(np.int64)
    offsets = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    return col.flatten().to_numpy(zero_copy_only=False).astype(np.uint64), offsets


def encoded_batches(records, size: int, cfg, batches):
    """``(part, (q_tok, q_off), (a_tok, a_off), (p_tok, p_off))`` for each ``part`` of ``batches(records, size)``
    (the indexed records, a batch at a time): the ids `index_kernel.encode_flat` gives its questions, answers and
    passages (those the settings index; else none), read from the ids kept beside ``records`` where there are
    (``saved``), else made here."""
    from contam_assets.detector.index_kernel import encode_flat

    path = saved(records, cfg)
    if path is None:
        for part in batches(records, size):
            m = part.height
            yield part, *(encode_flat(part[f].to_list() if on else [""] * m, cfg) for f, on in _fields(cfg))
        return
    rows = _Rows(path)
    try:
        for part in records.batches(size):
            ids = rows.take(part.height)
            keep = part["indexed"]
            if keep.any():
                ids = ids.filter(pa.array(keep.to_numpy()))
                yield part.filter(keep), *(_flat(ids.column(f)) for f in FIELDS)
    finally:
        rows.close()

