"""Execution metrics: hand-computed PA/WR/GLR/AFI, bootstrap intervals, JSON, validation."""

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from serl_jax.metrics import (
    Estimate,
    ExecutionMetrics,
    OrderOutcomes,
    compute_metrics,
    format_table,
    paired_difference,
    price_advantage,
    shortfall,
    timing_advantage,
    twap,
    vwap,
)


def _orders(side, avg_price, benchmark, quantity=100.0, executed=None):
    """Orders with the given average execution prices (fully filled unless ``executed``)."""
    side = np.asarray(side, dtype=float)
    n = side.shape[0]
    quantity = np.broadcast_to(np.asarray(quantity, dtype=float), (n,))
    executed = quantity if executed is None else np.asarray(executed, dtype=float)
    avg_price = np.broadcast_to(np.asarray(avg_price, dtype=float), (n,))
    return OrderOutcomes(
        side=side,
        quantity=quantity,
        executed=executed,
        notional=executed * avg_price,
        benchmark=np.broadcast_to(np.asarray(benchmark, dtype=float), (n,)),
    )


def _random_orders(n, seed=0):
    rng = np.random.default_rng(seed)
    quantity = rng.uniform(100, 1000, n)
    executed = quantity * rng.uniform(0.7, 1.0, n)
    benchmark = rng.uniform(10, 200, n)
    avg = benchmark * (1 + rng.normal(2e-4, 1e-3, n))
    return OrderOutcomes(rng.choice([-1.0, 1.0], n), quantity, executed, executed * avg, benchmark)


# --------------------------------------------------------------------------------------
# Price advantage
# --------------------------------------------------------------------------------------


def test_pa_sell_and_buy_hand_examples():
    out = _orders([1, -1, -1, 1], avg_price=[101, 101, 99, 99], benchmark=100)
    np.testing.assert_allclose(price_advantage(out), [100.0, -100.0, 100.0, -100.0], rtol=1e-12)


def test_pa_uses_average_execution_price_over_child_fills():
    # Sell 300 shares: 100 @ 10.0, 200 @ 10.3 → P̄ = 10.2; VWAP benchmark 10.0 → +200 bps.
    shares = np.array([[100.0, 200.0]])
    cash = np.array([[100.0 * 10.0, 200.0 * 10.3]])
    out = OrderOutcomes.from_fills(side=1, quantity=300, shares=shares, cash=cash, benchmark=10.0)
    np.testing.assert_allclose(price_advantage(out), [200.0], rtol=1e-12)
    assert out.executed.tolist() == [300.0]


def test_partial_fill_pa_over_executed_and_unfilled_in_afi():
    out = _orders([1.0], avg_price=101.0, benchmark=100.0, quantity=100.0, executed=[40.0])
    np.testing.assert_allclose(price_advantage(out), [100.0])
    m = compute_metrics(out, n_bootstrap=50)
    assert m.PA.value == pytest.approx(100.0)
    assert m.AFI.value == pytest.approx(0.6)


def test_zero_execution_has_pa_zero_and_full_afi():
    out = OrderOutcomes(
        side=[1.0, -1.0],
        quantity=[100.0, 50.0],
        executed=[0.0, 50.0],
        notional=[0.0, 50.0 * 99.0],
        benchmark=[100.0, 100.0],
    )
    np.testing.assert_allclose(price_advantage(out), [0.0, 100.0])
    m = compute_metrics(out, n_bootstrap=50)
    assert m.PA.value == pytest.approx(50.0)
    assert m.WR.value == pytest.approx(0.5)  # the unfilled order is not a win
    assert m.AFI.value == pytest.approx(0.5)  # (1 + 0) / 2
    assert m.GLR.value == math.inf  # no losing order (PA 0 is neither win nor loss)


# --------------------------------------------------------------------------------------
# WR, GLR, AFI, PA-std
# --------------------------------------------------------------------------------------


