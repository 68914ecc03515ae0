"""Episode tests: chronological splits, training-only stats, causal features, hand values."""

from __future__ import annotations

import ast
import datetime as dt
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import serl_jax.data as data_pkg
from serl_jax.data import (
    FEATURE_NAMES,
    DataError,
    EpisodeSet,
    bars_from_frame,
    build_episodes,
    fit_stats,
    hold_out_symbols,
    load_market,
    split_days,
    with_trailing_volume,
)


def _frame(rows: list[tuple], columns=("symbol", "datetime", "price", "volume")) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=list(columns))


# ---------------------------------------------------------------- splits


def _grid_csvs(folder: Path, symbols: list[str], n_days: int, bars: int = 4) -> Path:
    """One CSV per symbol: ``n_days`` days of ``bars`` minutes; the prices and volumes of
    symbol A, B, C, ... scale with k = 1, 2, 3, ..., so each symbol's statistics differ."""
    folder.mkdir()
    days = pd.bdate_range("2024-03-01", periods=n_days)
    for symbol in symbols:
        k = ord(symbol[0]) - ord("A") + 1
        rows = [
            (f"{day:%Y-%m-%d} 09:{30 + m:02d}", 10.0 * k + 0.1 * m + 0.01 * d, 100.0 * k * (m + 1))
            for d, day in enumerate(days)
            for m in range(bars)
        ]
        pd.DataFrame(rows, columns=["datetime", "close", "volume"]).to_csv(
            folder / f"{symbol}.csv", index=False
        )
    return folder


def test_day_and_symbol_splits_together(tmp_path):
    """5 symbols x 5 days, C and E held out: training symbols split 3/1/1 days; the
    held-out symbols contribute their test day only, and their statistics only to their
    own rows (the feature normalization is the training symbols')."""
    path = _grid_csvs(tmp_path / "grid", ["A", "B", "C", "D", "E"], 5)
    market = load_market(path, min_bars_per_day=1, heldout_symbols=["E", "C"])
    assert market.heldout_symbols == ("C", "E")
    for split in ("train", "val", "test"):
        assert set(market.split(split).symbols) == {"A", "B", "D"}
    assert (market.train.n_episodes, market.val.n_episodes, market.test.n_episodes) == (9, 3, 3)
    held = market.split("heldout")
    assert held.symbols == ("C", "E") and set(held.dates) == set(market.test.dates)
    assert max(market.val.dates) < min(held.dates)
    # C's per-symbol statistics come from C's own 3 training days
    c = market.stats.index("C")
    assert market.stats.n_train_days[c] == 3
    assert market.stats.mean_daily_volume[c] == pytest.approx(300.0 * (1 + 2 + 3 + 4))
    # the features are normalized as the training symbols A, B, D alone make them
    own = load_market(_grid_csvs(tmp_path / "abd", ["A", "B", "D"], 5), min_bars_per_day=1)
    np.testing.assert_allclose(market.stats.feature_mean, own.stats.feature_mean)
    np.testing.assert_allclose(market.stats.feature_std, own.stats.feature_std)
    assert "6 test episodes" not in market.summary() and "2 held-out symbol(s)" in market.summary()


def test_held_out_fraction_is_a_seeded_draw(tmp_path):
    symbols = [f"S{i:02d}" for i in range(10)]
    drawn = hold_out_symbols(symbols, heldout_fraction=0.3, seed=4)
    assert len(drawn) == 3 and drawn == hold_out_symbols(symbols, heldout_fraction=0.3, seed=4)
    assert drawn != hold_out_symbols(symbols, heldout_fraction=0.3, seed=5)
    expected = np.random.default_rng(4).choice(10, 3, replace=False)
    assert drawn == tuple(sorted(symbols[i] for i in expected))
    assert hold_out_symbols(symbols) == ()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"heldout_symbols": ["A", "ZZZ"]}, "names ZZZ, not in the dataset"),
        ({"heldout_fraction": 0.1}, "heldout_fraction=0.1 of 3 symbol(s) holds out none"),
        ({"heldout_symbols": ["A", "B", "C"]}, "every symbol (3) is held out"),
        ({"heldout_symbols": ["A"], "heldout_fraction": 0.5}, "both set; use one"),
    ],
)
def test_bad_hold_outs_are_one_line_errors(tmp_path, kwargs, message):
    path = _grid_csvs(tmp_path / "abc", ["A", "B", "C"], 5)
    with pytest.raises(DataError) as info:
        load_market(path, min_bars_per_day=1, **kwargs)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_us_split_is_3_1_1_and_chronological(us_bars):
    parts = split_days(us_bars)
    for sym in us_bars.symbols:
        tr, va, te = (parts[k].dates(sym) for k in ("train", "val", "test"))
        assert (len(tr), len(va), len(te)) == (3, 1, 1)
        assert max(tr) < min(va) and max(va) < min(te)
        assert tr + va + te == us_bars.dates(sym)
    assert all(len(p.frame) == p.n_days * 390 for p in parts.values())
    assert sum(len(p.frame) for p in parts.values()) == len(us_bars.frame)


