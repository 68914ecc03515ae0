"""N execution agents (IPPO or MAPPO) on every market of ``data.markets``
(``python -m serl_jax.train --llm none --agents N``), in the dynamic or hybrid market,
scored per agent and as a team against every agent running TWAP, written to a run
folder."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from llm.validate import SandboxError
from serl_jax.agents_experiment import (
    agents_entry,
    evaluate_agents,
    make_agents_env,
    save_agents_checkpoint,
    train_agents,
)
from serl_jax.config import Config
from serl_jax.data import DataError, MarketSplits
from serl_jax.envs.market_data import MarketData
from serl_jax.experiment import calibrated_market, dynamic_env_params, load_splits
from serl_jax.market.params import MarketParams
from serl_jax.metrics import ExecutionMetrics
from serl_jax.rl.marl import make_marl_policy
from serl_jax.training.programs import validated_program
from serl_jax.training.run_folder import write_run

__all__ = ["run_agents_market", "train_agents_markets"]


def run_agents_market(
    cfg: Config,
    market: MarketParams,
    splits: MarketSplits,
    out_dir: Path,
    progress: bool,
    profile_fn: Callable | None = None,
    communication: Any = None,
) -> tuple[dict[str, Any], dict[tuple[str, str], ExecutionMetrics]]:
    """Trains ``cfg.marl.agents`` agents on one market (in the dynamic market, or with
    ``market.mode`` ``hybrid`` in the static and dynamic markets at once), scores them on
    test days of the dynamic market against every agent running TWAP, and writes the
    checkpoint into ``out_dir``.

    Returns:
        The market's entry of ``metrics.json`` (:func:`serl_jax.agents_experiment.agents_entry`)
        and the table rows (per agent, and the team's in the team scenario).
    """
    env = make_agents_env(cfg, profile_fn)
    static = {
        split: cfg.env_params(MarketData.from_episodes(splits.split(split)))
        for split in ("train", "val", "test")
    }
    params = {
        split: dynamic_env_params(cfg, market, p, splits.stats) for split, p in static.items()
    }
    label = f"{cfg.marl.algorithm.upper()} {splits.name} {cfg.market.mode}"
    trained = train_agents(
        cfg, env, params["train"], params["val"], progress, label, communication,
        static_train_params=static["train"] if cfg.market.mode == "hybrid" else None,
    )  # fmt: skip
    name = f"PPO-{cfg.marl.algorithm}" + ("-comm" if communication is not None else "")
    policy = make_marl_policy(
        trained.network, cfg.ppo.normalize_obs, cfg.network.prior(), communication
    )
    evaluated = evaluate_agents(
        cfg, env, params["test"], {name: (policy, trained.policy_params)}, splits.test.dates
    )
    save_agents_checkpoint(
        out_dir / "checkpoint", cfg, env, params["train"], splits, trained,
        cfg.marl.communication,
    )  # fmt: skip
    rows = {}
    for i in range(cfg.marl.agents):
        for policy_name, result in evaluated.items():
            rows[(f"{splits.name} agent {i}", policy_name)] = result.agents[i]
    if cfg.marl.scenario == "team":
        for policy_name, result in evaluated.items():
            rows[(f"{splits.name} team", policy_name)] = result.team
    return agents_entry(cfg, trained, evaluated, splits.test.n_episodes), rows


def train_agents_markets(
    cfg: Config, config_name: str, quiet: bool, verbose: bool = False, wide: bool = False
) -> int:
    """N agents (IPPO or MAPPO) on every market of ``cfg.data.markets`` (``--llm none
    --agents N``), in the dynamic or hybrid market (``market.mode``); the run folder as
    :func:`serl_jax.training.ppo.train_ppo`'s (``wide``: print every column of the
    results table)."""
    try:
        _, profile_fn = validated_program(cfg.marl.profile, "profiling", "marl.profile")
        _, communication = validated_program(
            cfg.marl.communication, "communication", "marl.communication"
        )
    except (ValueError, SandboxError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        markets = [
            (calibrated_market(cfg, spec), load_splits(cfg, spec)) for spec in cfg.data.markets
        ]
    except (DataError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2

    def run_one(market_params, splits, out_dir):
        return run_agents_market(
            cfg, market_params, splits, out_dir, not quiet, profile_fn, communication
        )

    name = f"{time.strftime('%Y%m%d-%H%M%S')}-{config_name}-agents"
    return write_run(cfg, name, markets, run_one, quiet, verbose, wide)
