"""Train/val/test day splits, held-out symbols, training-day statistics and episodes.

An episode is one (symbol, trading day) on the dataset's slot grid of T slots. Everything
fitted (volume profiles, mean volumes, sigma, feature normalization) comes from the training
days only, so validation and test days never leak into the model's inputs.

Splits run along both axes: each symbol's days are split chronologically (train / val /
test), and some symbols may be held out whole (:func:`hold_out_symbols`): policies never
train or select on them, and their test days are reported apart, as stocks never seen.
A held-out symbol's own training days give only its per-symbol statistics (its volume
profile, expected volume and sigma: history a desk has for any stock before the test
days); the feature normalization comes from the training symbols alone.

Shapes: N episodes, T slots per day, S symbols, F features. Volumes are in the data's own
unit: shares for the US sample, a relative quantity (likely lots of 100 shares) for the
A-share sample.
"""

from __future__ import annotations

import bisect
import datetime as dt
import math
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np

from serl_jax.data.loader import DataError, LoadReport, MinuteBars, load_minute_bars

__all__ = [
    "FEATURE_NAMES",
    "EpisodeSet",
    "MarketSplits",
    "TrainStats",
    "build_episodes",
    "fit_stats",
    "hold_out_symbols",
    "load_market",
    "split_days",
]

FEATURE_NAMES: tuple[str, ...] = (
    "log_return",
    "rolling_volatility",
    "volume_share",
    "time_of_day",
    "high_low_range",
)
# Features passed through as they are: time_of_day is already in [0, 1).
UNNORMALIZED_FEATURES: tuple[str, ...] = ("time_of_day",)
STD_FLOOR = 1e-8
SPLITS = ("train", "val", "test")
HELDOUT = "heldout"
"""The name of the held-out symbols' test days (:meth:`MarketSplits.split`)."""


