"""PettingZoo adapter of the N-agent execution markets: ``serl_jax.pettingzoo.parallel_env``.

::

    from serl_jax.pettingzoo import parallel_env

    env = parallel_env(num_agents=3)                    # propagator market, shipped sample
    obs, infos = env.reset(seed=0)
    while env.agents:
        obs, rewards, terminations, truncations, infos = env.step(
            {agent: 0.01 for agent in env.agents}
        )

:class:`ExecutionParallelEnv` is a ``pettingzoo.ParallelEnv`` over the leading agent axis
of :class:`~serl_jax.envs.multi_agent.AgentAxisEnv`: the dynamic markets
(:class:`~serl_jax.envs.propagator.PropagatorMultiAgentEnv`,
:class:`~serl_jax.envs.multi_agent.MultiAgentExecutionEnv`, as
:func:`serl_jax.agents_experiment.make_agents_env` picks by ``market.simulator``) or the
static one (:class:`~serl_jax.envs.static_multi_agent.StaticMultiAgentEnv`). Agents are
``"agent_0" ... "agent_{N-1}"``, each with the single-agent spaces: observations
``float32[D]``, actions ``float32[]`` in ``[0, 1]`` (the fraction of its remaining
inventory to trade this minute). An agent whose window has not begun is live but waits:
zero observation, reward 0, its action ignored. An agent leaves ``env.agents`` after
its window's last minute; the episode ends when every window is over.

Seeds map to keys as in :mod:`serl_jax.gym`: ``reset(seed=s)`` starts
``key = jax.random.key(s)``, and every reset and step takes
``key, sub = jax.random.split(key)`` for the gymnax ``reset(sub, params)`` or
``step(sub, state, actions, params)``; ``reset()`` without a seed continues the stream
(the first draws a seed from OS entropy).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pettingzoo
from gymnasium import spaces
from gymnax.environments.spaces import gymnax_space_to_gym_space

from serl_jax.agents_experiment import make_agents_env
from serl_jax.envs.execution import EnvParams
from serl_jax.envs.multi_agent import AgentAxisEnv
from serl_jax.envs.static_multi_agent import StaticMultiAgentEnv
from serl_jax.gym import (
    SEED_LIMIT,
    check_actions,
    check_seed,
    market_params,
    run_config,
    split_reset,
    split_step,
)


class ExecutionParallelEnv(pettingzoo.ParallelEnv):
    """N execution agents in one market as a ``pettingzoo.ParallelEnv`` (module docstring).

    Args:
        env: an N-agent environment (:class:`~serl_jax.envs.multi_agent.AgentAxisEnv`).
        params: its parameters (the dynamic market's for a dynamic environment).

    Attributes:
        gymnax_env, env_params: the wrapped environment and parameters.
        possible_agents: ``["agent_0", ..., "agent_{N-1}"]``.
        agents: the live agents (empty before ``reset`` and after the episode).
        observation_spaces, action_spaces: per agent, ``Box(-inf, inf, (D,), float32)``
            and ``Box(0, 1, (), float32)``.
    """

    metadata = {"name": "serl_jax_execution_v0", "render_modes": [], "is_parallelizable": True}

    def __init__(self, env: AgentAxisEnv, params: EnvParams):
        self.gymnax_env = env
        self.env_params = params
        self.possible_agents = [f"agent_{i}" for i in range(env.num_agents)]
        self.agents = []
        size = env.observation_size(params)
        self.observation_spaces = {
            a: spaces.Box(-np.inf, np.inf, (size,), np.float32) for a in self.possible_agents
        }
        self.action_spaces = {
            a: gymnax_space_to_gym_space(env.action_space(params)) for a in self.possible_agents
        }
        self._key = None
        self._state = None

    def observation_space(self, agent: str) -> spaces.Box:
        """The agent's observation space (the same object at every call).

        Raises:
            KeyError: an unknown agent.
        """
        return self.observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Box:
        """The agent's action space (the same object at every call).

        Raises:
            KeyError: an unknown agent.
        """
        return self.action_spaces[agent]

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
        """Starts an episode: a day and every agent's order.

        Args:
            seed: restarts the key stream at ``jax.random.key(seed)``; None continues it.
            options: not used.

        Returns:
            ``(observations, infos)``: every agent's ``float32[D]`` (zeros while its window
            has not begun) and an empty info.

        Raises:
            ValueError: a seed that is not an integer in ``[0, 2**32)``.
        """
        if seed is None and self._key is None:
            seed = int(np.random.default_rng().integers(SEED_LIMIT))
        if seed is not None:
            self._key = jax.random.key(check_seed(seed))
        self._key, self._state, obs = split_reset(self.gymnax_env, self._key, self.env_params)
        obs = np.asarray(obs)
        self.agents = list(self.possible_agents)
        return {a: obs[i] for i, a in enumerate(self.agents)}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        """One minute of the market with every live agent's child order.

        Args:
            actions: one action per live agent, ``float32[]`` in ``[0, 1]`` (a waiting
                agent's is ignored).

        Returns:
            ``(observations, rewards, terminations, truncations, infos)`` for the agents
            live before the step: ``float32[D]``, Python floats (the reward slot's,
            scaled by ``env.reward_scale``), bools (``terminated`` after an agent's last
            minute, ``truncated`` never) and the gymnax step's ``info`` fields as NumPy
            scalars (the agent's own ``exec_qty`` shares, ``order_pa`` bps, ``active``,
            ..., and the shared ``team_reward`` and ``episode_done``). Terminated agents
            leave :attr:`agents`.

        Raises:
            ValueError: ``actions`` not a dict, an action for an agent that is not live, a
                live agent without one, or a bad action (:func:`serl_jax.gym.check_actions`).
            RuntimeError: no live agent (``reset()`` first).
        """
        if not self.agents:
            raise RuntimeError("step() without live agents: call reset()")
        if not isinstance(actions, Mapping):
            raise ValueError(f"actions: expected a dict of agent -> action, got {type(actions)}")
        strangers = sorted(set(actions) - set(self.agents), key=str)
        if strangers:
            raise ValueError(f"actions for agents that are not live: {strangers}")
        missing = [a for a in self.agents if a not in actions]
        if missing:
            raise ValueError(f"no action for live agents {missing}")
        values = np.zeros(len(self.possible_agents), np.float32)
        for agent in self.agents:
            i = self.possible_agents.index(agent)
            values[i] = check_actions(actions[agent], (), f"actions[{agent!r}]")
        self._key, self._state, out = split_step(
            self.gymnax_env, self._key, self._state, values, self.env_params
        )
        obs, reward, terminated, truncated, info = jax.device_get(out)
        live = [(self.possible_agents.index(a), a) for a in self.agents]
        results = (
            {a: obs[i] for i, a in live},
            {a: float(reward[i]) for i, a in live},
            {a: bool(terminated[i]) for i, a in live},
            {a: bool(truncated[i]) for i, a in live},
            {a: {k: v[i] if v.ndim else v[()] for k, v in info.items()} for i, a in live},
        )
        self.agents = [a for i, a in live if not (terminated[i] or truncated[i])]
        return results


def parallel_env(
    data: str | Path | None = None,
    split: str = "train",
    config: str | Path | None = None,
    overrides: Sequence[str] = (),
    market: str = "dynamic",
    num_agents: int = 2,
) -> ExecutionParallelEnv:
    """N execution agents on one dataset, built as ``python -m serl_jax.train --agents N``
    builds them (the default reward and profile slots).

    Args:
        data: a dataset folder or ``sample:<name>``; None: the config's first market.
        split: ``"train"``, ``"val"`` or ``"test"``.
        config: a YAML preset; None: the built-in defaults.
        overrides: ``section.key=value`` strings (e.g. ``"marl.scenario=team"``,
            ``"env.random_window=true"``, ``"market.simulator=lob"``).
        market: ``"dynamic"`` (``market.simulator``'s market, by default the propagator)
            or ``"static"`` (replayed bars; the agents cannot affect each other).
        num_agents: N >= 1; it replaces the config's ``marl.agents`` (the training runs'
            checks on that key, e.g. none in a static ``market.mode``, do not apply).

    Raises:
        ValueError: ``num_agents`` not an integer >= 1, ``marl.agents`` among the
            overrides (give ``num_agents``), or as :func:`serl_jax.gym.run_config` and
            :func:`serl_jax.gym.market_params`.
    """
    if isinstance(num_agents, bool) or not isinstance(num_agents, int) or num_agents < 1:
        raise ValueError(f"num_agents must be an integer >= 1, got {num_agents!r}")
    cfg = run_config(config, overrides)
    if any(o.split("=", 1)[0].strip() == "marl.agents" for o in overrides):
        raise ValueError("overrides: give the number of agents as num_agents, not marl.agents")
    cfg = dataclasses.replace(cfg, marl=dataclasses.replace(cfg.marl, agents=num_agents))
    params = market_params(cfg, data, split, market)
    if market == "dynamic":
        env = make_agents_env(cfg)
    else:
        env = StaticMultiAgentEnv(num_agents, cfg.marl.scenario)
    return ExecutionParallelEnv(env, params)
