"""A block's sentences and the windows of them that the crosslingual stage compares with a unit
(crosslingual.py): runs of whole sentences within a length band of the unit's, and their anchors, read once per
block with their places and shared out to its sentences (crosslingual_anchors.py)."""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Callable

import numpy as np

LENGTH_LOW, LENGTH_HIGH = 0.6, 1.8
PAIR_CELLS = 1 << 22  # (window, key) cells of the key test computed at once
# a sentence ends at its stops or a line's end; a dot between digits (3.5, 80.000) ends none
_SENTENCE = re.compile(r"(?:[^.!?。！？\n]|(?<=\d)\.(?=\d))*(?:[.!?。！？]+|\n|$)")


def sentences(text: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in _SENTENCE.finditer(text) if m.group().strip()]


def windows(spans: list[tuple[int, int]], length: int, ends: list[int] | None = None) -> list[tuple[int, int]]:
    """Runs of whole sentences whose length lies within [LENGTH_LOW, LENGTH_HIGH] times ``length``: from each
    sentence, the shortest run reaching the low bound (the whole block when it is shorter).  ``ends``: the spans'
    ends, when the caller has them.  (``Sentences.pairs`` forms the same windows for many units at once.)"""
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
        self.first = {s: i for i, (s, _) in enumerate(spans)}
        self.last = {e: i for i, (_, e) in enumerate(spans)}
        at = np.array([p[0] for p in places], dtype=np.int64)
        to = np.array([p[1] for p in places], dtype=np.int64)
        sentence = np.searchsorted(self.starts, at, side="right") - 1
        self.alone = bool(len(places)) and bool((sentence < 0).any() or (to > self.ends[np.maximum(sentence, 0)]).any())
        self.each: list[set[str]] = [set() for _ in spans]
        for k, (_, _, a) in zip(sentence.tolist(), places):
            self.each[k].add(a)
        self._windows: dict[tuple[int, int], set[str]] = {}

    def __getitem__(self, window: tuple[int, int]) -> set[str]:
        """The window's anchors (a window is a run of sentences, as character offsets in the block)."""
        got = self._windows.get(window)
        if got is None:
            if self.alone:
                got = self.read(self.block[window[0]:window[1]])
            else:
                got = set().union(*self.each[self.first[window[0]]:self.last[window[1]] + 1])
            self._windows[window] = got
        return got

    def pairs(self, lengths: np.ndarray, keys: list[set[str]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The (window, unit) pairs of units of ``lengths`` characters: each unit's ``windows`` that hold one of its
        ``keys``.  Returns the windows' first and last sentence, in the order a loop over the units, then over each
        one's windows, first meets them, and the pairs' window and unit (its place in ``lengths``), by window, then
        unit."""
        n, none = len(self.spans), np.zeros(0, dtype=np.int64)
        if not n or not len(lengths):
            return none, none, none, none
        lo, hi = LENGTH_LOW * np.asarray(lengths, dtype=np.float64), LENGTH_HIGH * np.asarray(lengths, dtype=np.float64)
        reach = np.searchsorted(self.ends, self.starts[None, :] + lo[:, None], side="left")  # unit by sentence
        within = reach < n
        last = np.minimum(reach, n - 1)
        ok = within & ((self.ends[last] - self.starts[None, :] <= hi[:, None]) | (last == np.arange(n)[None, :]))
        ok[:, 0] |= ~within[:, 0]  # no run reaches the low bound: the whole block
        unit, first = np.nonzero(ok)  # unit by unit, then sentence by sentence
        last = last[unit, first]
        held = self._hold(unit, first, last, keys)
        unit, first, last = unit[held], first[held], last[held]
        window = first * n + last
        seen, at, which = np.unique(window, return_index=True, return_inverse=True)
        rank = np.empty(len(seen), dtype=np.int64)
        rank[np.argsort(at, kind="stable")] = np.arange(len(seen))
        pair = rank[which.ravel()]
        by = np.lexsort((np.arange(len(pair)), pair))
        order = np.argsort(rank, kind="stable")
        return seen[order] // n, seen[order] % n, pair[by], unit[by]

    def _hold(self, unit: np.ndarray, first: np.ndarray, last: np.ndarray, keys: list[set[str]]) -> np.ndarray:
        """Whether each window (its sentences ``first`` to ``last``) holds one of its unit's ``keys``: a key's
        count over the window is a difference of its running counts over the sentences."""
        names = sorted(set().union(*keys)) if keys else []
        if not len(unit) or not names:
            return np.zeros(len(unit), dtype=bool)
        if self.alone:
            return np.array([bool(keys[u] & self[(int(self.starts[i]), int(self.ends[j]))])
                             for u, i, j in zip(unit.tolist(), first.tolist(), last.tolist())], dtype=bool)
        col = {a: c for c, a in enumerate(names)}
        mine = np.zeros((len(keys), len(names)), dtype=bool)
        mine[[u for u, ks in enumerate(keys) for _ in ks], [col[a] for ks in keys for a in ks]] = True
        count = np.zeros((len(self.spans) + 1, len(names)), dtype=np.int32)
        held_by = [(k + 1, col[a]) for k, got in enumerate(self.each) for a in got if a in col]
        if held_by:
            count[tuple(zip(*held_by))] = 1
        np.cumsum(count, axis=0, out=count)
        held = np.empty(len(unit), dtype=bool)
        step = max(1, PAIR_CELLS // len(names))
        for p in range(0, len(unit), step):
            q = slice(p, p + step)
            held[q] = ((count[last[q] + 1] > count[first[q]]) & mine[unit[q]]).any(axis=1)
        return held
