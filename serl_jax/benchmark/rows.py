"""How each row of the benchmark is produced: train (or not), then roll out every split.

Every policy, learned or baseline, executes the same orders (one whole-day parent order
per symbol-day) through :func:`serl_jax.experiment.rollout_policy`, in the static market
(replayed history, where PA on real stocks is measured). Learned rows are evaluated on the
validation days (where they were chosen), the test days of the training symbols and the
test days of the held-out symbols, and keep their checkpoint in the cell folder, so that
``python -m serl_jax.evaluate --policy <cell>/checkpoint`` scores them on any data.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jax

from llm.validate import load_validated
from serl_jax.baselines.optimal import schedule_policy
from serl_jax.baselines.static_optimum import optimal_label, optimal_targets
from serl_jax.benchmark.cells import PROPAGATOR_TEST, SplitOrders
from serl_jax.calibrate import calibrate, default_lobster, real_statistics, write_params
from serl_jax.config import Config, saved_network_config
from serl_jax.data import MarketSplits, load_minute_bars, split_days
from serl_jax.data.episodes import HELDOUT
from serl_jax.envs.execution import ExecutionEnv
from serl_jax.envs.market_data import MarketData
from serl_jax.envs.propagator import PropagatorEnvParams, PropagatorExecutionEnv
from serl_jax.experiment import (
    ORACLE,
    baseline_policies,
    calibrated_market,
    dynamic_env_params,
    make_env,
    make_imagination,
    resolve_market_path,
    rollout_policy,
    score_reward,
    train_policy,
)
from serl_jax.market.params import MarketParams
from serl_jax.rl.checkpoint import load_policy, save_policy
from serl_jax.rl.policy import make_ppo_policy

__all__ = [
    "BASELINE_ROWS",
    "agents_orders",
    "baseline_orders",
    "calibrate_market",
    "eval_splits",
    "policy_splits",
    "ppo_orders",
    "serl_orders",
    "split_orders",
]

BASELINE_ROWS = (
    "TWAP",
    "TWAP-POV",
    "VWAP",
    "adaptive VWAP",
    "POV",
    "AC",
    "oracle (not achievable)",
)
"""The baselines the table holds (Immediate is left out: an impact reference, not a
schedule anyone would run)."""


def eval_splits(splits: MarketSplits) -> tuple[str, ...]:
    """``val`` and ``test``, and ``heldout`` when symbols are held out."""
    return ("val", "test") + ((HELDOUT,) if splits.heldout is not None else ())


def policy_splits(splits: MarketSplits) -> tuple[str, ...]:
    """:func:`eval_splits` and the test days in the propagator market
    (:data:`PROPAGATOR_TEST`): where a single-agent row's policy is rolled out."""
    return (*eval_splits(splits), PROPAGATOR_TEST)


def split_orders(
    cfg: Config, splits: MarketSplits, split: str, policies: dict[str, tuple[Any, Any]]
) -> dict[str, SplitOrders]:
    """Each policy's orders on one split, rolled out in the static market, or for
    :data:`PROPAGATOR_TEST` on the test days in the propagator market of ``cfg.impact``
    (the agent's own impact moves the replayed bars; the hindsight oracle, a bound of
    the static market's cost model, is left out there)."""
    episodes, env, env_params = _split_market(cfg, splits, split)
    if split == PROPAGATOR_TEST:
        policies = {name: p for name, p in policies.items() if name != ORACLE}
    side = float(env_params.side)
    return {
        name: SplitOrders(
            rollout_policy(env, env_params, policy, params).outcomes(side),
            episodes.symbols,
            episodes.dates,
        )
        for name, (policy, params) in policies.items()
    }


def _split_market(cfg: Config, splits: MarketSplits, split: str):
    """``(episodes, env, env_params)`` of a split: the static market, or for
    :data:`PROPAGATOR_TEST` the test days in the propagator market of ``cfg.impact``."""
    episodes = splits.split("test" if split == PROPAGATOR_TEST else split)
    env_params = cfg.env_params(MarketData.from_episodes(episodes))
    if split != PROPAGATOR_TEST:
        return episodes, ExecutionEnv(), env_params
    env_params = PropagatorEnvParams.from_static(env_params, splits.stats, cfg.impact.params())
    return episodes, PropagatorExecutionEnv(), env_params


def baseline_orders(cfg: Config, splits: MarketSplits) -> dict[str, dict[str, SplitOrders]]:
    """The baselines of :data:`BASELINE_ROWS` on every split, and in the propagator
    market (:data:`PROPAGATOR_TEST`) its optimal schedule
    (:func:`~serl_jax.baselines.static_optimum.optimal_targets`, named by
    :func:`~serl_jax.baselines.static_optimum.optimal_label`): the ceiling a schedule
    can reach there. In the replayed market the schedule of least expected cost without
    price forecasts trades in proportion to volume: VWAP's row."""
    every = baseline_policies(cfg)
    policies = {name: every[name] for name in BASELINE_ROWS}
    _, _, env_params = _split_market(cfg, splits, PROPAGATOR_TEST)
    optimum = (schedule_policy, optimal_targets(cfg.impact, env_params))
    with_optimum = {**policies, optimal_label(cfg.impact): optimum}
    return {
        split: split_orders(
            cfg, splits, split, with_optimum if split == PROPAGATOR_TEST else policies
        )
        for split in policy_splits(splits)
    }


