"""Estimators for a pool from a stratified sample of whole units (pure: numpy and scipy only).

The sample is described by a :class:`Design`: the stratum of each sampled unit and each stratum's
number of units in the pool (N_h).  Per-unit values come in as arrays, one row per sampled unit.

- Totals (documents removed or held, their tokens, copies of benchmark items): the Horvitz-Thompson
  (expansion) estimator, sum over units of (N_h / n_h) * y.  Its interval: percentiles of a Rao-Wu
  rescaled bootstrap over the sampled units within their strata (m_h = n_h - 1 draws, weights rescaled
  by sqrt(1 - f_h): the design's variance with its finite-population correction, so at F = 1 the
  interval has no width), widened where needed to the textbook interval of the design (the expansion total
  plus or minus Student's t times its stratified SRSWOR standard error, df = n - H): a bootstrap of a few
  units per stratum alone is too narrow.  The sampled units are clusters, never single documents.  A bootstrap cannot
  see contaminated units the sample missed, so the upper bound is at least the estimate plus the units
  that may hold contamination unseen — the hypergeometric 97.5 % bound on contaminated units given the
  k seen among the n sampled of N, less those the estimate already counts — each at the mean value of
  the contaminated units seen (at least ``floor``).  The lower bound is at least what the sample holds.
- Share of benchmark items present at least once in the pool: the sampled units are the sampling
  occasions of an incidence-based richness estimator, each item's frequency the number of sampled units
  that hold it.  Chao2 for sampling without replacement (Chao & Lin 2012, Biometrics 68: the
  q/(1 - q) * Q1 term in the denominator; at q = 1 it gives the observed count exactly), bias-corrected
  when Q2 = 0; capped by the benchmark's number of items.  Interval: Chao's log-normal interval for the
  unseen part, with the larger of Chao's variance formula (Q2 taken as at least 1) and the variance of a
  stratified unit bootstrap, finite-population corrected (1 - n/N); its upper bound at least the observed
  items plus, as for totals, the units that may hold items unseen, each with the mean number of items of the
  units seen holding any (one when none was seen), and at least the upper bound of the copies of the items
  (``copies_high``): every item present has a copy, and which of the copies the sample missed are of items it
  saw cannot be told from the sample (a heavy tail of items quoted once is invisible to Chao2, a lower-bound
  estimator).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LEVEL = 0.95
ALPHA = (1.0 - LEVEL) / 2
Z = 1.959963984540054
REPLICATES = 1000


@dataclass(frozen=True)
class Design:
    strata: np.ndarray  # (n,) stratum index of each sampled unit
    pool_units: np.ndarray  # (H,) N_h: units of each stratum in the pool

    @classmethod
    def of(cls, unit_strata: list[str], pool_units: dict[str, int]) -> "Design":
        names = sorted(pool_units)
        pos = {s: i for i, s in enumerate(names)}
        return cls(np.array([pos[s] for s in unit_strata], dtype=np.int64),
                   np.array([pool_units[s] for s in names], dtype=np.int64))

    @property
    def n(self) -> int:
        return int(self.strata.size)

    @property
    def N(self) -> int:
        return int(self.pool_units.sum())

    @property
    def sampled(self) -> np.ndarray:
        return np.bincount(self.strata, minlength=self.pool_units.size)

    @property
    def weights(self) -> np.ndarray:
        """N_h / n_h for each sampled unit (its inverse inclusion probability)."""
        n_h = self.sampled
        return (self.pool_units / np.maximum(n_h, 1))[self.strata].astype(float)


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float

    def to_dict(self, digits: int = 6) -> dict:
        return {"estimate": round(float(self.estimate), digits), "low": round(float(self.low), digits),
                "high": round(float(self.high), digits)}

    def scaled(self, factor: float) -> "Interval":
        return Interval(self.estimate * factor, self.low * factor, self.high * factor)


def rao_wu_weights(design: Design, replicates: int = REPLICATES, seed: int = 0) -> np.ndarray:
    """(replicates, n) bootstrap weights: Rao-Wu rescaling with m_h = n_h - 1 draws in each stratum; a stratum of one
    sampled unit keeps its weight (it has no variance estimate)."""
    rng = np.random.default_rng(seed)
    w = design.weights
    out = np.tile(w, (replicates, 1))
    n_h, N_h = design.sampled, design.pool_units
    for h in range(N_h.size):
        idx = np.flatnonzero(design.strata == h)
        if idx.size < 2:
            continue
        m = idx.size - 1
        lam = np.sqrt(max(0.0, 1.0 - n_h[h] / N_h[h]))
        counts = rng.multinomial(m, np.full(idx.size, 1.0 / idx.size), size=replicates)
        out[:, idx] = w[idx] * (1.0 - lam + lam * (idx.size / m) * counts)
    return out


def positives_upper(k: int, n: int, N: int, alpha: float = ALPHA) -> int:
    """The largest number K of pool units holding something for which seeing k or fewer among n units drawn without
    replacement from N still has probability >= alpha (an exact one-sided bound; K = k when n = N)."""
    if n >= N:
        return int(k)
    from scipy.stats import hypergeom  # here, not at the top: every load of the Dagster definitions imports this module

    K = np.arange(k, N - (n - k) + 1)
    ok = K[hypergeom.cdf(k, N, K, n) >= alpha]
    return int(ok.max()) if ok.size else int(k)


def design_se(design: Design, y: np.ndarray) -> tuple[float, int]:
    """The standard error of the expansion total under stratified SRSWOR (sum of N_h^2 (1 - f_h) s_h^2 / n_h) and its
    degrees of freedom (units in strata of two or more, less those strata)."""
    var, df = 0.0, 0
    for h in range(design.pool_units.size):
        v = y[design.strata == h]
        if v.size < 2:
            continue
        N_h = float(design.pool_units[h])
        var += N_h * N_h * (1 - v.size / N_h) * float(v.var(ddof=1)) / v.size
        df += v.size - 1
    return float(np.sqrt(var)), df


def total(design: Design, y: np.ndarray, boot: np.ndarray, floor: float = 1.0, cap: float | None = None) -> Interval:
    """The pool total of a per-unit value ``y`` (see the module's description); ``boot`` from `rao_wu_weights`."""
    y = np.asarray(y, dtype=float)
    observed = float(y.sum())
    est = float(design.weights @ y)
    if design.n == 0:
        return Interval(0.0, 0.0, float(cap) if cap is not None else float("inf"))
    reps = boot @ y
    lo, hi = (float(v) for v in np.quantile(reps, [ALPHA, 1 - ALPHA]))
    se, df = design_se(design, y)
    if df > 0:  # the textbook interval too: a bootstrap of few units per stratum is too narrow on its own
        from scipy.stats import t as student_t

        q = float(student_t.ppf(1 - ALPHA, df))
        lo, hi = min(lo, est - q * se), max(hi, est + q * se)
    positive = y > 0
    k = int(positive.sum())
    k_hi = positives_upper(k, design.n, design.N)
    k_hat = float(design.weights @ positive)
    typical = max(floor, float(y[positive].mean())) if k else floor
    hi = max(hi, est, est + max(0.0, k_hi - k_hat) * typical)
    lo = max(min(lo, est), observed)
    if cap is not None:
        hi = min(hi, max(float(cap), est))
    return Interval(est, lo, hi)


def chao2_wor(freq: np.ndarray, n: int, N: int) -> float:
    """Items in the pool from their incidence frequencies in n of N units drawn without replacement
    (Chao & Lin 2012; bias-corrected form when no item was seen exactly twice)."""
    freq = np.asarray(freq)
    s_obs = float((freq > 0).sum())
    if n >= N or s_obs == 0:
        return s_obs
    q1, q2 = float((freq == 1).sum()), float((freq == 2).sum())
    q = n / N
    a = n / (n - 1) if n > 1 else 1.0
    if q2 > 0:
        return s_obs + q1 * q1 / (a * 2 * q2 + q / (1 - q) * q1)
    return s_obs + q1 * max(q1 - 1, 0) / (a * 2 * (q2 + 1) + q / (1 - q) * q1)


def chao2_variance(freq: np.ndarray, n: int) -> float:
    """Chao's (1987) variance of the estimate from Q1 and Q2 (Q2 taken as at least 1), A = (n - 1) / n."""
    freq = np.asarray(freq)
    q1, q2 = float((freq == 1).sum()), max(1.0, float((freq == 2).sum()))
    a, r = (n - 1) / n if n > 1 else 1.0, q1 / q2
    return q2 * (0.5 * a * r ** 2 + a * a * r ** 3 + 0.25 * a * a * r ** 4)


def _frequencies(incidence: list[np.ndarray], chosen: np.ndarray, n_items: int) -> np.ndarray:
    parts = [incidence[i] for i in chosen if incidence[i].size]
    return np.bincount(np.concatenate(parts), minlength=n_items) if parts else np.zeros(n_items, dtype=np.int64)


def items_present(design: Design, incidence: list[np.ndarray], n_items: int, replicates: int = REPLICATES,
                  seed: int = 0, copies_high: float | None = None) -> Interval:
    """Items (0 .. n_items-1) present at least once in the pool, from the items each sampled unit holds
    (``incidence[i]``: the distinct item ids of unit i); ``copies_high``: the upper bound of the pool's copies of
    the items.  See the module's description."""
    if n_items <= 0:
        return Interval(0.0, 0.0, 0.0)
    n, N = design.n, design.N
    if n == 0:
        return Interval(0.0, 0.0, float(n_items))
    freq = _frequencies(incidence, np.arange(n), n_items)
    s_obs = float((freq > 0).sum())
    est = min(float(n_items), chao2_wor(freq, n, N))
    if n >= N:
        return Interval(s_obs, s_obs, s_obs)
    rng = np.random.default_rng(seed)
    groups = [np.flatnonzero(design.strata == h) for h in range(design.pool_units.size)]
    reps = np.empty(replicates)
    for b in range(replicates):
        chosen = np.concatenate([rng.choice(g, size=g.size, replace=True) for g in groups if g.size])
        reps[b] = min(float(n_items), chao2_wor(_frequencies(incidence, chosen, n_items), n, N))
    var = max(float(reps.var(ddof=1)), chao2_variance(freq, n)) * (1.0 - n / N)
    unseen = est - s_obs
    if unseen > 0 and var > 0:
        c = float(np.exp(Z * np.sqrt(np.log1p(var / unseen ** 2))))
        lo, hi = s_obs + unseen / c, s_obs + unseen * c
    else:
        lo, hi = s_obs, est + Z * np.sqrt(var)
    holding = np.array([a.size for a in incidence])
    k = int((holding > 0).sum())
    k_hat = float(design.weights @ (holding > 0))
    typical = float(holding[holding > 0].mean()) if k else 1.0
    # units that may hold items unseen (as for totals), each with as many new items as a unit seen holds
    hi = max(hi, s_obs + max(0.0, positives_upper(k, n, N) - k_hat) * typical)
    if copies_high is not None:
        hi = max(hi, copies_high)
    return Interval(est, max(s_obs, min(lo, est)), min(float(n_items), max(hi, est)))
