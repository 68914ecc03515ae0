"""Optimal execution in the propagator market: replayed bars that the agents' own trades move.

:class:`PropagatorExecutionEnv` has the static environment's task, observation, action,
reward slot and ``info`` (one policy and one reward run in every market), but each
minute's fill price carries the impact of the agent's trades so far
(:mod:`serl_jax.market.propagator`): with ``q_s`` shares traded at a constant rate over
minute ``s`` and ``pi`` the impact's mean over the minute (a fraction of the price, in
units of the symbol's training ``sigma_day = sigma_minute sqrt(T)``)::

    p_exec = p_s * (1 + sigma_day * pi - side * half_spread_bps * 1e-4)

clipped so that the cost stays below ``max_cost_bps``. The static market's per-minute
square-root cost is not used: the impact prices the child orders. A child order trades
at most ``participation_cap`` of the minute's liquidity (the volume the market measures
participation against). The cap is a broker's maximum participation rate, and the
propagator's square-root response, calibrated on metaorders traded over time, prices a
block of several minutes' volume too kindly (5% of a US day's volume sold in the opening
minute paid 17 bps less than a day's TWAP on the US sample without it); the order book
needs no cap, its depth is the constraint. The forced last step trades the whole
remainder, and its shares above the cap pay ``force_penalty_bps`` more
(:func:`forced_block_penalty`), so that leaving part of the order to a last-minute block
is not cheaper than trading it within the cap. Q is not rounded (as in the static
market).

Observation. Bars before the window are the real day's; a simulated minute's bar price
is the replayed one shifted by the impact at the minute's end, and its log-return
feature moves with it (normalized with the training statistics). The other features stay
the replayed ones: the agent's trades are not added to the bar's volume (as in the
static market), and the impact's share of a 15-minute realized volatility is second
order (a 1-bp impact change a minute against minute volatilities of 5-15 bps).

:class:`PropagatorMultiAgentEnv` runs N agents on one impact state: their flows add up
within a minute, so agents that sell together pay more than each alone (crowding). With
one agent it is :class:`PropagatorExecutionEnv` bit for bit.

Benchmark. ``P~`` is the replayed day's VWAP (or TWAP) over the window, as in the other
markets: impact shows as lower PA.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from serl_jax.components.profiling import AgentProfile, ProfileFn, default_profile
from serl_jax.data.episodes import FEATURE_NAMES, TrainStats
from serl_jax.envs.execution import (
    MOVE_SINCE_ARRIVAL,
    NUM_PRIVATE_FEATURES,
    EnvParams,
    EnvState,
    ExecutionEnv,
    default_reward,
    desired_quantity,
    sigma_day,
)
from serl_jax.envs.multi_agent import AgentAxisEnv, AgentsState, with_profile
from serl_jax.market.propagator import (
    ImpactState,
    PropagatorParams,
    impact_minute,
    initial_impact,
    transient_impact,
)

_RETURN = FEATURE_NAMES.index("log_return")


@struct.dataclass
class PropagatorEnvParams(EnvParams):
    """:class:`~serl_jax.envs.execution.EnvParams` plus the impact model. Build with
    :meth:`from_static`.

    Attributes:
        impact: the propagator (:class:`~serl_jax.market.propagator.PropagatorParams`).
        return_std: the training standard deviation of the one-minute log return, the
            normalization of the observed return feature.
    """

    impact: PropagatorParams = None
    return_std: Any = None

    @classmethod
    def from_static(
        cls, params: EnvParams, stats: TrainStats, impact: PropagatorParams
    ) -> PropagatorEnvParams:
        """The propagator twin of static parameters over the same episodes.

        Args:
            params: static environment parameters (the episodes and the task).
            stats: the training statistics the episodes' features were normalized with.
            impact: the propagator
                (:meth:`~serl_jax.market.propagator.PropagatorConfig.params`).

        Raises:
            ValueError: a decision interval (``params.step_minutes`` > 1) or the diagnostic
                volume leak (static market only), or statistics whose features do not
                match the environment's.
        """
        if params.step_minutes > 1:
            raise ValueError(
                f"env.step_minutes={params.step_minutes}: decision intervals run in the "
                "static market only"
            )
        if params.diagnostic_volume_leak:
            raise ValueError("env.diagnostic_volume_leak: the static market only")
        if tuple(stats.feature_names) != FEATURE_NAMES:
            raise ValueError(f"stats.feature_names {stats.feature_names} != {FEATURE_NAMES}")
        fields = {f: getattr(params, f) for f in params.__dataclass_fields__}
        return_std = float(np.asarray(stats.feature_std)[_RETURN])
        return cls(**fields, impact=impact, return_std=jnp.float32(return_std))


@struct.dataclass
class PropagatorEnvState(EnvState):
    """:class:`~serl_jax.envs.execution.EnvState` plus the impact.

    Attributes:
        impact: the impact state (:class:`~serl_jax.market.propagator.ImpactState`).
        recent_impact: ``float32[lookback + 1]`` the impact at the end of each of the
            ``lookback + 1`` minutes before the current one, oldest first, a fraction of
            the price (0 for minutes not simulated): what the observation reads. Only
            these, so that the state stays small (the auto-reset selects every leaf of
            every lane at every step).
    """

    impact: ImpactState = None
    recent_impact: jax.Array = None


def minute_liquidity(params: PropagatorEnvParams, episode: jax.Array, slot: jax.Array):
    """``v_s``, shares: the minute's volume in the participation rate
    (:class:`~serl_jax.market.propagator.PropagatorConfig` ``liquidity``), at least
    ``liquidity_floor`` times the training mean minute volume."""
    data, impact = params.data, params.impact
    mean = data.mean_minute_volume[episode]
    if impact.liquidity == "realized":
        volume = data.volume[episode, slot]
    elif impact.liquidity == "expected":
        volume = data.expected_day_volume[episode] * data.volume_profile[episode, slot]
    else:
        volume = mean
    return jnp.maximum(volume, impact.liquidity_floor * mean)


def propagate_minute(
    impact: ImpactState,
    signed_shares: jax.Array,
    episode: jax.Array,
    slot: jax.Array,
    params: PropagatorEnvParams,
) -> tuple[ImpactState, jax.Array, jax.Array, jax.Array]:
    """One minute of the agents' net flow on the impact state.

    Args:
        impact: the impact before the minute.
        signed_shares: ``float32`` the agents' net shares in the minute (buys positive).
        episode: ``int32`` the day.
        slot: ``int32`` the minute.
        params: the environment's parameters.

    Returns:
        ``(impact, start, mean, end)``: the state after the minute and the impact (a
        fraction of the price) before it, averaged over it (what its trades pay) and at
        its end.
    """
    scale = sigma_day(params, episode)
    liquidity = minute_liquidity(params, episode, slot)
    day_volume = jnp.maximum(params.data.expected_day_volume[episode], 1e-12)
    model = params.impact
    start = transient_impact(impact.components, model) + model.permanent * impact.permanent
    impact, mean, end = impact_minute(
        impact, signed_shares / liquidity, signed_shares / day_volume, model
    )
    return impact, scale * start, scale * mean, scale * end


def record_impact(recent: jax.Array, impact: jax.Array) -> jax.Array:
    """``recent`` moved on by a minute: the oldest impact out, ``impact`` in last."""
    return jnp.concatenate([recent[1:], impact[None]])


def fill_price(
    price: jax.Array, impact: jax.Array, params: EnvParams, penalty: jax.Array = 0.0
) -> jax.Array:
    """``p (1 + impact - side * (half_spread + penalty))``, the cost clipped at
    ``max_cost_bps`` (``impact`` and ``penalty`` fractions of the price)."""
    cost = jnp.clip(
        params.half_spread_bps * 1e-4 + penalty - params.side * impact,
        0.0,
        params.max_cost_bps * 1e-4,
    )
    return price * (1.0 - params.side * cost)


def forced_block_penalty(
    state: EnvState, qty: jax.Array, slot: jax.Array, params: PropagatorEnvParams
) -> jax.Array:
    """The extra cost of the forced last step's shares above the participation cap, as a
    fraction of the price averaged over the step's ``qty`` shares:
    ``force_penalty_bps * 1e-4 * max(qty - cap, 0) / qty`` (0 at every other step).

    Why: the square-root response is calibrated on metaorders traded over time and prices
    a block of a minute's volume too kindly (module docstring); without the penalty a
    schedule that leaves part of its order to the forced step pays less than the
    optimum within the cap (3.1% of the objective on the cn sample, 2026-11-28).
    """
    forced = jnp.logical_and(params.force_liquidation, state.time + 1 >= state.window_len)
    cap = params.participation_cap * minute_liquidity(params, state.episode, slot)
    excess = jnp.where(forced, jnp.maximum(qty - cap, 0.0), 0.0)
    return params.force_penalty_bps * 1e-4 * excess / jnp.maximum(qty, 1e-12)


class PropagatorExecutionEnv(ExecutionEnv):
    """Parent-order execution in the propagator market (module docstring).

    Args:
        reward_fn: the reward slot, as for :class:`~serl_jax.envs.execution.ExecutionEnv`.
    """

    @property
    def name(self) -> str:
        return "PropagatorExecutionEnv"

    def init_state(
        self, params: PropagatorEnvParams, episode, start, window_len, quantity_multiplier=1.0
    ) -> PropagatorEnvState:
        """The static initial state (benchmark, arrival price, Q) with no impact yet (see
        the static ``init_state`` for the arguments).

        Raises:
            ValueError: if ``params`` is not a :class:`PropagatorEnvParams`.
        """
        if not isinstance(params, PropagatorEnvParams) or params.impact is None:
            raise ValueError("PropagatorExecutionEnv needs PropagatorEnvParams.from_static(...)")
        base = super().init_state(params, episode, start, window_len, quantity_multiplier)
        return PropagatorEnvState(
            **{f: getattr(base, f) for f in base.__dataclass_fields__},
            impact=initial_impact(params.impact),
            recent_impact=jnp.zeros((params.lookback + 1,), jnp.float32),
        )

    def child_quantity(self, state: EnvState, fraction, params: EnvParams, slot) -> jax.Array:
        """The minute's child order, shares: :func:`~serl_jax.envs.execution.desired_quantity`
        capped at ``participation_cap`` of the minute's liquidity (:func:`minute_liquidity`,
        the volume the market measures participation against), the whole inventory at a
        forced last step."""
        volume = params.data.volume[state.episode, slot]
        forced = jnp.logical_and(params.force_liquidation, state.time + 1 >= state.window_len)
        desired = desired_quantity(state, fraction, params, slot, volume)
        cap = params.participation_cap * minute_liquidity(params, state.episode, slot)
        capped = jnp.minimum(desired, jnp.minimum(cap, state.inventory))
        return jnp.where(forced, state.inventory, capped)

    def step_env(
        self, key: jax.Array, state: PropagatorEnvState, action, params: PropagatorEnvParams
    ) -> tuple[jnp.ndarray, PropagatorEnvState, jnp.ndarray, jnp.ndarray, dict[str, Any]]:
        """One minute with the child order: the same ``(obs, state, reward, terminated,
        info)`` as the static ``step_env``; ``info`` adds ``impact_bps``, the mean impact
        the minute's fill paid (bps of the replayed price, ``side``-signed: a cost is
        positive)."""
        del key
        slot = jnp.minimum(state.start + state.time, params.data.num_slots - 1)
        fraction = jnp.clip(jnp.asarray(action, jnp.float32).reshape(()), 0.0, 1.0)
        qty = self.child_quantity(state, fraction, params, slot)
        impact, start, mean, end = propagate_minute(
            state.impact, -params.side * qty, state.episode, slot, params
        )
        shared = state.replace(impact=impact, recent_impact=record_impact(state.recent_impact, end))
        return self.settle(state, shared, fraction, qty, start, mean, slot, params)

    def settle(self, state, shared, fraction, qty, start, mean, slot, params):
        """An agent's fill of ``qty`` shares at the minute's mean impact ``mean``
        (``start`` the impact before it), its next state over the market ``shared`` (the
        impact after the minute) and the step's ``(obs, state, reward, terminated,
        info)``."""
        price = params.data.price[state.episode, slot]
        exec_price = fill_price(price, mean, params, forced_block_penalty(state, qty, slot, params))
        market_price = price * (1.0 + start)
        inventory = state.inventory - qty
        next_state = shared.replace(
            time=state.time + 1,
            inventory=inventory,
            executed=state.quantity - inventory,
            notional=state.notional + qty * exec_price,
            last_qty=qty,
            last_price=jnp.where(qty > 0, exec_price, market_price),
            last_market_price=market_price,
            last_replayed_price=price,
        )
        obs, next_state, reward, terminated, info = self.finish_step(
            state, fraction, next_state, params, qty, exec_price, market_price
        )
        info["impact_bps"] = -params.side * mean * 1e4
        return obs, next_state, reward, terminated, info

    def get_obs(self, state: PropagatorEnvState, params, key=None) -> jnp.ndarray:
        """The static observation of the replayed bars, moved by the impact: the price
        move since arrival and the log-return features of the last ``lookback`` bars
        (the bar prices times ``1 + impact`` at their ends)."""
        obs = super().get_obs(state, params)
        recent = state.recent_impact
        slot = state.start + state.time
        last_seen = params.data.price[
            state.episode, jnp.clip(slot - 1, 0, params.data.num_slots - 1)
        ]
        move = jnp.where(slot > 0, last_seen * recent[-1] / state.arrival_price * 100.0, 0.0)
        obs = obs.at[MOVE_SINCE_ARRIVAL].add(move)
        returns = NUM_PRIVATE_FEATURES + np.arange(params.lookback) * params.data.num_features
        change = jnp.diff(jnp.log1p(recent)) / params.return_std
        return obs.at[returns + _RETURN].add(change)


@struct.dataclass
class PropagatorAgentsState(AgentsState):
    """One N-agent episode of the propagator market: :class:`AgentsState
    <serl_jax.envs.multi_agent.AgentsState>` and the shared impact.

    Attributes:
        impact: the impact of every agent's trades
            (:class:`~serl_jax.market.propagator.ImpactState`).
        recent_impact: ``float32[lookback + 1]`` the impact at the end of the last
            minutes (:class:`PropagatorEnvState`).
    """

    impact: ImpactState
    recent_impact: jax.Array


class PropagatorMultiAgentEnv(AgentAxisEnv):
    """N execution agents on one propagator market (module docstring): the agents' net
    flow drives one impact state, and every share traded in a minute pays its mean.

    Args:
        num_agents: N >= 1 (static: the shapes).
        scenario: ``"independent"`` or ``"team"``.
        reward_fn: the reward slot, applied per agent with its own ``params.side`` and
            ``params.urgency``.
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
        super().__init__(num_agents, scenario, PropagatorExecutionEnv(reward_fn), profile_fn)

    @property
    def name(self) -> str:
        return "PropagatorMultiAgentEnv"

    def init_state(
        self, params: PropagatorEnvParams, episode: jax.Array, key: jax.Array
    ) -> PropagatorAgentsState:
        """The state before the first window's first minute on day ``episode``, the N
        profiles drawn with ``key`` and no impact yet.

        Raises:
            ValueError: if ``params`` is not a :class:`PropagatorEnvParams`.
        """
        if not isinstance(params, PropagatorEnvParams) or params.impact is None:
            raise ValueError("PropagatorMultiAgentEnv needs PropagatorEnvParams.from_static(...)")

        def order(p: AgentProfile) -> EnvState:
            return ExecutionEnv.init_state(
                self.single, with_profile(params, p), episode, p.start, p.window_len, p.quantity
            )

        orders = self.draw_orders(params, episode, key, order)
        return PropagatorAgentsState(
            **{f: getattr(orders, f) for f in orders.__dataclass_fields__},
            impact=initial_impact(params.impact),
            recent_impact=jnp.zeros((params.lookback + 1,), jnp.float32),
        )

    def step_env(
        self, key: jax.Array, state: PropagatorAgentsState, actions, params: PropagatorEnvParams
    ) -> tuple[jax.Array, PropagatorAgentsState, jax.Array, jax.Array, dict[str, Any]]:
        """One minute without the reset: every active agent's child order joins one flow;
        each fills at the minute's mean impact with its own side's half-spread."""
        del key
        slot = jnp.minimum(state.clock, params.data.num_slots - 1)
        actions = jnp.asarray(actions, jnp.float32).reshape(self.num_agents)
        active = self.active(state)
        fraction = jnp.clip(actions, 0.0, 1.0)

        def child(agent, profile, a, is_active):
            view, agent_params = self.agent_view(agent, profile, state, params)
            qty = self.single.child_quantity(view, a, agent_params, slot)
            return jnp.where(is_active, qty, 0.0)

        qty = jax.vmap(child)(state.agents, state.profile, fraction, active)
        impact, start, mean, end = propagate_minute(
            state.impact, -(state.profile.side * qty).sum(), state.episode, slot, params
        )
        shared = state.replace(
            clock=state.clock + 1,
            impact=impact,
            recent_impact=record_impact(state.recent_impact, end),
        )

        def settle(agent, profile, a, q, is_active):
            view, agent_params = self.agent_view(agent, profile, state, params)
            after, _ = self.agent_view(agent, profile, shared, params)
            obs, stepped, reward, terminated, info = self.single.settle(
                view, after, a, q, start, mean, slot, agent_params
            )
            stepped = EnvState(**{f: getattr(stepped, f) for f in EnvState.__dataclass_fields__})
            stepped = jax.tree.map(lambda x, y: jnp.where(is_active, x, y), stepped, agent)
            obs = jnp.where(shared.clock < profile.start, 0.0, obs)  # window not begun
            return stepped, obs, jnp.where(is_active, reward, 0.0), terminated & is_active, info

        agents, obs, reward, terminated, info = jax.vmap(settle)(
            state.agents, state.profile, fraction, qty, active
        )
        next_state = shared.replace(agents=agents)
        info = {**info, **self.agents_info(next_state, reward, active)}
        return obs, next_state, reward, terminated, info

    def agent_view(
        self, agent: EnvState, profile: AgentProfile, state: PropagatorAgentsState, params
    ) -> tuple[PropagatorEnvState, PropagatorEnvParams]:
        """Agent i as a single-agent propagator state (its order, the shared impact) and
        the parameters with its side and urgency."""
        view = PropagatorEnvState(
            **{f: getattr(agent, f) for f in agent.__dataclass_fields__},
            impact=state.impact,
            recent_impact=state.recent_impact,
        )
        return view, with_profile(params, profile)
