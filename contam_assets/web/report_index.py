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
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import quote

from contam_assets.evaluation.report_files import (
    Found,
    dir_key,
    experiment_entries,
    folder_stat,
    list_dir,
    lstat_key,
    read_report,
    walk,
)
from contam_assets.evaluation.run_comparison import step_order, summary
from contam_assets.evaluation.safeio import Refused, json_bytes
from contam_assets.web.http_common import Body, deflate_part, gzip_join

LOCK_WAIT_S = 10.0
BODIES = 8
CHUNKS = 4096
RACY_S = 2.0
FRESH_S = 1.0  # default: a listing may show the folder as it was up to this long before the request


class IndexBusy(RuntimeError):
    """A refresh did not finish within LOCK_WAIT_S (a very slow or hung file system)."""


@dataclass(frozen=True)
class IndexEntry:
    """One entry of the index: a summary (serialised), an error entry, or a stage without a report yet."""

    experiment: str
    stage: str | None
    folder: str  # the experiment folder's name on disk
    key: tuple  # Found.key: what was looked at
    watch: tuple  # Found.watch: (path, lstat key) pairs to check on each refresh
    error: dict | None = None  # the listing's error entry
    hidden: bool = False  # a stage folder without report.json: watched, not listed
    recipe: str | None = None
    order: tuple = ()
    path: str | None = None  # real path of the report file (good entries)
    head: bytes = b""  # the summary's JSON up to the url's output_dir value
    tail: bytes = b""
    # mtime + RACY_S: until then the stat key alone does not prove the file unchanged.  Not compared: a re-read
    # whose window closed mid-refresh (0.0) is the same entry, and must not move the generation (the ETag)
    racy_until: float = field(default=0.0, compare=False)


def _item(found: Found, route: str) -> IndexEntry:
    base = (found.experiment, found.stage, found.folder, found.key, found.watch)
    if found.kind == "missing":
        return IndexEntry(*base, hidden=True)
    if found.kind:
        return IndexEntry(*base, error=found.error_entry())
    try:
        report = read_report(found.path, found.lstat)
        body = json_bytes(summary(found.experiment, found.stage, report))
    except Refused as exc:  # e.g. a file caught half written: read again while racy
        return IndexEntry(*base, error=found.error_entry(exc.kind, exc.message), racy_until=racy_until(found.lstat))
    url = f"{route}/{quote(found.experiment, safe='')}?stage={quote(found.stage, safe='')}&output_dir="
    return IndexEntry(*base, recipe=report.get("recipe"), order=(found.experiment, step_order(report, found.stage)),
                path=found.path, head=body[:-1] + b',"url":"' + url.encode("ascii"), tail=b'"}',
                racy_until=racy_until(found.lstat))


def racy_until(st: os.stat_result) -> float:
    """When a file's stat key starts to prove it unchanged (0: already).

    File times tick coarsely (a few ms on Linux), so a same-size write in the
    same tick as the one that was read leaves the key as it was.  Like git's
    "racily clean" entries, a file modified less than RACY_S ago is read again
    on each refresh until it is older; an unchanged one keeps its entry (and
    the generation does not move).
    """
    until = st.st_mtime + RACY_S
    return until if until > time.time() else 0.0


class _CachedLister:
    """``list_dir`` remembered per folder, keyed by its dir_key: an unchanged folder is not listed again."""

    def __init__(self):
        self.seen: dict[str, tuple[tuple, list]] = {}

    def __call__(self, path: str, st: os.stat_result) -> list:
        key = dir_key(st)
        hit = self.seen.get(path)
        if hit is not None and hit[0] == key:
            return hit[1]
        entries = list_dir(path, st)
        self.seen[path] = (key, entries)
        return entries


