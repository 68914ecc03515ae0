"""Market statistics a simulated market is calibrated against: from real data and from
simulator output, in one per-symbol format.

Three sources produce the same :class:`MarketStatistics` (a per-symbol table, an intraday
volume profile and a note per figure saying where it came from):

* :func:`minute_bar_statistics` -- minute bars (:class:`serl_jax.data.MinuteBars`). The
  spread is not observed in bars: it is estimated with Roll's (1984) estimator; top-of-book
  depth is not observed either and is left NaN, to be filled by :func:`transfer_depth`.
* :func:`lobster_statistics` -- one LOBSTER message/orderbook day (e.g. the shipped AMZN
  2012-06-21 level-1 sample): spread and depth time-weighted over the book's states, volume
  from executions (event types 4 and 5), returns from the mid on a minute grid.
* :func:`simulated_statistics` -- simulator output arrays ``[N, T]`` (N symbol-days, T
  minute slots).

:func:`comparison_table` prints real and simulated figures side by side.

Columns of :attr:`MarketStatistics.table` (index: ``symbol``; all float64):

==========================  ==================================================================
``spread_ticks``            mean quoted bid-ask spread, in ticks
``spread_bps``              mean spread relative to the price, basis points (1e-4)
``minute_volatility_bps``   std (ddof=1) of within-day 1-minute log returns, basis points
``volume_per_minute``       mean traded volume per minute, in the data's unit (shares for US
                            and LOBSTER data; a relative unit, likely lots of 100 shares, for
                            the A-share sample)
``top_depth``               mean of best-bid size and best-ask size, same unit as volume
``depth_to_minute_volume``  ``top_depth / volume_per_minute`` (minutes of volume resting at
                            the top of the book)
``excess_kurtosis``         Fisher (excess) kurtosis ``m4 / m2**2 - 3`` (population moments)
                            of the pooled within-day 1-minute log returns (0 for a Gaussian)
``abs_return_acf1``         lag-1 autocorrelation of ``|r|`` over pooled within-day pairs of
                            consecutive returns (volatility clustering; > 0 in real markets)
``flow_impact_per_sigma``   price response to order flow: the least-squares slope of the
                            1-minute return on the minute's net aggressive volume (buyer- minus
                            seller-initiated, in units of ``volume_per_minute``), divided by the
                            1-minute volatility (Kyle's lambda in volatilities per minute of
                            volume; needs trade signs, so not observed in minute bars)
``mean_price``              mean price (close or mid), currency units per share
``n_days``                  number of (symbol, day) series the row was computed from
==========================  ==================================================================

Return conventions shared by all sources. A 1-minute return ``r_t = log p_t - log p_{t-1}``
counts only when both prices are observed (not a filled bar, not a missing mid) and the two
slots are consecutive within the same day: returns across the overnight gap and across a
gap in the slot grid (the A-share lunch break, 11:29 -> 13:00) are excluded. With the
``K`` pooled returns of a symbol, ``m = mean(r)``, ``m_k = mean((r - m)**k)``:

* volatility = ``1e4 * sqrt(sum((r - m)**2) / (K - 1))``;
* excess kurtosis = ``m_4 / m_2**2 - 3``;
* ``abs_return_acf1`` = ``mean_pairs((a_t - mu)(a_{t-1} - mu)) / mean((a - mu)**2)`` with
  ``a = |r|``, ``mu = mean(a)`` over all ``K`` returns and the pairs being consecutive
  returns of the same day (the usual sample autocorrelation, normalized by counts so that
  day boundaries do not bias it);
* ``flow_impact_per_sigma`` = ``cov(x, r) / var(x) / std(r)`` over the returns paired with
  ``x_t`` = the net aggressive volume of minute ``t`` (the minute of the return) divided by
  the mean volume per minute (NaN with fewer than 3 pairs or no variation in ``x``).

Statistics that cannot be computed (too few returns, zero variance) are NaN.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from serl_jax.data.loader import MinuteBars

__all__ = [
    "COMPARISON_COLUMNS",
    "STAT_COLUMNS",
    "MarketStatistics",
    "comparison_table",
    "lobster_statistics",
    "minute_bar_statistics",
    "pooled_comparison_table",
    "simulated_statistics",
    "transfer_depth",
    "transfer_flow_impact",
]

STAT_COLUMNS: tuple[str, ...] = (
    "spread_ticks",
    "spread_bps",
    "minute_volatility_bps",
    "volume_per_minute",
    "top_depth",
    "depth_to_minute_volume",
    "excess_kurtosis",
    "abs_return_acf1",
    "flow_impact_per_sigma",
    "mean_price",
    "n_days",
)
# The figures comparison_table prints (n_days is bookkeeping, not a statistic to match).
COMPARISON_COLUMNS: tuple[str, ...] = STAT_COLUMNS[:-1]

LOBSTER_PRICE_SCALE = 10_000.0  # LOBSTER prices are dollars * 10000
EXECUTION_TYPES = (4, 5)  # visible and hidden executions
REGULAR_SESSION_S = (34_200.0, 57_600.0)  # 09:30-16:00 in seconds after midnight
_REL_EPS = 1e-12  # second moments below this fraction of mean(x**2) are rounding noise
_LOBSTER_NAME = re.compile(
    r"^(?P<symbol>[^_]+)_(?P<date>\d{4}-\d{2}-\d{2})_(?P<start>\d+)_(?P<end>\d+)_"
    r"(?:message|orderbook)_(?P<level>\d+)"
)


@dataclass(frozen=True, eq=False)
class MarketStatistics:
    """Per-symbol market statistics with their provenance.

    Attributes:
        table: DataFrame indexed by ``symbol`` (str), columns :data:`STAT_COLUMNS`
            (float64; units in the module docstring), one row per symbol, sorted.
        profile: DataFrame ``[S, T]`` indexed by ``symbol`` like ``table``, columns the
            slot indices ``0..T-1``: the intraday volume profile, mean volume per slot
            divided by its sum, so each row sums to 1 (NaN row if a symbol had no volume).
        sources: column name (of ``table``, plus ``"profile"``) -> one line saying where
            the figure came from and how it was estimated.
        source: short label of the dataset, e.g. ``"minute bars cn_1min"``.
    """

    table: pd.DataFrame
    profile: pd.DataFrame
    sources: dict[str, str] = field(default_factory=dict)
    source: str = ""

    @property
    def symbols(self) -> tuple[str, ...]:
        """The symbols (rows of ``table``), sorted."""
        return tuple(str(s) for s in self.table.index)

    def describe_sources(self) -> str:
        """Multi-line ``column: source`` text, one line per figure."""
        lines = [f"statistics of {self.source}:" if self.source else "statistics:"]
        lines += [f"  {k}: {v}" for k, v in self.sources.items()]
        return "\n".join(lines)


# --------------------------------------------------------------------------- helpers


def _check_tick(tick_size: float, name: str = "tick_size") -> float:
    try:
        tick = float(tick_size)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a positive number, got {tick_size!r}") from None
    if not math.isfinite(tick) or tick <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {tick_size!r}")
    return tick


def _gap_after(n_slots: int, slot_seconds: np.ndarray | None) -> np.ndarray:
    """``bool[T-1]``: True where slot t+1 does not directly follow slot t (a grid gap)."""
    if slot_seconds is None or n_slots < 3:
        return np.zeros(max(n_slots - 1, 0), dtype=bool)
    step = np.diff(np.asarray(slot_seconds, dtype=np.float64))
    return step > 1.5 * np.median(step)


def _return_pairs(
    logp: np.ndarray, valid: np.ndarray, gap: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Within-day returns ``[D, T-1]`` and their validity mask."""
    r = np.diff(logp, axis=1)
    ok = valid[:, 1:] & valid[:, :-1] & ~gap[None, :]
    return np.where(ok, r, 0.0), ok


