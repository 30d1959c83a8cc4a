"""Length-sorted batches under a padded-token budget, padding, and progress logging."""

from __future__ import annotations

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
    """Logs ``done/total`` at most every ``every_s`` seconds, and once at the end."""

    def __init__(self, what: str, total: int, log: LogFn | None, every_s: float = 15.0):
        self.what, self.total, self.log, self.every_s = what, total, log, every_s
        self.done = 0
        self.start = self.last = time.monotonic()

    def advance(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if self.log and (self.done >= self.total or now - self.last >= self.every_s):
            rate = self.done / max(now - self.start, 1e-9)
            pct = 100.0 * self.done / max(self.total, 1)
            self.log(f"{self.what}: {self.done}/{self.total} ({pct:.0f}%), {rate:.1f}/s")
            self.last = now
