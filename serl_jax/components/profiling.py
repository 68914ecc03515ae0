"""Agent profiles of the multi-agent market: who trades what, when (the LLM4Profiling slot).

A profile function draws one execution agent's parent order at the start of an episode::

    def profile(key, agent_index, n_agents, params) -> AgentProfile  # or a dict of its fields

pure JAX (``key`` a PRNG key, ``agent_index`` an ``int32`` scalar, ``n_agents`` a Python
int, ``params`` the environment's :class:`~serl_jax.envs.dynamic.DynamicEnvParams`),
vmapped over the agent index by :class:`~serl_jax.envs.multi_agent.MultiAgentExecutionEnv`.
:func:`default_profile` gives every agent the single-agent environment's draw, so one
agent reproduces :class:`~serl_jax.envs.dynamic.DynamicExecutionEnv` exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
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

#: the fields of a profile, in :class:`AgentProfile`'s order
PROFILE_FIELDS = ("side", "quantity", "start", "window_len", "urgency")

#: the environment parameters a profile program may read (LLM4Profiling's contract);
#: validation hands a candidate these only, so a program reading another field, one that
#: differs between the static and the dynamic market, is refused before it trains
PROFILE_PARAM_FIELDS = ("side", "quantity_low", "quantity_high", "min_window_len", "data.num_slots")


def as_profile(out: Any) -> AgentProfile:
    """A profile function's output as an :class:`AgentProfile`: the class itself, or a
    mapping with exactly :data:`PROFILE_FIELDS` (what generated code returns: it cannot
    import this module).

    Raises:
        ValueError: a mapping with missing or extra keys, or another type (naming them).
    """
    if isinstance(out, AgentProfile):
        return out
    if not isinstance(out, Mapping):
        raise ValueError(
            f"profile must return a dict with keys {', '.join(PROFILE_FIELDS)}, "
            f"got {type(out).__name__}"
        )
    missing = [k for k in PROFILE_FIELDS if k not in out]
    extra = sorted(set(out) - set(PROFILE_FIELDS))
    if missing or extra:
        raise ValueError(f"profile dict: missing keys {missing}, unknown keys {extra}")
    return AgentProfile(**{k: out[k] for k in PROFILE_FIELDS})


def check_profiles(profiles: AgentProfile, n_slots: int) -> str | None:
    """Why drawn profiles are unusable, or None: the stage-2 check of a profile program.

    Args:
        profiles: :class:`AgentProfile` with ``[..., N]`` leaves (e.g. keys x agents),
            as drawn by ``vmap`` of the program (not clipped).
        n_slots: T, minutes in the day.

    Returns:
        None when every profile has float32 ``side`` in {-1, +1}, ``quantity`` finite and
        > 0, ``urgency`` finite and >= 0, integer ``start`` in ``[0, T)`` and
        ``window_len >= 1`` with ``start + window_len <= T`` (a non-empty window inside
        the day), all of one shape; else a one-line reason naming the field and the
        first offending value.
    """
    shapes = {k: np.shape(getattr(profiles, k)) for k in PROFILE_FIELDS}
    if len(set(shapes.values())) != 1:
        return f"profile fields have different shapes: {shapes}"
    for name in ("start", "window_len"):
        if not np.issubdtype(np.asarray(getattr(profiles, name)).dtype, np.integer):
            dtype = np.asarray(getattr(profiles, name)).dtype
            return f"profile {name} must be an integer (slot count), got {dtype}"
    values = {k: np.asarray(getattr(profiles, k), np.float64) for k in PROFILE_FIELDS}
    rules = [
        ("side", np.isin(values["side"], (-1.0, 1.0)), "must be +1 (sell) or -1 (buy)"),
        ("quantity", np.isfinite(values["quantity"]) & (values["quantity"] > 0), "must be > 0"),
        ("urgency", np.isfinite(values["urgency"]) & (values["urgency"] >= 0), "must be >= 0"),
        (
            "start",
            (values["start"] >= 0) & (values["start"] < n_slots),
            f"must be in [0, {n_slots})",
        ),
        ("window_len", values["window_len"] >= 1, "must be >= 1 (a non-empty window)"),
        (
            "window_len",
            values["start"] + values["window_len"] <= n_slots,
            f"must end inside the day (start + window_len <= {n_slots})",
        ),
    ]
    for name, ok, what in rules:
        if not ok.all():
            bad = values[name][~ok].reshape(-1)[0]
            return f"profile {name} {what}, got {bad:g} in {int((~ok).sum())} of {ok.size} draws"
    return None


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
    profiles = jax.vmap(lambda i: as_profile(profile_fn(key, i, n_agents, params)))(
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