def _lag1_autocov(x: np.ndarray, ok: np.ndarray) -> tuple[float, float]:
    """(lag-1 autocovariance, variance) of a series ``x [D, T-1]`` pooled within rows.

    The mean and variance are over all valid ``x``; the autocovariance averages
    ``(x_t - m)(x_{t-1} - m)`` over pairs where both are valid (same row, adjacent)."""
    vals = x[ok]
    if vals.size < 2:
        return math.nan, math.nan
    m = vals.mean()
    var = _clean(float(np.mean((vals - m) ** 2)), vals)
    pair = ok[:, 1:] & ok[:, :-1]
    if not pair.any():
        return math.nan, var
    prod = (x[:, 1:] - m) * (x[:, :-1] - m)
    return _clean(float(prod[pair].mean()), vals), var


def _clean(moment: float, vals: np.ndarray) -> float:
    """A second moment that is rounding noise relative to ``mean(vals**2)`` becomes 0 (a
    constant series must give exactly zero variance / autocovariance)."""
    return 0.0 if abs(moment) <= _REL_EPS * float(np.mean(vals**2)) else moment


def _return_statistics(logp: np.ndarray, valid: np.ndarray, gap: np.ndarray) -> dict:
    """Volatility (bps), excess kurtosis and |r| acf1 of within-day log returns."""
    r, ok = _return_pairs(logp, valid, gap)
    vals = r[ok]
    out = {
        "minute_volatility_bps": math.nan,
        "excess_kurtosis": math.nan,
        "abs_return_acf1": math.nan,
    }
    if vals.size >= 2:
        out["minute_volatility_bps"] = float(np.std(vals, ddof=1) * 1e4)
    if vals.size >= 4:
        c = vals - vals.mean()
        m2 = _clean(float(np.mean(c**2)), vals)
        if m2 > 0:
            out["excess_kurtosis"] = float(np.mean(c**4) / m2**2 - 3.0)
    cov, var = _lag1_autocov(np.abs(r), ok)
    if math.isfinite(cov) and var > 0:
        out["abs_return_acf1"] = cov / var
    return out


def _flow_impact_per_sigma(logp: np.ndarray, valid: np.ndarray, flow: np.ndarray) -> float:
    """Slope of within-row 1-minute log returns on ``flow[:, 1:]`` (net aggressive volume
    of each return's minute, in minutes of volume) divided by the returns' std; rows are
    days, ``[D, T]`` (see the module docstring)."""
    r, ok = _return_pairs(logp, valid, np.zeros(logp.shape[1] - 1, dtype=bool))
    x = flow[:, 1:]
    ok = ok & np.isfinite(x)
    if ok.sum() < 3:
        return math.nan
    r, x = r[ok], x[ok]
    var_x = float(np.var(x))
    sd_r = float(np.std(r, ddof=1))
    if var_x <= 0 or not sd_r > 0:
        return math.nan
    return float(np.mean((x - x.mean()) * (r - r.mean())) / var_x / sd_r)


