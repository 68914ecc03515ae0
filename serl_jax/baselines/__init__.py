"""Execution baselines as schedules and policies: TWAP (also with POV child orders), VWAP,
adaptive VWAP, POV, Almgren–Chriss, immediate, and the hindsight oracle (a bound, not
achievable)."""

from serl_jax.baselines.policies import (
    FIXED_SIZE_POLICIES,
    PARTICIPATION_POLICIES,
    adaptive_vwap_policy,
    almgren_chriss_eta,
    almgren_chriss_policy,
    immediate_policy,
    oracle_policy,
    pov_policy,
    twap_policy,
    twap_pov_policy,
    vwap_policy,
)
from serl_jax.baselines.schedules import (
    action_from_target,
    almgren_chriss_kappa,
    almgren_chriss_remaining,
    cost_optimal_quantities,
    twap_remaining,
    vwap_remaining,
)

__all__ = [
    "FIXED_SIZE_POLICIES",
    "PARTICIPATION_POLICIES",
    "action_from_target",
    "adaptive_vwap_policy",
    "almgren_chriss_eta",
    "almgren_chriss_kappa",
    "almgren_chriss_policy",
    "almgren_chriss_remaining",
    "cost_optimal_quantities",
    "immediate_policy",
    "oracle_policy",
    "pov_policy",
    "twap_policy",
    "twap_pov_policy",
    "twap_remaining",
    "vwap_policy",
    "vwap_remaining",
]
