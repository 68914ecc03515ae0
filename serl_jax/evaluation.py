"""Vectorized evaluation rollouts: one parent order per symbol-day, any policy.

Every policy (learned or baseline) runs through the same jitted rollout: ``lax.scan`` over
the slots of the day, ``vmap`` over episodes, and optionally ``vmap`` over a leading axis
of policy parameters (e.g. one trained policy per seed).
"""

from __future__ import annotations

from collections.abc import Callable
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
