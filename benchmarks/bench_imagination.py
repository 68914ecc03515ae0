"""Imagined training days (LLM4Imagine's mixed sampling): does training on them help?

For each market, PPO trains in the static market (the market the SE-RL loop scores in)
once on real days only (``imagine.ratio = 0``) and once per library imagination program
with ``imagine.ratio`` of the episodes on imagined days (default 0.5, the seeds' value).
Everything else is the preset's: the same seeds, budget, network and reward.

Every comparison is paired on the same orders (one per symbol-day) with a 95% bootstrap
interval: each program against ratio 0 and against TWAP, for PA and for its
spread-and-impact part (shortfall, what ``loop.score`` ranks by). The program is chosen
on validation days by the paired shortfall against ratio 0; test days only report the
chosen program. The intervals cover the orders' noise, not the training seeds' (each
configuration trains ``run.num_seeds`` seeds and keeps the best on validation days).

Run from the repository root (2 CPU cores, default preset: about 10 minutes)::

    python benchmarks/bench_imagination.py
    python benchmarks/bench_imagination.py --config configs/gpu.yaml   # on an accelerator
"""

from __future__ import annotations

import argparse
import time

from bench_env import machine_description

from llm.designs import library
from llm.validate import load_validated, validate
from serl_jax.config import Config, apply_overrides, config_from_dict, load_config
from serl_jax.envs.execution import ExecutionEnv
from serl_jax.envs.market_data import MarketData
from serl_jax.experiment import evaluate_policies, load_splits, make_imagination, train_policy
from serl_jax.metrics import PairedDifference, paired_difference, price_advantage, shortfall
from serl_jax.rl.mixed_sampling import imagined_share
from serl_jax.rl.policy import make_ppo_policy

REAL_ONLY = "ratio 0"
LABEL, CELL = 24, 23  # column widths: a program's label, one paired difference


def _cell(d: PairedDifference) -> str:
    return f"{d.value:+6.2f} [{d.low:+6.2f}, {d.high:+6.2f}]"


def _programs(cfg: Config) -> dict[str, object]:
    """The library's imagination programs, each validated with ``cfg``'s bounds."""
    programs = {}
    for design in library("imagination"):
        verdict = validate(design.code, "imagination", bounds=cfg.imagine.bounds())
        if not verdict.ok:
            raise SystemExit(f"{design.name} rejected: {verdict.reason}")
        programs[design.name] = load_validated(design.code, "imagination")
    return programs


def _train(cfg: Config, splits, imagine_fn):
    env = ExecutionEnv()
    train = cfg.env_params(MarketData.from_episodes(splits.train))
    val = cfg.env_params(MarketData.from_episodes(splits.val))
    imagination = make_imagination(cfg, imagine_fn, splits.stats)
    trained = train_policy(cfg, env, train, val, progress=False, imagination=imagination)
    prior = cfg.network.prior()
    policy = make_ppo_policy(trained.network, cfg.ppo.normalize_obs, action_prior=prior)
    return policy, trained.policy_params


def _scores(cfg: Config, splits, split: str, policies: dict) -> dict[str, tuple]:
    """Per policy: ``(metrics, per-order PA, per-order shortfall)`` on ``split``."""
    env = ExecutionEnv()
    params = cfg.env_params(MarketData.from_episodes(splits.split(split)))
    side = float(params.side)
    out = {}
    for name, (metrics, rollout) in evaluate_policies(cfg, env, params, policies).items():
        outcomes = rollout.outcomes(side)
        out[name] = (metrics, price_advantage(outcomes), shortfall(outcomes))
    return out


def _row(label: str, scores: dict, name: str, n_boot: int) -> str:
    metrics, pa, cost = scores[name]
    _, pa0, cost0 = scores[REAL_ONLY]
    vs_real = paired_difference(pa, pa0, n_bootstrap=n_boot)
    cost_vs_real = paired_difference(cost, cost0, n_bootstrap=n_boot)
    return (
        f"{label:{LABEL}s} | {_cell(vs_real)} | {_cell(cost_vs_real)} | "
        f"{_cell(metrics.vs_TWAP)} | {_cell(metrics.shortfall_vs_TWAP)}"
    )


def run_market(cfg: Config, market: str, programs: dict) -> None:
    splits = load_splits(cfg, market)
    share = imagined_share(splits.train.n_episodes, cfg.imagine.ratio)
    print(
        f"\n[{splits.name}] {splits.train.n_episodes} training, {splits.val.n_episodes} "
        f"validation, {splits.test.n_episodes} test orders; imagine.ratio "
        f"{cfg.imagine.ratio} ({share:.1%} of episodes imagined)"
    )
    policies, seconds = {}, {}
    for name, fn in [(REAL_ONLY, None), *programs.items()]:
        t0 = time.perf_counter()
        policies[name] = _train(cfg, splits, fn)
        seconds[name] = time.perf_counter() - t0
    n_boot = cfg.eval.n_bootstrap
    columns = ("PA - ratio 0", "shortfall - ratio 0", "PA - TWAP", "shortfall - TWAP")
    header = " | ".join([f"{'':{LABEL}s}", *(f"{c:{CELL}s}" for c in columns)])
    val = _scores(cfg, splits, "val", policies)
    print(f"validation days (bps, paired, 95% CI); training seconds in brackets\n{header}")
    for name in policies:
        print(_row(f"{name} ({seconds[name]:.0f} s)", val, name, n_boot))
    cost0 = val[REAL_ONLY][2]
    best = max(programs, key=lambda n: paired_difference(val[n][2], cost0, n_bootstrap=0).value)
    test = _scores(cfg, splits, "test", {REAL_ONLY: policies[REAL_ONLY], best: policies[best]})
    print(f"test days: the program chosen on validation days ({best})\n{header}")
    print(_row(REAL_ONLY, test, REAL_ONLY, n_boot))
    print(_row(best, test, best, n_boot), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/default.yaml", help="YAML preset")
    parser.add_argument(
        "--markets", nargs="*", default=None, help="markets (default: the preset's data.markets)"
    )
    parser.add_argument("--ratio", type=float, default=None, help="imagine.ratio (default 0.5)")
    args = parser.parse_args()
    cfg = load_config(args.config, ["market.mode=static"])
    if args.ratio is not None:
        cfg = config_from_dict(apply_overrides(cfg.to_dict(), [f"imagine.ratio={args.ratio}"]))
    print(machine_description())
    print(
        f"preset {args.config}: {cfg.ppo.num_updates} updates x {cfg.ppo.num_envs} episodes x "
        f"{cfg.run.num_seeds} seeds, static market"
    )
    programs = _programs(cfg)
    for market in args.markets or cfg.data.markets:
        run_market(cfg, market, programs)


if __name__ == "__main__":
    main()
