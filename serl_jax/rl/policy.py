"""The trained PPO actor as an evaluation policy (same interface as the baselines)."""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
from flax import struct

from serl_jax.rl.normalization import RunningStats
from serl_jax.rl.ppo import ActionPrior, no_action_prior, policy_distribution


@struct.dataclass
class PPOPolicyParams:
    """What a trained policy needs at evaluation: network parameters and obs statistics."""

    params: Any
    obs_stats: RunningStats


def make_ppo_policy(
    network: nn.Module,
    normalize_obs: bool = True,
    deterministic: bool = True,
    action_prior: ActionPrior = no_action_prior,
):
    """Wraps the network slot as ``policy(PPOPolicyParams, key, obs, state, env_params)``.

    Args:
        network: the flax module used in training.
        normalize_obs: apply the stored running statistics (as in training).
        action_prior: the reference action logit used in training.
        deterministic: act with the policy's deterministic action (evaluation default:
            the median ``sigmoid(loc)``, or a discrete set's most probable multiple)
            instead of sampling.

    Returns:
        A single-episode policy returning a float32 action in [0, 1].
    """

    def policy(policy_params: PPOPolicyParams, key: jax.Array, obs, state, env_params):
        del state, env_params
        dist, _ = policy_distribution(
            network, policy_params.params, policy_params.obs_stats, obs, normalize_obs, action_prior
        )
        if deterministic:
            return dist.deterministic_action()
        return dist.action(dist.sample(key))

    return policy
