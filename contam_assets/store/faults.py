"""Fault injection for the kill -9 tests: the fault setting, ``<point>[:<n>]``, kills the process at a named point.

The process sends itself SIGKILL the n-th time (default the first) it passes `point`,
exactly as an OOM killer or an operator would stop it: no cleanup runs.  Points:
``reference_build`` (records built, before they are written), ``index_save`` (records
written, index not), ``scan`` (after a batch of a shard is scanned), ``table_write``
(inside the transaction that merges a shard), ``mix_write`` (mid-copy of a mix file),
``report_write`` (before the report is renamed into place).  Unset: nothing happens.

With the fault_hold setting, ``<file>``, the process does not kill itself at the point: it writes
its pid to ``<file>`` and waits there (at most HOLD_SECONDS, then goes on), so a test can
kill it, or the machine it runs on, from outside while it is surely mid-work (a Ray
worker node mid-shard: docs/automation.md, Multi-node Ray).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from contam_assets import settings

HOLD_SECONDS = 600.0

_counts: dict[str, int] = {}


def _hold(marker: Path) -> None:
    tmp = marker.with_name(f"{marker.name}.{os.getpid()}.tmp")
    tmp.write_text(str(os.getpid()))
    tmp.rename(marker)  # whoever waits for the marker reads a whole pid
    deadline = time.monotonic() + HOLD_SECONDS
    while time.monotonic() < deadline:
        time.sleep(0.2)


def fault_point(name: str) -> None:
    spec = settings.env_value("fault")
    if not spec:
        return
    point, _, n = spec.partition(":")
    if point != name:
        return
    _counts[name] = _counts.get(name, 0) + 1
    if settings.env_value("fault_hold"):
        if _counts[name] == int(n or 1):
            _hold(Path(settings.env_value("fault_hold")))
        return
    if _counts[name] >= int(n or 1):
        if _parent:
            os.kill(_parent, signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


def in_scan_worker(step_pid: int) -> None:
    """Called in a scan worker process: a fault there stops the whole run (the step that started it, then itself),
    as an operator's kill of the run would."""
    global _parent
    _parent = step_pid


_parent: int | None = None
