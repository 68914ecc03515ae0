"""``benchmarks/bench_peer.py`` at a tiny size: Stable-Baselines3 PPO and ours take equal
env steps, TWAP is scored on the orders both policies execute, the SB3 ``VecEnv``
adapter hands SB3 the Gymnasium env's final observations, and SB3's policy ported to JAX
acts as SB3's ``predict``. Skipped without the ``[peers]`` extra (CI does not install it).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("stable_baselines3")

from serl_jax.config import load_config  # noqa: E402
from serl_jax.experiment import TWAP, load_splits, make_env  # noqa: E402
from serl_jax.gym import ExecutionGymEnv, ExecutionVectorEnv, market_params  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_peer  # noqa: E402


def assert_close(actual, expected):
    """Equal up to float32 rounding (a lane of the vmapped step against the single env's)."""
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)


TINY = ["ppo.num_envs=16", "ppo.num_steps=32", "ppo.num_minibatches=2", "eval.n_bootstrap=200"]


@pytest.fixture(scope="module")
def run():
    """One tiny comparison on the cn sample: 2,048 env steps (4 rollouts of 16 x 32)."""
    return bench_peer.compare("sample:cn_1min", 2000, 0, overrides=TINY)


def test_both_learners_take_equal_env_steps(run):
    result, _ = run
    assert result["env_steps"] == 2048  # 2,000 rounded up to whole rollouts of 512
    assert result["sb3"]["env_steps"] == result["ours"]["env_steps"] == 2048
    for learner in ("sb3", "ours"):
        assert result[learner]["steps_per_s"] > 0
        assert result[learner]["compile_s"] > 0
    assert result["ratio_steps_per_s"] == pytest.approx(
        result["ours"]["steps_per_s"] / result["sb3"]["steps_per_s"]
    )


def test_twap_is_scored_on_the_orders_both_policies_execute(run):
    result, rollouts = run
    cfg, _ = bench_peer.run_config(None, TINY, 2000, 0)
    test = load_splits(cfg, "sample:cn_1min").test
    assert set(rollouts) == {TWAP, bench_peer.SB3, bench_peer.OURS}
    twap = rollouts[TWAP]
    assert result["orders"] == len(test.dates) == twap.quantity.shape[0]
    assert result["days"] == len(set(test.dates))
    for name in (bench_peer.SB3, bench_peer.OURS):
        # The same parent orders: size and benchmark (the day's VWAP) order by order.
        np.testing.assert_array_equal(rollouts[name].quantity, twap.quantity)
        np.testing.assert_array_equal(rollouts[name].benchmark_price, twap.benchmark_price)
        np.testing.assert_allclose(rollouts[name].executed, twap.quantity, rtol=1e-5)
    for key in ("sb3_minus_twap", "ours_minus_twap", "sb3_minus_ours"):
        for metric in ("shortfall", "pa"):
            diff = result["paired"][key][metric]
            assert diff["ci_low"] <= diff["value"] <= diff["ci_high"]
            assert diff["mde"] > 0
    for name in ("twap", "sb3", "ours"):  # the schedules: fractions held, never rising
        fractions = result["held"][name]
        assert len(fractions) == 3 and 1.0 >= fractions[0] >= fractions[1] >= fractions[2] >= 0


def test_adapter_hands_sb3_the_gymnasium_envs_final_observation():
    params = market_params(load_config(None, []), "sample:cn_1min")
    env = make_env(params)
    adapter = bench_peer.SB3VecEnv(ExecutionVectorEnv(env, params, 3))
    reference = ExecutionVectorEnv(env, params, 3)  # the same lanes, stepped directly
    single = ExecutionGymEnv(env, params)  # lane 0 of seed 7 is the single env seeded 7
    adapter.seed(7)
    obs = adapter.reset()
    np.testing.assert_array_equal(obs, reference.reset(seed=7)[0])
    assert_close(obs[0], single.reset(seed=7)[0])
    n_slots = params.data.num_slots
    for step in range(n_slots):
        obs, rewards, dones, infos = adapter.step(np.full((3, 1), 0.02, np.float32))  # SB3: [N, 1]
        ref_obs, ref_rewards, terminated, truncated, ref_info = reference.step(np.full(3, 0.02))
        single_obs, reward, ended, _, _ = single.step(0.02)
        np.testing.assert_array_equal(obs, ref_obs)
        np.testing.assert_array_equal(rewards, ref_rewards.astype(np.float32))
        np.testing.assert_array_equal(dones, terminated | truncated)
        assert rewards.dtype == np.float32 and rewards[0] == pytest.approx(reward, rel=1e-5)
        assert dones[0] == ended == (step == n_slots - 1)  # whole-day orders
        if not ended:
            assert_close(obs[0], single_obs)
            assert "terminal_observation" not in infos[0]
    assert dones.all()
    for i in range(3):
        np.testing.assert_array_equal(infos[i]["terminal_observation"], ref_info["final_obs"][i])
        assert infos[i]["TimeLimit.truncated"] is False
        assert infos[i]["order_pa"] == ref_info["order_pa"][i]
    assert_close(infos[0]["terminal_observation"], single_obs)  # the Gymnasium env's last
    assert not np.array_equal(obs[0], infos[0]["terminal_observation"])  # obs: auto-reset
    assert adapter.env_steps == 3 * n_slots


def test_adapter_refuses_a_vector_env_without_same_step_autoreset():
    import gymnasium
    from gymnasium.vector import AutoresetMode

    vec = gymnasium.vector.SyncVectorEnv(
        [lambda: gymnasium.make("CartPole-v1")], autoreset_mode=AutoresetMode.NEXT_STEP
    )
    with pytest.raises(ValueError, match="SAME_STEP"):
        bench_peer.SB3VecEnv(vec)


def test_sb3_policy_in_jax_acts_as_sb3s_predict():
    cfg, _ = bench_peer.run_config(None, TINY, 512, 0)
    params = market_params(cfg, "sample:cn_1min")
    model, normalizer, _ = bench_peer.train_sb3(cfg, params, 0)
    raw = normalizer.get_original_obs()  # the last raw observations of training, [N, D]
    expected, _ = model.predict(normalizer.normalize_obs(raw), deterministic=True)
    port = bench_peer.SB3Policy(cfg.network.activation)
    weights = bench_peer.sb3_policy_params(model, normalizer)
    got = np.array([port(weights, None, o, None, None) for o in raw])
    assert expected.shape == got.shape == (cfg.ppo.num_envs,)
    assert ((expected > 0) & (expected < 1)).any()  # not only clipped actions
    np.testing.assert_allclose(got, expected, atol=1e-5)
