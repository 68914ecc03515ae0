"""``benchmarks/bench_search.py``'s reading of a run: the curve of the best full-stage
score against candidates designed, on a hand-made run store, and its seed intervals
against hand-computed values."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest

from serl_jax.loop import Candidate, RunStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_search  # noqa: E402


def _cand(j: int, i: int, short: float | None, full: float | str | None) -> Candidate:
    """A candidate with these stage scores (``full="crashed"``: failed in full training)."""
    stages = {}
    if short is not None:
        stages["short"] = {"score": short, "seconds": 1.0}
    if full == "crashed":
        stages["full"] = {"score": None, "seconds": 4.0}
        return Candidate(f"j{j}-c{i}", j, i, "reward", status="crashed", stages=stages)
    if full is not None:
        stages["full"] = {"score": full, "seconds": 4.0}
    status = "evaluated" if full is not None else "screened" if short is not None else "rejected"
    return Candidate(f"j{j}-c{i}", j, i, "reward", status=status, stages=stages)


def test_the_curve_counts_designed_candidates_and_keeps_the_best_full_score(tmp_path):
    store = RunStore.create(tmp_path / "run", {"loop": {"score": "shortfall"}}, "")
    rounds = {
        0: [_cand(0, 0, -5.0, -4.0)],  # the reference
        1: [_cand(1, 0, -4.5, -3.5), _cand(1, 1, -6.0, None)],  # library seeds
        2: [_cand(2, 0, -3.0, None), _cand(2, 1, -2.0, -3.0), _cand(2, 2, None, None)],
        3: [_cand(3, 0, -1.0, -2.5), _cand(3, 1, -7.0, "crashed")],
    }
    for j, cands in rounds.items():
        store.add_proposals(j, [], [(None, c) for c in cands])
    store.close()
    n, best = bench_search.curve(tmp_path / "run")
    # n = 0: the reference and seeds (best full -3.5); then one point per designed one,
    # each the best full score up to it, in run order
    assert n.tolist() == [0, 1, 2, 3, 4, 5]
    assert best.tolist() == [-3.5, -3.5, -3.0, -3.0, -2.5, -2.5]
    assert bench_search.score_key(tmp_path / "run") == "shortfall"


def test_seed_intervals_by_hand():
    values = np.array([1.0, 2.0, 4.0])
    out = bench_search.interval(values)
    se = np.std(values, ddof=1) / math.sqrt(3)  # 0.8819
    assert out["value"] == pytest.approx(7.0 / 3.0)
    assert out["ci_low"] == pytest.approx(7.0 / 3.0 - 4.302653 * se, rel=1e-5)
    assert out["ci_high"] == pytest.approx(7.0 / 3.0 + 4.302653 * se, rel=1e-5)
    assert out["mde"] == pytest.approx((4.302653 + 1.060660) * se, rel=1e-5)
    one = bench_search.interval(np.array([3.0]))
    assert one == {"value": 3.0, "ci_low": None, "ci_high": None, "mde": None, "n": 1}


def test_a_run_under_way_is_resumed_and_a_finished_one_reused(tmp_path, monkeypatch):
    """``run_one`` starts a run in ``<out>/.tmp/<name>/``, resumes the run folder it finds
    there after a kill, moves it to ``<out>/<name>`` when it ends and reuses it after."""
    calls: list[list[str]] = []

    def train_main(argv):
        calls.append(argv)
        if "--resume" in argv:
            run = Path(argv[argv.index("--resume") + 1])
            (run / "report.json").write_text("{}")
            return 0
        run = Path(argv[argv.index("--out") + 1]) / "20261128-000000-default-serl"
        run.mkdir(parents=True)
        (run / "run.sqlite").write_text("")
        raise KeyboardInterrupt  # killed mid-run

    monkeypatch.setattr(bench_search.train, "main", train_main)
    args = bench_search.argparse.Namespace(
        out=str(tmp_path), task="index", budget_candidates=8, config=None, data=None,
        budget_minutes=None, overrides=[],
    )  # fmt: skip
    with pytest.raises(KeyboardInterrupt):
        bench_search.run_one("hf:qwen", 1, args, [])
    staging = tmp_path / ".tmp" / "index-hf-qwen-s1"
    assert calls[0][calls[0].index("--out") + 1] == str(staging)
    root = bench_search.run_one("hf:qwen", 1, args, [])
    assert calls[1] == ["--resume", str(staging / "20261128-000000-default-serl"), "--quiet"]
    assert root == tmp_path / "index-hf-qwen-s1" and (root / "report.json").exists()
    assert not staging.exists()
    assert bench_search.run_one("hf:qwen", 1, args, []) == root and len(calls) == 2


def test_the_ac_task_sets_the_almgren_chriss_urgency_for_its_kappa_t():
    """``--task ac`` on the shipped sample: the dynamic propagator market scored by the
    mean-variance objective, with the urgency whose Almgren–Chriss ``kappa T`` is 2.5,
    and its known references on the validation days."""
    import argparse

    import bench_optimum

    from serl_jax.baselines.optimal import almgren_chriss_kappa_for, propagator_optimum
    from serl_jax.config import load_config
    from serl_jax.envs.market_data import MarketData
    from serl_jax.envs.propagator import PropagatorEnvParams
    from serl_jax.experiment import load_splits
    from serl_jax.loop.evaluation import candidate_market

    args = argparse.Namespace(config=None, data=None, overrides=[], kappa_t=2.5)
    extra = bench_search.task_overrides("ac", args)
    assert extra[-2:] == ["loop.env=dynamic", "loop.score=mean_variance"]
    assert "market.simulator=propagator" in extra and "impact.kernel=constant" in extra
    (urgency,) = [float(o.split("=")[1]) for o in extra if o.startswith("env.urgency=")]
    cfg = load_config(None, extra)
    assert cfg.env["urgency"] == pytest.approx(urgency)
    splits = load_splits(cfg, cfg.loop.market)
    market = PropagatorEnvParams.from_static(
        cfg.env_params(MarketData.from_episodes(splits.split("train"))),
        splits.stats,
        cfg.impact.params(),
    )
    _, _, temporary, _ = bench_optimum.linear_market(cfg.impact, market)
    slots = market.data.num_slots
    kappa = almgren_chriss_kappa_for(float(np.mean(temporary)), urgency / slots)
    assert kappa * slots == pytest.approx(2.5, rel=1e-9)
    # the references: the optimal schedule priced by the environment is its closed form
    # on the loop's validation market, and TWAP scores below it
    references = bench_search.ac_references(args, extra)
    val = candidate_market(cfg, cfg.loop.market).val
    targets = propagator_optimum(cfg.impact, val)
    closed = bench_optimum.closed_form(cfg, val, targets)
    assert references["optimal"] == pytest.approx(-closed, rel=1e-4)
    assert references["twap"] < references["optimal"] - 0.01 * abs(closed)


def test_novelty_pools_seeds_counts_with_a_wilson_interval():
    reports = [
        {"designed_valid": 40, "copy_rate": 2 / 40, "duplicate_rate": 3 / 40},
        {"designed_valid": 10, "copy_rate": 0.0, "duplicate_rate": 1 / 10},
    ]
    out = bench_search.pooled_novelty(reports)
    # 4 duplicates of 50: Wilson, z = 1.959964, centre (p + z^2/2n) / (1 + z^2/n),
    # half-width z sqrt(p(1-p)/n + z^2/4n^2) / (1 + z^2/n)
    z, n, p = 1.959964, 50, 4 / 50
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    assert out["designed_valid"] == 50
    assert out["copy_rate"] == pytest.approx(2 / 50) and out["duplicate_rate"] == pytest.approx(
        0.08
    )
    assert out["duplicate_ci"] == pytest.approx([centre - half, centre + half], rel=1e-5)
    none = bench_search.pooled_novelty([{"designed_valid": 0, "copy_rate": 0.0,
                                         "duplicate_rate": 0.0}])  # fmt: skip
    assert none == {"designed_valid": 0, "copy_rate": 0.0, "duplicate_rate": 0.0,
                    "duplicate_ci": None}  # fmt: skip


def test_novelty_by_the_change_each_prompt_named(tmp_path):
    """A library seed, then answers to a constant's change (one sets the value named,
    one another value and computes what the seed computes), to a dropped term (a renamed
    copy of the program shown; an invalid one), to a prompt naming no change and to an
    older run's sentence no template writes."""
    seed = "W = 1.0\n\n\ndef reward(p, a, n, q):\n    return {'pa': W * n.x, 'end': 0.0}\n"
    named = seed.replace("W = 1.0", "W = 0.5")
    other = seed.replace("W = 1.0", "W = 2.0")
    renamed = seed.replace("(p, a, n, q)", "(prev, a, n, q)")
    fresh = "def reward(p, a, n, q):\n    return {'pa': n.x}\n"
    older = "def reward(p, a, n, q):\n    return {'pa': 3.0 * n.x}\n"
    outputs = {seed: 1.0, named: 0.5, other: 1.0, renamed: 1.0, fresh: 3.0, older: 4.0}

    def probe(code, kind):
        return {"t": np.array([outputs[code]])}

    def prompt(hint):
        shown = f"```python\n{seed}```\n"
        line = f"Make this change to candidate j1-c0 (the last program above): {hint}"
        return shown + (line if hint else "Write a better program.")

    def cand(i, code, status="evaluated"):
        return Candidate(f"j2-c{i}", 2, i, "reward", reward_code=code, status=status)

    store = RunStore.create(tmp_path / "run", {"loop": {"score": "shortfall"}}, "")
    store.add_proposals(1, [], [(None, Candidate("j1-c0", 1, 0, "reward", reward_code=seed,
                                                 status="evaluated"))])  # fmt: skip
    hints = [
        "Change `W` from 1.0 to 0.5.",
        "Drop the term 'end' and keep the others.",
        None,
        "Change `W` to a clearly different value, not 0.5 (tried already).",
    ]
    store.add_proposals(
        2,
        [("reward", "design", prompt(h), [], None) for h in hints],
        [(0, cand(1, named)), (0, cand(2, other)), (1, cand(3, renamed)),
         (1, cand(4, "def reward(:", "rejected")), (2, cand(5, fresh)), (3, cand(6, older))],
    )  # fmt: skip
    store.close()
    table = bench_search.by_change([tmp_path / "run"], probe)
    row = dict.fromkeys(("designed", "valid", "copy", "duplicate"), 0)
    assert table == {
        "constant": {**row, "designed": 2, "valid": 2, "duplicate": 1, "as_named": 1},
        "drop a term": {**row, "designed": 2, "valid": 1, "copy": 1, "duplicate": 1,
                        "as_named": 0},  # the copy still returns 'end'
        "none": {**row, "designed": 1, "valid": 1, "as_named": None},
        "other": {**row, "designed": 1, "valid": 1, "as_named": None},
    }  # fmt: skip
