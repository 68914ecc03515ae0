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

import flax.linen as nn
import jax
import jax.numpy as jnp

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
