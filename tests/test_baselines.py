"""Baseline policies run through the env: schedules realized, catch-up, AC limits."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from serl_jax.baselines import (
    almgren_chriss_eta,
    almgren_chriss_policy,
    twap_policy,
    vwap_policy,
)
from serl_jax.envs.execution import EnvParams, ExecutionEnv
from serl_jax.envs.market_data import MarketData
from serl_jax.envs.reference import NumpyExecutionEnv
from serl_jax.evaluation import rollout


def _run(policy, policy_params, params):
    return jax.device_get(
        rollout(ExecutionEnv(), policy, policy_params, params, jax.random.PRNGKey(0))
    )


def test_twap_realizes_equal_child_orders_when_the_cap_never_binds(make_trend_market):
    data = make_trend_market(n_episodes=2, n_slots=20)
    result = _run(twap_policy, None, EnvParams(data=data, order_fraction=0.05))
    np.testing.assert_allclose(result.remaining[0], 1.0 - np.arange(21) / 20.0, atol=1e-6)
    np.testing.assert_allclose(result.exec_qty[0], result.quantity[0] / 20.0, rtol=1e-5)


def test_twap_catches_up_after_a_capped_minute(make_trend_market):
    data = make_trend_market(n_episodes=1, n_slots=4, zero_volume_slots=(0,))  # t=0 illiquid
    result = _run(twap_policy, None, EnvParams(data=data, order_fraction=0.1))
    q = float(result.quantity[0])
    # t=0 blocked; t=1 targets 2/4 remaining, so it trades half of Q.
    np.testing.assert_allclose(result.exec_qty[0], [0.0, q / 2, q / 4, q / 4], rtol=1e-5)


def _numpy_vwap_path(episodes, params, episode):
    """The VWAP schedule tracked in the NumPy twin of the env (independent of the JAX code)."""
    env = NumpyExecutionEnv(episodes, params)
    env.reset(episode, 0, episodes.n_slots)
    profile = np.asarray(episodes.volume_profile[episode], np.float64)
    targets = 1.0 - np.cumsum(profile) / profile.sum()
    path = [1.0]
    for t in range(episodes.n_slots):
        held = env.state.inventory / env.state.quantity
        action = 0.0 if held <= 0 else min(max((held - targets[t]) / held, 0.0), 1.0)
        env.step(action)
        path.append(env.state.inventory / env.state.quantity)
    return np.array(path), np.concatenate([[1.0], targets])


def test_vwap_follows_the_training_profile(cn_market):
    episodes = cn_market.test
    params = EnvParams(data=MarketData.from_episodes(episodes))
    result = _run(vwap_policy, None, params)
    for episode in range(0, episodes.n_episodes, 3):
        path, targets = _numpy_vwap_path(episodes, params, episode)
        np.testing.assert_allclose(result.remaining[episode], path, atol=1e-4)
        # Tracking never runs ahead of the profile; zero-volume minutes only hold it back.
        assert np.all(path >= targets - 1e-6)
    liquid = np.array([s != "SZ000004" for s in episodes.symbols])
    profile = np.asarray(episodes.volume_profile, np.float64)
    targets = 1.0 - np.cumsum(profile, axis=1) / profile.sum(axis=1, keepdims=True)
    lag = np.abs(result.remaining[:, 1:] - targets).max(axis=1)
    assert np.median(lag[liquid]) < 0.01  # liquid names stay on the profile
    assert lag[~liquid].min() > 0.01  # the illiquid small cap falls behind


def test_almgren_chriss_zero_risk_aversion_is_twap(us_market):
    params = EnvParams(data=MarketData.from_episodes(us_market.test))
    ac = _run(almgren_chriss_policy, np.float32(0.0), params)
    twap = _run(twap_policy, None, params)
    np.testing.assert_allclose(ac.remaining, twap.remaining, atol=1e-5)


def test_almgren_chriss_front_loads_with_risk_aversion(us_market):
    params = EnvParams(data=MarketData.from_episodes(us_market.test), participation_cap=1.0)
    mild = _run(almgren_chriss_policy, np.float32(1.0), params)
    strong = _run(almgren_chriss_policy, np.float32(1000.0), params)
    twap = _run(twap_policy, None, params)
    mid = params.data.num_slots // 4
    assert np.all(strong.remaining[:, mid] < mild.remaining[:, mid])
    assert np.all(mild.remaining[:, mid] <= twap.remaining[:, mid] + 1e-6)


def test_almgren_chriss_eta_matches_the_cost_model_at_the_twap_rate(make_trend_market):
    """η_lin·n² equals the env's impact cost of trading n = 1/T of Q in one minute."""
    data = make_trend_market(n_episodes=1, n_slots=50, minute_volume=2000.0)
    params = EnvParams(data=data, order_fraction=0.2, impact_eta_bps=40.0, impact_exponent=0.6)
    env = ExecutionEnv()
    state = env.init_state(params, 0, 0, 50)
    eta_lin = float(almgren_chriss_eta(state, params))
    n = 1.0 / 50
    q = n * float(state.quantity)
    impact_fraction = 40e-4 * (q / 2000.0) ** 0.6
    assert eta_lin * n**2 == pytest.approx(n * impact_fraction, rel=1e-5)
