"""Communication modules of the offline designer (the LLM4Communication slot).

Each program defines ``class Communication(nn.Module)`` (instantiated as
``Communication()``) mapping an agent's normalized observation ``float32 [..., D]`` to its
message ``float32 [..., M]``, ``1 <= M <= 16`` (:mod:`serl_jax.components.communication`).
The observation holds the agent's private features first (time left, ``log`` of the steps
left, inventory left, price move since arrival, the volume profile's share left and this
minute's share of it), then the recent market features. The
mean of the other agents' messages reaches each agent's policy at the next step.

The programs are text, never executed here; ``tests/test_communication.py`` runs each
through the full validator.
"""

from __future__ import annotations

from llm.designs import Design

__all__ = ["COMMUNICATIONS"]

_LINEAR_MESSAGE = """\
# linear_message: a learned linear summary of the whole observation, squashed by tanh
# into message_size numbers in (-1, 1).
import flax.linen as nn


class Communication(nn.Module):
    message_size: int = 4  # numbers per message

    @nn.compact
    def __call__(self, obs):
        return nn.tanh(nn.Dense(self.message_size)(obs))
"""

_MLP_MESSAGE = """\
# mlp_message: a one-hidden-layer tanh MLP of the observation (width units) to a
# message_size-number message.
import flax.linen as nn


class Communication(nn.Module):
    width: int = 32  # hidden units
    message_size: int = 8  # numbers per message

    @nn.compact
    def __call__(self, obs):
        hidden = nn.tanh(nn.Dense(self.width)(obs))
        return nn.tanh(nn.Dense(self.message_size)(hidden))
"""

_INVENTORY_BROADCAST = """\
# inventory_broadcast: the agent's private state as it is (time left, log steps left,
# inventory left, price move since arrival, volume-profile clock) plus a learned tanh
# summary of the market features: the others learn where this agent is in its order.
import flax.linen as nn
import jax.numpy as jnp

PRIVATE = 6  # the observation's private features come first


class Communication(nn.Module):
    market_size: int = 2  # learned numbers about the market features

    @nn.compact
    def __call__(self, obs):
        market = nn.tanh(nn.Dense(self.market_size)(obs[..., PRIVATE:]))
        return jnp.concatenate([obs[..., :PRIVATE], market], axis=-1)
"""

COMMUNICATIONS: tuple[Design, ...] = (
    Design("linear_message", "communication", _LINEAR_MESSAGE),
    Design("mlp_message", "communication", _MLP_MESSAGE),
    Design("inventory_broadcast", "communication", _INVENTORY_BROADCAST),
)
