"""The learnability ladder, and the ablation of what kept PPO from learning on real bars.

Every comparison is paired: all policies execute the same parent orders (one per
symbol-day) and the tables give the mean of ``x_i - x_i(TWAP)`` with its 95% bootstrap
interval, for PA and for its spread-and-impact part (the shortfall against the replayed
minute prices, :func:`serl_jax.metrics.shortfall`). PA's other part, timing, depends on the
day's price path: it is what makes a paired PA interval wide (``serl_jax.metrics``).

Rungs (``--rungs``, default ``abc``):

(a) a synthetic market with a known trend (+5 bps a minute, constant volume): a seller
    that learns waits; PPO must beat TWAP by tens of bps;
(b) real days with ``env.diagnostic_volume_leak`` (the current minute's true volume in
    the observation, a deliberate leak): PPO must recover part of the hindsight oracle's
    edge (the oracle knows every minute's volume, the leak only the current one);
(c) real days, honest observations: PPO against TWAP and the best of TWAP, VWAP,
    adaptive VWAP, POV and Almgren–Chriss on validation days.

Rungs (b) and (c) train on the training days, select the seed on validation days and
report validation and test days; test days only report.

``--ablation`` trains each configuration of :data:`ABLATION` (the fixes of the learning
issue, one at a time, on top of the old defaults) with and without the leak and prints the
paired differences on validation days (the days designs are chosen on).

Run from the repository root (2 CPU cores: about 4 minutes for the ladder, 12 for the
ablation at the default preset)::

    python benchmarks/bench_learning.py                    # the ladder, configs/default.yaml
    python benchmarks/bench_learning.py --ablation
    python benchmarks/bench_learning.py --config configs/gpu.yaml   # on an accelerator
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from bench_env import machine_description

from llm.designs import library
from llm.validate import load_validated
from serl_jax.config import Config, apply_overrides, config_from_dict, load_config
from serl_jax.envs.execution import ExecutionEnv
from serl_jax.envs.market_data import MarketData, trend_market
from serl_jax.experiment import (
    ORACLE,
    TWAP,
    baseline_policies,
    evaluate_policies,
    load_splits,
    train_policy,
)
from serl_jax.metrics import PairedDifference, paired_difference, price_advantage
from serl_jax.rl.policy import make_ppo_policy

ROOT = Path(__file__).resolve().parents[1]
OLD_DEFAULTS = ["ppo.group_size=1", "ppo.gae_lambda=0.95", "network.prior_anchor_steps=0"]
# (label, overrides, reward program of the design library or None for the default)
ABLATION: tuple[tuple[str, list[str], str | None], ...] = (
    ("old defaults (G=1, λ=0.95, one-step tracking)", OLD_DEFAULTS, None),
    ("+ sibling lanes G=8", ["ppo.group_size=8", *OLD_DEFAULTS[1:]], None),
    ("+ GAE λ=0.99", ["ppo.group_size=8", "ppo.gae_lambda=0.99", OLD_DEFAULTS[2]], None),
    ("+ anchored prior k=5 (new default)", [], None),
    ("new default, G=4", ["ppo.group_size=4"], None),
    ("new default, G=16", ["ppo.group_size=16"], None),
    ("new default, anchor k=2", ["network.prior_anchor_steps=2"], None),
    ("new default, anchor k=10", ["network.prior_anchor_steps=10"], None),
    ("new default, λ=0.95", ["ppo.gae_lambda=0.95"], None),
    ("new default, lr 1e-3", ["ppo.lr=0.001"], None),
    ("new default + replayed_shortfall reward", [], "replayed_shortfall"),
    ("old defaults + replayed_shortfall reward", OLD_DEFAULTS, "replayed_shortfall"),
)


def _cell(d: PairedDifference) -> str:
    return f"{d.value:+6.2f} [{d.low:+6.2f}, {d.high:+6.2f}]"


def _reward(name: str | None):
    if name is None:
        return None
    (design,) = [d for d in library("reward") if d.name == name]
    return load_validated(design.code, "reward")


def _ppo(cfg: Config, env: ExecutionEnv, train, val):
    """Trains PPO (seed chosen on ``val``): ``(policy_fn, policy_params)``."""
    trained = train_policy(cfg, env, train, val, progress=False)
    prior = cfg.network.prior()
    policy = make_ppo_policy(trained.network, cfg.ppo.normalize_obs, action_prior=prior)
    return policy, trained.policy_params


def rung_a(cfg: Config) -> list[str]:
    """PPO on a synthetic day with a known uptrend: sell late."""
    n_slots = 60
    data = trend_market(n_episodes=8, n_slots=n_slots, drift_per_minute=5e-4)
    cfg = with_overrides(
        cfg,
        [
            f"ppo.num_steps={n_slots}",
            f"ppo.total_timesteps={cfg.ppo.num_envs * n_slots * 120}",
            "env.lookback=2",
        ],
    )
    params = cfg.env_params(data)
    env = ExecutionEnv()
    t0 = time.perf_counter()
    ppo = _ppo(cfg, env, params, params)
    metrics, _ = evaluate_policies(cfg, env, params, {"PPO": ppo})["PPO"]
    pa, cost = metrics.vs_TWAP, metrics.shortfall_vs_TWAP
    return [
        f"(a) synthetic uptrend ({n_slots} min, +5 bps/min, 8 identical days) | "
        f"PPO-TWAP PA {_cell(pa)} | "
        f"shortfall {_cell(cost)} | {time.perf_counter() - t0:.0f} s"
    ]


def rung_real(cfg: Config, market: str, leak: bool) -> list[str]:
    """Rungs (b) (``leak``) and (c) on one market: PPO and the baselines, paired with TWAP."""
    if leak:
        cfg = with_overrides(cfg, ["env.diagnostic_volume_leak=true"])
    splits = load_splits(cfg, market)
    params = {
        s: cfg.env_params(MarketData.from_episodes(splits.split(s)))
        for s in ("train", "val", "test")
    }
    env = ExecutionEnv()
    t0 = time.perf_counter()
    ppo = _ppo(cfg, env, params["train"], params["val"])
    seconds = time.perf_counter() - t0
    policies = {"PPO": ppo, **baseline_policies(cfg)}
    side = float(params["val"].side)
    rungs = "(b) leak " if leak else "(c) honest"
    lines = []
    best_baseline = None
    for split in ("val", "test"):
        results = evaluate_policies(cfg, env, params[split], policies)
        ppo_metrics = results["PPO"][0]
        pa, cost = ppo_metrics.vs_TWAP, ppo_metrics.shortfall_vs_TWAP
        oracle_pa, oracle_cost = (
            results[ORACLE][0].vs_TWAP,
            results[ORACLE][0].shortfall_vs_TWAP,
        )
        share = cost.value / oracle_cost.value if oracle_cost.value > 0 else float("nan")
        line = (
            f"{rungs} {splits.name:8s} {split:4s} n={ppo_metrics.n_orders:3d} "
            f"| PPO-TWAP PA {_cell(pa)} won {pa.win_rate:4.0%} | shortfall {_cell(cost)} "
            f"| oracle PA {oracle_pa.value:+6.2f} shortfall {oracle_cost.value:+5.2f} "
            f"| share of oracle's shortfall edge {share:5.1%}"
        )
        if not leak:
            baselines = [n for n in results if n not in ("PPO", ORACLE, "Immediate")]
            if split == "val":  # the best baseline is chosen on validation days
                best_baseline = max(baselines, key=lambda n: results[n][0].PA.value)
            line += f" | best baseline on validation days: {best_baseline}"
            if best_baseline != TWAP:
                vs_best = paired_difference(
                    price_advantage(results["PPO"][1].outcomes(side)),
                    price_advantage(results[best_baseline][1].outcomes(side)),
                )
                line += f", PPO-{best_baseline} PA {_cell(vs_best)}"
        lines.append(line)
    lines.append(
        f"    ({seconds:.0f} s training, {cfg.ppo.num_updates} updates x {cfg.run.num_seeds} seeds)"
    )
    return lines


def with_overrides(cfg: Config, overrides: list[str]) -> Config:
    """``cfg`` with ``section.key=value`` overrides applied."""
    return config_from_dict(apply_overrides(cfg.to_dict(), overrides))


def ablation(cfg: Config, markets: list[str]) -> None:
    """Prints each configuration of :data:`ABLATION` on validation days, with and without
    the leak."""
    print(
        f"{'configuration':48s} {'market':8s} {'obs':6s} | {'PPO-TWAP PA (val)':28s} "
        f"| {'shortfall (val)':24s} | time"
    )
    for label, overrides, reward_name in ABLATION:
        env = ExecutionEnv(_reward(reward_name)) if reward_name else ExecutionEnv()
        for market in markets:
            for leak in (False, True):
                extra = ["env.diagnostic_volume_leak=true"] if leak else []
                run_cfg = with_overrides(cfg, overrides + extra)
                splits = load_splits(run_cfg, market)
                train = run_cfg.env_params(MarketData.from_episodes(splits.train))
                val = run_cfg.env_params(MarketData.from_episodes(splits.val))
                t0 = time.perf_counter()
                ppo = _ppo(run_cfg, env, train, val)
                seconds = time.perf_counter() - t0
                metrics, _ = evaluate_policies(run_cfg, env, val, {"PPO": ppo})["PPO"]
                pa, cost = metrics.vs_TWAP, metrics.shortfall_vs_TWAP
                print(
                    f"{label:48s} {splits.name:8s} {'leak' if leak else 'honest':6s} "
                    f"| {_cell(pa)} won {pa.win_rate:4.0%} | {_cell(cost)} | {seconds:.0f} s",
                    flush=True,
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "default.yaml"))
    parser.add_argument("--markets", default="sample:cn_1min,sample:us_1min")
    parser.add_argument("--rungs", default="abc", help="any of a, b, c")
    parser.add_argument("--ablation", action="store_true", help="the ablation table instead")
    parser.add_argument("overrides", nargs="*", metavar="section.key=value")
    args = parser.parse_args()
    cfg = load_config(args.config, args.overrides)
    markets = args.markets.split(",")
    print(machine_description())
    print(
        f"preset:  {os.path.relpath(args.config, ROOT)} {' '.join(args.overrides)}: "
        f"{cfg.ppo.num_updates} updates of "
        f"{cfg.ppo.num_envs} x {cfg.ppo.num_steps} steps, {cfg.run.num_seeds} seeds, "
        f"group {cfg.ppo.group_size}, λ {cfg.ppo.gae_lambda}, "
        f"anchor {cfg.network.prior_anchor_steps}"
    )
    print("paired differences on the same orders, bps, [95% bootstrap interval]\n")
    t0 = time.perf_counter()
    if args.ablation:
        ablation(cfg, markets)
    else:
        if "a" in args.rungs:
            print("\n".join(rung_a(cfg)), flush=True)
        for rung, leak in (("b", True), ("c", False)):
            if rung in args.rungs:
                for market in markets:
                    print("\n".join(rung_real(cfg, market, leak)), flush=True)
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
