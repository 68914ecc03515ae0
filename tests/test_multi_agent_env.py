"""The multi-agent execution environment: one agent is the single-agent dynamic env bit for
bit (market, passive and participation child orders, random windows, auto-resets); an
idle agent changes nothing; each agent's fills and cash are its owner id's settlement and
its shares are conserved; agents wait outside their windows; agents' orders move each
other's prices; the team scenario's shares and team PA.

Runs on four test-split days of the A-share sample in the calibrated CN market.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from serl_jax.components.profiling import AgentProfile, default_profile
from serl_jax.envs.dynamic import DynamicEnvParams, DynamicExecutionEnv
from serl_jax.envs.execution import EnvParams
from serl_jax.envs.market_data import MarketData
from serl_jax.envs.multi_agent import MultiAgentExecutionEnv, team_price_advantage
from serl_jax.market.params import FIRST_AGENT_OWNER, load_market_params

MARKET_YAML = Path(__file__).parents[1] / "configs" / "market" / "cn_1min.yaml"
EPISODES = [0, 10, 20, 30]  # one test day of each of the 4 symbols
KEY = jax.random.PRNGKey(3)


@pytest.fixture(scope="module")
def base(cn_market):
    data = jax.tree.map(lambda x: x[np.asarray(EPISODES)], MarketData.from_episodes(cn_market.test))
    return {"data": data, "stats": cn_market.stats, "market": load_market_params(MARKET_YAML)}


def _params(base, child_order="market", child_quantity="fixed", **static) -> DynamicEnvParams:
    static = EnvParams(data=base["data"], child_quantity=child_quantity, **static)
    return DynamicEnvParams.from_static(static, base["stats"], base["market"], child_order)


def _run(env, params, steps: int, n_agents: int | None):
    """``steps`` gymnax steps from KEY with random actions in [0, 0.2] (the same per step
    for every agent count), auto-resets included; per step the outputs and ``info``."""
    return jax.tree.map(np.asarray, jax.jit(lambda k: _steps(env, params, k, steps, n_agents))(KEY))


def _steps(env, params, key, steps, n_agents):
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


SINGLE_INFO = ["exec_qty", "exec_price", "market_price", "benchmark_price", "quantity"]
SINGLE_INFO += ["executed", "notional", "order_pa", "final_observation"]


@pytest.mark.parametrize(
    "child_order, child_quantity",
    [("market", "fixed"), ("passive", "fixed"), ("market", "participation"), ("sliced", "fixed")],
)
def test_one_agent_is_the_dynamic_env(base, child_order, child_quantity):
    """Same key, same numbers: 160 steps over random windows of 20+ minutes (so several
    episodes end and reset), every output equal bit for bit."""
    params = _params(base, child_order, child_quantity, random_window=True, min_window_len=20)
    single = _run(DynamicExecutionEnv(), params, 160, None)
    multi = _run(MultiAgentExecutionEnv(1), params, 160, 1)
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


def test_an_idle_agent_changes_nothing(base):
    """A second agent with Q = 0 over the same window (default profile of agent 0 with the
    multiplier set to 0): agent 0's outputs equal the one-agent environment's."""
    params = _params(base, "passive", random_window=True, min_window_len=20)

    def idle_second(key, i, n, params):
        own = default_profile(key, 0, n, params)
        return own.replace(quantity=jnp.where(i == 0, own.quantity, 0.0))

    one = _run(MultiAgentExecutionEnv(1), params, 80, 1)
    two = _run(MultiAgentExecutionEnv(2, profile_fn=idle_second), params, 80, 2)
    assert one["terminated"].sum() >= 1
    for name in ["obs", "reward", "terminated", *SINGLE_INFO]:
        np.testing.assert_array_equal(two[name][:, 0], one[name][:, 0], err_msg=name)
    assert (two["exec_qty"][:, 1] == 0).all() and (two["reward"][:, 1] == 0).all()


SIDES, QUANTITIES = [1.0, -1.0, 1.0], [1.0, 2.0, 0.5]
STARTS, LENGTHS = [0, 10, 25], [30, 30, 10]  # the episode: minutes 0 .. 39


def _episode(env, params, key, policy_actions):
    """One episode of 40 minutes with ``step_env`` (no reset), per step: the state before
    and the outputs."""
    state = env.reset_state(key, params)

    def body(state, inputs):
        k, actions = inputs
        obs, next_state, reward, terminated, info = env.step_env(k, state, actions, params)
        out = {"obs": obs, "reward": reward, "terminated": terminated, **info}
        return next_state, (state, out)

    keys = jax.random.split(key, 40)
    final, (states, out) = jax.lax.scan(body, state, (keys, policy_actions))
    return final, states, out


def test_owner_settlement_and_conservation(base):
    """Three agents (sell, buy, sell) with overlapping windows and market child orders:
    each agent's executed shares and notional are its owner id's position and cash in the
    book's settlement, every minute's trades net to zero over all owners, shares are
    conserved per agent, and agents act only in their windows."""
    params = _params(base)
    env = MultiAgentExecutionEnv(3, profile_fn=_fixed_profiles(SIDES, QUANTITIES, STARTS, LENGTHS))
    actions = jnp.full((40, 3), 0.1)
    final, _, out = jax.jit(lambda k: _episode(env, params, k, actions))(KEY)
    tick = params.market.tick_size
    agents, side = final.agents, np.asarray(SIDES)
    owners = FIRST_AGENT_OWNER + np.arange(3)
    position = np.asarray(final.market.position)
    cash = np.asarray(final.market.cash, np.float64)

    assert int(final.clock) == 40 and bool(out["episode_done"][-1])
    assert not out["episode_done"][:-1].any()
    np.testing.assert_array_equal(position.sum(), 0)  # every trade has two sides
    np.testing.assert_allclose(cash.sum(), 0.0, atol=1e-3 * np.abs(cash).sum())
    np.testing.assert_array_equal(-side * position[owners], np.asarray(agents.executed))
    np.testing.assert_allclose(side * cash[owners] * tick, np.asarray(agents.notional), rtol=1e-5)
    np.testing.assert_array_equal(
        np.asarray(agents.executed) + np.asarray(agents.inventory), np.asarray(agents.quantity)
    )
    assert (np.asarray(agents.inventory) == 0).all()  # forced liquidation at each window end
    np.testing.assert_array_equal(out["exec_qty"].sum(0), np.asarray(agents.executed))

    minutes = np.arange(40)[:, None]
    in_window = (minutes >= np.asarray(STARTS)) & (minutes < np.add(STARTS, LENGTHS))
    np.testing.assert_array_equal(out["active"], in_window)
    assert (out["exec_qty"][~in_window] == 0).all() and (out["reward"][~in_window] == 0).all()
    ends = minutes == np.add(STARTS, LENGTHS) - 1
    np.testing.assert_array_equal(out["terminated"], ends)
    # waiting agents see zeros (bars the market has not reached); the obs is for the next
    # minute, so an agent starting at s sees its first observation from step s - 1 on
    waiting = minutes + 1 < np.asarray(STARTS)
    assert (out["obs"][waiting] == 0).all() and (np.abs(out["obs"][~waiting]).sum(-1) > 0).all()


def _twap(n_agents):
    """Actions of a TWAP schedule for every agent over one 30-minute window."""
    left = 30 - jnp.arange(30, dtype=jnp.float32)
    return jnp.broadcast_to((1.0 / left)[:, None], (30, n_agents))


def test_a_co_seller_lowers_an_agents_price(base):
    """Agent 0 sells Q by TWAP over minutes 0-29; a second agent trading 4 Q by TWAP over
    the same minutes on the same side makes agent 0's PA lower than the opposite side
    does, on each of 6 keys over the 4 days (same keys: paired)."""
    params = _params(base)

    def pa_of_agent0(co_side, key):
        profile = _fixed_profiles([1.0, co_side], [1.0, 4.0], [0, 0], [30, 30])
        env = MultiAgentExecutionEnv(2, profile_fn=profile)
        state = env.reset_state(key, params)

        def body(state, inputs):
            k, actions = inputs
            _, state, _, _, info = env.step_env(k, state, actions, params)
            return state, info["order_pa"][0]

        _, pa = jax.lax.scan(body, state, (jax.random.split(key, 30), _twap(2)))
        return pa[-1]

    keys = jax.random.split(KEY, 6)
    together = jax.jit(jax.vmap(lambda k: pa_of_agent0(1.0, k)))(keys)
    against = jax.jit(jax.vmap(lambda k: pa_of_agent0(-1.0, k)))(keys)
    difference = np.asarray(against - together)
    assert (difference > 0).all(), difference


def test_team_shares_one_parent_order(base):
    """The team scenario: agent 0's side and window for all, Q_i the shares; the team
    reward is the share-weighted reward and team PA the pooled fills' PA."""
    params = _params(base)
    profile = _fixed_profiles([1.0, -1.0], [1.0, 3.0], [0, 50], [30, 10])
    env = MultiAgentExecutionEnv(2, scenario="team", profile_fn=profile)
    actions = jnp.broadcast_to(_twap(2), (30, 2))
    state = env.reset_state(KEY, params)
    assert np.asarray(state.profile.side).tolist() == [1.0, 1.0]
    assert np.asarray(state.profile.start).tolist() == [0, 0]
    assert np.asarray(state.profile.window_len).tolist() == [30, 30]
    q = np.asarray(state.agents.quantity)
    assert q[0] > 0 and abs(q[1] - 3 * q[0]) <= 2  # whole shares of 1 and 3 multipliers

    def body(state, inputs):
        k, a = inputs
        _, state, reward, _, info = env.step_env(k, state, a, params)
        return state, (reward, info["team_reward"])

    final, (reward, team_reward) = jax.jit(
        lambda s: jax.lax.scan(body, s, (jax.random.split(KEY, 30), actions))
    )(state)
    share = q / q.sum()
    np.testing.assert_allclose(team_reward, np.asarray(reward) @ share, rtol=1e-6)
    notional = np.asarray(final.agents.notional, np.float64)
    executed = np.asarray(final.agents.executed, np.float64)
    benchmark = float(final.agents.benchmark_price[0])
    by_hand = (notional.sum() / executed.sum() / benchmark - 1.0) * 1e4
    team_pa = team_price_advantage(final.agents.notional, final.agents.executed, benchmark, 1.0)
    np.testing.assert_allclose(float(team_pa), by_hand, atol=1e-3)


def test_bad_configuration_is_refused(base):
    with pytest.raises(ValueError, match="num_agents must be >= 1"):
        MultiAgentExecutionEnv(0)
    with pytest.raises(ValueError, match="scenario must be one of"):
        MultiAgentExecutionEnv(2, scenario="cartel")
    static = EnvParams(data=base["data"])
    with pytest.raises(ValueError, match="needs DynamicEnvParams"):
        MultiAgentExecutionEnv(2).reset(KEY, static)
