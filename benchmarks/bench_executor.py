"""SE-RL candidates on a Ray cluster against local worker processes, in the same run.

Two measurements, each with both executors of :class:`serl_jax.loop.ProgramEvaluator`
(``loop.executor``) in this process, one after the other:

1. **Overhead per task**: N no-op tasks through the local
   :class:`serl_jax.loop.workers.WorkerPool` and through
   :class:`serl_jax.loop.ray_pool.RayPool` (``--workers`` each, processes started
   before the clock): the median and mean wall time per task.
2. **Candidates per hour**: K reward candidates (distinct library rewards of the offline
   designer, the default network, validated first and not timed), each trained alone
   (``loop.candidate_batch=1``), with ``--workers`` local worker processes (a training
   budget on, so they run in workers as the loop runs them) and with as many Ray actors
   on a one-machine cluster started here. Both start fresh processes (so both compile);
   the Ray run also ships each checkpoint back to the driver. Both must give every
   candidate the same validation score.

Ends with one line per preset::

    <preset>: candidates/hour local X, ray Y (ratio Z); Ray overhead per task O ms
    = P% of a candidate (S s; ... vs local)

Run: ``python benchmarks/bench_executor.py`` (tiny and default presets, K = 4, 2
workers; about 6 min on 2 CPU cores). Needs ``pip install -e ".[distributed]"``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import ray

from llm.designs import library
from llm.prompts import DEFAULT_CODE
from llm.validate import validate
from serl_jax.config import load_config
from serl_jax.loop import ProgramEvaluator
from serl_jax.loop.ray_pool import RayPool
from serl_jax.loop.workers import WorkerPool

ROOT = Path(__file__).resolve().parents[1]


def noop(i: int) -> int:
    """The overhead measurement's task."""
    return i


def per_task_seconds(pool, n: int) -> list[float]:
    """Wall seconds per task, one task in flight per worker at a time."""
    list(pool.run(noop, [(i,) for i in range(8)]))  # every worker has started
    seconds = []
    for i in range(n):
        t0 = time.perf_counter()
        list(pool.run(noop, [(i,)]))
        seconds.append(time.perf_counter() - t0)
    return seconds


def candidates_per_hour(tasks, workers: int, executor: str) -> tuple[float, dict, float]:
    """(candidates/hour, results by index, mean seconds per candidate's own timing)."""
    options = {"executor": "ray", "ray_address": "auto"} if executor == "ray" else {}
    t0 = time.perf_counter()
    with ProgramEvaluator(workers=workers, budget_s=1800.0, batch=1, **options) as evaluator:
        results = dict(evaluator.evaluate(tasks))
    wall = time.perf_counter() - t0
    assert all(r.ok for r in results.values()), [r.error for r in results.values()]
    own = statistics.mean(r.timing["total"] for r in results.values())
    return len(tasks) / wall * 3600.0, results, own


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", default="tiny,default", help="configs/<preset>.yaml")
    parser.add_argument("--rewards", type=int, default=4, help="K reward candidates")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=200, help="no-op tasks per pool")
    parser.add_argument("--market", default="sample:cn_1min")
    args = parser.parse_args()

    rewards = [d.code for d in library("reward")][: args.rewards]
    network = DEFAULT_CODE["network"]
    for code, kind in [(r, "reward") for r in rewards] + [(network, "network")]:
        assert validate(code, kind).ok
    ray.init(num_cpus=args.workers, include_dashboard=False)
    try:
        print(f"overhead: {args.tasks} no-op tasks, {args.workers} workers")
        overhead = {}
        for name, pool in (
            ("local", WorkerPool(args.workers)),
            ("ray", RayPool(args.workers, num_cpus=1)),
        ):
            with pool:
                s = per_task_seconds(pool, args.tasks)
            overhead[name] = statistics.median(s)
            print(f"  {name:>5}: median {1e3 * overhead[name]:.2f} ms, "
                  f"mean {1e3 * statistics.mean(s):.2f} ms per task")  # fmt: skip
        lines = []
        for preset in args.presets.split(","):
            cfg = load_config(ROOT / "configs" / f"{preset}.yaml")
            tasks = [(cfg.to_dict(), args.market, r, network, None) for r in rewards]
            print(f"{preset}: {len(tasks)} reward candidates on {args.market}, "
                  f"{args.workers} workers")  # fmt: skip
            rates, scores, own = {}, {}, {}
            for executor in ("local", "ray"):
                rates[executor], results, own[executor] = candidates_per_hour(
                    tasks, args.workers, executor
                )
                scores[executor] = [results[i].metrics["shortfall"] for i in range(len(tasks))]
                print(f"  {executor:>5}: {rates[executor]:.0f} candidates/hour "
                      f"({own[executor]:.1f} s per candidate's own timing)")  # fmt: skip
            assert scores["local"] == scores["ray"], scores  # same candidates, same scores
            extra = overhead["ray"] - overhead["local"]
            lines.append(
                f"{preset}: candidates/hour local {rates['local']:.0f}, ray {rates['ray']:.0f} "
                f"(ratio {rates['ray'] / rates['local']:.2f}); Ray overhead per task "
                f"{1e3 * overhead['ray']:.1f} ms = {100 * overhead['ray'] / own['local']:.3f}% "
                f"of a candidate ({own['local']:.1f} s; {1e3 * extra:+.1f} ms vs local)"
            )
        print("\n".join(lines))
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
