"""Training and scoring one program: the failure path, worker processes, reflection."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import numpy as np
import pytest

from llm.prompts import DEFAULT_CODE, default_code
from llm.validate import load_validated
from serl_jax.baselines.optimal import linear_market, schedule_objective
from serl_jax.config import load_config
from serl_jax.envs.propagator import PropagatorEnvParams
from serl_jax.evaluation import rollout
from serl_jax.experiment import make_env
from serl_jax.loop import ProgramEvaluator, evaluate_program
from serl_jax.loop.evaluation import candidate_market
from serl_jax.rl.checkpoint import load_policy
from serl_jax.rl.policy import make_ppo_policy

TINY = Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml"
MARKET = "sample:us_1min"


@pytest.fixture(scope="module")
def config():
    return load_config(TINY, ["eval.n_bootstrap=100"]).to_dict()


@pytest.fixture(scope="module")
def default_result(config, tmp_path_factory):
    out = tmp_path_factory.mktemp("default")
    result = evaluate_program(
        config, MARKET, DEFAULT_CODE["reward"], DEFAULT_CODE["network"], str(out)
    )
    return result, out


def test_default_program_scores_and_checkpoints(default_result):
    result, out = default_result
    assert result.ok, result.error
    m = result.metrics
    assert m["n_orders"] == 4 and m["afi"] == 0.0
    # the US sample's 4 validation orders share one day: no interval, and the days say why
    assert m["pa_ci"] == [None, None] and m["days_per_order"] == ["2019-02-14"] * 4
    # Same policy and days as the seed selection (float32, compiled separately).
    assert m["pa"] == pytest.approx(m["validation_pa_per_seed"][m["selected_seed"]], abs=1e-3)
    assert result.timing["compile"] > 0 and result.timing["total"] >= result.timing["train"]
    assert (out / "checkpoint" / "policy.msgpack").is_file()
    # Reflection: the terms' episode sums add up to the total.
    stats = result.reward_term_stats
    parts = sum(stats[t]["episode_mean"] for t in ("pa", "concentration", "terminal"))
    assert parts == pytest.approx(stats["total"]["episode_mean"], rel=1e-4, abs=1e-4)
    shares = [stats[t]["share"] for t in ("pa", "concentration", "terminal")]
    assert sum(shares) == pytest.approx(1.0, abs=1e-6)
    assert len(result.curves["order_pa"]) == 4  # tiny preset: 4 updates


def test_worker_processes_give_the_same_result(config, default_result, tmp_path):
    expected, _ = default_result
    tasks = [
        (config, MARKET, DEFAULT_CODE["reward"], DEFAULT_CODE["network"], str(tmp_path / "a")),
        (config, MARKET, DEFAULT_CODE["reward"], DEFAULT_CODE["network"], None),
    ]
    with ProgramEvaluator(workers=2) as evaluator:
        results = dict(evaluator.evaluate(tasks))
    assert sorted(results) == [0, 1]
    for r in results.values():
        assert r.ok
        assert r.metrics == expected.metrics  # deterministic given the seeds
    assert results[0].curves == expected.curves


def test_ray_actors_give_the_same_result_and_the_driver_writes_the_checkpoint(
    config, default_result, tmp_path
):
    ray = pytest.importorskip("ray")
    expected, expected_dir = default_result
    ray.init(num_cpus=2, include_dashboard=False)
    try:
        task = (config, MARKET, DEFAULT_CODE["reward"], DEFAULT_CODE["network"], str(tmp_path))
        with ProgramEvaluator(executor="ray") as evaluator:
            [(_, result)] = list(evaluator.evaluate([task]))
    finally:
        ray.shutdown()
    assert result.ok and result.metrics == expected.metrics and result.curves == expected.curves
    # the actor wrote the checkpoint on its own disk; the driver unpacked the same files
    local = sorted(p.relative_to(expected_dir) for p in expected_dir.rglob("*"))
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == local
    for rel in local:
        if (expected_dir / rel).is_file():
            assert (tmp_path / rel).read_bytes() == (expected_dir / rel).read_bytes(), rel


def test_a_diverging_reward_crashes_with_a_reason(config):
    code = (
        "import jax.numpy as jnp\n\n\n"
        "def reward(prev_state, action, next_state, params):\n"
        "    return jnp.float32(3e37) * (1.0 + next_state.time)\n"
    )
    result = evaluate_program(config, MARKET, code, DEFAULT_CODE["network"])
    assert not result.ok
    assert "non-finite" in result.error or "diverged" in result.error
    assert result.metrics == {}


def test_code_failing_stage_one_is_refused_at_load(config):
    result = evaluate_program(config, MARKET, "import os\n", DEFAULT_CODE["network"])
    assert not result.ok and "import of 'os' is not allowed" in result.error


def test_a_network_program_sets_its_prior_anchor(config, default_result, tmp_path):
    # The default network declaring k = 12 trains and scores exactly as the default
    # network under network.prior_anchor_steps=12 (the field adds no parameters), and
    # differently from k = 5; the checkpoint keeps k for evaluation.
    assert default_result[0].metrics["prior_anchor_steps"] == 20.0
    declared = DEFAULT_CODE["network"].replace(
        "    depth: int = 2  # hidden layers per MLP\n",
        "    depth: int = 2  # hidden layers per MLP\n    prior_anchor_steps: float = 12.0\n",
    )
    assert declared != DEFAULT_CODE["network"]
    ours = evaluate_program(
        config, MARKET, DEFAULT_CODE["reward"], declared, str(tmp_path / "declared")
    )
    configured = {**config, "network": {**config["network"], "prior_anchor_steps": 12.0}}
    reference = evaluate_program(
        configured, MARKET, DEFAULT_CODE["reward"], DEFAULT_CODE["network"]
    )
    assert ours.ok and reference.ok
    assert ours.metrics["prior_anchor_steps"] == 12.0
    assert ours.metrics["pa_per_order"] == pytest.approx(reference.metrics["pa_per_order"])
    assert ours.metrics["pa_per_order"] != pytest.approx(
        default_result[0].metrics["pa_per_order"], abs=1e-3
    )
    saved = json.loads((tmp_path / "declared" / "checkpoint" / "policy.json").read_text())
    assert saved["config"]["network"]["prior_anchor_steps"] == 12.0


def test_an_out_of_range_anchor_fails_the_candidate(config):
    bad = DEFAULT_CODE["network"].replace(
        "    depth: int = 2  # hidden layers per MLP\n",
        "    depth: int = 2  # hidden layers per MLP\n    prior_anchor_steps: float = 5000.0\n",
    )
    result = evaluate_program(config, MARKET, DEFAULT_CODE["reward"], bad)
    assert not result.ok
    assert "network field prior_anchor_steps: expected a number of steps in [0, 1000]" in (
        result.error
    )


def test_a_candidate_in_the_propagator_market_is_scored_by_the_mean_variance_objective(
    tmp_path,
):
    """``loop.env=dynamic``, ``loop.score=mean_variance`` in the propagator market's linear
    Almgren–Chriss configuration: the candidate trains and is scored there, and its score
    is each validation order's objective, the closed form of the schedule it executed."""
    overrides = [
        "eval.n_bootstrap=100", "loop.env=dynamic", "loop.score=mean_variance",
        "market.simulator=propagator", "impact.kernel=constant", "impact.delta=1.0",
        "impact.y=0.0", "impact.permanent=0.0", "impact.temporary=0.1",
        "impact.liquidity=constant", "env.urgency=0.5", "env.half_spread_bps=0.0",
        "env.quantity_low=1.0", "env.quantity_high=1.0", "env.child_quantity=fixed",
        "env.participation_cap=1000000.0",
    ]  # fmt: skip
    cfg = load_config(TINY, overrides)
    result = evaluate_program(
        cfg.to_dict(), MARKET, default_code("reward", "mean_variance"), DEFAULT_CODE["network"],
        str(tmp_path),
    )  # fmt: skip
    assert result.ok, result.error
    m = result.metrics
    scores = np.asarray(m["mean_variance_per_order"])
    assert m["mean_variance"] == pytest.approx(scores.mean())
    # the policy's validation schedules, priced by the closed form
    where = candidate_market(cfg, MARKET)
    assert isinstance(where.val, PropagatorEnvParams) and where.dynamic is None
    network, params, meta = load_policy(tmp_path / "checkpoint", define=load_validated)
    policy = make_ppo_policy(network, cfg.ppo.normalize_obs, action_prior=cfg.network.prior())
    out = rollout(make_env(where.val), policy, params, where.val, jax.random.PRNGKey(0))
    gamma, transient, temporary, risk = linear_market(cfg.impact, where.val)
    sigma_day = np.asarray(where.val.data.sigma, np.float64) * np.sqrt(where.val.data.num_slots)
    sigma_bps = sigma_day * 1e4
    remaining = np.asarray(out.remaining, np.float64)
    closed = [
        s * schedule_objective(-np.diff(path), gamma, a, e, risk)
        for s, a, e, path in zip(sigma_bps, transient, temporary, remaining, strict=True)
    ]
    np.testing.assert_allclose(-scores, closed, rtol=2e-3)
