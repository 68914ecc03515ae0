"""The framework's default slot implementations written as candidate code.

The micro prompts show these to the model ("the current default implementation"), and
the outer loop evaluates them first as the iteration-0 reference candidate. The reward
equals :func:`serl_jax.envs.execution.default_reward` as named terms, reading its
penalties from the env parameters as the framework does (the offline designer's
``pa_penalty`` is a variant with module constants for it to mutate); the network is the
design library's ``separate_mlp``, equal to :class:`serl_jax.rl.networks.ActorCritic`
(64-64 tanh). ``tests/llm/test_prompts.py`` checks both numerically.
"""

from __future__ import annotations

from llm.designs import library

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

# The reward of loop.score=mean_variance: Almgren & Chriss's mean-variance objective,
# equal to serl_jax.envs.execution.mean_variance_reward as named terms.
MEAN_VARIANCE_REWARD = """\
import jax.numpy as jnp


def safe_div(num, den):
    positive = den > 0
    return jnp.where(positive, num / jnp.where(positive, den, 1.0), 0.0)


def reward(prev_state, action, next_state, params):
    # Almgren-Chriss: the spread and impact paid against the replayed price, plus the
    # risk of the inventory still held (urgency in units of 1/sigma_day), plus a penalty
    # on inventory left at the end.
    fraction = safe_div(next_state.last_qty, next_state.quantity)
    paid = params.side * (1.0 - safe_div(next_state.last_price, next_state.last_replayed_price))
    held = safe_div(next_state.inventory, next_state.quantity)
    slots = params.data.num_slots
    sigma_day_bps = params.data.sigma[next_state.episode] * jnp.sqrt(jnp.float32(slots)) * 1e4
    done = next_state.time >= next_state.window_len
    scale = params.reward_scale
    return {
        "cost": -scale * paid * 1e4 * fraction,
        "risk": -scale * params.urgency * sigma_day_bps / slots * held**2,
        "terminal": -scale * jnp.where(done, params.terminal_penalty_bps * held, 0.0),
    }
"""

DEFAULT_NETWORK = library("network")[0].code

# No imagination is the loop's incumbent; the library's volatility_scale is the program
# the micro prompt shows and stage 2's run-time reference.
DEFAULT_IMAGINATION = library("imagination")[0].code

# The library's independent_days (every agent the single-agent task) is the profile
# program stage 2 times candidates against.
DEFAULT_PROFILE = library("profiling")[0].code

# The library's linear_message is the communication module stage 2 times candidates
# against.
DEFAULT_COMMUNICATION = library("communication")[0].code

DEFAULT_CODE = {
    "reward": DEFAULT_REWARD,
    "network": DEFAULT_NETWORK,
    "imagination": DEFAULT_IMAGINATION,
    "profiling": DEFAULT_PROFILE,
    "communication": DEFAULT_COMMUNICATION,
}


def default_code(module: str, score: str = "shortfall") -> str:
    """The framework's default program of ``module`` for a run ranked by ``score``
    (``loop.score``): the reward of ``mean_variance`` is :data:`MEAN_VARIANCE_REWARD`, every
    other default is :data:`DEFAULT_CODE`'s.

    Raises:
        KeyError: an unknown module.
    """
    if module == "reward" and score == "mean_variance":
        return MEAN_VARIANCE_REWARD
    return DEFAULT_CODE[module]
