"""The JAX execution env against its plain-NumPy twin, plus invariants, on real sample days."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from serl_jax.baselines import twap_policy, twap_pov_policy
from serl_jax.config import Config
from serl_jax.envs.execution import EnvParams, ExecutionEnv, minute_volume_forecast
from serl_jax.envs.market_data import MarketData
from serl_jax.envs.reference import NumpyExecutionEnv
from serl_jax.evaluation import rollout
from serl_jax.experiment import evaluate_policies


def _compare_episode(env, params, data, episode, start, window_len, actions, multiplier=1.0):
    ref = NumpyExecutionEnv(data, params)
    ref_obs = ref.reset(episode, start, window_len, multiplier)
    state = env.init_state(params, episode, start, window_len, multiplier)
    obs = env.get_obs(state, params)
    np.testing.assert_allclose(obs, ref_obs, rtol=1e-4, atol=1e-4)
    step = jax.jit(env.step_env)
    for t, action in enumerate(actions[:window_len]):
        obs, state, reward, terminated, info = step(jax.random.PRNGKey(t), state, action, params)
        ref_obs, ref_reward, ref_done, ref_info = ref.step(action)
        np.testing.assert_allclose(obs, ref_obs, rtol=1e-4, atol=1e-4, err_msg=f"obs at t={t}")
        np.testing.assert_allclose(info["exec_qty"], ref_info["exec_qty"], rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(info["exec_price"], ref_info["exec_price"], rtol=1e-6)
        np.testing.assert_allclose(reward, ref_reward, rtol=2e-3, atol=2e-4, err_msg=f"t={t}")
        assert bool(terminated) == ref_done
        assert float(state.inventory) >= 0.0
        np.testing.assert_allclose(state.executed + state.inventory, state.quantity, rtol=1e-6)
    assert ref_done
    np.testing.assert_allclose(info["order_pa"], ref.order_pa(), rtol=1e-3, atol=1e-2)


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"side": -1.0, "benchmark": "twap"},
        {"force_liquidation": False, "participation_cap": 0.05},
        {"child_quantity": "participation"},
        {"step_minutes": 7},
        {"step_minutes": 30, "child_quantity": "participation", "side": -1.0},
    ],
    ids=["sell-vwap", "buy-twap", "unfilled-mode", "participation", "interval", "interval-pov"],
)
def test_matches_numpy_reference_on_real_days(us_market, cn_market, overrides):
    env = ExecutionEnv()
    rng = np.random.default_rng(0)
    for market in (us_market, cn_market):
        data = MarketData.from_episodes(market.test)
        params = EnvParams(data=data, lookback=5, **overrides)
        for episode in rng.choice(data.num_episodes, size=2, replace=False):
            actions = rng.uniform(size=data.num_slots).astype(np.float32)
            actions[rng.uniform(size=actions.size) < 0.2] = 0.0
            _compare_episode(env, params, market.test, int(episode), 0, data.num_slots, actions)


@pytest.mark.parametrize(
    ("child_quantity", "step_minutes"), [("fixed", 1), ("participation", 1), ("participation", 4)]
)
def test_matches_reference_on_random_sub_windows(cn_market, child_quantity, step_minutes):
    env = ExecutionEnv()
    data = MarketData.from_episodes(cn_market.val)
    params = EnvParams(
        data=data, lookback=7, child_quantity=child_quantity, step_minutes=step_minutes
    )
    rng = np.random.default_rng(1)
    for _ in range(3):
        start = int(rng.integers(0, 200))
        window = int(rng.integers(10, data.num_slots - start))
        actions = rng.uniform(size=window).astype(np.float32)
        _compare_episode(
            env,
            params,
            cn_market.val,
            int(rng.integers(data.num_episodes)),
            start,
            window,
            actions,
            1.3,
        )


def test_action_one_at_start_trades_everything_within_the_cap(us_market):
    env = ExecutionEnv()
    data = MarketData.from_episodes(us_market.test)
    for cap in (1.0, 0.01):
        params = EnvParams(data=data, participation_cap=cap)
        state = env.init_state(params, 0, 0, data.num_slots)
        _, next_state, _, _, info = env.step_env(jax.random.PRNGKey(0), state, 1.0, params)
        expected = min(float(state.quantity), cap * float(data.volume[0, 0]))
        np.testing.assert_allclose(info["exec_qty"], expected, rtol=1e-6)
        np.testing.assert_allclose(
            next_state.inventory, float(state.quantity) - expected, rtol=1e-5
        )


def test_cost_model_by_hand(make_trend_market):
    """One child order: 100 shares into 1000 volume at price 10, sell side."""
    data = make_trend_market(n_episodes=1, n_slots=4, drift_per_minute=0.0)
    params = EnvParams(
        data=data,
        half_spread_bps=2.0,
        impact_eta_bps=50.0,
        impact_exponent=0.5,
        participation_cap=0.2,
        order_fraction=0.1,
        concentration_penalty=100.0,
        reward_scale=1.0,
    )
    env = ExecutionEnv()
    state = env.init_state(params, 0, 0, 4)
    assert float(state.quantity) == pytest.approx(0.1 * 4000.0)
    # a = 0.25 of 400 shares = 100 shares; 10% participation.
    _, s1, reward, _, info = env.step_env(jax.random.PRNGKey(0), state, 0.25, params)
    cost_bps = 2.0 + 50.0 * 0.1**0.5
    assert float(info["exec_price"]) == pytest.approx(10.0 * (1 - cost_bps * 1e-4), rel=1e-6)
    # Flat prices: VWAP benchmark = 10, so PA_t = -cost; q/Q = 0.25.
    assert float(reward) == pytest.approx(-cost_bps * 0.25 - 100.0 * 0.25**2, rel=1e-4)
    # Buying pays the same cost on the other side.
    buy = params.replace(side=-1.0)
    _, _, _, _, info = env.step_env(jax.random.PRNGKey(0), env.init_state(buy, 0, 0, 4), 0.25, buy)
    assert float(info["exec_price"]) == pytest.approx(10.0 * (1 + cost_bps * 1e-4), rel=1e-6)


def test_forced_liquidation_uses_mean_volume_and_penalty(make_trend_market):
    data = make_trend_market(n_episodes=1, n_slots=2, drift_per_minute=0.0, zero_volume_slots=(1,))
    params = EnvParams(data=data, order_fraction=0.5, force_penalty_bps=10.0, reward_scale=1.0)
    env = ExecutionEnv()
    state = env.init_state(params, 0, 0, 2)
    _, state, _, _, _ = env.step_env(jax.random.PRNGKey(0), state, 0.0, params)
    _, state, _, terminated, info = env.step_env(jax.random.PRNGKey(1), state, 0.0, params)
    assert bool(terminated) and float(state.inventory) == 0.0
    q = float(info["exec_qty"])
    assert q == pytest.approx(0.5 * 2000.0)  # Q = 0.5 x expected window volume (2 x 1000)
    cost = 2.0 + 50.0 * (q / 1000.0) ** 0.5 + 10.0
    assert float(info["exec_price"]) == pytest.approx(10.0 * (1 - cost * 1e-4), rel=1e-6)
    # Without forced liquidation the remainder stays unfilled and is penalized.
    unfilled = params.replace(force_liquidation=False)
    state = env.init_state(unfilled, 0, 0, 2)
    _, state, _, _, _ = env.step_env(jax.random.PRNGKey(0), state, 0.0, unfilled)
    _, state, reward, _, info = env.step_env(jax.random.PRNGKey(1), state, 1.0, unfilled)
    assert float(info["exec_qty"]) == 0.0 and float(state.inventory) == pytest.approx(1000.0)
    assert float(reward) == pytest.approx(-100.0 * 1.0)  # terminal_penalty_bps x I_T/Q


def test_reward_sums_to_order_pa_without_penalties(cn_market):
    """With c = 0, Σ_t PA_t q_t/Q is the order's PA for a fully executed order."""
    env = ExecutionEnv()
    data = MarketData.from_episodes(cn_market.test)
    params = EnvParams(data=data, concentration_penalty=0.0, reward_scale=1.0)
    result = rollout(env, twap_policy, None, params, jax.random.PRNGKey(0))
    pa = params.side * (result.notional / result.executed / result.benchmark_price - 1.0) * 1e4
    # float32: each PA_t carries ~1e-3 bps of rounding; 240 of them add up to ~1e-2 bps.
    np.testing.assert_allclose(result.reward.sum(axis=1), pa, rtol=1e-3, atol=5e-2)