def test_wr_glr_afi_pa_std_hand_example():
    # Sells at 101, 100.5, 99.75, 100 against 100 → PA = 100, 50, −25, 0 bps.
    out = _orders(
        [1, 1, 1, 1],
        avg_price=[101.0, 100.5, 99.75, 100.0],
        benchmark=100.0,
        quantity=[100.0, 200.0, 100.0, 400.0],
        executed=[100.0, 150.0, 100.0, 100.0],
    )
    np.testing.assert_allclose(price_advantage(out), [100.0, 50.0, -25.0, 0.0], atol=1e-9)
    m = compute_metrics(out, n_bootstrap=100)
    assert m.PA.value == pytest.approx(31.25)
    # Sample std (ddof=1) of [100, 50, -25, 0]: mean 31.25, squared deviations sum 9218.75, /3.
    assert m.PA_std.value == pytest.approx(math.sqrt(9218.75 / 3))
    assert m.WR.value == pytest.approx(0.5)
    assert m.GLR.value == pytest.approx(75.0 / 25.0)
    assert m.AFI.value == pytest.approx((0 + 0.25 + 0 + 0.75) / 4)
    assert m.n_orders == 4


@pytest.mark.parametrize(
    ("avg_prices", "expected"),
    [
        ([101.0, 102.0], math.inf),  # winners, no losers
        ([99.0, 98.0], 0.0),  # losers, no winners
        ([100.0, 100.0], math.nan),  # neither
        ([101.0, 100.0], math.inf),  # a winner and a PA == 0 order
    ],
)
def test_glr_edge_cases(avg_prices, expected):
    m = compute_metrics(_orders([1, 1], avg_price=avg_prices, benchmark=100.0), n_bootstrap=100)
    if math.isnan(expected):
        assert math.isnan(m.GLR.value)
        assert math.isnan(m.GLR.low) and math.isnan(m.GLR.high)
    else:
        assert m.GLR.value == expected


def test_single_order_has_zero_std_and_degenerate_intervals():
    m = compute_metrics(_orders([-1.0], avg_price=99.0, benchmark=100.0))
    assert m.PA == Estimate(pytest.approx(100.0), pytest.approx(100.0), pytest.approx(100.0))
    assert m.PA_std == Estimate(0.0, 0.0, 0.0)
    # WR's Wilson interval of one win out of one: [1 / (1 + z²), 1], not a point
    assert m.WR == Estimate(1.0, pytest.approx(1 / (1 + 1.959964**2)), 1.0)


# --------------------------------------------------------------------------------------
# Bootstrap intervals
# --------------------------------------------------------------------------------------


def test_intervals_contain_estimate_and_shrink_with_n():
    small = compute_metrics(_random_orders(60, seed=1))
    large = compute_metrics(_random_orders(3000, seed=1))  # several bootstrap chunks
    for name in ("PA", "PA_std", "WR", "GLR", "AFI"):
        for m in (small, large):
            est = getattr(m, name)
            assert est.low <= est.value <= est.high, name
        width_small = getattr(small, name).high - getattr(small, name).low
        width_large = getattr(large, name).high - getattr(large, name).low
        assert 0 < width_large < 0.5 * width_small, name


def test_bootstrap_interval_of_mean_matches_normal_approximation():
    out = _random_orders(2000, seed=3)
    pa = price_advantage(out)
    m = compute_metrics(out, n_bootstrap=4000, seed=5)
    half_width = 1.959964 * pa.std(ddof=1) / math.sqrt(pa.size)
    assert (m.PA.high - m.PA.low) / 2 == pytest.approx(half_width, rel=0.1)
    assert (m.PA.high + m.PA.low) / 2 == pytest.approx(pa.mean(), abs=0.15 * half_width)


