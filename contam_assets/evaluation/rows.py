"""Training rows of an experiment, streamed line by line.

``<experiments_dir>/<experiment>/data/train.jsonl`` (``.jsonl.gz`` and
``.jsonl.zst`` are read too) is never loaded whole: :func:`iter_training_texts`
is a generator that decodes one line, yields its text and drops it.

The text of a row (first rule that applies):

1. the row is a JSON string: that string;
2. ``row[content_key]`` (default ``"text"``) is a string: that string;
3. ``messages`` or ``conversations`` is a list: the ``content`` (or ``value``)
   strings of its entries, joined with ``"\\n"``;
4. otherwise the string values of ``instruction, prompt, question, input,
   completion, answer, output, response`` that are present, in that order,
   joined with ``" "`` (so ``{"question", "answer"}`` rows read like the GSM8K
   item ``{question} {answer}`` and ``{"prompt", "completion"}`` rows like
   ``{prompt}{completion}`` up to whitespace).

Lines that are blank, not JSON, not valid UTF-8 or give no text are skipped
and counted by reason in :class:`RowStats`; nothing is dropped silently.
"""

from __future__ import annotations

import gzip
import io
import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

TRAIN_FILES = ("train.jsonl", "train.jsonl.gz", "train.jsonl.zst")
FIELD_ORDER = ("instruction", "prompt", "question", "input", "completion", "answer", "output", "response")
CHAT_KEYS = ("messages", "conversations")


@dataclass
class RowStats:
    rows: int = 0  # non-blank lines read
    used: int = 0  # rows that gave a text
    skipped: Counter = field(default_factory=Counter)  # reason -> count

    def as_dict(self) -> dict:
        return {"rows": self.rows, "rows_used": self.used, "rows_skipped": dict(sorted(self.skipped.items()))}


def find_train_file(experiment_dir: Path) -> Path | None:
    for name in TRAIN_FILES:
        p = experiment_dir / "data" / name
        if p.is_file():
            return p
    return None


def row_text(row: object, content_key: str = "text") -> str | None:
    """The text of one decoded training row (see the module docstring), or None."""
    if isinstance(row, str):
        return row
    if not isinstance(row, dict):
        return None
    value = row.get(content_key)
    if isinstance(value, str):
        return value
    for key in CHAT_KEYS:
        turns = row.get(key)
        if isinstance(turns, list):
            parts = []
            for turn in turns:
                if isinstance(turn, str):
                    parts.append(turn)
                elif isinstance(turn, dict):
                    c = turn.get("content", turn.get("value"))
                    if isinstance(c, str):
                        parts.append(c)
            if parts:
                return "\n".join(parts)
    parts = [row[k] for k in FIELD_ORDER if isinstance(row.get(k), str)]
    return " ".join(parts) if parts else None


def _open_binary(path: Path):
    if path.name.endswith(".gz"):
        return gzip.open(path, "rb")
    if path.name.endswith(".zst"):
        import zstandard

        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(open(path, "rb"), closefd=True))
    return open(path, "rb")


def iter_training_texts(path: Path, stats: RowStats, content_key: str = "text") -> Iterator[str]:
    """Yield the text of each usable row of ``path``, one at a time."""
    with _open_binary(path) as f:
        for raw in f:
            if not raw.strip():
                continue
            stats.rows += 1
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                stats.skipped["invalid_utf8"] += 1
                continue
            try:
                row = json.loads(line)
            except ValueError:
                stats.skipped["invalid_json"] += 1
                continue
            text = row_text(row, content_key)
            if text is None:
                stats.skipped["no_text"] += 1
                continue
            stats.used += 1
            yield text
