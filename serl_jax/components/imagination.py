"""The imagination slot (LLM4Imagine): a program that turns a real training day into a
plausible new one, and the bounds an imagined day must keep.

Contract of the slot (pure JAX, jittable, vmappable over days)::

    def imagine(key, price, volume, params) -> (price, volume)

- ``key``: a PRNG key (``jax.random.PRNGKey``), one per imagined day.
- ``price``: ``float32[T]`` the source day's minute prices (close, currency per share).
- ``volume``: ``float32[T]`` the source day's minute volumes (data units, >= 0).
- ``params``: :class:`ImagineParams` of the source day.
- returns ``(price float32[T], volume float32[T])``: one synthetic day of the same
  length, prices finite and > 0, volumes finite and >= 0.

The project, not the program, derives the observation features from the returned price
and volume (:mod:`serl_jax.envs.imagined_market`), so an imagined day cannot show an
agent anything a real day would not. :func:`check_imagined_days` bounds the imagined
day's statistics against its source day (:class:`ImaginationBounds`), so a program cannot
make training trivial with degenerate markets; stage 2 of validation
(:mod:`llm.validate`) and the trainer (:mod:`serl_jax.rl.mixed_sampling`, which replays
the source day instead of a day outside the bounds) both apply it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from flax import struct

__all__ = [
    "IMAGINED_STATISTICS",
    "ImaginationBounds",
    "ImagineFn",
    "ImagineParams",
    "check_imagined_days",
    "day_statistics",
    "imagine_params",
    "out_of_bounds",
    "reflection_statistics",
]

ImagineFn = Callable[[jax.Array, jnp.ndarray, jnp.ndarray, "ImagineParams"], tuple]

# The bounded statistics, in the order check_imagined_days reports them.
IMAGINED_STATISTICS: tuple[str, ...] = ("daily_return", "volatility", "total_volume", "profile")


@struct.dataclass
class ImagineParams:
    """What the imagination program knows of its source day (float32 leaves).

    Attributes:
        tick_size: the instrument's tick, currency per share; 0 when unknown.
        realized_volatility: standard deviation (ddof 0) of the day's T - 1 one-minute
            log returns, a fraction per minute (1e-3 = 10 bps).
        volume_profile: ``float32[T]`` the day's share of its volume in each minute (sums
            to 1; uniform ``1/T`` on a day without volume).
        day_volume: the day's total volume, data units.
        mean_minute_volume: the symbol's mean volume per minute on training days, data
            units.
        n_slots: T, minutes per day (static).
    """

    tick_size: jnp.ndarray
    realized_volatility: jnp.ndarray
    volume_profile: jnp.ndarray
    day_volume: jnp.ndarray
    mean_minute_volume: jnp.ndarray
    n_slots: int = struct.field(pytree_node=False, default=0)


@dataclass(frozen=True)
class ImaginationBounds:
    """How far an imagined day may move from its source day (config ``imagine.bounds``).

    Attributes:
        return_multiple: ``|daily_return|`` of the imagined day at most this many times
            ``max(|source daily return|, source volatility * sqrt(T - 1))`` (the source's
            move or one daily standard deviation, whichever is larger).
        volatility_multiple: imagined over source one-minute volatility within
            ``[1/m, m]`` (the source's volatility floored at 1e-6, 0.01 bps).
        volume_multiple: imagined over source total volume within ``[1/m, m]``.
        profile_distance: total-variation distance ``0.5 * sum |p_imagined - p_source|``
            between the volume profiles at most this (0: identical, 1: disjoint).
    """

    return_multiple: float = 3.0
    volatility_multiple: float = 4.0
    volume_multiple: float = 4.0
    profile_distance: float = 0.5

    def __post_init__(self):
        for name in ("return_multiple", "volatility_multiple", "volume_multiple"):
            if not getattr(self, name) >= 1.0:
                raise ValueError(f"imagine.bounds.{name} must be >= 1, got {getattr(self, name)}")
        if not 0.0 < self.profile_distance <= 1.0:
            raise ValueError(
                f"imagine.bounds.profile_distance must be in (0, 1], got {self.profile_distance}"
            )


def _profile(volume: jnp.ndarray) -> jnp.ndarray:
    total = volume.sum(axis=-1, keepdims=True)
    uniform = jnp.full_like(volume, 1.0 / volume.shape[-1])
    return jnp.where(total > 0, volume / jnp.where(total > 0, total, 1.0), uniform)


def day_statistics(price: jnp.ndarray, volume: jnp.ndarray) -> dict[str, jnp.ndarray]:
    """The statistics an imagined day is bounded by, per day.

    Args:
        price: ``float32[..., T]`` minute prices (> 0).
        volume: ``float32[..., T]`` minute volumes.

    Returns:
        ``daily_return`` (``log(p[T-1] / p[0])``), ``volatility`` (std, ddof 0, of the
        T - 1 one-minute log returns), ``total_volume`` (sum), each ``[...]``, and
        ``profile`` ``[..., T]`` (the volume share per minute, uniform without volume).
    """
    log_price = jnp.log(price)
    returns = jnp.diff(log_price, axis=-1)
    return {
        "daily_return": log_price[..., -1] - log_price[..., 0],
        "volatility": returns.std(axis=-1),
        "total_volume": volume.sum(axis=-1),
        "profile": _profile(volume),
    }


def reflection_statistics(price: jnp.ndarray, volume: jnp.ndarray) -> dict[str, float]:
    """What the designer is told about a set of days (LLM4Imagine's reflection): means
    over the days of

    - ``volatility_bps``: the std (ddof 0) of the one-minute log returns, bps;
    - ``abs_daily_return_bps``: ``|log(p[T-1] / p[0])|``, bps;
    - ``day_volume``: the total volume, data units;
    - ``return_autocorrelation``: the lag-1 sample autocorrelation of the one-minute log
      returns (``sum(d[t] d[t+1]) / sum(d[t]^2)`` with ``d`` the demeaned returns; 0 for a
      day without price moves; Box & Jenkins, *Time Series Analysis*, eq. 2.1.12).

    Args:
        price: ``float32[N, T]`` minute prices (> 0) of N days.
        volume: ``float32[N, T]`` minute volumes.

    Returns:
        The four statistics as Python floats.
    """
    stats = day_statistics(price, volume)
    returns = jnp.diff(jnp.log(price), axis=-1)
    demeaned = returns - returns.mean(axis=-1, keepdims=True)
    numerator = (demeaned[..., :-1] * demeaned[..., 1:]).sum(axis=-1)
    denominator = (demeaned**2).sum(axis=-1)
    autocorrelation = jnp.where(
        denominator > 0, numerator / jnp.where(denominator > 0, denominator, 1.0), 0.0
    )
    return {
        "volatility_bps": float(1e4 * stats["volatility"].mean()),
        "abs_daily_return_bps": float(1e4 * jnp.abs(stats["daily_return"]).mean()),
        "day_volume": float(stats["total_volume"].mean()),
        "return_autocorrelation": float(autocorrelation.mean()),
    }


def imagine_params(
    price: jnp.ndarray, volume: jnp.ndarray, mean_minute_volume: jnp.ndarray, tick_size: float
) -> ImagineParams:
    """:class:`ImagineParams` of one source day.

    Args:
        price: ``float32[T]`` the day's minute prices.
        volume: ``float32[T]`` the day's minute volumes.
        mean_minute_volume: float32 scalar, the symbol's training mean volume per minute.
        tick_size: currency per share, 0 when unknown.
    """
    stats = day_statistics(price, volume)
    return ImagineParams(
        tick_size=jnp.float32(tick_size),
        realized_volatility=stats["volatility"].astype(jnp.float32),
        volume_profile=stats["profile"].astype(jnp.float32),
        day_volume=stats["total_volume"].astype(jnp.float32),
        mean_minute_volume=jnp.asarray(mean_minute_volume, jnp.float32),
        n_slots=price.shape[-1],
    )


def out_of_bounds(
    source_price: jnp.ndarray,
    source_volume: jnp.ndarray,
    price: jnp.ndarray,
    volume: jnp.ndarray,
    bounds: ImaginationBounds,
) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
    """Which imagined days break the bounds (jittable; the trainer's guard).

    Args:
        source_price, source_volume: ``float32[..., T]`` the real days.
        price, volume: ``float32[..., T]`` the imagined days.
        bounds: the limits.

    Returns:
        ``(bad [...] bool, measured)``: ``bad`` also flags non-finite values, prices
        <= 0 and negative volumes; ``measured`` holds per day the value each bound is
        checked on: ``daily_return`` (the imagined day's, a log return),
        ``return_limit`` (its allowed absolute value), ``volatility`` and
        ``total_volume`` (imagined over source ratios), ``profile`` (the total-variation
        distance).
    """
    malformed = ~(
        jnp.isfinite(price).all(-1)
        & jnp.isfinite(volume).all(-1)
        & (price > 0).all(-1)
        & (volume >= 0).all(-1)
    )
    safe_price = jnp.where(malformed[..., None], source_price, price)
    safe_volume = jnp.where(malformed[..., None], source_volume, volume)
    src = day_statistics(source_price, source_volume)
    new = day_statistics(safe_price, safe_volume)
    n_returns = source_price.shape[-1] - 1
    return_limit = bounds.return_multiple * jnp.maximum(
        jnp.abs(src["daily_return"]), src["volatility"] * jnp.sqrt(float(n_returns))
    )
    vol_ratio = new["volatility"] / jnp.maximum(src["volatility"], 1e-6)
    src_total = src["total_volume"]
    volume_ratio = jnp.where(
        src_total > 0, new["total_volume"] / jnp.maximum(src_total, 1e-30), 1.0
    )
    distance = 0.5 * jnp.abs(new["profile"] - src["profile"]).sum(-1)
    measured = {
        "daily_return": new["daily_return"],
        "return_limit": return_limit,
        "volatility": vol_ratio,
        "total_volume": volume_ratio,
        "profile": distance,
    }
    m_vol, m_volume = bounds.volatility_multiple, bounds.volume_multiple
    bad = (
        malformed
        | (jnp.abs(new["daily_return"]) > return_limit)
        | (vol_ratio > m_vol)
        | (vol_ratio < 1.0 / m_vol)
        | (volume_ratio > m_volume)
        | (volume_ratio < 1.0 / m_volume)
        | (distance > bounds.profile_distance)
    )
    return bad, measured


def check_imagined_days(
    source_price,
    source_volume,
    price,
    volume,
    bounds: ImaginationBounds,
) -> str | None:
    """Why a batch of imagined days is rejected, or ``None`` if every day is acceptable
    (host-side; stage 2 of validation).

    Checks, in order, on ``[N, T]`` arrays: shapes and dtypes (float32, the source's
    shape), finite values, prices > 0, volumes >= 0, then the bounds of
    :class:`ImaginationBounds` in the order of :data:`IMAGINED_STATISTICS`.

    Returns:
        A one-line reason naming the statistic, its value, the bound and the day (row),
        or ``None``.
    """
    import numpy as np

    src_p, src_v = np.asarray(source_price), np.asarray(source_volume)
    for name, a in (("price", price), ("volume", volume)):
        shape, dtype = getattr(a, "shape", None), getattr(a, "dtype", None)
        if shape != src_p.shape:
            return f"imagined {name} has shape {shape}, expected {src_p.shape} (the source day's)"
        if dtype != np.float32:
            return f"imagined {name} has dtype {dtype}, expected float32"
    p, v = np.asarray(price), np.asarray(volume)
    for name, a in (("price", p), ("volume", v)):
        finite = np.isfinite(a)
        if not finite.all():
            day, count = int(np.argwhere(~finite)[0][0]), int((~finite).sum())
            return f"imagined {name} is not finite (NaN/inf) on {count} minutes (day {day})"
    if (p <= 0).any():
        day, minute = (int(i) for i in np.argwhere(p <= 0)[0])
        return f"imagined price must be > 0; day {day} minute {minute} has {p[day, minute]:.6g}"
    if (v < 0).any():
        day, minute = (int(i) for i in np.argwhere(v < 0)[0])
        return f"imagined volume must be >= 0; day {day} minute {minute} has {v[day, minute]:.6g}"
    _, measured = out_of_bounds(src_p, src_v, p, v, bounds)
    m = {k: np.asarray(x) for k, x in measured.items()}
    checks = (
        ("daily_return", np.abs(m["daily_return"]) > m["return_limit"],
         lambda d: f"|{m['daily_return'][d]:.4g}| > {m['return_limit'][d]:.4g} "
                   f"({bounds.return_multiple:g}x the source's move or daily std)"),
        ("volatility", (m["volatility"] > bounds.volatility_multiple)
         | (m["volatility"] < 1.0 / bounds.volatility_multiple),
         lambda d: f"{m['volatility'][d]:.4g}x the source's, allowed "
                   f"[1/{bounds.volatility_multiple:g}, {bounds.volatility_multiple:g}]"),
        ("total_volume", (m["total_volume"] > bounds.volume_multiple)
         | (m["total_volume"] < 1.0 / bounds.volume_multiple),
         lambda d: f"{m['total_volume'][d]:.4g}x the source's, allowed "
                   f"[1/{bounds.volume_multiple:g}, {bounds.volume_multiple:g}]"),
        ("profile", m["profile"] > bounds.profile_distance,
         lambda d: f"total-variation distance {m['profile'][d]:.4g} from the source's "
                   f"volume profile > {bounds.profile_distance:g}"),
    )  # fmt: skip
    for name, bad, describe in checks:
        if bad.any():
            day = int(np.argmax(bad))
            return f"imagined {name} out of bounds on day {day} of {len(bad)}: {describe(day)}"
    return None
