"""Translated tasks linked to the items they translate.

A task spec may say ``translation_of = "gsm8k"`` (registry.Translation): each of its items is then a
translation of one item of the source task, aligned by position (item k of the translated split is item
``offset + k`` of the source split, over ``limit`` items) or by an id field both rows carry.  ``links`` reads
both splits' rows and returns one row per translated item with the source item it translates; a match of the
source item is then also reported for its translations (store/translated_matches.py).  Where the alignment cannot be
established — the source task is not in the run, a split is missing, the counts differ, an id is missing or
repeated — it raises TaskSpecError with one line saying which and how to fix it; a link of the lm-eval table
known not to align is skipped with a note instead.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from contam_assets.sources.fields import FieldError, get_path
from contam_assets.sources.registry import SplitSpec, TaskSpec, TaskSpecError, Translation, iter_split, locate

LINK_SCHEMA = {
    "task": pl.Utf8, "split": pl.Utf8, "instance_index": pl.Int32, "subject": pl.Utf8,
    "source_task": pl.Utf8, "source_split": pl.Utf8, "source_index": pl.Int32, "source_subject": pl.Utf8,
    "align": pl.Utf8,
}


def links(specs: list[TaskSpec], benchmarks_dir: Path | None, notes: list[str] | None = None) -> pl.DataFrame:
    """One row per translated item of every spec that declares a translation (LINK_SCHEMA); TaskSpecError when
    an alignment cannot be established.  A split whose files are missing on either side links nothing (the
    registry reports missing files on its own).  A link of the lm-eval table known not to align is skipped,
    with one line appended to ``notes`` saying so."""
    by_name = {s.name: s for s in specs}
    rows: list[dict] = []
    for spec in specs:
        t = spec.translation
        if t is None:
            continue
        where = f"{spec.name} (translation of {t.of})"
        src = by_name.get(t.of)
        if src is None and t.shipped:
            continue  # a link of the lm-eval table whose source is not in this run: nothing to link it to
        if t.unavailable and t.shipped:  # the lm-eval table knows the items cannot be aligned: scan unlinked
            if notes is not None:
                notes.append(f"{spec.name}: not linked to {t.of} (its items cannot be aligned: {t.unavailable})")
            continue
        if t.unavailable:
            raise TaskSpecError(f"{where}: its items cannot be aligned with {t.of}'s: {t.unavailable}; "
                                f"scan {spec.name} and {t.of} in separate runs")
        if src is None:
            raise TaskSpecError(f"{where}: the source task {t.of!r} is not in this run; add it to --tasks "
                                f"(or the task folder) so its matches can be linked")
        for split in spec.splits:
            if t.splits and split.name not in t.splits:
                continue
            name = t.split or split.name
            ssplit = next((s for s in src.splits if s.name == name), None)
            if ssplit is None:
                raise TaskSpecError(f"{where}: {t.of} has no split {name!r} (it has: "
                                    f"{', '.join(s.name for s in src.splits)}); set [translation] split")
            mine, theirs = _items(spec, split, benchmarks_dir), _items(src, ssplit, benchmarks_dir)
            if mine is None or theirs is None:
                continue
            pairs = (_by_index if t.align == "index" else _by_id)(t, mine, theirs, f"{spec.name}/{split.name}",
                                                                  f"{t.of}/{name}")
            rows += [dict(task=spec.name, split=split.name, instance_index=a[0], subject=a[1], source_task=t.of,
                          source_split=name, source_index=b[0], source_subject=b[1], align=t.align) for a, b in pairs]
    return pl.DataFrame(rows, schema=LINK_SCHEMA)


def _items(spec: TaskSpec, split: SplitSpec, benchmarks_dir: Path | None) -> list[tuple] | None:
    """(instance_index, subject, row) of every readable row of a split, in order; None when it has no file."""
    avail = locate(spec, split, benchmarks_dir)
    if not avail.files:
        return None
    return [(r.instance_index, r.subject, r.row) for r, _ in iter_split(spec, split, avail) if r is not None]


def _by_index(t: Translation, mine: list, theirs: list, a: str, b: str) -> list[tuple]:
    if t.offset + (t.limit or 0) > len(theirs) or t.offset >= len(theirs):
        raise TaskSpecError(f"{a}: cannot align by index: {b} has {len(theirs):,} items, too few for "
                            f"[translation] offset = {t.offset}" + (f", limit = {t.limit}" if t.limit else ""))
    window = theirs[t.offset: t.offset + t.limit if t.limit is not None else None]
    if len(mine) != len(window):
        span = (f"items {t.offset}..{t.offset + len(window) - 1} of {b}" if (t.offset or t.limit) else b)
        hint = (f"; when it translates the first {len(mine):,} items set [translation] limit = {len(mine)}"
                if len(mine) < len(window) else "")
        raise TaskSpecError(f"{a}: cannot align by index: it has {len(mine):,} items and {span} has "
                            f"{len(window):,}{hint} (or align = \"id\")")
    return [((m[0], m[1]), (s[0], s[1])) for m, s in zip(mine, window)]


def _ids(items: list, path: str, where: str) -> dict:
    out: dict = {}
    for index, subject, row in items:
        try:
            key = get_path(row, path)
        except FieldError:
            raise TaskSpecError(f"{where}: cannot align by id: item {index} has no id field {path!r}") from None
        if key is None or isinstance(key, (dict, list)):
            raise TaskSpecError(f"{where}: cannot align by id: item {index}'s {path!r} is not a single value")
        key = str(key)
        if key in out:
            raise TaskSpecError(f"{where}: cannot align by id: {path!r} {key[:80]!r} is on items {out[key][0]} and {index}")
        out[key] = (index, subject)
    return out


def _by_id(t: Translation, mine: list, theirs: list, a: str, b: str) -> list[tuple]:
    src = _ids(theirs, t.source_id or t.id, b)
    pairs = []
    for key, item in _ids(mine, t.id, a).items():
        if key not in src:
            raise TaskSpecError(f"{a}: cannot align by id: item {item[0]}'s {t.id!r} {key[:80]!r} is not in {b}")
        pairs.append((item, src[key]))
    return pairs