def test_cn_split_counts(cn_market):
    # 43 days: floor(25.8) = 25 train, floor(8.6) = 8 val, 10 test; 4 symbols each.
    assert (cn_market.train.n_episodes, cn_market.val.n_episodes) == (100, 32)
    assert cn_market.test.n_episodes == 40
    assert max(cn_market.train.dates) < min(cn_market.val.dates)
    assert max(cn_market.val.dates) < min(cn_market.test.dates)
    assert cn_market.test.dates[-1] == dt.date(2019, 2, 1)


def test_spread_samples_every_period_of_a_split(cn_market):
    """``spread(4)`` of the 40 test episodes takes 0, 13, 26 and 39 (``linspace`` rounded),
    every per-episode array and label with them; more than N gives all; 0 is an error."""
    test = cn_market.test
    four = test.spread(4)
    index = [0, 13, 26, 39]
    assert four.n_episodes == 4 and four.dates == tuple(test.dates[i] for i in index)
    assert four.symbols == tuple(test.symbols[i] for i in index)
    for name in ("price", "volume", "features", "valid", "volume_profile",
                 "expected_day_volume", "sigma", "mean_minute_volume"):  # fmt: skip
        np.testing.assert_array_equal(getattr(four, name), getattr(test, name)[index])
        assert not getattr(four, name).flags.writeable
    assert four.slot_times == test.slot_times and four.feature_names == test.feature_names
    assert test.spread(100).n_episodes == 40
    with pytest.raises(ValueError, match="EpisodeSet.spread: count must be >= 1, got 0"):
        test.spread(0)


def test_trailing_volume_is_the_mean_of_the_days_before_by_hand():
    """A's five days trade 10, 20 (one bar of two: a filled slot is not a bar), 30, 40
    and 50 per bar, B's 1 to 5; split 3/1/1, two days averaged. Each episode's trailing
    volume is its symbol's mean per real bar over the two days before it, whatever their
    split; the first day has none and keeps the training mean (A: 100 / 5 bars = 20;
    B: 12 / 6 = 2). A set built alone has no history: the training mean."""
    days = ["2024-03-01", "2024-03-04", "2024-03-05", "2024-03-06", "2024-03-07"]
    rows = []
    for d, day in enumerate(days):
        for minute in ("09:30", "09:31"):
            if not (d == 1 and minute == "09:31"):
                rows.append(("A", f"{day} {minute}", 10.0, 10.0 * (d + 1)))
            rows.append(("B", f"{day} {minute}", 5.0, 1.0 * (d + 1)))
    bars = bars_from_frame(_frame(rows), name="two", min_bars_per_day=1)
    parts = split_days(bars, train=0.6, val=0.2)
    stats = fit_stats(parts["train"])
    alone = [build_episodes(parts[name], stats) for name in ("train", "val", "test")]
    train, val, test = with_trailing_volume(alone, days=2)
    np.testing.assert_allclose(train.trailing_minute_volume, [20, 10, 15, 2, 1, 1.5])
    np.testing.assert_allclose(val.trailing_minute_volume, [25, 2.5])
    np.testing.assert_allclose(test.trailing_minute_volume, [35, 3.5])
    np.testing.assert_allclose(alone[2].trailing_minute_volume, alone[2].mean_minute_volume)
    np.testing.assert_allclose(test.mean_minute_volume, [20, 2])
    assert not test.trailing_minute_volume.flags.writeable
    with pytest.raises(ValueError, match="with_trailing_volume: days must be >= 1, got 0"):
        with_trailing_volume(alone, days=0)


