"""SE-RL batch evaluation: K reward candidates one after another vs in one compiled program.

Trains the same K reward candidates (distinct library rewards of the offline designer,
the default network; all validated first, validation time not counted) with
:class:`serl_jax.loop.ProgramEvaluator` twice in this process: ``batch=1`` (each
candidate compiled and trained alone, as the loop did before) and ``batch=K``
(one compiled program for all K, the reward chosen per lane by an index). Prints per
setting the wall time, candidates per hour, the share of candidate time spent
compiling, and the ratio to sequential; checks that both settings score every
candidate alike (mean validation shortfall within 0.05 bps), and ends with one line::

    candidates/hour: sequential X, batched Y, ratio Z×; compile share sequential A%, batched B%

The market is loaded once before timing, so neither setting pays for it.

Run: ``python benchmarks/bench_loop.py`` (K = 8 at the tiny preset on the US sample;
``--preset default --market sample:cn_1min`` for the loop's default budget).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from llm.designs import library
from llm.prompts import DEFAULT_CODE
from llm.validate import validate
from serl_jax.config import load_config
from serl_jax.loop import ProgramEvaluator
from serl_jax.loop.evaluation import candidate_market

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rewards", type=int, default=8, help="K reward candidates")
    parser.add_argument("--preset", default="tiny", help="configs/<preset>.yaml")
    parser.add_argument("--market", default="sample:us_1min")
    args = parser.parse_args()

    cfg = load_config(ROOT / "configs" / f"{args.preset}.yaml")
    rewards = [d.code for d in library("reward")]
    if not 2 <= args.rewards <= len(rewards):
        parser.error(f"--rewards must be in [2, {len(rewards)}] (the library's rewards)")
    rewards = rewards[: args.rewards]
    network = DEFAULT_CODE["network"]
    for code, kind in [(r, "reward") for r in rewards] + [(network, "network")]:
        result = validate(code, kind)
        assert result.ok, result.reason
    candidate_market(cfg, args.market)  # load the market once, outside the timings
    tasks = [(cfg.to_dict(), args.market, r, network, None) for r in rewards]
    print(f"{len(tasks)} reward candidates, preset {args.preset}, market {args.market}")
    print(f"{'setting':>12} {'wall s':>8} {'cand/hour':>10} {'compile share':>14} {'ratio':>6}")
    figures, scores = {}, {}
    for name, batch in (("sequential", 1), ("batched", len(tasks))):
        t0 = time.perf_counter()
        with ProgramEvaluator(workers=1, batch=batch) as evaluator:
            results = dict(evaluator.evaluate(tasks))
        wall = time.perf_counter() - t0
        assert all(r.ok for r in results.values()), [r.error for r in results.values()]
        compile_s = sum(r.timing["compile"] for r in results.values())
        total_s = sum(r.timing["total"] for r in results.values())
        per_hour = len(results) / wall * 3600
        figures[name] = (per_hour, compile_s / total_s)
        scores[name] = [results[i].metrics["shortfall"] for i in range(len(tasks))]
        ratio = per_hour / figures["sequential"][0]
        print(
            f"{name:>12} {wall:>8.1f} {per_hour:>10.0f} {compile_s / total_s:>14.0%} {ratio:>5.2f}x"
        )
    gap = max(abs(a - b) for a, b in zip(scores["sequential"], scores["batched"], strict=True))
    print(f"largest difference of a candidate's validation shortfall: {gap:.4f} bps")
    assert gap < 0.05, "batched and sequential evaluation disagree"
    (seq, seq_share), (bat, bat_share) = figures["sequential"], figures["batched"]
    print(
        f"candidates/hour: sequential {seq:.0f}, batched {bat:.0f}, ratio {bat / seq:.2f}×; "
        f"compile share sequential {seq_share:.0%}, batched {bat_share:.0%}"
    )


if __name__ == "__main__":
    main()