def test_bootstrap_matches_plain_python_loop():
    """The vectorized statistics agree with a per-resample loop over the same draws."""
    out = _orders(
        np.ones(12),
        avg_price=100 + np.array([1, -1, 2, 0, -3, 1, 1, 0.5, -0.5, 0, 4, -2.0]),
        benchmark=100.0,
        quantity=100.0,
        executed=np.linspace(50, 100, 12),
    )
    pa = price_advantage(out)
    unfilled = (out.quantity - out.executed) / out.quantity
    n_boot, seed, conf = 300, 11, 0.9
    idx = np.random.default_rng(seed).integers(0, 12, size=(n_boot, 12))
    stats = {k: [] for k in ("PA", "PA_std", "GLR", "AFI")}  # WR: Wilson, not bootstrapped
    for row in idx:
        p = [float(pa[i]) for i in row]
        gains = [x for x in p if x > 0]
        losses = [x for x in p if x < 0]
        stats["PA"].append(sum(p) / len(p))
        stats["PA_std"].append(float(np.std(p, ddof=1)))
        if losses:
            glr = (sum(gains) / len(gains) if gains else 0.0) / abs(sum(losses) / len(losses))
        else:
            glr = math.inf if gains else math.nan
        stats["GLR"].append(glr)
        stats["AFI"].append(float(np.mean(unfilled[row])))
    m = compute_metrics(out, confidence=conf, n_bootstrap=n_boot, seed=seed)
    for name, values in stats.items():
        values = np.array([v for v in values if not math.isnan(v)])
        method = "linear" if np.isfinite(values).all() else "inverted_cdf"
        low, high = np.quantile(values, [0.05, 0.95], method=method)
        est = getattr(m, name)
        assert est.low == pytest.approx(low, rel=1e-12, abs=1e-12), name
        assert est.high == pytest.approx(high, rel=1e-12, abs=1e-12), name


def test_bootstrap_is_deterministic_given_seed():
    out = _random_orders(200, seed=7)
    a = compute_metrics(out, seed=42)
    b = compute_metrics(out, seed=42)
    c = compute_metrics(out, seed=43)
    assert a == b
    assert a.PA.value == c.PA.value
    assert (a.PA.low, a.PA.high) != (c.PA.low, c.PA.high)


def test_no_bootstrap_gives_nan_intervals():
    m = compute_metrics(_random_orders(10), n_bootstrap=0)
    assert not math.isnan(m.PA.value)
    assert math.isnan(m.PA.low) and math.isnan(m.PA.high)


# --------------------------------------------------------------------------------------
# JSON, table
# --------------------------------------------------------------------------------------


def test_to_dict_is_strict_json():
    cases = [
        compute_metrics(_random_orders(50)),
        compute_metrics(_orders([1, 1], avg_price=[101, 102], benchmark=100)),  # GLR inf
        compute_metrics(_orders([1, 1], avg_price=100, benchmark=100)),  # GLR nan
        compute_metrics(_random_orders(5), n_bootstrap=0),  # nan intervals
    ]
    for m in cases:
        d = json.loads(json.dumps(m.to_dict(), allow_nan=False))
        assert set(d) == {"PA", "PA_std", "WR", "GLR", "AFI", "n_orders", "interval"}
        for name in ("PA", "PA_std", "WR", "GLR", "AFI"):
            assert set(d[name]) == {"value", "ci_low", "ci_high"}
        assert d["n_orders"] == m.n_orders
    assert cases[1].to_dict()["GLR"]["value"] is None
    assert cases[0].to_dict()["PA"]["value"] == pytest.approx(cases[0].PA.value)


def test_format_table():
    m1 = compute_metrics(_random_orders(40))
    m2 = compute_metrics(_orders([1, 1], avg_price=[101, 102], benchmark=100))
    m3 = compute_metrics(_orders([1, 1], avg_price=100, benchmark=100))
    rows = {("cn_1min", "ppo"): m1, ("cn_1min", "twap"): m2, ("us_1min", "ac"): m3}
    text = format_table(rows, wide=True)
    lines = text.splitlines()
    assert lines[0].split()[:3] == ["market", "policy", "PA"]
    assert len(lines) == 2 + 3 + 2  # two markets with different interval footers
    assert lines[2].startswith("cn_1min") and "ppo" in lines[2]
    assert f"{m1.PA.value:.2f} [{m1.PA.low:.2f}, {m1.PA.high:.2f}]" in lines[2]
    assert "inf [" in lines[3]
    assert "n/a [n/a, n/a]" in lines[4]
    assert lines[2].split()[-5:] == ["40", "-", "-", "-", "-"]  # n; no TWAP comparison given
    assert "of cn_1min: 95% percentile bootstrap over orders (G = 40" in lines[-2]
    assert "of us_1min: 95% percentile bootstrap over orders (G = 2" in lines[-1]
    with pytest.raises(ValueError, match="format_table"):
        format_table({"ppo": m1})


