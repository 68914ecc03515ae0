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
    the observation, a deliberate leak) and fixed-size child orders: PPO must recover part
    of the hindsight oracle's edge (the oracle knows every minute's volume, the leak only
    the current one);
(c) real days, honest observations, the preset's child orders (participation by
    default): PPO against TWAP and the best of TWAP, TWAP-POV, VWAP, adaptive VWAP, POV
    and Almgren–Chriss on validation days, and against its own starting point, the action
    prior alone (what training added).

Rungs (b) and (c) train on the training days, select the seed on validation days and
report validation and test days; test days only report.

``--heldout`` holds each symbol out of training in turn and scores PPO on every day of
it (stocks the policy has never seen).

``--headroom`` trains nothing: it asks how much an honest observation can add to the
action prior at all. Hand-made tilts ``logit = prior(obs) + β · z``, with ``z`` one
market feature's normalized value averaged over the last three minutes the observation
holds (volume share, rolling volatility, log return) and β on a grid, are paired with
the prior alone on the same orders; the best tilt per market is chosen on validation
days and reported on test days (a yardstick for what PPO's ``PPO-prior`` could reach).

``--ablation`` trains each configuration of :data:`ABLATION` (the fixes of the learning
issue, one at a time, on top of the old defaults) with and without the leak and prints the
paired differences on validation days (the days designs are chosen on).

``--opd`` measures oracle policy distillation (Fang et al. 2021; the OPD of Qlib's
execution examples): a teacher trained with the leak, then students on honest
observations with the supervision weight λ in 0.1, 1, 10, each paired with plain PPO
(same settings, λ = 0) on the same orders; λ is chosen on validation days and reported on
test days. Two controls: a teacher trained without the leak, distilled the same way
(what it gains, the oracle's information did not bring), and plain PPO with twice the
updates (a teacher and its student train twice the default's).

``--intervals`` measures decision intervals (``env.step_minutes`` 5, 15, 30: the policy
decides every n minutes and a TWAP executor trades its size inside the interval, as in
Qlib's nested execution), each paired with plain PPO, chosen and reported the same way.

``--discrete`` measures discrete action sets (``network.action_multiples``: each minute
the policy picks one of a few multiples of the anchored TWAP prior's child order, a
categorical policy, as OPD's action space in Qlib), each paired with plain PPO, chosen and
reported the same way.

Run from the repository root (2 CPU cores: about 4 minutes for the ladder, 12 for the
ablation at the default preset)::

    python benchmarks/bench_learning.py                    # the ladder, configs/default.yaml
    python benchmarks/bench_learning.py --ablation
    python benchmarks/bench_learning.py --ablation --only participation   # some rows
    python benchmarks/bench_learning.py --heldout
    python benchmarks/bench_learning.py --headroom        # seconds, no training
    python benchmarks/bench_learning.py --opd             # oracle policy distillation
    python benchmarks/bench_learning.py --intervals       # decision intervals
    python benchmarks/bench_learning.py --discrete        # discrete action sets
    python benchmarks/bench_learning.py --config configs/gpu.yaml   # on an accelerator
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from bench_env import machine_description

from llm.designs import library
from llm.validate import load_validated
from serl_jax.cli import parse_command_line
from serl_jax.config import Config, apply_overrides, config_from_dict, load_config
from serl_jax.data import build_episodes, fit_stats, load_minute_bars, split_days
from serl_jax.envs.execution import ExecutionEnv
from serl_jax.envs.market_data import MarketData, trend_market
from serl_jax.experiment import (
    ORACLE,
    TWAP,
    baseline_policies,
    evaluate_policies,
    load_splits,
    resolve_market_path,
    train_policy,
    train_teacher,
)
from serl_jax.metrics import PairedDifference, paired_difference, price_advantage, shortfall
from serl_jax.rl.policy import make_ppo_policy

ROOT = Path(__file__).resolve().parents[1]
OLD_DEFAULTS = ["ppo.group_size=1", "ppo.gae_lambda=0.95", "network.prior_anchor_steps=0"]
FIXED = ["env.child_quantity=fixed"]  # the child order before participation orders
OPD = ["market.mode=static", "loop.llm=none"]  # where oracle policy distillation runs
# (group, label, overrides, teacher: None, "oracle" (trained with the leak) or "honest")
Variant = tuple[str, str, list[str], str | None]
INTERVAL_VARIANTS: tuple[Variant, ...] = tuple(
    ("interval", f"decision every {n} min", ["market.mode=static", f"env.step_minutes={n}"], None)
    for n in (5, 15, 30)
)
DISCRETE_VARIANTS: tuple[Variant, ...] = tuple(
    ("discrete", f"multiples {{{', '.join(f'{m:g}' for m in multiples)}}}",
     ["loop.llm=none", f"network.action_multiples={list(multiples)}"], None)
    for multiples in (
        (0.0, 0.5, 1.0, 1.5, 2.0),  # OPD-like: skip, half, the prior, 1.5x, 2x
        (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0),  # finer
        (0.5, 0.75, 1.0, 1.25, 1.5),  # narrow, never skips
    )
)  # fmt: skip
# (label, overrides, reward program of the design library or None for the default)
ABLATION: tuple[tuple[str, list[str], str | None], ...] = (
    ("old defaults (G=1, λ=0.95, one-step tracking)", [*OLD_DEFAULTS, *FIXED], None),
    ("+ sibling lanes G=8", ["ppo.group_size=8", *OLD_DEFAULTS[1:], *FIXED], None),
    (
        "+ GAE λ=0.99",
        ["ppo.group_size=8", "ppo.gae_lambda=0.99", OLD_DEFAULTS[2], *FIXED],
        None,
    ),
    ("+ anchored prior k=5", FIXED, None),
    ("anchored prior, G=4", ["ppo.group_size=4", *FIXED], None),
    ("anchored prior, G=16", ["ppo.group_size=16", *FIXED], None),
    ("anchored prior, k=2", ["network.prior_anchor_steps=2", *FIXED], None),
    ("anchored prior, k=10", ["network.prior_anchor_steps=10", *FIXED], None),
    ("anchored prior, λ=0.95", ["ppo.gae_lambda=0.95", *FIXED], None),
    ("anchored prior, lr 1e-3", ["ppo.lr=0.001", *FIXED], None),
    ("anchored prior + replayed_shortfall reward", FIXED, "replayed_shortfall"),
    ("old defaults + replayed_shortfall reward", [*OLD_DEFAULTS, *FIXED], "replayed_shortfall"),
    ("+ participation child orders (new default)", [], None),
    ("participation, k=2", ["network.prior_anchor_steps=2"], None),
    ("participation, k=10", ["network.prior_anchor_steps=10"], None),
    ("participation, k=20", ["network.prior_anchor_steps=20"], None),
)


def _cell(d: PairedDifference) -> str:
    return f"{d.value:+6.2f} [{d.low:+6.2f}, {d.high:+6.2f}]"


def _reward(name: str | None):
    if name is None:
        return None
    (design,) = [d for d in library("reward") if d.name == name]
    return load_validated(design.code, "reward")


def _ppo(cfg: Config, env: ExecutionEnv, train, val, teacher=None):
    """Trains PPO (seed chosen on ``val``; distilling ``teacher`` if given, with
    ``ppo.distill_coef``): ``(policy_fn, policy_params)``."""
    trained = train_policy(cfg, env, train, val, progress=False, teacher=teacher)
    prior = cfg.network.prior()
    policy = make_ppo_policy(trained.network, cfg.ppo.normalize_obs, action_prior=prior)
    return policy, trained.policy_params


PRIOR = "prior alone"


def _prior_policy(cfg: Config):
    """PPO's starting point: the action prior alone (``sigmoid`` of its logit), with the
    run's child orders; the paired difference PPO − prior is what training added."""
    prior = cfg.network.prior()

    def policy(policy_params, key, obs, state, env_params):
        return jax.nn.sigmoid(prior(obs))

    return policy


TILT_FEATURES = ("log_return", "rolling_volatility", "volume_share")
TILT_BETAS = (-0.5, -0.2, 0.2, 0.5)
TILT_SLOTS = 3


def _tilt_policy(cfg: Config, feature: int, n_features: int):
    """The prior's logit plus ``β`` (the policy parameter) times market feature
    ``feature``'s normalized value averaged over the last :data:`TILT_SLOTS` slots of the
    observation (layout: 4 private features, then ``lookback`` slots of ``n_features``)."""
    prior, lookback = cfg.network.prior(), cfg.env["lookback"]
    index = jnp.array([4 + (lookback - 1 - j) * n_features + feature for j in range(TILT_SLOTS)])

    def policy(beta, key, obs, state, env_params):
        return jax.nn.sigmoid(prior(obs) + beta * obs[index].mean())

    return policy


def headroom(cfg: Config, markets: list[str]) -> None:
    """Hand-made feature tilts of the prior, paired with the prior alone (shortfall)."""
    env = ExecutionEnv()
    for market in markets:
        splits = load_splits(cfg, market)
        names = list(splits.train.feature_names)
        policies = {PRIOR: (_prior_policy(cfg), None)}
        for feature in TILT_FEATURES:
            for beta in TILT_BETAS:
                policy = _tilt_policy(cfg, names.index(feature), len(names))
                policies[f"{feature} β={beta:+.1f}"] = (policy, jnp.float32(beta))
        chosen = None
        for split in ("val", "test"):
            params = cfg.env_params(MarketData.from_episodes(splits.split(split)))
            results = evaluate_policies(cfg, env, params, policies)
            side = float(params.side)
            base = shortfall(results[PRIOR][1].outcomes(side))
            diffs = {
                name: paired_difference(shortfall(rollout.outcomes(side)), base)
                for name, (_, rollout) in results.items()
                if name != PRIOR
            }
            if split == "val":
                chosen = max(diffs, key=lambda name: diffs[name].value)
                for name, d in diffs.items():
                    print(f"{splits.name:8s} val  n={len(base):3d} | {name:26s} - prior {_cell(d)}")
            print(
                f"{splits.name:8s} {split:4s} n={len(base):3d} | best on validation days: "
                f"{chosen} - prior shortfall {_cell(diffs[chosen])}",
                flush=True,
            )


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
    if leak:  # fixed-size child orders: the rung measures what the learner finds
        cfg = with_overrides(cfg, ["env.diagnostic_volume_leak=true", *FIXED])
    splits = load_splits(cfg, market)
    params = {
        s: cfg.env_params(MarketData.from_episodes(splits.split(s)))
        for s in ("train", "val", "test")
    }
    env = ExecutionEnv()
    t0 = time.perf_counter()
    ppo = _ppo(cfg, env, params["train"], params["val"])
    seconds = time.perf_counter() - t0
    policies = {"PPO": ppo, PRIOR: (_prior_policy(cfg), None), **baseline_policies(cfg)}
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
        learned = paired_difference(
            shortfall(results["PPO"][1].outcomes(side)),
            shortfall(results[PRIOR][1].outcomes(side)),
        )
        line = (
            f"{rungs} {splits.name:8s} {split:4s} n={ppo_metrics.n_orders:3d} "
            f"| PPO-TWAP PA {_cell(pa)} won {pa.win_rate:4.0%} | shortfall {_cell(cost)} "
            f"| oracle PA {oracle_pa.value:+6.2f} shortfall {oracle_cost.value:+5.2f} "
            f"| share of oracle's shortfall edge {share:5.1%} "
            f"| PPO-prior shortfall {_cell(learned)}"
        )
        if not leak:
            baselines = [n for n in results if n not in ("PPO", PRIOR, ORACLE, "Immediate")]
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


def ablation(cfg: Config, markets: list[str], only: str = "") -> None:
    """Prints each configuration of :data:`ABLATION` whose label contains ``only`` on
    validation days, with and without the leak."""
    print(
        f"{'configuration':48s} {'market':8s} {'obs':6s} | {'PPO-TWAP PA (val)':28s} "
        f"| {'shortfall (val)':24s} | time"
    )
    for label, overrides, reward_name in ABLATION:
        if only not in label:
            continue
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


def _episodes(cfg: Config, bars, symbols):
    """``(splits by name, training stats)`` of ``bars`` restricted to ``symbols``, as
    :func:`serl_jax.data.load_market` builds them (stats from the training days)."""
    frame = bars.frame[bars.frame["symbol"].isin(symbols)]
    parts = split_days(bars.with_frame(frame), train=cfg.data.train, val=cfg.data.val)
    stats = fit_stats(parts["train"], vol_window=cfg.data.vol_window)
    return {name: build_episodes(part, stats) for name, part in parts.items()}, stats


def opd_variants(cfg: Config) -> tuple[Variant, ...]:
    """OPD students at λ = 0.1, 1, 10; the same with a teacher trained without the leak;
    plain PPO with twice the preset's updates (a teacher and its student train twice)."""
    return (
        *(
            (group, f"{group} λ={coef:g}", [*OPD, f"ppo.distill_coef={coef}"], kind)
            for group, kind in (("OPD", "oracle"), ("honest teacher", "honest"))
            for coef in (0.1, 1.0, 10.0)
        ),
        (
            "2x updates",
            "PPO, 2x updates",
            [f"ppo.total_timesteps={2 * cfg.ppo.total_timesteps}"],
            None,
        ),
    )


def versus_ppo(cfg: Config, markets: list[str], variants: tuple[Variant, ...]) -> None:
    """Each variant paired with plain PPO (the preset) on the same orders: every variant
    on validation days; per group the variant with the best validation shortfall on test
    days. Teachers are trained once per market and kind."""
    env = ExecutionEnv()
    for market in markets:
        splits = load_splits(cfg, market)
        episodes = {s: MarketData.from_episodes(splits.split(s)) for s in ("train", "val", "test")}
        params = {s: cfg.env_params(data) for s, data in episodes.items()}
        side = float(params["val"].side)
        t0 = time.perf_counter()
        plain = _ppo(cfg, env, params["train"], params["val"])
        print(f"{splits.name:8s} PPO trained | {time.perf_counter() - t0:.0f} s", flush=True)
        teachers, trained = {}, {}
        for group, label, overrides, teacher_kind in variants:
            t0 = time.perf_counter()
            run_cfg = with_overrides(cfg, overrides)
            run_params = {s: run_cfg.env_params(data) for s, data in episodes.items()}
            teacher = None
            if teacher_kind is not None:
                if teacher_kind not in teachers:
                    teachers[teacher_kind], teacher_run = train_teacher(
                        with_overrides(cfg, OPD), env, params["train"], params["val"],
                        oracle=teacher_kind == "oracle", progress=False,
                    )  # fmt: skip
                    print(
                        f"{splits.name:8s} {teacher_kind} teacher: validation shortfall per "
                        f"seed {np.round(teacher_run.validation_shortfall, 2).tolist()} bps",
                        flush=True,
                    )
                teacher = teachers[teacher_kind]
            policy = _ppo(run_cfg, env, run_params["train"], run_params["val"], teacher)
            trained[label] = (group, run_cfg, run_params, policy)
            print(f"{splits.name:8s} {label} trained | {time.perf_counter() - t0:.0f} s")
        chosen = {}
        for split in ("val", "test"):
            base = evaluate_policies(cfg, env, params[split], {"PPO": plain})["PPO"]
            metrics, reference = base[0], base[1].outcomes(side)
            print(
                f"{splits.name:8s} {split:4s} n={metrics.n_orders:3d} | {'PPO':24s} - TWAP "
                f"PA {_cell(metrics.vs_TWAP)} | shortfall {_cell(metrics.shortfall_vs_TWAP)}"
            )
            diffs = {}
            for label, (group, run_cfg, run_params, policy) in trained.items():
                if split == "test" and chosen[group] != label:
                    continue
                _, rollout = evaluate_policies(run_cfg, env, run_params[split], {label: policy})[
                    label
                ]
                outcomes = rollout.outcomes(side)
                diffs[label] = (
                    paired_difference(price_advantage(outcomes), price_advantage(reference)),
                    paired_difference(shortfall(outcomes), shortfall(reference)),
                )
            if split == "val":
                for group in {g for g, *_ in trained.values()}:
                    mine = [label for label, (g, *_) in trained.items() if g == group]
                    chosen[group] = max(mine, key=lambda label: diffs[label][1].value)
            for label, (pa, cost) in diffs.items():
                picked = label in chosen.values()
                print(
                    f"{splits.name:8s} {split:4s} n={metrics.n_orders:3d} | {label:24s} - PPO  "
                    f"PA {_cell(pa)} | shortfall {_cell(cost)}"
                    + (" (chosen on validation days)" if picked else ""),
                    flush=True,
                )


def heldout(cfg: Config, markets: list[str]) -> None:
    """Leave one symbol out: PPO trains on the other symbols (seed chosen on their
    validation days) and is scored on every day of the held-out symbol, whose profile and
    feature statistics come from its own first ``data.train`` days, as
    ``python -m serl_jax.evaluate --split all`` on a user's own stock does. The last line
    per market pools every held-out order (orders resampled independently)."""
    print(f"{'held out':10s} {'orders':>6s} | {'PPO-TWAP PA':33s} | {'shortfall':24s} | time")
    env = ExecutionEnv()
    for market in markets:
        d = cfg.data
        bars = load_minute_bars(
            resolve_market_path(market),
            min_bars_per_day=d.min_bars_per_day,
            short_days=d.short_days,
        )
        pooled = {"PPO": ([], []), TWAP: ([], [])}  # (PA per order, shortfall per order)
        for symbol in bars.symbols:
            others, _ = _episodes(cfg, bars, [s for s in bars.symbols if s != symbol])
            t0 = time.perf_counter()
            ppo = _ppo(
                cfg,
                env,
                cfg.env_params(MarketData.from_episodes(others["train"])),
                cfg.env_params(MarketData.from_episodes(others["val"])),
            )
            frame = bars.frame[bars.frame["symbol"] == symbol]
            _, stats = _episodes(cfg, bars, [symbol])
            every_day = build_episodes(bars.with_frame(frame), stats)
            params = cfg.env_params(MarketData.from_episodes(every_day))
            results = evaluate_policies(
                cfg, env, params, {"PPO": ppo, TWAP: baseline_policies(cfg)[TWAP]}
            )
            for name, (pa, cost) in pooled.items():
                outcomes = results[name][1].outcomes(float(params.side))
                pa.append(price_advantage(outcomes))
                cost.append(shortfall(outcomes))
            metrics = results["PPO"][0]
            pa, cost = metrics.vs_TWAP, metrics.shortfall_vs_TWAP
            print(
                f"{symbol:10s} {metrics.n_orders:6d} | {_cell(pa)} won {pa.win_rate:4.0%} "
                f"| {_cell(cost)} | {time.perf_counter() - t0:.0f} s",
                flush=True,
            )
        (ppo_pa, ppo_cost), (twap_pa, twap_cost) = (
            [np.concatenate(x) for x in pooled[name]] for name in ("PPO", TWAP)
        )
        pa = paired_difference(ppo_pa, twap_pa)
        cost = paired_difference(ppo_cost, twap_cost)
        print(
            f"{'all ' + bars.name:10s} {ppo_pa.size:6d} | {_cell(pa)} won {pa.win_rate:4.0%} "
            f"| {_cell(cost)} |",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "default.yaml"))
    parser.add_argument("--markets", default="sample:cn_1min,sample:us_1min")
    parser.add_argument("--rungs", default="abc", help="any of a, b, c")
    parser.add_argument("--ablation", action="store_true", help="the ablation table instead")
    parser.add_argument(
        "--only", default="", help="ablation rows or variants whose label contains this"
    )
    parser.add_argument(
        "--heldout", action="store_true", help="leave-one-symbol-out evaluation instead"
    )
    parser.add_argument(
        "--headroom", action="store_true", help="hand-made feature tilts of the prior instead"
    )
    parser.add_argument(
        "--opd", action="store_true", help="oracle policy distillation against plain PPO instead"
    )
    parser.add_argument(
        "--intervals", action="store_true", help="decision intervals against plain PPO instead"
    )
    parser.add_argument(
        "--discrete", action="store_true", help="discrete action sets against plain PPO instead"
    )
    parser.add_argument("overrides", nargs="*", metavar="section.key=value")
    args = parse_command_line(parser, None)  # overrides anywhere among the flags
    cfg = load_config(args.config, args.overrides)
    markets = args.markets.split(",")
    print(machine_description())
    print(
        f"preset:  {os.path.relpath(args.config, ROOT)} {' '.join(args.overrides)}: "
        f"{cfg.ppo.num_updates} updates of "
        f"{cfg.ppo.num_envs} x {cfg.ppo.num_steps} steps, {cfg.run.num_seeds} seeds, "
        f"group {cfg.ppo.group_size}, λ {cfg.ppo.gae_lambda}, "
        f"anchor {cfg.network.prior_anchor_steps}, child orders {cfg.env['child_quantity']}"
    )
    print("paired differences on the same orders, bps, [95% bootstrap interval]\n")
    t0 = time.perf_counter()
    if args.ablation:
        ablation(cfg, markets, args.only)
    elif args.heldout:
        heldout(cfg, markets)
    elif args.headroom:
        headroom(cfg, markets)
    elif args.opd or args.intervals or args.discrete:
        variants = opd_variants(cfg) if args.opd else INTERVAL_VARIANTS
        variants = DISCRETE_VARIANTS if args.discrete else variants
        versus_ppo(cfg, markets, tuple(v for v in variants if args.only in v[1]))
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
