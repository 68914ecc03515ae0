"""Agent profiles: the default draws pass the profile check, dict outputs (what generated
code returns) are accepted, and bad profiles are named by field."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from serl_jax.components.profiling import (
    AgentProfile,
    as_profile,
    check_profiles,
    default_profile,
    draw_profiles,
)
from serl_jax.envs.execution import EnvParams
from serl_jax.envs.market_data import MarketData

N_SLOTS = 240


@pytest.fixture(scope="module")
def params(cn_market):
    data = MarketData.from_episodes(cn_market.test)
    return EnvParams(data=data, random_window=True, min_window_len=30)


def _draws(profile_fn, params, n_keys=64, n_agents=4) -> AgentProfile:
    """``[keys, agents]`` unclipped draws of a profile function."""

    def per_key(key):
        return jax.vmap(lambda i: as_profile(profile_fn(key, i, n_agents, params)))(
            jnp.arange(n_agents, dtype=jnp.int32)
        )

    return jax.vmap(per_key)(jax.random.split(jax.random.PRNGKey(0), n_keys))


def test_default_profiles_pass_the_check(params):
    draws = _draws(default_profile, params)
    assert check_profiles(draws, N_SLOTS) is None
    assert np.asarray(draws.window_len).min() >= 30
    assert np.unique(np.asarray(draws.start)).size > 10  # random windows per agent


def test_a_dict_profile_is_an_agent_profile(params):
    def as_dict(key, i, n, p):
        own = default_profile(key, i, n, p)
        return {k: getattr(own, k) for k in ("side", "quantity", "start", "window_len", "urgency")}

    key = jax.random.PRNGKey(5)
    a = draw_profiles(as_dict, key, 3, params)
    b = draw_profiles(default_profile, key, 3, params)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    with pytest.raises(ValueError, match=r"missing keys \['urgency'\]"):
        as_profile({"side": 1.0, "quantity": 1.0, "start": 0, "window_len": 5})
    with pytest.raises(ValueError, match="must return a dict"):
        as_profile((1.0, 1.0, 0, 5, 0.0))


def _profile(**changes) -> AgentProfile:
    base = {
        "side": np.array([1.0, -1.0], np.float32),
        "quantity": np.array([1.0, 0.5], np.float32),
        "start": np.array([0, 100], np.int32),
        "window_len": np.array([240, 140], np.int32),
        "urgency": np.array([0.0, 2.0], np.float32),
    }
    return AgentProfile(**{**base, **changes})


@pytest.mark.parametrize(
    "changes, reason",
    [
        ({"window_len": np.array([240, 141], np.int32)}, "window_len must end inside the day"),
        ({"window_len": np.array([0, 140], np.int32)}, "window_len must be >= 1"),
        ({"start": np.array([-1, 100], np.int32)}, "start must be in [0, 240)"),
        ({"start": np.array([0.0, 100.0], np.float32)}, "start must be an integer"),
        ({"quantity": np.array([np.nan, 0.5], np.float32)}, "quantity must be > 0, got nan"),
        ({"quantity": np.array([1.0, 0.0], np.float32)}, "quantity must be > 0, got 0"),
        ({"side": np.array([1.0, 0.0], np.float32)}, "side must be +1 (sell) or -1 (buy)"),
        ({"urgency": np.array([0.0, -1.0], np.float32)}, "urgency must be >= 0"),
        ({"side": np.array([1.0], np.float32)}, "different shapes"),
    ],
)
def test_bad_profiles_are_named(changes, reason):
    assert check_profiles(_profile(), N_SLOTS) is None
    found = check_profiles(_profile(**changes), N_SLOTS)
    assert found is not None and reason in found, found