def _wilson(p, n, z=1.959964):
    """Wilson (1927) by hand: centre (p + z²/2n)/(1 + z²/n), half-width
    z/(1 + z²/n) · sqrt(p(1 - p)/n + z²/4n²)."""
    centre = (p + z**2 / (2 * n)) / (1 + z**2 / n)
    half = z / (1 + z**2 / n) * math.sqrt(p * (1 - p) / n + z**2 / (4 * n**2))
    return centre - half, centre + half


def test_the_compact_table_leaves_out_columns_undefined_or_the_same_on_every_row():
    """Two policies on 4 fully filled sell orders, no bootstrap, no TWAP pairing: AFI is
    0 and n is 4 on both rows, the paired columns are undefined on both; PA's interval
    is undefined (no bootstrap) and WR's is Wilson's with n = 4."""
    a = compute_metrics(_orders([1] * 4, [101, 99, 102, 100], 100), n_bootstrap=0)
    b = compute_metrics(_orders([1] * 4, [100.5, 100.5, 99.5, 100.5], 100), n_bootstrap=0)
    text = format_table({("m", "A"): a, ("m", "B"): b})
    lines = text.splitlines()
    assert all(len(line) <= 120 for line in lines)
    header = (lines[0] + " " + lines[1]).split()  # units on the second header line
    assert header == ["PA", "PA-std", "policy", "(bps)", "(bps)", "WR", "GLR"]
    assert lines[3] == "m"  # the market heads its rows
    # PA [100, -100, 200, 0] bps: mean 50, std sqrt(50000/3) = 129.10, WR 2/4, GLR 150/100
    assert lines[4].split() == ["A", "50.00", "129.10", "0.500", "1.50"]
    assert lines[5].split() == [f"[{_wilson(0.5, 4)[0]:.3f},", f"{_wilson(0.5, 4)[1]:.3f}]"]
    # PA [50, 50, -50, 50] bps: mean 25, std 50, WR 3/4, GLR 50/50
    assert lines[6].split() == ["B", "25.00", "50.00", "0.750", "1.00"]
    assert lines[7].split() == [f"[{_wilson(0.75, 4)[0]:.3f},", f"{_wilson(0.75, 4)[1]:.3f}]"]
    assert (
        "Not shown (--wide shows every column): the same on every row: AFI 0.0000, n 4; "
        "undefined on every row: PA-TWAP (bps), MDE, won, shortfall-TWAP (bps)."
    ) in " ".join(" ".join(lines[8:]).split())  # the note, wrapped at 120

    wide = format_table({("m", "A"): a, ("m", "B"): b}, wide=True).splitlines()
    assert wide[0].split() == [
        "market", "policy", "PA", "(bps)", "PA-std", "(bps)", "WR", "GLR", "AFI", "n",
        "PA-TWAP", "(bps)", "MDE", "won", "shortfall-TWAP", "(bps)",
    ]  # fmt: skip
    assert wide[2].split()[:2] == ["m", "A"] and "0.0000 [n/a, n/a]" in wide[2]
    assert wide[2].split()[-5:] == ["4", "-", "-", "-", "-"]
    assert "Not shown" not in "\n".join(wide)

    # one row: nothing is "the same on every row", only the undefined columns go
    single = format_table({("m", "A"): a})
    assert "AFI" in single.splitlines()[1] and "MDE" not in single.splitlines()[1]
    assert "undefined on every row: PA-TWAP (bps), MDE, won, shortfall-TWAP (bps)." in (
        " ".join(single.split())
    )


# --------------------------------------------------------------------------------------
# Benchmarks
# --------------------------------------------------------------------------------------


