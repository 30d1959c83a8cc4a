"""A block's sentences and the windows of them that the crosslingual stage compares with a unit
(crosslingual.py): runs of whole sentences within a length band of the unit's, and their anchors, read once per
block with their places and shared out to its sentences (crosslingual_anchors.py)."""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Callable

import numpy as np

LENGTH_LOW, LENGTH_HIGH = 0.6, 1.8
# a sentence ends at its stops or a line's end; a dot between digits (3.5, 80.000) ends none
_SENTENCE = re.compile(r"[^.!?。！？\n]*(?:(?<=\d)\.(?=\d)[^.!?。！？\n]*)*(?:[.!?。！？]+|\n|$)")


def sentences(text: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in _SENTENCE.finditer(text) if m.group().strip()]


def windows(spans: list[tuple[int, int]], length: int, ends: list[int] | None = None) -> list[tuple[int, int]]:
    """Runs of whole sentences whose length lies within [LENGTH_LOW, LENGTH_HIGH] times ``length``: from each
    sentence, the shortest run reaching the low bound (the whole block when it is shorter).  ``ends``: the spans'
    ends, when the caller has them.  (``group_pairs`` forms the same windows for many units and blocks at once.)"""
    lo, hi = LENGTH_LOW * length, LENGTH_HIGH * length
    ends = ends if ends is not None else [e for _, e in spans]
    out = []
    for i, (s, _) in enumerate(spans):
        j = bisect_left(ends, s + lo)  # the first run from sentence i reaching the low bound (ends only grow)
        if j == len(ends):  # none, from here on
            if i == 0:
                out.append((s, ends[-1]))
            break
        if ends[j] - s <= hi or j == i:
            out.append((s, ends[j]))
    return out


