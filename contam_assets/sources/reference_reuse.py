"""The reference set written again, the records of unchanged tasks taken from the last build instead of read again.

A build is cut into units: one source file of a decon-format spec (a decon folder is one file per eval), one whole
spec of the registry's own format.  A unit's key is the content hash of everything its records come from (the spec's
fields, the files' names and bytes: `registry.file_digest`, the hashes `reference_inputs` keeps); with the knobs that
shape the set (`reference_key`) and the code's version it names the records the unit gives, as read (before the
same-answer rule and the decon filters).  `units.json` beside the records (`OUT/index/reference/`) says, per unit of
the last build: its key, where its records lie in `records.arrow`, its suites, the suites the same-answer rule took,
and its counts (rows, skips, unreadable rows).

The same-answer rule and the duplicate check are per suite; every other filter is per record.  So a unit's filtered
records depend on nothing outside it when each of its suites lies in that unit alone: a unit with the key of a unit
of the last build, whose suites lie in it alone in both builds, has its filtered records taken from the last
`records.arrow` (record ids renumbered).  Every other unit (new, changed, or sharing a suite with another unit) is
read and filtered as a whole build does, in record order, the rule's and the check's state carried across those units
(their suites are in no reused unit).  The files written hold the same rows in the same tables of ``COLUMNS_CHUNK``
records as ``write_reference_set`` writes, and the stats are the same.  With the answer suites or the reference
overlap on (both need every record at once), the set is built whole (``write_reference_set``) and no units are kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.ipc as pa_ipc

from contam_assets.detector.config import DetectConfig
from contam_assets.sources import kept_tokens, reference, reference_filters
from contam_assets.sources.reference import RECORD_SCHEMA, ReferenceStats, decon_record, filtered_part, iter_task_rows
from contam_assets.sources.registry import SplitAvailability, TaskSpec, file_digest, locate, split_rows
from contam_assets.store import artifacts
from contam_assets.store.files import atomic_write_text, temp_path

UNITS = "units.json"  # in the records' folder: the last build's units
FORMAT = 1
SOURCE_HASHES = "source_hashes.json"  # under <out>/index/ (index_step.reference_inputs keeps it)


@dataclass
class Unit:
    spec: TaskSpec
    split: int | None  # decon: the split of the file; the registry's format: None (every split of the spec)
    file: str | None  # decon: the one file
    key: str | None  # None: not known (a file that cannot be read): read every time
    old: dict | None = None  # the last build's entry with this key, taken
    reused: bool = False
    batches: list[int] = field(default_factory=list)  # in the spill: the record batches of a unit read
    entry: dict = field(default_factory=dict)  # this build's entry (units.json)
    states: dict = field(default_factory=dict)  # a unit read: suite -> [records, first answer, all equal]


def write_reference_set_reusing(specs: list[TaskSpec], benchmarks_dir: Path | None, cfg: DetectConfig, out: Path,
                                version: str, inputs: str, progress=None, say=None,
                                workers: int = 1) -> tuple[int, ReferenceStats]:
    """``write_reference_set``'s files and stats in ``artifacts.reference_records_dir(out)``, unchanged units' records
    taken from the last build there (module doc); then `units.json` for the next.  ``say``: one line on what was
    reused; ``workers``: processes for the filters of the units read (`write_reference_set`).  Returns the number of
    records and the stats."""
    folder = artifacts.reference_records_dir(out)
    folder.mkdir(parents=True, exist_ok=True)
    config = hashlib.sha256(json.dumps([FORMAT, version, cfg.reference_key()], sort_keys=True, default=str).encode()).hexdigest()[:16]
    previous = None if cfg.answer_suites or cfg.reference_overlap else _previous(folder, config)
    artifacts.forget_reference_records(out)  # before the folder's records are written again
    (folder / UNITS).unlink(missing_ok=True)
    if cfg.answer_suites or cfg.reference_overlap:
        return reference.write_reference_set(specs, benchmarks_dir, cfg, folder, progress, workers)
    units = list(_units(specs, benchmarks_dir, _known_hashes(out)))
    _match(units, previous)
    raw = temp_path(folder / "raw.arrow")
    try:
        with reference_filters.FilterPool(cfg, workers) as filters:
            with _Spill(raw, filters.start) as spill:  # a second table spilled: the filters' workers start
                for u in units:
                    if u.old is None:
                        _read(u, benchmarks_dir, cfg, spill, progress)
                for u in _shared(units):  # a suite in several units: each of them read and filtered with the others
                    if not u.entry:
                        _read(u, benchmarks_dir, cfg, spill, progress)
            for u in units:
                u.reused = not u.entry
            stats, same = _stats(specs, units)
            n = _write(folder, units, raw, previous, same, cfg, progress, filters)
    finally:
        raw.unlink(missing_ok=True)
    for u, alone in zip(units, _alone(units)):
        u.entry["alone"] = alone
    atomic_write_text(folder / UNITS, json.dumps(dict(format=FORMAT, config=config, inputs=inputs, records=n,
                                                      batches=_batch_rows(folder), units=[u.entry for u in units])))
    if say is not None and previous is not None:
        kept = [u for u in units if u.reused]
        say(f"  reference set: {len(kept):,} of {len(units):,} unit(s) unchanged, "
            f"{sum(u.entry['count'] for u in kept):,} of {n:,} records taken from the last build")
    return n, stats


# -- units -------------------------------------------------------------------------------------------------------

def _known_hashes(out: Path) -> dict:
    try:
        known = json.loads((Path(out) / "index" / SOURCE_HASHES).read_text())
    except (OSError, ValueError):
        return {}
    return known if isinstance(known, dict) else {}


def _file_key(path: str, hashes: dict) -> list | None:
    try:
        st = os.stat(path)
        return [Path(path).name, st.st_size, file_digest(path, st, hashes)]
    except OSError:
        return None


def _key(parts) -> str | None:
    if any(p is None for p in parts):
        return None
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:32]


def _units(specs: list[TaskSpec], benchmarks_dir: Path | None, hashes: dict):
    """The build's units in record order."""
    for spec in specs:
        if spec.format == "decon":  # a record's fields come from its line, its file's name and the spec's kind
            for si, split in enumerate(spec.splits):
                for f in locate(spec, split, benchmarks_dir).files:
                    yield Unit(spec, si, f, _key(["decon", spec.name, spec.kind, spec.language, split.name,
                                                   _file_key(f, hashes)]))
            continue
        parts: list = ["contam", repr(spec)]
        for split in spec.splits:
            avail = locate(spec, split, benchmarks_dir)
            parts += [split.name, avail.origin, *(_file_key(f, hashes) for f in avail.files)]
        yield Unit(spec, None, None, _key(parts))


