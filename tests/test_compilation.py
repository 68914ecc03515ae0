"""A training run's initialization compiled lightly gives the parameters and state that
XLA's default optimization gives."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from serl_jax.envs.execution import EnvParams, ExecutionEnv
from serl_jax.rl.compilation import compile_lightly
from serl_jax.rl.networks import make_network
from serl_jax.rl.ppo import PPOConfig, make_trainer

# XLA's default backend optimization, named explicitly: the suite's XLA_FLAGS lower it
# for every program (tests/conftest.py), and per-compile options take precedence.
OPTIMIZED = {"xla_backend_optimization_level": 3}


class NormalInits(nn.Module):
    """Layers drawn from the normal family (truncated and plain normals, ``erf_inv``)."""

    @nn.compact
    def __call__(self, x):
        for init in (
            nn.initializers.lecun_normal(),
            nn.initializers.normal(0.3),
            nn.initializers.truncated_normal(0.1),
            nn.initializers.variance_scaling(2.0, "fan_in", "normal"),
        ):
            x = nn.tanh(nn.Dense(37, kernel_init=init, bias_init=nn.initializers.normal(0.01))(x))
        return x, x[..., 0]


def both_ways(fn, *args):
    lowered = jax.jit(fn).lower(*args)
    return lowered.compile(compiler_options=OPTIMIZED)(*args), compile_lightly(lowered)(*args)


def test_a_trainers_initialization_is_bit_identical(make_trend_market):
    """The lanes' initialization as training runs it (vmapped over seeds): the default
    network's Glorot-uniform parameters, the optimizer state, the first observations and
    their running statistics, every bit the same."""
    params = EnvParams(data=make_trend_market(n_episodes=4, n_slots=10), lookback=2)
    config = PPOConfig(num_envs=8, num_steps=10, total_timesteps=8 * 10 * 3, num_minibatches=2)
    trainer = make_trainer(config, ExecutionEnv(), params, make_network((64, 64)))
    keys = jax.random.split(jax.random.PRNGKey(7), 3)
    optimized, light = both_ways(jax.vmap(trainer.init), keys)
    leaves = jax.tree.leaves(optimized)
    assert len(leaves) > 10  # parameters, Adam's moments, env state, observations, stats
    for a, b in zip(leaves, jax.tree.leaves(light), strict=True):
        np.testing.assert_array_equal(a, b)


def test_normal_initializers_agree_within_a_few_units_in_the_last_place():
    net = NormalInits()
    keys = jax.random.split(jax.random.PRNGKey(3), 4)
    optimized, light = both_ways(jax.vmap(lambda k: net.init(k, jnp.zeros(16))), keys)
    for a, b in zip(jax.tree.leaves(optimized), jax.tree.leaves(light), strict=True):
        assert np.std(a) > 0  # drawn, not constant
        np.testing.assert_array_max_ulp(np.asarray(a), np.asarray(b), maxulp=4)
