"""CPU seconds and peak RSS of a process and all its descendants, sampled from /proc (benchmarks/scale_run.py)."""

from __future__ import annotations

import os
import threading

TICK = os.sysconf("SC_CLK_TCK")


def _proc_table() -> dict[int, tuple[int, float, int]]:
    """pid -> (ppid, cpu seconds, VmHWM bytes) of every process we can read."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = open(f"/proc/{d}/stat").read()
            fields = stat[stat.rindex(")") + 2:].split()
            hwm = 0
            for line in open(f"/proc/{d}/status"):
                if line.startswith("VmHWM:"):
                    hwm = int(line.split()[1]) * 1024
            out[int(d)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK, hwm)
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
            table = _proc_table()
            tree, grew = {self.root}, True
            while grew:
                more = {p for p, (pp, _, _) in table.items() if pp in tree and p not in tree}
                tree |= more
                grew = bool(more)
            for p in tree & table.keys():
                self.cpu[p] = max(self.cpu.get(p, 0.0), table[p][1])
                self.hwm[p] = max(self.hwm.get(p, 0), table[p][2])
            self.stop.wait(self.every)


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]