def _readonly(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    a.setflags(write=False)
    return a


def split_days(bars: MinuteBars, train: float = 0.6, val: float = 0.2) -> dict[str, MinuteBars]:
    """Splits each symbol's trading days chronologically into train / val / test.

    For a symbol with n days: the earliest ``floor(n*train)`` days are train, the next
    ``floor(n*val)`` are val, the rest test; each split must get at least one day (the US
    sample's 5 days give 3/1/1, the A-share sample's 43 give 25/8/10). Symbols are split
    independently; with a common calendar (as in the samples) the splits share dates.

    Args:
        bars: loaded minute bars.
        train: fraction of days for training, in (0, 1).
        val: fraction of days for validation, in (0, 1), with ``train + val < 1``.

    Returns:
        ``{"train": ..., "val": ..., "test": ...}``, each a :class:`MinuteBars` with the
        same slot grid and load report.

    Raises:
        DataError: if a symbol has too few days for a non-empty split (names the symbol
            and the resulting counts).
        ValueError: for fractions outside the ranges above.
    """
    if not (0 < train < 1 and 0 < val < 1 and train + val < 1):
        raise ValueError(f"need 0 < train, 0 < val and train + val < 1; got {train}, {val}")
    frame = bars.frame
    label = np.empty(len(frame), dtype=object)
    for symbol in bars.symbols:
        days = bars.dates(symbol)
        n = len(days)
        # The epsilon keeps e.g. 5 * 0.6 = 2.9999999999999996 from flooring to 2.
        n_train = math.floor(n * train + 1e-9)
        n_val = math.floor(n * val + 1e-9)
        n_test = n - n_train - n_val
        if min(n_train, n_val, n_test) < 1:
            raise DataError(
                f"{bars.name or bars.report.source}: symbol {symbol} has {n} trading day(s); "
                f"train={train}, val={val} gives {n_train}/{n_val}/{n_test} train/val/test "
                "days, each split needs at least 1"
            )
        which = {d: "train" for d in days[:n_train]}
        which.update({d: "val" for d in days[n_train : n_train + n_val]})
        which.update({d: "test" for d in days[n_train + n_val :]})
        sel = (frame["symbol"] == symbol).to_numpy()
        label[sel] = frame.loc[sel, "date"].map(which).to_numpy()
    return {name: bars.with_frame(frame.loc[label == name]) for name in SPLITS}


def hold_out_symbols(
    symbols: tuple[str, ...] | list[str],
    heldout_symbols: tuple[str, ...] | list[str] = (),
    heldout_fraction: float = 0.0,
    seed: int = 0,
    name: str = "data",
) -> tuple[str, ...]:
    """The symbols held out of training, named or drawn.

    Either ``heldout_symbols`` names them, or ``heldout_fraction`` of the symbols are drawn
    without replacement by ``numpy.random.default_rng(seed)`` from the sorted symbols
    (``round(fraction * S)`` of them), so the same data and seed hold out the same ones.

    Args:
        symbols: the dataset's S symbols.
        heldout_symbols: symbols to hold out (each must be in the dataset).
        heldout_fraction: share of symbols to hold out, in ``[0, 1)``.
        seed: the draw's seed.
        name: the dataset's name, for messages.

    Returns:
        The held-out symbols, sorted (empty when neither option is set).

    Raises:
        DataError: a named symbol is not in the dataset, both options are set, the
            fraction holds out no symbol or every symbol (one line naming the counts).
        ValueError: a fraction outside ``[0, 1)``.
    """
    symbols = tuple(sorted(symbols))
    if not 0.0 <= heldout_fraction < 1.0:
        raise ValueError(f"data.heldout_fraction: must be in [0, 1), got {heldout_fraction}")
    if heldout_symbols and heldout_fraction:
        raise DataError(
            f"{name}: data.heldout_symbols and data.heldout_fraction are both set; use one"
        )
    if heldout_symbols:
        unknown = sorted(set(heldout_symbols) - set(symbols))
        if unknown:
            raise DataError(
                f"{name}: data.heldout_symbols names {', '.join(unknown)}, not in the "
                f"dataset ({len(symbols)} symbols: {', '.join(symbols[:5])}"
                f"{', ...' if len(symbols) > 5 else ''})"
            )
        held = tuple(sorted(set(heldout_symbols)))
    elif heldout_fraction:
        n_held = round(heldout_fraction * len(symbols))
        if n_held == 0:
            raise DataError(
                f"{name}: data.heldout_fraction={heldout_fraction} of {len(symbols)} "
                "symbol(s) holds out none; raise it or name data.heldout_symbols"
            )
        drawn = np.random.default_rng(seed).choice(len(symbols), n_held, replace=False)
        held = tuple(sorted(symbols[i] for i in drawn))
    else:
        return ()
    if len(held) == len(symbols):
        raise DataError(
            f"{name}: every symbol ({len(symbols)}) is held out; no symbol is left to train on"
        )
    return held


@dataclass(frozen=True, eq=False)
class _DayArrays:
    symbols: np.ndarray  # [N] object (str)
    dates: np.ndarray  # [N] object (datetime.date)
    price: np.ndarray  # [N, T] float64
    volume: np.ndarray  # [N, T] float64
    high: np.ndarray  # [N, T] float64, NaN where absent
    low: np.ndarray  # [N, T] float64, NaN where absent
    valid: np.ndarray  # [N, T] bool, False on filled slots


def _day_arrays(bars: MinuteBars) -> _DayArrays:
    n_slots = bars.n_slots
    frame = bars.frame
    n = len(frame) // n_slots if n_slots else 0
    if n * n_slots != len(frame):
        raise DataError(f"{bars.name}: frame is not whole days on the {n_slots}-slot grid")
    # The reshapes below rely on the loader's (symbol, date, slot) order.
    slots = frame["slot"].to_numpy().reshape(n, n_slots)
    if not (slots == np.arange(n_slots)).all():
        raise DataError(f"{bars.name}: frame rows are not in (symbol, date, slot) order")

    def grid(col: str, dtype=np.float64) -> np.ndarray:
        return frame[col].to_numpy(dtype=dtype).reshape(n, n_slots)

    return _DayArrays(
        symbols=frame["symbol"].to_numpy(dtype=object)[::n_slots],
        dates=frame["date"].to_numpy(dtype=object)[::n_slots],
        price=grid("price"),
        volume=grid("volume"),
        high=grid("high"),
        low=grid("low"),
        valid=~grid("filled", bool),
    )


def _raw_features(d: _DayArrays, volume_scale: np.ndarray, vol_window: int) -> np.ndarray:
    """Unnormalized features [N, T, F] (float64), in FEATURE_NAMES order.

    Each value at slot t depends on bars of the same day at slots <= t only.
    """
    n, n_slots = d.price.shape
    log_ret = np.zeros((n, n_slots))
    if n_slots > 1:
        log_ret[:, 1:] = np.log(d.price[:, 1:] / d.price[:, :-1])

    # Rolling std (ddof=0) of the returns r_max(1, t-w+1) .. r_t via windowed cumulative
    # sums: O(N*T) whatever the window. r_0 is not a return and is excluded from the count
    # (it is 0, so it adds nothing to the sums).
    t = np.arange(n_slots)
    count = np.minimum(t, vol_window).astype(np.float64)
    csum = np.cumsum(log_ret, axis=1)
    csq = np.cumsum(log_ret**2, axis=1)
    lag = t - vol_window
    has_lag = lag >= 0
    lag = np.where(has_lag, lag, 0)
    s1 = csum - np.where(has_lag, csum[:, lag], 0.0)
    s2 = csq - np.where(has_lag, csq[:, lag], 0.0)
    denom = np.maximum(count, 1.0)
    var = np.maximum(s2 / denom - (s1 / denom) ** 2, 0.0)
    rolling_vol = np.where(count > 0, np.sqrt(var), 0.0)

    volume_share = d.volume / volume_scale[:, None]
    time_of_day = np.broadcast_to(t / n_slots, (n, n_slots))
    hl = np.nan_to_num((d.high - d.low) / d.price, nan=0.0)
    return np.stack([log_ret, rolling_vol, volume_share, time_of_day, hl], axis=-1)


def _volume_scale(mean_daily_volume: np.ndarray) -> np.ndarray:
    # A symbol that never traded on training days: divide by 1 (one data unit) instead.
    return np.where(mean_daily_volume > 0, mean_daily_volume, 1.0)


@dataclass(frozen=True, eq=False)
class TrainStats:
    """Statistics fitted on training days only (float64 numpy arrays, read-only).

    Attributes:
        symbols: the S symbols, sorted; row s of each per-symbol array belongs to
            ``symbols[s]`` (see :meth:`index`).
        slot_times: the slot grid (T times of day) the statistics were fitted on.
        vol_window: window (in bars) of the rolling-volatility feature.
        n_train_days: ``[S]`` int64, training days per symbol.
        mean_daily_volume: ``[S]`` mean total volume per training day (data units).
        volume_profile: ``[S, T]`` mean share of the day's volume traded in each slot over
            training days with non-zero volume; each row sums to 1 (uniform 1/T for a
            symbol whose training volume is all zero).
        sigma: ``[S]`` standard deviation (ddof=0) of one-slot log returns within
            training days, excluding returns that end on a filled slot (a fraction per
            minute: 1e-3 = 10 bps).
        mean_minute_volume: ``[S]`` mean volume of a real (not filled) training bar.
        feature_names: the F feature names (``FEATURE_NAMES``).
        feature_mean: ``[F]`` per-feature mean over real training bars (0 for
            ``time_of_day``, which is not normalized).
        feature_std: ``[F]`` per-feature std (ddof=0) floored at ``STD_FLOOR`` (1 for
            ``time_of_day``).
    """

    symbols: tuple[str, ...]
    slot_times: tuple[dt.time, ...]
    vol_window: int
    n_train_days: np.ndarray
    mean_daily_volume: np.ndarray
    volume_profile: np.ndarray
    sigma: np.ndarray
    mean_minute_volume: np.ndarray
    feature_names: tuple[str, ...]
    feature_mean: np.ndarray
    feature_std: np.ndarray

    def index(self, symbol: str) -> int:
        """Row of ``symbol`` in the per-symbol arrays.

        Raises:
            KeyError: if the symbol was not in the training data.
        """
        try:
            return self.symbols.index(symbol)
        except ValueError:
            raise KeyError(symbol) from None


def fit_stats(train_bars: MinuteBars, vol_window: int = 15) -> TrainStats:
    """Fits per-symbol volume/volatility statistics and feature normalization.

    Pass the TRAINING split only (see :func:`split_days`): nothing here may see validation
    or test days.

    Args:
        train_bars: the training days.
        vol_window: window, in bars, of the ``rolling_volatility`` feature (>= 1).

    Returns:
        The fitted :class:`TrainStats`.

    Raises:
        DataError: if ``train_bars`` holds no day.
        ValueError: if ``vol_window < 1``.
    """
    if int(vol_window) < 1:
        raise ValueError(f"vol_window must be >= 1, got {vol_window}")
    vol_window = int(vol_window)
    d = _day_arrays(train_bars)
    if len(d.price) == 0:
        raise DataError(f"{train_bars.name}: no training days to fit statistics on")
    symbols = train_bars.symbols
    n_slots = train_bars.n_slots
    sym_idx = np.searchsorted(np.array(symbols, dtype=object), d.symbols)

    day_volume = d.volume.sum(axis=1)
    n_days = np.bincount(sym_idx, minlength=len(symbols))
    mean_daily_volume = np.bincount(sym_idx, day_volume, len(symbols)) / n_days

    profile = np.full((len(symbols), n_slots), 1.0 / n_slots)
    traded = day_volume > 0
    share = d.volume[traded] / day_volume[traded, None]
    for s in range(len(symbols)):
        rows = sym_idx[traded] == s
        if rows.any():
            p = share[rows].mean(axis=0)
            profile[s] = p / p.sum()

    sigma = np.zeros(len(symbols))
    mean_minute_volume = np.zeros(len(symbols))
    returns = np.log(d.price[:, 1:] / d.price[:, :-1])
    for s in range(len(symbols)):
        rows = sym_idx == s
        r = returns[rows][d.valid[rows, 1:]]
        sigma[s] = r.std() if r.size else 0.0
        v = d.volume[rows][d.valid[rows]]
        mean_minute_volume[s] = v.mean() if v.size else 0.0

    raw = _raw_features(d, _volume_scale(mean_daily_volume)[sym_idx], vol_window)
    real = raw[d.valid]  # [M, F], filled slots excluded
    feature_mean = real.mean(axis=0)
    feature_std = np.maximum(real.std(axis=0), STD_FLOOR)
    for name in UNNORMALIZED_FEATURES:
        i = FEATURE_NAMES.index(name)
        feature_mean[i], feature_std[i] = 0.0, 1.0

    return TrainStats(
        symbols=symbols,
        slot_times=train_bars.slot_times,
        vol_window=vol_window,
        n_train_days=_readonly(n_days.astype(np.int64)),
        mean_daily_volume=_readonly(mean_daily_volume),
        volume_profile=_readonly(profile),
        sigma=_readonly(sigma),
        mean_minute_volume=_readonly(mean_minute_volume),
        feature_names=FEATURE_NAMES,
        feature_mean=_readonly(feature_mean),
        feature_std=_readonly(feature_std),
    )


@dataclass(frozen=True, eq=False)
class EpisodeSet:
    """Dense per-episode arrays (numpy, read-only; the env moves them to device).

    One episode per (symbol, trading day), ordered by symbol then date.

    Attributes:
        price: ``[N, T]`` float32, price per share (close), filled slots carry the
            forward-filled (back-filled at the day start) price.
        volume: ``[N, T]`` float32, market volume in the minute, data units (shares for
            US data; a relative unit, likely lots of 100 shares, for the A-share sample);
            0 on filled slots.
        features: ``[N, T, F]`` float32, ``FEATURE_NAMES`` normalized with the training
            stats: ``(x - mean) / std``, except ``time_of_day`` = slot / T as is. The value
            at slot t uses bars of the same day at slots <= t only.
        valid: ``[N, T]`` bool, False on filled (missing-minute) slots.
        volume_profile: ``[N, T]`` float32, the symbol's TRAINING intraday volume profile
            (sums to 1 over the day).
        expected_day_volume: ``[N]`` float32, the symbol's training mean daily volume.
        sigma: ``[N]`` float32, the symbol's training per-minute log-return std.
        mean_minute_volume: ``[N]`` float32, the symbol's training mean volume per bar.
        trailing_minute_volume: ``[N]`` float32, the symbol's mean volume per real bar
            over its previous :data:`TRAILING_VOLUME_DAYS` trading days, known before the
            day (:func:`with_trailing_volume`; ``mean_minute_volume`` where no earlier
            day is known, and in a set built alone by :func:`build_episodes`).
        symbols: ``N`` symbol names.
        dates: ``N`` trading days.
        slot_times: ``T`` times of day of the slots.
        feature_names: ``F`` feature names.
    """

    price: np.ndarray
    volume: np.ndarray
    features: np.ndarray
    valid: np.ndarray
    volume_profile: np.ndarray
    expected_day_volume: np.ndarray
    sigma: np.ndarray
    mean_minute_volume: np.ndarray
    trailing_minute_volume: np.ndarray
    symbols: tuple[str, ...]
    dates: tuple[dt.date, ...]
    slot_times: tuple[dt.time, ...]
    feature_names: tuple[str, ...]

    @property
    def n_episodes(self) -> int:
        """N."""
        return self.price.shape[0]

    @property
    def n_slots(self) -> int:
        """T."""
        return self.price.shape[1]

    @property
    def n_features(self) -> int:
        """F."""
        return self.features.shape[2]

    def __len__(self) -> int:
        return self.n_episodes

    def spread(self, count: int) -> EpisodeSet:
        """``count`` episodes spread evenly over the set, first and last included (all
        of them when ``count >= N``), in order: a sample of every period of the split
        rather than its first days.

        Raises:
            ValueError: ``count`` below 1.
        """
        if count < 1:
            raise ValueError(f"EpisodeSet.spread: count must be >= 1, got {count}")
        points = np.linspace(0, self.n_episodes - 1, min(count, self.n_episodes))
        index = np.unique(points.round().astype(np.int64))
        arrays = {  # every array field is per episode
            f.name: _readonly(getattr(self, f.name)[index])
            for f in fields(self)
            if isinstance(getattr(self, f.name), np.ndarray)
        }
        return replace(
            self,
            **arrays,
            symbols=tuple(self.symbols[i] for i in index),
            dates=tuple(self.dates[i] for i in index),
        )


def build_episodes(bars: MinuteBars, stats: TrainStats) -> EpisodeSet:
    """Builds dense episode arrays for any split, normalized with training statistics.

    Args:
        bars: the days to turn into episodes (train, val, test or all).
        stats: statistics from :func:`fit_stats` on the TRAINING days of the same dataset.

    Returns:
        The :class:`EpisodeSet`.

    Raises:
        DataError: if ``bars`` has a symbol absent from ``stats`` or a different slot grid.
    """
    name = bars.name or bars.report.source
    if tuple(bars.slot_times) != tuple(stats.slot_times):
        raise DataError(
            f"{name}: slot grid ({bars.n_slots} slots) differs from the grid the stats were "
            f"fitted on ({len(stats.slot_times)} slots); fit stats on the same dataset"
        )
    missing = [s for s in bars.symbols if s not in stats.symbols]
    if missing:
        raise DataError(
            f"{name}: symbol(s) {', '.join(missing)} have no training statistics "
            f"(fitted on: {', '.join(stats.symbols)})"
        )
    d = _day_arrays(bars)
    sym_idx = np.array([stats.index(s) for s in d.symbols], dtype=np.int64)
    raw = _raw_features(d, _volume_scale(stats.mean_daily_volume)[sym_idx], stats.vol_window)
    features = (raw - stats.feature_mean) / stats.feature_std

    def f32(a: np.ndarray) -> np.ndarray:
        return _readonly(np.asarray(a, dtype=np.float32))

    n_slots = bars.n_slots
    return EpisodeSet(
        price=f32(d.price),
        volume=f32(d.volume),
        features=f32(features.reshape(len(d.price), n_slots, len(FEATURE_NAMES))),
        valid=_readonly(d.valid.copy()),
        volume_profile=f32(stats.volume_profile[sym_idx].reshape(-1, n_slots)),
        expected_day_volume=f32(stats.mean_daily_volume[sym_idx]),
        sigma=f32(stats.sigma[sym_idx]),
        mean_minute_volume=f32(stats.mean_minute_volume[sym_idx]),
        trailing_minute_volume=f32(stats.mean_minute_volume[sym_idx]),
        symbols=tuple(str(s) for s in d.symbols),
        dates=tuple(d.dates),
        slot_times=tuple(bars.slot_times),
        feature_names=FEATURE_NAMES,
    )


TRAILING_VOLUME_DAYS = 20
"""Trading days in :attr:`EpisodeSet.trailing_minute_volume` (about a month)."""


def with_trailing_volume(
    sets: list[EpisodeSet], days: int = TRAILING_VOLUME_DAYS
) -> list[EpisodeSet]:
    """The sets with each episode's ``trailing_minute_volume``: the symbol's mean volume
    per real (not filled) bar over its last ``days`` trading days before the episode's
    day among all of ``sets`` (any split: every such day is over before the episode's
    starts), equally weighted; the training mean ``mean_minute_volume`` when the symbol
    has no earlier day there.

    It follows a symbol's volume regime without looking ahead: the index's test days
    trade about half its training mean volume, and a market sized in the training mean
    is twice as deep as those days' volume.

    Args:
        sets: episode sets of one dataset (its splits), any order.
        days: trading days averaged (>= 1).

    Returns:
        The sets, in the same order, with ``trailing_minute_volume`` filled in.

    Raises:
        ValueError: ``days`` below 1.
    """
    if days < 1:
        raise ValueError(f"with_trailing_volume: days must be >= 1, got {days}")
    by_symbol: dict[str, list[tuple[dt.date, float]]] = {}
    for es in sets:
        per_bar = es.volume.sum(axis=1, dtype=np.float64) / np.maximum(es.valid.sum(axis=1), 1)
        for symbol, date, value in zip(es.symbols, es.dates, per_bar, strict=True):
            by_symbol.setdefault(symbol, []).append((date, float(value)))
    history = {s: tuple(zip(*sorted(rows), strict=True)) for s, rows in by_symbol.items()}
    out = []
    for es in sets:
        trailing = np.asarray(es.mean_minute_volume, np.float64).copy()
        for i, (symbol, date) in enumerate(zip(es.symbols, es.dates, strict=True)):
            dates, values = history[symbol]
            end = bisect.bisect_left(dates, date)  # the days strictly before this one
            if end:
                trailing[i] = np.mean(values[max(end - days, 0) : end])
        out.append(replace(es, trailing_minute_volume=_readonly(trailing.astype(np.float32))))
    return out


@dataclass(frozen=True, eq=False)
class MarketSplits:
    """One market's episodes, split by day and by symbol, with the training statistics.

    Attributes:
        name: the dataset name (folder name or file stem).
        train: episodes of the training symbols' training days.
        val: episodes of the training symbols' validation days.
        test: episodes of the training symbols' test days.
        stats: statistics fitted on the training days (per-symbol rows for every symbol,
            held-out ones included; the feature normalization from the training symbols).
        report: the loader's :class:`LoadReport` (fills and drops).
        heldout: episodes of the held-out symbols' test days, or None when no symbol is
            held out (:func:`hold_out_symbols`).
        heldout_symbols: the held-out symbols, sorted.
    """

    name: str
    train: EpisodeSet
    val: EpisodeSet
    test: EpisodeSet
    stats: TrainStats
    report: LoadReport
    heldout: EpisodeSet | None = None
    heldout_symbols: tuple[str, ...] = ()

    def split(self, name: str) -> EpisodeSet:
        """The EpisodeSet named ``"train"``, ``"val"``, ``"test"`` or ``"heldout"``.

        Raises:
            ValueError: another name, or ``"heldout"`` with no symbol held out.
        """
        if name == HELDOUT:
            if self.heldout is None:
                raise ValueError(f"{self.name}: no symbol is held out (data.heldout_symbols)")
            return self.heldout
        if name not in SPLITS:
            raise ValueError(f"split must be one of {(*SPLITS, HELDOUT)}, got {name!r}")
        return getattr(self, name)

    def summary(self) -> str:
        """One line: episodes per split and the held-out symbols' count."""
        line = (
            f"{self.name}: {self.train.n_episodes} train / {self.val.n_episodes} validation / "
            f"{self.test.n_episodes} test episodes of {len(set(self.train.symbols))} symbol(s)"
        )
        if self.heldout is not None:
            line += (
                f"; {self.heldout.n_episodes} test episodes of {len(self.heldout_symbols)} "
                "held-out symbol(s)"
            )
        return line


def load_market(
    path: str | Path,
    *,
    train: float = 0.6,
    val: float = 0.2,
    min_bars_per_day: int = 100,
    short_days: str = "error",
    vol_window: int = 15,
    heldout_symbols: tuple[str, ...] | list[str] = (),
    heldout_fraction: float = 0.0,
    heldout_seed: int = 0,
) -> MarketSplits:
    """Loads a dataset, splits its days and symbols, fits training stats and builds all
    episodes.

    :func:`load_minute_bars` -> :func:`split_days` -> :func:`hold_out_symbols` ->
    :func:`fit_stats` on the training days -> :func:`build_episodes` on each split ->
    :func:`with_trailing_volume` over all of them.

    Args:
        path: folder or file in the loader's format (see :mod:`serl_jax.data.loader`).
        train: fraction of each symbol's days for training.
        val: fraction for validation (the rest is test).
        min_bars_per_day: see :func:`load_minute_bars`.
        short_days: ``"error"`` or ``"drop"``, see :func:`load_minute_bars`.
        vol_window: rolling-volatility window in bars.
        heldout_symbols, heldout_fraction, heldout_seed: the symbols held out of training
            (:func:`hold_out_symbols`); their test days become ``heldout``.

    Returns:
        The :class:`MarketSplits`.

    Raises:
        DataError: for bad data (see :func:`load_minute_bars`), too few days to split, or
            a bad hold-out (see :func:`hold_out_symbols`).
        ValueError: for invalid options.
    """
    bars = load_minute_bars(path, min_bars_per_day=min_bars_per_day, short_days=short_days)
    name = bars.name or str(path)
    held = hold_out_symbols(bars.symbols, heldout_symbols, heldout_fraction, heldout_seed, name)
    parts = split_days(bars, train=train, val=val)
    stats = fit_stats(parts["train"], vol_window=vol_window)
    if held:
        kept = {s: _symbols(parts[s], held, keep=False) for s in SPLITS}
        # the features are normalized as the training symbols alone make them
        own = fit_stats(kept["train"], vol_window=vol_window)
        stats = replace(stats, feature_mean=own.feature_mean, feature_std=own.feature_std)
        heldout = build_episodes(_symbols(parts["test"], held, keep=True), stats)
        parts = kept
    built = [build_episodes(parts[name], stats) for name in SPLITS]
    train, val, test, *rest = with_trailing_volume(built + ([heldout] if held else []))
    return MarketSplits(
        name=bars.name,
        train=train,
        val=val,
        test=test,
        stats=stats,
        report=bars.report,
        heldout=rest[0] if held else None,
        heldout_symbols=held,
    )


def _symbols(bars: MinuteBars, symbols: tuple[str, ...], keep: bool) -> MinuteBars:
    """The days of ``symbols`` (``keep``) or of every other symbol."""
    chosen = bars.frame["symbol"].isin(symbols).to_numpy()
    return bars.with_frame(bars.frame.loc[chosen if keep else ~chosen])
