"""The framework's default slot implementations written as candidate code.

The micro prompts show these to the model ("the current default implementation"), and
the outer loop evaluates them first as the iteration-0 reference candidate. They are
kept equal to :func:`serl_jax.envs.execution.default_reward` (as named terms) and
:class:`serl_jax.rl.networks.ActorCritic` (64-64 tanh); ``tests/llm/test_prompts.py``
checks both numerically.
"""

from __future__ import annotations

DEFAULT_REWARD = """\
import jax.numpy as jnp


def safe_div(num, den):
    positive = den > 0
    return jnp.where(positive, num / jnp.where(positive, den, 1.0), 0.0)


def reward(prev_state, action, next_state, params):
    # Qlib's PAPenalty: fill PA weighted by the fill's share of Q, minus a concentration
    # penalty on large child orders and a penalty on inventory left at the end.
    fraction = safe_div(next_state.last_qty, next_state.quantity)
    pa = params.side * (next_state.last_price / next_state.benchmark_price - 1.0) * 1e4
    done = next_state.time >= next_state.window_len
    leftover = safe_div(next_state.inventory, next_state.quantity)
    scale = params.reward_scale
    return {
        "pa": scale * pa * fraction,
        "concentration": -scale * params.concentration_penalty * fraction**2,
        "terminal": -scale * jnp.where(done, params.terminal_penalty_bps * leftover, 0.0),
    }
"""

DEFAULT_NETWORK = """\
import flax.linen as nn
import jax.numpy as jnp


class Network(nn.Module):
    hidden: int = 64
    layers: int = 2

    @nn.compact
    def __call__(self, obs):
        # Separate actor and critic MLPs; the policy head starts near zero so the
        # untrained policy is the TWAP prior with some exploration.
        init = nn.initializers.glorot_uniform()
        actor = obs
        critic = obs
        for _ in range(self.layers):
            actor = nn.tanh(nn.Dense(self.hidden, kernel_init=init)(actor))
            critic = nn.tanh(nn.Dense(self.hidden, kernel_init=init)(critic))
        small = nn.initializers.variance_scaling(1e-4, "fan_avg", "uniform")
        bias = nn.initializers.constant(jnp.array([0.0, jnp.log(0.5)]))
        outputs = nn.Dense(2, kernel_init=small, bias_init=bias)(actor)
        value = nn.Dense(1, kernel_init=init)(critic)
        return outputs, value[..., 0]
"""

DEFAULT_CODE = {"reward": DEFAULT_REWARD, "network": DEFAULT_NETWORK}
