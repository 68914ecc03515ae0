"""``python -m serl_jax.evaluate``: score policies on any dataset in the loader's format.

Each policy executes one whole-day parent order per symbol-day of the chosen split:

* ``test`` (default): the test days of the training symbols, with the dataset's
  chronological split (``data.train``, ``data.val``); VWAP volume profiles, Almgren–Chriss
  σ, the order sizes and the feature normalization come from its training days;
* ``heldout``: the test days of the symbols ``data.heldout_symbols`` (or
  ``data.heldout_fraction``) holds out, statistics as for ``test``;
* ``all``: every day of the dataset, one day or a thousand, no split at all. The
  statistics are then fitted on the scored days themselves (in-sample: VWAP's profile and
  the order sizes know these days' volume), which the output says.

Intervals cluster orders by day (:mod:`serl_jax.metrics.inference`): the table's footer
names the method and the number of days.

Usage::

    python -m serl_jax.evaluate --data PATH
                                [--policy twap|vwap|avwap|pov|ac|immediate|oracle|optimal
                                          |CHECKPOINT ...]
                                [--env static|dynamic|propagator] [--split test|heldout|all]
                                [--config FILE] [--json] [--wide] [--verbose]
                                [section.key=value ...]

Overrides may stand anywhere among the flags (:func:`serl_jax.cli.parse_command_line`).
The table fits 120 columns (:func:`serl_jax.metrics.format_table`: columns the same on
every row are named under it instead); ``--wide`` prints every column.

``--env dynamic`` runs the orders through the dynamic market ``market.simulator`` names:
the simulated order-book market (:mod:`serl_jax.market`) with the calibrated parameters
of ``market.params`` (``auto``: the shipped ``configs/market/<sample>.yaml`` of a
``sample:<name>`` dataset), or the propagator market (:mod:`serl_jax.market.propagator`,
section ``impact``; ``--env propagator`` chooses it), so the orders move prices;
``immediate`` (the whole order at once) is the impact reference. In the propagator market
``optimal`` is each day's optimal schedule: the closed form of a linear market with
constant liquidity (``impact.delta=1 impact.liquidity=constant``,
:mod:`serl_jax.baselines.optimal`), else the numerical minimizer of the expected cost
(:mod:`serl_jax.baselines.static_optimum`), shown as ``optimal static`` where the market
uses each minute's realized volume (the default), which no schedule fixed before the day
knows.

With a checkpoint, the environment settings it was trained with are used (so the
observation matches the network) unless overridden. Every policy but TWAP is compared
with TWAP on the same orders (TWAP is rolled out for it even when not asked for).
``--json`` prints one JSON object per policy (one per line) with keys ``policy, PA,
PA_std, WR, GLR, AFI, n_orders, interval`` and, for every policy but TWAP, ``vs_TWAP``
and ``shortfall_vs_TWAP`` (``{"value", "ci_low", "ci_high", "win_rate", "mde"}``, bps).
Exit codes: 0 ok, 2 bad input (one-line error on stderr).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from llm.validate import load_validated
from serl_jax.baselines.optimal import schedule_policy
from serl_jax.baselines.static_optimum import optimal_label, optimal_targets
from serl_jax.cli import add_wide_flag, parse_command_line
from serl_jax.config import (
    ConfigError,
    apply_overrides,
    config_from_dict,
    load_config,
    saved_network_config,
)
from serl_jax.data import DataError, build_episodes, fit_stats, load_minute_bars
from serl_jax.envs.market_data import MarketData
from serl_jax.envs.propagator import PropagatorEnvParams
from serl_jax.experiment import (
    ORACLE,
    TWAP_POV,
    baseline_policies,
    calibrated_market,
    dynamic_env_params,
    evaluate_policies,
    load_splits,
    make_env,
    resolve_market_path,
)
from serl_jax.metrics import format_table
from serl_jax.rl.checkpoint import CheckpointError, load_policy
from serl_jax.rl.policy import make_ppo_policy

BASELINES = {
    "twap": "TWAP",
    "vwap": "VWAP",
    "avwap": "adaptive VWAP",
    "twap-pov": TWAP_POV,
    "pov": "POV",
    "ac": "AC",
    "immediate": "Immediate",
    "oracle": ORACLE,
}
OPTIMAL = "optimal"
"""``--policy optimal``: each day's optimal schedule of the propagator market
(:func:`serl_jax.baselines.static_optimum.optimal_targets`)."""


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the process exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m serl_jax.evaluate", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--data", required=True, help="dataset folder/file, or sample:<name>")
    parser.add_argument(
        "--policy",
        action="append",
        help="twap, twap-pov (TWAP with participation child orders), vwap, avwap (adaptive "
        "VWAP), pov, ac, immediate, oracle (hindsight, not achievable), optimal (the "
        "propagator market's optimal schedule) or a checkpoint folder; repeatable (default: twap, "
        "twap-pov, vwap, avwap, pov, ac, oracle)",
    )
    parser.add_argument(
        "--env",
        choices=("static", "dynamic", "propagator"),
        default="static",
        help="static (replayed bars, default), dynamic (market.simulator's market) or "
        "propagator (market.simulator=propagator)",
    )
    parser.add_argument(
        "--split",
        choices=("test", "heldout", "all"),
        default="test",
        help="test days of the training symbols (default), test days of the held-out "
        "symbols (data.heldout_symbols), or every day (statistics fitted on them)",
    )
    parser.add_argument("--config", help="YAML preset for env/eval settings")
    parser.add_argument("--json", action="store_true", help="JSON lines instead of a table")
    add_wide_flag(parser)
    parser.add_argument("--verbose", action="store_true", help="the load report per symbol")
    parser.add_argument("overrides", nargs="*", metavar="section.key=value")
    args = parse_command_line(parser, argv)
    try:
        return _evaluate(args)
    except (ConfigError, DataError, CheckpointError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def _evaluate(args: argparse.Namespace) -> int:
    specs = args.policy or ["twap", "twap-pov", "vwap", "avwap", "pov", "ac", "oracle"]
    checkpoints = [s for s in specs if s.lower() not in (*BASELINES, OPTIMAL)]
    loaded = [load_policy(Path(s), define=load_validated) for s in checkpoints]
    if args.config is None and loaded:
        # The first checkpoint's training config sets the env (observation layout).
        cfg = config_from_dict(apply_overrides(loaded[0][2]["config"], args.overrides))
    else:
        cfg = load_config(args.config, args.overrides)

    d = cfg.data
    if args.split == "all":
        bars = load_minute_bars(
            resolve_market_path(args.data),
            min_bars_per_day=d.min_bars_per_day,
            short_days=d.short_days,
        )
        name, report = bars.name, bars.report
        stats = fit_stats(bars, vol_window=d.vol_window)
        episodes = build_episodes(bars, stats)
    else:
        splits = load_splits(cfg, args.data)
        name, report, stats = splits.name, splits.report, splits.stats
        episodes = splits.split(args.split)
    log = [f"[{name}] {report.summary(verbose=args.verbose)}"]
    if args.split == "all":
        log.append(
            f"[{name}] --split all: {episodes.n_episodes} orders on "
            f"{len(set(episodes.dates))} day(s); statistics fitted on these days themselves "
            "(in-sample: VWAP's profile and the order sizes know their volume)"
        )
    env_params = cfg.env_params(MarketData.from_episodes(episodes))
    if args.env == "propagator":
        cfg = dataclasses.replace(
            cfg, market=dataclasses.replace(cfg.market, simulator="propagator")
        )
    if args.env != "static":
        market = calibrated_market(cfg, args.data)
        env_params = dynamic_env_params(cfg, market, env_params, stats)
    env = make_env(env_params)

    baselines = baseline_policies(cfg)
    policies = {}
    for spec in specs:
        if spec.lower() == "oracle" and args.env != "static":
            raise ValueError(
                "--policy oracle: the hindsight oracle bounds the static market's cost model; "
                "the dynamic market's volumes are simulated"
            )
        if spec.lower() == OPTIMAL:
            if not isinstance(env_params, PropagatorEnvParams):
                raise ValueError(
                    "--policy optimal: known in the propagator market only (--env propagator)"
                )
            targets = optimal_targets(cfg.impact, env_params)
            policies[optimal_label(cfg.impact)] = (schedule_policy, targets)
            continue
        if spec.lower() in BASELINES:
            baseline = BASELINES[spec.lower()]
            policies[baseline] = baselines[baseline]
            continue
        network, params, meta = loaded[checkpoints.index(spec)]
        if meta["obs_size"] != env.observation_size(env_params):
            raise CheckpointError(
                f"{spec}: policy expects observations of size {meta['obs_size']}, this "
                f"dataset and env config give {env.observation_size(env_params)} "
                "(env.lookback or the features differ)"
            )
        saved = meta["config"]
        # Checkpoints written before participation child orders sent fixed-size ones.
        trained_with = saved["env"].get("child_quantity", "fixed")
        if trained_with != env_params.child_quantity:
            raise CheckpointError(
                f"{spec}: policy trained with env.child_quantity={trained_with}, this "
                f"evaluation uses {env_params.child_quantity} (pass "
                f"env.child_quantity={trained_with})"
            )
        trained_with = saved["env"].get("step_minutes", 1)
        if trained_with != env_params.step_minutes:
            raise CheckpointError(
                f"{spec}: policy trained with env.step_minutes={trained_with}, this "
                f"evaluation uses {env_params.step_minutes} (pass "
                f"env.step_minutes={trained_with})"
            )
        policy = make_ppo_policy(
            network,
            saved["ppo"]["normalize_obs"],
            action_prior=saved_network_config(saved).prior(),
        )
        policies[f"PPO:{spec}"] = (policy, params)

    # every input is checked by now: a bad one left a single error line
    print("\n".join(log), file=sys.stderr)
    results = evaluate_policies(cfg, env, env_params, policies, days=episodes.dates)
    market = name or Path(args.data).stem
    if args.json:
        for name, (metrics, _) in results.items():
            print(json.dumps({"policy": name, **metrics.to_dict()}, allow_nan=False))
    else:
        label = f"{market} {args.env}"
        rows = {(label, name): m for name, (m, _) in results.items()}
        print(format_table(rows, wide=args.wide))
    return 0


if __name__ == "__main__":
    sys.exit(main())