def test_loaded_splits_carry_the_trailing_volume(cn_market):
    """``load_market`` fills it over all splits: the first training day of each symbol
    has no day before it (the training mean), and a test day's is the mean per real bar
    of its symbol's 20 days before it."""
    train, test = cn_market.train, cn_market.test
    first = [train.symbols.index(s) for s in dict.fromkeys(train.symbols)]
    np.testing.assert_allclose(train.trailing_minute_volume[first], train.mean_minute_volume[first])
    sets = (train, cn_market.val, test)
    i = len(test) - 1
    symbol, date = test.symbols[i], test.dates[i]
    before = sorted(
        (d, float(es.volume[j].sum() / es.valid[j].sum()))
        for es in sets
        for j, (s, d) in enumerate(zip(es.symbols, es.dates, strict=True))
        if s == symbol and d < date
    )[-20:]
    assert len(before) == 20
    expected = np.mean([v for _, v in before])
    assert test.trailing_minute_volume[i] == pytest.approx(expected, rel=1e-5)


def test_split_with_too_few_days_names_symbol_and_counts():
    rows = [("AAA", f"2019-01-0{d} 09:30", 1.0, 1.0) for d in (2, 3, 4, 7, 8)]
    rows += [("BBB", f"2019-01-0{d} 09:30", 1.0, 1.0) for d in (2, 3)]
    bars = bars_from_frame(_frame(rows), name="tiny", min_bars_per_day=1)
    with pytest.raises(DataError) as info:
        split_days(bars)
    msg = str(info.value)
    assert "symbol BBB has 2 trading day(s)" in msg and "1/0/1" in msg and "tiny" in msg
    with pytest.raises(ValueError):
        split_days(bars, train=0.8, val=0.3)


# ---------------------------------------------------------------- training-only statistics


def _stats_arrays(stats):
    return [
        stats.mean_daily_volume,
        stats.volume_profile,
        stats.sigma,
        stats.mean_minute_volume,
        stats.feature_mean,
        stats.feature_std,
    ]


def test_stats_use_training_days_only(us_bars):
    base = fit_stats(split_days(us_bars)["train"])

    f = us_bars.frame.copy()
    later = f["date"] >= dt.date(2019, 2, 14)  # the val and test days
    f.loc[later, "volume"] *= 7.0
    f.loc[later, "price"] *= np.linspace(0.9, 1.1, int(later.sum()))
    changed = fit_stats(split_days(us_bars.with_frame(f))["train"])
    for a, b in zip(_stats_arrays(base), _stats_arrays(changed), strict=True):
        np.testing.assert_array_equal(a, b)

    # The same edit on a training day does move the stats (the check above can fail).
    g = us_bars.frame.copy()
    g.loc[g["date"] == dt.date(2019, 2, 11), "volume"] *= 7.0
    moved = fit_stats(split_days(us_bars.with_frame(g))["train"])
    assert not np.allclose(moved.mean_daily_volume, base.mean_daily_volume)


def test_episodes_carry_training_stats(us_bars):
    parts = split_days(us_bars)
    stats = fit_stats(parts["train"])
    test = build_episodes(parts["test"], stats)
    i = stats.index("AMZN")
    row = test.symbols.index("AMZN")
    np.testing.assert_allclose(test.volume_profile[row], stats.volume_profile[i], rtol=1e-6)
    assert test.expected_day_volume[row] == pytest.approx(stats.mean_daily_volume[i], rel=1e-6)
    # Training mean daily volume of AMZN over Feb 11-13, computed directly.
    raw = us_bars.frame
    train_days = raw[(raw["symbol"] == "AMZN") & (raw["date"] <= dt.date(2019, 2, 13))]
    assert stats.mean_daily_volume[i] == pytest.approx(train_days["volume"].sum() / 3)
    np.testing.assert_allclose(stats.volume_profile.sum(axis=1), 1.0, rtol=1e-12)


