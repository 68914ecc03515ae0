"""Network programs of the offline designer: actor-critic ``Network`` modules.

Contract (:mod:`serl_jax.rl.networks`): ``Network()`` (every field has a default),
``apply(params, obs[..., D]) -> (policy_outputs[..., 2], value[...])``; the policy outputs
are the mean and log-std of the action logit as a residual around the action prior, so every
policy head starts near zero (``variance_scaling(1e-4)``) with bias ``(0, log 0.5)``.
``discrete_mlp`` declares a discrete action set (``action_multiples``) and returns one
logit per multiple instead, the prior's own order (multiple 1) at probability 1/2.
Initializers are Glorot / LeCun / variance scaling only: orthogonal init and
``jnp.linalg`` call LAPACK, which deadlocked under ``vmap`` on CPU. The observation is
``[6 private features, lookback x market features]``.

Tunables are the ``Network`` fields: ``width`` (kept in [8, 256] by the designer) and
``depth`` (kept in [1, 4]); every program stays well under 1,000,000 parameters at
width 256 and depth 4 (D = 56: at most about 0.55 M, the residual MLP).
"""

from __future__ import annotations

from llm.designs import Design

__all__ = ["NETWORKS"]

_SEPARATE_MLP = """\
# separate_mlp: the framework's default (serl_jax.rl.networks.ActorCritic): separate actor
# and critic tanh MLPs, Glorot init and a near-zero policy head with bias (0, log 0.5), so
# the untrained policy is the action prior.
import flax.linen as nn
import jax.numpy as jnp


class Network(nn.Module):
    width: int = 64  # hidden units per layer
    depth: int = 2  # hidden layers per MLP

    @nn.compact
    def __call__(self, obs):
        init = nn.initializers.glorot_uniform()
        actor = obs
        critic = obs
        for _ in range(self.depth):
            actor = nn.tanh(nn.Dense(self.width, kernel_init=init)(actor))
            critic = nn.tanh(nn.Dense(self.width, kernel_init=init)(critic))
        small = nn.initializers.variance_scaling(1e-4, "fan_avg", "uniform")
        bias = nn.initializers.constant(jnp.array([0.0, jnp.log(0.5)]))
        policy = nn.Dense(2, kernel_init=small, bias_init=bias)(actor)
        value = nn.Dense(1, kernel_init=init)(critic)
        return policy, value[..., 0]
"""

_WIDE_MLP = """\
# wide_mlp: a wide variant: separate one-layer ReLU MLPs of 256 units (He-style
# variance-scaling init) for the actor and the critic.
import flax.linen as nn
import jax.numpy as jnp


class Network(nn.Module):
    width: int = 256  # hidden units per layer
    depth: int = 1  # hidden layers per MLP

    @nn.compact
    def __call__(self, obs):
        init = nn.initializers.variance_scaling(2.0, "fan_in", "truncated_normal")
        actor = obs
        critic = obs
        for _ in range(self.depth):
            actor = nn.relu(nn.Dense(self.width, kernel_init=init)(actor))
            critic = nn.relu(nn.Dense(self.width, kernel_init=init)(critic))
        small = nn.initializers.variance_scaling(1e-4, "fan_avg", "uniform")
        bias = nn.initializers.constant(jnp.array([0.0, jnp.log(0.5)]))
        policy = nn.Dense(2, kernel_init=small, bias_init=bias)(actor)
        value = nn.Dense(1, kernel_init=nn.initializers.glorot_uniform())(critic)
        return policy, value[..., 0]
"""

_SHARED_TRUNK = """\
# shared_trunk: one tanh MLP trunk shared by the policy and value heads (features learned
# for the value also shape the policy).
import flax.linen as nn
import jax.numpy as jnp


class Network(nn.Module):
    width: int = 128  # hidden units per layer
    depth: int = 2  # hidden layers of the trunk

    @nn.compact
    def __call__(self, obs):
        init = nn.initializers.glorot_uniform()
        h = obs
        for _ in range(self.depth):
            h = nn.tanh(nn.Dense(self.width, kernel_init=init)(h))
        small = nn.initializers.variance_scaling(1e-4, "fan_avg", "uniform")
        bias = nn.initializers.constant(jnp.array([0.0, jnp.log(0.5)]))
        policy = nn.Dense(2, kernel_init=small, bias_init=bias)(h)
        value = nn.Dense(1, kernel_init=init)(h)
        return policy, value[..., 0]
"""

_LAYERNORM_MLP = """\
# layernorm_mlp: separate actor and critic MLPs with LayerNorm after every dense layer and
# GELU activations (stable with features of different scales).
import flax.linen as nn
import jax.numpy as jnp


class Network(nn.Module):
    width: int = 64  # hidden units per layer
    depth: int = 2  # hidden layers per MLP

    @nn.compact
    def __call__(self, obs):
        init = nn.initializers.glorot_uniform()
        actor = obs
        critic = obs
        for _ in range(self.depth):
            actor = nn.gelu(nn.LayerNorm()(nn.Dense(self.width, kernel_init=init)(actor)))
            critic = nn.gelu(nn.LayerNorm()(nn.Dense(self.width, kernel_init=init)(critic)))
        small = nn.initializers.variance_scaling(1e-4, "fan_avg", "uniform")
        bias = nn.initializers.constant(jnp.array([0.0, jnp.log(0.5)]))
        policy = nn.Dense(2, kernel_init=small, bias_init=bias)(actor)
        value = nn.Dense(1, kernel_init=init)(critic)
        return policy, value[..., 0]
"""

