"""Device-side episode arrays that the execution environments replay.

``MarketData`` is the pytree form of :class:`serl_jax.data.EpisodeSet`: the same arrays
as ``jnp`` leaves, so it can live inside ``EnvParams`` and be passed (not closed over)
into jitted functions. Shapes use N = number of episodes (symbol-days), T = slots per
trading day, F = number of normalized features.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from flax import struct


def _prefix_sum(x: np.ndarray) -> jnp.ndarray:
    """``[N, T] -> [N, T + 1]`` running sums from 0, accumulated in float64."""
    x = np.asarray(x, np.float64)
    out = np.zeros((x.shape[0], x.shape[1] + 1))
    np.cumsum(x, axis=1, out=out[:, 1:])
    return jnp.asarray(out, jnp.float32)


@struct.dataclass
class MarketData:
    """Per-episode market arrays (float32 unless stated).

    Attributes:
        price: ``[N, T]`` price per share in the data's currency units.
        volume: ``[N, T]`` market volume traded in the minute (data units; shares for
            US data, a relative unit, likely lots of 100 shares, for the A-share sample).
        features: ``[N, T, F]`` features normalized with training-day statistics.
        volume_profile: ``[N, T]`` the symbol's intraday volume share per slot, fitted on
            training days only (sums to 1 over the day).
        expected_day_volume: ``[N]`` the symbol's mean daily volume on training days.
        mean_minute_volume: ``[N]`` the symbol's mean volume per minute on training days.
        trailing_minute_volume: ``[N]`` the symbol's mean volume per minute over the
            trading days before the episode's
            (:attr:`serl_jax.data.EpisodeSet.trailing_minute_volume`); the order book's
            volume unit with ``MarketParams.trailing_volume_unit`` 1.
        sigma: ``[N]`` the symbol's per-minute log-return standard deviation on
            training days (a fraction, e.g. 1e-3 = 10 bps).
        cum_price, cum_volume, cum_notional, cum_profile: ``[N, T + 1]`` running sums of
            price, volume, price x volume and volume profile (index 0 is 0), so any
            window's TWAP, VWAP and expected volume cost O(1) at reset.

    Build it with :meth:`create` (or :meth:`from_episodes`), which fills the running sums.
    """

    price: jnp.ndarray
    volume: jnp.ndarray
    features: jnp.ndarray
    volume_profile: jnp.ndarray
    expected_day_volume: jnp.ndarray
    mean_minute_volume: jnp.ndarray
    trailing_minute_volume: jnp.ndarray
    sigma: jnp.ndarray
    cum_price: jnp.ndarray
    cum_volume: jnp.ndarray
    cum_notional: jnp.ndarray
    cum_profile: jnp.ndarray

    @property
    def num_episodes(self) -> int:
        """N, the number of episodes (symbol-days)."""
        return self.price.shape[0]

    @property
    def num_slots(self) -> int:
        """T, the number of one-minute slots per trading day."""
        return self.price.shape[1]

    @property
    def num_features(self) -> int:
        """F, the number of normalized market features per slot."""
        return self.features.shape[2]

    @classmethod
    def create(
        cls,
        price,
        volume,
        features,
        volume_profile,
        expected_day_volume,
        mean_minute_volume,
        sigma,
        trailing_minute_volume=None,
    ) -> MarketData:
        """Builds the device arrays (float32) and their running sums from array-likes.

        Args: the attributes above, with the shapes given there;
        ``trailing_minute_volume`` ``None`` is ``mean_minute_volume`` (no history).

        Raises:
            ValueError: arrays whose shapes disagree (naming the array).
        """
        price = np.asarray(price)
        n, t = price.shape
        expected = {
            "volume": (n, t),
            "volume_profile": (n, t),
            "expected_day_volume": (n,),
            "mean_minute_volume": (n,),
            "sigma": (n,),
            "trailing_minute_volume": (n,),
        }
        arrays = {
            "volume": np.asarray(volume),
            "volume_profile": np.asarray(volume_profile),
            "expected_day_volume": np.asarray(expected_day_volume),
            "mean_minute_volume": np.asarray(mean_minute_volume),
            "sigma": np.asarray(sigma),
            "trailing_minute_volume": np.asarray(
                mean_minute_volume if trailing_minute_volume is None else trailing_minute_volume
            ),
        }
        for name, shape in expected.items():
            if arrays[name].shape != shape:
                raise ValueError(f"MarketData.{name}: shape {arrays[name].shape}, expected {shape}")
        features = np.asarray(features)
        if features.ndim != 3 or features.shape[:2] != (n, t):
            raise ValueError(f"MarketData.features: shape {features.shape}, expected ({n}, {t}, F)")
        f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
        return cls(
            price=f32(price),
            volume=f32(arrays["volume"]),
            features=f32(features),
            volume_profile=f32(arrays["volume_profile"]),
            expected_day_volume=f32(arrays["expected_day_volume"]),
            mean_minute_volume=f32(arrays["mean_minute_volume"]),
            trailing_minute_volume=f32(arrays["trailing_minute_volume"]),
            sigma=f32(arrays["sigma"]),
            cum_price=_prefix_sum(price),
            cum_volume=_prefix_sum(arrays["volume"]),
            cum_notional=_prefix_sum(price.astype(np.float64) * arrays["volume"]),
            cum_profile=_prefix_sum(arrays["volume_profile"]),
        )

    @classmethod
    def from_episodes(cls, episodes) -> MarketData:
        """Moves a :class:`serl_jax.data.EpisodeSet` (numpy arrays) onto the device.

        Args:
            episodes: an ``EpisodeSet`` with the attributes named above.

        Returns:
            The same arrays as float32 ``jnp`` arrays.
        """
        return cls.create(
            episodes.price,
            episodes.volume,
            episodes.features,
            episodes.volume_profile,
            episodes.expected_day_volume,
            episodes.mean_minute_volume,
            episodes.sigma,
            episodes.trailing_minute_volume,
        )


def trend_market(
    n_episodes: int = 8,
    n_slots: int = 30,
    drift_per_minute: float = 5e-4,
    minute_volume: float = 1000.0,
    n_features: int = 2,
    zero_volume_slots: tuple[int, ...] = (),
) -> MarketData:
    """A synthetic market with a known optimal schedule: price ``10 exp(drift t)``, constant
    volume, flat profile (rung (a) of the learnability ladder, and tests).

    With a positive drift a seller should wait and sell late; with a negative one it should
    sell early. Features are zeros (the policy needs only its private state);
    ``zero_volume_slots`` get no market volume (an illiquid minute).

    Args:
        n_episodes: N identical days.
        n_slots: T minutes per day.
        drift_per_minute: log-price drift per minute (5e-4 = 5 bps).
        minute_volume: shares per minute.
        n_features: F (zero) features per slot.
        zero_volume_slots: slots with no volume.

    Returns:
        The :class:`MarketData` (sigma 5 bps a minute).
    """
    volume = np.full((n_episodes, n_slots), minute_volume)
    volume[:, list(zero_volume_slots)] = 0.0
    t = np.arange(n_slots)
    price = np.repeat((10.0 * np.exp(drift_per_minute * t))[None], n_episodes, axis=0)
    return MarketData.create(
        price=price,
        volume=volume,
        features=np.zeros((n_episodes, n_slots, n_features)),
        volume_profile=np.full((n_episodes, n_slots), 1.0 / n_slots),
        expected_day_volume=np.full(n_episodes, minute_volume * n_slots),
        mean_minute_volume=np.full(n_episodes, minute_volume),
        sigma=np.full(n_episodes, 5e-4),
    )
