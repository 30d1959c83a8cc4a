"""Exposure (seed 003): hand-computed cases, budget scaling, target scale, fractional copies."""

import math

import pytest

from contam_assets.model.arms.exposure import (
    SourceStats,
    TargetScale,
    contaminated_share,
    copies_for,
    exposure_per_source,
    exposure_table,
    mean_removed_exposure,
    parse_weights,
    weights_from_shares,
)

POOL = {"web": 500, "math": 100, "code": 200}


def test_natural_weights_every_source_read_budget_over_pool_times():
    # 800 pool tokens, 80-token budget: every document is read 0.1 times.
    e = exposure_per_source(POOL, {}, 80)
    assert e == pytest.approx({"web": 0.1, "math": 0.1, "code": 0.1})


def test_hand_computed_upsampled_source():
    # weighted mix = 500*1 + 100*3 + 200*1 = 1,000 tokens; a 2,000-token run reads it twice,
    # and the math source (weight 3) three times per pass.
    e = exposure_per_source(POOL, {"math": 3}, 2000)
    assert e == pytest.approx({"web": 2.0, "math": 6.0, "code": 2.0})


def test_exposure_grows_with_budget_while_contaminated_share_does_not():
    stats = [SourceStats("web", 10, 500, 1, 50), SourceStats("math", 5, 100, 2, 40), SourceStats("code", 4, 200, 0, 0)]
    small = exposure_per_source(POOL, {"math": 2}, 90)
    big = exposure_per_source(POOL, {"math": 2}, 9000)
    for s in POOL:
        assert big[s] == pytest.approx(100 * small[s])
    # removed tokens 50*1 + 40*2 = 130 of 500 + 200 + 200 = 900 weighted tokens, at any budget
    assert contaminated_share(stats, {"math": 2}) == pytest.approx(130 / 900)


def test_weights_from_shares_give_the_requested_token_shares():
    shares = {"web": 0.5, "math": 0.3, "code": 0.2}
    w = weights_from_shares(shares, POOL)
    budget = 10_000
    e = exposure_per_source(POOL, w, budget)
    # tokens read from each source = exposure x source size = share x budget
    for s, p in shares.items():
        assert e[s] * POOL[s] == pytest.approx(p * budget)
    with pytest.raises(ValueError, match="no tokens"):
        weights_from_shares({"legal": 0.1}, POOL)


def test_mean_removed_exposure_weights_sources_by_removed_count():
    stats = [SourceStats("web", 10, 500, 1, 50), SourceStats("math", 5, 100, 3, 40)]
    assert mean_removed_exposure(stats, {"web": 0.5, "math": 2.0}) == pytest.approx((1 * 0.5 + 3 * 2.0) / 4)
    assert mean_removed_exposure([SourceStats("web", 1, 1)], {"web": 3.0}) == 0.0


def test_target_scale_defaults_to_one_pass_over_the_production_mix():
    target = TargetScale(weights={"math": 1.6, "web": 0.4}, default_weight=0.6)
    budget, e = target.exposure(POOL)
    assert budget == pytest.approx(500 * 0.4 + 100 * 1.6 + 200 * 0.6)
    assert e == pytest.approx({"web": 0.4, "math": 1.6, "code": 0.6})
    # an explicit production budget of twice that pass doubles every exposure
    _, e2 = TargetScale(weights={"math": 1.6, "web": 0.4}, default_weight=0.6, budget_tokens=2 * budget).exposure(POOL)
    assert e2 == pytest.approx({"web": 0.8, "math": 3.2, "code": 1.2})


def test_exposure_table_rows():
    stats = [SourceStats("math", 5, 100, 2, 40), SourceStats("web", 10, 500, 1, 50), SourceStats("code", 4, 200, 0, 0)]
    rows = exposure_table(stats, 400, {}, TargetScale(weights={"math": 2.0}, default_weight=0.5))
    by = {r.source: r for r in rows}
    assert [r.source for r in rows] == ["code", "math", "web"]
    assert by["math"].proxy_exposure == pytest.approx(0.5)
    assert by["math"].target_exposure == pytest.approx(2.0)
    assert by["web"].target_exposure == pytest.approx(0.5)
    assert by["web"].removed_docs == 1 and by["math"].removed_tokens == 40


def test_empty_mix_is_an_error():
    with pytest.raises(ValueError, match="empty"):
        exposure_per_source({"web": 100}, {"web": 0}, 10)


def test_parse_weights():
    assert parse_weights("math=2, web=0.5") == {"math": 2.0, "web": 0.5}
    assert parse_weights("") == {}
    for bad in ("math", "math=x", "math=-1", "math=inf"):
        with pytest.raises(ValueError):
            parse_weights(bad)


def test_copies_whole_and_fractional():
    assert {copies_for(2.0, 7, "s", i) for i in range(100)} == {2}
    assert {copies_for(0.0, 7, "s", i) for i in range(100)} == {0}
    draws = [copies_for(2.3, 7, "shard", i) for i in range(20_000)]
    assert set(draws) == {2, 3}
    assert sum(draws) / len(draws) == pytest.approx(2.3, abs=0.02)
    # fixed by seed and key, not by call order
    assert [copies_for(0.5, 1, "a", i) for i in range(50)] == [copies_for(0.5, 1, "a", i) for i in range(50)]
    assert [copies_for(0.5, 1, "a", i) for i in range(50)] != [copies_for(0.5, 2, "a", i) for i in range(50)]
    with pytest.raises(ValueError):
        copies_for(math.nan, 0, "x")