def _previous(folder: Path, config: str) -> dict | None:
    """The last build's units where they describe the records in ``folder`` (marked, same knobs and code)."""
    try:
        prev = json.loads((folder / UNITS).read_text())
        mark = json.loads((folder / artifacts.REFERENCE_INPUTS).read_text())
    except (OSError, ValueError):
        return None
    ok = (isinstance(prev, dict) and isinstance(mark, dict) and prev.get("format") == FORMAT and prev.get("config") == config
          and prev.get("inputs") == mark.get("inputs") and prev.get("records") == mark.get("records")
          and (folder / artifacts.RECORDS_MAPPED).is_file())
    return prev if ok else None


def _match(units: list[Unit], previous: dict | None) -> None:
    """Each unit given the last build's entry of its key whose suites lay in it alone (each entry taken once)."""
    free: dict[str, list[dict]] = {}
    for e in (previous or {}).get("units", []):
        if e.get("key") and e.get("alone"):
            free.setdefault(e["key"], []).append(e)
    for u in units:
        if u.key is not None and free.get(u.key):
            u.old = free[u.key].pop(0)


def _suites(u: Unit) -> list[str]:
    return u.entry["suites"] if u.entry else u.old["suites"]


def _alone(units: list[Unit]) -> list[bool]:
    where: dict[str, int] = {}
    for u in units:
        for s in _suites(u):
            where[s] = where.get(s, 0) + 1
    return [all(where[s] == 1 for s in _suites(u)) for u in units]


def _shared(units: list[Unit]) -> list[Unit]:
    return [u for u, alone in zip(units, _alone(units)) if not alone]


# -- reading -----------------------------------------------------------------------------------------------------

def _rows(u: Unit, benchmarks_dir: Path | None, cfg: DetectConfig, stats: ReferenceStats, progress):
    """A unit's records as read (``iter_task_rows``; a decon file as that function reads each file of its split)."""
    if u.file is None:
        yield from iter_task_rows(u.spec, benchmarks_dir, stats, derived_suites=cfg.derived_suites, progress=progress)
        return
    spec, split = u.spec, u.spec.splits[u.split]
    for src in split_rows(spec, split, SplitAvailability(spec.name, split.name, [u.file], "benchmarks"), stats, progress):
        u.entry["rows"] += 1
        yield decon_record(src, spec)


