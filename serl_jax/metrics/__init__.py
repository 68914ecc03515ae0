"""Execution metrics: PA, PA-std, WR, GLR, AFI with confidence intervals, and
paired differences to TWAP on the same orders."""

from serl_jax.metrics.execution import (
    Estimate,
    ExecutionMetrics,
    OrderOutcomes,
    PairedDifference,
    compute_metrics,
    format_table,
    paired_difference,
    price_advantage,
    shortfall,
    timing_advantage,
    twap,
    vwap,
)

__all__ = [
    "Estimate",
    "ExecutionMetrics",
    "OrderOutcomes",
    "PairedDifference",
    "compute_metrics",
    "format_table",
    "paired_difference",
    "price_advantage",
    "shortfall",
    "timing_advantage",
    "twap",
    "vwap",
]
