"""The communication slot (LLM4Communication): what an agent tells the others.

A communication program defines a flax module, instantiated as ``Communication()``::

    class Communication(nn.Module):
        def __call__(self, obs):      # float32 [..., D] -> float32 [..., M]
            ...

Each agent sends the message of its (normalized) observation; at the next step every
agent's policy input gets the mean of the other agents' messages appended (a fixed
aggregation; zeros at an episode's first step). The module's parameters are trained with
the policy, through the receivers (:mod:`serl_jax.rl.marl`). Validation
(:mod:`llm.validate`) checks it like a network: the message shape on batches of real
observations, ``1 <= M <= MAX_MESSAGE_SIZE``, float32 and finite outputs, only
``params`` variables and the parameter bound.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

#: the longest message an agent may send, numbers
MAX_MESSAGE_SIZE = 16


def message_size(communication: nn.Module, obs_size: int) -> int:
    """M, the length of the module's message for ``obs_size``-long observations (traced
    with ``jax.eval_shape``: nothing runs).

    Raises:
        ValueError: the output is not a float32 ``[M]`` vector with ``1 <= M <=
            MAX_MESSAGE_SIZE``.
    """
    probe = jax.ShapeDtypeStruct((obs_size,), jnp.float32)
    shapes = jax.eval_shape(communication.init, jax.random.PRNGKey(0), probe)
    out = jax.eval_shape(communication.apply, shapes, probe)
    if not isinstance(out, jax.ShapeDtypeStruct) or len(out.shape) != 1:
        raise ValueError(f"a message must be a vector [M] per observation, got {out}")
    if out.dtype != jnp.float32 or not 1 <= out.shape[0] <= MAX_MESSAGE_SIZE:
        raise ValueError(
            f"a message must be float32 with 1 <= M <= {MAX_MESSAGE_SIZE}, got "
            f"{out.dtype}[{out.shape[0]}]"
        )
    return int(out.shape[0])


def message_statistics(
    communication: nn.Module, params, observations: np.ndarray, active: np.ndarray
) -> dict[str, Any]:
    """What the agents said on their active minutes (the designer's reflection on a
    communication program).

    Args:
        communication: the module (``Communication()``).
        params: its trained parameters.
        observations: ``[E, N, T, D]`` float32, each agent's normalized observation per
            minute (what its message is made of; ``MultiAgentRollout.memory``).
        active: ``[E, N, T]`` bool, the agent was trading in that minute.

    Returns:
        ``{"size": M, "mean": [M], "std": [M], "std_over_time": s_t,
        "std_across_agents": s_a}``: per message number its mean and standard deviation
        over active minutes; ``s_t`` the standard deviation over an agent's own active
        minutes of a day, averaged over numbers, agents and days (does a message change
        as the order is worked?); ``s_a`` the standard deviation across the agents
        active in the same minute, averaged (do agents say different things?); ``None``
        where no minute qualifies.

    Raises:
        ValueError: ``observations`` and ``active`` do not share ``[E, N, T]``.
    """
    observations = np.asarray(observations, np.float32)
    active = np.asarray(active, bool)
    if observations.shape[:3] != active.shape:
        raise ValueError(
            f"message_statistics: observations {observations.shape} and active "
            f"{active.shape} must share [E, N, T]"
        )
    messages = np.asarray(jax.jit(communication.apply)(params, jnp.asarray(observations)))
    weights = active[..., None].astype(np.float64)
    count = weights.sum()
    size = int(messages.shape[-1])
    if count == 0:
        return {"size": size, "mean": None, "std": None, "std_over_time": None,
                "std_across_agents": None}  # fmt: skip
    mean = (messages * weights).sum(axis=(0, 1, 2)) / count
    var = (((messages - mean) ** 2) * weights).sum(axis=(0, 1, 2)) / count

    def spread(axis: int) -> float | None:
        """The std along ``axis`` over active entries, averaged over the groups that
        have at least two."""
        n = weights.sum(axis=axis)
        centre = (messages * weights).sum(axis=axis) / np.maximum(n, 1.0)
        dev = (((messages - np.expand_dims(centre, axis)) ** 2) * weights).sum(axis=axis)
        ok = np.broadcast_to(n >= 2, dev.shape)
        return float(np.sqrt(dev / np.maximum(n, 1.0))[ok].mean()) if ok.any() else None

    return {
        "size": size,
        "mean": mean.tolist(),
        "std": np.sqrt(var).tolist(),
        "std_over_time": spread(2),
        "std_across_agents": spread(1),
    }
