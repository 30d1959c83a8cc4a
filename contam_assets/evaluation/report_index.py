"""An index of the reports under one output folder, kept current by stat instead of re-reading.

The API answers every listing from an index per output folder.  A refresh
(``ReportIndex.refresh``) costs one ``stat`` of each ``eval`` folder and
one ``lstat`` of each ``report.json``; a folder is listed again only when its
(device, inode, mtime) changed, and a report is read again only when its
(device, inode, size, mtime, ctime, type) changed — an atomic replace
(new inode) and an in-place write (new mtime/ctime) are both seen.  So a
listing of 2,000 unchanged reports reads no file at all.

Requests that arrive while a refresh runs wait for it and share the next
one: every answer reflects the folder as it was at some moment after the
request arrived.  Each entry is summarised and serialised once, when read;
a listing joins the stored bytes.

``generation`` counts the changes seen; with the index's random ``token``
it forms the ETag, so an ETag from an earlier server process never matches.
``changed_at`` (Last-Modified) moves forward by at least one second per
change, so ``If-Modified-Since`` (second resolution) never hides a change.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable
from urllib.parse import quote

from contam_assets.evaluation.report_files import Found, list_dir, read_report, walk
from contam_assets.evaluation.reports import step_order, summary
from contam_assets.evaluation.safeio import Refused, json_bytes

LOCK_WAIT_S = 10.0


class IndexBusy(RuntimeError):
    """A refresh did not finish within LOCK_WAIT_S (a very slow or hung file system)."""


@dataclass(frozen=True)
class Item:
    """One report in the index: a summary (serialised) or an error entry."""

    experiment: str
    stage: str | None
    key: tuple | None  # Found.key when read from a file
    error: dict | None = None  # the listing's error entry
    recipe: str | None = None
    order: tuple = ()
    path: str | None = None  # real path of the report file (good entries)
    mtime: float = 0.0
    head: bytes = b""  # the summary's JSON up to the url's output_dir value
    tail: bytes = b""


def _item(found: Found, route: str) -> Item:
    if found.kind:
        return Item(found.experiment, found.stage, None, error=found.error_entry())
    try:
        report = read_report(found.path, found.lstat)
        entry = summary(found.experiment, found.stage, report)
        body = json_bytes(entry)
    except Refused as exc:
        return Item(found.experiment, found.stage, found.key, error=found.error_entry(exc.kind, exc.message))
    url = f"{route}/{quote(found.experiment, safe='')}?stage={quote(found.stage, safe='')}&output_dir="
    head = body[:-1] + b',"url":"' + url.encode("ascii")
    return Item(found.experiment, found.stage, found.key, recipe=report.get("recipe"),
                order=(found.experiment, step_order(report, found.stage)), path=found.path,
                mtime=found.lstat.st_mtime, head=head, tail=b'"}')


class _CachedLister:
    """``list_dir`` remembered per folder, keyed by (device, inode, mtime): unchanged folders are not listed."""

    def __init__(self):
        self.seen: dict[str, tuple[tuple, list]] = {}

    def __call__(self, path: str, st: os.stat_result) -> list:
        key = (st.st_dev, st.st_ino, st.st_mtime_ns)
        hit = self.seen.get(path)
        if hit is not None and hit[0] == key:
            return hit[1]
        entries = list_dir(path, st)
        self.seen[path] = (key, entries)
        return entries

    def keep_only(self, used: set[str]) -> None:
        for path in set(self.seen) - used:
            del self.seen[path]


class _TrackingLister(_CachedLister):
    def __init__(self, base: _CachedLister):
        self.seen, self.used = base.seen, set()

    def __call__(self, path, st):
        self.used.add(path)
        return super().__call__(path, st)


class ReportIndex:
    """The reports under ``root`` (a real folder path); ``inside(real)`` refuses symlinks leaving the roots."""

    def __init__(self, root: str, inside: Callable[[str], bool] = lambda _p: True, route: str = "/api/evaluations"):
        self.root, self.inside, self.route = root, inside, route
        self.token = secrets.token_hex(4)
        self.generation = 0
        self.changed_at = time.time()
        self._items: dict[tuple, Item] = {}
        self._good: list[Item] = []
        self._errors: list[dict] = []
        self._lister = _CachedLister()
        self._lock = threading.Lock()
        self._last_start = float("-inf")

    def refresh(self, arrived: float | None = None) -> tuple[list[Item], list[dict], int]:
        """(good items sorted by experiment and step, error entries, generation), current as of ``arrived``."""
        arrived = time.monotonic() if arrived is None else arrived
        if not self._lock.acquire(timeout=LOCK_WAIT_S):
            raise IndexBusy(f"the report index was busy for more than {LOCK_WAIT_S:.0f}s")
        try:
            if self._last_start < arrived:
                start = time.monotonic()
                self._rescan()
                self._last_start = start
            return self._good, self._errors, self.generation
        finally:
            self._lock.release()

    def _rescan(self) -> None:
        lister = _TrackingLister(self._lister)
        items: dict[tuple, Item] = {}
        changed = False
        for found in walk(self.root, self.inside, lister=lister):
            ident = (found.experiment, found.stage)
            old = self._items.get(ident)
            if old is not None and found.key is not None and old.key == found.key:
                items[ident] = old
                continue
            if old is not None and found.kind and old.error == found.error_entry():
                items[ident] = old
                continue
            items[ident] = _item(found, self.route)
            changed = True
        changed = changed or items.keys() != self._items.keys()
        self._lister.keep_only(lister.used)
        self._items = items
        if changed:
            self.generation += 1
            self.changed_at = max(time.time(), int(self.changed_at) + 1.0)
            good = [it for it in items.values() if it.error is None]
            good.sort(key=lambda it: it.order)
            self._good = good
            errors = [it.error for it in items.values() if it.error is not None]
            errors.sort(key=lambda e: (e["experiment"], e["stage"] or ""))
            self._errors = errors


class Indexes:
    """One ReportIndex per output folder (real path), the least recently used dropped beyond ``size``."""

    def __init__(self, inside: Callable[[str], bool], size: int = 32, route: str = "/api/evaluations"):
        self.inside, self.size, self.route = inside, size, route
        self._by_root: OrderedDict[str, ReportIndex] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, root: str) -> ReportIndex:
        with self._lock:
            index = self._by_root.get(root)
            if index is None:
                index = self._by_root[root] = ReportIndex(root, self.inside, self.route)
            self._by_root.move_to_end(root)
            while len(self._by_root) > self.size:
                self._by_root.popitem(last=False)
            return index


def listing_body(output_dir: str, items: list[Item], errors: list[dict]) -> bytes:
    """The listing's JSON: ``{output_dir, count, evaluations: [...], errors: [...]}``."""
    od = quote(output_dir, safe="").encode("ascii")
    parts = [b'{"output_dir":', json_bytes(output_dir), b',"count":', str(len(items)).encode(), b',"evaluations":[']
    for i, it in enumerate(items):
        if i:
            parts.append(b",")
        parts += (it.head, od, it.tail)
    parts += (b'],"errors":', json_bytes(errors), b"}")
    return b"".join(parts)