def calibrate_market(
    cfg: Config, spec: str, out: Path, log=print, start: MarketParams | None = None
) -> Path:
    """Fits the dynamic market's background populations to a dataset's training days
    (the training symbols', as ``python -m serl_jax.calibrate`` does with the
    CLI's defaults: tick 0.01, 6 iterations, 8 days per symbol, the LOBSTER AMZN day)
    and writes them to ``out`` (YAML). Hybrid PPO of the benchmark trains with it.
    ``start``: the parameters the fit starts from and whose keys other than the five
    knobs it keeps (``None``: the :class:`~serl_jax.market.params.MarketParams`
    defaults); the kept iterate is never a worse fit than ``start`` itself.

    Returns:
        ``out``.
    """
    from serl_jax.experiment import load_splits

    d = cfg.data
    splits = load_splits(cfg, spec)
    bars = load_minute_bars(
        resolve_market_path(spec), min_bars_per_day=d.min_bars_per_day, short_days=d.short_days
    )
    train = split_days(bars, train=d.train, val=d.val)["train"]
    kept = ~train.frame["symbol"].isin(splits.heldout_symbols).to_numpy()
    train = train.with_frame(train.frame.loc[kept])
    tick_size = 0.01
    real = real_statistics(train, tick_size, default_lobster())
    start = (MarketParams() if start is None else start).replace(tick_size=tick_size)
    market, sim = calibrate(splits, real, start, 6, jax.random.PRNGKey(0), 8, log=log)
    write_params(out, market, real, sim, f"serl_jax.benchmark: calibrated on {spec}")
    return out


def _save(cfg: Config, trained, splits: MarketSplits, folder: Path, extra: dict) -> None:
    save_policy(
        folder,
        trained.policy_params,
        {
            "config": cfg.to_dict(),
            "obs_size": ExecutionEnv().observation_size(
                cfg.env_params(MarketData.from_episodes(splits.train))
            ),
            "market": splits.name,
            "market_mode": cfg.market.mode,
            "selected_seed": trained.selected_seed,
            "validation_pa": trained.validation_pa.tolist(),
            "validation_shortfall": trained.validation_shortfall.tolist(),
            "feature_names": list(splits.train.feature_names),
            **extra,
        },
    )


def ppo_orders(
    cfg: Config,
    name: str,
    splits: MarketSplits,
    folder: Path,
    *,
    progress: bool,
    imagine_fn: Any = None,
) -> tuple[dict[str, dict[str, SplitOrders]], dict[str, Any]]:
    """Trains plain PPO as ``cfg`` says (``market.mode`` static, hybrid, or dynamic: in the
    dynamic market alone, seeds kept on its validation days), on :func:`score_reward`'s
    reward (the objective ``loop.score`` ranks by), with the calibrated ``market.params``,
    saves the checkpoint in ``folder/checkpoint`` and rolls it out on every split.

    Returns:
        ``({split: {name: SplitOrders}}, cell facts: seconds, selection, checkpoint)``.
    """
    t0 = time.perf_counter()
    params = {
        s: cfg.env_params(MarketData.from_episodes(splits.split(s))) for s in ("train", "val")
    }
    reward_fn = score_reward(cfg)
    env = ExecutionEnv(reward_fn)
    hybrid = {}
    if cfg.market.mode in ("hybrid", "dynamic"):
        market = calibrated_market(cfg, cfg.loop.market)
        needed = params if cfg.market.mode == "dynamic" else ("train",)  # hybrid: train only
        dynamic = {s: dynamic_env_params(cfg, market, params[s], splits.stats) for s in needed}
        if cfg.market.mode == "dynamic":
            env, params = make_env(dynamic["train"], reward_fn), dynamic
        else:
            hybrid = {
                "dynamic": (make_env(dynamic["train"], reward_fn), dynamic["train"]),
                "hybrid": cfg.market.hybrid_config(),
            }
    elif cfg.market.mode != "static":
        raise ValueError(
            f"benchmark: PPO rows train static, hybrid or dynamic, not {cfg.market.mode}"
        )
    trained = train_policy(
        cfg,
        env,
        params["train"],
        params["val"],
        progress=progress,
        description=name,
        imagination=make_imagination(cfg, imagine_fn, splits.stats),
        **hybrid,
    )
    checkpoint = folder / "checkpoint"
    _save(cfg, trained, splits, checkpoint, {})
    policy = make_ppo_policy(
        trained.network, cfg.ppo.normalize_obs, action_prior=cfg.network.prior()
    )
    policies = {name: (policy, trained.policy_params)}
    orders = {s: split_orders(cfg, splits, s, policies) for s in policy_splits(splits)}
    meta = {
        "seconds": time.perf_counter() - t0,
        "train_seconds": trained.train_seconds,
        "compile_seconds": trained.compile_seconds,
        "env_steps": trained.env_steps,
        "selected_seed": trained.selected_seed,
        "checkpoint": str(checkpoint),
    }
    return orders, meta


