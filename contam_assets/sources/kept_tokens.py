"""The decon filters' token ids written beside the records (`detector/record_tokens.py` says what they are and how the
index build reads them)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as pa_ipc

from contam_assets.detector.record_tokens import (
    FIELDS,
    TOKENS_FILE,
    TOKENS_STAMP,
    file_stamp,
    forget,
    id_type,
    settings_key,
)
from contam_assets.store.files import atomic_write_text, temp_path


class TokenWriter:
    """The ids of the records written to ``records.arrow`` in ``folder``, a table at a time (``add``: the flat arrays
    of each of the table's ``ChunkTexts``, in record order), in ``records.tokens.arrow``; the stamp is written when
    the block ends without an error, after the records file is in place (enter it before the records' writer, so
    it closes after it).  Entering removes the folder's earlier ids and stamp."""

    def __init__(self, folder: Path, cfg):
        self.folder, self.cfg, self.rows, self.ok = Path(folder), cfg, 0, True
        self.tmp = temp_path(self.folder / TOKENS_FILE)
        self._sink = self._writer = None
        self.schema = pa.schema([(f, pa.large_list(id_type(cfg))) for f in FIELDS])

    def __enter__(self) -> "TokenWriter":
        forget(self.folder)
        return self

    def add(self, chunks: list[list[tuple[np.ndarray, np.ndarray]]]) -> None:
        """One table's ids: ``ChunkTexts.flat()`` of each of its chunks, in order."""
        if not self.ok:
            return
        cols = []
        for k, f in enumerate(FIELDS):
            vals = np.concatenate([c[k][0] for c in chunks]) if chunks else np.zeros(0, dtype=np.uint64)
            lens = np.concatenate([c[k][1] for c in chunks]) if chunks else np.zeros(0, dtype=np.int64)
            if self.schema.field(f).type.value_type == pa.uint32() and len(vals) and int(vals.max()) >= 1 << 32:
                self.ok = False  # (no tokenizer but the word one makes such ids) the build tokenizes itself
                return
            offsets = np.zeros(len(lens) + 1, dtype=np.int64)
            np.cumsum(lens, out=offsets[1:])
            cols.append(pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(vals, type=self.schema.field(f).type.value_type)))
        batch = pa.RecordBatch.from_arrays(cols, schema=self.schema)
        if self._writer is None:
            self._sink = pa.OSFile(str(self.tmp), "wb")
            self._writer = pa_ipc.new_file(self._sink, self.schema)
        self._writer.write_batch(batch)
        self.rows += batch.num_rows

    def __exit__(self, kind, exc, tb) -> None:
        try:
            if self._writer is not None:
                self._writer.close()
                self._sink.close()
            records = self.folder / "records.arrow"
            if kind is None and self.ok and self._writer is not None and records.is_file():
                os.replace(self.tmp, self.folder / TOKENS_FILE)
                atomic_write_text(self.folder / TOKENS_STAMP, json.dumps(
                    {"records": file_stamp(records), "rows": self.rows, "settings": settings_key(self.cfg)}))
        finally:
            self.tmp.unlink(missing_ok=True)