def test_twap_fills_everything_and_inventory_is_monotone(cn_market, us_market):
    env = ExecutionEnv()
    for market in (cn_market, us_market):
        params = EnvParams(data=MarketData.from_episodes(market.test))
        result = rollout(env, twap_policy, None, params, jax.random.PRNGKey(0))
        np.testing.assert_allclose(result.executed, result.quantity, rtol=1e-6)
        assert np.all(np.diff(np.asarray(result.remaining), axis=1) <= 1e-7)
        assert np.all(np.asarray(result.remaining)[:, -1] == 0.0)


def test_reset_vmaps_over_thousands_and_respects_windows(cn_market):
    env = ExecutionEnv()
    data = MarketData.from_episodes(cn_market.train)
    params = EnvParams(
        data=data, random_window=True, min_window_len=20, quantity_low=0.5, quantity_high=1.5
    )
    keys = jax.random.split(jax.random.PRNGKey(0), 4096)
    obs, state = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(keys, params)
    assert obs.shape == (4096, env.observation_size(params))
    assert bool(jnp.all(state.window_len >= 20))
    assert bool(jnp.all(state.start + state.window_len <= data.num_slots))
    # Episodes are drawn uniformly: counts within 5 sigma of 4096/N each.
    counts = np.bincount(np.asarray(state.episode), minlength=data.num_episodes)
    expected = 4096 / data.num_episodes
    assert np.all(np.abs(counts - expected) < 5 * np.sqrt(expected)), counts
    ep, start, length = (np.asarray(x) for x in (state.episode, state.start, state.window_len))
    profile = np.asarray(data.volume_profile, np.float64)
    window_share = np.array(
        [profile[e, s : s + n].sum() for e, s, n in zip(ep, start, length, strict=True)]
    )
    expected_volume = np.asarray(data.expected_day_volume, np.float64)[ep] * window_share
    multipliers = np.asarray(state.quantity, np.float64) / (0.05 * expected_volume)
    assert 0.5 <= multipliers.min() < 0.52 and 1.48 < multipliers.max() <= 1.5
    assert np.isfinite(np.asarray(obs)).all()


