"""Execution environments over market data (gymnax API)."""

from serl_jax.envs.execution import (
    EnvParams,
    EnvState,
    ExecutionEnv,
    default_reward,
    order_price_advantage,
    step_price_advantage,
    twap_action_prior,
    vwap_action_prior,
)
from serl_jax.envs.market_data import MarketData
from serl_jax.envs.reference import NumpyExecutionEnv

__all__ = [
    "EnvParams",
    "EnvState",
    "ExecutionEnv",
    "MarketData",
    "NumpyExecutionEnv",
    "default_reward",
    "order_price_advantage",
    "step_price_advantage",
    "twap_action_prior",
    "vwap_action_prior",
]
