"""Baseline policies run through the env: schedules realized, catch-up, AC limits, the
volume-driven baselines and the hindsight oracle on hand-made days."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest

from serl_jax.baselines import (
    adaptive_vwap_policy,
    almgren_chriss_eta,
    almgren_chriss_policy,
    cost_optimal_quantities,
    immediate_policy,
    oracle_policy,
    pov_policy,
    twap_policy,
    vwap_policy,
)
from serl_jax.baselines.policies import AVWAP_DECAY, FIXED_SIZE_POLICIES
from serl_jax.config import load_config
from serl_jax.envs.execution import EnvParams, ExecutionEnv
from serl_jax.envs.market_data import MarketData
from serl_jax.envs.reference import NumpyExecutionEnv
from serl_jax.evaluation import rollout
from serl_jax.experiment import baseline_policies, rollout_policy
from serl_jax.metrics import price_advantage, shortfall

ROOT = Path(__file__).resolve().parents[1]


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


def _day(volume, expected=None, price=10.0):
    """One hand-made day: the given minute volumes, a flat price and an expected volume per
    minute (the training profile times the expected day volume) of ``expected``."""
    volume = np.asarray(volume, np.float64)[None]
    n = volume.shape[1]
    expected = np.full(n, volume.mean()) if expected is None else np.asarray(expected, float)
    return MarketData.create(
        price=np.full_like(volume, price),
        volume=volume,
        features=np.zeros((1, n, 1)),
        volume_profile=(expected / expected.sum())[None],
        expected_day_volume=np.array([expected.sum()]),
        mean_minute_volume=np.array([volume.mean()]),
        sigma=np.array([5e-4]),
    )


def test_pov_trades_its_rate_of_the_lagged_volume_and_never_falls_behind_vwap():
    # E[V] = 250 a minute (1,000 for the window), Q = 0.1 x 1,000 = 100, so rho = 0.1.
    data = _day([400.0, 600.0, 200.0, 300.0], expected=[250.0] * 4)
    params = EnvParams(data=data, order_fraction=0.1, participation_cap=1.0, lookback=1)
    result = _run(pov_policy, None, params)
    # t=0: nothing seen; the VWAP floor holds 3/4 -> 25.  t=1: seen 400 -> POV target 60%
    # held, the floor 50% -> 25.  t=2: seen 1,000 = E[V] -> POV target 0 -> the last 50.
    np.testing.assert_allclose(result.exec_qty[0], [25.0, 25.0, 50.0, 0.0], rtol=1e-5)


def test_pov_on_a_quiet_day_is_vwap():
    data = _day([10.0, 20.0, 10.0, 30.0, 20.0], expected=[100.0, 50.0, 50.0, 50.0, 150.0])
    params = EnvParams(data=data, order_fraction=0.01, participation_cap=1.0, lookback=1)
    pov = _run(pov_policy, None, params)
    vwap = _run(vwap_policy, None, params)
    np.testing.assert_allclose(pov.exec_qty, vwap.exec_qty, rtol=1e-5)


def test_adaptive_vwap_by_hand():
    # Expected 100 a minute; the first minute trades 200 (twice the profile).
    data = _day([200.0, 100.0, 100.0], expected=[100.0] * 3)
    params = EnvParams(data=data, order_fraction=0.1, participation_cap=1.0, lookback=1)
    result = _run(adaptive_vwap_policy, None, params)
    q = 30.0
    phi = AVWAP_DECAY
    # t=0: no volume seen, the forecast is the profile: 1/3 of Q.
    first = q / 3
    # t=1: surprise r = 200/100 = 2 -> forecasts 100 (1 + 1) = 200 and 100 (1 + phi);
    # the target done is (200 seen + 200 now) / (200 + 200 + 100 (1 + phi)).
    done_after = (200.0 + 200.0) / (200.0 + 200.0 + 100.0 * (1.0 + phi))
    second = q * done_after - first
    np.testing.assert_allclose(result.exec_qty[0], [first, second, q - first - second], rtol=1e-5)


def _cost(q, liquidity, forced, h=2.0, eta=50.0, k=0.5, penalty=10.0):
    rate = np.where(liquidity > 0, q / np.where(liquidity > 0, liquidity, 1.0), 0.0)
    return np.sum(q * (h + eta * rate**k + np.where(forced, penalty, 0.0)))


def test_cost_optimal_quantities_match_scipy():
    from scipy.optimize import minimize

    rng = np.random.default_rng(0)
    liquidity = rng.lognormal(mean=6.0, sigma=0.8, size=8)
    liquidity[2] = 0.0  # nothing can trade here
    forced = np.zeros(8, bool)
    forced[-1] = True
    quantity, cap = 0.3 * liquidity.sum() / 8 * 3, 0.2
    got = np.asarray(
        cost_optimal_quantities(liquidity, forced, quantity, 2.0, 50.0, 0.5, cap, 10.0)
    )
    assert got.sum() == pytest.approx(quantity, rel=1e-5)
    upper = np.where(forced, np.inf, cap * liquidity)
    assert np.all(got <= upper * (1 + 1e-5)) and got[2] == 0.0
    best = minimize(
        lambda q: _cost(q, liquidity, forced),
        np.full(8, quantity / 7) * (liquidity > 0),
        bounds=[(0.0, None if f else cap * v) for v, f in zip(liquidity, forced, strict=True)],
        constraints=[{"type": "eq", "fun": lambda q: q.sum() - quantity}],
        method="SLSQP",
        options={"ftol": 1e-12, "maxiter": 500},
    )
    assert best.success
    assert _cost(got, liquidity, forced) <= best.fun * (1 + 1e-6)
    np.testing.assert_allclose(got, best.x, atol=1e-2 * quantity)


def test_cost_optimal_quantities_without_caps_or_forcing_follow_volume():
    liquidity = np.array([100.0, 300.0, 50.0, 550.0])
    got = cost_optimal_quantities(liquidity, np.zeros(4, bool), 40.0, 2.0, 50.0, 0.5, 1.0, 10.0)
    np.testing.assert_allclose(got, 40.0 * liquidity / liquidity.sum(), rtol=1e-4)
    with pytest.raises(ValueError, match="impact_exponent"):
        cost_optimal_quantities(liquidity, np.zeros(4, bool), 40.0, 2.0, 50.0, 0.0, 1.0, 10.0)


def test_oracle_follows_the_days_volume_when_nothing_binds():
    volume = np.array([100.0, 300.0, 50.0, 550.0])
    data = _day(volume, expected=[250.0] * 4)
    params = EnvParams(
        data=data, order_fraction=0.04, participation_cap=1.0, force_liquidation=False, lookback=1
    )
    result = _run(oracle_policy, None, params)
    np.testing.assert_allclose(result.exec_qty[0], 40.0 * volume / volume.sum(), rtol=1e-4)


@pytest.mark.parametrize("market", ["cn_market", "us_market"])
def test_no_policy_has_a_lower_shortfall_than_the_oracle_on_real_days(market, request):
    """The oracle minimizes spread and impact given the day's volumes, so every policy's
    shortfall (negative: a cost) is at most the oracle's; prices enter the shortfall only as
    ``p_t / P~`` weights (a fraction of a percent within a day), hence the tolerance."""
    splits = request.getfixturevalue(market)
    for split in ("train", "test"):
        params = EnvParams(data=MarketData.from_episodes(splits.split(split)))
        oracle = shortfall(_run(oracle_policy, None, params).outcomes(1.0))
        for policy, policy_params in [
            (twap_policy, None),
            (vwap_policy, None),
            (adaptive_vwap_policy, None),
            (pov_policy, None),
            (almgren_chriss_policy, np.float32(5.0)),
            (immediate_policy, None),
        ]:
            other = shortfall(_run(policy, policy_params, params).outcomes(1.0))
            assert np.all(other <= oracle + 0.05 + 0.005 * np.abs(oracle)), policy.__name__


def test_the_fixed_size_baselines_share_one_compiled_rollout_and_act_as_alone(cn_market):
    """rollout_policy sends every fixed-size baseline through one program (a lax.switch
    on a traced index): one compilation for all seven, and each one's orders equal its
    own rollout's up to float32 summation order."""
    cfg = load_config(ROOT / "configs" / "tiny.yaml")
    env = ExecutionEnv()
    params = EnvParams(data=MarketData.from_episodes(cn_market.test), lookback=3)  # new shapes
    fixed = {n: p for n, p in baseline_policies(cfg).items() if p[0] in FIXED_SIZE_POLICIES}
    assert len(fixed) == len(FIXED_SIZE_POLICIES) == 7
    before = rollout._cache_size()
    switched = {n: rollout_policy(env, params, *p) for n, p in fixed.items()}
    assert rollout._cache_size() == before + 1
    order_params = params.replace(child_quantity="fixed", step_minutes=1)
    pa = set()
    for name, (policy, policy_params) in fixed.items():
        alone = rollout(env, policy, policy_params, order_params, jax.random.PRNGKey(0))
        got = switched[name]
        np.testing.assert_allclose(got.executed, alone.executed, rtol=1e-6, err_msg=name)
        np.testing.assert_allclose(got.notional, alone.notional, rtol=1e-6, err_msg=name)
        np.testing.assert_allclose(got.exec_qty, alone.exec_qty, atol=0.01, err_msg=name)  # shares
        np.testing.assert_allclose(
            price_advantage(got.outcomes(1.0)), price_advantage(alone.outcomes(1.0)), atol=0.01
        )  # bps
        pa.add(round(float(price_advantage(got.outcomes(1.0)).mean()), 6))
    assert len(pa) == 7  # the index picks seven different schedules
