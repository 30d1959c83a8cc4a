"""CPU seconds, peak RSS and peak summed PSS of a process and all its descendants, sampled from /proc
(benchmarks/scale_run.py, reference_scale.py, decoded_memory.py)."""

from __future__ import annotations

import os
import threading

TICK = os.sysconf("SC_CLK_TCK")


def _kib_lines(path: str, keys: tuple[str, ...]) -> dict[str, int]:
    """The ``keys`` lines of a /proc file of ``Key:  N kB`` lines, in bytes."""
    return {k.rstrip(":"): int(v.split()[0]) * 1024 for k, v in
            (line.split(":", 1) for line in open(path) if line.startswith(keys))}


def proc_table(memory: bool = False) -> dict[int, tuple[int, float, int, int, int]]:
    """pid -> (ppid, cpu seconds, VmHWM, PSS, RSS) in bytes of every process we can read; PSS and RSS (from
    smaps_rollup, dearer to read) only where ``memory``, else 0."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = open(f"/proc/{d}/stat").read()
            fields = stat[stat.rindex(")") + 2:].split()
            hwm = _kib_lines(f"/proc/{d}/status", ("VmHWM:",)).get("VmHWM", 0)
            mem = _kib_lines(f"/proc/{d}/smaps_rollup", ("Pss:", "Rss:")) if memory else {}
            out[int(d)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK, hwm,
                           mem.get("Pss", 0), mem.get("Rss", 0))
        except (OSError, ValueError, IndexError):
            continue
    return out


class TreeSampler(threading.Thread):
    """Peak RSS and CPU seconds of a process and every descendant, sampled until stopped."""

    def __init__(self, root: int, every: float = 0.2):
        super().__init__(daemon=True)
        self.root, self.every, self.stop = root, every, threading.Event()
        self.cpu: dict[int, float] = {}
        self.hwm: dict[int, int] = {}

    def run(self):
        while not self.stop.is_set():
            table = proc_table()
            tree = descendants(self.root, {p: row[0] for p, row in table.items()})
            for p in tree & table.keys():
                self.cpu[p] = max(self.cpu.get(p, 0.0), table[p][1])
                self.hwm[p] = max(self.hwm.get(p, 0), table[p][2])
            self.stop.wait(self.every)


def descendants(root: int, parents: dict[int, int]) -> set[int]:
    tree, grew = {root}, True
    while grew:
        more = {p for p, pp in parents.items() if pp in tree and p not in tree}
        tree |= more
        grew = bool(more)
    return tree


class TreeMemory(threading.Thread):
    """Peaks of a process tree, sampled until stopped: ``pss``, the summed PSS of the process and its descendants
    (shared pages counted once, split between their sharers), and ``rss``, the largest RSS of any one of them."""

    def __init__(self, root: int, every: float = 0.1):
        super().__init__(daemon=True)
        self.root, self.every, self.stop = root, every, threading.Event()
        self.pss = self.rss = 0

    def run(self):
        while not self.stop.is_set():
            table = proc_table(memory=True)
            parents = {p: row[0] for p, row in table.items()}
            tree = descendants(self.root, parents)
            mine = [table[p] for p in tree if p in table]
            total = sum(r[3] for r in mine)
            self.pss = max(self.pss, total)
            self.rss = max([self.rss] + [r[4] for r in mine])
            self.observe(total, tree, parents, table)
            self.stop.wait(self.every)

    def observe(self, pss: int, tree: set[int], parents: dict[int, int], table: dict) -> None:
        """Called with each sample (the tree's summed PSS, its pids, every process's parent, ``proc_table``)."""


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]
