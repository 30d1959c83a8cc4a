"""The estimation module on synthetic per-unit data (pure, fast): the design, totals, Chao2 and their intervals."""

from __future__ import annotations

import numpy as np
import pytest

from contam_assets.estimate.design import PoolUnit, allocation, check_fraction, stratified_sample
from contam_assets.estimate.estimators import (
    Design,
    chao2_wor,
    items_present,
    positives_upper,
    rao_wu_weights,
    total,
)


def units(n_per: dict[str, int]) -> list[PoolUnit]:
    return [PoolUnit(f"{s}/u{i:04d}", f"{s}/u{i:04d}", s, 100) for s, n in n_per.items() for i in range(n)]


def design_of(sample_units: list[PoolUnit], pool: dict[str, int]) -> Design:
    return Design.of([u.stratum for u in sample_units], pool)


def test_the_sample_is_seeded_stratified_and_whole_at_fraction_one():
    pool = units({"web": 100, "code": 40, "math": 3})
    a, b = stratified_sample(pool, 0.1, seed=7), stratified_sample(pool, 0.1, seed=7)
    assert [u.key for u in a.units] == [u.key for u in b.units]
    assert [u.key for u in stratified_sample(pool, 0.1, seed=8).units] != [u.key for u in a.units]
    per = {s: sum(u.stratum == s for u in a.units) for s in a.pool_units}
    assert per == {"web": 10, "code": 4, "math": 1}  # every stratum sampled, n_h = max(1, round(F N_h))
    assert len(stratified_sample(pool, 1.0).units) == len(pool)
    assert allocation(1, 0.026) == 1 and allocation(1000, 0.026) == 26


@pytest.mark.parametrize("bad", [0, -0.1, 1.01, float("nan")])
def test_a_fraction_outside_0_1_is_refused(bad):
    with pytest.raises(ValueError, match="fraction"):
        check_fraction(bad)


def test_an_empty_pool_is_refused():
    with pytest.raises(ValueError, match="empty pool"):
        stratified_sample([], 0.5)


def test_fraction_one_gives_the_population_total_with_no_width():
    rng = np.random.default_rng(0)
    y = rng.poisson(0.3, 50) * rng.integers(1, 40, 50)
    d = Design.of(["a"] * 30 + ["b"] * 20, {"a": 30, "b": 20})
    iv = total(d, y, rao_wu_weights(d, 200))
    assert iv.estimate == iv.low == iv.high == y.sum()


def test_no_contamination_gives_zero_and_an_interval_from_zero():
    d = Design.of(["a"] * 5, {"a": 200})
    iv = total(d, np.zeros(5), rao_wu_weights(d, 200))
    assert iv.estimate == 0 and iv.low == 0 and iv.high > 0  # 0 of 5 units rules out only so many contaminated ones
    assert iv.high == positives_upper(0, 5, 200)


def test_an_empty_sample_estimates_nothing_and_bounds_nothing():
    d = Design.of([], {"a": 10})
    iv = total(d, np.zeros(0), rao_wu_weights(d, 10))
    assert (iv.estimate, iv.low) == (0, 0) and iv.high == float("inf")
    share = items_present(d, [], 50)
    assert (share.estimate, share.low, share.high) == (0, 0, 50)


def test_a_single_unit_pool_is_read_whole():
    d = Design.of(["a"], {"a": 1})
    assert total(d, np.array([7.0]), rao_wu_weights(d, 50)) .__dict__ == {"estimate": 7.0, "low": 7.0, "high": 7.0}
    assert items_present(d, [np.array([1, 2])], 10).estimate == 2


def test_the_lower_bound_is_never_below_what_the_sample_holds():
    d = Design.of(["a"] * 4, {"a": 400})
    y = np.array([0, 0, 0, 9.0])
    iv = total(d, y, rao_wu_weights(d, 500))
    assert iv.low >= 9 and iv.estimate == 900 and iv.high >= iv.estimate


def test_positives_upper_is_the_exact_hypergeometric_bound():
    from scipy.stats import hypergeom

    k_hi = positives_upper(2, 20, 500)
    assert hypergeom.cdf(2, 500, k_hi, 20) >= 0.025 > hypergeom.cdf(2, 500, k_hi + 1, 20)
    assert positives_upper(3, 10, 10) == 3


def test_chao2_without_replacement_by_hand():
    freq = np.array([1, 1, 1, 2, 2, 5])  # Q1 = 3, Q2 = 2, S_obs = 6, n = 10 of N = 100
    q = 0.1
    expected = 6 + 9 / ((10 / 9) * 2 * 2 + q / (1 - q) * 3)
    assert chao2_wor(freq, 10, 100) == pytest.approx(expected)
    assert chao2_wor(freq, 100, 100) == 6  # the whole pool: what is seen is all there is
    assert chao2_wor(np.array([1, 1, 3]), 10, 100) == pytest.approx(3 + 2 * 1 / ((10 / 9) * 2 + q / (1 - q) * 2))


