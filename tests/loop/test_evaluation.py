"""Training and scoring one program: the failure path, worker processes, reflection."""

from __future__ import annotations

from pathlib import Path

import pytest

from llm.prompts import DEFAULT_CODE
from serl_jax.config import load_config
from serl_jax.loop import ProgramEvaluator, evaluate_program

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
    assert m["pa_ci"][0] <= m["pa"] <= m["pa_ci"][1]
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
