"""Intervals clustered by day (serl_jax.metrics.inference), against plain loops and
closed forms."""

from __future__ import annotations

import datetime as dt
import math

import numpy as np
import pytest
from scipy import stats

from serl_jax.metrics import OrderOutcomes, compute_metrics, format_table, paired_difference
from serl_jax.metrics.inference import (
    CLUSTER_T,
    DAY_BOOTSTRAP,
    NO_INTERVAL,
    ORDER_BOOTSTRAP,
    Clustering,
    cluster_robust_mean,
    minimum_detectable_effect,
    proportion_interval,
    wilson_interval,
)

Z = 1.959964  # the standard normal 0.975 quantile


def _wilson(p, n, q=Z):
    """Wilson (1927) by hand: centre (p + q²/2n)/(1 + q²/n), half-width
    q/(1 + q²/n) · sqrt(p(1 - p)/n + q²/4n²)."""
    centre = (p + q**2 / (2 * n)) / (1 + q**2 / n)
    half = q / (1 + q**2 / n) * math.sqrt(p * (1 - p) / n + q**2 / (4 * n**2))
    return centre - half, centre + half


def _day_effect_data(n_days, per_day, day_sd, order_sd, seed=0):
    """Paired differences whose days share a common shock: ``[n]`` values and days."""
    rng = np.random.default_rng(seed)
    shock = rng.normal(0.0, day_sd, n_days)
    days = np.repeat([dt.date(2024, 1, 1) + dt.timedelta(d) for d in range(n_days)], per_day)
    values = np.repeat(shock, per_day) + rng.normal(0.0, order_sd, n_days * per_day)
    return values, days


