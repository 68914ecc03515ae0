"""Shared fixtures: the shipped real samples and a synthetic market with a known trend."""

from __future__ import annotations

import numpy as np
import pytest

from serl_jax.data import load_market, load_minute_bars, sample_path
from serl_jax.envs.market_data import MarketData


@pytest.fixture(scope="session")
def cn_bars():
    """The shipped A-share sample as validated minute bars."""
    return load_minute_bars(sample_path("cn_1min"))


@pytest.fixture(scope="session")
def us_bars():
    """The shipped US sample as validated minute bars."""
    return load_minute_bars(sample_path("us_1min"))


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
    zero_volume_slots: tuple[int, ...] = (),
) -> MarketData:
    """A deterministic market: price ``10 * exp(drift * t)``, constant volume.

    With a positive drift a seller should wait and sell late; with a negative one it
    should sell early. Features are zeros (the policy needs only its private state);
    ``zero_volume_slots`` get no market volume (an illiquid minute).
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


@pytest.fixture(scope="session")
def make_trend_market():
    """The :func:`trend_market` factory, as a fixture."""
    return trend_market
