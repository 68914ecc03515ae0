"""Device-side episode arrays that the execution environments replay.

``MarketData`` is the pytree form of :class:`serl_jax.data.EpisodeSet`: the same arrays
as ``jnp`` leaves, so it can live inside ``EnvParams`` and be passed (not closed over)
into jitted functions. Shapes use N = number of episodes (symbol-days), T = slots per
trading day, F = number of normalized features.
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import struct


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
        sigma: ``[N]`` the symbol's per-minute log-return standard deviation on
            training days (a fraction, e.g. 1e-3 = 10 bps).
    """

    price: jnp.ndarray
    volume: jnp.ndarray
    features: jnp.ndarray
    volume_profile: jnp.ndarray
    expected_day_volume: jnp.ndarray
    mean_minute_volume: jnp.ndarray
    sigma: jnp.ndarray

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
    def from_episodes(cls, episodes) -> MarketData:
        """Moves a :class:`serl_jax.data.EpisodeSet` (numpy arrays) onto the device.

        Args:
            episodes: an ``EpisodeSet`` with the attributes named above.

        Returns:
            The same arrays as float32 ``jnp`` arrays.
        """
        return cls(
            price=jnp.asarray(episodes.price, jnp.float32),
            volume=jnp.asarray(episodes.volume, jnp.float32),
            features=jnp.asarray(episodes.features, jnp.float32),
            volume_profile=jnp.asarray(episodes.volume_profile, jnp.float32),
            expected_day_volume=jnp.asarray(episodes.expected_day_volume, jnp.float32),
            mean_minute_volume=jnp.asarray(episodes.mean_minute_volume, jnp.float32),
            sigma=jnp.asarray(episodes.sigma, jnp.float32),
        )
