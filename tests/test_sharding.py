"""PPO across devices (:mod:`serl_jax.rl.sharding`): on 4 CPU devices
(``--xla_force_host_platform_device_count=4``, in a child process since XLA reads the flag
once) seeds or episodes are split and training gives the one-device result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import jax
import pytest

from serl_jax.rl.sharding import plan_devices

# Runs in a child with 4 CPU devices; prints one JSON object.
CHILD = textwrap.dedent(
    """
    import dataclasses, json
    import jax, numpy as np
    from serl_jax.config import Config, NetworkConfig, RunConfig
    from serl_jax.envs.execution import EnvParams, ExecutionEnv
    from serl_jax.envs.market_data import trend_market
    from serl_jax.experiment import train_policy
    from serl_jax.rl.hybrid import HybridConfig
    from serl_jax.rl.ppo import PPOConfig
    from serl_jax.rl.sharding import plan_devices

    static = EnvParams(data=trend_market(n_episodes=6, n_slots=10), lookback=2)
    env = ExecutionEnv()

    def train(seeds, devices, **kw):
        cfg = Config(
            run=RunConfig(num_seeds=seeds, progress_chunk=2, devices=devices),
            ppo=PPOConfig(num_envs=8, num_steps=10, total_timesteps=8 * 10 * 3,
                          num_minibatches=2, group_size=4),
            network=NetworkConfig(hidden_sizes=(8,)),
        )
        return train_policy(cfg, env, static, static, progress=False, **kw)

    def gap(a, b):  # largest relative difference of parameters and curves
        pairs = list(zip(jax.tree.leaves(a.policy_params), jax.tree.leaves(b.policy_params)))
        pairs += [(a.curves[k], b.curves[k]) for k in a.curves]
        return max(
            float(np.nanmax(np.abs(np.asarray(x) - np.asarray(y)) / (1e-3 + np.abs(np.asarray(y)))))
            for x, y in pairs
        )

    out = {"visible": jax.device_count()}
    for name, seeds in (("seeds", 4), ("episodes", 1)):
        one, four = train(seeds, 1), train(seeds, 4)
        out[name] = {
            "devices": [one.devices, four.devices],
            "split": four.device_split,
            "gap": gap(four, one),
            "same_seed": one.selected_seed == four.selected_seed,
        }
    hybrid = train(2, 0, dynamic=(env, static), hybrid=HybridConfig(dynamic_envs=4))
    out["hybrid"] = [hybrid.devices, hybrid.device_split]
    auto = plan_devices(4, 8)
    out["auto"] = [auto.n_devices, auto.split]
    try:
        train(4, 3)
    except ValueError as err:
        out["error"] = str(err)
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def four_devices():
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4",
        "JAX_PLATFORMS": "cpu",
    }
    done = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_seeds_split_over_four_devices_give_the_one_device_result(four_devices):
    r = four_devices["seeds"]
    assert four_devices["visible"] == 4
    assert r["devices"] == [1, 4] and r["split"] == "seeds"
    assert r["gap"] < 1e-4  # independent runs: the same arithmetic on another device
    assert r["same_seed"]


def test_episodes_split_over_four_devices_give_the_one_device_result(four_devices):
    r = four_devices["episodes"]
    assert r["devices"] == [1, 4] and r["split"] == "episodes"
    # cross-device sums change the summation order only
    assert r["gap"] < 1e-3
    assert r["same_seed"]


def test_the_hybrid_trainer_splits_seeds_only(four_devices):
    # 2 seeds on 4 visible devices: 2 devices; its episodes (two markets) are not split
    assert four_devices["hybrid"] == [2, "seeds"]
    assert four_devices["auto"] == [4, "seeds"]


def test_a_device_count_that_divides_nothing_is_a_clear_error(four_devices):
    assert four_devices["error"] == (
        "run.devices=3: divides neither run.num_seeds=4 nor the 8 episodes"
    )


def test_one_device_plan_and_errors_here():
    plan = plan_devices(2, 16, devices=jax.devices()[:1])
    assert (plan.n_devices, plan.split, plan.mesh) == (1, "none", None)
    with pytest.raises(ValueError, match=r"^run.devices=-1: expected 0 \(all\) to"):
        plan_devices(2, 16, requested=-1)
    with pytest.raises(ValueError, match="the visible devices"):
        plan_devices(2, 16, requested=jax.device_count() + 1)
