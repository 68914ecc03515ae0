"""The slots that generated code fills (reward now; network via :mod:`serl_jax.rl.networks`).

A reward slot function returns either a float32 scalar or a dict of named float32 scalar
terms whose sum is the reward (the form that lets the SE-RL loop report per-term
statistics back to the designer, as in Eureka's reward reflection).
"""

from serl_jax.components.reward import (
    MAX_REWARD_TERMS,
    RewardOutput,
    check_reward_output,
    reward_term_values,
    total_reward,
)

__all__ = [
    "MAX_REWARD_TERMS",
    "RewardOutput",
    "check_reward_output",
    "reward_term_values",
    "total_reward",
]
