"""Progress lines of a long scan or mix: shards done of the total, bytes read, MB/s and the time left.

One line through ``say`` (the terminal of `contam detect` and Dagster's run log: defs/data/assets._say) at most
every ``every`` seconds (the progress_s setting; 0: a line per shard), none before the first interval has passed,
and one closing line when any was said, so a run of hours writes a few hundred lines, not one per shard.  Bytes are
the pool files' sizes as listed; a shard whose rows were current (nothing read) counts as done, not as read.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from contam_assets import settings


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB" if n < 1e9 else f"{n / 1e9:,.2f} GB"


def _duration(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def file_size(path: str, size: int = -1) -> int:
    """A shard's size: as listed (``size`` >= 0), else its local file's, else 0 (a URL not listed)."""
    if size is not None and size >= 0:
        return int(size)
    try:
        return os.path.getsize(path) if "://" not in str(path) else 0
    except OSError:
        return 0


class RunProgress:
    """Counts shards and bytes as they finish and says a line at a steady rate."""

    def __init__(self, what: str, sizes: dict[str, int], say: Callable[[str], None], every: float | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.what, self.sizes, self.say = what, dict(sizes), say
        self.every = float(settings.env_value("progress_s")) if every is None else float(every)
        self.clock = clock
        self.total_bytes = sum(self.sizes.values())
        self.t0 = self.last = clock()
        self.done = self.done_bytes = self.read_bytes = 0
        self.lines = 0

    def shard_done(self, shard: str, read: bool = True) -> None:
        """One more shard finished (``read``: its file was read, not found current)."""
        n = self.sizes.get(shard, 0)
        self.done += 1
        self.done_bytes += n
        if read:
            self.read_bytes += n
        now = self.clock()
        if now - self.last >= self.every and self.done < len(self.sizes):
            self.last = now
            self._line(now)

    def close(self) -> None:
        """The closing line, when the run said any (a short run says nothing)."""
        if self.lines:
            self._line(self.clock())

    def line(self, now: float | None = None) -> str:
        now = self.clock() if now is None else now
        elapsed = max(1e-9, now - self.t0)
        rate = self.read_bytes / elapsed
        left_bytes = self.total_bytes - self.done_bytes
        if left_bytes <= 0 or self.done >= len(self.sizes):
            left = "done"
        elif rate > 0:
            left = f"about {_duration(left_bytes / rate)} left"
        elif self.done:
            left = f"about {_duration(elapsed / self.done * (len(self.sizes) - self.done))} left"
        else:
            left = "time left unknown"
        return (f"{self.what}: {self.done:,}/{len(self.sizes):,} shards, {_mb(self.read_bytes)} read of "
                f"{_mb(self.total_bytes)}, {rate / 1e6:,.1f} MB/s, {_duration(elapsed)} elapsed, {left}")

    def _line(self, now: float) -> None:
        self.lines += 1
        self.say(self.line(now))
