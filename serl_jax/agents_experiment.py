"""Multi-agent experiments: train N execution agents (IPPO or MAPPO) in the dynamic market
(or, with ``market.mode`` ``hybrid``, in the static and dynamic markets at once), keep the
best seed on validation days, and score every agent and the team on test days (validation
and test in the dynamic market).

The pieces ``python -m serl_jax.train --llm none --agents N`` runs per market
(:func:`serl_jax.training.agents.run_agents_market`): :func:`train_agents`, then
:func:`evaluate_agents` of the trained agents against every agent running TWAP on the
same days, profiles and background randomness (paired differences), and
:func:`agents_entry`, the market's entry of ``metrics.json``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np

from serl_jax.baselines import twap_policy
from serl_jax.components.profiling import default_profile
from serl_jax.config import Config
from serl_jax.data import MarketSplits
from serl_jax.envs.dynamic import DynamicEnvParams
from serl_jax.envs.execution import EnvParams, default_reward
from serl_jax.envs.multi_agent import MultiAgentExecutionEnv
from serl_jax.envs.propagator import PropagatorMultiAgentEnv
from serl_jax.envs.static_multi_agent import StaticMultiAgentEnv
from serl_jax.evaluation import MultiAgentRollout, multi_agent_rollout, per_agent_policy
from serl_jax.experiment import TWAP, TWAP_POV, selection_entry
from serl_jax.metrics import (
    ExecutionMetrics,
    compute_metrics,
    paired_difference,
    price_advantage,
    shortfall,
)
from serl_jax.rl.checkpoint import save_policy
from serl_jax.rl.marl import StaticMarket, make_marl_policy, make_marl_trainer
from serl_jax.rl.policy import PPOPolicyParams


@dataclass(frozen=True)
class TrainedAgents:
    """The outcome of :func:`train_agents`.

    Attributes:
        network: the shared network slot (input: an agent's observation and its one-hot
            index).
        policy_params: the selected seed's :class:`~serl_jax.rl.policy.PPOPolicyParams`
            (``params`` the trainer's ``{"actor", "critic"?}``).
        selected_seed: the seed with the best ``cfg.loop.score`` on validation days (mean
            over agents and days of shortfall, or of PA).
        validation_pa, validation_shortfall: ``[num_seeds]`` those means, bps.
        curves: per-update training metrics, each ``[num_seeds, num_updates]``.
        compile_seconds, train_seconds: compiling, and running the updates of all seeds.
        env_steps: market minutes run over all seeds, both markets in hybrid training
            (agent steps: times N).
        communication: the communication module trained with the policy, or None.
        validation_rollout: the selected seed's rollout of the validation days (NumPy
            leaves; :func:`~serl_jax.evaluation.multi_agent_rollout` with ``keep_memory``
            when the agents send messages, so their messages can be recomputed).
    """

    network: Any
    policy_params: PPOPolicyParams
    selected_seed: int
    validation_pa: np.ndarray
    validation_shortfall: np.ndarray
    curves: dict[str, np.ndarray]
    compile_seconds: float
    train_seconds: float
    env_steps: int
    communication: Any = None
    validation_rollout: MultiAgentRollout | None = None


def make_agents_env(
    cfg: Config, profile_fn: Callable | None = None, reward_fn: Callable | None = None
) -> MultiAgentExecutionEnv | PropagatorMultiAgentEnv:
    """The ``cfg.marl`` environment: ``marl.agents`` agents in ``marl.scenario`` in the
    dynamic market ``market.simulator`` names, with ``reward_fn`` (a validated reward
    program; None: the default reward) and ``profile_fn`` (a validated profile program;
    None: the default profile, every agent the single-agent draw)."""
    env_class = (
        PropagatorMultiAgentEnv if cfg.market.simulator == "propagator" else MultiAgentExecutionEnv
    )
    return env_class(
        cfg.marl.agents,
        cfg.marl.scenario,
        reward_fn=reward_fn or default_reward,
        profile_fn=profile_fn or default_profile,
    )


def _rollout_means(rollout: MultiAgentRollout) -> tuple[float, float]:
    """Mean PA and mean shortfall (bps) over every agent's orders."""
    outcomes = rollout.pooled_outcomes()
    return float(price_advantage(outcomes).mean()), float(shortfall(outcomes).mean())


