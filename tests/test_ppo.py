"""PPO pieces against independent references, and PPO learning a known-optimal schedule."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from serl_jax.baselines import twap_policy, vwap_policy
from serl_jax.envs.execution import EnvParams, ExecutionEnv, twap_action_prior, vwap_action_prior
from serl_jax.envs.market_data import MarketData
from serl_jax.evaluation import rollout
from serl_jax.metrics import price_advantage
from serl_jax.rl.distributions import LogitNormal
from serl_jax.rl.networks import make_network
from serl_jax.rl.normalization import RunningStats
from serl_jax.rl.policy import PPOPolicyParams, make_ppo_policy
from serl_jax.rl.ppo import (
    Batch,
    PPOConfig,
    Transition,
    calculate_gae,
    lane_keys,
    make_train,
    ppo_loss,
    reset_lanes,
    sibling_baseline,
)


def _gae_reference(rewards, values, dones, last_value, gamma, lam):
    """Plain-Python GAE for one lane: A_t = Σ_l (γλ)^l δ_{t+l}, cut at episode ends."""
    n = len(rewards)
    next_values = list(values[1:]) + [last_value]
    deltas = [rewards[t] + gamma * next_values[t] * (1 - dones[t]) - values[t] for t in range(n)]
    advantages = []
    for t in range(n):
        total, discount = 0.0, 1.0
        for k in range(t, n):
            total += discount * deltas[k]
            if dones[k]:
                break
            discount *= gamma * lam
        advantages.append(total)
    return np.array(advantages)


def test_gae_matches_the_explicit_sum():
    rng = np.random.default_rng(0)
    steps, lanes = 12, 3
    rewards = rng.normal(size=(steps, lanes)).astype(np.float32)
    values = rng.normal(size=(steps, lanes)).astype(np.float32)
    dones = rng.uniform(size=(steps, lanes)) < 0.2
    last_value = rng.normal(size=lanes).astype(np.float32)
    got = calculate_gae(
        jnp.asarray(rewards),
        jnp.asarray(values),
        jnp.asarray(dones),
        jnp.asarray(last_value),
        0.99,
        0.9,
    )
    for lane in range(lanes):
        expected = _gae_reference(
            rewards[:, lane], values[:, lane], dones[:, lane], last_value[lane], 0.99, 0.9
        )
        np.testing.assert_allclose(got[:, lane], expected, rtol=1e-5, atol=1e-5)


def test_gae_by_hand():
    # Two steps, no termination, γ = 1, λ = 0.5: δ0 = 1 + 2 - 0 = 3, δ1 = 1 + 4 - 2 = 3.
    adv = calculate_gae(
        jnp.array([1.0, 1.0]),
        jnp.array([0.0, 2.0]),
        jnp.array([False, False]),
        jnp.array(4.0),
        1.0,
        0.5,
    )
    np.testing.assert_allclose(adv, [3.0 + 0.5 * 3.0, 3.0])


def test_logit_normal_matches_scipy():
    loc, log_scale = jnp.array([-4.0, 0.0, 2.5]), jnp.array([-1.0, 0.0, 0.7])
    dist = LogitNormal.from_logits(jnp.stack([loc, log_scale], axis=-1))
    z = jnp.array([-3.2, 0.4, 1.0])
    scale = np.exp(np.asarray(log_scale))
    np.testing.assert_allclose(dist.log_prob(z), stats.norm.logpdf(z, loc, scale), rtol=1e-5)
    np.testing.assert_allclose(dist.entropy(), stats.norm.entropy(loc, scale), rtol=1e-5)
    np.testing.assert_allclose(
        dist.deterministic_action(), 1 / (1 + np.exp(-np.asarray(loc))), rtol=1e-6
    )
    samples = jax.vmap(dist.sample)(jax.random.split(jax.random.PRNGKey(0), 20000))
    np.testing.assert_allclose(samples.mean(axis=0), loc, atol=0.05)
    np.testing.assert_allclose(samples.std(axis=0), scale, rtol=0.03)
    actions = LogitNormal.action(samples)
    assert bool(jnp.all((actions >= 0) & (actions <= 1)))
    # The median of the action is sigmoid(loc).
    np.testing.assert_allclose(np.median(actions, axis=0), dist.deterministic_action(), atol=0.01)


def test_log_scale_is_clipped():
    dist = LogitNormal.from_logits(jnp.array([[0.0, -50.0], [0.0, 50.0]]))
    np.testing.assert_allclose(dist.scale, np.exp([-5.0, 2.0]), rtol=1e-6)


def test_running_stats_match_numpy_over_batches():
    rng = np.random.default_rng(0)
    batches = [rng.normal(loc=3.0, scale=2.0, size=(n, 4)) for n in (5, 17, 64)]
    running = RunningStats.create(4)
    for b in batches:
        running = running.update(jnp.asarray(b, jnp.float32))
    everything = np.concatenate(batches)
    np.testing.assert_allclose(running.mean, everything.mean(axis=0), rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(running.var, everything.var(axis=0), rtol=1e-3)


def test_sibling_baseline_by_hand():
    # Two groups of three lanes at two steps.
    adv = jnp.array([[1.0, 2.0, 6.0, 0.0, 0.0, 3.0], [3.0, 3.0, 3.0, -1.0, 1.0, 0.0]])
    got = sibling_baseline(adv, 3)
    # Lane 0, step 0: 1 - (2 + 6)/2 = -3; lane 5, step 0: 3 - 0 = 3; equal lanes give 0.
    expected = [[-3.0, -1.5, 4.5, -1.5, -1.5, 3.0], [0.0, 0.0, 0.0, -1.5, 1.5, 0.0]]
    np.testing.assert_allclose(got, expected)
    np.testing.assert_array_equal(sibling_baseline(adv, 1), adv)


def test_lane_keys_are_shared_within_groups_only():
    keys = jax.random.key_data(lane_keys(jax.random.PRNGKey(0), 8, 4))
    np.testing.assert_array_equal(keys[0], keys[3])
    np.testing.assert_array_equal(keys[4], keys[7])
    assert not np.array_equal(keys[3], keys[4])


def test_siblings_execute_the_same_order_on_the_same_day(cn_market):
    params = EnvParams(
        data=MarketData.from_episodes(cn_market.train), random_window=True, min_window_len=30
    )
    lanes = reset_lanes(ExecutionEnv(), params, jax.random.PRNGKey(1), 64, group_size=4)
    state = jax.device_get(lanes.env_state)
    for field in ("episode", "start", "window_len", "quantity"):
        per_group = np.asarray(getattr(state, field)).reshape(16, 4)
        assert np.all(per_group == per_group[:, :1]), field
        assert len(np.unique(per_group[:, 0])) > 1, field  # groups differ


def test_sibling_baseline_keeps_the_policy_gradient_unbiased():
    """Monte Carlo check on a bandit whose reward has a large noise shared by siblings:
    the gradient of E[r] wrt the mean is the same with and without the baseline, and its
    spread across repetitions is far smaller with it."""
    mu, sigma, n_groups, group = 0.3, 1.0, 256, 4

    def gradient(key, grouped):
        k_shared, k_act = jax.random.split(key)
        shared = 30.0 * jax.random.normal(k_shared, (n_groups, 1))  # the market
        action = mu + sigma * jax.random.normal(k_act, (n_groups, group))
        reward = shared - (action - 1.0) ** 2  # optimum at 1: d E[r]/d mu = 2 (1 - mu)
        adv = reward.reshape(-1)
        if grouped:
            adv = sibling_baseline(adv, group)
        score = ((action - mu) / sigma**2).reshape(-1)
        return jnp.mean(adv * score)

    keys = jax.random.split(jax.random.PRNGKey(0), 400)
    plain = jax.vmap(lambda k: gradient(k, False))(keys)
    siblings = jax.vmap(lambda k: gradient(k, True))(keys)
    true = 2.0 * (1.0 - mu)
    # Leave-one-out: a lane's baseline excludes its own reward, so it is independent of its
    # action and the expectation is exactly the plain gradient.
    assert float(jnp.mean(siblings)) == pytest.approx(true, rel=0.1)
    assert float(jnp.mean(plain)) == pytest.approx(true, abs=3 * float(jnp.std(plain)) / 20)
    assert float(jnp.std(siblings)) < float(jnp.std(plain)) / 5


def test_anchored_twap_prior_by_hand():
    def obs(steps_left, window, held):
        return jnp.array([steps_left / window, np.log(steps_left), held, 0.0])

    def action(o, k):
        return float(jax.nn.sigmoid(twap_action_prior(o, anchor_steps=k)))

    # On schedule (40 of 100 steps left, 40% held): one slice of the remaining, 1/40.
    assert action(obs(40, 100, 0.40), 5.0) == pytest.approx(1 / 40, rel=1e-4)
    # Two slices ahead (38% held): exp(-2/5) / 40; two behind: exp(+2/5) / 40.
    assert action(obs(40, 100, 0.38), 5.0) == pytest.approx(np.exp(-0.4) / 40, rel=1e-4)
    assert action(obs(40, 100, 0.42), 5.0) == pytest.approx(np.exp(0.4) / 40, rel=1e-4)
    assert action(obs(1, 100, 0.05), 5.0) > 0.9999  # the last step trades everything
    # anchor 0 is the TWAP baseline's one-step tracking: (h - tau (1 - 1/n)) / h.
    assert action(obs(40, 100, 0.42), 0.0) == pytest.approx((0.42 - 0.39) / 0.42, rel=1e-4)
    assert action(obs(40, 100, 0.38), 0.0) < 1e-4  # ahead: wait


def test_anchored_vwap_prior_by_hand():
    def obs(steps_left, held, schedule_left, pace):
        return jnp.array([0.5, np.log(steps_left), held, 0.0, schedule_left, pace])

    def action(o, k):
        return float(jax.nn.sigmoid(vwap_action_prior(o, anchor_steps=k)))

    # On the volume schedule (30% of the expected volume left, 30% held): this minute's
    # share of the remaining profile, whatever the clock says.
    assert action(obs(40, 0.30, 0.30, 0.05), 5.0) == pytest.approx(0.05, rel=1e-4)
    # 10% of the schedule ahead (behind) = 4 of the 40 remaining slices: exp(-+4/5) * 0.05.
    assert action(obs(40, 0.27, 0.30, 0.05), 5.0) == pytest.approx(np.exp(-0.8) * 0.05, rel=1e-4)
    assert action(obs(40, 0.33, 0.30, 0.05), 5.0) == pytest.approx(np.exp(0.8) * 0.05, rel=1e-4)
    assert action(obs(1, 0.05, 0.02, 1.0), 5.0) > 0.9999  # the last step trades everything
    # anchor 0 tracks the schedule in one step: target tau_v (1 - pi) = 0.285 after it.
    assert action(obs(40, 0.33, 0.30, 0.05), 0.0) == pytest.approx((0.33 - 0.285) / 0.33, rel=1e-4)
    assert action(obs(40, 0.27, 0.30, 0.05), 0.0) < 1e-4  # ahead: wait


def test_the_profile_clock_by_hand():
    profile = np.array([[0.1, 0.2, 0.3, 0.4, 0.0, 0.0]])
    data = MarketData.create(
        price=np.full((1, 6), 10.0),
        volume=np.full((1, 6), 100.0),
        features=np.zeros((1, 6, 1)),
        volume_profile=profile,
        expected_day_volume=np.array([600.0]),
        mean_minute_volume=np.array([100.0]),
        sigma=np.array([1e-4]),
    )
    env, params = ExecutionEnv(), EnvParams(data=data, lookback=1)
    state = env.init_state(params, 0, 1, 5)  # slots 1..5: profile 0.2, 0.3, 0.4, 0, 0
    seen = []
    for t in range(5):
        o = env.get_obs(state, params)
        seen.append((float(o[4]), float(o[5])))
        _, state, *_ = env.step_env(jax.random.PRNGKey(t), state, 0.0, params)
    # the zero-profile tail: nothing left of the schedule, the pace falls back to 1/(T - t)
    expected = [(1, 0.2 / 0.9), (0.7 / 0.9, 0.3 / 0.7), (0.4 / 0.9, 1), (0, 1 / 2), (0, 1)]
    np.testing.assert_allclose(seen, expected, rtol=1e-5, atol=1e-7)


def test_the_vwap_prior_at_anchor_zero_is_the_vwap_baseline(cn_market):
    """The prior's one-step tracking trades as :func:`vwap_policy` does, step by step, on a
    real day's training profile (fixed-size child orders)."""
    data = MarketData.from_episodes(cn_market.test)
    env, params = ExecutionEnv(), EnvParams(data=data, lookback=3)
    state = env.init_state(params, 1, 30, 150)
    step = jax.jit(env.step_env)
    for t in range(150):
        obs = env.get_obs(state, params)
        prior = float(jax.nn.sigmoid(vwap_action_prior(obs, anchor_steps=0.0)))
        baseline = float(vwap_policy(None, jax.random.PRNGKey(0), obs, state, params))
        # 5e-5: the prior's logit is clipped to [-10, 10] (sigmoid(10) = 1 - 4.5e-5)
        assert prior == pytest.approx(baseline, abs=5e-5), f"t={t}"
        _, state, *_ = step(jax.random.PRNGKey(t), state, baseline, params)
    assert float(state.inventory) == 0.0