def population(seed: int, n_units=600, n_items=300):
    """Per-unit removed documents (a background rate, and a tenth of the units ten times as contaminated) and the
    items each unit holds."""
    rng = np.random.default_rng(seed)
    y = rng.binomial(40, 0.005, n_units).astype(float)
    hot = rng.choice(n_units, n_units // 10, replace=False)
    y[hot] += rng.binomial(40, 0.05, hot.size)
    pop = 1 + rng.geometric(1 / 12, n_items)  # copies per item: seed 003's "~12 copies per item", some far more
    present = rng.random(n_items) < 0.7
    inc = [[] for _ in range(n_units)]
    for item in np.flatnonzero(present):
        for u in rng.choice(n_units, min(n_units, int(pop[item])), replace=False):
            inc[u].append(item)
    return y, [np.unique(np.array(i, dtype=np.int64)) for i in inc], int(present.sum())


def test_intervals_cover_a_planted_population_at_2_6_percent():
    y, inc, present = population(3)
    pool = units({"a": 400, "b": 200})
    cover_total = cover_share = 0
    runs = 60
    for seed in range(runs):
        s = stratified_sample(pool, 0.026, seed)
        idx = np.array([int(u.key.split("u")[-1]) + (0 if u.stratum == "a" else 400) for u in s.units])
        d = design_of(s.units, s.pool_units)
        iv = total(d, y[idx], rao_wu_weights(d, 300, seed))
        sh = items_present(d, [inc[i] for i in idx], 300, 200, seed)
        cover_total += iv.low <= y.sum() <= iv.high
        cover_share += sh.low <= present <= sh.high
    assert cover_total / runs >= 0.85 and cover_share / runs >= 0.8, (cover_total, cover_share)


def test_the_expansion_estimator_is_unbiased_over_samples():
    y, _, _ = population(4)
    pool = units({"a": 600})
    est = []
    for seed in range(300):
        s = stratified_sample(pool, 0.05, seed)
        idx = np.array([int(u.key.split("u")[-1]) for u in s.units])
        est.append(Design.of(["a"] * idx.size, {"a": 600}).weights @ y[idx])
    assert np.mean(est) == pytest.approx(y.sum(), rel=0.08)


def test_a_pool_of_few_shards_is_sampled_in_blocks_that_tile_every_shard(tmp_path):
    """auto: whole shards when the sample holds MIN_UNITS of them (or all), else blocks; JSON/JSONL blocks tile their
    shard's bytes, a Parquet shard gives its row groups, a compressed shard stays whole."""
    import gzip

    import pyarrow as pa
    import pyarrow.parquet as pq

    from contam_assets.estimate.design import MIN_UNITS, choose_units

    (tmp_path / "web").mkdir()
    paths = {}
    for i in range(3):
        paths[f"web/p{i}.jsonl"] = tmp_path / "web" / f"p{i}.jsonl"
        paths[f"web/p{i}.jsonl"].write_text("".join(f'{{"text": "doc {i} {j} {"x" * j}"}}\n' for j in range(200)))
    paths["web/z.jsonl.gz"] = tmp_path / "web" / "z.jsonl.gz"
    paths["web/z.jsonl.gz"].write_bytes(gzip.compress(b'{"text": "a"}\n' * 100))
    paths["t.parquet"] = tmp_path / "t.parquet"
    pq.write_table(pa.table({"text": [f"row {i}" for i in range(1000)]}), paths["t.parquet"], row_group_size=100)
    shards = sorted(paths)
    units_, kind, block = choose_units(shards, paths, 1.0)
    assert kind == "shard" and [u.key for u in units_] == shards  # F = 1: the whole pool, reused by a full run
    units_, kind, block = choose_units(shards, paths, 0.1)
    assert kind == "block" and block >= 512
    for s in shards[1:4]:
        mine = [u for u in units_ if u.shard == s]
        assert [(u.start, u.end) for u in mine] == [(k, min(k + block, paths[s].stat().st_size))
                                                    for k in range(0, paths[s].stat().st_size, block)]
    assert [u.start for u in units_ if u.shard == "t.parquet"] == list(range(10))
    assert [u.key for u in units_ if u.shard == "web/z.jsonl.gz"] == ["web/z.jsonl.gz"]
    assert choose_units(shards, paths, 0.1, unit="shard")[1] == "shard"
    many = {f"s{i:04d}.jsonl": paths["web/p0.jsonl"] for i in range(int(MIN_UNITS / 0.1))}
    assert choose_units(sorted(many), many, 0.1)[1] == "shard"  # 100 shards in the sample: whole shards
    with pytest.raises(ValueError, match="unit"):
        choose_units(shards, paths, 0.1, unit="rows")


def test_the_share_of_items_present_is_bounded_above_by_the_copies():
    """A heavy tail of items quoted once is invisible to Chao2; the upper bound is at least the copies' upper bound."""
    d = Design.of(["a"] * 10, {"a": 1000})
    incidence = [np.array([0])] * 6 + [np.array([1])] * 2 + [np.empty(0, dtype=np.int64)] * 2
    plain = items_present(d, incidence, 500, replicates=50)
    bounded = items_present(d, incidence, 500, replicates=50, copies_high=400.0)
    assert plain.high < 400 and bounded.high == 400 and bounded.estimate == plain.estimate
    census = Design.of(["a"] * 10, {"a": 10})
    assert items_present(census, incidence, 500, copies_high=400.0).high == 2  # a census has no width
