"""Market statistics: hand-computed values on tiny inputs, independent recomputation on the
shipped LOBSTER day, plausible figures on the shipped samples, clear errors on bad input."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import serl_jax
from serl_jax.data import bars_from_frame
from serl_jax.market.statistics import (
    STAT_COLUMNS,
    MarketStatistics,
    comparison_table,
    lobster_statistics,
    minute_bar_statistics,
    pooled_comparison_table,
    simulated_statistics,
    transfer_depth,
    transfer_flow_impact,
)

SAMPLE = Path(serl_jax.__file__).parent / "data" / "sample" / "lobster"
AMZN_MSG = SAMPLE / "AMZN_2012-06-21_34200000_57600000_message_1.csv.gz"
AMZN_OB = SAMPLE / "AMZN_2012-06-21_34200000_57600000_orderbook_1.csv.gz"


# --------------------------------------------------------------------------- helpers


def _bars(rows: list[tuple[str, float, float]], symbol: str = "TOY"):
    frame = pd.DataFrame(rows, columns=["datetime", "price", "volume"])
    return bars_from_frame(frame, symbol=symbol, min_bars_per_day=1)


def _excess_kurtosis(x: np.ndarray) -> float:
    c = x - x.mean()
    return float(np.mean(c**4) / np.mean(c**2) ** 2 - 3)


def _reference_returns(rows):
    """Independent of the loader: log returns between input rows of the same date exactly
    one minute apart, grouped into runs of consecutive returns."""
    frame = pd.DataFrame(rows, columns=["datetime", "price", "volume"])
    stamp = pd.to_datetime(frame["datetime"])
    runs, run = [], []
    for i in range(1, len(frame)):
        same_day = stamp[i].date() == stamp[i - 1].date()
        if same_day and stamp[i] - stamp[i - 1] == pd.Timedelta(minutes=1):
            run.append(
                (
                    math.log(frame.price[i] / frame.price[i - 1]),
                    frame.price[i] - frame.price[i - 1],
                )
            )
        else:
            if run:
                runs.append(run)
            run = []
    if run:
        runs.append(run)
    return runs


def _reference_lag1(runs, index: int, absolute: bool):
    """(autocovariance, variance) with the pooled mean, pairs within runs."""
    values = [abs(r[index]) if absolute else r[index] for run in runs for r in run]
    m = float(np.mean(values))
    var = float(np.mean([(v - m) ** 2 for v in values]))
    prods = []
    for run in runs:
        seq = [abs(r[index]) if absolute else r[index] for r in run]
        prods += [(seq[k] - m) * (seq[k - 1] - m) for k in range(1, len(seq))]
    return float(np.mean(prods)), var


# --------------------------------------------------------------------------- minute bars


def _bounce_days(amplitude: float, n_days: int = 3):
    """Each day 09:30-09:34: 10.00, 10+a, 10.00, 10+a, 10.00 (a pure bid-ask bounce)."""
    rows = []
    for day in range(n_days):
        for k in range(5):
            price = 10.0 + (amplitude if k % 2 else 0.0)
            rows.append((f"2024-01-{day + 2:02d} 09:3{k}", price, 100.0 * (k + 1)))
    return rows


def test_roll_kurtosis_and_volatility_on_a_bounce_by_hand():
    stats = minute_bar_statistics(_bars(_bounce_days(0.03)), tick_size=0.01)
    row = stats.table.loc["TOY"]
    # dp = +.03, -.03, +.03, -.03 each day: mean 0, every lag-1 product -0.0009,
    # so Roll's s = 2 * sqrt(0.0009) = 0.06 = 6 ticks.
    assert row.spread_ticks == pytest.approx(6.0)
    assert row.spread_bps == pytest.approx(0.06 / row.mean_price * 1e4)
    assert row.mean_price == pytest.approx((3 * 10.0 + 2 * 10.03) / 5)
    # Returns +-x with x = log(10.03/10), 6 each: a two-point distribution, kurtosis -2.
    x = math.log(10.03 / 10.0)
    assert row.excess_kurtosis == pytest.approx(-2.0)
    # std (ddof=1) of 12 values +-x with mean 0: x * sqrt(12/11).
    assert row.minute_volatility_bps == pytest.approx(1e4 * x * math.sqrt(12 / 11))
    assert math.isnan(row.abs_return_acf1)  # |r| is constant: no variance
    assert row.volume_per_minute == pytest.approx(300.0)
    assert row.n_days == 3
    np.testing.assert_allclose(stats.profile.loc["TOY"], np.arange(1, 6) / 15.0)
    assert math.isnan(row.top_depth) and math.isnan(row.depth_to_minute_volume)
    assert "Roll (1984)" in stats.sources["spread_ticks"]
    assert "estimate used: TOY" in stats.sources["spread_ticks"]


def test_roll_floor_and_fallback_are_reported():
    floored = minute_bar_statistics(_bars(_bounce_days(0.002)), tick_size=0.01)
    # Roll gives 2 * 0.002 = 0.004 = 0.4 tick: floored at 1.
    assert floored.table.loc["TOY", "spread_ticks"] == 1.0
    assert "floored at 1 tick: TOY (0.4)" in floored.sources["spread_ticks"]

    trend = [(f"2024-01-02 09:3{k}", 10.0 + 0.01 * k, 10.0) for k in range(6)]
    fallback = minute_bar_statistics(_bars(trend), tick_size=0.01)
    # Constant price changes: autocovariance 0, estimator undefined -> 1 tick.
    assert fallback.table.loc["TOY", "spread_ticks"] == 1.0
    assert "1 tick used: TOY" in fallback.sources["spread_ticks"]


def _toy_rows_with_gaps(seed: int = 0):
    """3 days on a grid 09:30-09:39 + 13:00-13:09 (a lunch gap); day 2 misses 09:33 and
    13:05 (filled by the loader). Random prices, so acf/kurtosis are non-trivial."""
    rng = np.random.default_rng(seed)
    times = [f"09:3{k}" for k in range(10)] + [f"13:0{k}" for k in range(10)]
    rows = []
    for day in range(3):
        price = 20.0
        for hhmm in times:
            price *= math.exp(rng.standard_t(3) * 1e-3)
            price = round(price, 2)
            if day == 1 and hhmm in ("09:33", "13:05"):
                continue
            rows.append((f"2024-03-{day + 4:02d} {hhmm}", price, float(rng.integers(1, 500))))
    return rows


def test_within_day_statistics_match_an_independent_computation():
    rows = _toy_rows_with_gaps()
    bars = _bars(rows)
    assert int(bars.frame["filled"].sum()) == 2
    stats = minute_bar_statistics(bars, tick_size=0.01)
    row = stats.table.loc["TOY"]

    runs = _reference_returns(rows)
    # 3 days x 2 sessions x 9 returns, minus 2 x 2 around each missing bar.
    r = np.array([x[0] for run in runs for x in run])
    assert len(r) == 3 * 2 * 9 - 4
    assert row.minute_volatility_bps == pytest.approx(1e4 * np.std(r, ddof=1))
    assert row.excess_kurtosis == pytest.approx(_excess_kurtosis(r))
    cov, var = _reference_lag1(runs, 0, absolute=True)
    assert row.abs_return_acf1 == pytest.approx(cov / var)
    cov_dp, _ = _reference_lag1(runs, 1, absolute=False)
    roll_ticks = 2 * math.sqrt(-cov_dp) / 0.01 if cov_dp < 0 else 1.0
    assert row.spread_ticks == pytest.approx(max(roll_ticks, 1.0))

    # Filled bars are not volume: the mean is over the real bars only.
    vols = np.array([v for _, _, v in rows])
    assert row.volume_per_minute == pytest.approx(vols.mean())
    # Profile: per slot, the mean over the days that have the bar.
    frame = pd.DataFrame(rows, columns=["datetime", "price", "volume"])
    frame["tod"] = frame["datetime"].str[-5:]
    per_slot = frame.groupby("tod")["volume"].mean().to_numpy()
    np.testing.assert_allclose(stats.profile.loc["TOY"], per_slot / per_slot.sum())
    assert stats.profile.shape == (1, 20)


def test_shipped_minute_bars_are_plausible(cn_bars, us_bars):
    for bars in (cn_bars, us_bars):
        stats = minute_bar_statistics(bars, tick_size=0.01)
        table = stats.table
        assert list(table.columns) == list(STAT_COLUMNS)
        assert tuple(table.index) == bars.symbols
        assert (table.spread_ticks >= 1).all()
        assert (table.minute_volatility_bps > 0).all()
        assert (table.volume_per_minute > 0).all()
        assert (table.excess_kurtosis > 0).all()  # fat tails
        assert (table.abs_return_acf1 > 0).all()  # volatility clustering
        assert table.top_depth.isna().all()
        np.testing.assert_allclose(stats.profile.sum(axis=1), 1.0)
        assert stats.profile.shape == (len(bars.symbols), bars.n_slots)
        real = bars.frame[~bars.frame["filled"]]
        expect = real.groupby("symbol")["volume"].mean()
        np.testing.assert_allclose(table.volume_per_minute, expect.loc[table.index])
    assert us_bars.frame["filled"].any()  # the US sample does have filled bars


# --------------------------------------------------------------------------- LOBSTER


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_lobster_statistics_by_hand(tmp_path):
    name = "XYZ_2020-01-02_34200000_34380000_{}_1.csv"  # a 3-minute session
    msg = _write(
        tmp_path / name.format("message"),
        [
            "34200.0,1,1,100,1000200,-1",
            "34260.0,4,1,50,1000200,-1",
            "34290.0,5,0,30,1000100,1",
            "34320.0,1,2,10,1000100,-1",
        ],
    )
    book = _write(
        tmp_path / name.format("orderbook"),
        [
            "1000200,100,1000000,200",
            "1000200,50,1000000,200",
            "1000200,50,1000000,200",
            "1000100,10,1000000,200",
        ],
    )
    stats = lobster_statistics(msg, book)
    row = stats.table.loc["XYZ"]
    # States last 60, 30, 30, 60 s with spreads 2, 2, 2, 1 ticks.
    assert row.spread_ticks == pytest.approx((2 * 60 + 2 * 30 + 2 * 30 + 1 * 60) / 180)
    assert row.top_depth == pytest.approx((150 * 60 + 125 * 60 + 105 * 60) / 180)
    mids = np.array([100.01, 100.01, 100.01, 100.005])
    spreads = np.array([0.02, 0.02, 0.02, 0.01])
    w = np.array([60, 30, 30, 60]) / 180
    assert row.spread_bps == pytest.approx(np.sum(w * spreads / mids) * 1e4)
    assert row.mean_price == pytest.approx(np.sum(w * mids))
    # 50 + 30 shares executed in minute 1 of 3.
    assert row.volume_per_minute == pytest.approx(80 / 3)
    np.testing.assert_allclose(stats.profile.loc["XYZ"], [0.0, 1.0, 0.0])
    assert row.depth_to_minute_volume == pytest.approx(row.top_depth / (80 / 3))
    # Mids at 09:31, 09:32, 09:33: 100.01, 100.005, 100.005 -> returns [a, 0].
    a = math.log(100.005 / 100.01)
    assert row.minute_volatility_bps == pytest.approx(1e4 * abs(a) / math.sqrt(2))
    assert row.n_days == 1
    # two returns only (minutes 1 and 2): too few pairs for a slope
    assert math.isnan(row.flow_impact_per_sigma)
    assert stats.source == "LOBSTER XYZ 2020-01-02 level 1"
    assert "time-weighted" in stats.sources["spread_ticks"]


def _head(src: Path, dst: Path, n: int) -> Path:
    with gzip.open(src, "rt") as f:
        lines = [next(f).rstrip("\n") for _ in range(n)]
    return _write(dst, lines)


def test_lobster_first_messages_match_a_direct_computation(tmp_path):
    n, end = 1000, 34200.0 + 300.0  # 1000 messages cover a bit more than 5 minutes
    name = "AMZN_2012-06-21_34200000_34500000_{}_1.csv"
    msg = _head(AMZN_MSG, tmp_path / name.format("message"), n)
    book = _head(AMZN_OB, tmp_path / name.format("orderbook"), n)
    stats = lobster_statistics(msg, book)
    row = stats.table.loc["AMZN"]

    m = np.loadtxt(msg, delimiter=",")
    b = np.loadtxt(book, delimiter=",")
    assert m[-1, 0] > end  # the file runs past the session end
    spread_w = depth_w = total = 0.0
    for i in range(n):
        t0 = m[i, 0]
        t1 = min(m[i + 1, 0], end) if i + 1 < n else end
        if t0 >= end or t1 <= t0 or b[i, 0] >= 9_999_999_999 or b[i, 2] <= -9_999_999_999:
            continue
        spread_w += (t1 - t0) * (b[i, 0] - b[i, 2]) / 10000 / 0.01
        depth_w += (t1 - t0) * (b[i, 1] + b[i, 3]) / 2
        total += t1 - t0
    assert row.spread_ticks == pytest.approx(spread_w / total)
    assert row.top_depth == pytest.approx(depth_w / total)

    executed = sum(m[i, 3] for i in range(n) if m[i, 1] in (4, 5) and m[i, 0] < end)
    assert row.volume_per_minute == pytest.approx(executed / 5)

    mids = []
    for k in range(1, 6):
        last = max(i for i in range(n) if m[i, 0] <= 34200 + 60 * k)
        mids.append((b[last, 0] + b[last, 2]) / 2 / 10000)
    r = np.diff(np.log(mids))
    assert row.minute_volatility_bps == pytest.approx(1e4 * np.std(r, ddof=1))
    assert row.excess_kurtosis == pytest.approx(_excess_kurtosis(r))

    # return k (minute k, k = 1..4) against minute k's net buyer-initiated shares: an
    # execution of a sell order (direction -1) was initiated by a buyer
    signed = np.zeros(5)
    for i in range(n):
        if m[i, 1] in (4, 5) and m[i, 0] < end:
            signed[int((m[i, 0] - 34200) // 60)] -= m[i, 5] * m[i, 3]
    x = signed[1:] / (executed / 5)
    slope = np.polyfit(x, r * 1e4, 1)[0]
    expected = slope / (1e4 * np.std(r, ddof=1))
    assert row.flow_impact_per_sigma == pytest.approx(expected)

    # return k (minute k, k = 1..4) against minute k's net buyer-initiated shares: an
    # execution of a sell order (direction -1) was initiated by a buyer
    signed = np.zeros(5)
    for i in range(n):
        if m[i, 1] in (4, 5) and m[i, 0] < end:
            signed[int((m[i, 0] - 34200) // 60)] -= m[i, 5] * m[i, 3]
    x = signed[1:] / (executed / 5)
    slope = np.polyfit(x, r * 1e4, 1)[0]
    expected = slope / (1e4 * np.std(r, ddof=1))
    assert row.flow_impact_per_sigma == pytest.approx(expected)


def test_lobster_amzn_day_is_plausible():
    stats = lobster_statistics(AMZN_MSG, AMZN_OB)
    row = stats.table.loc["AMZN"]
    assert 1 <= row.spread_ticks <= 20  # 1-20 cents
    assert 0 < row.spread_bps < 50
    assert row.top_depth > 0 and row.volume_per_minute > 0
    assert 0 < row.depth_to_minute_volume < 10
    assert 150 < row.mean_price < 300  # AMZN traded near $220 in June 2012
    assert 0 < row.minute_volatility_bps < 100
    # buying moves the mid up: about 0.8 volatilities per minute of volume on this day
    assert 0.3 < row.flow_impact_per_sigma < 2.0
    assert stats.profile.shape == (1, 390)
    assert stats.profile.loc["AMZN"].sum() == pytest.approx(1.0)
    assert stats.source == "LOBSTER AMZN 2012-06-21 level 1"


# --------------------------------------------------------------------------- depth transfer


def _one_row(symbol: str, **values) -> MarketStatistics:
    row = {c: math.nan for c in STAT_COLUMNS} | values
    table = pd.DataFrame([row], index=pd.Index([symbol], name="symbol"))
    profile = pd.DataFrame([[0.5, 0.5]], index=table.index)
    return MarketStatistics(table, profile, {c: "orig" for c in STAT_COLUMNS}, f"toy {symbol}")


def test_transfer_depth_fills_only_missing_depth():
    reference = _one_row("REF", depth_to_minute_volume=0.25)
    stats = minute_bar_statistics(_bars(_bounce_days(0.03)), tick_size=0.01)
    out = transfer_depth(stats, reference)
    assert out.table.loc["TOY", "top_depth"] == pytest.approx(0.25 * 300.0)
    assert out.table.loc["TOY", "depth_to_minute_volume"] == pytest.approx(0.25)
    assert "transferred from toy REF" in out.sources["top_depth"]
    assert math.isnan(stats.table.loc["TOY", "top_depth"])  # input untouched

    observed = _one_row("OBS", top_depth=7.0, volume_per_minute=2.0, depth_to_minute_volume=3.5)
    kept = transfer_depth(observed, reference)
    assert kept.table.loc["OBS", "top_depth"] == 7.0
    assert kept.sources["top_depth"] == "orig"

    with pytest.raises(ValueError, match="reference: no finite positive"):
        transfer_depth(stats, _one_row("BAD"))
    with pytest.raises(ValueError, match="symbol: 'X' not in reference"):
        transfer_depth(stats, reference, symbol="X")


def test_transfer_flow_impact_fills_only_missing_values():
    reference = _one_row("REF", flow_impact_per_sigma=0.8)
    stats = minute_bar_statistics(_bars(_bounce_days(0.03)), tick_size=0.01)
    assert math.isnan(stats.table.loc["TOY", "flow_impact_per_sigma"])
    out = transfer_flow_impact(stats, reference)
    assert out.table.loc["TOY", "flow_impact_per_sigma"] == 0.8
    assert "transferred from toy REF" in out.sources["flow_impact_per_sigma"]
    assert out.sources["top_depth"] == stats.sources["top_depth"]
    observed = _one_row("OBS", flow_impact_per_sigma=0.3)
    assert (
        transfer_flow_impact(observed, reference).table.loc["OBS", "flow_impact_per_sigma"] == 0.3
    )
    with pytest.raises(ValueError, match="reference: no finite positive flow_impact_per_sigma"):
        transfer_flow_impact(stats, _one_row("BAD"))


# --------------------------------------------------------------------------- simulation


def _sim_arrays():
    mid = np.array(
        [[100.0, 101.0, 100.0, 101.0], [200.0, 202.0, 200.0, 202.0], [50.0, 50.0, 50.0, 50.0]]
    )
    volume = np.array([[1.0, 2.0, 3.0, 4.0], [3.0, 2.0, 1.0, 0.0], [5.0, 5.0, 5.0, 5.0]])
    spread = np.array([[2.0] * 4, [2.0] * 4, [1.0] * 4])
    bid = np.full((3, 4), 10.0)
    ask = np.full((3, 4), 20.0)
    return mid, volume, spread, bid, ask, ["A", "A", "B"]


def test_simulated_statistics_known_answers():
    mid, volume, spread, bid, ask, symbols = _sim_arrays()
    stats = simulated_statistics(mid, volume, spread, bid, ask, symbols, tick_size=0.01)
    a, b = stats.table.loc["A"], stats.table.loc["B"]
    assert a.spread_ticks == 2.0 and b.spread_ticks == 1.0
    assert a.spread_bps == pytest.approx(np.mean(2.0 / mid[:2]) * 1e4)
    assert a.volume_per_minute == 2.0 and b.volume_per_minute == 5.0
    assert a.top_depth == 15.0 and a.depth_to_minute_volume == 7.5
    assert a.mean_price == pytest.approx(np.mean(mid[:2]) * 0.01)
    assert a.n_days == 2 and b.n_days == 1
    np.testing.assert_allclose(stats.profile.loc["A"], [0.25] * 4)
    # Returns of A: +x, -x, +x per row (never across rows), x = log(1.01).
    x = math.log(1.01)
    # std (ddof=1) of [x, -x, x, x, -x, x] = 4x / sqrt(15); a two-point law with
    # p = 2/3 has excess kurtosis (1 - 6pq) / (pq) = -1.5.
    assert a.minute_volatility_bps == pytest.approx(1e4 * 4 * x / math.sqrt(15))
    assert a.excess_kurtosis == pytest.approx(-1.5)
    assert math.isnan(a.abs_return_acf1)
    assert b.minute_volatility_bps == 0.0 and math.isnan(b.excess_kurtosis)
    assert math.isnan(a.flow_impact_per_sigma)  # no signed volume given
    assert list(stats.table.columns) == list(STAT_COLUMNS)


def test_simulated_flow_impact_is_the_return_slope_on_signed_volume():
    mid, volume, spread, bid, ask, symbols = _sim_arrays()
    signed = np.array([[0.0, 2.0, -1.0, 1.0], [0.0, 1.0, -2.0, 2.0], [0.0, 1.0, -1.0, 0.0]])
    stats = simulated_statistics(
        mid, volume, spread, bid, ask, symbols, tick_size=0.01, signed_volume=signed
    )
    # A's returns +x, -x, +x per row against the same minutes' signed volume / V (V = 2)
    x = math.log(1.01)
    r = np.array([x, -x, x, x, -x, x])
    flow = np.array([2.0, -1.0, 1.0, 1.0, -2.0, 2.0]) / 2.0
    expected = np.polyfit(flow, r, 1)[0] / np.std(r, ddof=1)
    assert stats.table.loc["A", "flow_impact_per_sigma"] == pytest.approx(expected)
    assert math.isnan(stats.table.loc["B", "flow_impact_per_sigma"])  # constant mid


def test_simulated_statistics_skips_missing_values():
    mid, volume, spread, bid, ask, symbols = _sim_arrays()
    mid[0, 1] = np.nan  # an empty book side: no mid, so no returns around it
    spread[0, 1] = np.nan
    stats = simulated_statistics(mid, volume, spread, bid, ask, symbols, tick_size=0.01)
    a = stats.table.loc["A"]
    assert a.spread_ticks == 2.0
    x = math.log(1.01)
    r = np.array([x, x, -x, x])
    assert a.minute_volatility_bps == pytest.approx(1e4 * np.std(r, ddof=1))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda k: k.update(volume=k["volume"][:, :3]), "volume: shape"),
        (lambda k: k.update(mid=np.zeros((0, 4))), "mid: empty"),
        (lambda k: k.update(mid=np.ones(4)), "mid: expected a 2-D"),
        (lambda k: k.update(mid=-k["mid"]), "mid: non-positive"),
        (lambda k: k.update(spread=-k["spread"]), "spread: negative"),
        (lambda k: k.update(symbols=["A"]), "symbols: 1 names for 3 rows"),
        (lambda k: k.update(tick_size=0.0), "tick_size must be a positive"),
        (lambda k: k.update(bid_depth=np.full((3, 4), np.inf)), "bid_depth: contains inf"),
        (lambda k: k.update(signed_volume=np.ones((3, 3))), "signed_volume: shape"),
    ],
)
def test_simulated_statistics_rejects_bad_input(change, message):
    mid, volume, spread, bid, ask, symbols = _sim_arrays()
    kwargs = dict(
        mid=mid,
        volume=volume,
        spread=spread,
        bid_depth=bid,
        ask_depth=ask,
        symbols=symbols,
        tick_size=0.01,
    )
    change(kwargs)
    with pytest.raises(ValueError, match=message) as err:
        simulated_statistics(**kwargs)
    assert "\n" not in str(err.value)


def test_minute_bar_and_lobster_statistics_reject_bad_input(tmp_path):
    bars = _bars(_bounce_days(0.03))
    with pytest.raises(ValueError, match="tick_size must be a positive"):
        minute_bar_statistics(bars, tick_size=-0.01)
    with pytest.raises(ValueError, match="bars must be a MinuteBars"):
        minute_bar_statistics(bars.frame, tick_size=0.01)
    with pytest.raises(ValueError, match="bars: no rows"):
        minute_bar_statistics(bars.with_frame(bars.frame.iloc[:0]), tick_size=0.01)
    with pytest.raises(ValueError, match="tick_size_dollars must be a positive"):
        lobster_statistics(AMZN_MSG, AMZN_OB, tick_size_dollars=0)
    with pytest.raises(ValueError, match="session must span"):
        lobster_statistics(AMZN_MSG, AMZN_OB, session=(34200, 34230))


# --------------------------------------------------------------------------- comparison


def test_comparison_table_shows_real_sim_and_ratio():
    mid, volume, spread, bid, ask, symbols = _sim_arrays()
    sim = simulated_statistics(mid, volume, spread, bid, ask, symbols, tick_size=0.01)
    real = _one_row("A", spread_ticks=4.0, volume_per_minute=8.0, top_depth=30.0)
    real = MarketStatistics(real.table, pd.DataFrame([[0.25] * 4], index=real.table.index))
    text = comparison_table(real, sim)
    lines = text.splitlines()
    spread_line = next(s for s in lines if s.startswith("A ") and "spread_ticks" in s)
    assert spread_line.split()[2:] == ["4", "2", "0.5"]
    volume_line = next(s for s in lines if s.startswith("A ") and "volume_per_minute" in s)
    assert volume_line.split()[2:] == ["8", "2", "0.25"]
    depth_line = next(s for s in lines if s.startswith("A ") and " top_depth" in s)
    assert depth_line.split()[2:] == ["30", "15", "0.5"]
    assert any(s.startswith("A ") and "volume_profile_L1" in s and s.endswith("0") for s in lines)
    # B exists only in the simulation: its real column and ratio are '-'.
    b_line = next(s for s in lines if s.startswith("B ") and "spread_ticks" in s)
    assert b_line.split()[2:] == ["-", "1", "-"]
    with pytest.raises(ValueError, match="real must be a MarketStatistics"):
        comparison_table("nope", sim)


def test_the_pooled_comparison_has_one_line_per_statistic():
    """Medians over symbols and the geometric mean of sim / real, by hand: spread real
    (2, 8), sim (4, 4): medians 5 and 4, ratios 2 and 0.5, geometric mean 1; volume real
    (10, 40), sim (20, 80): ratio 2 on both; a symbol without a real figure is left out
    of the ratio and its count."""
    index = pd.Index(["A", "B", "C"], name="symbol")
    real = pd.DataFrame(
        {"spread_ticks": [2.0, 8.0, np.nan], "volume_per_minute": [10.0, 40.0, 30.0]}, index
    )
    sim = pd.DataFrame(
        {"spread_ticks": [4.0, 4.0, 6.0], "volume_per_minute": [20.0, 80.0, 60.0]}, index
    )
    lines = pooled_comparison_table(real, sim).splitlines()
    assert lines[0].startswith("3 symbol(s), pooled")
    spread_line = next(s for s in lines if s.startswith("spread_ticks"))
    assert spread_line.split()[1:] == ["5", "4", "1", "2"]
    volume_line = next(s for s in lines if s.startswith("volume_per_minute"))
    assert volume_line.split()[1:] == ["30", "60", "2", "3"]
    assert len(lines) == 3 + 2  # title, header, rule, one line per statistic present
    many = pd.DataFrame({"spread_ticks": np.arange(1.0, 101.0)}, pd.Index(range(100)))
    assert len(pooled_comparison_table(many, many).splitlines()) == 4
