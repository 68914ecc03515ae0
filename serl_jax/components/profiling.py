"""Agent profiles of the multi-agent market: who trades what, when (the LLM4Profiling slot).

A profile function draws one execution agent's parent order at the start of an episode::

    def profile(key, agent_index, n_agents, params) -> AgentProfile

pure JAX (``key`` a PRNG key, ``agent_index`` an ``int32`` scalar, ``n_agents`` a Python
int, ``params`` the environment's :class:`~serl_jax.envs.dynamic.DynamicEnvParams`),
vmapped over the agent index by :class:`~serl_jax.envs.multi_agent.MultiAgentExecutionEnv`.
:func:`default_profile` gives every agent the single-agent environment's draw, so one
agent reproduces :class:`~serl_jax.envs.dynamic.DynamicExecutionEnv` exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from serl_jax.envs.execution import draw_order, hash_uniforms

#: uniforms per agent in :func:`default_profile` (Q multiplier, window start, length)
UNIFORMS_PER_AGENT = 3


@struct.dataclass
class AgentProfile:
    """One agent's parent order (scalars; ``[N]`` for N agents).

    Attributes:
        side: ``float32`` +1 sell, -1 buy.
        quantity: ``float32`` > 0, the multiplier on ``order_fraction * expected window
            volume`` that sizes Q (the single-agent environment's ``quantity_low ..
            quantity_high`` draw); in the ``team`` scenario the agents' Q are the shares
            of one parent order.
        start: ``int32`` first slot (minute) of the window, in ``[0, T)``.
        window_len: ``int32`` slots in the window, ``>= 1`` and ``start + window_len <= T``.
        urgency: ``float32`` >= 0, a risk aversion a reward may read as
            ``params.urgency`` (the default reward does not).
    """

    side: jax.Array
    quantity: jax.Array
    start: jax.Array
    window_len: jax.Array
    urgency: jax.Array


ProfileFn = Callable[[jax.Array, jax.Array, int, Any], AgentProfile]


def default_profile(key: jax.Array, agent_index, n_agents: int, params) -> AgentProfile:
    """Agent i's order as the single-agent environment draws it: side ``params.side``, Q
    multiplier and (with ``random_window``) window from uniforms ``1 + 3i .. 3 + 3i`` of
    :func:`~serl_jax.envs.execution.hash_uniforms` of the reset key (uniform 0 draws the
    day), urgency 0.

    Args:
        key: the reset's PRNG key.
        agent_index: ``int32`` i in ``[0, n_agents)``.
        n_agents: N (static).
        params: :class:`~serl_jax.envs.dynamic.DynamicEnvParams`.

    Returns:
        The :class:`AgentProfile` (scalars).
    """
    u = hash_uniforms(key, 1 + UNIFORMS_PER_AGENT * n_agents)
    first = 1 + UNIFORMS_PER_AGENT * jnp.asarray(agent_index, jnp.int32)
    mine = jax.lax.dynamic_slice(u, (first,), (UNIFORMS_PER_AGENT,))
    multiplier, start, window_len = draw_order(mine, params)
    return AgentProfile(
        side=jnp.asarray(params.side, jnp.float32),
        quantity=jnp.asarray(multiplier, jnp.float32),
        start=jnp.asarray(start, jnp.int32),
        window_len=jnp.asarray(window_len, jnp.int32),
        urgency=jnp.zeros((), jnp.float32),
    )


def draw_profiles(profile_fn: ProfileFn, key: jax.Array, n_agents: int, params) -> AgentProfile:
    """The N agents' profiles, ``[N]`` fields, windows clipped into the day.

    The clip only guards the indexing of a jitted program: validation (the LLM4Profiling
    slot) rejects a profile function whose windows leave the day, so a validated one is
    never clipped.
    """
    profiles = jax.vmap(lambda i: profile_fn(key, i, n_agents, params))(
        jnp.arange(n_agents, dtype=jnp.int32)
    )
    n_slots = params.data.num_slots
    start = jnp.clip(jnp.asarray(profiles.start, jnp.int32), 0, n_slots - 1)
    window_len = jnp.clip(jnp.asarray(profiles.window_len, jnp.int32), 1, n_slots - start)
    return AgentProfile(
        side=jnp.where(jnp.asarray(profiles.side) < 0, -1.0, 1.0).astype(jnp.float32),
        quantity=jnp.asarray(profiles.quantity, jnp.float32),
        start=start,
        window_len=window_len,
        urgency=jnp.asarray(profiles.urgency, jnp.float32),
    )