def test_step_is_traced_once_for_new_params(cn_market):
    """Changing parameter values (not shapes) must not recompile the step."""
    env = ExecutionEnv()

    @jax.jit
    @chex.assert_max_traces(n=1)
    def step(key, state, action, params):
        return env.step(key, state, action, params)

    data = MarketData.from_episodes(cn_market.val)
    params = EnvParams(data=data)
    _, state = env.reset(jax.random.PRNGKey(0), params)
    step(jax.random.PRNGKey(1), state, 0.5, params)
    step(jax.random.PRNGKey(1), state, 0.5, params.replace(side=-1.0, impact_eta_bps=10.0))


def test_default_params_need_data():
    with pytest.raises(ValueError, match="no default market"):
        _ = ExecutionEnv().default_params


def test_custom_reward_slot(make_trend_market):
    def executed_fraction(prev_state, action, next_state, params):
        return next_state.last_qty / next_state.quantity

    data = make_trend_market(n_episodes=1, n_slots=4)
    params = EnvParams(data=data)
    env = ExecutionEnv(reward_fn=executed_fraction)
    state = env.init_state(params, 0, 0, 4)
    _, _, reward, _, info = env.step_env(jax.random.PRNGKey(0), state, 0.5, params)
    assert float(reward) == pytest.approx(float(info["exec_qty"] / state.quantity))


def test_the_diagnostic_volume_leak_shows_the_current_minute(us_market):
    """Rung (b) of the learnability ladder: one more observation entry, the current
    minute's true volume as ``log1p(v_s / mean minute volume)``; nothing else changes."""
    env = ExecutionEnv()
    data = MarketData.from_episodes(us_market.test)
    honest = EnvParams(data=data)
    leaky = EnvParams(data=data, diagnostic_volume_leak=True)
    assert env.observation_size(leaky) == env.observation_size(honest) + 1
    state = env.init_state(leaky, 2, 0, data.num_slots)
    for _ in range(7):
        _, state, *_ = env.step_env(jax.random.PRNGKey(0), state, jnp.float32(0.01), leaky)
    obs = env.get_obs(state, leaky)
    np.testing.assert_array_equal(obs[:-1], env.get_obs(state, honest))
    volume = float(data.volume[2, 7]) / float(data.mean_minute_volume[2])
    assert float(obs[-1]) == pytest.approx(np.log1p(volume), rel=1e-5)
    assert env.observation_space(leaky).shape == (env.observation_size(leaky),)


