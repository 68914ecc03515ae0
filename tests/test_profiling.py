"""Agent profiles (LLM4Profiling): the default draws pass the profile check, dict outputs
(what generated code returns) are accepted, bad profiles are named by field, and the
library's programs pass validation while broken ones are rejected at stage 2."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from llm.designs import library
from llm.validate import load_validated, validate
from serl_jax.components.profiling import (
    AgentProfile,
    as_profile,
    check_profiles,
    default_profile,
    draw_profiles,
)
from serl_jax.envs.dynamic import DynamicEnvParams
from serl_jax.envs.execution import EnvParams
from serl_jax.envs.market_data import MarketData
from serl_jax.envs.multi_agent import MultiAgentExecutionEnv
from serl_jax.market.params import load_market_params

N_SLOTS = 240
MARKET_YAML = Path(__file__).parents[1] / "configs" / "market" / "cn_1min.yaml"


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


@pytest.mark.slow
def test_library_profiles_pass_validation_and_bad_ones_are_rejected(cn_market):
    """Every library program passes both stages; a window past the day's end, a NaN
    quantity, a missing field and a parameter the contract does not list are rejected at
    stage 2 with the field named; then
    staggered_windows, defined in this process, gives 3 agents the hand-computed
    windows of the A-share day (240 minutes: 120 long, starting at 0, 60 and 120)."""
    programs = {d.name: d.code for d in library("profiling")}
    base = programs["independent_days"]
    bad = {
        "past the end": base.replace(
            '"window_len": jnp.int32(params.data.num_slots)',
            '"window_len": jnp.int32(params.data.num_slots + 1)',
        ),
        "nan quantity": base.replace("multiplier,", "multiplier * jnp.nan,"),
        "missing urgency": base.replace('"urgency": jnp.float32(0.0),', ""),
        # A field of the static market's parameters that the contract does not list (the
        # 1.5B's profile that passed on it and crashed in the dynamic market, 2026-11-27).
        "unlisted field": base.replace(
            '"urgency": jnp.float32(0.0),', '"urgency": jnp.float32(params.concentration_penalty),'
        ),
    }
    assert all(code != base for code in bad.values())
    with ThreadPoolExecutor(max_workers=2) as pool:
        jobs = {name: pool.submit(validate, code, "profiling") for name, code in programs.items()}
        jobs.update({name: pool.submit(validate, code, "profiling") for name, code in bad.items()})
        verdicts = {name: job.result() for name, job in jobs.items()}
    for name in programs:
        assert verdicts[name].ok, (name, verdicts[name].reason)
    expected = {
        "past the end": "window_len must end inside the day",
        "nan quantity": "quantity must be > 0, got nan",
        "missing urgency": "missing keys ['urgency']",
        "unlisted field": "'ProfileParams' object has no attribute 'concentration_penalty'",
    }
    for name, reason in expected.items():
        assert verdicts[name].stage == "runtime" and reason in verdicts[name].reason, verdicts[name]

    profile_fn = load_validated(programs["staggered_windows"], "profiling")
    data = MarketData.from_episodes(cn_market.test)
    static = EnvParams(data=data)
    params = DynamicEnvParams.from_static(static, cn_market.stats, load_market_params(MARKET_YAML))
    state = MultiAgentExecutionEnv(3, profile_fn=profile_fn).reset_state(jax.random.key(1), params)
    assert np.asarray(state.profile.start).tolist() == [0, 60, 120]
    assert np.asarray(state.profile.window_len).tolist() == [120, 120, 120]
    assert int(state.clock) == 0 and int(state.end) == 240
