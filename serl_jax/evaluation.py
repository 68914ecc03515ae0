"""Vectorized evaluation rollouts: one parent order per symbol-day, any policy.

Every policy (learned or baseline) runs through the same jitted rollout: ``lax.scan`` over
the slots of the day, ``vmap`` over episodes, and optionally ``vmap`` over a leading axis
of policy parameters (e.g. one trained policy per seed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from serl_jax.envs.execution import EnvParams, ExecutionEnv
from serl_jax.metrics import OrderOutcomes

Policy = Callable[..., jnp.ndarray]


class Rollout(NamedTuple):
    """Per-order results of one evaluation (arrays with leading ``[N]`` episodes axis).

    Attributes:
        quantity: ``[N]`` parent-order size Q, shares.
        executed: ``[N]`` shares executed.
        notional: ``[N]`` Σ q·p_exec, currency.
        replayed_notional: ``[N]`` Σ q·p_t at the replayed (undisturbed) price of each
            fill's minute, currency (splits PA into timing and shortfall).
        benchmark_price: ``[N]`` the window's VWAP (or TWAP), currency per share.
        remaining: ``[N, T + 1]`` inventory as a fraction of Q before each step and at the end.
        exec_qty: ``[N, T]`` shares executed per step.
        reward: ``[N, T]`` reward per step (scaled units).
        recorded: what the rollout's ``record`` function returned at each step, stacked
            with leading ``[N, T]`` axes (``None`` without one).
    """

    quantity: jnp.ndarray
    executed: jnp.ndarray
    notional: jnp.ndarray
    replayed_notional: jnp.ndarray
    benchmark_price: jnp.ndarray
    remaining: jnp.ndarray
    exec_qty: jnp.ndarray
    reward: jnp.ndarray
    recorded: Any = None

    def outcomes(self, side: float) -> OrderOutcomes:
        """The per-order arrays the metrics need (float64 numpy)."""
        n = np.asarray(self.quantity).shape[0]
        return OrderOutcomes(
            side=np.full(n, float(side)),
            quantity=np.asarray(self.quantity, np.float64),
            executed=np.asarray(self.executed, np.float64),
            notional=np.asarray(self.notional, np.float64),
            benchmark=np.asarray(self.benchmark_price, np.float64),
            replayed_notional=np.asarray(self.replayed_notional, np.float64),
        )


@dataclass(frozen=True)
class SwitchedPolicy:
    """Several policies behind one index: ``policy_params = (index, params)``, where
    ``index`` is an int32 scalar and ``params`` holds each policy's own parameters in
    order; it acts as ``policies[index]`` (``lax.switch``).

    One compiled :func:`rollout` then serves every policy of the group, called once per
    index, where separate policies compile one rollout each (the dynamic market's takes
    about 3 s to compile on 2 CPU cores, the static market's 0.4 s). The index is one
    scalar for the whole rollout, not per episode, so the switch stays a conditional
    and only the selected policy runs. The policies must return actions of one shape
    and dtype. Hashable and equal by its policies, so an equal group reuses the
    compiled rollout.

    Attributes:
        policies: the policies, each ``policy(params, key, obs, state, env_params) ->
            action``.
    """

    policies: tuple[Policy, ...]

    def __call__(self, policy_params, key, obs, state, env_params):
        index, params = policy_params

        def branch(i):
            return lambda p, *rest: self.policies[i](p[i], *rest)

        branches = [branch(i) for i in range(len(self.policies))]
        return jax.lax.switch(index, branches, params, key, obs, state, env_params)


@partial(jax.jit, static_argnames=("env", "policy", "record"))
def rollout(
    env: ExecutionEnv,
    policy: Policy,
    policy_params: Any,
    env_params: EnvParams,
    key: jax.Array,
    record: Callable[..., Any] | None = None,
) -> Rollout:
    """Executes one whole-day parent order on every episode of ``env_params.data``.

    Args:
        env: the environment (static argument: its reward slot is compiled in).
        policy: ``policy(policy_params, key, obs, state, env_params) -> action`` for one
            episode (static argument).
        policy_params: pytree passed to the policy (``None`` for TWAP/VWAP).
        env_params: parameters holding N episodes of T slots; windows are whole days and Q
            is ``order_fraction`` times the expected day volume (no randomization).
        key: PRNG key (used only by stochastic policies).
        record: optional ``record(prev_state, action, next_state, env_params) -> pytree``
            evaluated at every step (static argument; ``action`` is the clipped action the
            reward slot sees), e.g. the reward's named terms.

    Returns:
        A :class:`Rollout` with N orders.
    """
    n_episodes, n_slots = env_params.data.num_episodes, env_params.data.num_slots

    def one_order(episode, key):
        state = env.init_state(env_params, episode, 0, n_slots)

        def body(state, step_key):
            key_act, key_env = jax.random.split(step_key)
            obs = env.get_obs(state, env_params)
            action = policy(policy_params, key_act, obs, state, env_params)
            _, next_state, reward, _, info = env.step_env(key_env, state, action, env_params)
            remaining = state.inventory / jnp.maximum(state.quantity, 1e-12)
            extra = None
            if record is not None:
                clipped = jnp.clip(jnp.asarray(action, jnp.float32).reshape(()), 0.0, 1.0)
                extra = record(state, clipped, next_state, env_params)
            replayed = info["exec_qty"] * next_state.last_replayed_price
            return next_state, (remaining, info["exec_qty"], replayed, reward, extra)

        final, (remaining, exec_qty, replayed, reward, recorded) = jax.lax.scan(
            body, state, jax.random.split(key, n_slots)
        )
        end = final.inventory / jnp.maximum(final.quantity, 1e-12)
        return Rollout(
            quantity=final.quantity,
            executed=final.executed,
            notional=final.notional,
            replayed_notional=replayed.sum(),
            benchmark_price=final.benchmark_price,
            remaining=jnp.concatenate([remaining, end[None]]),
            exec_qty=exec_qty,
            reward=reward,
            recorded=recorded,
        )

    keys = jax.random.split(key, n_episodes)
    return jax.vmap(one_order)(jnp.arange(n_episodes), keys)


class MultiAgentRollout(NamedTuple):
    """Per-order results of N agents on E days (leading ``[E, N]`` axes).

    Attributes:
        side: ``[E, N]`` +1 sell, -1 buy (each agent's profile).
        quantity, executed, notional, replayed_notional, benchmark_price: ``[E, N]`` as
            in :class:`Rollout`, per agent.
        exec_qty: ``[E, N, T]`` shares executed per minute.
        reward: ``[E, N, T]`` reward per minute (0 outside an agent's window).
        memory: ``[E, N, T, D]`` what the policy carried out of each minute (for the
            trained agents with messages: the normalized observations their messages
            are made of), or None (``keep_memory`` off).
        active: ``[E, N, T]`` bool, the agent was trading in that minute, or None
            (``keep_memory`` off).
        recorded: what ``record`` returned per minute, leaves ``[E, N, T]`` (None
            without ``record``).
    """

    side: jnp.ndarray
    quantity: jnp.ndarray
    executed: jnp.ndarray
    notional: jnp.ndarray
    replayed_notional: jnp.ndarray
    benchmark_price: jnp.ndarray
    exec_qty: jnp.ndarray
    reward: jnp.ndarray
    memory: jnp.ndarray | None = None
    active: jnp.ndarray | None = None
    recorded: Any = None

    def outcomes(self, agent: int) -> OrderOutcomes:
        """Agent ``agent``'s orders (float64 numpy)."""

        def column(x):
            return np.asarray(x, np.float64)[:, agent]

        return OrderOutcomes(
            side=column(self.side),
            quantity=column(self.quantity),
            executed=column(self.executed),
            notional=column(self.notional),
            benchmark=column(self.benchmark_price),
            replayed_notional=column(self.replayed_notional),
        )

    def pooled_outcomes(self) -> OrderOutcomes:
        """Every agent's order as one ``[E * N]`` set (day-major: day 0's agents first;
        float64 numpy): what a score over all agents' orders is a mean of."""

        def flat(x):
            return np.asarray(x, np.float64).reshape(-1)

        return OrderOutcomes(
            side=flat(self.side),
            quantity=flat(self.quantity),
            executed=flat(self.executed),
            notional=flat(self.notional),
            benchmark=flat(self.benchmark_price),
            replayed_notional=flat(self.replayed_notional),
        )

    def team_outcomes(self) -> OrderOutcomes:
        """The team's parent orders, one per day (:meth:`OrderOutcomes.team`: the agents'
        shares, executed shares and notionals summed; in the ``team`` scenario the agents
        share side and benchmark).

        Raises:
            ValueError: if the agents' sides or benchmarks differ on some day (not a team).
        """
        n_agents = np.asarray(self.side).shape[1]
        return OrderOutcomes.team([self.outcomes(i) for i in range(n_agents)])


def per_agent_policy(env, policy: Policy) -> Policy:
    """A single-agent policy (a baseline) acting for every agent of a
    :class:`~serl_jax.envs.multi_agent.MultiAgentExecutionEnv`, as a multi-agent policy of
    :func:`multi_agent_rollout` (``memory`` passed through): agent i's action from its own
    observation, its single-agent view of the state and its side (``env.agent_view``)."""

    def multi(policy_params, key, obs, state, env_params, memory):
        def one(agent, profile, agent_obs, agent_key):
            view, agent_params = env.agent_view(agent, profile, state, env_params)
            return policy(policy_params, agent_key, agent_obs, view, agent_params)

        keys = jax.random.split(key, env.num_agents)
        return jax.vmap(one)(state.agents, state.profile, obs, keys), memory

    return multi


@partial(jax.jit, static_argnames=("env", "policy", "keep_memory", "record"))
def multi_agent_rollout(
    env,
    policy: Policy,
    policy_params: Any,
    env_params: EnvParams,
    key: jax.Array,
    keep_memory: bool = False,
    record: Callable | None = None,
) -> MultiAgentRollout:
    """Runs N agents over every day of ``env_params.data`` in the dynamic market.

    Day ``e`` gets key ``k_e`` (``jax.random.split(key, E)``): its profiles are drawn by
    ``env.init_state`` with ``k_e`` and parameters without augmentation (Q multiplier 1,
    whole-day windows unless the profile sets others), and minute ``t`` uses the t-th of
    ``jax.random.split(k_e, T)``, split into the policy's and the market's key, as in
    :func:`rollout`; so two policies rolled out with one key meet the same profiles and
    background randomness (paired), and one agent running a policy reproduces
    :func:`rollout` of the single-agent dynamic environment.

    Args:
        env: a :class:`~serl_jax.envs.multi_agent.MultiAgentExecutionEnv` (static).
        policy: ``policy(policy_params, key, obs [N, D], state, env_params, memory) ->
            (actions [N], memory)`` (static; :func:`per_agent_policy` lifts a
            single-agent one). ``memory`` is what the policy carries from one minute to
            the next (e.g. the observations its agents' messages are made of), zeros
            shaped like ``obs`` at the day's first minute.
        policy_params: pytree passed to the policy.
        env_params: :class:`~serl_jax.envs.dynamic.DynamicEnvParams` over E days of T
            slots.
        key: PRNG key.
        keep_memory: also return each minute's memory and the agents' active flags
            (static; ``[E, N, T, D]`` more floats).
        record: ``record(state, actions [N], next_state, env_params) -> pytree`` of
            ``[N]`` leaves evaluated every minute (static), e.g.
            ``env.reward_terms``; returned in ``recorded``.

    Returns:
        A :class:`MultiAgentRollout` with E days of N agents.
    """
    n_episodes, n_slots = env_params.data.num_episodes, env_params.data.num_slots
    order_params = env_params.replace(quantity_low=1.0, quantity_high=1.0, random_window=False)

    def one_day(episode, key):
        state = env.init_state(order_params, episode, key)
        memory = jnp.zeros_like(env.get_obs(state, env_params))

        def body(carry, step_key):
            state, memory = carry
            key_act, key_env = jax.random.split(step_key)
            obs = env.get_obs(state, env_params)
            actions, memory = policy(policy_params, key_act, obs, state, env_params, memory)
            _, next_state, reward, _, info = env.step_env(key_env, state, actions, env_params)
            replayed = info["exec_qty"] * next_state.agents.last_replayed_price
            kept = (memory, info["active"]) if keep_memory else None
            extra = None if record is None else record(state, actions, next_state, env_params)
            return (next_state, memory), (info["exec_qty"], replayed, reward, kept, extra)

        (final, _), (exec_qty, replayed, reward, kept, recorded) = jax.lax.scan(
            body, (state, memory), jax.random.split(key, n_slots)
        )
        memory, active = (None, None) if kept is None else kept
        agents = final.agents
        return MultiAgentRollout(
            side=final.profile.side,
            quantity=agents.quantity,
            executed=agents.executed,
            notional=agents.notional,
            replayed_notional=replayed.sum(0),
            benchmark_price=agents.benchmark_price,
            exec_qty=exec_qty.T,
            reward=reward.T,
            memory=None if memory is None else jnp.swapaxes(memory, 0, 1),
            active=None if active is None else active.T,
            recorded=jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), recorded),
        )

    keys = jax.random.split(key, n_episodes)
    return jax.vmap(one_day)(jnp.arange(n_episodes), keys)
