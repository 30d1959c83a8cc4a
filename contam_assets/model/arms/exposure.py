"""Exposure: how often one training document is expected to be read (seed 003).

A mix is defined by a pool of documents grouped into sources (web, code,
math, instruct, other) and one sampling weight per source, given as epochs
(up-sampling factors): weight 2 means the source is repeated twice as often
as a weight-1 source.  A training run draws a token budget ``B`` from that
mix.  The pool has a fixed size, so a larger budget revisits its documents
instead of diluting them; the number of times a document of source ``s`` is
read is

    exposure_s = B * w_s / sum_t(w_t * T_t)

with ``T_t`` the tokens of source ``t`` in the pool.  Equivalently, with
``p_s = w_s T_s / sum_t w_t T_t`` the token share of source ``s`` in the
training stream, ``exposure_s = B * p_s / T_s``.  The contaminated *share*
``sum_s w_s R_s / sum_t w_t T_t`` does not depend on ``B``; exposure does.

The target-scale exposure is the same formula with the production run's
weights and budget (:class:`TargetScale`).  Its defaults are modelled on the
production figures seed 003 reports (math read more than once, synthetic
instruction data about once, the rest less than once); they are not anyone's
published weights, so set your own when you know them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import xxhash

# Sources named by the data-side contract (`source` field of a pool document).
KNOWN_SOURCES = ("web", "code", "math", "instruct", "other")


@dataclass(frozen=True)
class SourceStats:
    """Size of one source in the (natural) pool and of its removed documents."""

    source: str
    pool_docs: int
    pool_tokens: int
    removed_docs: int = 0
    removed_tokens: int = 0


def parse_weights(spec: str | dict[str, float] | None) -> dict[str, float]:
    """``"math=2,web=0.5"`` (or a dict) -> ``{"math": 2.0, "web": 0.5}``; errors name the bad part."""
    if spec is None or spec == "":
        return {}
    if isinstance(spec, dict):
        items = list(spec.items())
    else:
        items = []
        for part in spec.split(","):
            part = part.strip()
            if not part:
                continue
            if "=" not in part:
                raise ValueError(f"bad weight {part!r}: expected SOURCE=NUMBER, e.g. math=2")
            key, value = part.split("=", 1)
            items.append((key.strip(), value.strip()))
    out: dict[str, float] = {}
    for key, value in items:
        try:
            w = float(value)
        except ValueError:
            raise ValueError(f"bad weight for source {key!r}: {value!r} is not a number") from None
        if not math.isfinite(w) or w < 0:
            raise ValueError(f"bad weight for source {key!r}: {w} (must be a finite number >= 0)")
        out[str(key)] = w
    return out


def weights_from_shares(shares: dict[str, float], pool_tokens: dict[str, int]) -> dict[str, float]:
    """Token shares of the training stream -> epoch weights (``w_s = p_s / T_s``, rescaled).

    Useful when a mix is specified as "40 % web, 20 % math, ..." rather than
    as up-sampling factors.  The result is scaled so the largest weight is 1.
    """
    raw = {}
    for s, p in shares.items():
        t = pool_tokens.get(s, 0)
        if p > 0 and t <= 0:
            raise ValueError(f"source {s!r} has a share of {p} but no tokens in the pool")
        raw[s] = p / t if t > 0 else 0.0
    top = max(raw.values(), default=0.0)
    return {s: (w / top if top > 0 else 0.0) for s, w in raw.items()}


def exposure_per_source(
    pool_tokens: dict[str, int], weights: dict[str, float], budget_tokens: float, default_weight: float = 1.0
) -> dict[str, float]:
    """Expected number of times one document of each source is read in a run of ``budget_tokens``."""
    w = {s: weights.get(s, default_weight) for s in pool_tokens}
    mix_tokens = sum(w[s] * t for s, t in pool_tokens.items())
    if mix_tokens <= 0:
        raise ValueError("the weighted mix is empty: every source has zero tokens or zero weight")
    # seed 003 rule: exposure = budget x the source's weight / weighted pool size (a fixed pool is revisited, not diluted)
    return {s: budget_tokens * w[s] / mix_tokens for s in pool_tokens}


def mix_tokens(pool_tokens: dict[str, int], weights: dict[str, float], default_weight: float = 1.0) -> float:
    """Tokens of one full pass over the weighted mix (``sum_s w_s T_s``)."""
    return float(sum(weights.get(s, default_weight) * t for s, t in pool_tokens.items()))


def mean_removed_exposure(stats: list[SourceStats], exposure: dict[str, float]) -> float:
    """Exposure of an average removed document (sources weighted by their removed-document count)."""
    n = sum(s.removed_docs for s in stats)
    if n == 0:
        return 0.0
    return sum(s.removed_docs * exposure[s.source] for s in stats) / n


def contaminated_share(stats: list[SourceStats], weights: dict[str, float], default_weight: float = 1.0) -> float:
    """Share of training tokens that belong to removed documents; independent of the budget."""
    total = mix_tokens({s.source: s.pool_tokens for s in stats}, weights, default_weight)
    removed = sum(weights.get(s.source, default_weight) * s.removed_tokens for s in stats)
    return removed / total if total > 0 else 0.0


# Production mix the `target_exposure` arm imitates (epochs per source, see module docstring).
DEFAULT_TARGET_WEIGHTS = {"math": 1.6, "instruct": 1.0, "code": 0.6, "other": 0.6, "web": 0.4}
DEFAULT_TARGET_WEIGHT_OTHER = 0.6  # any source not named above


@dataclass(frozen=True)
class TargetScale:
    """Production run whose per-document exposure the `target_exposure` arm reproduces.

    ``budget_tokens`` = 0 means the production run reads its mix exactly once
    (``B = sum_s w_s T_s``), so each source's exposure equals its weight.
    """

    weights: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_TARGET_WEIGHTS))
    default_weight: float = DEFAULT_TARGET_WEIGHT_OTHER
    budget_tokens: float = 0.0

    def exposure(self, pool_tokens: dict[str, int]) -> tuple[float, dict[str, float]]:
        budget = self.budget_tokens or mix_tokens(pool_tokens, self.weights, self.default_weight)
        return budget, exposure_per_source(pool_tokens, self.weights, budget, self.default_weight)


@dataclass(frozen=True)
class ExposureRow:
    source: str
    pool_docs: int
    pool_tokens: int
    removed_docs: int
    removed_tokens: int
    proxy_weight: float
    proxy_budget_tokens: float
    proxy_exposure: float
    target_weight: float
    target_budget_tokens: float
    target_exposure: float


def exposure_table(
    stats: list[SourceStats],
    proxy_budget_tokens: float,
    proxy_weights: dict[str, float] | None = None,
    target: TargetScale = TargetScale(),
    proxy_default_weight: float = 1.0,
) -> list[ExposureRow]:
    """Per source: exposure of a removed document in the proxy run and at target scale."""
    proxy_weights = proxy_weights or {}
    pool_tokens = {s.source: s.pool_tokens for s in stats}
    proxy = exposure_per_source(pool_tokens, proxy_weights, proxy_budget_tokens, proxy_default_weight)
    target_budget, tgt = target.exposure(pool_tokens)
    return [
        ExposureRow(
            source=s.source,
            pool_docs=s.pool_docs,
            pool_tokens=s.pool_tokens,
            removed_docs=s.removed_docs,
            removed_tokens=s.removed_tokens,
            proxy_weight=proxy_weights.get(s.source, proxy_default_weight),
            proxy_budget_tokens=float(proxy_budget_tokens),
            proxy_exposure=proxy[s.source],
            target_weight=target.weights.get(s.source, target.default_weight),
            target_budget_tokens=float(target_budget),
            target_exposure=tgt[s.source],
        )
        for s in sorted(stats, key=lambda s: s.source)
    ]


def unit_uniform(seed: int, *key: object) -> float:
    """A number in [0, 1) fixed by ``seed`` and ``key`` alone (not by iteration order)."""
    h = xxhash.xxh64_intdigest("\x1f".join(str(k) for k in key).encode("utf-8"), seed=seed & 0xFFFFFFFFFFFFFFFF)
    return (h >> 11) / float(1 << 53)


def copies_for(exposure: float, seed: int, *key: object) -> int:
    """Whole number of copies with expectation ``exposure``: floor plus a seeded Bernoulli draw."""
    if exposure < 0 or not math.isfinite(exposure):
        raise ValueError(f"exposure must be a finite number >= 0, got {exposure}")
    whole = math.floor(exposure)
    if whole == exposure:
        return whole
    return whole + (1 if unit_uniform(seed, *key) < exposure - whole else 0)