class ReportIndex:
    """The reports under ``root`` (a real folder path); ``inside(real)`` refuses symlinks leaving the roots.

    State checked on each refresh, cheapest first: the root folder's key (an
    experiment added, removed or renamed: walk everything again), each
    experiment's ``eval`` folder key (a stage added or removed: walk that
    experiment), each watched file's lstat key (a report written, replaced
    or removed: walk that experiment; only changed files are read).
    """

    def __init__(self, root: str, inside: Callable[[str], bool] = lambda _p: True, route: str = "/api/evaluations",
                 fresh_s: float = 0.0):
        self.root, self.inside, self.route, self.fresh_s = root, inside, route, fresh_s
        self.token = secrets.token_hex(4)
        self.generation = 0
        self.changed_at = time.time()
        self._items: dict[tuple, IndexEntry] = {}
        self._good: list[IndexEntry] = []
        self._errors: list[dict] = []
        self._lister = _CachedLister()
        self._root_key: tuple | None = ("never",)
        self._eval_keys: dict[str, tuple | None] = {}
        self._watch: list[tuple[str, str, tuple | None]] = []
        self._racy: dict[str, float] = {}  # folder -> until when one of its files is read again on each refresh
        self._lock = threading.Lock()
        self._last_start = float("-inf")
        self._bodies: OrderedDict[tuple, Body] = OrderedDict()
        self._bodies_lock = threading.Lock()
        self._chunks: OrderedDict[tuple, tuple] = OrderedDict()
        self._chunks_lock = threading.Lock()

    def listing(self, output_dir: str, recipe: str = "", experiment: str = "") -> tuple[Body, int]:
        """The listing's JSON body (``listing_body``) for these filters, and the generation it shows.

        Bodies are kept for the last BODIES (generation, output_dir, filters): a
        listing that did not change is not joined again.
        """
        good, errors, generation = self.refresh()
        key = (generation, output_dir, recipe, experiment)

        shown, errs = good, errors
        if recipe:
            shown = [it for it in shown if it.recipe == recipe]
        if experiment:
            shown = [it for it in shown if it.experiment == experiment]
            errs = [e for e in errs if e["experiment"] == experiment]
        parts = lambda: self._parts(output_dir, shown, errs)  # noqa: E731

        with self._bodies_lock:  # one Body per key: concurrent requests share its single build
            body = self._bodies.get(key)
            if body is None:
                body = self._bodies[key] = Body(lambda: b"".join(parts()[0]),
                                                lambda: gzip_join(*parts()))
                while len(self._bodies) > BODIES:
                    self._bodies.popitem(last=False)
        return body, generation

    def _parts(self, output_dir: str, items: list[IndexEntry], errors: list[dict]) -> tuple[list[bytes], list[bytes]]:
        """The listing in parts, raw and deflated: head, one part per experiment's run of entries, tail.

        A part is compressed once and kept (CHUNKS of them, by output_dir and
        the entries it holds), so a change recompresses one experiment only.
        """
        od = quote(output_dir, safe="").encode("ascii")
        head = b"".join([b'{"output_dir":', json_bytes(output_dir), b',"count":', str(len(items)).encode(),
                         b',"evaluations":['])
        raws, deflated = [head], [deflate_part(head)]
        start = 0
        for end in range(1, len(items) + 1):
            if end < len(items) and items[end].experiment == items[start].experiment:
                continue
            run = items[start:end]
            key = (od, start == 0, tuple(map(id, run)))
            with self._chunks_lock:
                hit = self._chunks.get(key)
                if hit is not None:
                    self._chunks.move_to_end(key)
            if hit is None:
                raw = (b"," if start else b"") + b",".join(it.head + od + it.tail for it in run)
                hit = (run, raw, deflate_part(raw))  # the items are kept so their ids stay unique
                with self._chunks_lock:
                    self._chunks[key] = hit
                    while len(self._chunks) > CHUNKS:
                        self._chunks.popitem(last=False)
            raws.append(hit[1])
            deflated.append(hit[2])
            start = end
        tail = b'],"errors":' + json_bytes(errors) + b"}"
        return raws + [tail], deflated + [deflate_part(tail)]

    def refresh(self, arrived: float | None = None) -> tuple[list[IndexEntry], list[dict], int]:
        """(good items sorted by experiment and step, error entries, generation).

        Current as of ``arrived - fresh_s``: the answer comes from a refresh
        that started no earlier than that (``fresh_s = 0``: after the request
        arrived).  Requests that wait for a running refresh share it.
        """
        arrived = (time.monotonic() if arrived is None else arrived) - self.fresh_s
        if not self._lock.acquire(timeout=LOCK_WAIT_S):
            raise IndexBusy(f"the report index was busy for more than {LOCK_WAIT_S:.0f}s")
        try:
            if self._last_start < arrived:
                start = time.monotonic()
                self._update()
                self._last_start = start
            return self._good, self._errors, self.generation
        finally:
            self._lock.release()

    # -- what changed -------------------------------------------------------------------
    def _eval_key(self, folder: str, is_link: bool) -> tuple | None:
        path = os.path.join(self.root, folder)
        if is_link and not self.inside(os.path.realpath(path)):
            return ("refused",)
        return dir_key(folder_stat(os.path.join(path, "eval")))

    def _changed(self) -> tuple[bool, set[str]]:
        """(the root changed, the experiment folders to walk again)."""
        if dir_key(folder_stat(self.root)) != self._root_key:
            return True, set()
        links = {name for name, is_link, _ in self._lister.seen.get(self.root, (None, []))[1] if is_link}
        folders = {f for f, key in self._eval_keys.items() if self._eval_key(f, f in links) != key}
        folders |= {f for f, path, key in self._watch if f not in folders and lstat_key(path) != key}
        now = time.time()
        folders |= {f for f, until in self._racy.items() if until > now}
        return False, folders

    def _update(self) -> None:
        full, folders = self._changed()
        if not full and not folders:
            return
        items = dict(self._items)
        if full:
            self._root_key = dir_key(folder_stat(self.root))  # before the walk: a change during it is seen next time
            entries = experiment_entries(self.root, self._lister)
            self._eval_keys = {name: self._eval_key(name, is_link) for name, is_link, _ in entries}
            founds = list(walk(self.root, self.inside, lister=self._lister, missing=True))
            for path in [p for p in self._lister.seen if p != self.root and not p.startswith(self.root + "/")]:
                del self._lister.seen[path]  # folders reached through symlinks that are gone
            items = {}
        else:
            links = {name for name, is_link, _ in self._lister.seen.get(self.root, (None, []))[1] if is_link}
            founds = []
            for folder in sorted(folders):
                self._eval_keys[folder] = self._eval_key(folder, folder in links)
                founds += walk(self.root, self.inside, experiment=folder, lister=self._lister, missing=True)
            items = {ident: it for ident, it in items.items() if it.folder not in folders}
        for found in founds:
            ident = (found.folder, found.stage)
            old = self._items.get(ident)
            same = old is not None and old.key == found.key and found.path and not old.racy_until > time.time()
            items[ident] = old if same else _item(found, self.route)
            if items[ident] == old:
                items[ident] = old
            if old is not None and found.kind and old.error == found.error_entry():
                items[ident] = old
        self._watch = [(it.folder, path, key) for it in items.values() for path, key in it.watch]
        self._racy = {}
        for it in items.values():
            if it.racy_until:
                self._racy[it.folder] = max(self._racy.get(it.folder, 0.0), it.racy_until)
        if items == self._items:
            return
        self._items = items
        self.generation += 1
        self.changed_at = max(time.time(), int(self.changed_at) + 1.0)
        shown = [it for it in items.values() if not it.hidden]
        self._good = sorted((it for it in shown if it.error is None), key=lambda it: it.order)
        self._errors = sorted((it.error for it in shown if it.error is not None),
                              key=lambda e: (e["experiment"], e["stage"] or ""))


