"""The discrete action set (``network.action_multiples``, OPD-style): the categorical over
multiples of the prior's child order by hand, its network, config, checkpoint and sandbox
contract, and PPO learning with it on a known trend."""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from serl_jax.baselines import twap_policy
from serl_jax.config import ConfigError, load_config
from serl_jax.envs.execution import EnvParams, ExecutionEnv, twap_action_prior
from serl_jax.envs.market_data import MarketData
from serl_jax.evaluation import rollout
from serl_jax.metrics import price_advantage
from serl_jax.rl.checkpoint import CheckpointError, load_policy, save_policy
from serl_jax.rl.distributions import PriorMultiples, action_distribution
from serl_jax.rl.networks import declared_action_multiples, make_network, network_policy
from serl_jax.rl.normalization import RunningStats
from serl_jax.rl.policy import PPOPolicyParams, make_ppo_policy
from serl_jax.rl.ppo import Batch, PPOConfig, Transition, make_train, ppo_loss

MULTIPLES = (0.0, 0.5, 1.0, 1.5, 2.0)


def test_prior_multiples_by_hand():
    logits = jnp.array([[0.0, 1.0, 2.0, -1.0, 0.5], [3.0, 0.0, 0.0, 0.0, 0.0]])
    prior_logit = jnp.array([np.log(0.1 / 0.9), np.log(0.6 / 0.4)])  # prior actions 0.1, 0.6
    dist = action_distribution(logits, prior_logit, MULTIPLES)
    assert isinstance(dist, PriorMultiples)
    p = np.exp(np.asarray(logits)) / np.exp(np.asarray(logits)).sum(-1, keepdims=True)
    k = jnp.array([2.0, 4.0])
    np.testing.assert_allclose(dist.log_prob(k), np.log([p[0, 2], p[1, 4]]), rtol=1e-5)
    np.testing.assert_allclose(dist.entropy(), stats.entropy(p, axis=-1), rtol=1e-5)
    # m_k times the prior action, clipped to the inventory: 1.0 x 0.1, and 2 x 0.6 -> 1
    np.testing.assert_allclose(dist.action(k), [0.1, 1.0], rtol=1e-5)
    # the mode: multiple 1 (index 2) on the first row, 0 (index 0) on the second
    np.testing.assert_allclose(dist.deterministic_action(), [0.1, 0.0], atol=1e-6)
    target = PriorMultiples.from_logits(logits[::-1], MULTIPLES, prior_logit)
    q = p[::-1]
    np.testing.assert_allclose(
        dist.cross_entropy(target), -(q * np.log(p)).sum(-1), rtol=1e-5
    )  # H(q, p); equals the entropy against itself
    np.testing.assert_allclose(dist.cross_entropy(dist), dist.entropy(), rtol=1e-6)
    draws = jax.vmap(dist.sample)(jax.random.split(jax.random.key(0), 20000))
    assert draws.dtype == jnp.float32
    freq = np.stack([(np.asarray(draws) == i).mean(0) for i in range(5)], -1)
    np.testing.assert_allclose(freq, p, atol=0.012)


def test_the_untrained_discrete_policy_is_the_prior(cn_market):
    """Probability 1/2 on the multiple 1, so the evaluation action of the untrained
    network is the TWAP prior's on real observations."""
    env = ExecutionEnv()
    params = EnvParams(data=MarketData.from_episodes(cn_market.val))
    obs, _ = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(jax.random.key(0), 16), params)
    network = make_network((16,), "tanh", MULTIPLES)
    assert declared_action_multiples(network) == MULTIPLES
    net_params = network.init(jax.random.key(1), obs)
    outputs, _ = network.apply(net_params, obs)
    assert outputs.shape == (16, 5)
    np.testing.assert_allclose(jax.nn.softmax(outputs)[:, 2], 0.5, atol=0.01)
    prior = twap_action_prior(obs, 20.0)
    dist = network_policy(network, outputs, prior)
    np.testing.assert_allclose(dist.deterministic_action(), jax.nn.sigmoid(prior), rtol=1e-6)
    # without the field: the logit-normal, two outputs
    assert declared_action_multiples(make_network((16,))) is None


