"""Classic execution baselines: TWAP, VWAP and Almgren–Chriss schedules and policies."""

from serl_jax.baselines.policies import (
    almgren_chriss_eta,
    almgren_chriss_policy,
    immediate_policy,
    twap_policy,
    vwap_policy,
)
from serl_jax.baselines.schedules import (
    action_from_target,
    almgren_chriss_kappa,
    almgren_chriss_remaining,
    twap_remaining,
    vwap_remaining,
)

__all__ = [
    "action_from_target",
    "almgren_chriss_eta",
    "almgren_chriss_kappa",
    "almgren_chriss_policy",
    "almgren_chriss_remaining",
    "immediate_policy",
    "twap_policy",
    "twap_remaining",
    "vwap_policy",
    "vwap_remaining",
]