class Indexes:
    """One ReportIndex per output folder (real path), the least recently used dropped beyond ``size``."""

    def __init__(self, inside: Callable[[str], bool], size: int = 32, route: str = "/api/evaluations",
                 fresh_s: float = FRESH_S):
        self.inside, self.size, self.route, self.fresh_s = inside, size, route, fresh_s
        self._by_root: OrderedDict[str, ReportIndex] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, root: str) -> ReportIndex:
        with self._lock:
            index = self._by_root.get(root)
            if index is None:
                index = self._by_root[root] = ReportIndex(root, self.inside, self.route, self.fresh_s)
            self._by_root.move_to_end(root)
            while len(self._by_root) > self.size:
                self._by_root.popitem(last=False)
            return index


def listing_body(output_dir: str, items: list[IndexEntry], errors: list[dict]) -> bytes:
    """The listing's JSON: ``{output_dir, count, evaluations: [...], errors: [...]}``."""
    od = quote(output_dir, safe="").encode("ascii")
    parts = [b'{"output_dir":', json_bytes(output_dir), b',"count":', str(len(items)).encode(), b',"evaluations":[']
    for i, it in enumerate(items):
        if i:
            parts.append(b",")
        parts += (it.head, od, it.tail)
    parts += (b'],"errors":', json_bytes(errors), b"}")
    return b"".join(parts)
