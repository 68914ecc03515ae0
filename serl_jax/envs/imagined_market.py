"""Imagined trading days as :class:`MarketData`: the imagination slot's output with the
observation features derived by the project, on the device.

:func:`market_features` is the JAX port of :func:`serl_jax.data.episodes._raw_features`
plus the training normalization (tested equal to the NumPy features on real days).
:func:`imagine_days` runs a program of the imagination slot
(:mod:`serl_jax.components.imagination`) over source days (vmapped), derives their
features, and replays the source day in place of an imagined day outside the bounds.

The high-low range. The slot returns prices and volumes only; an imagined minute's
high-low range is its source minute's range times the ratio of the imagined to the source
day's one-minute volatility (a day with twice the volatility has twice the range). Data
without highs and lows keep a range of 0.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from serl_jax.components.imagination import (
    ImaginationBounds,
    ImagineFn,
    day_statistics,
    imagine_params,
    out_of_bounds,
)
from serl_jax.data.episodes import FEATURE_NAMES, TrainStats
from serl_jax.envs.market_data import MarketData

__all__ = [
    "FeatureStats",
    "concat_markets",
    "imagine_days",
    "market_features",
    "source_rows",
]

_RETURN, _VOLATILITY, _VOLUME, _TIME, _RANGE = range(len(FEATURE_NAMES))


@struct.dataclass
class FeatureStats:
    """The training-day feature normalization, on the device.

    Attributes:
        feature_mean: ``float32[F]`` (:attr:`serl_jax.data.TrainStats.feature_mean`).
        feature_std: ``float32[F]`` (floored; 1 for ``time_of_day``).
        vol_window: rolling-volatility window in minutes (static).
    """

    feature_mean: jnp.ndarray
    feature_std: jnp.ndarray
    vol_window: int = struct.field(pytree_node=False, default=15)

    @classmethod
    def from_train_stats(cls, stats: TrainStats) -> FeatureStats:
        """The normalization of :class:`~serl_jax.data.TrainStats`."""
        return cls(
            feature_mean=jnp.asarray(stats.feature_mean, jnp.float32),
            feature_std=jnp.asarray(stats.feature_std, jnp.float32),
            vol_window=int(stats.vol_window),
        )


def market_features(
    price: jnp.ndarray,
    volume: jnp.ndarray,
    high_low_range: jnp.ndarray,
    volume_scale: jnp.ndarray,
    stats: FeatureStats,
) -> jnp.ndarray:
    """Normalized features ``float32[T, F]`` of one day, in ``FEATURE_NAMES`` order.

    The definitions of :mod:`serl_jax.data.episodes`: ``log_return`` ``log(p_t/p_{t-1})``
    (0 at t = 0); ``rolling_volatility`` the std (ddof 0) of the returns of slots
    ``max(1, t-w+1) .. t``; ``volume_share`` ``v_t / volume_scale``; ``time_of_day``
    ``t / T`` (not normalized); ``high_low_range`` as given. Each value at slot t uses
    slots <= t only. Then ``(x - mean) / std`` with the training statistics.

    Args:
        price: ``float32[T]`` minute prices (> 0).
        volume: ``float32[T]`` minute volumes.
        high_low_range: ``float32[T]`` ``(high - low) / price`` per minute (0 if unknown).
        volume_scale: float32 scalar, the symbol's training mean daily volume (1 if it
            never traded).
        stats: the normalization.
    """
    n_slots = price.shape[-1]
    window = stats.vol_window
    log_price = jnp.log(price)
    returns = jnp.concatenate([jnp.zeros((1,), log_price.dtype), jnp.diff(log_price)])
    # Window [t-w+1, t] of every slot, as a [T, w] gather; r_0 is not a return.
    slots = jnp.arange(n_slots)[:, None] - window + 1 + jnp.arange(window)[None, :]
    valid = slots >= 1
    r = jnp.where(valid, returns[jnp.clip(slots, 0, n_slots - 1)], 0.0)
    count = valid.sum(-1)
    denom = jnp.maximum(count, 1)
    mean = r.sum(-1) / denom
    var = jnp.where(valid, (r - mean[:, None]) ** 2, 0.0).sum(-1) / denom
    rolling_vol = jnp.where(count > 0, jnp.sqrt(var), 0.0)
    raw = jnp.stack(
        [
            returns,
            rolling_vol,
            volume / volume_scale,
            jnp.arange(n_slots, dtype=jnp.float32) / n_slots,
            high_low_range,
        ],
        axis=-1,
    )
    return ((raw - stats.feature_mean) / stats.feature_std).astype(jnp.float32)


def _prefix_sum(x: jnp.ndarray) -> jnp.ndarray:
    """``[..., T] -> [..., T + 1]`` running sums from 0 (float32 on the device)."""
    zero = jnp.zeros((*x.shape[:-1], 1), jnp.float32)
    return jnp.concatenate([zero, jnp.cumsum(x.astype(jnp.float32), axis=-1)], axis=-1)


def imagine_days(
    imagine_fn: ImagineFn,
    key: jax.Array,
    data: MarketData,
    sources: jnp.ndarray,
    stats: FeatureStats,
    bounds: ImaginationBounds,
    tick_size: float = 0.0,
) -> tuple[MarketData, jnp.ndarray]:
    """Imagines one day per entry of ``sources`` (vmapped, jittable).

    Args:
        imagine_fn: a validated imagination program.
        key: PRNG key; day ``j`` gets ``jax.random.split(key, M)[j]``.
        data: the real days (training days).
        sources: ``int32[M]`` the source day (row of ``data``) of each imagined day.
        stats: the training feature normalization.
        bounds: an imagined day outside them (or malformed: non-finite, price <= 0,
            volume < 0) is replaced by its source day.
        tick_size: passed to the program (currency per share; 0 unknown).

    Returns:
        ``(imagined, replaced)``: the ``M`` days as :class:`MarketData` (the source
        symbol's training statistics: profile, expected day volume, sigma) and
        ``bool[M]``, the days replayed from their source because the program's day was
        out of bounds.
    """
    src_price, src_volume = data.price[sources], data.volume[sources]
    mean_minute = data.mean_minute_volume[sources]
    keys = jax.random.split(key, sources.shape[0])

    def one(k, p, v, m):
        out_p, out_v = imagine_fn(k, p, v, imagine_params(p, v, m, tick_size))
        return jnp.asarray(out_p, jnp.float32), jnp.asarray(out_v, jnp.float32)

    price, volume = jax.vmap(one)(keys, src_price, src_volume, mean_minute)
    replaced, _ = out_of_bounds(src_price, src_volume, price, volume, bounds)
    price = jnp.where(replaced[:, None], src_price, price)
    volume = jnp.where(replaced[:, None], src_volume, volume)

    # The source minutes' raw high-low range, scaled by the day's volatility ratio.
    src_features = data.features[sources]
    src_range = src_features[..., _RANGE] * stats.feature_std[_RANGE] + stats.feature_mean[_RANGE]
    ratio = day_statistics(price, volume)["volatility"] / jnp.maximum(
        day_statistics(src_price, src_volume)["volatility"], 1e-12
    )
    ratio = jnp.where(replaced, 1.0, ratio)
    high_low_range = src_range * ratio[:, None]
    scale = data.expected_day_volume[sources]
    scale = jnp.where(scale > 0, scale, 1.0)
    features = jax.vmap(market_features, in_axes=(0, 0, 0, 0, None))(
        price, volume, high_low_range, scale, stats
    )
    profile = data.volume_profile[sources]
    imagined = MarketData(
        price=price,
        volume=volume,
        features=features,
        volume_profile=profile,
        expected_day_volume=data.expected_day_volume[sources],
        mean_minute_volume=mean_minute,
        trailing_minute_volume=data.trailing_minute_volume[sources],
        sigma=data.sigma[sources],
        cum_price=_prefix_sum(price),
        cum_volume=_prefix_sum(volume),
        cum_notional=_prefix_sum(price * volume),
        cum_profile=data.cum_profile[sources],
    )
    return imagined, replaced


def concat_markets(first: MarketData, second: MarketData) -> MarketData:
    """The days of ``first`` then ``second`` (same T and F) as one :class:`MarketData`."""
    return jax.tree.map(lambda a, b: jnp.concatenate([a, b], axis=0), first, second)


def source_rows(n_real: int, n_imagined: int) -> np.ndarray:
    """``int32[n_imagined]``: imagined day ``j`` is drawn from real day ``j mod n_real``,
    so every real day is the source of the same number of imagined days (within one)."""
    return (np.arange(n_imagined) % n_real).astype(np.int32)