def train_agents(
    cfg: Config,
    env: MultiAgentExecutionEnv,
    train_params: DynamicEnvParams,
    val_params: DynamicEnvParams,
    progress: bool = True,
    description: str = "agents",
    communication: Any = None,
    network: Any = None,
    val_env: MultiAgentExecutionEnv | None = None,
    record_terms: bool = False,
    static_train_params: EnvParams | None = None,
) -> TrainedAgents:
    """Trains ``cfg.run.num_seeds`` seeds of ``cfg.marl.algorithm`` (vmapped, one program)
    on the training days and keeps the best on validation days (dynamic market).

    With ``cfg.market.mode == "hybrid"`` the agents train on the static market
    (:class:`~serl_jax.envs.static_multi_agent.StaticMultiAgentEnv` with ``env``'s
    agents, scenario, reward and profiles, on ``static_train_params``) and the dynamic one
    at once (:func:`~serl_jax.rl.marl.make_marl_trainer` with ``static``, SE-RL Eq. 5;
    ``cfg.market``'s weights and ``dynamic_envs``).

    Args:
        cfg: run configuration (``ppo``: ``num_envs`` parallel markets of N agents, the
            static ones in hybrid training; ``network``, ``marl``, ``market``, ``run``,
            ``loop.score``).
        env: the multi-agent environment.
        train_params, val_params: dynamic-market parameters of the training and
            validation days.
        progress: print one line before and after training (stderr).
        description: the line's label.
        communication: a validated communication module (``Communication()``), trained
            with the policy; None: no messages.
        network: the shared network (a network program's module); None: the ``network``
            section's MLP.
        val_env: the environment of the validation rollouts (the evaluation profiles,
            when ``env`` trains on a profile program's); None: ``env``.
        record_terms: record every agent's reward terms in the validation rollouts
            (:meth:`~serl_jax.envs.multi_agent.MultiAgentExecutionEnv.reward_terms`, in
            ``validation_rollout.recorded``).
        static_train_params: static-market parameters of the training days (hybrid
            training only).

    Returns:
        A :class:`TrainedAgents`.

    Raises:
        ValueError: hybrid training without ``static_train_params``.
    """
    if network is None:
        network = cfg.network.build()
    val_env = env if val_env is None else val_env
    prior = cfg.network.prior()
    static = None
    lanes = cfg.ppo.num_envs
    if cfg.market.mode == "hybrid":
        if static_train_params is None:
            raise ValueError("train_agents: market.mode=hybrid needs static_train_params")
        static_env = StaticMultiAgentEnv(
            env.num_agents, env.scenario, env.single.reward_fn, env.profile_fn
        )
        static = StaticMarket(static_env, static_train_params, cfg.market.hybrid_config())
        lanes += cfg.market.dynamic_envs
    trainer = make_marl_trainer(
        cfg.ppo, cfg.marl.trainer_config(), env, train_params, network, prior, communication,
        static,
    )  # fmt: skip
    keys = jax.random.split(jax.random.PRNGKey(cfg.run.seed), cfg.run.num_seeds)
    train = jax.jit(jax.vmap(trainer.train))
    if progress:
        print(f"[{description}] compiling and training {cfg.run.num_seeds} seeds", flush=True)
    t0 = time.perf_counter()
    compiled = train.lower(keys).compile()
    compile_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = jax.block_until_ready(compiled(keys))
    train_seconds = time.perf_counter() - t0
    runner = out["runner_state"]
    params = PPOPolicyParams(params=runner.train_state.params, obs_stats=runner.obs_stats)
    policy = make_marl_policy(network, cfg.ppo.normalize_obs, prior, communication)
    val_key = jax.random.PRNGKey(cfg.run.seed)

    def validation(seed_params):
        record = val_env.reward_terms if record_terms else None
        return multi_agent_rollout(
            val_env, policy, seed_params, val_params, val_key, communication is not None, record
        )

    rollouts = jax.device_get(jax.vmap(validation)(params))
    means = [
        _rollout_means(jax.tree.map(lambda x, i=i: x[i], rollouts))
        for i in range(cfg.run.num_seeds)
    ]
    validation_pa = np.array([m[0] for m in means])
    validation_shortfall = np.array([m[1] for m in means])
    score = validation_shortfall if cfg.loop.score == "shortfall" else validation_pa
    best = int(np.argmax(score))
    if progress:
        print(
            f"[{description}] trained in {train_seconds:.1f} s (compile {compile_seconds:.1f} "
            f"s); seed {best} kept, validation PA {validation_pa[best]:+.2f} bps",
            flush=True,
        )
    return TrainedAgents(
        network=network,
        policy_params=jax.tree.map(lambda x: x[best], params),
        selected_seed=best,
        validation_pa=validation_pa,
        validation_shortfall=validation_shortfall,
        curves={k: np.asarray(v) for k, v in out["metrics"].items()},
        compile_seconds=compile_seconds,
        train_seconds=train_seconds,
        env_steps=cfg.ppo.num_updates * lanes * cfg.ppo.num_steps * cfg.run.num_seeds,
        communication=communication,
        validation_rollout=jax.tree.map(lambda x: x[best], rollouts),
    )


