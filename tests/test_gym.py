"""The Gymnasium adapters (serl_jax.gym) against the gymnax environments they wrap: the
same seed and actions give the same observations, rewards and ends as ``env.reset`` /
``env.step`` driven by hand with the documented key stream; the vector env's lanes are
single envs; gymnasium's own checker; and bad input fails with one-line errors.

Floats are compared up to float32 rounding: the adapters compile the key split and the
step into one XLA program, which may fuse an operation differently (one ulp) from the
separately compiled ``env.step``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gymnasium
import jax
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import serl_jax  # noqa: F401 - registers the ids
from serl_jax.config import load_config
from serl_jax.data import sample_path
from serl_jax.envs.execution import ExecutionEnv
from serl_jax.envs.market_data import MarketData
from serl_jax.envs.propagator import PropagatorEnvParams, PropagatorExecutionEnv
from serl_jax.experiment import load_splits
from serl_jax.gym import ExecutionGymEnv, ExecutionVectorEnv

TINY = str(Path(__file__).resolve().parents[1] / "configs" / "tiny.yaml")
IDS = {"static": "serl_jax/Execution-v0", "dynamic": "serl_jax/DynamicExecution-v0"}
STEPS = 245  # the A-share sample's 240-minute day, and 5 minutes into the next order


def assert_close(actual, expected):
    """Equal up to float32 rounding (module docstring)."""
    np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def references():
    """The gymnax environments built by hand from the tiny preset on the A-share sample's
    training days (static, and the propagator market, the default dynamic one)."""
    cfg = load_config(TINY)
    splits = load_splits(cfg, "sample:cn_1min")
    static = cfg.env_params(MarketData.from_episodes(splits.train))
    dynamic = PropagatorEnvParams.from_static(static, splits.stats, cfg.impact.params())
    return {
        "static": (ExecutionEnv(), static),
        "dynamic": (PropagatorExecutionEnv(), dynamic),
    }


@pytest.fixture(scope="module")
def envs():
    """``gymnasium.make`` of both ids with the tiny preset."""
    return {market: gymnasium.make(i, config=TINY) for market, i in IDS.items()}


def gymnax_rollout(env, params, seed: int, actions: np.ndarray):
    """The documented key stream by hand: ``key = jax.random.key(seed)``, one split for
    the reset and one per step. Returns per step the gymnax ``step``'s (auto-reset)
    observation, its ``final_observation``, reward, ``terminated`` and ``order_pa``, and
    the first observation."""
    key, sub = jax.random.split(jax.random.key(seed))
    first, state = env.reset(sub, params)
    out = {k: [] for k in ("obs", "final", "reward", "terminated", "order_pa")}
    for action in actions:
        key, sub = jax.random.split(key)
        obs, state, reward, terminated, _, info = env.step(sub, state, action, params)
        for name, value in zip(
            out,
            (obs, info["final_observation"], reward, terminated, info["order_pa"]),
            strict=True,
        ):
            out[name].append(np.asarray(value))
    return np.asarray(first), {k: np.stack(v) for k, v in out.items()}


def test_import_registers_by_name_without_building_anything():
    code = (
        "import sys, gymnasium, serl_jax\n"
        "spec = gymnasium.spec('serl_jax/Execution-v0')\n"
        "assert spec.entry_point == 'serl_jax.gym:gym_env', spec\n"
        "assert gymnasium.spec('serl_jax/DynamicExecution-v0').kwargs == {'market': 'dynamic'}\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'flax', 'gymnax')"
        " or m.startswith('serl_jax.'))\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_make_without_arguments_replays_the_shipped_sample():
    env = gymnasium.make("serl_jax/Execution-v0")
    cfg = load_config(None)  # the built-in defaults: configs/default.yaml
    expected = load_splits(cfg, "sample:cn_1min").train
    unwrapped = env.unwrapped
    assert isinstance(unwrapped, ExecutionGymEnv)
    np.testing.assert_array_equal(np.asarray(unwrapped.env_params.data.price), expected.price)
    assert unwrapped.env_params.child_quantity == cfg.env["child_quantity"]
    size = ExecutionEnv().observation_size(unwrapped.env_params)
    assert env.observation_space == gymnasium.spaces.Box(-np.inf, np.inf, (size,), np.float32)
    assert env.action_space == gymnasium.spaces.Box(0.0, 1.0, (), np.float32)
    obs, info = env.reset(seed=0)
    assert obs.dtype == np.float32 and obs.shape == (size,) and info == {}


def test_make_arguments_pick_data_split_and_config():
    env = gymnasium.make(
        "serl_jax/Execution-v0",
        data=str(sample_path("us_1min")),  # a folder, as --data takes it
        split="test",
        config=TINY,
        overrides=["env.side=-1", "env.lookback=2"],
    ).unwrapped
    expected = load_splits(load_config(TINY), "sample:us_1min").test
    np.testing.assert_array_equal(np.asarray(env.env_params.data.volume), expected.volume)
    assert float(env.env_params.side) == -1.0 and env.env_params.lookback == 2
    dynamic = gymnasium.make(IDS["dynamic"], data="sample:us_1min", config=TINY).unwrapped
    assert isinstance(dynamic.gymnax_env, PropagatorExecutionEnv)
    assert isinstance(dynamic.env_params, PropagatorEnvParams)


@pytest.mark.parametrize("market", ["static", "dynamic"])
def test_single_env_replays_gymnax_step_for_step(market, envs, references):
    env, (gymnax_env, params) = envs[market], references[market]
    actions = np.random.default_rng(0).uniform(0.0, 0.1, STEPS).astype(np.float32)
    first, ref = gymnax_rollout(gymnax_env, params, 7, actions)
    end = int(np.argmax(ref["terminated"]))  # the order's last minute
    assert end == 239 and ref["terminated"].sum() == 1

    obs, _ = env.reset(seed=7)
    assert_close(obs, first)
    for t in range(end + 1):
        obs, reward, terminated, truncated, info = env.step(actions[t])
        assert type(reward) is float and type(terminated) is bool and truncated is False
        assert_close(obs, ref["final"][t])  # the order's own, not a reset
        assert_close(reward, ref["reward"][t])
        assert terminated == bool(ref["terminated"][t])
    assert_close(info["order_pa"], ref["order_pa"][end])
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0.1)

    # reset() without a seed continues the stream: the split after the last step's
    key = jax.random.key(7)
    for _ in range(end + 2):
        key, sub = jax.random.split(key)
    expected, _ = gymnax_env.reset(jax.random.split(key)[1], params)
    assert_close(env.reset()[0], expected)


# The observation space is the gymnax environment's, unbounded: the checker warns about it.
@pytest.mark.filterwarnings("ignore:.*Box observation space .*infinity")
@pytest.mark.parametrize("market", ["static", "dynamic"])
def test_check_env_passes(market, envs):
    check_env(envs[market].unwrapped)


def single_rollout(env, seed: int, actions: np.ndarray):
    """One order through the gymnasium env: its first observation, then per step the
    observation, reward and ``terminated`` until the order ends."""
    first, _ = env.reset(seed=seed)
    steps = []
    for action in actions:
        obs, reward, terminated, _, _ = env.step(action)
        steps.append((obs, reward, terminated))
        if terminated:
            return first, steps
    raise AssertionError("the order did not end")


def test_vector_env_lanes_are_single_envs_then_gymnax_auto_reset(envs, references):
    gymnax_env, params = references["static"]
    n, seed = 3, 11
    vec = gymnasium.make_vec(IDS["static"], num_envs=n, config=TINY)
    assert isinstance(vec, ExecutionVectorEnv) and vec.num_envs == n
    assert vec.metadata["autoreset_mode"] == gymnasium.vector.AutoresetMode.SAME_STEP
    assert vec.single_observation_space == envs["static"].observation_space
    assert vec.observation_space.shape == (n, *vec.single_observation_space.shape)
    actions = np.random.default_rng(1).uniform(0.0, 0.1, (STEPS, n)).astype(np.float32)
    # lane i is the single env seeded seed + i; after its order, gymnax's auto-reset
    singles = [single_rollout(envs["static"], seed + i, actions[:, i]) for i in range(n)]
    refs = [gymnax_rollout(gymnax_env, params, seed + i, actions[:, i])[1] for i in range(n)]

    obs, _ = vec.reset(seed=seed)
    assert_close(obs, np.stack([first for first, _ in singles]))
    for t in range(STEPS):
        obs, rewards, terminated, truncated, info = vec.step(actions[t])
        assert obs.dtype == np.float32 and rewards.dtype == np.float64
        assert not truncated.any() and info["_exec_qty"].all()
        for i, (_, steps) in enumerate(singles):
            if t < len(steps):
                single_obs, reward, ended = steps[t]
                assert_close(rewards[i], reward)
                assert terminated[i] == ended
                assert_close(info["final_obs"][i] if ended else obs[i], single_obs)
            else:  # the next order, drawn by the auto-reset from the step's key
                assert_close(rewards[i], refs[i]["reward"][t])
                assert not terminated[i]
            assert_close(obs[i], refs[i]["obs"][t])
        if terminated.any():
            assert terminated.all() and t == 239  # whole-day orders end together
            np.testing.assert_array_equal(info["final_info"]["order_pa"], info["order_pa"])
        else:
            assert "final_obs" not in info

    # the same lanes from a list of seeds
    listed, _ = vec.reset(seed=[seed + i for i in range(n)])
    assert_close(listed, np.stack([first for first, _ in singles]))


@pytest.mark.parametrize(
    ("action", "message"),
    [
        (float("nan"), r"^action = nan is NaN"),
        (1.5, r"^action = 1.5 is outside \[0, 1\]"),
        (-0.01, r"^action = -0.01 is outside \[0, 1\]"),
        (np.array([0.1, 0.2]), r"^action: expected shape \(\), got \(2,\)"),
        ("half", r"^action: expected numbers in \[0, 1\]"),
    ],
)
def test_bad_actions_raise_one_line_value_errors(action, message, envs):
    env = envs["static"]
    env.reset(seed=0)
    with pytest.raises(ValueError, match=message) as err:
        env.step(action)
    assert "\n" not in str(err.value)


def test_vector_env_bad_actions_and_seeds_name_what_is_wrong():
    vec = gymnasium.make_vec(IDS["static"], num_envs=2, config=TINY)
    with pytest.raises(RuntimeError, match="reset"):
        vec.step(np.zeros(2, np.float32))
    vec.reset(seed=0)
    with pytest.raises(ValueError, match=r"^actions\[1\] = 2 is outside"):
        vec.step(np.array([0.5, 2.0]))
    with pytest.raises(ValueError, match=r"^actions\[0\] = nan is NaN"):
        vec.step(np.array([np.nan, 0.5]))
    with pytest.raises(ValueError, match=r"expected shape \(2,\), got \(3,\)"):
        vec.step(np.zeros(3))
    with pytest.raises(ValueError, match=r"expected 2 seeds, got 3"):
        vec.reset(seed=[1, 2, 3])
    with pytest.raises(ValueError, match=r"seed must be in \[0, 2\*\*32\)"):
        vec.reset(seed=2**32 - 1)  # the second lane's seed would overflow


@pytest.mark.parametrize("seed", [-1, 2**32, 1.5, True])
def test_bad_seeds_raise(seed, envs):
    with pytest.raises(ValueError, match="seed must be"):
        envs["static"].unwrapped.reset(seed=seed)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"split": "validation"}, "split must be one of"),
        ({"market": "lob"}, "market must be one of"),
        ({"overrides": "env.side=-1"}, "overrides: expected a list"),
        ({"overrides": ["env.sidee=-1"]}, "sidee"),
        ({"data": "sample:nowhere"}, "unknown sample market"),
    ],
)
def test_bad_make_arguments_raise_value_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        gymnasium.make("serl_jax/Execution-v0", config=TINY, **kwargs)