def serl_orders(
    cfg: Config, name: str, splits: MarketSplits, folder: Path, *, quiet: bool
) -> tuple[dict[str, dict[str, SplitOrders]], dict[str, Any]]:
    """Runs the SE-RL loop of ``cfg`` (the designer ``loop.llm``) in ``folder/serl-run``,
    resuming it if a killed benchmark left it there, and rolls its best candidate (chosen
    on validation days by ``loop.score``) out on every split.

    Returns:
        ``({split: {name: SplitOrders}}, cell facts: seconds, best candidate, stop reason,
        candidates)``.

    Raises:
        RuntimeError: the loop ended with an error (its message names the exit code; the
            run folder is kept and resumes on the next attempt).
    """
    from serl_jax.training.serl import run_serl

    t0 = time.perf_counter()
    root = folder / "serl-run"
    if root.exists() and not (root / "run.sqlite").is_file():
        raise RuntimeError(f"{root}: exists but holds no SE-RL run (remove it to start over)")
    resume = root if root.exists() else None
    code = run_serl(cfg, "benchmark", resume, quiet, root=None if resume else root)
    if code != 0:
        raise RuntimeError(f"the SE-RL loop in {root} stopped with exit code {code}")
    report = json.loads((root / "report.json").read_text())
    best = report["best"]
    checkpoint = root / "candidates" / best["id"] / "checkpoint"
    network, params, saved = load_policy(checkpoint, define=load_validated)
    prior = saved_network_config(saved["config"]).prior()
    policy = make_ppo_policy(network, cfg.ppo.normalize_obs, action_prior=prior)
    policies = {name: (policy, params)}
    orders = {s: split_orders(cfg, splits, s, policies) for s in policy_splits(splits)}
    meta = {
        "seconds": time.perf_counter() - t0,
        "best": best["id"],
        "best_module": best.get("module"),
        "stopped": report["stopped"],
        "candidates": report["candidates"],
        "checkpoint": str(checkpoint),
    }
    return orders, meta


def agents_orders(
    cfg: Config, name: str, splits: MarketSplits, folder: Path, *, progress: bool
) -> tuple[dict[str, dict[str, SplitOrders]], dict[str, Any]]:
    """Trains ``cfg.marl.agents`` agents (``marl.algorithm``, ``marl.scenario``) in the
    dynamic market calibrated to the dataset, keeps the seed chosen on validation days,
    saves the checkpoint and rolls them out on every split in the dynamic market, next to
    every agent running TWAP with the same key (same profiles, same background
    randomness): the reference the agents are paired with, since the dynamic market's
    orders differ from the static table's.

    Returns:
        ``({split: {"agent i": ..., "TWAP agent i": ...}}, cell facts)``.
    """
    from serl_jax.agents_experiment import (
        evaluate_agents,
        make_agents_env,
        save_agents_checkpoint,
        train_agents,
    )
    from serl_jax.rl.marl import make_marl_policy

    t0 = time.perf_counter()
    market = calibrated_market(cfg, cfg.loop.market)
    env = make_agents_env(cfg)
    params = {
        s: dynamic_env_params(
            cfg, market, cfg.env_params(MarketData.from_episodes(splits.split(s))), splits.stats
        )
        for s in ("train", *eval_splits(splits))
    }
    trained = train_agents(cfg, env, params["train"], params["val"], progress, name)
    policy = make_marl_policy(trained.network, cfg.ppo.normalize_obs, cfg.network.prior())
    checkpoint = folder / "checkpoint"
    save_agents_checkpoint(checkpoint, cfg, env, params["train"], splits, trained, "")
    orders: dict[str, dict[str, SplitOrders]] = {}
    for split in eval_splits(splits):
        episodes = splits.split(split)
        evaluated = evaluate_agents(
            cfg, env, params[split], {name: (policy, trained.policy_params)}
        )
        orders[split] = {}
        for label, key in (("agent", name), ("TWAP agent", "TWAP")):
            rollout = evaluated[key].rollout
            for i in range(cfg.marl.agents):
                orders[split][f"{label} {i}"] = SplitOrders(
                    rollout.outcomes(i), episodes.symbols, episodes.dates
                )
    meta = {
        "seconds": time.perf_counter() - t0,
        "agents": cfg.marl.agents,
        "scenario": cfg.marl.scenario,
        "selected_seed": trained.selected_seed,
        "checkpoint": str(checkpoint),
    }
    return orders, meta
