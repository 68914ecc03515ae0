"""Shared fixtures: the shipped real samples and a synthetic market with a known trend."""

from __future__ import annotations

import gc
import os

# The suite compiles hundreds of small XLA programs and runs most of them briefly, so
# compiling dominates: LLVM at -O0 takes the whole suite from 17:42 to 15:49 on 2 CPU
# cores, every assertion and tolerance unchanged (no fast-math either way). Read when JAX
# starts its backend, and inherited by the CLI, worker and Ray processes the tests start;
# the sandbox child (its own minimal environment) and users' runs keep XLA's default.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
    ).strip()

import jax  # noqa: E402 - after XLA_FLAGS, which the backend reads once
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
