"""N execution agents in one dynamic market: their child orders move prices for each other.

:class:`MultiAgentExecutionEnv` runs :class:`~serl_jax.envs.dynamic.DynamicExecutionEnv`'s
task for N agents at once on one simulated market: one book, one set of background
populations and one day's bars, the agents' child orders entering every minute as the
messages of owners ``FIRST_AGENT_OWNER + i`` (order ids ``AGENT_ORDER_ID + i``), in agent
order, before the background rounds. Each agent's fills, cash, reward, observation and
``info`` are the single-agent environment's, computed from its own owner id's settlement.

:class:`AgentAxisEnv` holds what this market shares with the static one
(:class:`~serl_jax.envs.static_multi_agent.StaticMultiAgentEnv`): profiles, scenarios,
windows and clock, auto-reset, team reward, observations and the reward recorder.

Layout. Per-agent arrays have a leading agent axis ``[N, ...]`` (observations
``float32[N, D]``, actions ``float32[N]``, rewards ``float32[N]``), not JaxMARL's dict of
agents: the agents are homogeneous (same observation and action spaces), so a policy with
shared parameters is one ``vmap`` over the axis, a centralized critic reads the joint
observation as a reshape, and N is a static shape that XLA compiles once.

Scenarios (static):

- ``"independent"``: each agent has its own parent order from its
  :class:`~serl_jax.components.profiling.AgentProfile` (side, Q multiplier, window).
- ``"team"``: the agents share one parent order: agent 0's profile gives every agent its
  side and window, and each agent's Q (its profile's multiplier on ``order_fraction *
  expected window volume``) is its share of the team's parent order, the sum. The team
  is scored by team PA (:func:`team_price_advantage`) and ``info["team_reward"]``, the
  agents' rewards weighted by their shares ``Q_i / sum Q``.

Episode and clock. The market runs the minutes from the first agent's window start to
the last agent's window end (``state.clock`` is the slot simulated next). Agent ``i`` is
active in the minutes of its window: before, it waits (its observation is zeros, no
message is sent, its reward is 0); after, it is done (``terminated`` fires at its last
step, as in the single-agent environment, and it stays inactive). ``info["active"]``
marks the steps each agent took, the ones a learner trains on. The episode ends, and the
environment resets (auto-reset, as gymnax's ``step``), when every window is over.

With one agent the episode is the agent's window, the reset draws the single-agent
environment's day, Q and window from the same key
(:func:`~serl_jax.components.profiling.default_profile`), and the market runs the same
messages with the same key: observations, rewards, fills and ``info`` equal
:class:`~serl_jax.envs.dynamic.DynamicExecutionEnv`'s bit for bit
(``tests/test_multi_agent_env.py``).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import spaces

from serl_jax.components.profiling import AgentProfile, ProfileFn, default_profile, draw_profiles
from serl_jax.components.reward import reward_term_values
from serl_jax.envs.dynamic import DynamicEnvParams, DynamicEnvState, DynamicExecutionEnv
from serl_jax.envs.execution import (
    EnvParams,
    EnvState,
    ExecutionEnv,
    default_reward,
    hash_uniforms,
    safe_divide,
)
from serl_jax.market.params import FIRST_AGENT_OWNER
from serl_jax.market.simulator import MarketState, reset_market

SCENARIOS = ("independent", "team")


@struct.dataclass
class AgentsState:
    """What every N-agent episode holds (a batch under ``vmap``), in either market.

    Attributes:
        agents: every agent's order, :class:`~serl_jax.envs.execution.EnvState` with
            ``[N]`` leaves (``time`` counts the agent's own steps in its window).
        profile: the agents' :class:`~serl_jax.components.profiling.AgentProfile`,
            ``[N]`` leaves.
        episode: ``int32`` index of the day in ``params.data``.
        clock: ``int32`` the slot (minute) the market runs next.
        end: ``int32`` the first slot after every agent's window.
    """

    agents: EnvState
    profile: AgentProfile
    episode: jax.Array
    clock: jax.Array
    end: jax.Array


@struct.dataclass
class MultiAgentState(AgentsState):
    """One dynamic multi-agent episode: :class:`AgentsState` and the shared market.

    Attributes:
        market: the simulated market all agents trade in.
        price_history: ``float32[T]`` the day's bar prices, real before ``clock`` started,
            then simulated mids (currency).
        feature_history: ``float32[T, F]`` normalized features of the same bars.
        volume_history: ``float32[T]`` the same bars' volumes, shares.
    """

    market: MarketState
    price_history: jax.Array
    feature_history: jax.Array
    volume_history: jax.Array


def team_price_advantage(notional, executed, benchmark_price, side) -> jax.Array:
    """The team's PA, bps: ``side * (sum notional / sum executed / P~ - 1) * 1e4``.

    Args:
        notional: ``float32[..., N]`` the agents' filled notional, currency.
        executed: ``float32[..., N]`` their executed shares.
        benchmark_price: ``float32[...]`` the team's benchmark P~ (the agents share it).
        side: ``float32[...]`` +1 sell, -1 buy.

    Returns:
        ``float32[...]``; 0 where the team executed nothing (as
        :func:`~serl_jax.envs.execution.order_price_advantage`).
    """
    total = executed.sum(-1)
    avg_price = safe_divide(notional.sum(-1), total)
    return jnp.where(total > 0, side * (avg_price / benchmark_price - 1.0) * 1e4, 0.0)


def with_profile(params: EnvParams, profile: AgentProfile) -> EnvParams:
    """The shared parameters with one agent's ``side`` and ``urgency`` (its profile's)."""
    return params.replace(side=profile.side, urgency=profile.urgency)


class AgentAxisEnv:
    """What the N-agent markets share: the agents' profiles, windows and clock, the
    auto-reset, the team reward, the observations and the reward recorder, on the
    leading agent axis (module docstring). A market subclasses it with ``single`` (its
    single-agent environment), :meth:`init_state`, :meth:`step_env` and
    :meth:`agent_view`.

    Args:
        num_agents: N >= 1 (static: the shapes).
        scenario: ``"independent"`` or ``"team"``.
        single: the market's single-agent environment (its ``reward_fn`` is the reward
            slot, applied per agent with its own ``params.side`` and ``params.urgency``).
        profile_fn: the profile slot (:mod:`serl_jax.components.profiling`).

    Raises:
        ValueError: for ``num_agents < 1`` or an unknown scenario.
    """

    def __init__(self, num_agents: int, scenario: str, single: ExecutionEnv, profile_fn: ProfileFn):
        if int(num_agents) < 1:
            raise ValueError(f"num_agents must be >= 1, got {num_agents}")
        if scenario not in SCENARIOS:
            raise ValueError(f"scenario must be one of {SCENARIOS}, got {scenario!r}")
        self.num_agents = int(num_agents)
        self.scenario = scenario
        self.profile_fn = profile_fn
        self.single = single

    # ------------------------------------------------------------------ reset

    def reset_state(self, key: jax.Array, params: EnvParams) -> AgentsState:
        """Draws the day (uniform 0 of the key's hash, as the single-agent reset), then
        :meth:`init_state` with the same key."""
        data = params.data
        u = hash_uniforms(key, 1)
        episode = jnp.minimum((u[0] * data.num_episodes).astype(jnp.int32), data.num_episodes - 1)
        return self.init_state(params, episode, key)

    def init_state(self, params: EnvParams, episode: jax.Array, key: jax.Array) -> AgentsState:
        """The state before the first window's first minute on day ``episode``."""
        raise NotImplementedError

    def draw_orders(
        self, params: EnvParams, episode: jax.Array, key: jax.Array, order
    ) -> AgentsState:
        """The N agents' orders on day ``episode``: profiles drawn with ``key`` (in the
        ``team`` scenario every agent takes agent 0's side and window), each made an
        order by ``order(profile) -> EnvState`` (scalars, vmapped), the clock at the
        first window's start."""
        profile = draw_profiles(self.profile_fn, key, self.num_agents, params)
        if self.scenario == "team":  # one parent order: agent 0's side and window
            profile = profile.replace(
                side=jnp.broadcast_to(profile.side[0], profile.side.shape),
                start=jnp.broadcast_to(profile.start[0], profile.start.shape),
                window_len=jnp.broadcast_to(profile.window_len[0], profile.window_len.shape),
            )
        return AgentsState(
            agents=jax.vmap(order)(profile),
            profile=profile,
            episode=jnp.asarray(episode, jnp.int32),
            clock=profile.start.min(),
            end=(profile.start + profile.window_len).max(),
        )

    def reset(self, key: jax.Array, params: EnvParams) -> tuple[jax.Array, AgentsState]:
        """``(obs float32[N, D], state)`` of a fresh episode."""
        state = self.reset_state(key, params)
        return self.get_obs(state, params), state

    # ------------------------------------------------------------------ step

    @partial(jax.jit, static_argnames=("self",))
    def step(
        self, key: jax.Array, state: AgentsState, actions: jax.Array, params: EnvParams
    ) -> tuple[jax.Array, AgentsState, jax.Array, jax.Array, jax.Array, dict[str, Any]]:
        """One minute with every active agent's child order, then auto-reset.

        Args:
            key: PRNG key of the minute (the whole key drives the minute and the reset,
                as the single-agent ``step``).
            state: the episode.
            actions: ``float32[N]`` each agent's fraction of its remaining inventory,
                clipped to [0, 1] (ignored for inactive agents).
            params: the environment's parameters (shared; each agent's side and urgency
                come from its profile).

        Returns:
            ``(obs [N, D], state, reward [N], terminated [N], truncated [N], info)``;
            ``info`` has the single-agent ``info`` fields with a leading ``[N]`` axis
            (``exec_qty``, ``exec_price``, ``order_pa``, ..., ``final_observation``
            ``[N, D]``), ``active`` ``bool[N]`` (the agent traded in this minute: the steps
            to learn from), ``observing`` ``bool[N]`` (the returned observation is real:
            the agent's window has begun; zeros otherwise), ``team_reward`` ``float32``
            and ``episode_done`` ``bool``.
        """
        obs_step, state_step, reward, terminated, info = self.step_env(key, state, actions, params)
        done = info["episode_done"]
        state_reset = self.reset_state(key, params)
        state = jax.tree.map(lambda r, s: jax.lax.select(done, r, s), state_reset, state_step)
        truncated = jnp.zeros((self.num_agents,), jnp.bool_)
        info = {**info, "terminated": terminated, "truncated": truncated}
        info["final_observation"] = obs_step
        info["observing"] = state.clock >= state.profile.start
        return self.get_obs(state, params), state, reward, terminated, truncated, info

    def step_env(
        self, key: jax.Array, state: AgentsState, actions: jax.Array, params: EnvParams
    ) -> tuple[jax.Array, AgentsState, jax.Array, jax.Array, dict[str, Any]]:
        """One minute without the reset: ``(obs, state, reward, terminated, info)``,
        ``info`` with :meth:`agents_info`'s fields."""
        raise NotImplementedError

    def active(self, state: AgentsState) -> jax.Array:
        """``bool[N]``: the agents that trade in the minute ``state.clock`` (inside their
        windows)."""
        agents = state.agents
        return (state.clock >= agents.start) & (agents.time < agents.window_len)

    def agents_info(
        self, next_state: AgentsState, reward: jax.Array, active: jax.Array
    ) -> dict[str, jax.Array]:
        """The N-agent fields of a minute's ``info``: ``active`` ``bool[N]``,
        ``team_reward`` (the rewards ``float32[N]`` weighted by the agents' shares
        ``Q_i / sum Q``) and ``episode_done`` (every window is over)."""
        agents = next_state.agents
        share = safe_divide(agents.quantity, agents.quantity.sum())
        return {
            "active": active,
            "team_reward": (share * reward).sum(),
            "episode_done": next_state.clock >= next_state.end,
        }

    def reward_terms(
        self, state: AgentsState, actions: jax.Array, next_state: AgentsState, params: EnvParams
    ) -> dict[str, jax.Array]:
        """Each agent's reward terms in the minute from ``state`` to ``next_state`` (a
        recorder for :func:`~serl_jax.evaluation.multi_agent_rollout`): the reward slot's
        named terms and ``"total"``
        (:func:`~serl_jax.components.reward.reward_term_values`), ``float32[N]`` each,
        0 for an agent that did not trade in the minute (as its reward).

        Args:
            state, next_state: the episode before and after :meth:`step_env`.
            actions: ``float32[N]`` the actions taken (clipped to [0, 1] as the step).
            params: the environment's parameters.
        """
        active = self.active(state)
        actions = jnp.clip(jnp.asarray(actions, jnp.float32).reshape(self.num_agents), 0.0, 1.0)

        def one(prev, nxt, profile, action, is_active):
            view, agent_params = self.agent_view(prev, profile, state, params)
            next_view, _ = self.agent_view(nxt, profile, next_state, params)
            terms = reward_term_values(self.single.reward_fn(view, action, next_view, agent_params))
            return {k: jnp.where(is_active, v, 0.0) for k, v in terms.items()}

        return jax.vmap(one)(state.agents, next_state.agents, state.profile, actions, active)

    # ------------------------------------------------------------------ views

    def agent_view(
        self, agent: EnvState, profile: AgentProfile, state: AgentsState, params: EnvParams
    ) -> tuple[EnvState, EnvParams]:
        """Agent i as a single-agent state and parameters (its side and urgency), so
        single-agent code (the reward, the observation, a baseline policy) runs
        unchanged; ``agent`` and ``profile`` are agent i's slices of ``state.agents`` and
        ``state.profile``."""
        raise NotImplementedError

    def get_obs(self, state: AgentsState, params: EnvParams) -> jax.Array:
        """``float32[N, D]``: each agent's single-agent observation, zeros for an agent
        whose window has not begun (it would see bars the market has not reached)."""

        def one(agent, profile):
            view, agent_params = self.agent_view(agent, profile, state, params)
            obs = self.single.get_obs(view, agent_params)
            return jnp.where(state.clock < profile.start, 0.0, obs)

        return jax.vmap(one)(state.agents, state.profile)

    def observation_size(self, params: EnvParams) -> int:
        """D, one agent's observation length (the single-agent environment's)."""
        return self.single.observation_size(params)

    def action_space(self, params: EnvParams | None = None) -> spaces.Box:
        """One agent's action, ``a ∈ [0, 1]`` (the fraction of its remaining inventory)."""
        return self.single.action_space(params)


class MultiAgentExecutionEnv(AgentAxisEnv):
    """N execution agents in the dynamic market (see the module docstring).

    Args:
        num_agents: N >= 1 (static: the shapes).
        scenario: ``"independent"`` or ``"team"``.
        reward_fn: the reward slot, as for
            :class:`~serl_jax.envs.execution.ExecutionEnv`, applied per agent with its own
            ``params.side`` and ``params.urgency``.
        profile_fn: the profile slot (:mod:`serl_jax.components.profiling`).

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
        super().__init__(num_agents, scenario, DynamicExecutionEnv(reward_fn), profile_fn)

    @property
    def name(self) -> str:
        return "MultiAgentExecutionEnv"

    def init_state(
        self, params: DynamicEnvParams, episode: jax.Array, key: jax.Array
    ) -> MultiAgentState:
        """The state before the first window's first minute on day ``episode``, the N
        profiles drawn with ``key``.

        Raises:
            ValueError: if ``params`` is not a
                :class:`~serl_jax.envs.dynamic.DynamicEnvParams` from ``from_static``.
        """
        if not isinstance(params, DynamicEnvParams) or params.feature_mean is None:
            raise ValueError("MultiAgentExecutionEnv needs DynamicEnvParams.from_static(...)")
        data = params.data
        episode = jnp.asarray(episode, jnp.int32)

        def order(p: AgentProfile) -> EnvState:
            # the static order (benchmark, arrival, Q); the market is the agents' shared one
            base = ExecutionEnv.init_state(
                self.single, with_profile(params, p), episode, p.start, p.window_len, p.quantity
            )
            quantity = jnp.round(base.quantity)  # whole shares, as the single-agent env
            return base.replace(quantity=quantity, inventory=quantity)

        orders = self.draw_orders(params, episode, key, order)
        arrival = data.price[episode, jnp.maximum(orders.clock - 1, 0)]
        market = reset_market(
            arrival / params.market.tick_size,
            params.market.volume_unit(data, episode),
            params.market,
            num_agents=self.num_agents,
        )
        return MultiAgentState(
            **{f: getattr(orders, f) for f in orders.__dataclass_fields__},
            market=market,
            price_history=data.price[episode],
            feature_history=data.features[episode],
            volume_history=data.volume[episode],
        )

    def step_env(
        self, key: jax.Array, state: MultiAgentState, actions: jax.Array, params: DynamicEnvParams
    ) -> tuple[jax.Array, MultiAgentState, jax.Array, jax.Array, dict[str, Any]]:
        """One minute without the reset: ``(obs, state, reward, terminated, info)``: the
        agents' child orders enter the shared book, each settles its own owner's fills."""
        data, market = params.data, params.market
        slot = jnp.minimum(state.clock, data.num_slots - 1)
        agent_index = jnp.arange(self.num_agents, dtype=jnp.int32)
        actions = jnp.asarray(actions, jnp.float32).reshape(self.num_agents)
        active = self.active(state)

        def child_order(i, agent, profile, action, is_active):
            view, agent_params = self.agent_view(agent, profile, state, params)
            fraction = jnp.clip(action, 0.0, 1.0)
            forced = jnp.logical_and(
                agent_params.force_liquidation, agent.time + 1 >= agent.window_len
            )
            qty = jnp.where(forced, agent.inventory, jnp.floor(fraction * agent.inventory))
            qty = jnp.where(is_active, qty, 0.0)
            order, qty = self.single.worked_order(
                view, agent_params, slot, fraction, qty, forced, agent=i
            )
            if order is not None:
                order = order.replace(limit=jnp.where(is_active, order.limit, 0))
            messages = self.single.child_messages(
                view, qty.astype(jnp.int32), forced, agent_params, agent=i
            )
            return messages, order

        messages, participation = jax.vmap(child_order)(
            agent_index, state.agents, state.profile, actions, active
        )
        messages = jax.tree.map(lambda x: x.reshape(-1), messages)  # agent-major, 2 each

        new_market, minute, market_price = self.single.market_minute(
            state.market, state.episode, slot, messages, participation, key, params
        )
        price_history = state.price_history.at[slot].set(minute.mid * market.tick_size)
        features = self.single.minute_features(state.episode, params, slot, price_history, minute)
        shared = state.replace(
            clock=state.clock + 1,
            market=new_market,
            price_history=price_history,
            feature_history=state.feature_history.at[slot].set(features),
            volume_history=state.volume_history.at[slot].set(minute.volume),
        )
        replayed_price = data.price[state.episode, slot]

        def settle(i, agent, profile, action, is_active):
            view, agent_params = self.agent_view(agent, profile, state, params)
            filled, value, exec_price = self.single.owner_fill(
                minute, FIRST_AGENT_OWNER + i, market_price, agent_params
            )
            inventory = agent.inventory - filled
            stepped = agent.replace(
                time=agent.time + 1,
                inventory=inventory,
                executed=agent.quantity - inventory,
                notional=agent.notional + value,
                last_qty=filled,
                last_price=exec_price,
                last_market_price=market_price,
                last_replayed_price=replayed_price,
            )
            stepped = jax.tree.map(lambda a, b: jnp.where(is_active, a, b), stepped, agent)
            next_view, _ = self.agent_view(stepped, profile, shared, params)
            fraction = jnp.clip(action, 0.0, 1.0)
            obs, _, reward, terminated, info = self.single.finish_step(
                view, fraction, next_view, agent_params, filled, exec_price, market_price
            )
            waiting = shared.clock < profile.start  # its window has not begun
            obs = jnp.where(waiting, 0.0, obs)
            return stepped, obs, jnp.where(is_active, reward, 0.0), terminated & is_active, info

        agents, obs, reward, terminated, info = jax.vmap(settle)(
            agent_index, state.agents, state.profile, actions, active
        )
        next_state = shared.replace(agents=agents)
        info = {**info, **self.agents_info(next_state, reward, active)}
        return obs, next_state, reward, terminated, info

    def agent_view(
        self, agent: EnvState, profile: AgentProfile, state: MultiAgentState, params
    ) -> tuple[DynamicEnvState, DynamicEnvParams]:
        """Agent i as a single-agent dynamic state and parameters (its order, the shared
        market and bars; its side and urgency), so single-agent code (the reward, the
        observation, a baseline policy) runs unchanged; ``agent`` and ``profile`` are
        agent i's slices of ``state.agents`` and ``state.profile``."""
        fields = {f: getattr(agent, f) for f in agent.__dataclass_fields__}
        view = DynamicEnvState(
            **fields,
            market=state.market,
            price_history=state.price_history,
            feature_history=state.feature_history,
            volume_history=state.volume_history,
        )
        return view, with_profile(params, profile)