def _read(u: Unit, benchmarks_dir: Path | None, cfg: DetectConfig, spill: "_Spill", progress) -> None:
    """A unit read into the spill (its record batches never hold another unit's records), its suites' states kept."""
    stats, recs, chunk = ReferenceStats(), [], reference.COLUMNS_CHUNK
    u.entry = dict(key=u.key, rows=0)
    for r in _rows(u, benchmarks_dir, cfg, stats, progress):
        recs.append(r)
        st = u.states.get(r["suite"])
        if st is None:
            u.states[r["suite"]] = [1, r["answer"], True]
        else:
            st[0] += 1
            st[2] = st[2] and r["answer"] == st[1]
        if len(recs) == chunk:
            u.batches.append(spill.write(recs))
            recs = []
    if recs:
        u.batches.append(spill.write(recs))
    u.entry.update(count=sum(st[0] for st in u.states.values()), suites=list(u.states), availability=stats.availability,
                   bad_rows=stats.bad_rows, row_skips=[[*k, n] for k, n in stats.row_skips.items()],
                   notes=[[*k, n] for k, n in stats.notes.items()])


class _Spill:
    """The records of the units read, as an Arrow IPC file of record batches (``write``: one batch, its number);
    ``second``: called when a second batch is written."""

    def __init__(self, path: Path, second=None):
        self.path, self.sink, self.writer, self.n, self.second = path, None, None, 0, second

    def write(self, recs: list[dict]) -> int:
        table = pl.DataFrame(recs, schema=RECORD_SCHEMA).to_arrow(compat_level=pl.CompatLevel.newest())
        if self.writer is None:
            self.sink = pa.OSFile(str(self.path), "wb")
            self.writer = pa_ipc.new_file(self.sink, table.schema)
        self.writer.write_table(table, max_chunksize=table.num_rows)
        self.n += 1
        if self.n == 2 and self.second is not None:
            self.second()
        return self.n - 1

    def __enter__(self) -> "_Spill":
        return self

    def __exit__(self, *exc) -> None:
        if self.writer is not None:
            self.writer.close()
            self.sink.close()


# -- the rule, the stats, the files ------------------------------------------------------------------------------

def _stats(specs: list[TaskSpec], units: list[Unit]) -> tuple[ReferenceStats, list[str]]:
    """The build's stats from its units', in record order; and the suites of the units read that the same-answer
    rule takes (their state over every unit read: a suite of theirs is in no reused unit)."""
    stats, combined = ReferenceStats(), {}
    for u in units:
        if u.reused:
            u.entry = dict(u.old)
        for suite, (n, first, equal) in u.states.items():
            st = combined.get(suite)
            combined[suite] = [n, first, equal] if st is None else [st[0] + n, st[1], st[2] and equal and first == st[1]]
    same_read = [s for s, (n, first, equal) in combined.items() if n > 1 and equal and first is not None]
    taken: dict[str, bool] = {}
    for u in units:
        for s in u.entry["suites"]:
            taken.setdefault(s, s in u.entry.get("same", []) if u.reused else s in same_read)
        u.entry["same"] = [s for s in u.entry["suites"] if taken[s]]
        stats.bad_rows += u.entry["bad_rows"]
        for into, entries in ((stats.row_skips, u.entry["row_skips"]), (stats.notes, u.entry["notes"])):
            for task, split, reason, n in entries:
                into[(task, split, reason)] = into.get((task, split, reason), 0) + n
    stats.same_answer_suites = [s for s, on in taken.items() if on]
    by_spec: dict[int, list[Unit]] = {}
    for u in units:
        by_spec.setdefault(id(u.spec), []).append(u)
    for spec in specs:  # the splits' rows, as read (a decon split: its files' together)
        mine = by_spec.get(id(spec), [])
        if spec.format != "decon":
            stats.availability += [a for u in mine for a in u.entry["availability"]]
            continue
        for si, split in enumerate(spec.splits):
            files = [u for u in mine if u.split == si]
            stats.availability.append(dict(task=spec.name, split=split.name, origin="benchmarks" if files else "missing",
                                           files=len(files), rows=sum(u.entry["rows"] for u in files)))
    return stats, same_read


