"""Profile programs of the offline designer (the LLM4Profiling slot).

Each program is ``profile(key, agent_index, n_agents, params) -> dict`` with the keys of
:class:`~serl_jax.components.profiling.AgentProfile`: ``side`` (float32, +1 sell or -1
buy), ``quantity`` (float32 > 0, the multiplier on ``order_fraction * expected window
volume`` that sizes the agent's parent order Q), ``start`` and ``window_len`` (int32
minutes: a non-empty window inside the day, ``start + window_len <= params.data.num_slots``)
and ``urgency`` (float32 >= 0, a risk aversion a reward may read). ``key`` is the
episode's PRNG key (shared by the agents: fold in ``agent_index`` for an agent's own
draw), ``agent_index`` an int32 scalar, ``n_agents`` a Python int, ``params`` the
environment's :class:`~serl_jax.envs.execution.EnvParams` (``side``, ``quantity_low``,
``quantity_high``, ``min_window_len``, ``data.num_slots`` ...).

The programs are text, never executed here; ``tests/test_profiling.py`` runs each through
the full validator.
"""

from __future__ import annotations

from llm.designs import Design

__all__ = ["PROFILES"]

_INDEPENDENT_DAYS = """\
# independent_days: every agent works its own parent order over the whole day on the
# run's side, its size drawn from the run's quantity range (the single-agent task).
import jax
import jax.numpy as jnp


def profile(key, agent_index, n_agents, params):
    own = jax.random.fold_in(key, agent_index)
    multiplier = jax.random.uniform(
        own, (), minval=params.quantity_low, maxval=params.quantity_high
    )
    return {
        "side": jnp.float32(params.side),
        "quantity": multiplier,
        "start": jnp.int32(0),
        "window_len": jnp.int32(params.data.num_slots),
        "urgency": jnp.float32(0.0),
    }
"""

_STAGGERED_WINDOWS = """\
# staggered_windows: the agents' windows of WINDOW_SHARE of the day start one after the
# other, spread evenly over the rest of the day (a morning seller meets an afternoon one).
import jax
import jax.numpy as jnp

WINDOW_SHARE = 0.5  # each window's share of the day


def profile(key, agent_index, n_agents, params):
    n = params.data.num_slots
    length = jnp.maximum(jnp.int32(WINDOW_SHARE * n), 1)
    room = n - length
    start = (agent_index * room) // max(n_agents - 1, 1)
    own = jax.random.fold_in(key, agent_index)
    multiplier = jax.random.uniform(
        own, (), minval=params.quantity_low, maxval=params.quantity_high
    )
    return {
        "side": jnp.float32(params.side),
        "quantity": multiplier,
        "start": start.astype(jnp.int32),
        "window_len": length,
        "urgency": jnp.float32(0.0),
    }
"""

_BUYERS_AND_SELLERS = """\
# buyers_and_sellers: even agents sell, odd agents buy, so the agents' child orders can
# cross each other; whole-day windows, sizes from the run's quantity range (a buyer's
# times BUYER_SIZE).
import jax
import jax.numpy as jnp

BUYER_SIZE = 1.0  # a buyer's Q multiplier relative to a seller's


def profile(key, agent_index, n_agents, params):
    own = jax.random.fold_in(key, agent_index)
    multiplier = jax.random.uniform(
        own, (), minval=params.quantity_low, maxval=params.quantity_high
    )
    seller = agent_index % 2 == 0
    side = jnp.where(seller, 1.0, -1.0).astype(jnp.float32)
    return {
        "side": side,
        "quantity": jnp.where(seller, multiplier, BUYER_SIZE * multiplier),
        "start": jnp.int32(0),
        "window_len": jnp.int32(params.data.num_slots),
        "urgency": jnp.float32(0.0),
    }
"""

_URGENT_AND_PATIENT = """\
# urgent_and_patient: agent urgency rises with the index up to MAX_URGENCY, and an urgent
# agent's window shrinks toward SHORTEST_SHARE of the day from a random start.
import jax
import jax.numpy as jnp

MAX_URGENCY = 2.0  # urgency of the last agent
SHORTEST_SHARE = 0.25  # window share of the day of the most urgent agent


def profile(key, agent_index, n_agents, params):
    n = params.data.num_slots
    level = agent_index / max(n_agents - 1, 1)
    share = 1.0 - (1.0 - SHORTEST_SHARE) * level
    length = jnp.clip(jnp.int32(share * n), 1, n)
    own = jax.random.fold_in(key, agent_index)
    key_start, key_size = jax.random.split(own)
    start = jax.random.randint(key_start, (), 0, n - length + 1)
    multiplier = jax.random.uniform(
        key_size, (), minval=params.quantity_low, maxval=params.quantity_high
    )
    return {
        "side": jnp.float32(params.side),
        "quantity": multiplier,
        "start": start.astype(jnp.int32),
        "window_len": length.astype(jnp.int32),
        "urgency": jnp.float32(MAX_URGENCY * level),
    }
"""

PROFILES: tuple[Design, ...] = (
    Design("independent_days", "profiling", _INDEPENDENT_DAYS),
    Design("staggered_windows", "profiling", _STAGGERED_WINDOWS),
    Design("buyers_and_sellers", "profiling", _BUYERS_AND_SELLERS),
    Design("urgent_and_patient", "profiling", _URGENT_AND_PATIENT),
)
