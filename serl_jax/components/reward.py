"""Reward-slot outputs: a scalar, or named terms that sum to the reward.

Eureka (Ma et al., 2023, "Eureka: Human-level reward design via coding large language
models", Sec. 3.3) feeds the designer statistics of each reward component; letting the
reward return its components as a dict makes those statistics available without any
change to the reward's meaning::

    def reward(prev_state, action, next_state, params):
        return {"pa": pa_term, "pace": -0.1 * deviation**2}   # reward = pa + pace
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import jax.numpy as jnp

__all__ = [
    "MAX_REWARD_TERMS",
    "RewardOutput",
    "check_reward_output",
    "reward_term_values",
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
            if not isinstance(name, str) or not _TERM_NAME.match(name) or name == "total":
                raise ValueError(f"reward term name {name!r} is not a short identifier")
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
