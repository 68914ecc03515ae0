"""Execution metrics: PA, PA-std, WR, GLR, AFI with bootstrap confidence intervals."""

from serl_jax.metrics.execution import (
    Estimate,
    ExecutionMetrics,
    OrderOutcomes,
    compute_metrics,
    format_table,
    price_advantage,
    twap,
    vwap,
)

__all__ = [
    "Estimate",
    "ExecutionMetrics",
    "OrderOutcomes",
    "compute_metrics",
    "format_table",
    "price_advantage",
    "twap",
    "vwap",
]
