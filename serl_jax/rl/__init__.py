"""PPO + GAE in JAX (plain and hybrid static + dynamic market), IPPO and MAPPO, the network
slot, the action distributions and checkpoints."""

from serl_jax.rl.checkpoint import CheckpointError, load_policy, save_policy
from serl_jax.rl.distributions import LogitNormal, PriorMultiples, action_distribution
from serl_jax.rl.hybrid import HybridConfig, adapt_weights, make_hybrid_trainer
from serl_jax.rl.marl import MARLConfig, make_marl_policy, make_marl_trainer
from serl_jax.rl.networks import ActorCritic, make_network
from serl_jax.rl.normalization import RunningStats
from serl_jax.rl.policy import PPOPolicyParams, make_ppo_policy
from serl_jax.rl.ppo import (
    PPOConfig,
    Trainer,
    Transition,
    calculate_gae,
    make_train,
    make_trainer,
    no_action_prior,
)

__all__ = [
    "ActorCritic",
    "CheckpointError",
    "HybridConfig",
    "LogitNormal",
    "MARLConfig",
    "PPOConfig",
    "PPOPolicyParams",
    "PriorMultiples",
    "RunningStats",
    "Trainer",
    "Transition",
    "action_distribution",
    "adapt_weights",
    "calculate_gae",
    "load_policy",
    "make_hybrid_trainer",
    "make_marl_policy",
    "make_marl_trainer",
    "make_network",
    "make_ppo_policy",
    "make_train",
    "make_trainer",
    "no_action_prior",
    "save_policy",
]
