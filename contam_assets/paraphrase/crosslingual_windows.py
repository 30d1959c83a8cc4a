"""A block's sentences and the windows of them that the crosslingual stage compares with a unit
(crosslingual.py): runs of whole sentences within a length band of the unit's, and their anchors, read sentence by
sentence."""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Callable

LENGTH_LOW, LENGTH_HIGH = 0.6, 1.8
_SENTENCE = re.compile(r"[^.!?。！？\n]*(?:[.!?。！？]+|\n|$)")


def sentences(text: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in _SENTENCE.finditer(text) if m.group().strip()]


def windows(spans: list[tuple[int, int]], length: int, ends: list[int] | None = None) -> list[tuple[int, int]]:
    """Runs of whole sentences whose length lies within [LENGTH_LOW, LENGTH_HIGH] times ``length``: from each
    sentence, the shortest run reaching the low bound (the whole block when it is shorter).  ``ends``: the spans'
    ends, when the caller has them."""
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
    """A block's anchors sentence by sentence: a window's are the union of its sentences', read again from its
    text only where a number runs across a sentence end (``80.000``: the sentence ends at its dot)."""

    def __init__(self, block: str, spans: list[tuple[int, int]], anchors: Callable[[str], set[str]]):
        self.read, self.block, self.first = anchors, block, {s: i for i, (s, _) in enumerate(spans)}
        self.last = {e: i for i, (_, e) in enumerate(spans)}
        self.each: list[set[str] | None] = [None] * len(spans)
        self.spans = spans
        self.joined = [0]  # running count of sentence ends that cut a number
        for _, e in spans:
            cut = block[e - 1:e] == "." and block[e - 2:e - 1].isdigit() and block[e:e + 1].isdigit()
            self.joined.append(self.joined[-1] + cut)

    def anchors(self, window: tuple[int, int]) -> set[str]:
        i, j = self.first[window[0]], self.last[window[1]]
        if self.joined[j] - self.joined[i]:
            return self.read(self.block[window[0]:window[1]])
        out: set[str] = set()
        for k in range(i, j + 1):
            if self.each[k] is None:
                s, e = self.spans[k]
                self.each[k] = self.read(self.block[s:e])
            out |= self.each[k]
        return out
