"""The four proxy ablation arms of seed 003 as training streams.

Every arm is a list of documents in training order holding (about) the same
number of tokens, so that arms trained with the same batch size align step by
step in tokens:

- ``decontaminated``: the decontaminated mix.
- ``natural``: the natural pool (decontaminated mix + removed documents), at
  its natural contamination rate.
- ``full``: the decontaminated stream with every removed document added back
  exactly once.
- ``target_exposure``: the decontaminated stream with each removed document
  added back as often as its source's target-scale exposure says
  (floor + seeded Bernoulli for the fraction, see :func:`exposure.copies_for`).

The base stream reads the base mix epoch by epoch (each epoch a seeded
shuffle, each document repeated by its source's weight) until the budget left
after the re-added documents is filled.  Re-added copies are inserted at
seeded random positions *before* the last base document, so every copy lies
inside the trained prefix.  The same seed gives the decontaminated, full and
target arms the same base order.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from contam_assets.model.arms.exposure import copies_for

ARMS = ("decontaminated", "natural", "full", "target_exposure")

CountTokens = Callable[[list[str]], list[int]]


@dataclass(frozen=True)
class PoolDoc:
    shard: str  # path relative to the pool
    line: int  # 0-based physical line in the shard
    source: str
    text: str

    @property
    def key(self) -> tuple[str, int]:
        return (self.shard, self.line)


@dataclass(frozen=True)
class MixRow:
    text: str
    source: str
    shard: str
    line: int
    readded: bool  # a removed document put back by this arm
    n_tokens: int

    def to_json(self) -> dict:
        return {
            "text": self.text,
            "source": self.source,
            "shard": self.shard,
            "line": self.line,
            "readded": self.readded,
            "n_tokens": self.n_tokens,
        }


@dataclass
class ArmMix:
    arm: str
    seed: int
    budget_tokens: int
    rows: list[MixRow]
    epochs_read: int  # passes over the base mix that were started
    copies: dict[tuple[str, int], int] = field(default_factory=dict)  # removed doc -> copies re-added

    @property
    def n_tokens(self) -> int:
        return sum(r.n_tokens for r in self.rows)

    def summary(self) -> list[dict]:
        """Per source: base documents, re-added copies, distinct re-added documents, tokens."""
        by: dict[str, Counter] = {}
        distinct: dict[str, set] = {}
        for r in self.rows:
            c = by.setdefault(r.source, Counter())
            c["readded_copies" if r.readded else "base_docs"] += 1
            c["readded_tokens" if r.readded else "base_tokens"] += r.n_tokens
            if r.readded:
                distinct.setdefault(r.source, set()).add((r.shard, r.line))
        out = []
        for s in sorted(by):
            c = by[s]
            out.append(
                {
                    "source": s,
                    "base_docs": c["base_docs"],
                    "base_tokens": c["base_tokens"],
                    "readded_docs": len(distinct.get(s, ())),
                    "readded_copies": c["readded_copies"],
                    "readded_tokens": c["readded_tokens"],
                }
            )
        return out


class _TokenCache:
    """Counts tokens of documents on first use, in batches (the budget rarely needs the whole pool)."""

    def __init__(self, docs: Sequence[PoolDoc], count_tokens: CountTokens, batch: int = 512):
        self.docs = docs
        self.count = count_tokens
        self.batch = batch
        self.n: dict[int, int] = {}

    def get(self, i: int, upcoming: Sequence[int] = (), start: int = 0) -> int:
        if i not in self.n:
            ahead = upcoming[start : start + self.batch]
            todo = [i] + list(dict.fromkeys(j for j in ahead if j not in self.n and j != i))
            for j, n in zip(todo, self.count([self.docs[j].text for j in todo])):
                self.n[j] = int(n)
        return self.n[i]


def _epoch_order(docs: Sequence[PoolDoc], weights: dict[str, float], default_weight: float, seed: int, epoch: int) -> list[int]:
    order: list[int] = []
    for i, d in enumerate(docs):
        w = weights.get(d.source, default_weight)
        order.extend([i] * copies_for(w, seed, "epoch", epoch, d.shard, d.line))
    random.Random(f"{seed}/epoch/{epoch}").shuffle(order)
    return order


def base_stream(
    docs: Sequence[PoolDoc],
    budget_tokens: int,
    tokens: _TokenCache,
    seed: int,
    weights: dict[str, float] | None = None,
    default_weight: float = 1.0,
    max_epochs: int = 10_000,
) -> tuple[list[int], int]:
    """Indices into ``docs`` in training order, at least ``budget_tokens`` long; and the epochs started."""
    weights = weights or {}
    if not any(weights.get(d.source, default_weight) > 0 for d in docs):
        raise ValueError("the base mix is empty (no documents, or every source has weight 0)")
    out: list[int] = []
    total = 0
    epoch = 0
    while total < budget_tokens:
        if epoch >= max_epochs:
            raise ValueError(f"the base mix did not fill {budget_tokens} tokens in {max_epochs} epochs")
        order = _epoch_order(docs, weights, default_weight, seed, epoch)
        epoch += 1
        for k, i in enumerate(order):
            out.append(i)
            total += tokens.get(i, order, k + 1)
            if total >= budget_tokens:
                break
    return out, epoch


def readded_copies(arm: str, removed: Sequence[PoolDoc], exposure: dict[str, float] | None, seed: int) -> dict[tuple[str, int], int]:
    """How many times each removed document is put back into ``arm``."""
    if arm in ("decontaminated", "natural"):
        return {}
    if arm == "full":
        return {d.key: 1 for d in removed}
    if arm == "target_exposure":
        if exposure is None:
            raise ValueError("the target_exposure arm needs the per-source target exposure")
        missing = sorted({d.source for d in removed} - set(exposure))
        if missing:
            raise ValueError(f"no target exposure for source(s) {missing}; recompute the exposure table")
        return {d.key: copies_for(exposure[d.source], seed, "readd", d.shard, d.line) for d in removed}
    raise ValueError(f"unknown arm {arm!r}; choose one of {', '.join(ARMS)}")


def build_arm_mix(
    arm: str,
    decontaminated: Iterable[PoolDoc],
    removed: Iterable[PoolDoc],
    budget_tokens: int,
    count_tokens: CountTokens,
    seed: int = 0,
    target_exposure: dict[str, float] | None = None,
    weights: dict[str, float] | None = None,
    default_weight: float = 1.0,
) -> ArmMix:
    """Training stream of ``arm`` holding at least ``budget_tokens`` tokens (see module docstring).

    ``count_tokens`` maps texts to their token counts as the trainer will see
    them (document tokens + the end-of-text separator).
    """
    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}; choose one of {', '.join(ARMS)}")
    # Sort so the result depends on the seed and the documents, not on the order they were read in.
    decon = sorted(decontaminated, key=lambda d: d.key)
    removed_docs = sorted(removed, key=lambda d: d.key)
    overlap = {d.key for d in decon} & {d.key for d in removed_docs}
    if overlap:
        raise ValueError(f"{len(overlap)} removed document(s) are also in the decontaminated mix, e.g. {sorted(overlap)[0]}")
    base_docs = decon + removed_docs if arm == "natural" else decon
    base_docs.sort(key=lambda d: d.key)

    copies = readded_copies(arm, removed_docs, target_exposure, seed)
    added: list[PoolDoc] = [d for d in removed_docs for _ in range(copies.get(d.key, 0))]
    added_counts = count_tokens([d.text for d in added]) if added else []
    added_tokens = int(sum(added_counts))
    base_budget = budget_tokens - added_tokens
    if base_budget <= 0:
        raise ValueError(
            f"arm {arm}: the re-added documents hold {added_tokens} tokens, more than the budget of "
            f"{budget_tokens}; raise the token budget"
        )

    tokens = _TokenCache(base_docs, count_tokens)
    order, epochs = base_stream(base_docs, base_budget, tokens, seed, weights, default_weight)
    if not order:
        raise ValueError(f"arm {arm}: the base mix is empty")

    rng = random.Random(f"{seed}/insert/{arm}")
    # Insert each copy before a random base position; the last base document stays last.
    slots = sorted((rng.randrange(len(order)), rng.random(), j) for j in range(len(added)))
    rows: list[MixRow] = []
    s = 0
    for pos, i in enumerate(order):
        while s < len(slots) and slots[s][0] == pos:
            j = slots[s][2]
            d = added[j]
            rows.append(MixRow(d.text, d.source, d.shard, d.line, True, int(added_counts[j])))
            s += 1
        d = base_docs[i]
        rows.append(MixRow(d.text, d.source, d.shard, d.line, False, tokens.get(i)))
    return ArmMix(arm=arm, seed=seed, budget_tokens=budget_tokens, rows=rows, epochs_read=epochs, copies=copies)


def split_pool(pool: Iterable[PoolDoc], removed_keys: set[tuple[str, int]]) -> tuple[list[PoolDoc], list[PoolDoc]]:
    """Pool documents -> (decontaminated, removed) by the removal keys (shard, line)."""
    kept, removed = [], []
    for d in pool:
        (removed if d.key in removed_keys else kept).append(d)
    return kept, removed
