"""N execution agents in the static market: replayed bars that no order moves.

:class:`StaticMultiAgentEnv` is :class:`~serl_jax.envs.multi_agent.MultiAgentExecutionEnv`'s
task (the same profiles, scenarios, windows, clock, auto-reset, ``info`` fields and
leading agent axis, :class:`~serl_jax.envs.multi_agent.AgentAxisEnv`) on
:class:`~serl_jax.envs.execution.ExecutionEnv`'s market: each agent's child order fills
against the replayed bar of its minute with the static cost model (half spread, impact
on its own participation), so the agents cannot affect each other. An episode is N
independent single-agent static episodes on one day, with the profiles' sides, sizes
and windows, on one clock; it is the static half of hybrid multi-agent training
(:mod:`serl_jax.rl.marl`, SE-RL Eq. 5).

With one agent and the default profile it is :class:`~serl_jax.envs.execution.ExecutionEnv`
bit for bit (same key, same observations, rewards, fills and ``info``;
``tests/test_static_multi_agent_env.py``). Unlike the dynamic market, Q is not rounded to
whole shares (the static single-agent environment's Q is not).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from serl_jax.components.profiling import AgentProfile, ProfileFn, default_profile
from serl_jax.envs.execution import EnvParams, EnvState, ExecutionEnv, default_reward
from serl_jax.envs.multi_agent import AgentAxisEnv, AgentsState, with_profile


class StaticMultiAgentEnv(AgentAxisEnv):
    """N execution agents in the static market (see the module docstring).

    Args:
        num_agents: N >= 1 (static: the shapes).
        scenario: ``"independent"`` or ``"team"``.
        reward_fn: the reward slot, as for
            :class:`~serl_jax.envs.execution.ExecutionEnv`, applied per agent with its own
            ``params.side`` and ``params.urgency``.
        profile_fn: the profile slot (:mod:`serl_jax.components.profiling`); it gets the
            static :class:`~serl_jax.envs.execution.EnvParams`.

    Raises:
        ValueError: for ``num_agents < 1`` or an unknown scenario.
    """

    def __init__(
        self,
        num_agents: int,
        scenario: str = "independent",
        reward_fn=default_reward,
        profile_fn: ProfileFn = default_profile,
    ):
        super().__init__(num_agents, scenario, ExecutionEnv(reward_fn), profile_fn)

    @property
    def name(self) -> str:
        return "StaticMultiAgentEnv"

    def init_state(self, params: EnvParams, episode: jax.Array, key: jax.Array) -> AgentsState:
        """The state before the first window's first minute on day ``episode``, the N
        profiles drawn with ``key``, each agent's order
        :meth:`ExecutionEnv.init_state <serl_jax.envs.execution.ExecutionEnv.init_state>`
        of its profile."""

        def order(p: AgentProfile) -> EnvState:
            return self.single.init_state(
                with_profile(params, p), episode, p.start, p.window_len, p.quantity
            )

        return self.draw_orders(params, episode, key, order)

    def step_env(
        self, key: jax.Array, state: AgentsState, actions: jax.Array, params: EnvParams
    ) -> tuple[jax.Array, AgentsState, jax.Array, jax.Array, dict[str, Any]]:
        """One minute without the reset: ``(obs [N, D], state, reward [N], terminated [N],
        info)``. An active agent steps as
        :meth:`ExecutionEnv.step_env <serl_jax.envs.execution.ExecutionEnv.step_env>`
        on its own order (its slot ``start + time`` is the clock's minute); an inactive
        one keeps its order and reports no fill (``exec_qty`` 0, reward 0, not
        terminated)."""
        actions = jnp.asarray(actions, jnp.float32).reshape(self.num_agents)
        active = self.active(state)
        clock = state.clock + 1

        def settle(agent, profile, action, is_active):
            own = with_profile(params, profile)
            stepped = self.single.step_env(key, agent, action, own)
            idle = self.single.finish_step(
                agent, jnp.float32(0.0), agent, own, jnp.float32(0.0),
                agent.last_price, agent.last_market_price,
            )  # fmt: skip
            obs, agent, reward, terminated, info = jax.tree.map(
                lambda a, b: jnp.where(is_active, a, b), stepped, idle
            )
            obs = jnp.where(clock < profile.start, 0.0, obs)  # its window has not begun
            return obs, agent, jnp.where(is_active, reward, 0.0), terminated & is_active, info

        obs, agents, reward, terminated, info = jax.vmap(settle)(
            state.agents, state.profile, actions, active
        )
        next_state = state.replace(agents=agents, clock=clock)
        info = {**info, **self.agents_info(next_state, reward, active)}
        return obs, next_state, reward, terminated, info

    def agent_view(
        self, agent: EnvState, profile: AgentProfile, state: AgentsState, params: EnvParams
    ) -> tuple[EnvState, EnvParams]:
        """Agent i's own order and the parameters with its side and urgency (the static
        market has no shared state)."""
        del state
        return agent, with_profile(params, profile)
