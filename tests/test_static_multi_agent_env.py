"""The static multi-agent execution environment: one agent is the single-agent static env
bit for bit (random windows, auto-resets, both child-order sizings); shares are conserved
per agent and agents act only in their windows; an agent's fills do not depend on another
agent's trading (the replayed prices ignore every order; contrast
``test_multi_agent_env.py::test_a_co_seller_lowers_an_agents_price``); its observation
size is the dynamic multi-agent env's.

Runs on four test-split days of the A-share sample.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from serl_jax.components.profiling import AgentProfile
from serl_jax.envs.dynamic import DynamicEnvParams
from serl_jax.envs.execution import EnvParams, ExecutionEnv
from serl_jax.envs.market_data import MarketData
from serl_jax.envs.multi_agent import MultiAgentExecutionEnv
from serl_jax.envs.static_multi_agent import StaticMultiAgentEnv
from serl_jax.market.params import load_market_params

MARKET_YAML = Path(__file__).parents[1] / "configs" / "market" / "cn_1min.yaml"
EPISODES = [0, 10, 20, 30]  # one test day of each of the 4 symbols
KEY = jax.random.PRNGKey(3)
SINGLE_INFO = ["exec_qty", "exec_price", "market_price", "benchmark_price", "quantity"]
SINGLE_INFO += ["executed", "notional", "order_pa", "final_observation"]


@pytest.fixture(scope="module")
def data(cn_market):
    return jax.tree.map(lambda x: x[np.asarray(EPISODES)], MarketData.from_episodes(cn_market.test))


def _steps(env, params, key, steps, n_agents):
    """``steps`` gymnax steps from ``key`` with random actions in [0, 0.2] (the same per
    step for every agent count), auto-resets included; per step the outputs and ``info``."""
    obs, state = env.reset(jax.random.fold_in(key, 0), params)

    def body(carry, k):
        obs, state = carry
        k_action, k_step = jax.random.split(k)
        action = jax.random.uniform(k_action, (), minval=0.0, maxval=0.2)
        actions = action if n_agents is None else jnp.full((n_agents,), action)
        obs, state, reward, terminated, _, info = env.step(k_step, state, actions, params)
        return (obs, state), {"obs": obs, "reward": reward, "terminated": terminated, **info}

    _, out = jax.lax.scan(body, (obs, state), jax.random.split(key, steps))
    return out


def _run(env, params, steps, n_agents):
    return jax.tree.map(np.asarray, jax.jit(lambda k: _steps(env, params, k, steps, n_agents))(KEY))


@pytest.mark.parametrize("child_quantity", ["fixed", "participation"])
def test_one_agent_is_the_static_env(data, child_quantity):
    """Same key, same numbers: 160 steps over random windows of 20+ minutes (so several
    episodes end and reset), every output equal bit for bit."""
    params = EnvParams(
        data=data, child_quantity=child_quantity, random_window=True, min_window_len=20
    )
    single = _run(ExecutionEnv(), params, 160, None)
    multi = _run(StaticMultiAgentEnv(1), params, 160, 1)
    assert single["terminated"].sum() >= 2  # the run crosses auto-resets
    assert multi["active"].all() and multi["terminated"][:, 0].sum() == multi["episode_done"].sum()
    for name in ["obs", "reward", "terminated", *SINGLE_INFO]:
        np.testing.assert_array_equal(multi[name][:, 0], single[name], err_msg=name)
    np.testing.assert_array_equal(multi["team_reward"], single["reward"])


def _fixed_profiles(side, quantity, start, window_len):
    """A profile function with the given per-agent values (Python lists)."""

    def profile(key, i, n, params):
        return AgentProfile(
            side=jnp.asarray(side, jnp.float32)[i],
            quantity=jnp.asarray(quantity, jnp.float32)[i],
            start=jnp.asarray(start, jnp.int32)[i],
            window_len=jnp.asarray(window_len, jnp.int32)[i],
            urgency=jnp.float32(0.0),
        )

    return profile


SIDES, QUANTITIES = [1.0, -1.0, 1.0], [1.0, 2.0, 0.5]
STARTS, LENGTHS = [0, 10, 25], [30, 30, 10]  # the episode: minutes 0 .. 39


def _episode(env, params, actions):
    """One 40-minute episode from KEY with ``step_env`` (no reset): the final state and
    the per-step outputs."""
    state = env.reset_state(KEY, params)

    def body(state, inputs):
        k, a = inputs
        obs, state, reward, terminated, info = env.step_env(k, state, a, params)
        return state, {"obs": obs, "reward": reward, "terminated": terminated, **info}

    return jax.lax.scan(body, state, (jax.random.split(KEY, 40), actions))


def test_conservation_windows_and_independent_fills(data):
    """Three agents (sell, buy, sell) with overlapping windows: shares are conserved per
    agent, agents trade (and are rewarded) only in their windows, waiting agents see
    zeros; and agent 0's and agent 2's outputs are identical whether agent 1 trades half
    its inventory every minute or idles (no agent moves another's prices)."""
    params = EnvParams(data=data)
    env = StaticMultiAgentEnv(3, profile_fn=_fixed_profiles(SIDES, QUANTITIES, STARTS, LENGTHS))
    trading = jnp.full((40, 3), 0.1).at[:, 1].set(0.5)
    final, out = jax.tree.map(np.asarray, jax.jit(lambda a: _episode(env, params, a))(trading))
    agents = final.agents

    assert int(final.clock) == 40 and out["episode_done"][-1] and not out["episode_done"][:-1].any()
    np.testing.assert_array_equal(agents.executed + agents.inventory, agents.quantity)
    assert (agents.inventory == 0).all()  # forced liquidation at each window end
    np.testing.assert_allclose(out["exec_qty"].sum(0), agents.executed, rtol=1e-5)
    minutes = np.arange(40)[:, None]
    in_window = (minutes >= np.asarray(STARTS)) & (minutes < np.add(STARTS, LENGTHS))
    np.testing.assert_array_equal(out["active"], in_window)
    assert (out["exec_qty"][~in_window] == 0).all() and (out["reward"][~in_window] == 0).all()
    np.testing.assert_array_equal(out["terminated"], minutes == np.add(STARTS, LENGTHS) - 1)
    waiting = minutes + 1 < np.asarray(STARTS)
    assert (out["obs"][waiting] == 0).all() and (np.abs(out["obs"][~waiting]).sum(-1) > 0).all()

    _, idle = jax.tree.map(
        np.asarray, jax.jit(lambda a: _episode(env, params, a))(trading.at[:, 1].set(0.0))
    )
    assert (idle["exec_qty"][:-1, 1][in_window[:-1, 1]] == 0).all()  # only the forced fill
    assert not np.array_equal(idle["exec_qty"][:, 1], out["exec_qty"][:, 1])
    for name in ["obs", "reward", "terminated", *SINGLE_INFO[:-1]]:  # step_env: no final obs
        np.testing.assert_array_equal(idle[name][:, [0, 2]], out[name][:, [0, 2]], err_msg=name)


def test_observation_size_is_the_dynamic_envs(data, cn_market):
    params = EnvParams(data=data, lookback=4)
    dynamic = DynamicEnvParams.from_static(params, cn_market.stats, load_market_params(MARKET_YAML))
    size = StaticMultiAgentEnv(2).observation_size(params)
    assert size == MultiAgentExecutionEnv(2).observation_size(dynamic)
    obs, _ = StaticMultiAgentEnv(2).reset(KEY, params)
    assert obs.shape == (2, size)
