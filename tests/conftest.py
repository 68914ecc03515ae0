"""Shared fixtures: the shipped real samples and a synthetic market with a known trend."""

from __future__ import annotations

import gc

import jax
import pytest

from serl_jax.data import load_market, load_minute_bars, sample_path
from serl_jax.envs.market_data import trend_market


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Lets go of each module's compiled XLA programs when it ends. Every live CPU
    executable holds memory mappings, and the whole suite in one process otherwise passes
    Linux's ``vm.max_map_count`` (65,530): XLA then aborts in the middle of a compile."""
    yield
    jax.clear_caches()
    gc.collect()


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


@pytest.fixture(scope="session")
def make_trend_market():
    """The :func:`serl_jax.envs.market_data.trend_market` factory, as a fixture."""
    return trend_market
