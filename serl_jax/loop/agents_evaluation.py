"""Training and scoring one multi-agent candidate program (SE-RL with ``marl.agents > 1``).

A multi-agent program fills the reward, network, profiling (LLM4Profiling) and
communication (LLM4Communication) slots. It trains ``marl.agents`` agents with
``marl.algorithm`` (IPPO or MAPPO, a shared policy;
:func:`serl_jax.agents_experiment.train_agents`) in the dynamic market on the training
days, over ``run.num_seeds`` vmapped seeds, and is scored on the validation days.

The profiling slot sets the profiles the agents *train* on (who trades what, when, how
urgently: a curriculum of parent orders). Every program is scored with the run's own
evaluation profiles (``marl.profile``; empty: every agent the single-agent draw), on the
same days with the same background randomness, so that two candidates are compared on
the same orders and a profile program cannot raise its score by choosing easy orders.

The score (``loop.score``) is the mean over every agent's validation order
(:meth:`serl_jax.evaluation.MultiAgentRollout.pooled_outcomes`), and ``pa_per_order`` /
``shortfall_per_order`` list those orders day-major, for paired comparisons. The
reflection for the next prompt adds each agent's PA, the team's PA (``team``
scenario), the spread between agents and, with messages, statistics of what the agents
said (:func:`serl_jax.components.communication.message_statistics`); the reward's named
terms are those of the final policies on the validation days (the agents train in one
compiled program, so there is no history over training as for one agent).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import numpy as np

from llm.validate import load_validated
from serl_jax.agents_experiment import TrainedAgents, make_agents_env, train_agents
from serl_jax.components.communication import message_statistics
from serl_jax.config import Config, config_from_dict
from serl_jax.envs.market_data import MarketData
from serl_jax.loop.evaluation import (
    ProgramResult,
    _count_cache_hits,
    _failed,
    _finite,
    _term_stats,
    load_program,
    validation_metrics,
)
from serl_jax.metrics import compute_metrics, shortfall
from serl_jax.rl.checkpoint import save_policy

__all__ = ["agents_market", "evaluate_agents_program", "evaluation_profile"]

_MARKETS: dict[tuple[str, str], tuple[Any, Any]] = {}


def agents_market(cfg: Config, market: str, splits_names=("train", "val")):
    """``(splits, {split: DynamicEnvParams})``: the market's splits and the dynamic-market
    parameters of the named splits, as multi-agent candidates train and are scored on
    them (splits and calibration loaded once per process and kept).

    Raises:
        serl_jax.data.DataError: bad data.
        ValueError: no calibrated market parameters for ``market``.
    """
    from serl_jax.experiment import calibrated_market, dynamic_env_params, load_splits

    key = (market, repr((cfg.data, cfg.market.params)))
    if key not in _MARKETS:
        _MARKETS[key] = (load_splits(cfg, market), calibrated_market(cfg, market))
    splits, calibrated = _MARKETS[key]
    params = {
        name: dynamic_env_params(
            cfg, calibrated, cfg.env_params(MarketData.from_episodes(splits.split(name))),
            splits.stats,
        )
        for name in splits_names
    }  # fmt: skip
    return splits, params


def evaluation_profile(cfg: Config):
    """The run's evaluation profile program (``marl.profile``, defined through
    :func:`llm.validate.load_validated`; the run validated it in the sandbox when it
    started), or None for the default profile.

    Raises:
        ValueError: an unknown library name or an unreadable file.
        llm.validate.StaticError: the code fails stage 1.
    """
    from llm.designs import program_source
    from llm.validate import load_validated

    code = program_source(cfg.marl.profile, "profiling", "marl.profile")
    return load_validated(code, "profiling") if code else None


def evaluate_agents_program(
    config: dict[str, Any],
    market: str,
    reward_code: str,
    network_code: str,
    artifact_dir: str | None = None,
    imagination_code: str = "",
    profiling_code: str = "",
    communication_code: str = "",
) -> ProgramResult:
    """Trains a multi-agent program and scores it on the validation days.

    Args:
        config: ``Config.to_dict()`` with ``marl.agents > 1`` (the ``ppo``, ``network``,
            ``marl``, ``run``, ``env``, ``market``, ``eval`` and ``loop.score`` settings
            are used).
        market: dataset spec (``sample:<name>`` or a path).
        reward_code, network_code: validated code of the two slots.
        artifact_dir: where to write ``checkpoint/`` (policy + the slots' codes), if given.
        imagination_code: must be "" (imagination is single-agent only).
        profiling_code: validated profile program the agents train on ("": the
            evaluation profiles, ``marl.profile``).
        communication_code: validated communication module ("": no messages).

    Returns:
        A :class:`~serl_jax.loop.evaluation.ProgramResult` (as a single-agent program's;
        ``reward_term_stats`` from the final policies only, one ``history`` entry) whose
        ``metrics`` add ``agents`` (per agent:
        ``agent``, ``side``, ``pa``, ``pa_ci``, ``shortfall``, ``wr``), ``team`` (``team``
        scenario: ``pa``, ``pa_ci``, ``shortfall``; else None), ``pa_spread`` (largest minus
        smallest agent PA, bps) and ``messages`` (with a communication program:
        :func:`~serl_jax.components.communication.message_statistics`; else None). A
        training error or non-finite outcome gives ``ok=False`` with the reason.

    Raises:
        ValueError: an imagination program, or a bad ``marl.profile``.
        serl_jax.data.DataError, serl_jax.config.ConfigError: bad data or config.
    """
    if imagination_code:
        raise ValueError("evaluate_agents_program: imagination programs are single-agent only")
    t_start = time.perf_counter()
    cfg = config_from_dict(config)
    splits, params = agents_market(cfg, market)
    evaluation_profile_fn = evaluation_profile(cfg)
    with _count_cache_hits() as hits:
        try:
            reward_fn, network = load_program(reward_code, network_code)
            profile_fn = load_validated(profiling_code, "profiling") if profiling_code else None
            communication = (
                load_validated(communication_code, "communication") if communication_code else None
            )
            cfg = dataclasses.replace(cfg, network=cfg.network.for_network(network))
            env = make_agents_env(cfg, profile_fn or evaluation_profile_fn, reward_fn)
            val_env = make_agents_env(cfg, evaluation_profile_fn, reward_fn)
            static_train = (
                cfg.env_params(MarketData.from_episodes(splits.split("train")))
                if cfg.market.mode == "hybrid" else None
            )  # fmt: skip
            trained = train_agents(
                cfg, env, params["train"], params["val"], progress=False,
                communication=communication, network=network, val_env=val_env,
                record_terms=True, static_train_params=static_train,
            )  # fmt: skip
        except Exception as e:  # noqa: BLE001 - any failure of candidate code is its score
            return _failed(f"training failed: {type(e).__name__}: {e}", t_start)
    timing = {
        "compile": trained.compile_seconds,
        "train": trained.train_seconds,
        "cache_hits": hits[0],
    }
    codes = {
        "reward_code": reward_code,
        "network_code": network_code,
        "profiling_code": profiling_code,
        "communication_code": communication_code,
    }
    obs_size = env.observation_size(params["train"])
    return _score(cfg, splits, obs_size, trained, codes, artifact_dir, timing, t_start)


def _reward_terms(cfg: Config, rollout) -> dict[str, Any]:
    """Reward reflection: the trained agents' reward terms on the validation days
    (every agent's order one episode; 0 outside its window), in the single-agent
    ``reward_term_stats`` form, with one ``history`` entry, at the last update (the
    agents train in one compiled program)."""
    per_step = {k: np.asarray(v).reshape(-1, np.shape(v)[-1]) for k, v in rollout.recorded.items()}
    episode = {k: v.sum(axis=1) for k, v in per_step.items()}
    stats = _term_stats(per_step, episode)
    stats["history"] = [
        {
            "updates": cfg.ppo.num_updates,
            "episode_mean": {k: _finite(v.mean()) for k, v in episode.items()},
        }
    ]
    return stats


def _orders_entry(outcomes, boot: dict[str, Any]) -> dict[str, Any]:
    """Mean PA (with its interval), shortfall and WR of a set of orders (bps, ratio)."""
    m = compute_metrics(outcomes, **boot)
    return {
        "pa": _finite(m.PA.value),
        "pa_ci": [_finite(m.PA.low), _finite(m.PA.high)],
        "shortfall": _finite(shortfall(outcomes).mean()),
        "wr": _finite(m.WR.value),
    }


def _score(
    cfg: Config, splits, obs_size: int, trained: TrainedAgents, codes: dict[str, str],
    artifact_dir: str | None, timing: dict[str, float], t_start: float,
) -> ProgramResult:  # fmt: skip
    """A trained multi-agent program's :class:`ProgramResult` from the selected seed's
    validation rollout; writes its checkpoint to ``artifact_dir`` if given."""
    rollout = trained.validation_rollout
    # pooled orders are day-major: day 0's agents first
    days = np.repeat(np.asarray(splits.val.dates, dtype=object), cfg.marl.agents)
    metrics = validation_metrics(cfg, trained, rollout.pooled_outcomes(), days)
    if isinstance(metrics, str):
        return _failed(metrics, t_start)
    boot = {
        "confidence": cfg.eval.confidence,
        "n_bootstrap": cfg.eval.n_bootstrap,
        "seed": 0,
        "days": splits.val.dates,
    }
    agents = []
    for i in range(cfg.marl.agents):
        own = rollout.outcomes(i)
        side = float(own.side[0]) if (own.side == own.side[0]).all() else None
        agents.append({"agent": i, "side": side, **_orders_entry(own, boot)})
    team = _orders_entry(rollout.team_outcomes(), boot) if cfg.marl.scenario == "team" else None
    agent_pa = [a["pa"] for a in agents if a["pa"] is not None]
    messages = None
    if trained.communication is not None:
        messages = message_statistics(
            trained.communication,
            trained.policy_params.params["communication"],
            rollout.memory,
            rollout.active,
        )
    metrics.update(
        {
            "agents": agents,
            "team": team,
            "pa_spread": (max(agent_pa) - min(agent_pa)) if agent_pa else None,
            "messages": messages,
        }
    )
    if artifact_dir is not None:
        save_policy(
            Path(artifact_dir) / "checkpoint",
            trained.policy_params,
            {
                "config": cfg.to_dict(),
                "obs_size": obs_size,
                "market": splits.name,
                "market_mode": cfg.market.mode,
                "agents": cfg.marl.agents,
                "selected_seed": trained.selected_seed,
                "validation_pa": [float(v) for v in trained.validation_pa],
                "validation_shortfall": [float(v) for v in trained.validation_shortfall],
                "feature_names": list(splits.train.feature_names),
                **codes,
            },
        )
    curves = {
        k: [_finite(x) for x in np.asarray(v)[trained.selected_seed]]
        for k, v in trained.curves.items()
    }
    timing = {**timing, "total": time.perf_counter() - t_start}
    return ProgramResult(True, "", metrics, _reward_terms(cfg, rollout), timing, curves)