@dataclass(frozen=True)
class AgentsEvaluation:
    """One policy's test results for N agents.

    Attributes:
        agents: N per-agent :class:`~serl_jax.metrics.ExecutionMetrics` (``vs_TWAP``:
            paired with the same agent running TWAP on the same days).
        team: the team's metrics (``team`` scenario: the pooled parent order), else None.
        impact: N per-agent mean shortfall (bps; spread and impact paid against the
            replayed prices, negative is a cost) with its percentile-bootstrap interval,
            the agent's measured market impact.
        vs_twap_pov: N per-agent PA differences to the same agent running TWAP-POV on the
            same days (paired; None for the baselines).
        rollout: the :class:`~serl_jax.evaluation.MultiAgentRollout`.
    """

    agents: list[ExecutionMetrics]
    team: ExecutionMetrics | None
    impact: list[Any]
    vs_twap_pov: list[Any]
    rollout: MultiAgentRollout

    @property
    def pa_spread(self) -> float:
        """The spread between agents: the largest minus the smallest agent mean PA, bps."""
        pa = [m.PA.value for m in self.agents]
        return float(max(pa) - min(pa))


def evaluate_agents(
    cfg: Config,
    env: MultiAgentExecutionEnv,
    env_params: DynamicEnvParams,
    policies: dict[str, tuple[Any, Any]],
    days: Sequence[Any] | None = None,
) -> dict[str, AgentsEvaluation]:
    """Rolls every multi-agent policy out on every day of ``env_params`` and scores it.

    All policies use one key, so they meet the same profiles and background randomness.
    Two baselines are rolled out too, every agent running TWAP's schedule: ``TWAP`` with
    fixed-size child orders, the paired reference of each agent (and of the team), and
    ``TWAP-POV`` with participation child orders (as the single-agent baselines), which
    separates what the child-order type gains from what a learned schedule gains.

    Args:
        cfg: run configuration (``eval``: confidence, bootstrap; ``run.seed``).
        env: the multi-agent environment.
        env_params: dynamic-market parameters of the evaluation days.
        policies: ``{name: (multi-agent policy, policy_params)}``
            (:func:`~serl_jax.evaluation.multi_agent_rollout`'s policy signature).
        days: ``[E]`` each evaluation day (e.g. ``EpisodeSet.dates``): every interval
            clusters by day (:mod:`serl_jax.metrics.inference`); None treats the orders
            as independent.

    Returns:
        ``{name: AgentsEvaluation}``: TWAP, TWAP-POV, then ``policies``.
    """
    key = jax.random.PRNGKey(cfg.run.seed)
    twap = per_agent_policy(env, twap_policy)
    rollouts = {
        name: jax.device_get(
            multi_agent_rollout(env, twap, None, env_params.replace(child_quantity=kind), key)
        )
        for name, kind in ((TWAP, "fixed"), (TWAP_POV, "participation"))
    }
    for name, (policy, params) in policies.items():
        rollouts[name] = jax.device_get(multi_agent_rollout(env, policy, params, env_params, key))
    boot = {"confidence": cfg.eval.confidence, "n_bootstrap": cfg.eval.n_bootstrap, "days": days}
    reference = rollouts[TWAP]
    team = env.scenario == "team"
    results = {}
    for name, rollout in rollouts.items():
        is_twap = name == TWAP
        agents, impact, vs_pov = [], [], []
        for i in range(env.num_agents):
            outcomes = rollout.outcomes(i)
            twap = None if is_twap else reference.outcomes(i)
            agents.append(compute_metrics(outcomes, twap=twap, seed=cfg.run.seed, **boot))
            cost = shortfall(outcomes)
            # the mean cost with its bootstrap interval: a paired difference to zero
            impact.append(paired_difference(cost, np.zeros_like(cost), seed=cfg.run.seed, **boot))
            pov = None
            if name not in (TWAP, TWAP_POV):
                pov = paired_difference(
                    price_advantage(outcomes),
                    price_advantage(rollouts[TWAP_POV].outcomes(i)),
                    seed=cfg.run.seed,
                    **boot,
                )
            vs_pov.append(pov)
        team_metrics = None
        if team:
            twap = None if is_twap else reference.team_outcomes()
            team_metrics = compute_metrics(
                rollout.team_outcomes(), twap=twap, seed=cfg.run.seed, **boot
            )
        results[name] = AgentsEvaluation(agents, team_metrics, impact, vs_pov, rollout)
    return results