def _roll_spread(price: np.ndarray, valid: np.ndarray, gap: np.ndarray) -> float:
    """Roll (1984) spread ``2 * sqrt(-cov(dp_t, dp_{t-1}))`` in price units; NaN if the
    autocovariance is not negative (or cannot be computed)."""
    dp, ok = _return_pairs(price, valid, gap)
    cov, _ = _lag1_autocov(dp, ok)
    if not math.isfinite(cov) or cov >= 0:
        return math.nan
    return 2.0 * math.sqrt(-cov)


def _profile_row(mean_volume_per_slot: np.ndarray) -> np.ndarray:
    v = np.nan_to_num(np.asarray(mean_volume_per_slot, dtype=np.float64), nan=0.0)
    total = v.sum()
    return v / total if total > 0 else np.full(v.shape, np.nan)


def _frames(rows: dict[str, dict], profiles: dict[str, np.ndarray]) -> tuple:
    symbols = sorted(rows)
    table = pd.DataFrame([rows[s] for s in symbols], index=pd.Index(symbols, name="symbol"))
    table = table.reindex(columns=list(STAT_COLUMNS)).astype(np.float64)
    n_slots = len(next(iter(profiles.values())))
    profile = pd.DataFrame(
        np.stack([profiles[s] for s in symbols]),
        index=pd.Index(symbols, name="symbol"),
        columns=pd.RangeIndex(n_slots, name="slot"),
    )
    return table, profile


def _clock(seconds: float) -> str:
    """Seconds after midnight as ``HH:MM:SS`` (fractions kept when present)."""
    whole = int(seconds)
    text = f"{whole // 3600:02d}:{whole % 3600 // 60:02d}:{whole % 60:02d}"
    return text + (f"{seconds - whole:.3f}"[1:] if seconds != whole else "")


def _depth_ratio(depth: float, volume: float) -> float:
    return depth / volume if volume > 0 and math.isfinite(depth) else math.nan


# --------------------------------------------------------------------------- minute bars


def minute_bar_statistics(bars: MinuteBars, tick_size: float) -> MarketStatistics:
    """Statistics of minute bars, one row per symbol.

    Filled bars (``bars.frame["filled"]``: slots missing from the input, price
    forward-filled, volume 0) count neither as volume nor as prices: a return needs two
    real bars in consecutive slots of the same day, with no gap of the slot grid between
    them (the A-share lunch break is such a gap).

    * ``spread_ticks``: Roll (1984), "A simple implicit measure of the effective bid-ask
      spread", J. Finance 39(4): ``s = 2 * sqrt(-cov(dp_t, dp_{t-1}))`` with ``dp`` the
      within-day 1-minute close changes in currency units (autocovariance as in the module
      docstring, pooled over the symbol's days), divided by ``tick_size``. When the
      autocovariance is >= 0 the estimator is undefined and 1 tick is used; an estimate
      below 1 tick is floored at 1 tick. ``sources["spread_ticks"]`` names the symbols
      each rule applied to. ``spread_bps = spread_ticks * tick_size / mean_price * 1e4``.
    * ``minute_volatility_bps``, ``excess_kurtosis``, ``abs_return_acf1``: from 1-minute
      log close returns (trade prices: they include bid-ask bounce).
    * ``volume_per_minute``: mean volume of the real bars, data units.
    * ``top_depth``, ``depth_to_minute_volume``: NaN (not observed; see
      :func:`transfer_depth`).
    * profile: per slot, mean volume of the real bars in that slot, normalized to sum 1.

    Args:
        bars: validated minute bars (any number of symbols and days, T slots a day).
        tick_size: the market's minimum price increment in the bars' currency, e.g. 0.01
            (CNY for A-shares, USD for US stocks).

    Returns:
        :class:`MarketStatistics` with ``profile`` of shape ``[S, T]``.

    Raises:
        ValueError: ``bars`` is not a MinuteBars, has no rows or a frame whose length is
            not a multiple of T; ``tick_size`` is not a positive finite number.
    """
    if not isinstance(bars, MinuteBars):
        raise ValueError(f"bars must be a MinuteBars, got {type(bars).__name__}")
    tick = _check_tick(tick_size)
    frame = bars.frame
    n_slots = bars.n_slots
    if len(frame) == 0 or n_slots == 0:
        raise ValueError("bars: no rows (empty data)")
    if len(frame) % n_slots:
        raise ValueError(
            f"bars: frame has {len(frame)} rows, not a multiple of the {n_slots} slots a day"
        )
    slot_seconds = np.array(
        [t.hour * 3600 + t.minute * 60 + t.second + t.microsecond / 1e6 for t in bars.slot_times]
    )
    gap = _gap_after(n_slots, slot_seconds)

    rows: dict[str, dict] = {}
    profiles: dict[str, np.ndarray] = {}
    roll_used, floored, fallback = [], [], []
    for symbol, sel in frame.groupby("symbol", sort=True):
        sel = sel.sort_values(["date", "slot"], kind="stable")
        n_days = len(sel) // n_slots
        price = sel["price"].to_numpy(np.float64).reshape(n_days, n_slots)
        volume = sel["volume"].to_numpy(np.float64).reshape(n_days, n_slots)
        real = ~sel["filled"].to_numpy(bool).reshape(n_days, n_slots)

        mean_price = float(price[real].mean()) if real.any() else math.nan
        row = _return_statistics(np.log(price), real, gap)
        roll = _roll_spread(price, real, gap) / tick
        if math.isnan(roll):
            spread, note = 1.0, fallback
        elif roll < 1.0:
            spread, note = 1.0, floored
        else:
            spread, note = roll, roll_used
        note.append(f"{symbol} ({roll:.3g})" if not math.isnan(roll) else str(symbol))

        n_real = real.sum(axis=0)
        per_slot = np.where(n_real > 0, (volume * real).sum(axis=0) / np.maximum(n_real, 1), 0)
        vpm = float(volume[real].mean()) if real.any() else math.nan
        row.update(
            spread_ticks=spread,
            spread_bps=spread * tick / mean_price * 1e4,
            volume_per_minute=vpm,
            top_depth=math.nan,
            depth_to_minute_volume=math.nan,
            flow_impact_per_sigma=math.nan,
            mean_price=mean_price,
            n_days=float(n_days),
        )
        rows[str(symbol)] = row
        profiles[str(symbol)] = _profile_row(per_slot)

    table, profile = _frames(rows, profiles)
    parts = []
    if roll_used:
        parts.append("estimate used: " + ", ".join(roll_used))
    if floored:
        parts.append("below 1 tick, floored at 1 tick: " + ", ".join(floored))
    if fallback:
        parts.append("autocovariance >= 0 (undefined), 1 tick used: " + ", ".join(fallback))
    label = f"minute bars {bars.name}".strip()
    ret = f"{label}, within-day 1-min log close returns (filled bars and grid gaps excluded)"
    sources = {
        "spread_ticks": f"Roll (1984) estimator from within-day 1-min close changes of {label}, "
        f"tick {tick:g} [in ticks; " + "; ".join(parts) + "]",
        "spread_bps": f"spread_ticks * tick {tick:g} / mean close, {label}",
        "minute_volatility_bps": ret,
        "volume_per_minute": f"{label}, mean volume of real (non-filled) bars, data units",
        "top_depth": "not observed in minute bars (NaN; fill with transfer_depth)",
        "depth_to_minute_volume": "not observed in minute bars (NaN; fill with transfer_depth)",
        "flow_impact_per_sigma": "not observed in minute bars: no trade signs (NaN; fill with "
        "transfer_flow_impact)",
        "excess_kurtosis": ret + ", pooled",
        "abs_return_acf1": ret + ", pooled",
        "mean_price": f"{label}, mean close of real bars",
        "n_days": f"{label}, days per symbol",
        "profile": f"{label}, mean real-bar volume per slot / sum",
    }
    return MarketStatistics(table=table, profile=profile, sources=sources, source=label)