def test_vwap_and_twap():
    price = np.array([10.0, 11.0, 12.0])
    volume = np.array([1.0, 0.0, 3.0])
    assert vwap(price, volume) == pytest.approx((10 + 36) / 4)
    assert twap(price) == pytest.approx(11.0)
    assert vwap(price, np.zeros(3)) == pytest.approx(11.0)  # no volume → TWAP
    batch = vwap(np.stack([price, price]), np.stack([volume, np.zeros(3)]))
    np.testing.assert_allclose(batch, [11.5, 11.0])
    with pytest.raises(ValueError, match="negative"):
        vwap(price, -volume)
    with pytest.raises(ValueError, match="shape"):
        vwap(price, volume[:2])
    with pytest.raises(ValueError, match="NaN"):
        twap([1.0, np.nan])
    with pytest.raises(ValueError, match="non-empty"):
        twap([])


# --------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------

_GOOD = {
    "side": [1.0, -1.0],
    "quantity": [100.0, 100.0],
    "executed": [100.0, 50.0],
    "notional": [10_000.0, 5_000.0],
    "benchmark": [100.0, 100.0],
}


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("side", [1.0, 0.5], "side"),
        ("quantity", [100.0, 0.0], "quantity"),
        ("executed", [100.0, -1.0], "executed"),
        ("executed", [100.0, 100.01], "executed"),
        ("notional", [-1.0, 5_000.0], "notional"),
        ("benchmark", [100.0, 0.0], "benchmark"),
        ("benchmark", [100.0, np.inf], "benchmark: non-finite"),
        ("executed", [100.0], "executed: length 1"),
        ("notional", [[1.0, 2.0]], "notional: expected a 1-D"),
        ("side", ["a", "b"], "side: not convertible"),
    ],
)
def test_outcome_validation(field, value, match):
    with pytest.raises(ValueError, match=match):
        OrderOutcomes(**{**_GOOD, field: value})


def test_notional_without_execution_rejected_and_tolerance_accepted():
    with pytest.raises(ValueError, match="notional: order 1"):
        OrderOutcomes(**{**_GOOD, "executed": [100.0, 0.0]})
    OrderOutcomes(**{**_GOOD, "executed": [100.0 * (1 + 1e-7), 50.0]})


def test_outcomes_are_read_only_float64():
    out = OrderOutcomes(**_GOOD)
    assert out.side.dtype == np.float64
    with pytest.raises(ValueError):
        out.side[0] = -1.0


def test_compute_metrics_argument_errors():
    out = OrderOutcomes(**_GOOD)
    empty = OrderOutcomes(*(np.zeros(0) for _ in range(5)))
    with pytest.raises(ValueError, match="no orders"):
        compute_metrics(empty)
    with pytest.raises(ValueError, match="confidence"):
        compute_metrics(out, confidence=1.0)
    with pytest.raises(ValueError, match="n_bootstrap"):
        compute_metrics(out, n_bootstrap=-1)
    assert isinstance(compute_metrics(out, n_bootstrap=10), ExecutionMetrics)


# --------------------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------------------

_prices = st.floats(min_value=1.0, max_value=1e4)


@settings(max_examples=50, deadline=None)
@given(avg=_prices, bench=_prices, scale=st.floats(min_value=1e-3, max_value=1e3))
def test_pa_antisymmetric_in_side_and_scale_free(avg, bench, scale):
    sell = price_advantage(_orders([1.0], avg_price=avg, benchmark=bench))
    buy = price_advantage(_orders([-1.0], avg_price=avg, benchmark=bench))
    scaled = price_advantage(_orders([1.0], avg_price=avg * scale, benchmark=bench * scale))
    np.testing.assert_allclose(sell, -buy)
    np.testing.assert_allclose(scaled, sell, rtol=1e-9, atol=1e-9)


# --------------------------------------------------------------------------------------
# Paired comparison with TWAP and the timing / shortfall split
# --------------------------------------------------------------------------------------


def test_paired_difference_by_hand():
    diff = paired_difference(np.array([1.0, 2.0, 3.0]), np.array([0.0, 3.0, 1.0]), n_bootstrap=0)
    assert diff.value == pytest.approx(2.0 / 3.0)  # differences 1, -1, 2
    assert diff.win_rate == pytest.approx(2.0 / 3.0)
    assert math.isnan(diff.low) and math.isnan(diff.high)
    assert diff.to_dict() == {
        "value": pytest.approx(2.0 / 3.0),
        "ci_low": None,
        "ci_high": None,
        "win_rate": pytest.approx(2.0 / 3.0),
        "mde": None,
    }