def save_agents_checkpoint(
    path: str | Path,
    cfg: Config,
    env: MultiAgentExecutionEnv,
    train_params: DynamicEnvParams,
    splits: MarketSplits,
    trained: TrainedAgents,
    communication: str,
) -> None:
    """Saves the agents' selected parameters with what ``evaluate`` needs to rebuild them
    (:func:`serl_jax.rl.checkpoint.save_policy`).

    Args:
        path: the checkpoint folder.
        train_params: the training market's params (the observation size comes from it).
        splits: the splits trained on (name and feature names).
        communication: the communication program's source (``""``: none).
    """
    save_policy(
        path,
        trained.policy_params,
        {
            "config": cfg.to_dict(),
            "obs_size": env.observation_size(train_params) + cfg.marl.agents,
            "market": splits.name,
            "market_mode": cfg.market.mode,
            "agents": cfg.marl.agents,
            "communication": communication,
            "selected_seed": trained.selected_seed,
            "feature_names": list(splits.train.feature_names),
        },
    )


def agents_entry(
    cfg: Config,
    trained: TrainedAgents,
    evaluated: dict[str, AgentsEvaluation],
    test_days: int,
) -> dict[str, Any]:
    """The market's entry of ``metrics.json`` for a multi-agent run.

    ``agents`` is a list of N entries (``agent``, ``side``, then per policy the metrics,
    ``impact_bps``, the agent's mean shortfall with its interval, and ``vs_TWAP_POV``, the
    learned policies' paired PA difference to TWAP-POV); ``team`` the team's
    metrics per policy (``team`` scenario; else null); ``pa_spread_bps`` per policy the
    largest minus the smallest agent mean PA.
    """
    n_agents = cfg.marl.agents
    first = next(iter(evaluated.values())).rollout
    agents = []
    for i in range(n_agents):
        side = np.asarray(first.side)[:, i]
        agents.append(
            {
                "agent": i,
                "side": float(side[0]) if (side == side[0]).all() else None,
                "policies": {name: e.agents[i].to_dict() for name, e in evaluated.items()},
                "impact_bps": {
                    name: {k: v for k, v in e.impact[i].to_dict().items() if k != "win_rate"}
                    for name, e in evaluated.items()
                },
                "vs_TWAP_POV": {
                    name: e.vs_twap_pov[i].to_dict()
                    for name, e in evaluated.items()
                    if e.vs_twap_pov[i] is not None
                },
            }
        )
    team = None
    if cfg.marl.scenario == "team":
        team = {"policies": {name: e.team.to_dict() for name, e in evaluated.items()}}
    steps_per_second = trained.env_steps / max(trained.train_seconds, 1e-9)
    return {
        "agents_setup": {
            "agents": n_agents,
            "algorithm": cfg.marl.algorithm,
            "scenario": cfg.marl.scenario,
            "market_mode": cfg.market.mode,
            "test_days": test_days,
        },
        "selection": selection_entry(cfg, trained),
        "timing": {
            "compile_seconds": trained.compile_seconds,
            "train_seconds": trained.train_seconds,
            "env_steps": trained.env_steps,
            "agent_steps": trained.env_steps * n_agents,
            "env_steps_per_second": steps_per_second,
        },
        "agents": agents,
        "team": team,
        "pa_spread_bps": {name: e.pa_spread for name, e in evaluated.items()},
    }