# --------------------------------------------------------------------------- LOBSTER


def lobster_statistics(
    message_path: str | Path,
    orderbook_path: str | Path,
    tick_size_dollars: float = 0.01,
    *,
    symbol: str | None = None,
    session: tuple[float, float] | None = None,
) -> MarketStatistics:
    """Statistics of one LOBSTER day (message + orderbook files), one row.

    Orderbook row ``i`` is the book after message ``i`` and holds from message ``i``'s
    time to message ``i+1``'s (the last to the session end); every figure below is
    restricted to the session ``[start, end)``. Only level 1 of the book is used.

    * ``spread_ticks``: time-weighted mean of ``(ask_1 - bid_1) / 10000 / tick`` over
      states with both sides present; ``spread_bps``: time-weighted mean of
      ``(ask_1 - bid_1) / mid * 1e4``; ``mean_price``: time-weighted mid in dollars.
    * ``top_depth``: time-weighted mean of ``(bid_size_1 + ask_size_1) / 2``, shares, over
      the same states.
    * ``volume_per_minute``: shares executed (event types 4 visible and 5 hidden) in the
      session divided by its length in minutes; profile: executed shares per session
      minute, normalized.
    * returns: log mid at each minute end ``start + 60 k`` (``k = 1..M``), the last mid at or
      before that time, both sides present; ``M - 1`` returns at most.

    Args:
        message_path: LOBSTER message file (``.csv`` or ``.csv.gz``).
        orderbook_path: its orderbook file (any number of levels).
        tick_size_dollars: tick size in dollars (0.01 for US stocks above $1).
        symbol: row label; default the ticker of the LOBSTER file name
            (``TICKER_Date_Start_End_message_Level``), else the name up to the first ``_``.
        session: ``(start, end)`` in seconds after midnight; default from the file name's
            StartTime/EndTime (ms), else 09:30-16:00.

    Returns:
        :class:`MarketStatistics` with one row and a profile of ``[1, M]`` minutes.

    Raises:
        LobsterFormatError: (a ValueError) malformed or mismatched files
            (see :func:`serl_jax.lob.lobster.read_lobster`).
        ValueError: non-positive tick size, a session shorter than two minutes, or no
            book state with both sides present inside the session.
    """
    from serl_jax.lob.lobster import read_lobster

    tick = _check_tick(tick_size_dollars, "tick_size_dollars")
    message_path = Path(message_path)
    match = _LOBSTER_NAME.match(message_path.name)
    if symbol is None:
        symbol = match["symbol"] if match else message_path.name.split("_")[0].split(".")[0]
    if session is None:
        if match:
            session = (int(match["start"]) / 1000.0, int(match["end"]) / 1000.0)
        else:
            session = REGULAR_SESSION_S
    start, end = float(session[0]), float(session[1])
    if not (math.isfinite(start) and math.isfinite(end)) or end - start < 120:
        raise ValueError(f"session must span at least two minutes, got {session!r}")
    n_minutes = int(math.floor((end - start) / 60.0 + 1e-9))

    msgs, book = read_lobster(message_path, orderbook_path)
    if len(msgs) == 0:
        raise ValueError(f"message_path: {message_path.name} has no messages")
    t = msgs.time
    ask = book.ask_price[:, 0].astype(np.float64)
    bid = book.bid_price[:, 0].astype(np.float64)
    ask_size = book.ask_size[:, 0].astype(np.float64)
    bid_size = book.bid_size[:, 0].astype(np.float64)
    two_sided = (ask > 0) & (bid > 0)

    nxt = np.append(t[1:], end)
    weight = np.clip(np.minimum(nxt, end) - np.maximum(t, start), 0.0, None)
    weight = np.where(two_sided, weight, 0.0)
    total_w = weight.sum()
    if total_w <= 0:
        raise ValueError(
            f"orderbook_path: {Path(orderbook_path).name} has no two-sided book inside the "
            f"session {start:g}-{end:g} s"
        )
    spread = (ask - bid) / LOBSTER_PRICE_SCALE  # dollars
    mid = (ask + bid) / 2.0 / LOBSTER_PRICE_SCALE
    safe_mid = np.where(two_sided, mid, 1.0)

    def tw(x: np.ndarray) -> float:
        return float(np.sum(np.where(weight > 0, x, 0.0) * weight) / total_w)

    spread_ticks = tw(spread / tick)
    spread_bps = tw(spread / safe_mid * 1e4)
    top_depth = tw((ask_size + bid_size) / 2.0)
    mean_price = tw(safe_mid)

    in_session = (t >= start) & (t < end)
    executed = np.isin(msgs.event_type, EXECUTION_TYPES) & in_session
    minute = np.minimum(((t[executed] - start) // 60.0).astype(np.int64), n_minutes - 1)
    per_minute = np.bincount(
        minute, weights=msgs.size[executed].astype(np.float64), minlength=n_minutes
    )[:n_minutes]
    vpm = float(per_minute.sum() / n_minutes)
    # LOBSTER's direction is the resting order's side: a buyer-initiated trade executes a
    # sell order (direction -1)
    signed_per_minute = np.bincount(
        minute,
        weights=-(msgs.direction[executed] * msgs.size[executed]).astype(np.float64),
        minlength=n_minutes,
    )[:n_minutes]

    ends = start + 60.0 * np.arange(1, n_minutes + 1)
    t2, mid2 = t[two_sided], mid[two_sided]
    idx = np.searchsorted(t2, ends, side="right") - 1
    have = (idx >= 0) & (ends <= end + 1e-9)
    log_mid = np.where(have, np.log(mid2[np.maximum(idx, 0)]), 0.0)
    row = _return_statistics(log_mid[None, :], have[None, :], np.zeros(n_minutes - 1, dtype=bool))
    flow = signed_per_minute / vpm if vpm > 0 else np.full(n_minutes, np.nan)
    row.update(
        flow_impact_per_sigma=_flow_impact_per_sigma(log_mid[None, :], have[None, :], flow[None]),
        spread_ticks=spread_ticks,
        spread_bps=spread_bps,
        volume_per_minute=vpm,
        top_depth=top_depth,
        depth_to_minute_volume=_depth_ratio(top_depth, vpm),
        mean_price=mean_price,
        n_days=1.0,
    )
    table, profile = _frames({str(symbol): row}, {str(symbol): _profile_row(per_minute)})

    date = match["date"] + " " if match else ""
    levels = (
        "level 1"
        if not match or match["level"] == "1"
        else (f"level {match['level']} file, level 1 used")
    )
    label = f"LOBSTER {symbol} {date}{levels}"
    window = f"{_clock(start)}-{_clock(end)}"
    tw_note = f"{label}, time-weighted over {window}"
    ret = f"{label}, 1-min log mid returns on the {window} minute grid (last mid at or "
    ret += "before each minute end)"
    sources = {
        "spread_ticks": f"{tw_note}, best ask - best bid, tick ${tick:g}",
        "spread_bps": f"{tw_note}, (ask - bid) / mid",
        "minute_volatility_bps": ret,
        "volume_per_minute": f"{label}, executed shares (types 4+5) / {n_minutes} session minutes",
        "top_depth": f"{tw_note}, (best bid size + best ask size) / 2, shares",
        "depth_to_minute_volume": f"{label}, top_depth / volume_per_minute",
        "excess_kurtosis": ret,
        "abs_return_acf1": ret,
        "flow_impact_per_sigma": f"{ret}, on executed shares signed by the aggressor (the "
        "opposite of the executed order's direction) per minute / volume_per_minute",
        "mean_price": f"{tw_note}, mid in dollars",
        "n_days": f"{label}, one day",
        "profile": f"{label}, executed shares per session minute / total",
    }
    return MarketStatistics(table=table, profile=profile, sources=sources, source=label)


# --------------------------------------------------------------------------- depth transfer


def _reference_value(
    stats: MarketStatistics, reference: MarketStatistics, column: str, symbol: str | None
) -> tuple[float, str]:
    """``(value, which rows)`` of ``reference.table[column]`` to transfer (see
    :func:`transfer_depth`)."""
    for name, value in (("stats", stats), ("reference", reference)):
        if not isinstance(value, MarketStatistics):
            raise ValueError(f"{name} must be a MarketStatistics, got {type(value).__name__}")
    values = reference.table[column]
    if symbol is not None:
        if symbol not in values.index:
            raise ValueError(
                f"symbol: {symbol!r} not in reference (has {', '.join(reference.symbols)})"
            )
        value, which = float(values[symbol]), str(symbol)
    else:
        finite = values[np.isfinite(values.to_numpy(np.float64))]
        value = float(finite.mean()) if len(finite) else math.nan
        which = ", ".join(map(str, finite.index)) if len(finite) else ""
        if len(finite) > 1:
            which = f"mean over {which}"
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"reference: no finite positive {column} to transfer (got {value!r})")
    return value, which


def transfer_depth(
    stats: MarketStatistics, reference: MarketStatistics, *, symbol: str | None = None
) -> MarketStatistics:
    """Fills missing ``top_depth`` from a reference market's depth-to-volume ratio.

    Assumption (documented, not verified): top-of-book depth measured in minutes of
    traded volume is similar across markets, so for each row with NaN ``top_depth``::

        top_depth = ratio * volume_per_minute      (in the row's own volume unit)
        depth_to_minute_volume = ratio

    where ``ratio`` is ``reference.table.depth_to_minute_volume`` of ``symbol`` (default:
    the reference's only row, or the mean over its rows with a finite ratio). Rows that
    already have a depth are kept. ``sources`` of the two columns are updated.

    Args:
        stats: statistics with depth to fill (e.g. from :func:`minute_bar_statistics`).
        reference: statistics with an observed depth (e.g. from :func:`lobster_statistics`).
        symbol: which reference row to take the ratio from.

    Returns:
        A new :class:`MarketStatistics` (the inputs are not modified).

    Raises:
        ValueError: an argument is not a MarketStatistics, ``symbol`` is not in
            ``reference``, or the reference has no finite positive ratio.
    """
    ratio, which = _reference_value(stats, reference, "depth_to_minute_volume", symbol)
    table = stats.table.copy()
    missing = table["top_depth"].isna()
    table.loc[missing, "top_depth"] = ratio * table.loc[missing, "volume_per_minute"]
    table.loc[missing, "depth_to_minute_volume"] = ratio
    note = "depth/volume ratio {value:.4g} * volume_per_minute, assuming equal depth in "
    note += "minutes of volume"
    return _with_transferred(
        stats,
        table,
        missing,
        reference,
        which,
        ratio,
        note,
        ("top_depth", "depth_to_minute_volume"),
    )


def transfer_flow_impact(
    stats: MarketStatistics, reference: MarketStatistics, *, symbol: str | None = None
) -> MarketStatistics:
    """Fills missing ``flow_impact_per_sigma`` from a reference market (a LOBSTER day).

    Assumption (documented, not verified): the price response to a minute of net order
    flow, measured in 1-minute volatilities per minute of volume, is similar across
    markets (it is dimensionless; Kyle's lambda itself scales with the volatility). Rows
    that already have the figure are kept; ``symbol`` as in :func:`transfer_depth`.

    Raises:
        ValueError: as :func:`transfer_depth`.
    """
    value, which = _reference_value(stats, reference, "flow_impact_per_sigma", symbol)
    table = stats.table.copy()
    missing = table["flow_impact_per_sigma"].isna()
    table.loc[missing, "flow_impact_per_sigma"] = value
    note = "flow_impact_per_sigma {value:.4g}, assuming an equal response in volatilities "
    note += "per minute of volume"
    return _with_transferred(
        stats, table, missing, reference, which, value, note, ("flow_impact_per_sigma",)
    )


def _with_transferred(stats, table, missing, reference, which, value, note, columns):
    sources = dict(stats.sources)
    if missing.any():
        rows = ", ".join(map(str, table.index[missing]))
        ref = reference.source or "reference"
        text = f"transferred from {ref} ({which}) {note.format(value=value)} [{rows}]"
        for column in columns:
            sources[column] = text
    return MarketStatistics(
        table=table, profile=stats.profile.copy(), sources=sources, source=stats.source
    )


# --------------------------------------------------------------------------- simulation


def _sim_array(
    name: str, value, shape: tuple[int, ...] | None, *, positive: bool, signed: bool = False
) -> np.ndarray:
    try:
        a = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: not a numeric array") from None
    if a.ndim != 2:
        raise ValueError(f"{name}: expected a 2-D array [N, T], got shape {a.shape}")
    if shape is not None and a.shape != shape:
        raise ValueError(f"{name}: shape {a.shape} does not match mid's {shape}")
    if a.size == 0:
        raise ValueError(f"{name}: empty array (shape {a.shape})")
    if np.isinf(a).any():
        raise ValueError(f"{name}: contains inf")
    if np.isnan(a).all():
        raise ValueError(f"{name}: all values are NaN")
    bad = (a <= 0) if positive else (a < 0)
    if bad.any() and not signed:
        what = "non-positive" if positive else "negative"
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{name}: {what} value {a[first]:g} at index {first}")
    return a


def simulated_statistics(
    mid: np.ndarray,
    volume: np.ndarray,
    spread: np.ndarray,
    bid_depth: np.ndarray,
    ask_depth: np.ndarray,
    symbols: Sequence[str],
    tick_size: float,
    *,
    signed_volume: np.ndarray | None = None,
    source: str = "simulation",
) -> MarketStatistics:
    """Statistics of simulator output, grouped by symbol (the same columns as real data).

    Every array is ``float[N, T]``: N symbol-days, T consecutive minute slots (each row is
    one day; returns between adjacent slots of a row count, never across rows). NaN marks
    a missing value (e.g. an empty book side) and is skipped; a return needs both mids.

    * ``spread_ticks`` = mean ``spread``; ``spread_bps`` = mean ``spread / mid * 1e4``.
    * volatility, kurtosis, acf1: 1-minute log returns of ``mid``.
    * ``volume_per_minute`` = mean ``volume``; profile: mean volume per slot / its sum.
    * ``top_depth`` = mean ``(bid_depth + ask_depth) / 2``.
    * ``mean_price`` = mean ``mid * tick_size`` (currency units).
    * ``flow_impact_per_sigma``: returns of ``mid`` on ``signed_volume`` divided by the
      symbol's ``volume_per_minute`` (NaN without ``signed_volume``).

    Args:
        mid: mid price in ticks at each minute end (> 0).
        volume: background traded volume in each minute, shares (>= 0).
        spread: quoted spread in ticks at each minute end (>= 0).
        bid_depth: best-bid size at each minute end, shares (>= 0).
        ask_depth: best-ask size at each minute end, shares (>= 0).
        symbols: ``[N]`` symbol of each row.
        tick_size: the tick in currency units (only for ``mean_price``).
        signed_volume: optional net aggressive volume in each minute, shares (buys
            positive).
        source: label stored in the result's ``source`` and ``sources``.

    Returns:
        :class:`MarketStatistics`, one row per distinct symbol, profile ``[S, T]``.

    Raises:
        ValueError: a non-2-D array, a shape differing from ``mid``'s, an empty array,
            fewer than 2 slots, inf or all-NaN values, a non-positive mid, a negative
            volume/spread/depth, ``len(symbols) != N``, or a non-positive tick size.
    """
    tick = _check_tick(tick_size)
    mid = _sim_array("mid", mid, None, positive=True)
    shape = mid.shape
    if shape[1] < 2:
        raise ValueError(f"mid: need at least 2 minute slots, got shape {shape}")
    volume = _sim_array("volume", volume, shape, positive=False)
    spread = _sim_array("spread", spread, shape, positive=False)
    bid_depth = _sim_array("bid_depth", bid_depth, shape, positive=False)
    ask_depth = _sim_array("ask_depth", ask_depth, shape, positive=False)
    if signed_volume is not None:
        signed_volume = _sim_array(
            "signed_volume", signed_volume, shape, positive=False, signed=True
        )
    if isinstance(symbols, str):
        raise ValueError("symbols: expected a sequence of N names, got a single string")
    names = np.asarray([str(s) for s in symbols], dtype=object)
    if names.shape != (shape[0],):
        raise ValueError(f"symbols: {len(names)} names for {shape[0]} rows of mid")

    n_slots = shape[1]
    gap = np.zeros(n_slots - 1, dtype=bool)
    rows: dict[str, dict] = {}
    profiles: dict[str, np.ndarray] = {}
    for sym in sorted(set(names)):
        sel = names == sym
        m, v, s = mid[sel], volume[sel], spread[sel]
        depth = (bid_depth[sel] + ask_depth[sel]) / 2.0
        have = np.isfinite(m)
        log_mid = np.log(np.where(have, m, 1.0))
        row = _return_statistics(log_mid, have, gap)
        vpm = float(np.nanmean(v)) if np.isfinite(v).any() else math.nan
        if signed_volume is not None and vpm > 0:
            flow = signed_volume[sel] / vpm
            row["flow_impact_per_sigma"] = _flow_impact_per_sigma(log_mid, have, flow)
        top = float(np.nanmean(depth)) if np.isfinite(depth).any() else math.nan
        rel = s / m * 1e4
        row.update(
            spread_ticks=float(np.nanmean(s)) if np.isfinite(s).any() else math.nan,
            spread_bps=float(np.nanmean(rel)) if np.isfinite(rel).any() else math.nan,
            volume_per_minute=vpm,
            top_depth=top,
            depth_to_minute_volume=_depth_ratio(top, vpm),
            mean_price=float(np.nanmean(m) * tick),
            n_days=float(sel.sum()),
        )
        rows[sym] = row
        with np.errstate(invalid="ignore"):
            counts = np.isfinite(v).sum(axis=0)
            per_slot = np.where(counts > 0, np.nansum(v, axis=0) / np.maximum(counts, 1), 0.0)
        profiles[sym] = _profile_row(per_slot)
    table, profile = _frames(rows, profiles)
    ret = f"{source}, within-row 1-min log mid returns, pooled"
    sources = {
        "spread_ticks": f"{source}, mean quoted spread at minute ends, ticks",
        "spread_bps": f"{source}, mean spread / mid at minute ends",
        "minute_volatility_bps": ret,
        "volume_per_minute": f"{source}, mean background volume per minute, shares",
        "top_depth": f"{source}, mean (bid_depth + ask_depth) / 2 at minute ends, shares",
        "depth_to_minute_volume": f"{source}, top_depth / volume_per_minute",
        "excess_kurtosis": ret,
        "abs_return_acf1": ret,
        "flow_impact_per_sigma": f"{ret}, on signed_volume / volume_per_minute",
        "mean_price": f"{source}, mean mid * tick {tick:g}",
        "n_days": f"{source}, rows (symbol-days) per symbol",
        "profile": f"{source}, mean volume per slot / sum",
    }
    return MarketStatistics(table=table, profile=profile, sources=sources, source=source)


# --------------------------------------------------------------------------- comparison


def _fmt(x: float) -> str:
    if x is None or not np.isfinite(x):
        return "-"
    if x != 0 and (abs(x) >= 1e6 or abs(x) < 1e-3):
        return f"{x:.3e}"
    return f"{x:.4g}" if abs(x) < 1e4 else f"{x:.0f}"


def _as_table(name: str, value) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    if isinstance(value, MarketStatistics):
        return value.table, value.profile
    if isinstance(value, pd.DataFrame):
        return value, None
    raise ValueError(
        f"{name} must be a MarketStatistics or a DataFrame, got {type(value).__name__}"
    )


def _compared(real_t: pd.DataFrame, sim_t: pd.DataFrame) -> tuple[list[str], list[str]]:
    """The symbols of either table (as text, sorted) and the comparison columns present
    in either.

    Raises:
        ValueError: both tables are empty.
    """
    symbols = sorted(set(map(str, real_t.index)) | set(map(str, sim_t.index)))
    if not symbols:
        raise ValueError("real, simulated: both tables are empty")
    columns = [c for c in COMPARISON_COLUMNS if c in real_t.columns or c in sim_t.columns]
    return symbols, columns


def comparison_table(real, simulated) -> str:
    """Side-by-side text table of real and simulated statistics, per symbol and figure.

    One block per symbol (the union of both sides' symbols, sorted), one line per column
    of :data:`COMPARISON_COLUMNS` present in either table: ``real``, ``sim`` and
    ``ratio = sim / real`` (``-`` where a value is missing or the ratio undefined). When
    both sides have a volume profile with the same number of slots, a last line gives the
    L1 distance between the profiles (0 identical, 2 disjoint).

    Args:
        real: :class:`MarketStatistics` (or its ``table``) from real data.
        simulated: :class:`MarketStatistics` (or its ``table``) from simulation.

    Returns:
        The table as a multi-line string (no trailing newline).

    Raises:
        ValueError: an argument is neither a MarketStatistics nor a DataFrame, or both
            tables are empty.
    """
    real_t, real_p = _as_table("real", real)
    sim_t, sim_p = _as_table("simulated", simulated)
    symbols, columns = _compared(real_t, sim_t)

    def get(t: pd.DataFrame, sym: str, col: str) -> float:
        if sym in t.index and col in t.columns:
            return float(t.at[sym, col])
        return math.nan

    width = max(len(c) for c in [*columns, "volume_profile_L1"]) + 2
    header = f"{'symbol':<10}{'statistic':<{width}}{'real':>12}{'sim':>12}{'ratio':>10}"
    lines = [header, "-" * len(header)]
    for sym in symbols:
        for col in columns:
            r, s = get(real_t, sym, col), get(sim_t, sym, col)
            ratio = s / r if np.isfinite(r) and np.isfinite(s) and r != 0 else math.nan
            lines.append(f"{sym:<10}{col:<{width}}{_fmt(r):>12}{_fmt(s):>12}{_fmt(ratio):>10}")
        if (
            real_p is not None
            and sim_p is not None
            and sym in real_p.index
            and sym in sim_p.index
            and real_p.shape[1] == sim_p.shape[1]
        ):
            dist = float(np.abs(real_p.loc[sym].to_numpy() - sim_p.loc[sym].to_numpy()).sum())
            lines.append(f"{sym:<10}{'volume_profile_L1':<{width}}{'':>12}{_fmt(dist):>12}")
    return "\n".join(lines)


def pooled_comparison_table(real, simulated) -> str:
    """The comparison of :func:`comparison_table` pooled over symbols: one line per
    statistic, however many symbols there are (the per-symbol table is the verbose one).

    Each line gives the median over symbols of the real and of the simulated value and
    the geometric mean over symbols of ``sim / real``, ``exp(mean_s log(sim_s / real_s))``
    (the pooled log-ratio the calibration's updates use), over the symbols where both
    values are finite and positive; ``n`` counts them.

    Args:
        real: :class:`MarketStatistics` (or its ``table``) from real data.
        simulated: :class:`MarketStatistics` (or its ``table``) from simulation.

    Returns:
        The table as a multi-line string (no trailing newline).

    Raises:
        ValueError: an argument is neither a MarketStatistics nor a DataFrame, or both
            tables are empty.
    """
    real_t, _ = _as_table("real", real)
    sim_t, _ = _as_table("simulated", simulated)
    symbols, columns = _compared(real_t, sim_t)
    real_t, sim_t = real_t.set_axis(real_t.index.map(str)), sim_t.set_axis(sim_t.index.map(str))
    width = max(len(c) for c in columns) + 2
    header = f"{'statistic':<{width}}{'real median':>14}{'sim median':>14}{'sim/real':>10}{'n':>6}"
    lines = [f"{len(symbols)} symbol(s), pooled (--verbose: per symbol)", header]
    lines.append("-" * len(header))
    for col in columns:
        r = real_t[col].reindex(symbols) if col in real_t else pd.Series(np.nan, symbols)
        s = sim_t[col].reindex(symbols) if col in sim_t else pd.Series(np.nan, symbols)
        r, s = r.to_numpy(float), s.to_numpy(float)
        both = np.isfinite(r) & np.isfinite(s) & (r > 0) & (s > 0)
        ratio = float(np.exp(np.mean(np.log(s[both] / r[both])))) if both.any() else math.nan
        med = [float(np.nanmedian(x)) if np.isfinite(x).any() else math.nan for x in (r, s)]
        lines.append(
            f"{col:<{width}}{_fmt(med[0]):>14}{_fmt(med[1]):>14}{_fmt(ratio):>10}"
            f"{int(both.sum()):>6}"
        )
    return "\n".join(lines)