def test_all_zero_training_volume_gives_uniform_profile():
    rows = [
        ("Z", f"2019-01-0{d} 09:3{m}", 5.0 + m, 0.0 if d < 7 else 10.0)
        for d in (2, 3, 4, 7, 8)
        for m in range(4)
    ]
    bars = bars_from_frame(_frame(rows), min_bars_per_day=1)
    stats = fit_stats(split_days(bars)["train"])
    np.testing.assert_allclose(stats.volume_profile, np.full((1, 4), 0.25))
    assert stats.mean_daily_volume[0] == 0.0
    # volume_share then divides by 1 data unit rather than by zero.
    test = build_episodes(split_days(bars)["test"], stats)
    assert np.isfinite(test.features).all()


# ---------------------------------------------------------------- episodes and features


def test_us_episodes_shapes_and_valid_mask(us_bars):
    parts = split_days(us_bars)
    stats = fit_stats(parts["train"])
    eps = [build_episodes(parts[k], stats) for k in ("train", "val", "test")]
    train = eps[0]
    assert isinstance(train, EpisodeSet)
    assert train.price.shape == (12, 390) and train.price.dtype == np.float32
    assert train.volume.dtype == np.float32 and train.valid.dtype == np.bool_
    assert train.features.shape == (12, 390, len(FEATURE_NAMES))
    assert train.features.dtype == np.float32
    assert train.feature_names == FEATURE_NAMES
    assert train.slot_times[0] == dt.time(9, 31) and len(train.slot_times) == 390
    assert train.symbols[:3] == ("AAPL",) * 3
    assert train.dates[:3] == (dt.date(2019, 2, 11), dt.date(2019, 2, 12), dt.date(2019, 2, 13))
    # Filled minutes are exactly the invalid slots, with zero volume.
    assert sum(int((~e.valid).sum()) for e in eps) == 12
    for e in eps:
        assert (e.volume[~e.valid] == 0).all() and np.isfinite(e.features).all()
    # Normalized features have mean 0 / std 1 on real training bars (time_of_day excluded).
    real = train.features[train.valid].astype(np.float64)
    for j in (0, 1, 2, 4):
        assert real[:, j].mean() == pytest.approx(0.0, abs=1e-5)
        assert real[:, j].std() == pytest.approx(1.0, abs=1e-4)
    np.testing.assert_allclose(train.features[0, :, 3], np.arange(390) / 390, rtol=1e-6)


def test_symbol_without_stats_is_an_error(us_bars):
    parts = split_days(us_bars)
    only_aapl = parts["train"].with_frame(
        parts["train"].frame[parts["train"].frame["symbol"] == "AAPL"]
    )
    stats = fit_stats(only_aapl)
    with pytest.raises(DataError, match=r"AMZN, MSFT, QQQ have no training statistics"):
        build_episodes(parts["test"], stats)


def test_features_have_no_look_ahead(us_bars):
    parts = split_days(us_bars)
    stats = fit_stats(parts["train"])
    base = build_episodes(parts["test"], stats)
    k = 200
    f = parts["test"].frame.copy()
    # Change every column of slot k and after on every test day.
    later = f["slot"] >= k
    f.loc[later, "price"] *= 1.05
    f.loc[later, "volume"] *= 3.0
    f.loc[later, "high"] *= 1.2
    changed = build_episodes(parts["test"].with_frame(f), stats)
    np.testing.assert_array_equal(base.features[:, :k], changed.features[:, :k])
    # ... and the change does show at slot k (log return, volume share, range).
    for j in (0, 2, 4):
        assert (base.features[:, k, j] != changed.features[:, k, j]).all()