def test_ppo_loss_distils_a_categorical_teacher():
    """The supervision term is the mean cross-entropy under the teacher's categorical."""
    rng = np.random.default_rng(0)
    rows, obs_size = 12, 4
    network = make_network((8,), "tanh", MULTIPLES)
    params = network.init(jax.random.key(0), jnp.zeros(obs_size))

    def f32(*shape):
        return jnp.asarray(rng.normal(size=shape), jnp.float32)

    obs, prior = f32(rows, obs_size), f32(rows)
    teacher = PriorMultiples.from_logits(f32(rows, 5), MULTIPLES, prior)
    traj = Transition(
        done=jnp.zeros(rows, bool), action=jnp.asarray(rng.integers(0, 5, rows), jnp.float32),
        value=f32(rows), reward=f32(rows), log_prob=f32(rows) - 1.0, obs=obs,
        prior_logit=prior, order_pa=f32(rows),
    )  # fmt: skip
    batch = Batch(traj, f32(rows), f32(rows))
    config = PPOConfig(
        num_envs=4,
        num_steps=3,
        total_timesteps=12,
        num_minibatches=1,
        distill_coef=2.0,
        group_size=1,
    )
    with_teacher, stats_t = ppo_loss(
        config, network, params, batch._replace(traj=traj._replace(teacher=teacher))
    )
    plain, _ = ppo_loss(config, network, params, batch)
    logits, _ = network.apply(params, obs)
    log_p = np.asarray(jax.nn.log_softmax(logits))
    q = np.asarray(jax.nn.softmax(teacher.logits))
    expected = -(q * log_p).sum(-1).mean()
    np.testing.assert_allclose(stats_t["distill_loss"], expected, rtol=1e-5)
    np.testing.assert_allclose(with_teacher - plain, 2.0 * expected, rtol=1e-4)


def test_config_takes_and_refuses_action_sets():
    cfg = load_config(None, ["loop.llm=none", "network.action_multiples=[0, 0.5, 1, 2]"])
    assert cfg.network.action_multiples == (0.0, 0.5, 1.0, 2.0)
    assert declared_action_multiples(cfg.network.build()) == (0.0, 0.5, 1.0, 2.0)
    assert load_config(None, []).network.action_multiples == ()
    bad = {
        "[1]": "2 to 64 distinct",
        "[-1, 1]": "2 to 64 distinct",
        "[1, 1]": "2 to 64 distinct",
        "[0, x]": "action_multiples\\[1\\]: expected a number",
    }
    for value, message in bad.items():
        with pytest.raises(ConfigError, match=message):
            load_config(None, ["loop.llm=none", f"network.action_multiples={value}"])
    with pytest.raises(ConfigError, match="action_prior to twap or vwap"):
        load_config(
            None, ["loop.llm=none", "network.action_prior=none", "network.action_multiples=[0, 1]"]
        )
    with pytest.raises(ConfigError, match="network program declares its own"):
        load_config(None, ["loop.llm=offline", "network.action_multiples=[0, 1]"])


def test_a_checkpoint_keeps_its_action_set(tmp_path):
    cfg = load_config(None, ["loop.llm=none", "network.action_multiples=[0, 1, 3]"])
    network = cfg.network.build()
    params = network.init(jax.random.key(0), jnp.zeros(7))
    params = jax.tree.map(lambda x: x + 0.01, params)  # not the initial values
    save_policy(
        tmp_path, PPOPolicyParams(params, RunningStats.create(7)),
        {"config": cfg.to_dict(), "obs_size": 7},
    )  # fmt: skip
    loaded, restored, _ = load_policy(tmp_path)
    assert declared_action_multiples(loaded) == (0.0, 1.0, 3.0)
    obs = jnp.linspace(-1.0, 1.0, 14).reshape(2, 7)
    np.testing.assert_array_equal(
        loaded.apply(restored.params, obs)[0], network.apply(params, obs)[0]
    )


