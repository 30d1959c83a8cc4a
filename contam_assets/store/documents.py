"""What a reader hands out for each row of a pool unit: a :class:`Document`, a :class:`Reject` (counted, kept for
review) or, last, a :class:`StreamFailure` when the unit could not be read to its end.  Every reader
(store/readers/) yields these, so the scan is indifferent to the format."""

from __future__ import annotations

import base64
from dataclasses import dataclass

# The most decoded text a stage holds at a time: a reader converts a unit's rows to Python, a scan tokenizes a batch of
# documents and a columnar mix decodes and writes its rows in pieces of about this many bytes (one document at least,
# which is never over max_doc_bytes).  What decides memory is the decoded size, not the file's: a Parquet file of a few
# KB can decode to gigabytes.
BATCH_BYTES = 32 << 20


def safe_text(s: str | None) -> str | None:
    """A string that encodes as UTF-8: lone surrogates (JSON "\\udfff") become their escape ``\\udfff``."""
    if s is None:
        return None
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "backslashreplace").decode("utf-8")


@dataclass
class Document:
    line: int
    doc_id: str
    source: str | None
    text: str
    n_bytes: int
    raw: bytes
    offset: int = -1  # where its line starts in the (decompressed) shard, as read_shard read it (-1: not known)


@dataclass
class Reject:
    line: int
    reason: str
    raw: bytes  # the line (a too-large line: its first REJECT_PREFIX bytes)

    def to_json(self) -> dict:
        try:
            raw_text, encoding = self.raw.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            raw_text, encoding = base64.b64encode(self.raw).decode("ascii"), "base64"
        return {"line": self.line, "reason": self.reason, "encoding": encoding, "raw": raw_text}


@dataclass
class StreamFailure:
    """The stream of a shard broke after `line` lines (truncated or corrupt compression, or a read error)."""

    line: int  # lines read before the failure (the next line's number)
    kind: str  # truncated | corrupt | read_error
    detail: str
    offset: int | None  # compressed byte offset the decoder had reached (None: unknown)

    @property
    def reason(self) -> str:
        where = f" at compressed byte {self.offset:,}" if self.offset is not None else ""
        return f"{self.kind}{where} after line {self.line}: {self.detail}"


def content_of(obj: dict, key: str):
    """The value at ``key``; a dotted key walks nested objects (decon's get_nested_json_val). None if absent."""
    if "." not in key:
        return obj.get(key)
    cur = obj
    for part in key.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


PLAIN = (str, int, type(None))  # id/source values taken as they are