def test_last_replayed_price_is_the_minutes_bar(cn_market):
    env = ExecutionEnv()
    data = MarketData.from_episodes(cn_market.test)
    params = EnvParams(data=data)
    state = env.init_state(params, 3, 10, 100)
    assert float(state.last_replayed_price) == pytest.approx(float(data.price[3, 9]))
    for t in range(3):
        _, state, *_ = env.step_env(jax.random.PRNGKey(0), state, jnp.float32(0.02), params)
        assert float(state.last_replayed_price) == pytest.approx(float(data.price[3, 10 + t]))
        assert float(state.last_replayed_price) == float(state.last_market_price)


def _hand_made_day() -> MarketData:
    """One day of 4 minutes: volumes 100, 300, 200, 400 against a training profile that
    expects 100, 200, 300, 400 (1,000 a day); flat price 10."""
    return MarketData.create(
        price=np.full((1, 4), 10.0),
        volume=np.array([[100.0, 300.0, 200.0, 400.0]]),
        features=np.zeros((1, 4, 1)),
        volume_profile=np.array([[0.1, 0.2, 0.3, 0.4]]),
        expected_day_volume=np.array([1000.0]),
        mean_minute_volume=np.array([250.0]),
        sigma=np.array([1e-3]),
    )


def test_participation_child_orders_by_hand():
    """``q = a I v / V̂`` with ``V̂`` the profile times the day's surprise so far."""
    data = _hand_made_day()
    params = EnvParams(
        data=data, order_fraction=0.1, participation_cap=1.0, child_quantity="participation"
    )
    # forecasts: slot 0 has no history (surprise 1): 100; slot 1: 200 x 100/100 = 200;
    # slot 2: 300 x (100 + 300)/(100 + 200) = 400
    for slot, forecast in ((0, 100.0), (1, 200.0), (2, 400.0)):
        assert float(minute_volume_forecast(data, 0, slot)) == pytest.approx(forecast)
    env = ExecutionEnv()
    state = env.init_state(params, 0, 0, 4)  # Q = 0.1 x 1,000 = 100 shares
    expected = [
        (0.25, 25.0),  # 0.25 x 100 at rate 25/100 of 100: as forecast
        (0.25, 18.75 * 300 / 200),  # 0.25 x 75 at rate 18.75/200 of a busier 300
        (0.5, 23.4375 * 200 / 400),  # 0.5 x 46.875 at rate 23.4375/400 of a quieter 200
    ]
    for action, qty in expected:
        _, state, _, _, info = env.step_env(jax.random.PRNGKey(0), state, action, params)
        assert float(info["exec_qty"]) == pytest.approx(qty, rel=1e-6)
        participation = qty / float(data.volume[0, int(state.time) - 1])
        cost = 2.0 + 50.0 * participation**0.5
        assert float(info["exec_price"]) == pytest.approx(10.0 * (1 - cost * 1e-4), rel=1e-6)
    # the last minute is forced: the remainder trades whatever the action
    _, state, _, _, info = env.step_env(jax.random.PRNGKey(0), state, 0.0, params)
    assert float(state.inventory) == 0.0
    assert float(info["exec_qty"]) == pytest.approx(100.0 - 25.0 - 28.125 - 11.71875, rel=1e-5)


def test_participation_never_trades_more_than_held_nor_above_the_cap():
    data = _hand_made_day()
    env = ExecutionEnv()
    capped = EnvParams(
        data=data, order_fraction=0.1, participation_cap=0.05, child_quantity="participation"
    )
    state = env.init_state(capped, 0, 0, 4)
    _, state, _, _, info = env.step_env(jax.random.PRNGKey(0), state, 1.0, capped)
    assert float(info["exec_qty"]) == pytest.approx(0.05 * 100.0)
    uncapped = capped.replace(participation_cap=1.0)
    state = env.init_state(uncapped, 0, 0, 4)
    _, state, *_ = env.step_env(jax.random.PRNGKey(0), state, 0.0, uncapped)
    # slot 1 is 1.5x its forecast: all of the inventory at a = 1 is capped at I_t
    _, state, _, _, info = env.step_env(jax.random.PRNGKey(0), state, 1.0, uncapped)
    assert float(info["exec_qty"]) == pytest.approx(100.0)
    assert float(state.inventory) == 0.0


