"""SE-RL batch evaluation: candidates per hour in one process vs in worker processes.

Trains the same batch of candidate programs (library rewards of the offline designer
with the default network, and library networks with the default reward; all validated
first, validation time not counted) with :class:`serl_jax.loop.ProgramEvaluator` at
``workers=1`` (in this process, one after another) and ``workers=2`` (spawned worker
processes, two candidates in flight), and prints per setting: wall time, candidates per
hour, the share of candidate time spent compiling, and the ratio to one worker. The
worker processes' start-up (JAX import, data load) is included in their wall time.

Run: ``python benchmarks/bench_loop.py`` (default: 6 programs at the tiny preset on the
US sample plus the default budget with ``--preset default``).
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

ROOT = Path(__file__).resolve().parents[1]


def programs(n: int) -> list[tuple[str, str]]:
    """``n`` (reward_code, network_code) pairs, alternating designed slots."""
    rewards = [d.code for d in library("reward")]
    networks = [d.code for d in library("network")]
    out = []
    for i in range(n):
        if i % 2 == 0:
            out.append((rewards[(i // 2) % len(rewards)], DEFAULT_CODE["network"]))
        else:
            out.append((DEFAULT_CODE["reward"], networks[(i // 2) % len(networks)]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", type=int, default=6)
    parser.add_argument("--preset", default="tiny", help="configs/<preset>.yaml")
    parser.add_argument("--market", default="sample:us_1min")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()

    cfg = load_config(ROOT / "configs" / f"{args.preset}.yaml").to_dict()
    batch = programs(args.programs)
    for reward, network in batch:
        for code, kind in ((reward, "reward"), (network, "network")):
            result = validate(code, kind)
            assert result.ok, result.reason
    print(f"{len(batch)} programs, preset {args.preset}, market {args.market}")
    print(f"{'workers':>8} {'wall s':>8} {'cand/hour':>10} {'compile share':>14} {'ratio':>6}")
    base = None
    for workers in args.workers:
        tasks = [(cfg, args.market, r, n, None) for r, n in batch]
        t0 = time.perf_counter()
        with ProgramEvaluator(workers) as evaluator:
            results = [r for _, r in evaluator.evaluate(tasks)]
        wall = time.perf_counter() - t0
        assert all(r.ok for r in results), [r.error for r in results if not r.ok]
        compile_s = sum(r.timing["compile"] for r in results)
        total_s = sum(r.timing["total"] for r in results)
        per_hour = len(results) / wall * 3600
        base = base or per_hour
        print(
            f"{workers:>8} {wall:>8.1f} {per_hour:>10.0f} {compile_s / total_s:>14.0%} "
            f"{per_hour / base:>5.2f}x"
        )


if __name__ == "__main__":
    main()
