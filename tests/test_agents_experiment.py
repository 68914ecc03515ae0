"""Multi-agent evaluation and the ``--agents N`` CLI: one agent's evaluation rollout is the
single-agent dynamic rollout; team outcomes pool the agents' fills; a tiny MAPPO team run
writes per-agent and team metrics; bad multi-agent input exits 2 before any run folder.
"""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax.serialization import msgpack_restore

from serl_jax import train
from serl_jax.baselines import twap_policy
from serl_jax.envs.dynamic import DynamicEnvParams, DynamicExecutionEnv
from serl_jax.envs.execution import EnvParams
from serl_jax.envs.market_data import MarketData
from serl_jax.envs.multi_agent import MultiAgentExecutionEnv
from serl_jax.evaluation import multi_agent_rollout, per_agent_policy, rollout
from serl_jax.market.params import load_market_params
from serl_jax.metrics import price_advantage

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs" / "tiny.yaml")
MARKET_YAML = ROOT / "configs" / "market" / "cn_1min.yaml"
KEY = jax.random.PRNGKey(0)


@pytest.fixture(scope="module")
def params(cn_market):
    data = jax.tree.map(
        lambda x: x[np.asarray([0, 10, 20])], MarketData.from_episodes(cn_market.test)
    )
    market = load_market_params(MARKET_YAML)
    return DynamicEnvParams.from_static(EnvParams(data=data), cn_market.stats, market)


def test_one_agent_evaluation_is_the_single_agent_rollout(params):
    """TWAP for one agent: every per-order total and per-minute fill equals
    :func:`serl_jax.evaluation.rollout` in the single-agent dynamic env (same key)."""
    single = rollout(DynamicExecutionEnv(), twap_policy, None, params, KEY)
    env = MultiAgentExecutionEnv(1)
    multi = multi_agent_rollout(env, per_agent_policy(env, twap_policy), None, params, KEY)
    for name in ("quantity", "executed", "notional", "replayed_notional", "benchmark_price"):
        np.testing.assert_array_equal(
            np.asarray(getattr(multi, name))[:, 0], np.asarray(getattr(single, name)), name
        )
    np.testing.assert_array_equal(np.asarray(multi.exec_qty)[:, 0], np.asarray(single.exec_qty))
    np.testing.assert_array_equal(np.asarray(multi.reward)[:, 0], np.asarray(single.reward))


def test_team_outcomes_pool_the_agents_fills(params):
    """Three TWAP agents sharing one parent order: the team's order is the sum of the
    agents' (shares, fills, notional) at their common benchmark, and its PA the pooled
    average price's; independent agents with different sides are not a team."""
    env = MultiAgentExecutionEnv(3, scenario="team")
    result = jax.device_get(
        multi_agent_rollout(env, per_agent_policy(env, twap_policy), None, params, KEY)
    )
    team = result.team_outcomes()
    notional = np.asarray(result.notional, np.float64)
    executed = np.asarray(result.executed, np.float64)
    np.testing.assert_allclose(team.quantity, np.asarray(result.quantity, np.float64).sum(1))
    by_hand = (
        notional.sum(1) / executed.sum(1) / np.asarray(result.benchmark_price)[:, 0] - 1
    ) * 1e4
    np.testing.assert_allclose(price_advantage(team), by_hand, rtol=1e-9)
    mixed = result._replace(side=np.asarray([[1.0, -1.0, 1.0]] * 3))
    with pytest.raises(ValueError, match="not a team"):
        mixed.team_outcomes()