def test_decision_intervals_by_hand():
    """Every 2 minutes the action sets the interval's size, ``a I_t`` shares a minute."""
    data = _hand_made_day()
    params = EnvParams(data=data, order_fraction=0.1, participation_cap=1.0, step_minutes=2)
    env = ExecutionEnv()
    state = env.init_state(params, 0, 0, 4)  # Q = 100 shares
    expected = [  # (action, shares, acted)
        (0.25, 25.0, True),  # 0.25 x 100: 25 a minute for minutes 0 and 1
        (0.9, 25.0, False),  # the action is not read: the interval's 25 again
        (0.5, 25.0, True),  # 0.5 x 50: 25 a minute for minutes 2 and 3
    ]
    for action, qty, acted in expected:
        _, state, _, _, info = env.step_env(jax.random.PRNGKey(0), state, action, params)
        assert float(info["exec_qty"]) == pytest.approx(qty, rel=1e-6)
        assert bool(info["acted"]) == acted
        assert float(state.pace) == pytest.approx(25.0, rel=1e-6)
    # the last minute is forced: the remaining 25 trade whatever the interval says
    _, state, _, _, info = env.step_env(jax.random.PRNGKey(0), state, 0.0, params)
    assert float(info["exec_qty"]) == pytest.approx(25.0) and float(state.inventory) == 0.0
    # without intervals every action is read and info has no "acted"
    state = env.init_state(params.replace(step_minutes=1), 0, 0, 4)
    _, _, _, _, info = env.step_env(
        jax.random.PRNGKey(0), state, 0.25, params.replace(step_minutes=1)
    )
    assert "acted" not in info


def test_baselines_decide_every_minute_whatever_the_learned_policys_interval(cn_market):
    env = ExecutionEnv()
    params = EnvParams(data=MarketData.from_episodes(cn_market.test), step_minutes=15)
    results = evaluate_policies(Config(), env, params, {"TWAP": (twap_policy, None)})
    key = jax.random.PRNGKey(0)
    every_minute = jax.device_get(
        rollout(env, twap_policy, None, params.replace(step_minutes=1), key)
    )
    # atol in shares: evaluate_policies runs the fixed-size baselines behind one index
    # (experiment.rollout_policy), whose float32 rounding differs from this program's
    np.testing.assert_allclose(results["TWAP"][1].exec_qty, every_minute.exec_qty, atol=0.01)
    held = jax.device_get(rollout(env, twap_policy, None, params, key))
    assert not np.allclose(held.exec_qty, every_minute.exec_qty)


def test_baselines_keep_fixed_child_orders_when_the_learned_policy_participates(cn_market):
    """Baselines are defined by fixed-size child orders; a learned policy uses the env's."""
    env = ExecutionEnv()
    data = MarketData.from_episodes(cn_market.test)
    fixed = EnvParams(data=data)
    participating = fixed.replace(child_quantity="participation")

    def constant(policy_params, key, obs, state, params):
        return jnp.float32(0.01)

    policies = {"TWAP": (twap_policy, None), "constant": (constant, None)}
    results = evaluate_policies(Config(), env, participating, policies)
    # TWAP-POV participates even where the learned policies send fixed-size orders
    pov = evaluate_policies(Config(), env, fixed, {"TWAP-POV": (twap_pov_policy, None)})
    results["TWAP-POV"] = pov["TWAP-POV"]
    key = jax.random.PRNGKey(0)
    for name, policy, params in (
        ("TWAP", twap_policy, fixed),
        ("constant", constant, participating),
        ("TWAP-POV", twap_policy, participating),
    ):
        expected = jax.device_get(rollout(env, policy, None, params, key))
        # atol in shares: TWAP rolls out behind the baselines' index (float32 rounding)
        np.testing.assert_allclose(results[name][1].exec_qty, expected.exec_qty, atol=0.01)
    assert not np.allclose(
        results["constant"][1].exec_qty,
        jax.device_get(rollout(env, constant, None, fixed, key)).exec_qty,
    )
