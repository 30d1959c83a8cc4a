"""Progress lines of a long scan or mix: shards done of the total, bytes read, MB/s and the time left.

One line through ``say`` (Dagster's run log, and the terminal of `contam detect` when it is no terminal: a pipe, a
file) at most every ``every`` seconds (the progress_s setting; 0: a line per shard), none before the first interval
has passed, and one closing line when any was said, so a run of hours writes a few hundred lines, not one per shard.
When stderr is a terminal (``for_step``), a bar on it instead: one line rewritten in place (a carriage return) with
the same figures, redrawn every second and as shards finish, and left as the last figures when the step ends; the
run log still gets the plain lines.  Bytes are the pool files' sizes as listed; a shard whose rows were current
(nothing read) counts as done, not as read.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

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
                 clock: Callable[[], float] = time.monotonic, terminal: TextIO | None = None):
        self.what, self.sizes, self.say = what, dict(sizes), say
        self.every = float(settings.env_value("progress_s")) if every is None else float(every)
        self.clock = clock
        self.total_bytes = sum(self.sizes.values())
        self.t0 = self.last = clock()
        self.done = self.done_bytes = self.read_bytes = 0
        self.lines = 0
        self.bar = Bar(self, terminal) if terminal is not None and len(self.sizes) > 1 else None

    def shard_done(self, shard: str, read: bool = True) -> None:
        """One more shard finished (``read``: its file was read, not found current)."""
        n = self.sizes.get(shard, 0)
        self.done += 1
        self.done_bytes += n
        if read:
            self.read_bytes += n
        if self.bar is not None:
            self.bar.draw()
        now = self.clock()
        if now - self.last >= self.every and self.done < len(self.sizes):
            self.last = now
            self._line(now)

    def close(self) -> None:
        """The closing line, when the run said any (a short run says nothing); the bar drawn a last time."""
        if self.bar is not None:
            self.bar.end()
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


def _bar_text(p: RunProgress, width: int) -> str:
    now = p.clock()
    n = max(1, len(p.sizes))
    frac = p.done_bytes / p.total_bytes if p.total_bytes else p.done / n
    cells = 24
    filled = min(cells, int(frac * cells))
    figures = p.line(now).split(": ", 1)[1]
    figures = re.sub(r", [\dhms]+ elapsed", "", figures).replace(" shards, ", " shards | ").replace(", ", " | ")
    text = f"{p.what} [{'#' * filled}{'.' * (cells - filled)}] {figures}"
    return text[:max(10, width - 1)]


class Bar:
    """A run's figures on one terminal line, rewritten in place: drawn as shards finish (at most every 0.2 s) and
    every second by a thread, so the time left moves while a long shard is read; ``end`` draws the last figures
    and ends the line."""

    def __init__(self, progress: RunProgress, stream: TextIO, tick: float = 1.0):
        self.p, self.stream, self.tick = progress, stream, tick
        self.lock = threading.Lock()
        self.drawn = -1.0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"{progress.what}-progress-bar", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(self.tick):
            self.draw(force=True)

    def draw(self, force: bool = False) -> None:
        with self.lock:
            now = time.monotonic()
            if not force and now - self.drawn < 0.2:
                return
            self.drawn = now
            width = shutil.get_terminal_size((100, 24)).columns
            try:
                self.stream.write("\r" + _bar_text(self.p, width) + "\x1b[K")
                self.stream.flush()
            except (OSError, ValueError):  # the terminal went away: no bar, the run goes on
                self.stop.set()

    def end(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.draw(force=True)
        with self.lock:
            try:
                self.stream.write("\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass


def _terminal() -> TextIO | None:
    """A copy of stderr's descriptor when it is a terminal, taken when this module is imported (by the code location,
    before any step runs): Dagster's step log capture points descriptor 2 at a file while a step runs (its compute
    log manager, tailed back to the terminal), so a step run in this process (`contam detect`) reaches the terminal
    through this copy.  None when stderr is no terminal."""
    try:
        if os.isatty(2):
            return os.fdopen(os.dup(2), "w", buffering=1, encoding="utf-8", errors="replace")
    except OSError:
        pass
    return None


TERMINAL = _terminal()


def _is_tty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def for_step(what: str, sizes: dict[str, int], log: Callable[[str], None], stream: TextIO | None = None,
             every: float | None = None) -> RunProgress:
    """A step's progress: plain lines to ``log`` (Dagster's run log) at the steady rate; on the terminal a bar when
    ``stream`` (default: the process's stderr as it was at import, ``TERMINAL``) is one, else the same plain lines
    on stdout."""
    if stream is None:
        stream = TERMINAL if TERMINAL is not None else sys.stderr
    tty = _is_tty(stream)

    def say(line: str) -> None:
        log(line)
        if not tty:
            print(line, flush=True)

    return RunProgress(what, sizes, say, every=every, terminal=stream if tty else None)