def _write(folder: Path, units: list[Unit], raw: Path, previous: dict | None, same: list[str], cfg: DetectConfig,
           progress, filters: reference_filters.FilterPool) -> int:
    """The records files: each unit's records in order, a reused unit's from the last build's ``records.arrow``, a
    read unit's filtered (the order-free part by the ``filters``' workers), in tables of ``COLUMNS_CHUNK`` records
    (as ``write_reference_set`` writes them)."""
    total, seen = sum(u.entry["count"] for u in units), {}
    old = _Old(folder / artifacts.RECORDS_MAPPED, previous["batches"]) if any(u.reused for u in units) else None
    src = pa.OSFile(str(raw), "rb", memory_pool=pa.system_memory_pool()) if raw.exists() else None
    try:
        spilled = pa_ipc.open_file(src) if src is not None else None
        # a build that reads every unit keeps the filters' token ids for the index build (detector/record_tokens.py)
        ids = None if old is not None else kept_tokens.TokenWriter(folder, cfg)
        ahead = filters.verdicts(raw, [b for u in units if not u.reused for b in u.batches], same, reference.FILTER_CHUNK,
                                 ids=ids is not None)
        with ids or contextlib.nullcontext(), artifacts.RecordsWriter(folder, RECORD_SCHEMA) as writer:
            out = _Tables(writer, reference.COLUMNS_CHUNK)
            for u in units:
                start = out.rows
                if u.reused:
                    for part in old.rows(u.old["start"], u.old["count"]):
                        out.add(part)
                else:
                    for b, verdicts in zip(u.batches, ahead):
                        chunks = [] if ids is not None else None
                        out.add(filtered_part(pl.from_arrow(spilled.get_batch(b)), same, cfg, seen, out.rows, total, progress,
                                              chunks, verdicts))
                        if ids is not None:
                            ids.add(chunks)
                u.entry.update(start=start, count=out.rows - start)
            out.flush()
            return writer.rows
    finally:
        if old is not None:
            old.close()
        if src is not None:
            src.close()


class _Tables:
    """Tables of exactly ``size`` records (the last fewer) written in order, record ids numbered on."""

    def __init__(self, writer, size: int):
        self.writer, self.size, self.parts, self.held, self.rows = writer, size, [], 0, 0

    def add(self, df: pl.DataFrame) -> None:
        self.parts.append(df.select(list(RECORD_SCHEMA)).cast(RECORD_SCHEMA))
        self.held += df.height
        self.rows += df.height
        while self.held >= self.size:
            self._emit(self.size)

    def flush(self) -> None:
        if self.held:
            self._emit(self.held)

    def _emit(self, n: int) -> None:
        whole = pl.concat(self.parts, how="vertical", rechunk=False)
        head, rest = whole.slice(0, n).rechunk(), whole.slice(n)
        first = self.writer.rows
        self.writer.write(head.with_columns(record_id=pl.int_range(first, first + n, dtype=pl.Int32)))
        self.parts, self.held = ([rest] if rest.height else []), rest.height


class _Old:
    """The last build's ``records.arrow`` read (not mapped) a record batch at a time; ``batches``: their sizes."""

    def __init__(self, path: Path, batches: list[int]):
        self.src = pa.OSFile(str(path), "rb", memory_pool=pa.system_memory_pool())
        self.reader = pa_ipc.open_file(self.src)
        self.starts = [0]
        for n in batches:
            self.starts.append(self.starts[-1] + n)
        self.cached: tuple[int, pl.DataFrame] | None = None

    def rows(self, start: int, count: int):
        end = start + count
        while start < end:
            b = next(i for i in range(len(self.starts) - 1) if self.starts[i] <= start < self.starts[i + 1])
            if self.cached is None or self.cached[0] != b:
                self.cached = (b, pl.from_arrow(self.reader.get_batch(b)))
            lo, hi = start - self.starts[b], min(end, self.starts[b + 1]) - self.starts[b]
            yield self.cached[1].slice(lo, hi - lo)
            start += hi - lo

    def close(self) -> None:
        self.src.close()


def _batch_rows(folder: Path) -> list[int]:
    """The sizes of the record batches of ``folder``'s ``records.arrow`` (read from its footer and batch headers)."""
    with pa.memory_map(str(folder / artifacts.RECORDS_MAPPED), "r") as src:
        reader = pa_ipc.open_file(src)
        return [reader.get_batch(i).num_rows for i in range(reader.num_record_batches)]