def test_hand_computed_features():
    a = math.log(1.1)
    cols = ("symbol", "datetime", "price", "volume", "high", "low")
    rows = [
        ("X", "2019-01-02 09:30", 10.0, 10.0, 10.5, 9.5),
        ("X", "2019-01-02 09:31", 11.0, 20.0, 11.5, 10.5),
        ("X", "2019-01-02 09:32", 11.0, 30.0, 11.2, 10.8),
        ("X", "2019-01-02 09:33", 12.1, 40.0, 12.5, 12.0),
        ("X", "2019-01-03 09:30", 20.0, 0.0, None, None),
        ("X", "2019-01-03 09:31", 20.0, 50.0, None, None),
        ("X", "2019-01-03 09:32", 22.0, 50.0, None, None),
        ("X", "2019-01-03 09:33", 22.0, 0.0, None, None),
    ]
    bars = bars_from_frame(_frame(rows, cols), min_bars_per_day=1)
    stats = fit_stats(bars, vol_window=2)

    # Per-symbol statistics.
    assert stats.mean_daily_volume[0] == pytest.approx(100.0)
    np.testing.assert_allclose(stats.volume_profile[0], [0.05, 0.35, 0.40, 0.20])
    # Returns (day 1: a, 0, a; day 2: 0, a, 0): mean a/2, std a/2.
    assert stats.sigma[0] == pytest.approx(a / 2)
    assert stats.mean_minute_volume[0] == pytest.approx(25.0)

    # Raw features by hand: log_return, rolling_volatility (window 2), volume_share,
    # time_of_day, high_low_range.
    raw = np.array(
        [
            [
                [0, 0, 0.1, 0.0, 1 / 10],
                [a, 0, 0.2, 0.25, 1 / 11],
                [0, a / 2, 0.3, 0.5, 0.4 / 11],
                [a, a / 2, 0.4, 0.75, 0.5 / 12.1],
            ],
            [
                [0, 0, 0.0, 0.0, 0],
                [0, 0, 0.5, 0.25, 0],
                [a, a / 2, 0.5, 0.5, 0],
                [0, a / 2, 0.0, 0.75, 0],
            ],
        ]
    )
    flat = raw.reshape(-1, 5)
    mean, std = flat.mean(axis=0), flat.std(axis=0)
    mean[3], std[3] = 0.0, 1.0  # time_of_day is not normalized
    np.testing.assert_allclose(stats.feature_mean, mean, atol=1e-12)
    np.testing.assert_allclose(stats.feature_std, std, rtol=1e-9)

    eps = build_episodes(bars, stats)
    np.testing.assert_allclose(eps.features, (raw - mean) / std, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(eps.price, [[10, 11, 11, 12.1], [20, 20, 22, 22]], rtol=1e-6)
    assert eps.dates == (dt.date(2019, 1, 2), dt.date(2019, 1, 3))
    assert eps.valid.all()


def test_rolling_volatility_matches_pandas_reference(us_bars):
    parts = split_days(us_bars)
    stats = fit_stats(parts["train"], vol_window=15)
    eps = build_episodes(parts["val"], stats)
    j = FEATURE_NAMES.index("rolling_volatility")
    got = eps.features[..., j].astype(np.float64) * stats.feature_std[j] + stats.feature_mean[j]
    for n in range(eps.n_episodes):
        r = pd.Series(np.log(eps.price[n].astype(np.float64))).diff()  # NaN at slot 0
        ref = r.rolling(15, min_periods=1).std(ddof=0).fillna(0.0).to_numpy()
        np.testing.assert_allclose(got[n], ref, atol=2e-6)


def test_constant_feature_std_is_floored(cn_market):
    # The A-share sample has no high/low: the range feature is constant 0, std floored.
    j = FEATURE_NAMES.index("high_low_range")
    assert cn_market.stats.feature_std[j] == pytest.approx(1e-8)
    assert (cn_market.test.features[..., j] == 0).all()
    assert np.isfinite(cn_market.test.features).all()


def test_load_market_cn_sample(cn_market):
    assert cn_market.name == "cn_1min"
    for eps in (cn_market.train, cn_market.val, cn_market.test):
        assert eps.n_slots == 240 and eps.valid.all()
    assert cn_market.stats.symbols == ("SH600000", "SZ000001", "SZ000002", "SZ000004")
    assert cn_market.report.total_filled == 0
    # The illiquid SZ000004 trades far less than the bank stocks.
    mdv = dict(zip(cn_market.stats.symbols, cn_market.stats.mean_daily_volume, strict=True))
    assert mdv["SZ000004"] < 0.05 * mdv["SH600000"]
    assert (cn_market.stats.sigma > 0).all()


def test_data_package_does_not_import_jax():
    for path in Path(data_pkg.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert not any(n == "jax" or n.startswith("jax.") for n in names), path
