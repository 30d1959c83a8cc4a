"""Length-sorted batches under a padded-token budget, padding, and progress logging (items/s, ETA)."""

from __future__ import annotations

import threading
import time
from typing import Callable, Sequence

LogFn = Callable[[str], None]


def pack_batches(lengths: Sequence[int], token_budget: int) -> list[list[int]]:
    """Indices grouped so that ``batch size * longest length <= token_budget``.

    Items are sorted by length (longest first) so padding stays small; an item
    longer than the budget forms a batch of its own.
    """
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order:
        longest_if_added = max(longest, lengths[i])
        if current and longest_if_added * (len(current) + 1) > token_budget:
            batches.append(current)
            current, longest_if_added = [], lengths[i]
        current.append(i)
        longest = longest_if_added
    if current:
        batches.append(current)
    return batches


def pad(rows: Sequence[Sequence[int]], pad_id: int, side: str = "right"):
    """(input_ids, attention_mask, position_ids) tensors; positions count real tokens only."""
    import torch

    if side not in ("left", "right"):
        raise ValueError(f"padding side must be 'left' or 'right', got {side!r}")
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, row in enumerate(rows):
        sl = slice(width - len(row), width) if side == "left" else slice(0, len(row))
        ids[b, sl] = torch.tensor(list(row), dtype=torch.long)
        mask[b, sl] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids, mask, positions


class Progress:
    """Logs ``done/total``, items per second and the time left, at most every ``every_s`` seconds and at the end.

    Thread-safe (sandboxed code runs several items at a time).  ``clock`` is for tests.
    """

    def __init__(self, what: str, total: int, log: LogFn | None, every_s: float = 15.0, clock=time.monotonic):
        self.what, self.total, self.log, self.every_s, self.clock = what, total, log, every_s, clock
        self.done = 0
        self.start = self.last = clock()
        self._lock = threading.Lock()

    def advance(self, n: int) -> None:
        with self._lock:
            self.done += n
            now = self.clock()
            if not self.log or (self.done < self.total and now - self.last < self.every_s):
                return
            self.last = now
            line = self.line(now)
        self.log(line)

    def line(self, now: float) -> str:
        elapsed = max(now - self.start, 1e-9)
        rate = self.done / elapsed
        pct = 100.0 * self.done / max(self.total, 1)
        left = (self.total - self.done) / rate if rate > 0 else float("inf")
        tail = f"done in {format_seconds(elapsed)}" if self.done >= self.total else f"ETA {format_seconds(left)}"
        return f"{self.what}: {self.done}/{self.total} ({pct:.0f}%), {rate:.2f} items/s, {tail}"


def format_seconds(s: float) -> str:
    """``42s``, ``3m05s``, ``2h07m``; ``?`` when unknown."""
    if s != s or s == float("inf"):
        return "?"
    s = int(round(s))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"