def test_paired_bootstrap_matches_a_plain_loop():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=25), rng.normal(size=25)
    got = paired_difference(a, b, confidence=0.9, n_bootstrap=500, seed=7)
    draw = np.random.default_rng(7)
    means = []
    for _ in range(500):
        idx = draw.integers(0, 25, size=25)
        means.append(float(np.mean([a[i] - b[i] for i in idx])))
    low, high = np.quantile(means, [0.05, 0.95])
    assert (got.low, got.high) == (pytest.approx(low), pytest.approx(high))


def test_pairing_removes_the_noise_the_orders_share():
    """Two policies 0.5 bps apart on orders whose PA varies by tens of bps: unpaired
    intervals overlap, the paired one excludes zero."""
    rng = np.random.default_rng(0)
    market = rng.normal(-20.0, 20.0, 40)
    policy = market + 0.5 + rng.normal(0.0, 0.2, 40)
    diff = paired_difference(policy, market, n_bootstrap=2000)
    assert diff.low > 0.0 and diff.win_rate > 0.9
    unpaired = compute_metrics(_orders([1.0] * 40, 100 * (1 + policy / 1e4), 100.0)).PA
    assert unpaired.high - unpaired.low > 8.0  # sixteen times the difference to detect


def test_paired_difference_rejects_other_orders():
    with pytest.raises(ValueError, match="same orders"):
        paired_difference(np.zeros(3), np.zeros(4))


def test_timing_and_shortfall_split_pa_by_hand():
    # A sell of 100 shares: 60 at 10.10 when the minute's price was 10.12, 40 at 9.98 when it
    # was 10.00; benchmark 10.05.
    outcomes = OrderOutcomes(
        side=[1.0],
        quantity=[100.0],
        executed=[100.0],
        notional=[60 * 10.10 + 40 * 9.98],
        benchmark=[10.05],
        replayed_notional=[60 * 10.12 + 40 * 10.00],
    )
    timing = (10.072 / 10.05 - 1.0) * 1e4  # the minutes' prices averaged 10.072
    cost = (10.052 - 10.072) / 10.05 * 1e4  # fills averaged 10.052
    assert timing_advantage(outcomes)[0] == pytest.approx(timing)
    assert shortfall(outcomes)[0] == pytest.approx(cost)
    assert (timing_advantage(outcomes) + shortfall(outcomes))[0] == pytest.approx(
        price_advantage(outcomes)[0]
    )
    with pytest.raises(ValueError, match="replayed_notional"):
        timing_advantage(_orders([1.0], 10.0, 10.0))
    with pytest.raises(ValueError, match="replayed_notional"):
        OrderOutcomes([1.0], [1.0], [0.0], [0.0], [1.0], replayed_notional=[3.0])


def test_compute_metrics_with_twap_reports_the_paired_columns():
    policy = _orders([1.0, 1.0, -1.0], avg_price=[100.2, 99.9, 99.7], benchmark=100.0)
    reference = _orders([1.0, 1.0, -1.0], avg_price=[100.0, 100.0, 100.0], benchmark=100.0)
    m = compute_metrics(policy, n_bootstrap=100, twap=reference)
    assert m.vs_TWAP.value == pytest.approx((20.0 - 10.0 + 30.0) / 3)
    assert m.vs_TWAP.win_rate == pytest.approx(2 / 3)
    assert m.shortfall_vs_TWAP is None  # no replayed prices given
    record = json.loads(json.dumps(m.to_dict(), allow_nan=False))
    assert set(record["vs_TWAP"]) == {"value", "ci_low", "ci_high", "win_rate", "mde"}
    assert "vs_TWAP" not in compute_metrics(reference).to_dict()
    table = format_table({("m", "twap"): compute_metrics(reference), ("m", "ppo"): m}, wide=True)
    assert "+13.33 [" in table.splitlines()[3] and "PA-TWAP" in table
    with pytest.raises(ValueError, match="same orders"):
        compute_metrics(policy, twap=_orders([1.0], 100.0, 100.0))