class Sentences:
    """A block's sentences and their anchors.  A window's anchors are those of its text read alone, which are the
    block's anchors (``places``: ``(start, end, anchor)``, read once) inside it: no anchor runs across a sentence
    end (a number's dot between digits ends no sentence).  Were one to (``alone``), every window is read again from
    its text (``read``)."""

    def __init__(self, block: str, spans: list[tuple[int, int]], places: list[tuple[int, int, str]],
                 read: Callable[[str], set[str]]):
        self.read, self.block, self.spans = read, block, spans
        self.starts = np.array([s for s, _ in spans], dtype=np.int64)
        self.ends = np.array([e for _, e in spans], dtype=np.int64)
        at = np.array([p[0] for p in places], dtype=np.int64)
        to = np.array([p[1] for p in places], dtype=np.int64)
        sentence = np.searchsorted(self.starts, at, side="right") - 1
        self.alone = bool(len(places)) and bool((sentence < 0).any() or (to > self.ends[np.maximum(sentence, 0)]).any())
        # each sentence's anchors (few objects a block: a scan makes millions of blocks, and the collector walks them)
        self.each: list[frozenset[str]] = [frozenset()] * len(spans)
        held: dict[int, list[str]] = {}
        for k, (_, _, a) in zip(sentence.tolist(), places):
            if k >= 0:  # (one before every sentence makes the block ``alone``)
                held.setdefault(k, []).append(a)
        for k, found in held.items():
            self.each[k] = frozenset(found)
        self._windows: dict[tuple[int, int], set[str]] = {}

    def __getitem__(self, window: tuple[int, int]) -> set[str]:
        """The window's anchors (a window is a run of sentences, as character offsets in the block)."""
        got = self._windows.get(window)
        if got is None:
            if self.alone:
                got = self.read(self.block[window[0]:window[1]])
            else:
                i, j = bisect_left(self.spans, (window[0],)), bisect_left(self.spans, (window[1],)) - 1
                got = set().union(*self.each[i:j + 1])
            self._windows[window] = got
        return got

    def pairs(self, lengths: np.ndarray, keys: list[set[str]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``group_pairs`` of this block alone: the windows' first and last sentence, the pairs' window and unit
        (its place in ``lengths``)."""
        return group_pairs([self], [np.asarray(lengths)], [keys])

    def hits(self, keys: list[set[str]]) -> list[list[int]]:
        """For each key set, the sentences holding one of its keys, in order."""
        where: dict[str, list[int]] = {}
        for k, got in enumerate(self.each):
            for a in got:
                where.setdefault(a, []).append(k)
        out = []
        for ks in keys:
            found = [k for a in ks for k in where.get(a, ())]
            out.append(sorted(set(found)) if len(ks) > 1 else found)
        return out


def group_pairs(blocks: list[Sentences], lengths: list[np.ndarray], keys: list[list[set[str]]]):
    """The (window, unit) pairs of many blocks at once: for block k's units of ``lengths[k]`` characters, each
    unit's ``windows`` that hold one of its ``keys[k]``.  Sentences, windows and units are numbered across the blocks,
    in their order.  Returns the windows' first and last sentence, block by block and in each in the order a loop
    over its units, then over each one's windows, first meets them; and the pairs' window and unit (its place in the
    units of all the blocks), by window, then unit.  A key is in a window when one of the window's sentences holds
    it: the first sentence at or after the window's start that holds one of the unit's keys lies at or before its
    end (one sorted search for all)."""
    none = np.zeros(0, dtype=np.int64)
    size = np.array([len(b.spans) for b in blocks], dtype=np.int64)
    units = np.array([len(x) for x in lengths], dtype=np.int64)
    if not size.sum() or not units.sum():
        return none, none, none, none
    sent_at = np.concatenate([[0], np.cumsum(size)])
    # the blocks' sentences laid end to end, apart: a run from one block never reaches into the next
    base = np.concatenate([[0], np.cumsum([int(b.ends[-1]) + 1 if len(b.spans) else 0 for b in blocks])])
    starts = np.concatenate([b.starts + base[k] for k, b in enumerate(blocks)])
    ends = np.concatenate([b.ends + base[k] for k, b in enumerate(blocks)])
    length = np.concatenate([np.asarray(x, dtype=np.float64) for x in lengths])
    block = np.repeat(np.arange(len(blocks)), units)  # each unit's block
    cells = size[block]  # a unit's cells: its block's sentences
    unit = np.repeat(np.arange(len(length)), cells)
    first = np.arange(int(cells.sum())) - np.repeat(np.cumsum(cells) - cells, cells) + np.repeat(sent_at[block], cells)
    end_of = sent_at[block + 1][unit]  # one past the unit's block's last sentence
    reach = np.searchsorted(ends, starts[first] + LENGTH_LOW * length[unit], side="left")
    within = reach < end_of
    last = np.minimum(reach, end_of - 1)
    ok = within & ((ends[last] - starts[first] <= LENGTH_HIGH * length[unit]) | (last == first))
    ok |= ~within & (first == sent_at[block][unit])  # no run reaches the low bound: the whole block
    unit, first, last = unit[ok], first[ok], last[ok]
    # the sentences holding one of each unit's keys, as unit * total + sentence, sorted
    total, unit_at = int(sent_at[-1]), np.concatenate([[0], np.cumsum(units)]).tolist()
    hit = np.array([(unit_at[k] + u) * total + sent_at[k] + s for k, (b, ks) in enumerate(zip(blocks, keys))
                    for u, found in enumerate(b.hits(ks)) for s in found], dtype=np.int64)
    at = np.searchsorted(hit, unit * total + first)
    held = np.zeros(len(unit), dtype=bool)
    inside = at < len(hit)
    held[inside] = hit[at[inside]] <= unit[inside] * total + last[inside]
    for k, b in enumerate(blocks):  # an anchor across a sentence end: each window of the block read alone
        if b.alone:
            mine = np.flatnonzero((unit >= unit_at[k]) & (unit < unit_at[k + 1]))
            for p in mine.tolist():
                window = (int(b.starts[first[p] - sent_at[k]]), int(b.ends[last[p] - sent_at[k]]))
                held[p] = bool(keys[k][unit[p] - unit_at[k]] & b[window])
    unit, first, last = unit[held], first[held], last[held]
    seen, at, which = np.unique(first * total + last, return_index=True, return_inverse=True)
    rank = np.empty(len(seen), dtype=np.int64)
    rank[np.argsort(at, kind="stable")] = np.arange(len(seen))
    pair = rank[which.ravel()]
    by = np.lexsort((np.arange(len(pair)), pair))
    order = np.argsort(rank, kind="stable")
    return seen[order] // total, seen[order] % total, pair[by], unit[by]
