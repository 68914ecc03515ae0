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
)


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
    for name, per_order in (
        ("PA", pa),
        ("WR", (pa > 0).astype(float)),
        ("AFI", (100.0 - executed) / 100.0),
    ):
        mean, se = cluster_robust_mean(per_order, clustering)
        half = stats.t.ppf(0.975, 2) * se
        est = getattr(m, name)
        assert est.value == pytest.approx(mean)
        assert (est.low, est.high) == (pytest.approx(mean - half), pytest.approx(mean + half))
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
    stds, wrs = [], []
    for _ in range(200):
        picked = draw.integers(0, n_days, size=n_days)
        sample = np.concatenate([pa[days == d] for d in picked])
        stds.append(sample.std(ddof=1))
        wrs.append((sample > 0).mean())
    assert (m.PA_std.low, m.PA_std.high) == tuple(
        pytest.approx(q) for q in np.quantile(stds, [0.1, 0.9])
    )
    assert (m.WR.low, m.WR.high) == tuple(pytest.approx(q) for q in np.quantile(wrs, [0.1, 0.9]))


def test_table_footer_names_the_method_and_the_days():
    values, days = _day_effect_data(3, 4, 1.0, 1.0)
    policy = compute_metrics(_orders(values), days=days, twap=_orders(np.zeros(12)))
    text = format_table({("xsec", "PPO"): policy})
    assert "cluster-robust t interval by day (G = 3 days, 2 df" in text
    assert f"{policy.vs_TWAP.mde:.2f}" in text.splitlines()[2]