def test_config_rejects_indivisible_minibatches():
    with pytest.raises(ValueError, match="num_minibatches"):
        PPOConfig(num_envs=10, num_steps=3, num_minibatches=4, total_timesteps=1000, group_size=1)
    with pytest.raises(ValueError, match="total_timesteps"):
        PPOConfig(num_envs=10, num_steps=30, num_minibatches=1, total_timesteps=100, group_size=1)
    with pytest.raises(ValueError, match="group_size"):
        PPOConfig(num_envs=10, num_steps=30, num_minibatches=1, group_size=4)


@pytest.fixture(scope="module")
def uptrend_run(make_trend_market):
    """PPO on a steady uptrend (+5 bps/min): a seller should wait and sell late."""
    data = make_trend_market(n_episodes=8, n_slots=30, drift_per_minute=5e-4)
    params = EnvParams(data=data, lookback=2, order_fraction=0.05)
    env = ExecutionEnv()
    config = PPOConfig(
        num_envs=64, num_steps=30, total_timesteps=64 * 30 * 120, num_minibatches=4, lr=3e-3
    )
    network = make_network((32, 32))
    train = jax.jit(make_train(config, env, params, network))
    out = train(jax.random.PRNGKey(0))
    return env, params, network, config, out


def test_ppo_learns_to_beat_twap_on_a_known_trend(uptrend_run):
    env, params, network, config, out = uptrend_run
    runner = out["runner_state"]
    policy = make_ppo_policy(network, config.normalize_obs)
    learned = rollout(
        env,
        policy,
        PPOPolicyParams(runner.train_state.params, runner.obs_stats),
        params,
        jax.random.PRNGKey(1),
    )
    twap = rollout(env, twap_policy, None, params, jax.random.PRNGKey(1))
    learned_pa = price_advantage(learned.outcomes(1.0)).mean()
    twap_pa = price_advantage(twap.outcomes(1.0)).mean()
    # TWAP ≈ -13 bps here (costs, no timing gain); selling late gains tens of bps.
    assert learned_pa > twap_pa + 15.0, (learned_pa, twap_pa)
    # It learned to hold: more than half the order is still held halfway through.
    assert float(np.mean(learned.remaining[:, 15])) > 0.5
    curve = np.asarray(out["metrics"]["order_pa"])
    assert np.nanmean(curve[-10:]) > np.nanmean(curve[:10]) + 20.0


