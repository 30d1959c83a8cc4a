"""The sum look of the crosslingual stage (crosslingual.py, docs/crosslingual.md), over all the gated blocks of a
group of documents at once: each block read into pieces sentence by sentence, every sentence's sum of static rows
and every window's (its sentences') from sparse products, and each (window, unit) pair compared
with its unit's sum look.  The pairs that pass go on to the first look, block by block."""

from __future__ import annotations

from collections.abc import Callable
from itertools import chain

import numpy as np
from scipy import sparse

from contam_assets.paraphrase.crosslingual_encoder import BOS, EOS, Encoder

PAIR_ROWS = 8192  # pairs compared at once (two rows of 2 kB each a pair)
WINDOW_ROWS = 8192  # windows whose sum looks are held at once (4 kB a window)


def sum_looks(enc: Encoder, blocks: list[tuple], a: np.ndarray, b: np.ndarray, pk: np.ndarray, pu: np.ndarray,
              unit_looks: Callable[[list[int]], np.ndarray],
              bars: Callable[[list[int]], np.ndarray]) -> tuple[list[tuple | None], dict[str, int]]:
    """For each block ``(block, spans)``, the look the first look reads: (pieces a sentence, the windows given a
    first look as character spans, their pairs' units, the pairs' window and unit columns, the windows' sums and
    piece counts), or None where no pair reaches its unit's bar (``bars``).  The windows are the blocks' (as
    crosslingual_windows.group_pairs numbers them): their first sentence ``a`` and one past their last ``b``; the
    pairs' windows ``pk`` and units ``pu``.  Also the counts of windows and pairs formed and passed."""
    stats = {"first_look_windows": len(a), "first_look_pairs": len(pk), "sum_look_windows": 0, "sum_look_pairs": 0}
    if not len(pk):
        return [None] * len(blocks), stats
    sent_at = np.cumsum([0] + [len(spans) for _, spans in blocks])
    # the windows are by block and the pairs by window: each block's are a run of them
    per_block = np.bincount(np.searchsorted(sent_at, a, side="right") - 1, minlength=len(blocks))
    win_at = np.concatenate([[0], np.cumsum(per_block)])
    pair_at = np.searchsorted(pk, win_at)
    # the pieces of the blocks' sentences (a block without windows: none)
    toks = [[enc.tokens(block[s:e]) for s, e in spans] if n else [[]] * len(spans)
            for (block, spans), n in zip(blocks, per_block.tolist())]
    lens = np.array([len(t) for ts in toks for t in ts], dtype=np.int64)
    with enc.one_thread():
        flat = np.fromiter(chain.from_iterable(chain.from_iterable(toks)), dtype=np.int64, count=int(lens.sum()))
        # a window's sum: its sentences' sums added by one sparse product
        width = b - a
        cols = np.arange(int(width.sum())) - np.repeat(np.cumsum(width) - width, width) + np.repeat(a, width)
        cover = sparse.csr_array((np.ones(len(cols), dtype=np.float32), (np.repeat(np.arange(len(a)), width), cols)),
                                 shape=(len(a), len(lens)))
        count = np.concatenate([[0], np.cumsum(lens)])
        each, marks = enc.sums(flat, lens), enc.static([BOS, EOS]).sum(axis=0, dtype=np.float32)
        counts = count[b] - count[a] + 2
        units, col = np.unique(pu, return_inverse=True)
        units = units.tolist()
        vectors, bar = unit_looks(units), bars(units)
        col = col.ravel()
        keep = np.zeros(len(pk), dtype=bool)
        for w in range(0, len(a), WINDOW_ROWS):  # the windows' looks a slice at a time (4 kB a window)
            look = enc.sum_look(cover[w:w + WINDOW_ROWS] @ each + marks, counts[w:w + WINDOW_ROWS])
            first, last = np.searchsorted(pk, [w, w + WINDOW_ROWS])
            for p in range(int(first), int(last), PAIR_ROWS):
                q = slice(p, min(p + PAIR_ROWS, int(last)))
                keep[q] = np.einsum("pd,pd->p", look[pk[q] - w], vectors[col[q]]) >= bar[col[q]]
    out: list[tuple | None] = []
    for k, (block, spans) in enumerate(blocks):
        mine = slice(pair_at[k], pair_at[k + 1])
        kept = keep[mine]
        if not kept.any():
            out.append(None)
            continue
        rows, wk = np.unique(pk[mine][kept], return_inverse=True)  # the windows given a first look (group rows)
        mine_units, uk = np.unique(pu[mine][kept], return_inverse=True)
        order = [(spans[i - sent_at[k]][0], spans[j - 1 - sent_at[k]][1]) for i, j in zip(a[rows].tolist(), b[rows].tolist())]
        stats["sum_look_pairs"] += int(kept.sum())
        stats["sum_look_windows"] += len(rows)
        out.append((toks[k], order, mine_units.tolist(), wk.ravel(), uk.ravel(), rows, counts[rows]))
    if any(look is not None for look in out):  # the sums of the windows kept, from one product
        rows = np.concatenate([look[5] for look in out if look is not None])
        with enc.one_thread():
            sums = cover[rows] @ each + marks
        at = 0
        for k, look in enumerate(out):
            if look is not None:
                out[k] = (*look[:5], sums[at:at + len(look[5])], look[6])
                at += len(look[5])
    return out, stats
