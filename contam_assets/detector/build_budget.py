"""What building the reference set and index will take, checked before it starts, and its progress while it runs.

``estimate`` reads the sizes of the benchmark files the specs name (a compressed file counts as
``COMPRESSED_RATIO`` times its size) and turns them into the memory the build needs, from the
figures `benchmarks/reference_scale.py` measured (docs/scale.md, "A large registry");
``check_memory`` refuses, in one line, a build that needs more than the machine has available.
``BuildProgress`` prints a line at most every ``every`` seconds once a build has run that long:
files and instances read, records filtered and indexed, the estimated time left.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from contam_assets.settings import var

# peak memory of a reference set and index build, per byte of benchmark text read (JSONL, uncompressed), plus a
# base (Python, the tokenizer, Dagster): with the records written a table at a time and the index written straight
# into its files, `contam detect` at 0.6 M synthetic instances (431 MB) peaked at 1.19 GB summed PSS in the reference
# step and 1.48 GB in the index build (1.1 bytes a byte over the base: the key table of the lookups, the per-record
# arrays and the mapped records' pages; docs/scale.md, "A large registry"); 2 leaves a margin for the key filter
# (512 MB at most), the key directory (1–2 bytes a question key) and the duplicate check's keys (about 64 bytes a record)
BYTES_PER_SOURCE_BYTE = 2.0
BASE_BYTES = 1.0e9
# each worker process of the decon filters (the build_workers setting, two or more): its Python, polars and the
# tokenizer (about 0.3 GB) and one table of 50,000 records' texts, dicts and ids (about 0.25 GB); at 0.2 M instances
# a worker peaked at 0.52-0.54 GB RSS (docs/scale.md, "A large registry")
BYTES_PER_FILTER_WORKER = 0.6e9
# benchmark text (JSONL) of one table of the filters (reference.COLUMNS_CHUNK, 50,000 records of about 720 bytes on
# the synthetic registries): workers start only where there are two tables or more, at most one a table
BYTES_PER_TABLE = 36e6
COMPRESSED_RATIO = 4  # a .gz/.zst/.bz2/.xz benchmark file's text, against its size on disk
# "off": build without the check; a size ("12GB", "800MiB"): the memory the build may take (else what is available)
MEMORY_CHECK_ENV = var("memory_check")
_UNITS = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
# the share of a build's time each phase takes: reading the files, the decon filters with the records' writing (these
# two: the reference_set step), the index (the ngram_index step).  From `reference_scale.py --instances 600000`, one
# worker (docs/scale.md, "A large registry"): reference_set 69 s, its reading 12 s of it (12.1 s of
# write_reference_set's 71.4 s, timed in one process on the same folder); the index build 16.7 CPU-s reading the
# filters' kept token ids against 37.0 tokenizing itself (41 s of step), so about 19 s of step
PHASES = {"read": 0.13, "filter": 0.66, "index": 0.21}


@dataclass
class Estimate:
    files: int
    source_bytes: int  # benchmark text, uncompressed (estimated for compressed files)
    need_bytes: int  # peak memory of the build
    workers: int = 1  # processes of the decon filters


class MemoryRefused(RuntimeError):
    """The build would need more memory than is available."""


def size_bytes(text: str, variable: str) -> int:
    """Bytes of a size setting ("4GB", "800MiB", "0"), or ValueError naming ``variable``."""
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)\s*([a-z]*)", text.strip().lower())
    if m is None or m.group(2) not in _UNITS:
        raise ValueError(f"{variable} must be a size such as 4GB, not {text[:40]!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def available_cpus() -> int:
    """Cores this process may run on (its affinity mask, else the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def worker_count(workers: int) -> int:
    """Processes of the decon filters the build_workers setting asks for: 0 = every core; 1 = the build's own."""
    return max(1, workers if workers > 0 else available_cpus())


def estimate(files: list[str | Path], workers: int = 1) -> Estimate:
    """``workers``: the processes of the decon filters (one: the build's own, nothing added)."""
    total = sum(_size(str(f)) for f in files)
    tables = int(total // BYTES_PER_TABLE) + 1
    workers = 1 if tables < 2 else min(workers, tables)
    extra = BYTES_PER_FILTER_WORKER * workers if workers > 1 else 0
    return Estimate(len(files), total, int(BASE_BYTES + BYTES_PER_SOURCE_BYTE * total + extra), workers)


def fitting(est: Estimate, available: int | None = None) -> Estimate:
    """``est`` with as many of its filter processes as fit the memory available (down to the build's own), or
    MemoryRefused (`check_memory`'s one line) where even one process does not fit."""
    base = est.need_bytes - (BYTES_PER_FILTER_WORKER * est.workers if est.workers > 1 else 0)
    for w in range(est.workers, 1, -1):
        trial = replace(est, workers=w, need_bytes=int(base + BYTES_PER_FILTER_WORKER * w))
        try:
            check_memory(trial, available)
            return trial
        except MemoryRefused:
            continue
    one = replace(est, workers=1, need_bytes=int(base))
    check_memory(one, available)
    return one


def available_memory(meminfo: str | Path = "/proc/meminfo", cgroup: str | Path = "/sys/fs/cgroup") -> int | None:
    """Bytes this process may still take: MemAvailable, under the cgroup v2 limit where there is one; None when
    unknown (not Linux). The cgroup's use leaves out its inactive page cache, which the kernel gives back on demand."""
    avail = None
    try:
        for line in open(meminfo):
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    except OSError:
        return None
    try:
        limit = (Path(cgroup) / "memory.max").read_text().strip()
        if limit != "max":
            used = int((Path(cgroup) / "memory.current").read_text())
            try:
                for line in (Path(cgroup) / "memory.stat").read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "inactive_file":
                        used = max(0, used - int(value))
            except (OSError, ValueError):
                pass
            left = max(0, int(limit) - used)
            avail = min(avail, left) if avail is not None else left
    except (OSError, ValueError):
        pass
    return avail


def check_memory(est: Estimate, available: int | None = None) -> None:
    """MemoryRefused (one line: what it needs, what there is, how to go on) when the build cannot fit."""
    setting = os.environ.get(MEMORY_CHECK_ENV, "").strip().lower()
    if setting == "off":
        return
    if setting not in ("", "auto"):
        try:
            available = size_bytes(setting, MEMORY_CHECK_ENV)
        except ValueError:
            raise MemoryRefused(f"{MEMORY_CHECK_ENV} must be off, auto or a size such as 12GB, not {setting[:40]!r}") from None
    have = available_memory() if available is None else available
    if have is None or est.need_bytes <= have:
        return
    raise MemoryRefused(
        f"building the reference set and index from {est.source_bytes / 1e6:,.0f} MB of benchmark text in "
        f"{est.files:,} file(s) needs about {est.need_bytes / 2**30:.1f} GiB of memory, and {have / 2**30:.1f} GiB "
        f"is available: run it on a machine with more memory, stop other work on this one, or index fewer tasks "
        f"(--tasks, or a smaller --evals-dir)"
        + (f", or filter in fewer processes ({var('build_workers')}=1 needs "
           f"{(est.need_bytes - BYTES_PER_FILTER_WORKER * est.workers) / 2**30:.1f} GiB)" if est.workers > 1 else "")
        + f"; {MEMORY_CHECK_ENV}=off builds anyway")


class BuildProgress:
    """Progress lines of a long build through ``say``: at most one every ``every`` seconds, none before."""

    def __init__(self, say: Callable[[str], None], source_bytes: int, every: float = 15.0,
                 clock: Callable[[], float] = time.monotonic, phases: tuple[str, ...] = tuple(PHASES)):
        """``phases``: those of PHASES this build runs (the index step alone: ("index",))."""
        self.say, self.total, self.every, self.clock = say, max(1, source_bytes), every, clock
        self.weights = {k: PHASES[k] / sum(PHASES[p] for p in phases) for k in phases}
        self.t0 = self.last = clock()
        self.files: set[str] = set()
        self.instances = self.bytes_done = 0
        self._file = ""
        self.phase, self.done = "read", 0.0  # the phase, and the share of it done

    def row(self, source_file: str) -> None:
        """One more row read, from ``source_file``."""
        self.instances += 1
        if source_file != self._file:
            if self._file:
                self.bytes_done += _size(self._file)
            self._file = source_file
            self.files.add(source_file)
        if self.instances % 4096 == 0:
            self._at("read", self.bytes_done / self.total)

    def filtered(self, records: int, of: int) -> None:
        self._at("filter", records / max(1, of))

    def indexed(self, step: str, share: float) -> None:
        self._at("index", share, step)

    def _at(self, phase: str, share: float, step: str = "") -> None:
        self.phase, self.done = phase, min(1.0, share)
        now = self.clock()
        if now - self.last < self.every:
            return
        self.last = now
        names = list(self.weights)
        before = sum(self.weights[k] for k in names[: names.index(phase)])
        overall = before + self.weights[phase] * self.done
        elapsed = now - self.t0
        left = f", about {_duration(elapsed * (1 - overall) / overall)} left" if overall > 0.02 else ""
        what = {"read": f"{len(self.files):,} file(s), {self.instances:,} instances read",
                "filter": f"{self.instances:,} instances read; decon filters {self.done:.0%} done",
                "index": (f"{self.instances:,} instances read and filtered; " if self.instances else "")
                         + f"index {self.done:.0%}"
                         + (f" ({step})" if step else "")}[phase]
        self.say(f"  reference set: {what}, {_duration(elapsed)} so far{left}")


def _size(path: str) -> int:
    try:
        n = os.stat(path).st_size
    except OSError:
        return 0
    return n * (COMPRESSED_RATIO if path.endswith((".gz", ".zst", ".zstd", ".bz2", ".xz")) else 1)


def _duration(s: float) -> str:
    s = int(round(s))
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"