def test_method_follows_the_number_of_days():
    assert Clustering.from_days(None, 5).method == ORDER_BOOTSTRAP
    assert Clustering.from_days(["a", "b", "c"], 3).method == ORDER_BOOTSTRAP  # one per day
    assert Clustering.from_days(["a"] * 2 + ["b"] * 2, 4).method == CLUSTER_T
    days = [d // 2 for d in range(40)]  # 20 days of 2 orders
    clustering = Clustering.from_days(days, 40)
    assert (clustering.method, clustering.n_clusters) == (DAY_BOOTSTRAP, 20)
    assert Clustering.from_days([d // 2 for d in range(38)], 38).method == CLUSTER_T  # 19
    assert Clustering.from_days(["a"] * 3, 3).method == NO_INTERVAL
    with pytest.raises(ValueError, match="2 day labels for 3 orders"):
        Clustering.from_days(["a", "b"], 3)


def test_day_bootstrap_matches_a_plain_loop_over_whole_days():
    rng = np.random.default_rng(3)
    n_days = 25
    sizes = rng.integers(1, 6, n_days)  # days of 1 to 5 orders
    days = np.repeat(np.arange(n_days), sizes)
    a, b = rng.normal(size=days.size), rng.normal(size=days.size)
    got = paired_difference(a, b, confidence=0.9, n_bootstrap=400, seed=11, days=days)
    draw = np.random.default_rng(11)
    means = []
    for _ in range(400):
        picked = draw.integers(0, n_days, size=n_days)
        orders = np.concatenate([np.flatnonzero(days == d) for d in picked])
        means.append(float(np.mean([a[i] - b[i] for i in orders])))
    low, high = np.quantile(means, [0.05, 0.95])
    assert (got.low, got.high) == (pytest.approx(low), pytest.approx(high))
    z = stats.norm.ppf(0.95) + stats.norm.ppf(0.8)
    assert got.mde == pytest.approx(z * np.std(means, ddof=1))


def test_clustering_widens_the_interval_when_days_share_a_shock():
    """30 days x 10 orders, day shock sd 3, order noise sd 1: the day-clustered interval is
    about sqrt(9 + 1/10) / sqrt(9.1 / 10) ~ 3.2 times the order bootstrap's, close to the
    normal interval of 30 day means."""
    values, days = _day_effect_data(30, 10, day_sd=3.0, order_sd=1.0, seed=1)
    zeros = np.zeros_like(values)
    by_day = paired_difference(values, zeros, n_bootstrap=4000, days=days)
    by_order = paired_difference(values, zeros, n_bootstrap=4000)
    assert (by_day.high - by_day.low) > 2.5 * (by_order.high - by_order.low)
    day_means = values.reshape(30, 10).mean(axis=1)
    half = 1.959964 * day_means.std(ddof=1) / math.sqrt(30)
    assert (by_day.high - by_day.low) / 2 == pytest.approx(half, rel=0.15)
    assert by_day.mde > 2.5 * by_order.mde


def test_one_order_per_day_gives_the_order_level_result():
    rng = np.random.default_rng(5)
    a, b = rng.normal(size=50), rng.normal(size=50)
    days = [dt.date(2020, 1, 1) + dt.timedelta(i) for i in range(50)]
    with_days = paired_difference(a, b, n_bootstrap=300, seed=2, days=days)
    without = paired_difference(a, b, n_bootstrap=300, seed=2)
    assert with_days == without
    m_days = compute_metrics(_orders(a), n_bootstrap=300, seed=2, days=days)
    m_plain = compute_metrics(_orders(a), n_bootstrap=300, seed=2)
    assert m_days.PA == m_plain.PA and m_days.GLR == m_plain.GLR
    assert m_days.interval == ORDER_BOOTSTRAP and m_days.n_days == 50


def test_cluster_robust_t_with_equal_days_is_the_t_interval_of_day_means():
    values, days = _day_effect_data(3, 100, day_sd=2.0, order_sd=5.0, seed=4)
    got = paired_difference(values, np.zeros_like(values), days=days)
    day_means = values.reshape(3, 100).mean(axis=1)
    low, high = stats.t.interval(
        0.95, 2, loc=day_means.mean(), scale=day_means.std(ddof=1) / math.sqrt(3)
    )
    assert (got.low, got.high) == (pytest.approx(low), pytest.approx(high))
    se = day_means.std(ddof=1) / math.sqrt(3)
    assert got.mde == pytest.approx((4.302653 + 1.060660) * se, rel=1e-6)


def test_cluster_robust_standard_error_by_hand_with_unequal_days():
    values = np.array([1.0, 2.0, 3.0, 10.0, -4.0, 0.5])
    days = ["d1", "d1", "d1", "d2", "d3", "d3"]
    mean, se = cluster_robust_mean(values, Clustering.from_days(days, 6))
    m = sum(values) / 6
    sums = [(1 - m) + (2 - m) + (3 - m), 10 - m, (-4 - m) + (0.5 - m)]
    assert mean == pytest.approx(m)
    assert se == pytest.approx(math.sqrt(3 / 2 * sum(s * s for s in sums) / 36))


def test_minimum_detectable_effect_closed_forms():
    # z_0.975 + z_0.80 = 1.959964 + 0.841621 = 2.801585
    assert minimum_detectable_effect(1.0) == pytest.approx(2.801585, rel=1e-6)
    assert minimum_detectable_effect(0.5) == pytest.approx(1.4007925, rel=1e-6)
    # t(2): 4.302653 + 1.060660
    assert minimum_detectable_effect(1.0, df=2) == pytest.approx(5.363313, rel=1e-6)
    # 90% two-sided, 90% power: 1.644854 + 1.281552
    assert minimum_detectable_effect(2.0, 0.9, 0.9) == pytest.approx(2 * 2.926405, rel=1e-6)
    with pytest.raises(ValueError):
        minimum_detectable_effect(1.0, power=1.0)


def _orders(pa_bps, executed=None):
    """Sell orders of 100 shares whose PA against a benchmark of 100 is ``pa_bps``."""
    pa = np.asarray(pa_bps, np.float64)
    n = pa.size
    executed = np.full(n, 100.0) if executed is None else np.asarray(executed, np.float64)
    price = 100.0 * (1.0 + pa / 1e4)
    return OrderOutcomes(
        side=np.ones(n),
        quantity=np.full(n, 100.0),
        executed=executed,
        notional=executed * price,
        benchmark=np.full(n, 100.0),
    )


def test_metrics_with_few_days_use_cluster_robust_t_for_means_only():
    pa = np.array([3.0, -1.0, 2.0, -2.0, 5.0, 1.0])
    executed = np.array([100.0, 80.0, 100.0, 100.0, 50.0, 100.0])
    days = ["a", "a", "b", "b", "c", "c"]
    m = compute_metrics(_orders(pa, executed), days=days)
    assert (m.interval, m.n_days) == (CLUSTER_T, 3)
    clustering = Clustering.from_days(days, 6)
    for name, per_order in (("PA", pa), ("AFI", (100.0 - executed) / 100.0)):
        mean, se = cluster_robust_mean(per_order, clustering)
        half = stats.t.ppf(0.975, 2) * se
        est = getattr(m, name)
        assert est.value == pytest.approx(mean)
        assert (est.low, est.high) == (pytest.approx(mean - half), pytest.approx(mean + half))
    # WR, 4 wins of 6: days a, b win 1 of 2, day c 2 of 2; the day sums of x - 2/3 are
    # -1/3, -1/3, 2/3, so SE_CR² = 3/2 · (2/3) / 36 = 1/36 and deff = (1/36) / ((2/9) / 6)
    # = 0.75 < 1: n_eff stays 6, and the Wilson interval takes t(2)
    p, n, q = 4 / 6, 6, stats.t.ppf(0.975, 2)
    centre = (p + q**2 / (2 * n)) / (1 + q**2 / n)
    half = q / (1 + q**2 / n) * math.sqrt(p * (1 - p) / n + q**2 / (4 * n**2))
    assert (m.WR.low, m.WR.high) == (pytest.approx(centre - half), pytest.approx(centre + half))
    assert math.isnan(m.PA_std.low) and math.isnan(m.GLR.high)
    assert m.to_dict()["interval"] == {"method": CLUSTER_T, "days": 3, "confidence": 0.95}
    one_day = compute_metrics(_orders(pa), days=["x"] * 6, twap=_orders(np.zeros(6)))
    assert one_day.interval == NO_INTERVAL and math.isnan(one_day.vs_TWAP.low)


def test_metrics_day_bootstrap_weights_match_concatenated_resamples():
    rng = np.random.default_rng(8)
    n_days = 22
    days = np.repeat(np.arange(n_days), 3)
    pa = rng.normal(size=days.size) * 4
    m = compute_metrics(_orders(pa), confidence=0.8, n_bootstrap=200, seed=9, days=days)
    draw = np.random.default_rng(9)
    stds = []
    for _ in range(200):
        picked = draw.integers(0, n_days, size=n_days)
        sample = np.concatenate([pa[days == d] for d in picked])
        stds.append(sample.std(ddof=1))
    assert (m.PA_std.low, m.PA_std.high) == tuple(
        pytest.approx(q) for q in np.quantile(stds, [0.1, 0.9])
    )


def test_table_footer_names_the_method_and_the_days():
    values, days = _day_effect_data(3, 4, 1.0, 1.0)
    policy = compute_metrics(_orders(values), days=days, twap=_orders(np.zeros(12)))
    text = format_table({("xsec", "PPO"): policy}, wide=True)
    assert "cluster-robust t interval by day (G = 3 days, 2 df" in text
    assert f"{policy.vs_TWAP.mde:.2f}" in text.splitlines()[2]


# --------------------------------------------------------------------------------------
# WR: Wilson score intervals
# --------------------------------------------------------------------------------------


def test_wilson_interval_matches_the_hand_formula_and_the_score_test():
    low, high = wilson_interval(3 / 40, 40)
    assert (low, high) == tuple(pytest.approx(x, rel=1e-6) for x in _wilson(3 / 40, 40))
    # independently: the ends are the roots of (1 + z²/n) π² - (2p + z²/n) π + p² = 0,
    # the π where the score test (p - π)² = z² π (1 - π) / n is an equality
    roots = np.sort(np.roots([1 + Z**2 / 40, -(2 * 3 / 40 + Z**2 / 40), (3 / 40) ** 2]).real)
    assert (low, high) == tuple(pytest.approx(r, rel=1e-6) for r in roots)
    # the example the Wald-type interval got wrong: 0.075 [-0.011, 0.161]
    assert 0.0 < low < 3 / 40 < high < 1.0
    # with df, Student's t in place of z
    q = stats.t.ppf(0.975, 4)
    assert wilson_interval(0.25, 12.5, df=4) == tuple(
        pytest.approx(x) for x in _wilson(0.25, 12.5, q)
    )


@pytest.mark.parametrize("n", [1, 7, 40, 1000])
def test_wilson_interval_stays_in_the_unit_interval_at_zero_and_one(n):
    low, high = wilson_interval(0.0, n)
    assert low == 0.0 and high == pytest.approx(Z**2 / (n + Z**2), rel=1e-6)
    low, high = wilson_interval(1.0, n)
    assert high == 1.0 and low == pytest.approx(n / (n + Z**2), rel=1e-6)
    for p in (0.0, 1 / n, 0.5, 1.0):
        low, high = wilson_interval(p, n, confidence=0.99)
        assert 0.0 <= low <= p <= high <= 1.0


@pytest.mark.parametrize(
    "args, message",
    [((1.5, 10), "proportion p"), ((0.5, 0), "number of trials n"), ((0.5, 10, 1.0), "confidence")],
)
def test_wilson_interval_rejects_bad_input(args, message):
    with pytest.raises(ValueError, match=message):
        wilson_interval(*args)


def test_proportion_interval_uses_the_days_effective_sample_size():
    """4 days of 5 orders with 5, 4, 0 and 1 wins: p = 1/2, the day sums of x - p are
    2.5, 1.5, -2.5, -1.5, so SE_CR² = 4/3 · 17 / 400 and deff = SE_CR² / (p(1-p)/20)
    = 4.533: n_eff = 20 / deff = 4.41 orders' worth, with t(3)."""
    wins = np.array([1] * 5 + [1, 1, 1, 1, 0] + [0] * 5 + [1, 0, 0, 0, 0], bool)
    days = np.repeat(["a", "b", "c", "d"], 5)
    se2 = 4 / 3 * 17 / 400
    n_eff = 0.25 / se2
    assert n_eff == pytest.approx(20 / 4.5333, rel=1e-4)
    expected = _wilson(0.5, n_eff, stats.t.ppf(0.975, 3))
    clustering = Clustering.from_days(days, 20)
    assert proportion_interval(wins, clustering) == tuple(pytest.approx(x) for x in expected)
    # wider than the independent orders' interval, which the same wins without days get
    plain = proportion_interval(wins, Clustering.from_days(None, 20))
    assert plain == tuple(pytest.approx(x, rel=1e-6) for x in _wilson(0.5, 20))
    assert expected[1] - expected[0] > plain[1] - plain[0]
    # compute_metrics gives WR this interval (cluster-robust t method: 4 days)
    pa = np.where(wins, 2.0, -1.0)
    m = compute_metrics(_orders(pa), days=days)
    assert m.interval == CLUSTER_T
    assert (m.WR.low, m.WR.high) == tuple(pytest.approx(x) for x in expected)


def test_proportion_interval_when_every_order_lost_or_on_one_day():
    days = np.repeat(["a", "b", "c"], 4)
    # every order lost: SE_CR = 0, deff taken as 1, n = 12 with t(2); not a point at 0
    low, high = proportion_interval(np.zeros(12), Clustering.from_days(days, 12))
    q = stats.t.ppf(0.975, 2)
    assert low == 0.0 and high == pytest.approx(q**2 / (12 + q**2))
    one_day = proportion_interval(np.ones(5), Clustering.from_days(["x"] * 5, 5))
    assert all(math.isnan(x) for x in one_day)
    with pytest.raises(ValueError, match="values of 0 or 1"):
        proportion_interval(np.full(12, 0.5), Clustering.from_days(days, 12))