def test_same_seed_same_result(make_trend_market):
    data = make_trend_market(n_episodes=4, n_slots=10)
    params = EnvParams(data=data, lookback=2)
    config = PPOConfig(num_envs=8, num_steps=10, total_timesteps=8 * 10 * 3, num_minibatches=2)
    train = jax.jit(make_train(config, ExecutionEnv(), params, make_network((8,))))
    a = train(jax.random.PRNGKey(3))["metrics"]
    b = train(jax.random.PRNGKey(3))["metrics"]
    c = train(jax.random.PRNGKey(4))["metrics"]
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    assert not np.array_equal(a["total_loss"], c["total_loss"])


def test_steps_that_did_not_act_are_left_out_of_the_loss():
    """With ``acted`` the loss equals the loss over the acting rows alone."""
    rng = np.random.default_rng(0)
    rows, obs_size = 24, 5
    network = make_network((8,))
    params = network.init(jax.random.PRNGKey(0), jnp.zeros(obs_size))

    def f32(*shape):
        return jnp.asarray(rng.normal(size=shape), jnp.float32)

    acted = jnp.asarray(rng.uniform(size=rows) < 0.4)
    traj = Transition(
        done=jnp.zeros(rows, bool), action=f32(rows), value=f32(rows), reward=f32(rows),
        log_prob=f32(rows) - 1.0, obs=f32(rows, obs_size), prior_logit=f32(rows),
        order_pa=f32(rows), acted=acted,
    )  # fmt: skip
    batch = Batch(traj, f32(rows) * 100.0, f32(rows))
    config = PPOConfig(num_envs=8, num_steps=3, total_timesteps=24, num_minibatches=1)
    masked, masked_stats = ppo_loss(config, network, params, batch)
    keep = np.flatnonzero(np.asarray(acted))
    subset = jax.tree.map(lambda x: x[keep], batch._replace(traj=traj._replace(acted=None)))
    expected, expected_stats = ppo_loss(config, network, params, subset)
    np.testing.assert_allclose(masked, expected, rtol=1e-5)
    for key in expected_stats:
        np.testing.assert_allclose(masked_stats[key], expected_stats[key], rtol=1e-4, atol=1e-7)


def test_ppo_trains_with_decision_intervals(make_trend_market):
    data = make_trend_market(n_episodes=4, n_slots=12)
    params = EnvParams(data=data, lookback=2, step_minutes=4)
    config = PPOConfig(num_envs=8, num_steps=12, total_timesteps=8 * 12 * 2, num_minibatches=2)
    out = jax.jit(make_train(config, ExecutionEnv(), params, make_network((8,))))(
        jax.random.PRNGKey(0)
    )
    for key, curve in out["metrics"].items():
        assert np.all(np.isfinite(np.asarray(curve))), key