def test_a_checkpoint_with_designed_code_needs_the_validator(tmp_path):
    """An SE-RL candidate's checkpoint holds its network code: serl_jax.rl never imports
    llm, so the caller passes the validator's loader, and without it loading fails
    with a message that names it."""
    from llm.validate import load_validated

    code = NETWORK_WITH_ACTION_SET.replace("WIDTH", "3")
    network = load_validated(code, "network")
    params = jax.tree.map(lambda x: x + 0.01, network.init(jax.random.key(0), jnp.zeros(7)))
    cfg = load_config(None, ["loop.llm=none"])
    meta = {"config": cfg.to_dict(), "obs_size": 7, "network_code": code}
    save_policy(tmp_path, PPOPolicyParams(params, RunningStats.create(7)), meta)
    with pytest.raises(CheckpointError, match="define=llm.validate.load_validated"):
        load_policy(tmp_path)
    loaded, restored, _ = load_policy(tmp_path, define=load_validated)
    assert declared_action_multiples(loaded) == (0.0, 1.0, 2.0)
    obs = jnp.linspace(-1.0, 1.0, 14).reshape(2, 7)
    np.testing.assert_array_equal(
        loaded.apply(restored.params, obs)[0], network.apply(params, obs)[0]
    )
    meta["network_code"] = "import os\n" + code
    save_policy(tmp_path, PPOPolicyParams(params, RunningStats.create(7)), meta)
    with pytest.raises(CheckpointError, match="network_code refused"):
        load_policy(tmp_path, define=load_validated)


NETWORK_WITH_ACTION_SET = """
import flax.linen as nn
import jax.numpy as jnp


class Network(nn.Module):
    action_multiples: tuple = (0.0, 1.0, 2.0)

    @nn.compact
    def __call__(self, obs):
        hidden = nn.tanh(nn.Dense(16)(obs))
        policy = nn.Dense(WIDTH)(hidden)
        value = nn.Dense(1)(hidden)
        return policy, value[..., 0]
"""


@pytest.mark.slow
def test_the_sandbox_checks_a_declared_action_set():
    """A network program that declares three multiples must return three logits."""
    from llm.prompts import MICRO_PROMPTS
    from llm.validate import validate

    ok = validate(NETWORK_WITH_ACTION_SET.replace("WIDTH", "3"), "network")
    assert ok.ok, ok.reason
    assert "discrete action set [0.0, 1.0, 2.0]" in ok.reason
    wrong = validate(NETWORK_WITH_ACTION_SET.replace("WIDTH", "2"), "network")
    assert not wrong.ok and wrong.stage == "runtime"
    assert re.search(r"returned policy \((\d+), 2\).*expected \(\1, 3\)", wrong.reason), (
        wrong.reason
    )
    # The head that LLM4Agent's contract tells the designer to write.
    head = "nn.Dense(len(self.action_multiples), bias_init=nn.initializers.zeros)"
    assert head in MICRO_PROMPTS["network"].contract
    as_told = validate(NETWORK_WITH_ACTION_SET.replace("nn.Dense(WIDTH)", head), "network")
    assert as_told.ok, as_told.reason


@pytest.mark.slow
def test_ppo_learns_to_wait_with_a_discrete_action_set(make_trend_market):
    """On a steady uptrend (+5 bps/min) a seller gains by waiting: with the multiples
    {0, 0.5, 1, 1.5, 2} of the anchored TWAP prior's child order (k = 20, the default),
    PPO learns to pick 0 early and sell late (+40 bps over TWAP after 30 updates when
    this test was written; it needs +15 and more than half the order held halfway)."""
    data = make_trend_market(n_episodes=8, n_slots=30, drift_per_minute=5e-4)
    params = EnvParams(data=data, lookback=2, order_fraction=0.05)
    env = ExecutionEnv()
    config = PPOConfig(
        num_envs=64, num_steps=30, total_timesteps=64 * 30 * 30, num_minibatches=4, lr=3e-3
    )
    network = make_network((32, 32), "tanh", MULTIPLES)
    prior = functools.partial(twap_action_prior, anchor_steps=20.0)
    out = jax.jit(make_train(config, env, params, network, prior))(jax.random.key(0))
    runner = out["runner_state"]
    policy = make_ppo_policy(network, config.normalize_obs, action_prior=prior)
    key = jax.random.key(1)
    trained = PPOPolicyParams(runner.train_state.params, runner.obs_stats)
    learned = rollout(env, policy, trained, params, key)
    twap = rollout(env, twap_policy, None, params, key)
    learned_pa = price_advantage(learned.outcomes(1.0)).mean()
    twap_pa = price_advantage(twap.outcomes(1.0)).mean()
    assert learned_pa > twap_pa + 15.0, (learned_pa, twap_pa)
    assert float(np.mean(learned.remaining[:, 15])) > 0.5
