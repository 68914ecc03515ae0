"""SE-RL batch evaluation: K candidates one after another vs in one compiled program.

Trains the same K candidates (all validated first, validation time not counted) with
:class:`serl_jax.loop.ProgramEvaluator` twice in this process: ``batch=1`` (each
candidate compiled and trained alone) and ``batch=K`` (one compiled program for all K).
``--slot reward`` (default): K distinct library rewards of the offline designer with the
default network, the reward chosen per lane by an index (``loop.candidate_batch``).
``--slot network``: K distinct library networks (same action set) with the default
reward, behind a :class:`serl_jax.rl.network_switch.NetworkSwitch`
(``loop.switch_networks=always``), the candidates taking turns.
``--short`` trains the search's short stage (``search.short_fraction`` of the updates).
``--workers W`` adds a third setting: the K candidates on W worker processes, the batch
split into W near-equal parts (:func:`serl_jax.loop.dispatch.plan_jobs`), against one
batch of K in one process (what W workers did before: one trained the batch, the others
waited); its wall time includes starting the processes and loading the market in each,
which a search pays once per run, so the slowest worker's job seconds are printed too.

Prints per setting the wall time, candidates per hour, compile and train seconds per
candidate, the share of candidate time spent compiling, and the ratio to sequential;
checks that both settings score every candidate alike (mean validation shortfall within
0.05 bps), and ends with one line::

    candidates/hour: sequential X, batched Y, ratio Z×; compile s/candidate A -> B; ...

The market is loaded once before timing, and JAX's in-memory caches are cleared before
each setting, so neither pays for the other.

Run: ``python benchmarks/bench_loop.py`` (K = 8 rewards at the tiny preset on the US
sample; ``--preset default --market sample:cn_1min`` for the loop's default budget;
``--slot network --candidates 6 --short --preset default --market sample:cn_1min`` for
the search's short stage of network candidates).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax

from llm.designs import library
from llm.prompts import DEFAULT_CODE
from llm.validate import validate
from serl_jax.config import load_config
from serl_jax.loop import ProgramEvaluator
from serl_jax.loop.dispatch import plan_jobs
from serl_jax.loop.evaluation import candidate_market
from serl_jax.rl.networks import action_set_key

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slot", choices=("reward", "network"), default="reward")
    parser.add_argument("--candidates", type=int, default=8, help="K candidates")
    parser.add_argument("--preset", default="tiny", help="configs/<preset>.yaml")
    parser.add_argument("--market", default="sample:us_1min")
    parser.add_argument("--short", action="store_true", help="the search's short stage")
    parser.add_argument("--workers", type=int, default=1, help="W > 1: also K split over W")
    args = parser.parse_args()

    cfg = load_config(ROOT / "configs" / f"{args.preset}.yaml")
    config = cfg.to_dict()
    if args.short:
        updates = max(1, round(cfg.ppo.num_updates * cfg.search.short_fraction))
        config["ppo"]["total_timesteps"] = updates * cfg.ppo.num_envs * cfg.ppo.num_steps
    reward, network = DEFAULT_CODE["reward"], DEFAULT_CODE["network"]
    if args.slot == "reward":
        codes = [d.code for d in library("reward")]
    else:  # the networks that share the default's action set
        codes = [d.code for d in library("network") if not action_set_key(d.code)]
    if not 2 <= args.candidates <= len(codes):
        parser.error(f"--candidates must be in [2, {len(codes)}] (the library's {args.slot}s)")
    codes = codes[: args.candidates]
    programs = [(c, network) if args.slot == "reward" else (reward, c) for c in codes]
    checks = {(r, "reward") for r, _ in programs} | {(n, "network") for _, n in programs}
    for code, kind in checks:
        result = validate(code, kind)
        assert result.ok, result.reason
    candidate_market(cfg, args.market)  # load the market once, outside the timings
    tasks = [(config, args.market, r, n, None) for r, n in programs]
    updates = config["ppo"]["total_timesteps"] // (cfg.ppo.num_envs * cfg.ppo.num_steps)
    print(
        f"{len(tasks)} {args.slot} candidates, preset {args.preset}, market {args.market}, "
        f"{updates} PPO updates"
    )
    print(
        f"{'setting':>12} {'wall s':>8} {'cand/hour':>10} {'compile s':>10} {'train s':>8} "
        f"{'compile share':>14} {'ratio':>6}"
    )
    figures, scores = {}, {}
    settings = [("sequential", 1, 1), ("batched", len(tasks), 1)]
    if args.workers > 1:
        settings.append((f"split {args.workers}", len(tasks), args.workers))
    for name, batch, workers in settings:
        jax.clear_caches()
        jobs = plan_jobs(tasks, batch, True, workers)
        t0 = time.perf_counter()
        with ProgramEvaluator(workers, batch=batch, switch_networks=True) as evaluator:
            results = dict(evaluator.evaluate(tasks))
        wall = time.perf_counter() - t0
        assert all(r.ok for r in results.values()), [r.error for r in results.values()]
        assert all(results[i].timing.get("batch", 1) == len(job) for job in jobs for i in job)
        if workers > 1:
            job_s = max(sum(results[i].timing["total"] for i in job) for job in jobs)
            print(f"{name}: jobs of {[len(j) for j in jobs]}, slowest job {job_s:.1f} s")
        compile_s = sum(r.timing["compile"] for r in results.values())
        train_s = sum(r.timing["train"] for r in results.values())
        total_s = sum(r.timing["total"] for r in results.values())
        per_hour = len(results) / wall * 3600
        figures[name] = (per_hour, compile_s / len(tasks), train_s / len(tasks))
        scores[name] = [results[i].metrics["shortfall"] for i in range(len(tasks))]
        ratio = per_hour / figures["sequential"][0]
        print(
            f"{name:>12} {wall:>8.1f} {per_hour:>10.0f} {compile_s / len(tasks):>10.2f} "
            f"{train_s / len(tasks):>8.2f} {compile_s / total_s:>14.0%} {ratio:>5.2f}x"
        )
    reference = scores["sequential"]
    gap = max(abs(a - b) for s in scores.values() for a, b in zip(reference, s, strict=True))
    print(f"largest difference of a candidate's validation shortfall: {gap:.4f} bps")
    assert gap < 0.05, "batched and sequential evaluation disagree"
    (seq, seq_c, seq_t), (bat, bat_c, bat_t) = figures["sequential"], figures["batched"]
    print(
        f"candidates/hour: sequential {seq:.0f}, batched {bat:.0f}, ratio {bat / seq:.2f}×; "
        f"compile s/candidate {seq_c:.2f} -> {bat_c:.2f} ({seq_c / bat_c:.2f}× less); "
        f"train s/candidate {seq_t:.2f} -> {bat_t:.2f}"
    )


if __name__ == "__main__":
    main()
