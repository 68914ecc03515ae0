"""Rung (b) of the learnability ladder (``benchmarks/bench_learning.py`` runs all rungs):
with the diagnostic leak of the current minute's volume, PPO at a small budget must
recover a stated share of the hindsight oracle's spread-and-impact edge over TWAP on
held-out days. The one-step TWAP tracking prior, no sibling lanes and GAE λ = 0.95 (the
defaults before the fix) recover none of it at this budget (-0.01 bps); the test fails if
learning breaks again.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from serl_jax.baselines import oracle_policy, twap_policy
from serl_jax.config import load_config
from serl_jax.envs.execution import ExecutionEnv
from serl_jax.envs.market_data import MarketData
from serl_jax.evaluation import rollout
from serl_jax.experiment import train_policy
from serl_jax.metrics import paired_difference, shortfall
from serl_jax.rl.policy import make_ppo_policy

SMALL = [
    "env.diagnostic_volume_leak=true",
    "env.child_quantity=fixed",  # the learner, not the order type, must find the signal
    # The anchor this test was measured with: at this budget and k = 20 (the run default)
    # one seed recovers +0.11 [-0.21, +0.32] bps; the ladder's rung (b) at the default
    # preset learns +0.8 bps over its prior at k = 20.
    "network.prior_anchor_steps=5",
    "run.num_seeds=1",
    "ppo.num_envs=64",
    "ppo.total_timesteps=614400",  # 40 updates of 64 x 240 steps
    "ppo.num_minibatches=4",
]


def _shortfall(policy, params, env_params):
    out = rollout(ExecutionEnv(), policy, params, env_params, jax.random.PRNGKey(0))
    return shortfall(jax.device_get(out).outcomes(float(env_params.side)))


@pytest.mark.slow
def test_ppo_recovers_part_of_the_oracles_edge_with_the_volume_leak(cn_market):
    cfg = load_config(None, SMALL)
    train = cfg.env_params(MarketData.from_episodes(cn_market.train))
    val = cfg.env_params(MarketData.from_episodes(cn_market.val))
    trained = train_policy(cfg, ExecutionEnv(), train, val, progress=False)
    policy = make_ppo_policy(
        trained.network, cfg.ppo.normalize_obs, action_prior=cfg.network.prior()
    )
    twap = _shortfall(twap_policy, None, val)
    learned = paired_difference(_shortfall(policy, trained.policy_params, val), twap)
    oracle = paired_difference(_shortfall(oracle_policy, None, val), twap)
    assert oracle.value > 2.0  # the oracle pays ~3 bps less than TWAP on these days
    # Measured: +0.33 bps [0.24, 0.40], 11% of the oracle's +3.1 bps (default preset:
    # +0.62, 20%); the old defaults: -0.01 [-0.03, +0.01].
    assert learned.low > 0.0
    assert learned.value > 0.05 * oracle.value, (learned, oracle)
    assert np.isfinite(trained.curves["order_pa"]).any()