_RESIDUAL_MLP = """\
# residual_mlp: a shared trunk of pre-LayerNorm residual blocks (SiLU) after a linear input
# projection; each block's output layer starts small so the trunk starts near identity.
import flax.linen as nn
import jax.numpy as jnp


class Block(nn.Module):
    width: int

    @nn.compact
    def __call__(self, x):
        h = nn.LayerNorm()(x)
        h = nn.silu(nn.Dense(self.width, kernel_init=nn.initializers.lecun_normal())(h))
        out_init = nn.initializers.variance_scaling(0.1, "fan_in", "truncated_normal")
        return x + nn.Dense(x.shape[-1], kernel_init=out_init)(h)


class Network(nn.Module):
    width: int = 64  # width of the residual stream and of each block
    depth: int = 2  # residual blocks

    @nn.compact
    def __call__(self, obs):
        init = nn.initializers.glorot_uniform()
        h = nn.Dense(self.width, kernel_init=init)(obs)
        for _ in range(self.depth):
            h = Block(self.width)(h)
        h = nn.silu(nn.LayerNorm()(h))
        small = nn.initializers.variance_scaling(1e-4, "fan_avg", "uniform")
        bias = nn.initializers.constant(jnp.array([0.0, jnp.log(0.5)]))
        policy = nn.Dense(2, kernel_init=small, bias_init=bias)(h)
        value = nn.Dense(1, kernel_init=init)(h)
        return policy, value[..., 0]
"""

_SPLIT_ENCODER = """\
# split_encoder: encodes the 6 private features (time left, log steps left, inventory left,
# price move, volume-profile share left and this minute's share of it) and the window of
# market features separately (ELU), then a shared layer feeds both heads.
import flax.linen as nn
import jax.numpy as jnp


class Network(nn.Module):
    width: int = 64  # units of the market encoder and the shared layer (private: half)
    depth: int = 1  # layers of the market encoder

    @nn.compact
    def __call__(self, obs):
        init = nn.initializers.glorot_uniform()
        private = nn.elu(nn.Dense(max(self.width // 2, 4), kernel_init=init)(obs[..., :6]))
        market = obs[..., 6:]
        for _ in range(self.depth):
            market = nn.elu(nn.Dense(self.width, kernel_init=init)(market))
        h = jnp.concatenate([private, market], axis=-1)
        h = nn.elu(nn.Dense(self.width, kernel_init=init)(h))
        small = nn.initializers.variance_scaling(1e-4, "fan_avg", "uniform")
        bias = nn.initializers.constant(jnp.array([0.0, jnp.log(0.5)]))
        policy = nn.Dense(2, kernel_init=small, bias_init=bias)(h)
        value = nn.Dense(1, kernel_init=init)(h)
        return policy, value[..., 0]
"""

_DISCRETE_MLP = """\
# discrete_mlp: the default's separate tanh MLPs with a discrete action set: each minute
# one of the multiples 0, 0.5, 1, 1.5, 2 of the prior's child order (a categorical
# over action_multiples, OPD's action space), probability 1/2 on the prior's own order.
import flax.linen as nn
import jax.numpy as jnp


class Network(nn.Module):
    width: int = 64  # hidden units per layer
    depth: int = 2  # hidden layers per MLP
    action_multiples: tuple = (0.0, 0.5, 1.0, 1.5, 2.0)  # of the prior's child order

    @nn.compact
    def __call__(self, obs):
        init = nn.initializers.glorot_uniform()
        actor = obs
        critic = obs
        for _ in range(self.depth):
            actor = nn.tanh(nn.Dense(self.width, kernel_init=init)(actor))
            critic = nn.tanh(nn.Dense(self.width, kernel_init=init)(critic))
        multiples = jnp.asarray(self.action_multiples)
        unit = jnp.arange(multiples.size) == jnp.argmin(jnp.abs(multiples - 1.0))
        small = nn.initializers.variance_scaling(1e-4, "fan_avg", "uniform")
        bias = nn.initializers.constant(jnp.where(unit, jnp.log(multiples.size - 1.0), 0.0))
        policy = nn.Dense(multiples.size, kernel_init=small, bias_init=bias)(actor)
        value = nn.Dense(1, kernel_init=init)(critic)
        return policy, value[..., 0]
"""

NETWORKS: tuple[Design, ...] = tuple(
    Design(code.split(":", 1)[0].lstrip("# "), "network", code)
    for code in (
        _SEPARATE_MLP,
        _WIDE_MLP,
        _SHARED_TRUNK,
        _LAYERNORM_MLP,
        _RESIDUAL_MLP,
        _SPLIT_ENCODER,
        _DISCRETE_MLP,
    )
)
