"""Hybrid PPO (L = α·L_static + β·L_dynamic, SE-RL Eq. 5): the weight rule by hand, the
trainer on two stand-in markets, and train_policy with a dynamic market."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from serl_jax.config import Config, NetworkConfig, RunConfig
from serl_jax.envs.execution import EnvParams, ExecutionEnv
from serl_jax.experiment import train_policy
from serl_jax.rl.hybrid import HybridConfig, adapt_weights, make_hybrid_trainer
from serl_jax.rl.networks import make_network
from serl_jax.rl.ppo import PPOConfig

METRIC_KEYS = {
    "episode_return",
    "order_pa",
    "episodes",
    "total_loss",
    "actor_loss",
    "value_loss",
    "entropy",
    "approx_kl",
    "clip_frac",
    "alpha",
    "beta",
    "loss_static",
    "loss_dynamic",
    "order_pa_static",
    "order_pa_dynamic",
}


def _weights(alpha, beta, loss_s, loss_d, min_weight):
    a, b = adapt_weights(alpha, beta, loss_s, loss_d, min_weight)
    return float(a), float(b)


@pytest.mark.parametrize(
    ("alpha", "loss_s", "loss_d", "min_weight", "expected_alpha"),
    [
        # α' = .5·3/4 = .375, β' = .5·1/4 = .125, renormalized: .375/.5 = .75.
        (0.5, 3.0, 1.0, 0.1, 0.75),
        # α' = .2·1/5 = .04, β' = .8·4/5 = .64: α = .04/.68 = 1/17.
        (0.2, 1.0, 4.0, 0.05, 1.0 / 17.0),
        # .5·99/100 vs .5·1/100: α = .99, clipped to 1 - .1 = .9.
        (0.5, 99.0, 1.0, 0.1, 0.9),
        # The other side of the clip: α = .3·1/(.3 + .7·50) = .3/35.3 ≈ .0085 -> .1.
        (0.3, 1.0, 50.0, 0.1, 0.1),
        # A negative loss counts by its magnitude: same as (3, 1).
        (0.5, -3.0, 1.0, 0.1, 0.75),
        (0.5, -3.0, -1.0, 0.1, 0.75),
        # Equal magnitudes (zeros included) leave the weights unchanged.
        (0.3, 2.0, 2.0, 0.1, 0.3),
        (0.3, 2.0, -2.0, 0.1, 0.3),
        (0.3, 0.0, 0.0, 0.1, 0.3),
    ],
)
def test_adapt_weights_by_hand(alpha, loss_s, loss_d, min_weight, expected_alpha):
    a, b = _weights(alpha, 1.0 - alpha, loss_s, loss_d, min_weight)
    assert a == pytest.approx(expected_alpha, rel=1e-5)
    assert b == pytest.approx(1.0 - expected_alpha, rel=1e-5)


def test_hybrid_config_rejects_bad_values():
    with pytest.raises(ValueError, match="hybrid.dynamic_envs"):
        HybridConfig(dynamic_envs=0)
    with pytest.raises(ValueError, match="hybrid.min_weight"):
        HybridConfig(min_weight=0.6)
    with pytest.raises(ValueError, match="hybrid.min_weight"):
        HybridConfig(min_weight=0.0)
    with pytest.raises(ValueError, match="hybrid.alpha_init"):
        HybridConfig(alpha_init=0.95, min_weight=0.1)


CONFIG = PPOConfig(
    num_envs=8, num_steps=10, total_timesteps=8 * 10 * 6, num_minibatches=2, group_size=4
)


def _markets(make_trend_market, lookback_dynamic=2):
    """Two static replay markets standing in for the static and the dynamic market: an
    uptrend with the default impact (η = 50 bps), and a flat market with three times the
    impact, whose larger rewards give it the larger PPO loss."""
    static = EnvParams(data=make_trend_market(n_episodes=4, n_slots=10), lookback=2)
    dynamic = EnvParams(
        data=make_trend_market(n_episodes=4, n_slots=10, drift_per_minute=0.0),
        lookback=lookback_dynamic,
        impact_eta_bps=150.0,
    )
    return ExecutionEnv(), static, ExecutionEnv(), dynamic


def test_hybrid_trainer_rejects_bad_shapes(make_trend_market):
    env_s, static, env_d, dynamic = _markets(make_trend_market)
    # 8·10 static transitions split into 4 minibatches, but 3·10 dynamic ones do not.
    config = dataclasses.replace(CONFIG, num_minibatches=4)
    with pytest.raises(ValueError, match="hybrid.dynamic_envs"):
        make_hybrid_trainer(
            config, HybridConfig(dynamic_envs=3), env_s, static, env_d, dynamic, make_network((8,))
        )
    with pytest.raises(ValueError, match="group_size=4 must divide market.dynamic_envs=6"):
        make_hybrid_trainer(
            CONFIG, HybridConfig(dynamic_envs=6), env_s, static, env_d, dynamic, make_network((8,))
        )
    env_s, static, env_d, dynamic = _markets(make_trend_market, lookback_dynamic=3)
    with pytest.raises(ValueError, match="observation size"):
        make_hybrid_trainer(
            CONFIG, HybridConfig(), env_s, static, env_d, dynamic, make_network((8,))
        )


@pytest.fixture(scope="module")
def hybrid_metrics(make_trend_market):
    hybrid = HybridConfig(dynamic_envs=4, alpha_init=0.5, min_weight=0.1)
    trainer = make_hybrid_trainer(CONFIG, hybrid, *_markets(make_trend_market), make_network((8,)))
    train = jax.jit(trainer.train)
    out = train(jax.random.PRNGKey(0))
    assert out["runner_state"].obs_stats.mean.shape == out["runner_state"].static.obs.shape[1:]
    # the same key trains the same policy: both markets' rollouts, shuffles and weights
    again = train(jax.random.PRNGKey(0))
    for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(again), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    return hybrid, {k: np.asarray(v) for k, v in out["metrics"].items()}


def test_hybrid_trainer_metrics(hybrid_metrics):
    _, m = hybrid_metrics
    assert set(m) == METRIC_KEYS
    for key, value in m.items():
        assert value.shape == (CONFIG.num_updates,), key
        assert value.dtype == np.float32, key
    # 10-step episodes in 10-step rollouts: every lane finishes once per update.
    np.testing.assert_array_equal(m["episodes"], 8 + 4)
    np.testing.assert_allclose(
        m["order_pa"], (8 * m["order_pa_static"] + 4 * m["order_pa_dynamic"]) / 12, rtol=1e-5
    )
    # α, β are constant within an update, so the mean weighted loss is the weighted mean.
    np.testing.assert_allclose(
        m["total_loss"], m["alpha"] * m["loss_static"] + m["beta"] * m["loss_dynamic"], rtol=1e-4
    )
    assert not np.allclose(m["loss_static"], m["loss_dynamic"])


def test_hybrid_weights_follow_eq5_on_the_logged_losses(hybrid_metrics):
    hybrid, m = hybrid_metrics
    alpha, beta = m["alpha"].astype(np.float64), m["beta"].astype(np.float64)
    assert alpha[0] == pytest.approx(0.5) and beta[0] == pytest.approx(0.5)
    np.testing.assert_allclose(alpha + beta, 1.0, atol=1e-6)
    assert np.all(alpha >= hybrid.min_weight - 1e-7)
    assert np.all(alpha <= 1.0 - hybrid.min_weight + 1e-7)
    # Update k+1 uses the weights Eq. 5 gives on update k's logged losses.
    mag_s, mag_d = np.abs(m["loss_static"][:-1]), np.abs(m["loss_dynamic"][:-1])
    expected = alpha[:-1] * mag_s / (alpha[:-1] * mag_s + beta[:-1] * mag_d)
    expected = np.clip(expected, hybrid.min_weight, 1.0 - hybrid.min_weight)
    np.testing.assert_allclose(alpha[1:], expected, rtol=1e-5)
    # α moves toward the market with the larger |loss| (unless it sits at the clip).
    step = np.diff(alpha)
    at_clip = np.isclose(alpha[1:], hybrid.min_weight) | np.isclose(
        alpha[1:], 1.0 - hybrid.min_weight
    )
    assert np.all((np.sign(step) == np.sign(mag_s - mag_d)) | at_clip)
    assert np.any(np.abs(step) > 1e-3)


def test_hybrid_weights_fixed_without_adapt(make_trend_market):
    hybrid = HybridConfig(dynamic_envs=4, alpha_init=0.3, adapt=False)
    trainer = make_hybrid_trainer(CONFIG, hybrid, *_markets(make_trend_market), make_network((8,)))
    update = jax.jit(trainer.update)
    runner = trainer.init(jax.random.PRNGKey(1))
    for _ in range(3):
        runner, metrics = update(runner)
        assert float(metrics["alpha"]) == pytest.approx(0.3)
        assert float(metrics["beta"]) == pytest.approx(0.7)
        assert float(metrics["loss_static"]) != pytest.approx(float(metrics["loss_dynamic"]))


def test_train_policy_with_a_dynamic_market(make_trend_market):
    env_s, static, env_d, dynamic = _markets(make_trend_market)
    cfg = Config(
        run=RunConfig(num_seeds=2, progress_chunk=3),
        ppo=PPOConfig(
            num_envs=8, num_steps=10, total_timesteps=8 * 10 * 3, num_minibatches=2, group_size=4
        ),
        network=NetworkConfig(hidden_sizes=(8,)),
    )
    hybrid = HybridConfig(dynamic_envs=4)
    with pytest.raises(ValueError, match="dynamic and hybrid"):
        train_policy(cfg, env_s, static, static, progress=False, dynamic=(env_d, dynamic))
    trained = train_policy(
        cfg, env_s, static, static, progress=False, dynamic=(env_d, dynamic), hybrid=hybrid
    )
    assert METRIC_KEYS <= set(trained.curves)
    for key in ("alpha", "beta"):
        assert trained.curves[key].shape == (2, 3)
    np.testing.assert_allclose(trained.curves["alpha"][:, 0], 0.5)
    np.testing.assert_allclose(trained.curves["alpha"] + trained.curves["beta"], 1.0, atol=1e-6)
    assert trained.env_steps == 3 * (8 + 4) * 10 * 2
    assert trained.validation_pa.shape == (2,)
    assert np.isfinite(trained.validation_pa).all()