def test_recorded_reward_terms_are_each_agents_reward(params):
    """Two staggered TWAP agents with a two-term reward: the recorder gives every agent's
    terms per minute; their sum ("total") is the reward the environment paid, including
    the zeros outside an agent's window, and the pooled orders are day-major."""

    def reward(prev, action, nxt, p):
        return {"fill": nxt.last_qty / prev.quantity, "size": 0.5 * action}

    def profile(key, agent_index, n_agents, p):
        half = p.data.num_slots // 2
        return {
            "side": jnp.float32(1.0),
            "quantity": jnp.float32(1.0),
            "start": (agent_index * half).astype(jnp.int32),
            "window_len": jnp.int32(half),
            "urgency": jnp.float32(0.0),
        }

    env = MultiAgentExecutionEnv(2, reward_fn=reward, profile_fn=profile)
    result = jax.device_get(
        multi_agent_rollout(
            env, per_agent_policy(env, twap_policy), None, params, KEY, record=env.reward_terms
        )
    )
    terms = result.recorded
    assert set(terms) == {"fill", "size", "total"}
    assert terms["total"].shape == result.reward.shape == (3, 2, params.data.num_slots)
    np.testing.assert_allclose(terms["total"], result.reward, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(terms["total"], terms["fill"] + terms["size"], rtol=1e-6)
    half = params.data.num_slots // 2
    # agent 1 waits through the morning, agent 0 is done in the afternoon: both earn 0
    assert not terms["size"][:, 1, :half].any() and not terms["size"][:, 0, half:].any()
    assert (terms["fill"][:, 0, :half].sum(-1) > 0.5).all()  # TWAP fills its order
    pooled = result.pooled_outcomes()
    np.testing.assert_array_equal(pooled.quantity, np.asarray(result.quantity).reshape(-1))
    np.testing.assert_array_equal(pooled.executed[1::2], np.asarray(result.executed)[:, 1])


@pytest.mark.slow
def test_agents_cli_writes_per_agent_and_team_metrics(tmp_path, capsys):
    """``--llm none --agents 2 --marl mappo --scenario team --comm --env hybrid`` on the US
    sample (tiny): metrics.json holds 2 agent entries (TWAP, TWAP-POV and PPO-mappo-comm,
    each with its impact), the team's metrics and the spread; the table has a row per
    agent and team; the checkpoint keeps the message module's parameters; the steps of
    both markets (``ppo.num_envs`` static and ``market.dynamic_envs`` dynamic lanes) are
    counted."""
    code = train.main(
        ["--config", TINY, "--out", str(tmp_path), "--quiet", "--data", "sample:us_1min",
         "--llm", "none", "--agents", "2", "--marl", "mappo", "--scenario", "team", "--comm",
         "--env", "hybrid"]
    )  # fmt: skip
    assert code == 0
    (run_dir,) = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]
    entry = json.loads((run_dir / "metrics.json").read_text())["markets"]["us_1min"]
    names = {"TWAP", "TWAP-POV", "PPO-mappo-comm"}
    assert entry["agents_setup"] == {
        "agents": 2, "algorithm": "mappo", "scenario": "team", "market_mode": "hybrid",
        "test_days": 4,
    }  # fmt: skip
    assert [a["agent"] for a in entry["agents"]] == [0, 1]
    for agent in entry["agents"]:
        assert agent["side"] == 1.0 and set(agent["policies"]) == names
        assert agent["policies"]["PPO-mappo-comm"]["n_orders"] == 4
        assert agent["policies"]["PPO-mappo-comm"]["vs_TWAP"] is not None
        assert set(agent["impact_bps"]) == names
        assert set(agent["vs_TWAP_POV"]) == {"PPO-mappo-comm"}
        impact = agent["impact_bps"]["TWAP"]
        assert impact["value"] < 0  # a cost
        # the US sample's 4 test orders share one day: no interval
        assert impact["ci_low"] is None and impact["ci_high"] is None
    assert set(entry["team"]["policies"]) == names
    spread = entry["pa_spread_bps"]
    pa = [a["policies"]["TWAP"]["PA"]["value"] for a in entry["agents"]]
    assert spread["TWAP"] == pytest.approx(max(pa) - min(pa))
    assert entry["timing"]["agent_steps"] == 2 * entry["timing"]["env_steps"]
    assert entry["timing"]["env_steps"] == 4 * (16 + 4) * 32 * 2  # updates x lanes x steps x seeds
    checkpoint = run_dir / "us_1min" / "checkpoint"
    meta = json.loads((checkpoint / "policy.json").read_text())
    assert meta["communication"] == "linear_message" and meta["agents"] == 2
    assert meta["market_mode"] == "hybrid"
    params = msgpack_restore((checkpoint / "policy.msgpack").read_bytes())
    assert set(params["params"]) == {"actor", "critic", "communication"}
    table = (run_dir / "results.txt").read_text()
    for row in ("us_1min agent 0", "us_1min agent 1", "us_1min team"):
        assert row in table


@pytest.mark.parametrize(
    "args, message",
    [
        (["--llm", "none", "--agents", "2", "--env", "static"], "dynamic or hybrid market"),
        (["--llm", "offline", "--modules", "profiling"], "set marl.agents > 1"),
        (
            ["--llm", "offline", "--agents", "2", "--modules", "imagination", "imagine.ratio=0.5"],
            "single-agent only",
        ),
        (["--llm", "offline", "--agents", "2", "marl.profile=nope"], "neither a library program"),
        (["--llm", "none", "--agents", "0"], "marl.agents: must be >= 1"),
        (["--llm", "none", "--agents", "2", "marl.profile=nope"], "neither a library program"),
        (["--llm", "none", "--agents", "2", "marl.communication=x.py"], "cannot read x.py"),
    ],
)
def test_bad_multi_agent_input_exits_2_without_a_run(tmp_path, capsys, args, message):
    code = train.main(["--config", TINY, "--out", str(tmp_path), "--quiet", *args])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())
