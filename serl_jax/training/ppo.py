"""Plain PPO on every market of ``data.markets`` (``python -m serl_jax.train --llm
none``): PPO trained in the static, dynamic or hybrid market (``market.mode``), or by
policy distillation (``ppo.distill_coef``), compared with the baselines on test days in
both markets, and written to a run folder."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np

from llm.validate import SandboxError
from serl_jax.config import Config
from serl_jax.data import DataError, MarketSplits
from serl_jax.envs.execution import ExecutionEnv
from serl_jax.envs.market_data import MarketData
from serl_jax.experiment import (
    ORACLE,
    DynamicMarket,
    baseline_policies,
    calibrated_market,
    dynamic_env_params,
    evaluate_policies,
    load_splits,
    make_env,
    make_imagination,
    score_reward,
    selection_entry,
    train_policy,
    train_teacher,
)
from serl_jax.metrics import ExecutionMetrics, price_advantage
from serl_jax.plots import plot_pa_distribution, plot_training_curve, plot_trajectories
from serl_jax.rl.checkpoint import save_policy
from serl_jax.rl.mixed_sampling import Imagination, imagined_share
from serl_jax.rl.policy import make_ppo_policy
from serl_jax.rl.sharding import start_processes
from serl_jax.training.programs import imagination_program
from serl_jax.training.run_folder import write_run

__all__ = ["run_market", "train_ppo"]


def _finite_or_none(x) -> float | None:
    return float(x) if np.isfinite(x) else None


def _ppo_policy(cfg: Config, trained) -> tuple[Any, Any]:
    policy = make_ppo_policy(
        trained.network, cfg.ppo.normalize_obs, action_prior=cfg.network.prior()
    )
    return policy, trained.policy_params


def run_market(
    cfg: Config,
    market: DynamicMarket | None,
    splits: MarketSplits,
    out_dir: Path,
    progress: bool,
    imagination: Imagination | None = None,
) -> tuple[dict[str, Any], dict[str, dict[str, ExecutionMetrics]]]:
    """Trains, selects and evaluates on one market; writes its artifacts into ``out_dir``.

    ``market.mode`` picks where the policy ``PPO`` trains: the static market, the
    dynamic one, or both at once (hybrid, :func:`serl_jax.rl.hybrid.make_hybrid_trainer`).
    Outside the static mode a ``PPO-static`` policy is trained too, and every policy is
    scored in both markets, so the cost of ignoring impact is visible.

    Args:
        market: the dynamic market (:data:`serl_jax.experiment.DynamicMarket`); None (only
            in the static mode, for data without calibrated parameters) scores the
            policies in the static market only.
        imagination: mixed sampling of imagined training days for every PPO policy
            trained here (:func:`serl_jax.experiment.make_imagination`); ``None``: real
            days only.

    Returns:
        The market's entry of ``metrics.json`` and the test metrics per market
        (``static``, ``dynamic``) and policy.
    """
    mode = cfg.market.mode
    reward_fn = score_reward(cfg)  # the objective the seeds are kept by
    static_env = ExecutionEnv(reward_fn)
    params = {
        split: cfg.env_params(MarketData.from_episodes(splits.split(split)))
        for split in ("train", "val", "test")
    }
    dynamic = (
        {}
        if market is None
        else {
            split: dynamic_env_params(cfg, market, p, splits.stats) for split, p in params.items()
        }
    )
    label = f"PPO {splits.name}"
    trained_static = None
    distillation = None  # the metrics.json entry of a distillation teacher
    if mode != "static":
        trained_static = train_policy(
            cfg,
            static_env,
            params["train"],
            params["val"],
            progress=progress,
            description=f"{label} static",
            imagination=imagination,
        )
    if mode == "hybrid":
        trained = train_policy(
            cfg,
            static_env,
            params["train"],
            params["val"],
            progress=progress,
            description=f"{label} hybrid",
            dynamic=(make_env(dynamic["train"], reward_fn), dynamic["train"]),
            hybrid=cfg.market.hybrid_config(),
            imagination=imagination,
        )
    elif mode == "dynamic":
        trained = train_policy(
            cfg,
            make_env(dynamic["train"], reward_fn),
            dynamic["train"],
            dynamic["val"],
            progress=progress,
            description=f"{label} dynamic",
            imagination=imagination,
        )
    else:
        teacher = None
        if cfg.ppo.distill_coef > 0:  # policy distillation: the teacher first
            teacher, trained_teacher = train_teacher(
                cfg, static_env, params["train"], params["val"],
                oracle=cfg.ppo.distill_teacher == "oracle", progress=progress,
            )  # fmt: skip
            distillation = {
                "distill_coef": cfg.ppo.distill_coef,
                "distill_teacher": cfg.ppo.distill_teacher,
                "teacher": selection_entry(cfg, trained_teacher),
                "teacher_env_steps": trained_teacher.env_steps,
            }
        trained = train_policy(
            cfg, static_env, params["train"], params["val"], progress=progress,
            description=label, imagination=imagination, teacher=teacher,
        )  # fmt: skip
    policies = {"PPO": _ppo_policy(cfg, trained)}
    if trained_static is not None:
        policies["PPO-static"] = _ppo_policy(cfg, trained_static)
    policies.update(baseline_policies(cfg))
    days = splits.test.dates
    evaluated = {"static": evaluate_policies(cfg, static_env, params["test"], policies, days)}
    if dynamic:
        # the oracle knows the replayed day's volumes, which do not drive the simulated market
        in_dynamic = {k: v for k, v in policies.items() if k != ORACLE}
        evaluated["dynamic"] = evaluate_policies(
            cfg, make_env(dynamic["test"]), dynamic["test"], in_dynamic, days
        )
    results = evaluated["static"]

    out_dir.mkdir(parents=True, exist_ok=True)
    obs_size = static_env.observation_size(params["train"])
    save_policy(
        out_dir / "checkpoint",
        trained.policy_params,
        {
            "config": cfg.to_dict(),
            "obs_size": obs_size,
            "market": splits.name,
            "market_mode": mode,
            "selected_seed": trained.selected_seed,
            "validation_pa": trained.validation_pa.tolist(),
            "validation_shortfall": trained.validation_shortfall.tolist(),
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
    side = float(params["test"].side)
    plot_pa_distribution(
        {name: price_advantage(r.outcomes(side)) for name, (_, r) in results.items()},
        out_dir / "pa_distribution.png",
    )
    steps_per_second = trained.env_steps / max(trained.train_seconds, 1e-9)
    entry = {
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
        "selection": selection_entry(cfg, trained),
        **({} if distillation is None else {"distillation": distillation}),
        "timing": {
            "compile_seconds": trained.compile_seconds,
            "train_seconds": trained.train_seconds,
            "env_steps": trained.env_steps,
            "env_steps_per_second": steps_per_second,
        },
        "market_mode": mode,
        "devices": trained.devices,
        "device_split": trained.device_split,
        # last update of the selected seed; null where no episode finished in it
        "curves_last": {
            k: _finite_or_none(np.asarray(v)[trained.selected_seed, -1])
            for k, v in trained.curves.items()
            if k in ("alpha", "beta", "order_pa_static", "order_pa_dynamic")
        },
        "policies": {name: m.to_dict() for name, (m, _) in results.items()},
    }
    if imagination is not None:
        out_of_bounds = np.asarray(trained.curves["imagined_out_of_bounds"])
        entry["imagination"] = {
            "program": cfg.imagine.program,
            "ratio": cfg.imagine.ratio,
            "imagined_share": imagined_share(splits.train.n_episodes, cfg.imagine.ratio),
            "lane_share": float(
                np.asarray(trained.curves["imagined_lane_share"])[trained.selected_seed].mean()
            ),
            "out_of_bounds": float(out_of_bounds[trained.selected_seed].mean()),
        }
    if "dynamic" in evaluated:
        entry["policies_dynamic"] = {n: m.to_dict() for n, (m, _) in evaluated["dynamic"].items()}
    return entry, {market: {n: m for n, (m, _) in r.items()} for market, r in evaluated.items()}


def train_ppo(
    cfg: Config, config_name: str, quiet: bool, verbose: bool = False, wide: bool = False
) -> int:
    """Plain PPO training on every market of ``cfg.data.markets`` (``--llm none``).

    With ``run.distributed`` this process first joins the multi-process run
    (:func:`serl_jax.rl.sharding.start_processes`); every process trains its share and
    then evaluates on its own copy; process 0 writes the run folder, the others a
    temporary one that is removed. ``wide``: print every column of the results table."""
    if cfg.run.distributed:
        start_processes(cfg.run.coordinator_address, cfg.run.num_processes, cfg.run.process_id)
        if jax.process_index() > 0:  # the same work, written nowhere and said by process 0
            with (
                tempfile.TemporaryDirectory(prefix="serl-process-") as scratch,
                open(os.devnull, "w") as silent,
                contextlib.redirect_stdout(silent),
            ):
                cfg = dataclasses.replace(cfg, run=dataclasses.replace(cfg.run, out=scratch))
                return _train_ppo(cfg, config_name, quiet=True, verbose=False)
    return _train_ppo(cfg, config_name, quiet, verbose, wide)


def _train_ppo(
    cfg: Config, config_name: str, quiet: bool, verbose: bool, wide: bool = False
) -> int:
    try:
        _, imagine_fn = imagination_program(cfg)
    except (ValueError, SandboxError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        # every input is read before training starts, so bad input fails in seconds
        # the static market needs no calibrated background populations
        markets = [
            (
                calibrated_market(cfg, spec) if cfg.market.mode != "static" else None,
                load_splits(cfg, spec),
            )
            for spec in cfg.data.markets
        ]
    except (DataError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2

    def run_one(market_params, splits, out_dir):
        entry, test_metrics = run_market(
            cfg, market_params, splits, out_dir, progress=not quiet,
            imagination=make_imagination(cfg, imagine_fn, splits.stats),
        )  # fmt: skip
        rows = {
            (f"{splits.name} {kind}", policy): metrics
            for kind, by_policy in test_metrics.items()
            for policy, metrics in by_policy.items()
        }
        return entry, rows

    name = f"{time.strftime('%Y%m%d-%H%M%S')}-{config_name}"
    return write_run(cfg, name, markets, run_one, quiet, verbose, wide)
