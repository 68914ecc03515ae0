"""PPO across devices (:mod:`serl_jax.rl.sharding`): on 4 CPU devices
(``--xla_force_host_platform_device_count=4``, in a child process since XLA reads the flag
once) seeds or episodes are split and training gives the one-device result; so it does
across two processes (``run.distributed``: ``jax.distributed`` with CPU collectives, two
local child processes of one CPU device each)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

from serl_jax import train
from serl_jax.config import Config, NetworkConfig, RunConfig
from serl_jax.envs.execution import EnvParams, ExecutionEnv
from serl_jax.envs.market_data import trend_market
from serl_jax.experiment import train_policy
from serl_jax.rl.ppo import PPOConfig
from serl_jax.rl.sharding import plan_devices

# Runs in a child with 4 CPU devices; prints one JSON object.
CHILD = textwrap.dedent(
    """
    import dataclasses, json
    import jax, numpy as np
    from serl_jax.config import Config, NetworkConfig, RunConfig
    from serl_jax.envs.execution import EnvParams, ExecutionEnv
    from serl_jax.envs.market_data import trend_market
    from serl_jax.experiment import train_candidates, train_policy
    from serl_jax.rl.hybrid import HybridConfig
    from serl_jax.rl.networks import make_network
    from serl_jax.rl.ppo import PPOConfig
    from serl_jax.rl.sharding import plan_devices

    static = EnvParams(data=trend_market(n_episodes=6, n_slots=10), lookback=2)
    env = ExecutionEnv()

    def config(seeds, devices):
        return Config(
            run=RunConfig(num_seeds=seeds, progress_chunk=2, devices=devices),
            ppo=PPOConfig(num_envs=8, num_steps=10, total_timesteps=8 * 10 * 3,
                          num_minibatches=2, group_size=4),
            network=NetworkConfig(hidden_sizes=(8,)),
        )

    def train(seeds, devices, **kw):
        return train_policy(config(seeds, devices), env, static, static, progress=False, **kw)

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
    # Two networks behind a switch: in turns on one device, one vmap over a 4-device mesh.
    networks = [make_network((8,)), make_network((4, 4), "relu")]
    pair = {
        n: train_candidates(config(2, n), [env.reward_fn] * 2, static, static, networks=networks)
        for n in (1, 4)
    }
    out["switch"] = {
        "devices": [pair[1][0].devices, pair[4][0].devices],
        "gap": max(gap(four, one) for one, four in zip(pair[1], pair[4])),
        "same_seed": all(a.selected_seed == b.selected_seed for a, b in zip(pair[1], pair[4])),
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


# One of two processes of a distributed run (argv: process id, coordinator port); prints
# the trained parameters and curves as one JSON object.
DISTRIBUTED_CHILD = textwrap.dedent(
    """
    import json, sys
    import jax, numpy as np
    from serl_jax.config import Config, NetworkConfig, RunConfig
    from serl_jax.envs.execution import EnvParams, ExecutionEnv
    from serl_jax.envs.market_data import trend_market
    from serl_jax.experiment import train_policy
    from serl_jax.rl.ppo import PPOConfig
    from serl_jax.rl.sharding import start_processes

    run = RunConfig(progress_chunk=2, distributed=True, num_processes=2,
                    process_id=int(sys.argv[1]), coordinator_address=f"127.0.0.1:{sys.argv[2]}")
    start_processes(run.coordinator_address, run.num_processes, run.process_id)
    static = EnvParams(data=trend_market(n_episodes=6, n_slots=10), lookback=2)
    out = {"devices": [jax.device_count(), jax.local_device_count()]}
    for name, seeds in (("seeds", 2), ("episodes", 1)):
        cfg = Config(
            run=RunConfig(**{**run.__dict__, "num_seeds": seeds}),
            ppo=PPOConfig(num_envs=8, num_steps=10, total_timesteps=8 * 10 * 3,
                          num_minibatches=2, group_size=4),
            network=NetworkConfig(hidden_sizes=(8,)),
        )
        trained = train_policy(cfg, ExecutionEnv(), static, static, progress=False)
        out[name] = {
            "split": [trained.devices, trained.device_split],
            "params": [np.asarray(x).tolist() for x in jax.tree.leaves(trained.policy_params)],
            "curves": {k: np.asarray(v).tolist() for k, v in trained.curves.items()},
            "seed": trained.selected_seed,
        }
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def two_processes():
    with socket.socket() as sock:  # a free port for the coordinator
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    children = [
        subprocess.Popen(
            [sys.executable, "-c", DISTRIBUTED_CHILD, str(i), port],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for i in range(2)
    ]
    outputs = [child.communicate(timeout=600) for child in children]
    for child, (_, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, err[-3000:]
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]


@pytest.mark.parametrize(
    ("name", "split", "tolerance"), [("seeds", "seeds", 1e-4), ("episodes", "episodes", 1e-3)]
)
def test_two_processes_give_the_one_process_result(two_processes, name, split, tolerance):
    static = EnvParams(data=trend_market(n_episodes=6, n_slots=10), lookback=2)
    cfg = Config(
        run=RunConfig(num_seeds=2 if name == "seeds" else 1, progress_chunk=2, devices=1),
        ppo=PPOConfig(
            num_envs=8, num_steps=10, total_timesteps=8 * 10 * 3, num_minibatches=2, group_size=4
        ),  # fmt: skip
        network=NetworkConfig(hidden_sizes=(8,)),
    )
    one = train_policy(cfg, ExecutionEnv(), static, static, progress=False)
    expected = [np.asarray(x) for x in jax.tree.leaves(one.policy_params)]
    expected += [np.asarray(one.curves[k]) for k in sorted(one.curves)]
    for process in two_processes:  # each process holds the whole result
        assert process["devices"] == [2, 1]  # two devices in all, one of its own
        r = process[name]
        assert r["split"] == [2, split] and r["seed"] == one.selected_seed
        got = [np.asarray(x) for x in r["params"]]
        got += [np.asarray(r["curves"][k]) for k in sorted(r["curves"])]
        for x, y in zip(got, expected, strict=True):
            assert x.shape == y.shape
            gap = np.nanmax(np.abs(x - y) / (1e-3 + np.abs(y))) if y.size else 0.0
            assert gap < tolerance


def test_distributed_runs_are_plain_ppo_only(capsys):
    assert train.main(["--llm", "offline", "run.distributed=true"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: run.distributed: only plain PPO") and err.count("\n") == 1


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


def test_networks_behind_a_switch_over_four_devices_give_the_one_device_result(four_devices):
    """On one device candidates with different networks take turns; over a mesh their
    lanes stay in one vmap (every lane computes both networks): the same training."""
    r = four_devices["switch"]
    assert r["devices"] == [1, 4]
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
