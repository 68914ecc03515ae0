"""``python -m serl_jax.train``: train PPO execution agents on real minute bars.

For each market of the config (by default the shipped A-share and US samples): load and
validate the data, split each symbol's days chronologically, train ``run.num_seeds`` PPO
policies in parallel on the training days, keep the best on validation days, and compare
it with TWAP, VWAP and Almgren–Chriss on the test days. Prints the results table and
writes a run folder::

    runs/<time>-<preset>/
        config.yaml  metrics.json  results.txt
        <market>/checkpoint/{policy.msgpack, policy.json}
        <market>/{training_curve, trajectories, pa_distribution}.png

The folder is assembled under ``runs/.<name>.incomplete`` and renamed when complete, so
a run folder without that prefix is always whole.

Usage::

    python -m serl_jax.train [--config configs/default.yaml] [--data PATH] [--out DIR]
                             [--seed N] [--quiet] [section.key=value ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from serl_jax.config import ACTION_PRIORS, Config, ConfigError, load_config
from serl_jax.data import DataError, MarketSplits, load_market, sample_path
from serl_jax.envs.execution import ExecutionEnv
from serl_jax.envs.market_data import MarketData
from serl_jax.experiment import baseline_policies, evaluate_policies, train_policy
from serl_jax.metrics import ExecutionMetrics, format_table, price_advantage
from serl_jax.plots import plot_pa_distribution, plot_training_curve, plot_trajectories
from serl_jax.rl.checkpoint import save_policy
from serl_jax.rl.policy import make_ppo_policy

SAMPLE_PREFIX = "sample:"


def resolve_market_path(spec: str) -> Path:
    """``sample:<name>`` to the shipped sample's folder; anything else is a path."""
    if spec.startswith(SAMPLE_PREFIX):
        return sample_path(spec[len(SAMPLE_PREFIX) :])
    return Path(spec)


def load_splits(cfg: Config, spec: str) -> MarketSplits:
    """Loads one market with the config's data settings (raises ``DataError``)."""
    d = cfg.data
    return load_market(
        resolve_market_path(spec),
        train=d.train,
        val=d.val,
        min_bars_per_day=d.min_bars_per_day,
        short_days=d.short_days,
        vol_window=d.vol_window,
    )


def run_market(
    cfg: Config, splits: MarketSplits, out_dir: Path, progress: bool
) -> tuple[dict[str, Any], dict[str, ExecutionMetrics]]:
    """Trains, selects and evaluates on one market; writes its artifacts into ``out_dir``.

    Returns:
        The market's entry of ``metrics.json`` and the test metrics per policy.
    """
    env = ExecutionEnv()
    train_params = cfg.env_params(MarketData.from_episodes(splits.train))
    val_params = cfg.env_params(MarketData.from_episodes(splits.val))
    test_params = cfg.env_params(MarketData.from_episodes(splits.test))
    trained = train_policy(
        cfg, env, train_params, val_params, progress=progress, description=f"PPO {splits.name}"
    )
    policies = {
        "PPO": (
            make_ppo_policy(
                trained.network,
                cfg.ppo.normalize_obs,
                action_prior=ACTION_PRIORS[cfg.network.action_prior],
            ),
            trained.policy_params,
        ),
        **baseline_policies(cfg),
    }
    results = evaluate_policies(cfg, env, test_params, policies)

    out_dir.mkdir(parents=True, exist_ok=True)
    obs_size = env.observation_size(train_params)
    save_policy(
        out_dir / "checkpoint",
        trained.policy_params,
        {
            "config": cfg.to_dict(),
            "obs_size": obs_size,
            "market": splits.name,
            "selected_seed": trained.selected_seed,
            "validation_pa": trained.validation_pa.tolist(),
            "feature_names": list(splits.train.feature_names),
        },
    )
    plot_training_curve(trained.curves, trained.selected_seed, out_dir / "training_curve.png")
    n_plot = min(cfg.eval.plot_days, splits.test.n_episodes)
    plot_days = np.linspace(0, splits.test.n_episodes - 1, n_plot).astype(int)
    plot_trajectories(
        {name: np.asarray(r.remaining)[plot_days] for name, (_, r) in results.items()},
        [f"{splits.test.symbols[i]} {splits.test.dates[i]}" for i in plot_days],
        out_dir / "trajectories.png",
    )
    side = float(test_params.side)
    plot_pa_distribution(
        {name: price_advantage(r.outcomes(side)) for name, (_, r) in results.items()},
        out_dir / "pa_distribution.png",
    )
    steps_per_second = trained.env_steps / max(trained.train_seconds, 1e-9)
    return {
        "data": {
            "symbols": sorted(set(splits.train.symbols)),
            "slots_per_day": splits.train.n_slots,
            "episodes": {
                "train": splits.train.n_episodes,
                "val": splits.val.n_episodes,
                "test": splits.test.n_episodes,
            },
            "test_days": sorted({str(d) for d in splits.test.dates}),
            "load_report": splits.report.summary(),
        },
        "selection": {
            "selected_seed": trained.selected_seed,
            "validation_pa_per_seed": trained.validation_pa.tolist(),
        },
        "timing": {
            "compile_seconds": trained.compile_seconds,
            "train_seconds": trained.train_seconds,
            "env_steps": trained.env_steps,
            "env_steps_per_second": steps_per_second,
        },
        "policies": {name: m.to_dict() for name, (m, _) in results.items()},
    }, {name: m for name, (m, _) in results.items()}


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the process exit code (0 ok, 2 bad input)."""
    parser = argparse.ArgumentParser(
        prog="python -m serl_jax.train", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--config", help="YAML preset (default: built-in defaults)")
    parser.add_argument("--data", help="one dataset (folder or file) instead of the samples")
    parser.add_argument("--out", help="parent folder of run folders (default: run.out)")
    parser.add_argument("--seed", type=int, help="master seed (default: run.seed)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    parser.add_argument("overrides", nargs="*", metavar="section.key=value")
    args = parser.parse_args(argv)

    overrides = list(args.overrides)
    if args.seed is not None:
        overrides.append(f"run.seed={args.seed}")
    if args.out is not None:
        overrides.append(f"run.out={json.dumps(args.out)}")
    if args.data is not None:
        overrides.append(f"data.markets=[{json.dumps(args.data)}]")
    try:
        cfg = load_config(args.config, overrides)
        markets = [load_splits(cfg, spec) for spec in cfg.data.markets]
    except (ConfigError, DataError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2

    preset = Path(args.config).stem if args.config else "default"
    name = f"{time.strftime('%Y%m%d-%H%M%S')}-{preset}"
    out_root = Path(cfg.run.out)
    staging = out_root / f".{name}.incomplete"
    staging.mkdir(parents=True, exist_ok=False)
    (staging / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))

    report: dict[str, Any] = {"run": name, "markets": {}}
    table_rows = {}
    for splits in markets:
        if not args.quiet:
            print(f"[{splits.name}] {splits.report.summary()}", file=sys.stderr)
        entry, test_metrics = run_market(
            cfg, splits, staging / splits.name, progress=not args.quiet
        )
        for policy, metrics in test_metrics.items():
            table_rows[(splits.name, policy)] = metrics
        report["markets"][splits.name] = entry

    table = format_table(table_rows)
    (staging / "metrics.json").write_text(json.dumps(report, indent=2, allow_nan=False))
    (staging / "results.txt").write_text(table + "\n")
    final = out_root / name
    staging.rename(final)
    print(table)
    print(f"run folder: {final}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
