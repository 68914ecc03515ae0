"""K candidates in one compiled program: the reward switch, batched training against
one-at-a-time training, and the evaluator's grouping and fallback."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from llm.designs import library
from llm.prompts import DEFAULT_CODE
from llm.validate import load_validated
from serl_jax.components.reward import switch_reward, switch_reward_terms
from serl_jax.config import load_config
from serl_jax.envs.execution import ExecutionEnv
from serl_jax.envs.market_data import MarketData
from serl_jax.experiment import load_splits, train_candidates, train_policy
from serl_jax.loop import ProgramEvaluator, evaluate_program
from serl_jax.loop.dispatch import compilation_cache, plan_jobs
from serl_jax.loop.evaluation import evaluate_batch
from serl_jax.rl.networks import make_network, network_code_key

TINY = Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml"
MARKET = "sample:us_1min"
REWARD, NETWORK = DEFAULT_CODE["reward"], DEFAULT_CODE["network"]
# Different term names from the default reward's (pa, concentration, terminal).
SHORTFALL = next(d.code for d in library("reward") if d.name == "implementation_shortfall")
RAISES = "def reward(prev_state, action, next_state, params):\n    return params.no_such_field\n"
DIVERGES = (
    "import jax.numpy as jnp\n\n\n"
    "def reward(prev_state, action, next_state, params):\n"
    "    return jnp.float32(3e37) * (1.0 + next_state.time)\n"
)


def with_anchor(steps: float) -> str:
    """The default network program declaring its prior anchor (no new parameters)."""
    line = "    depth: int = 2  # hidden layers per MLP\n"
    return NETWORK.replace(line, f"{line}    prior_anchor_steps: float = {steps}\n")


def test_switch_reward_picks_each_lanes_reward():
    def constant(prev, action, nxt, params):
        return jnp.float32(1.0)

    def terms(prev, action, nxt, params):
        return {"b": 2.0 * action, "a": -action}

    index = jnp.array([0, 1, 1, 0])
    action = jnp.array([0.5, 0.5, 0.25, 0.75], jnp.float32)
    totals = jax.vmap(lambda i, a: switch_reward([constant, terms], i)(None, a, None, None))(
        index, action
    )
    np.testing.assert_allclose(totals, [1.0, 0.5, 0.25, 1.0])  # b + a = action
    names = [["total"], ["a", "b", "total"]]
    vectors = jax.vmap(
        lambda i, a: switch_reward_terms([constant, terms], names, i)(None, a, None, None)
    )(index, action)
    np.testing.assert_allclose(
        vectors,
        [[1.0, 0.0, 0.0], [-0.5, 1.0, 0.5], [-0.25, 0.5, 0.25], [1.0, 0.0, 0.0]],
    )
    with pytest.raises(ValueError, match="differ"):
        switch_reward_terms([terms], [["a", "total"]], jnp.int32(0))(None, 0.5, None, None)


def test_network_code_key_ignores_only_the_anchor_declaration():
    assert network_code_key(with_anchor(5.0)) == network_code_key(with_anchor(31.9))
    assert network_code_key(with_anchor(5.0)) == network_code_key(NETWORK)
    wider = NETWORK.replace("width: int = 64", "width: int = 65")
    assert wider != NETWORK and network_code_key(wider) != network_code_key(NETWORK)
    # A network that reads the field could depend on it: keyed by its whole code.
    reads = with_anchor(5.0) + "\n\ndef scale(net):\n    return net.prior_anchor_steps\n"
    assert network_code_key(reads) == reads
    assert network_code_key("def (") == "def ("


def test_batched_training_matches_one_at_a_time_training():
    cfg = load_config(TINY)
    splits = load_splits(cfg, MARKET)
    train = cfg.env_params(MarketData.from_episodes(splits.train))
    val = cfg.env_params(MarketData.from_episodes(splits.val))
    short = dataclasses.replace(
        cfg, network=dataclasses.replace(cfg.network, prior_anchor_steps=5.0)
    )
    # (reward, config) per candidate: two rewards, and the first reward with k = 5.
    candidates = [
        (load_validated(REWARD, "reward"), cfg),
        (load_validated(SHORTFALL, "reward"), cfg),
        (load_validated(REWARD, "reward"), short),
    ]
    batch = train_candidates(
        cfg, [r for r, _ in candidates], train, val,
        action_priors=[c.network.prior() for _, c in candidates],
    )  # fmt: skip
    assert len(batch) == 3
    same_selection = 0
    for (reward, cfg_k), together in zip(candidates, batch, strict=True):
        alone = train_policy(cfg_k, ExecutionEnv(reward_fn=reward), train, val, progress=False)
        # Every seed scores as it does alone (the batched program's float noise is ~1e-3
        # bps) ...
        np.testing.assert_allclose(
            together.validation_shortfall, alone.validation_shortfall, atol=1e-2
        )
        if together.selected_seed != alone.selected_seed:
            # ... so a different pick is a tie within that noise, not another policy.
            picked = together.validation_shortfall[[together.selected_seed, alone.selected_seed]]
            assert abs(picked[0] - picked[1]) < 1e-2
            continue
        same_selection += 1
        leaves = zip(
            jax.tree.leaves(alone.policy_params),
            jax.tree.leaves(together.policy_params),
            strict=True,
        )
        for a, b in leaves:
            np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
        for name in ("total_loss", "entropy", "approx_kl"):
            np.testing.assert_allclose(together.curves[name], alone.curves[name], atol=1e-5)
    assert same_selection >= 2  # the parameters were compared for most candidates
    # Each candidate's reward and prior really act: no two policies are the same.
    firsts = [jax.tree.leaves(t.policy_params)[0] for t in batch]
    assert not np.allclose(firsts[0], firsts[1]) and not np.allclose(firsts[0], firsts[2])


def test_different_networks_behind_a_switch_train_as_alone():
    cfg = load_config(TINY)
    splits = load_splits(cfg, MARKET)
    train = cfg.env_params(MarketData.from_episodes(splits.train))
    val = cfg.env_params(MarketData.from_episodes(splits.val))
    small, deep = make_network((8,), "tanh"), make_network((4, 4), "relu")
    # (reward, network) per candidate: two networks, the first shared by two rewards.
    rewards = [load_validated(REWARD, "reward"), load_validated(REWARD, "reward")]
    rewards.append(load_validated(SHORTFALL, "reward"))
    networks = [small, deep, small]
    batch = train_candidates(cfg, rewards, train, val, networks=networks)
    for reward, network, together in zip(rewards, networks, batch, strict=True):
        alone = train_policy(
            cfg, ExecutionEnv(reward_fn=reward), train, val, network=network, progress=False
        )
        assert together.network is network
        np.testing.assert_allclose(
            together.validation_shortfall, alone.validation_shortfall, atol=1e-2
        )
        assert together.selected_seed == alone.selected_seed  # no tie within 1e-2 here
        leaves = zip(
            jax.tree.leaves(alone.policy_params),
            jax.tree.leaves(together.policy_params),
            strict=True,
        )  # the member's own parameters, shaped as alone
        for a, b in leaves:
            np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="network or networks, not both"):
        train_candidates(cfg, rewards[:1], train, val, network=small, networks=[small])
    with pytest.raises(ValueError, match="1 networks for 3 rewards"):
        train_candidates(cfg, rewards, train, val, networks=[small])


@pytest.fixture(scope="module")
def config():
    return load_config(TINY, ["eval.n_bootstrap=100"]).to_dict()


def test_a_batch_scores_each_candidate_as_alone(config, tmp_path):
    programs = [
        (REWARD, NETWORK),
        (SHORTFALL, NETWORK),
        (REWARD, with_anchor(12.0)),
        (DIVERGES, NETWORK),
        (REWARD, with_anchor(5000.0)),
    ]
    dirs = [None, None, str(tmp_path / "k12"), None, None]
    batch = evaluate_batch(config, MARKET, programs, dirs)
    assert [r.ok for r in batch] == [True, True, True, False, False]
    assert "non-finite" in batch[3].error or "diverged" in batch[3].error  # fails alone
    assert "prior_anchor_steps: expected a number of steps in [0, 1000]" in batch[4].error
    saved = json.loads((tmp_path / "k12" / "checkpoint" / "policy.json").read_text())
    assert saved["config"]["network"]["prior_anchor_steps"] == 12.0
    assert saved["network_code"] == programs[2][1]
    for program, together in zip(programs[:3], batch[:3], strict=True):
        alone = evaluate_program(config, MARKET, *program)
        assert together.timing["batch"] == 4  # the out-of-range anchor never trained
        assert together.metrics["prior_anchor_steps"] == alone.metrics["prior_anchor_steps"]
        for key in ("pa", "shortfall"):
            assert together.metrics[key] == pytest.approx(alone.metrics[key], abs=1e-2)
        assert together.metrics["selected_seed"] == alone.metrics["selected_seed"]
        assert set(together.reward_term_stats) == set(alone.reward_term_stats)
        for term, stats in alone.reward_term_stats.items():
            if term == "history":
                continue
            assert together.reward_term_stats[term]["episode_mean"] == pytest.approx(
                stats["episode_mean"], rel=1e-3, abs=1e-4
            )
        assert [h["updates"] for h in together.reward_term_stats["history"]] == [
            h["updates"] for h in alone.reward_term_stats["history"]
        ]


def test_a_batch_of_different_networks_scores_each_as_alone(config, tmp_path):
    wider = NETWORK.replace("width: int = 64", "width: int = 65")
    programs = [(REWARD, NETWORK), (SHORTFALL, wider), (SHORTFALL, with_anchor(12.0))]
    dirs = [None, str(tmp_path / "wider"), None]
    tasks = [
        (config, MARKET, *program, folder) for program, folder in zip(programs, dirs, strict=True)
    ]
    with ProgramEvaluator(batch=8, switch_networks=True) as evaluator:
        results = dict(evaluator.evaluate(tasks))
    batch = [results[i] for i in range(3)]
    assert [r.ok for r in batch] == [True, True, True]
    assert [r.timing["batch"] for r in batch] == [3, 3, 3]  # one compiled program
    alone = evaluate_program(config, MARKET, *programs[1])
    for key in ("pa", "shortfall"):
        assert batch[1].metrics[key] == pytest.approx(alone.metrics[key], abs=1e-2)
    saved = json.loads((tmp_path / "wider" / "checkpoint" / "policy.json").read_text())
    assert saved["network_code"] == wider
    # Different action sets cannot share a switch: the batch fails as a whole (and the
    # evaluator trains them one at a time).
    discrete = next(d.code for d in library("network") if d.name == "discrete_mlp")
    assert (
        evaluate_batch(config, MARKET, [(REWARD, NETWORK), (REWARD, discrete)], [None] * 2) is None
    )


def test_a_hybrid_batch_in_the_propagator_market_scores_each_candidate_as_alone():
    """``loop.env=hybrid``: candidates train in the static and propagator markets at once
    (batched or alone alike) and are scored in the propagator market."""
    config = load_config(
        TINY, ["eval.n_bootstrap=100", "loop.env=hybrid", "market.simulator=propagator"]
    ).to_dict()
    batch = evaluate_batch(config, MARKET, [(REWARD, NETWORK), (SHORTFALL, NETWORK)], [None] * 2)
    alone = evaluate_program(config, MARKET, SHORTFALL, NETWORK)
    assert [r.ok for r in batch] == [True, True] and alone.ok
    for key in ("pa", "shortfall"):
        assert batch[1].metrics[key] == pytest.approx(alone.metrics[key], abs=1e-2)
    # scored paying for its own impact: more shortfall than a static run of the program
    static = evaluate_program(load_config(TINY, ["eval.n_bootstrap=100"]).to_dict(), MARKET,
                              SHORTFALL, NETWORK)  # fmt: skip
    assert alone.metrics["shortfall"] < static.metrics["shortfall"]


def test_a_batch_that_raises_is_retried_one_program_at_a_time(config):
    tasks = [(config, MARKET, code, NETWORK, None) for code in (REWARD, RAISES)]
    programs = [(t[2], t[3]) for t in tasks]
    assert evaluate_batch(config, MARKET, programs, [None, None]) is None
    with ProgramEvaluator(batch=8) as evaluator:
        results = dict(evaluator.evaluate(tasks))
    assert results[0].ok and "batch" not in results[0].timing  # trained alone
    assert not results[1].ok and "AttributeError" in results[1].error


def test_plan_jobs_groups_programs_that_build_the_same_network(config):
    other = dict(config, seed_note="another config")
    wider = NETWORK.replace("width: int = 64", "width: int = 65")
    tasks = [
        (config, MARKET, "r0", NETWORK, None),
        (config, MARKET, "r1", wider, None),
        (config, MARKET, "r2", with_anchor(31.9), None),
        (config, "sample:cn_1min", "r3", NETWORK, None),
        (config, MARKET, "r4", NETWORK, None),
        (other, MARKET, "r5", NETWORK, None),
    ]
    assert plan_jobs(tasks, 2) == [[0, 2], [1], [3], [4], [5]]
    assert plan_jobs(tasks, 8) == [[0, 2, 4], [1], [3], [5]]
    assert plan_jobs(tasks, 1) == [[i] for i in range(6)]
    # Behind a switch any networks with the same action set train together.
    discrete = next(d.code for d in library("network") if d.name == "discrete_mlp")
    tasks.append((config, MARKET, "r6", discrete, None))
    assert plan_jobs(tasks, 8, switch_networks=True) == [[0, 1, 2, 4], [3], [5], [6]]
    assert plan_jobs(tasks, 3, switch_networks=True) == [[0, 1, 2], [3], [4], [5], [6]]


def test_plan_jobs_splits_groups_for_idle_workers(config):
    other = dict(config, seed_note="another config")
    tasks = [(config, MARKET, f"r{i}", NETWORK, None) for i in range(6)]
    tasks.append((other, MARKET, "r6", NETWORK, None))
    assert plan_jobs(tasks, 8) == [[0, 1, 2, 3, 4, 5], [6]]
    assert plan_jobs(tasks, 8, workers=2) == [[0, 1, 2, 3, 4, 5], [6]]  # no worker idle
    assert plan_jobs(tasks, 8, workers=3) == [[0, 1, 2], [3, 4, 5], [6]]
    assert plan_jobs(tasks, 8, workers=4) == [[0, 1], [2, 3], [4, 5], [6]]
    assert plan_jobs(tasks, 8, workers=20) == [[i] for i in range(7)]
    # Near-equal parts, the larger first: 7 programs in 3 parts are 3 + 2 + 2.
    same = [(config, MARKET, f"r{i}", NETWORK, None) for i in range(7)]
    assert plan_jobs(same, 8, workers=3) == [[0, 1, 2], [3, 4], [5, 6]]
    # The cap comes first, then the group with the largest part: 4 + 2 + 1 -> 2 + 2 + 2 + 1.
    assert plan_jobs(tasks, 4, workers=3) == [[0, 1, 2, 3], [4, 5], [6]]
    assert plan_jobs(tasks, 4, workers=4) == [[0, 1], [2, 3], [4, 5], [6]]
    assert plan_jobs([], 8, workers=4) == []


def test_persistent_cache_hits_are_counted(config, tmp_path):
    tasks = [(config, MARKET, REWARD, NETWORK, None)]
    # Every program is cached, however fast it compiled (JAX keeps only those that took
    # 1 s or more, which made the count depend on the machine's load).
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    try:
        with ProgramEvaluator(cache_dir=tmp_path / "xla") as evaluator:
            [(_, first)] = evaluator.evaluate(tasks)
            jax.clear_caches()  # what a new process would start from
            [(_, second)] = evaluator.evaluate(tasks)
    finally:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    assert first.ok and second.ok
    assert first.timing["cache_hits"] == 0
    assert second.timing["cache_hits"] >= 2  # init and the update chunk, at least
    assert second.metrics == first.metrics


def test_the_persistent_cache_ends_with_its_context(tmp_path):
    """JAX opens its cache once per process; leaving the context must close it, or every
    later compilation in the process keeps writing to the run's folder."""
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    try:
        with compilation_cache(tmp_path / "xla"):
            jax.jit(lambda x: x * 3.0 + 1.0)(jnp.ones(7)).block_until_ready()
        written = sorted((tmp_path / "xla").iterdir())
        assert written  # the cache was in use inside the context
        jax.jit(lambda x: x * 5.0 - 2.0)(jnp.ones(9)).block_until_ready()
        assert sorted((tmp_path / "xla").iterdir()) == written
    finally:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
