"""Shared fixtures: the shipped real samples and a synthetic market with a known trend."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from serl_jax.data import load_market, sample_path
from serl_jax.envs.market_data import MarketData


@pytest.fixture(scope="session")
def cn_market():
    """The shipped A-share sample, split 60/20/20 by day."""
    return load_market(sample_path("cn_1min"))


@pytest.fixture(scope="session")
def us_market():
    """The shipped US sample, split 3/1/1 days per symbol."""
    return load_market(sample_path("us_1min"))


def trend_market(
    n_episodes: int = 8,
    n_slots: int = 30,
    drift_per_minute: float = 5e-4,
    minute_volume: float = 1000.0,
    n_features: int = 2,
) -> MarketData:
    """A deterministic market: price ``10 * exp(drift * t)``, constant volume.

    With a positive drift a seller should wait and sell late; with a negative one it
    should sell early. Features are zeros (the policy needs only its private state).
    """
    t = np.arange(n_slots)
    price = np.repeat((10.0 * np.exp(drift_per_minute * t))[None], n_episodes, axis=0)
    return MarketData(
        price=jnp.asarray(price, jnp.float32),
        volume=jnp.full((n_episodes, n_slots), minute_volume, jnp.float32),
        features=jnp.zeros((n_episodes, n_slots, n_features), jnp.float32),
        volume_profile=jnp.full((n_episodes, n_slots), 1.0 / n_slots, jnp.float32),
        expected_day_volume=jnp.full(n_episodes, minute_volume * n_slots, jnp.float32),
        mean_minute_volume=jnp.full(n_episodes, minute_volume, jnp.float32),
        sigma=jnp.full(n_episodes, 5e-4, jnp.float32),
    )


@pytest.fixture(scope="session")
def make_trend_market():
    """The :func:`trend_market` factory, as a fixture."""
    return trend_market
