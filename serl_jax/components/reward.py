"""Reward-slot outputs: a scalar, or named terms that sum to the reward.

Eureka (Ma et al., 2023, "Eureka: Human-level reward design via coding large language
models", Sec. 3.3) feeds the designer statistics of each reward component; letting the
reward return its components as a dict makes those statistics available without any
change to the reward's meaning::

    def reward(prev_state, action, next_state, params):
        return {"pa": pa_term, "pace": -0.1 * deviation**2}   # reward = pa + pace

:func:`switch_reward` and :func:`switch_reward_terms` put several rewards behind one
index, so that K reward candidates train in one compiled program (the index is data: one
per lane, :func:`serl_jax.experiment.train_candidates`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp

__all__ = [
    "MAX_REWARD_TERMS",
    "RewardOutput",
    "check_reward_output",
    "reward_term_values",
    "switch_reward",
    "switch_reward_terms",
    "total_reward",
]

#: The most named terms a reward may return.
MAX_REWARD_TERMS = 16

RewardOutput = jnp.ndarray | Mapping[str, jnp.ndarray]

_TERM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,39}$")


def total_reward(out: RewardOutput) -> jnp.ndarray:
    """The reward a slot output stands for: the scalar itself, or the sum of its terms.

    Args:
        out: a float32 scalar, or a dict of float32 scalars (terms, in insertion order).

    Returns:
        float32 scalar (same leading batch shape as the terms when called under ``vmap``).
    """
    if isinstance(out, Mapping):
        values = list(out.values())
        total = values[0]
        for v in values[1:]:
            total = total + v
        return total
    return out


def reward_term_values(out: RewardOutput) -> dict[str, jnp.ndarray]:
    """The named terms of a slot output, plus ``"total"``; a scalar output has only
    ``"total"``."""
    terms = dict(out) if isinstance(out, Mapping) else {}
    terms["total"] = total_reward(out)
    return terms


def switch_reward(reward_fns: Sequence[Callable], index: jax.Array) -> Callable:
    """The reward slot that computes ``reward_fns[index]``'s total reward.

    Args:
        reward_fns: K reward slots (``reward(prev_state, action, next_state, params)``).
        index: int32 scalar in ``[0, K)``; a tracer, e.g. one per vmapped lane. Under
            ``vmap`` with a batched index, ``lax.switch`` evaluates all K rewards and
            selects per lane, so a lane pays for every candidate's reward (rewards are a
            few arithmetic operations next to the environment step).

    Returns:
        ``reward(prev_state, action, next_state, params) -> float32 scalar``.
    """
    branches = [
        lambda prev, action, nxt, params, fn=fn: total_reward(fn(prev, action, nxt, params))
        for fn in reward_fns
    ]

    def reward(prev_state, action, next_state, params):
        return jax.lax.switch(index, branches, prev_state, action, next_state, params)

    return reward


def switch_reward_terms(
    reward_fns: Sequence[Callable], term_names: Sequence[Sequence[str]], index: jax.Array
) -> Callable:
    """Like :func:`switch_reward`, for the named terms (reward reflection): every branch
    returns its terms in one float32 vector of a common length.

    Args:
        reward_fns: K reward slots.
        term_names: per reward, the names of :func:`reward_term_values` of its output
            (``"total"`` included), in the order wanted in the vector.
        index: int32 scalar in ``[0, K)``.

    Returns:
        ``record(prev_state, action, next_state, params) -> float32 [M]`` with
        ``M = max(len(names))``: reward ``k``'s terms in ``term_names[k]``'s order, zeros
        after them.

    Raises:
        ValueError: a reward's term names differ from its ``term_names`` (at trace time).
    """
    width = max(len(names) for names in term_names)

    def branch(fn, names):
        def terms(prev, action, nxt, params):
            values = reward_term_values(fn(prev, action, nxt, params))
            if sorted(values) != sorted(names):
                raise ValueError(f"reward terms {sorted(values)} differ from {sorted(names)}")
            padding = [jnp.float32(0.0)] * (width - len(names))
            return jnp.stack([*(values[name] for name in names), *padding])

        return terms

    branches = [branch(fn, names) for fn, names in zip(reward_fns, term_names, strict=True)]

    def record(prev_state, action, next_state, params):
        return jax.lax.switch(index, branches, prev_state, action, next_state, params)

    return record


def check_reward_output(out) -> str:
    """Checks the abstract (``jax.eval_shape``) output of a reward for one transition.

    Args:
        out: what the reward returned, as ``ShapeDtypeStruct`` leaves.

    Returns:
        A short description (``"scalar"`` or ``"3 terms: pa, pace, terminal"``; JAX
            returns dict outputs with sorted keys).

    Raises:
        ValueError: not a float32 scalar nor a non-empty dict of at most
            :data:`MAX_REWARD_TERMS` float32 scalars with identifier names (other than
            ``total``).
    """
    if isinstance(out, Mapping):
        if not out:
            raise ValueError("reward returned an empty dict of terms")
        if len(out) > MAX_REWARD_TERMS:
            raise ValueError(f"reward returned {len(out)} terms, limit {MAX_REWARD_TERMS}")
        for name, value in out.items():
            if name == "total":
                raise ValueError(
                    "reward term name 'total' is reserved for the sum of the terms, which "
                    "the framework computes: return only the terms"
                )
            if not isinstance(name, str) or not _TERM_NAME.match(name):
                raise ValueError(
                    f"reward term name {name!r} is not a short identifier (letters, digits "
                    "and _, at most 40, not starting with a digit)"
                )
            _check_scalar(value, f"reward term {name!r}")
        return f"{len(out)} terms: {', '.join(out)}"
    _check_scalar(out, "reward")
    return "scalar"


def _check_scalar(value, what: str) -> None:
    if not hasattr(value, "shape") or not hasattr(value, "dtype"):
        raise ValueError(f"{what} must be an array scalar, got {type(value).__name__}")
    if tuple(value.shape) != ():
        raise ValueError(f"{what} must be a scalar, got shape {tuple(value.shape)}")
    if value.dtype != jnp.float32:
        raise ValueError(f"{what} must be float32, got {value.dtype}")
