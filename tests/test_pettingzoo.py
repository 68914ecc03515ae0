"""The PettingZoo adapter (serl_jax.pettingzoo) against the N-agent gymnax environments it
wraps: PettingZoo's own API test, and a step-for-step replay of ``env.reset`` /
``env.step`` driven by hand with the documented key stream (agents leave when their
windows end); bad actions fail with one-line errors. Floats are compared up to float32
rounding (see tests/test_gym.py)."""

from __future__ import annotations

import warnings
from pathlib import Path

import jax
import numpy as np
import pytest
from pettingzoo.test import parallel_api_test

from serl_jax.config import load_config
from serl_jax.envs.market_data import MarketData
from serl_jax.envs.propagator import PropagatorEnvParams, PropagatorMultiAgentEnv
from serl_jax.envs.static_multi_agent import StaticMultiAgentEnv
from serl_jax.experiment import load_splits
from serl_jax.pettingzoo import ExecutionParallelEnv, parallel_env

TINY = str(Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml")
# random windows: the agents start and end at different minutes
WINDOWS = ["env.random_window=true"]
N = 3


@pytest.fixture(scope="module")
def envs():
    """Both markets, three agents with random windows, the tiny preset."""
    return {
        market: parallel_env(config=TINY, overrides=WINDOWS, market=market, num_agents=N)
        for market in ("dynamic", "static")
    }


@pytest.fixture(scope="module")
def references():
    """The N-agent gymnax environments built by hand (the propagator market is the default
    dynamic one) on the A-share sample's training days."""
    cfg = load_config(TINY, WINDOWS)
    splits = load_splits(cfg, "sample:cn_1min")
    static = cfg.env_params(MarketData.from_episodes(splits.train))
    dynamic = PropagatorEnvParams.from_static(static, splits.stats, cfg.impact.params())
    return {
        "dynamic": (PropagatorMultiAgentEnv(N), dynamic),
        "static": (StaticMultiAgentEnv(N), static),
    }


@pytest.mark.parametrize("market", ["dynamic", "static"])
def test_parallel_api_test_passes_through_whole_episodes(market, envs):
    env = envs[market]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the API test reports most problems as warnings
        parallel_api_test(env, num_cycles=300)  # > 240 minutes: every episode ends
    assert env.agents == []


@pytest.mark.parametrize("market", ["dynamic", "static"])
def test_replays_gymnax_step_for_step(market, envs, references):
    env, (gymnax_env, params) = envs[market], references[market]
    assert isinstance(env, ExecutionParallelEnv)
    assert env.possible_agents == ["agent_0", "agent_1", "agent_2"]
    size = gymnax_env.observation_size(params)
    assert all(env.observation_space(a).shape == (size,) for a in env.possible_agents)
    rng = np.random.default_rng(3)

    obs, infos = env.reset(seed=5)
    key, sub = jax.random.split(jax.random.key(5))
    ref_obs, state = jax.jit(gymnax_env.reset)(sub, params)  # (op by op it takes seconds)
    assert env.agents == env.possible_agents and infos == {a: {} for a in env.agents}
    for i, agent in enumerate(env.possible_agents):
        np.testing.assert_allclose(obs[agent], ref_obs[i], rtol=1e-5, atol=1e-6)
    left = []  # (minute, agent) as agents leave
    for minute in range(300):
        actions = rng.uniform(0.0, 0.1, N).astype(np.float32)
        live = list(env.agents)
        obs, rewards, terminated, truncated, infos = env.step(
            {agent: actions[env.possible_agents.index(agent)] for agent in live}
        )
        key, sub = jax.random.split(key)
        for i, agent in enumerate(env.possible_agents):
            if agent not in live:
                actions[i] = 0.0  # what the adapter sends for an agent that left
        _, state, ref_reward, ref_terminated, _, info = gymnax_env.step(sub, state, actions, params)
        assert set(obs) == set(rewards) == set(terminated) == set(infos) == set(live)
        for agent in live:
            i = env.possible_agents.index(agent)
            final = info["final_observation"][i]  # the minute's own, not the auto-reset's
            np.testing.assert_allclose(obs[agent], final, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(rewards[agent], ref_reward[i], rtol=1e-5, atol=1e-6)
            assert terminated[agent] == bool(ref_terminated[i]) and truncated[agent] is False
            assert infos[agent]["active"] == info["active"][i]
            if terminated[agent]:
                left.append((minute, agent))
        assert set(env.agents) == {a for a in live if not terminated[a]}
        if not env.agents:
            assert bool(info["episode_done"])
            break
        assert not bool(info["episode_done"])
    assert sorted(a for _, a in left) == env.possible_agents  # each left once
    assert len({m for m, _ in left}) > 1  # random windows: not all at the same minute
    with pytest.raises(RuntimeError, match="reset"):
        env.step({})


@pytest.mark.parametrize(
    ("actions", "message"),
    [
        ({"agent_0": 0.1, "agent_1": 0.1}, r"^no action for live agents \['agent_2'\]"),
        ([0.1, 0.1, 0.1], r"^actions: expected a dict of agent -> action"),
        (
            {"agent_0": 0.1, "agent_1": 0.1, "agent_2": 0.1, "agent_9": 0.1},
            r"^actions for agents that are not live: \['agent_9'\]",
        ),
        (
            {"agent_0": 0.1, "agent_1": np.nan, "agent_2": 0.1},
            r"^actions\['agent_1'\] = nan is NaN",
        ),
        (
            {"agent_0": 0.1, "agent_1": 0.1, "agent_2": 1.5},
            r"^actions\['agent_2'\] = 1.5 is outside \[0, 1\]",
        ),
        (
            {"agent_0": [0.1, 0.2], "agent_1": 0.1, "agent_2": 0.1},
            r"^actions\['agent_0'\]: expected shape \(\), got \(2,\)",
        ),
    ],
)
def test_bad_actions_raise_one_line_value_errors(actions, message, envs):
    env = envs["static"]
    env.reset(seed=0)
    with pytest.raises(ValueError, match=message) as err:
        env.step(actions)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_agents": 0}, "num_agents must be an integer >= 1"),
        ({"overrides": ["marl.agents=4"]}, "give the number of agents as num_agents"),
        ({"market": "book"}, "market must be one of"),
    ],
)
def test_bad_arguments_raise_value_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        parallel_env(config=TINY, **kwargs)
