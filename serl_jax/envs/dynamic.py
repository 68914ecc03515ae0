"""Optimal execution in the dynamic market: the agent's child orders go through a book.

:class:`DynamicExecutionEnv` has the static environment's task, observation, action,
reward slot and ``info`` (so one policy and one reward run in both), but each one-minute
step runs a simulated market (:mod:`serl_jax.market`) in which background populations
trade on a JAX order book and the agent's child order is one more message: its fills,
the mid and later book states respond to it. Permanent and transient impact are not
modelled, they emerge (``benchmarks/bench_dynamic.py`` and the evaluation CLI measure
them).

Per step (minute ``s = start + t``):

1. The agent's resting passive order, if any, is cancelled; the child order of
   ``floor(a_t * I_t)`` shares (all of ``I_t`` at the last step with
   ``force_liquidation``) is sent as a market order (``child_order="market"``) or as a
   limit order at the best quote of its own side (``"passive"``; it keeps price-time
   queue priority until the next step cancels what is left). There is no participation
   cap: the book's depth is the liquidity constraint, and what a market order cannot
   fill stays in the inventory. A ``"sliced"`` child order is the market order split
   evenly over the minute's trading rounds (a TWAP within the minute,
   :func:`~serl_jax.market.simulator.sliced_quantity`; ``child_slices`` parts at evenly
   spaced rounds, or one per round; each part is booked first in its round and the
   round's other orders see the book it left), so that its later parts meet the informed
   traders' response to its earlier ones, as a large order worked in a real book does. A
   participation child order
   (``EnvParams.child_quantity="participation"``, market child orders) is worked over the
   minute instead (:class:`~serl_jax.market.simulator.ParticipationOrder`): at the start
   of every round a market order keeps its fills at the rate ``a_t * I_t / V̂_s`` of the
   other traders' volume so far, ``V̂_s`` the forecast of
   :func:`~serl_jax.envs.execution.minute_volume_forecast` from this day's volume history
   (real bars, then the simulated minutes); a passive participation child order rests at
   its expected size ``a_t * I_t``.
2. ``rounds_per_minute`` trading rounds of the background populations. The informed
   traders see the fundamental, which is the replayed day: in round ``r`` of minute
   ``s`` it is ``p[s-1] + (r + 1) / R * (p[s] - p[s-1])`` (ticks), the real price the
   minute ends at, before anyone else.
3. The agent's fills are read from the trades settled to its owner id
   (:data:`~serl_jax.market.params.FIRST_AGENT_OWNER`): ``exec_qty`` shares at the
   average price ``exec_price``. ``market_price`` is the mid before the child order.

Benchmark. ``P~`` is the replayed day's VWAP (or TWAP) over the window, as in the static
environment: the price the undisturbed market offered, so PA in both markets is
measured against the same number and the cost of impact shows as lower PA.

Observation. Bars before the window are the real day's; every simulated minute then
writes its mid (the bar's price), volume and high/low of the mid, turned into the same
features as :mod:`serl_jax.data.episodes` (log return, rolling volatility over
``vol_window`` minutes, volume share of the expected day volume, time of day, high-low
range) and normalized with the training statistics. A feature that is constant on the
training days (e.g. the high-low range of data without highs and lows) stays at its
training value.

Quantities are whole shares: ``Q`` is rounded at reset.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from serl_jax.data.episodes import FEATURE_NAMES, STD_FLOOR, TrainStats
from serl_jax.envs.execution import (
    EnvParams,
    EnvState,
    ExecutionEnv,
    default_reward,
    history_volume_forecast,
    safe_divide,
)
from serl_jax.lob.book import BUY, CANCEL, LIMIT, MARKET, SELL, Message
from serl_jax.lob.queries import own_orders
from serl_jax.market.agents import CANCEL_ALL, messages, round_view
from serl_jax.market.params import AGENT_ORDER_ID, FIRST_AGENT_OWNER, MarketParams
from serl_jax.market.simulator import (
    MarketState,
    ParticipationOrder,
    reset_market,
    run_minute,
)

CHILD_ORDERS = ("market", "passive", "sliced")
_RETURN, _VOLATILITY, _VOLUME, _TIME, _RANGE = range(len(FEATURE_NAMES))


@struct.dataclass
class DynamicEnvParams(EnvParams):
    """:class:`~serl_jax.envs.execution.EnvParams` plus the simulated market.

    The static cost-model fields (``half_spread_bps``, ``impact_eta_bps``,
    ``impact_exponent``, ``participation_cap``, ``force_penalty_bps``, ``max_cost_bps``)
    are not used: fills come from the book. Build with :meth:`from_static`.

    Attributes:
        market: the background populations' parameters.
        feature_mean, feature_std: ``float32[F]`` the training-day feature normalization
            (:class:`~serl_jax.data.TrainStats`).
        vol_window: rolling-volatility window of the features, minutes (static).
        child_order: ``"market"``, ``"passive"`` or ``"sliced"`` (static), see the module
            docstring.
        child_slices: a sliced child order's parts, sent at evenly spaced trading rounds
            (static; 0: one per round, ``market.rounds_per_minute`` parts).
        lob_engine: ``"vmap"`` or ``"batched"`` (static): the order-book engine the
            market runs on (:mod:`serl_jax.lob.engine`; same fills, speed per backend).
    """

    market: MarketParams = MarketParams()
    feature_mean: Any = None
    feature_std: Any = None
    vol_window: int = struct.field(pytree_node=False, default=15)
    child_order: str = struct.field(pytree_node=False, default="market")
    child_slices: int = struct.field(pytree_node=False, default=0)
    lob_engine: str = struct.field(pytree_node=False, default="vmap")

    @classmethod
    def from_static(
        cls,
        params: EnvParams,
        stats: TrainStats,
        market: MarketParams,
        child_order: str = "market",
        lob_engine: str = "vmap",
        child_slices: int = 0,
    ) -> DynamicEnvParams:
        """The dynamic twin of static parameters over the same episodes.

        Args:
            params: static environment parameters (the episodes and the task).
            stats: the training statistics the episodes' features were normalized with.
            market: background-population parameters.
            child_order: ``"market"``, ``"passive"`` or ``"sliced"``.
            lob_engine: ``"vmap"`` or ``"batched"`` (resolve a configured ``"auto"`` with
                :func:`serl_jax.lob.engine.resolve_engine`).
            child_slices: a sliced child order's parts (0: one per trading round).

        Raises:
            ValueError: for an unknown ``child_order`` or ``lob_engine``, ``child_slices``
                outside ``[0, market.rounds_per_minute]``, statistics whose
                features do not match the environment's, or a decision interval
                (``params.step_minutes`` > 1, static market only).
        """
        if params.step_minutes > 1:
            raise ValueError(
                f"env.step_minutes={params.step_minutes}: decision intervals run in the "
                "static market only"
            )
        if child_order not in CHILD_ORDERS:
            raise ValueError(f"child_order must be one of {CHILD_ORDERS}, got {child_order!r}")
        if not 0 <= child_slices <= market.rounds_per_minute:
            raise ValueError(
                f"child_slices must be in [0, rounds_per_minute = {market.rounds_per_minute}]"
                f", got {child_slices}"
            )
        if lob_engine not in ("vmap", "batched"):
            raise ValueError(f"lob_engine must be 'vmap' or 'batched', got {lob_engine!r}")
        if params.diagnostic_volume_leak:
            raise ValueError(
                "env.diagnostic_volume_leak: the static market only (the dynamic market's "
                "volume is simulated)"
            )
        if tuple(stats.feature_names) != FEATURE_NAMES:
            raise ValueError(f"stats.feature_names {stats.feature_names} != {FEATURE_NAMES}")
        fields = {f: getattr(params, f) for f in params.__dataclass_fields__}
        return cls(
            **fields,
            market=market,
            feature_mean=jnp.asarray(np.asarray(stats.feature_mean), jnp.float32),
            feature_std=jnp.asarray(np.asarray(stats.feature_std), jnp.float32),
            vol_window=int(stats.vol_window),
            child_order=child_order,
            child_slices=int(child_slices),
            lob_engine=lob_engine,
        )


@struct.dataclass
class DynamicEnvState(EnvState):
    """:class:`~serl_jax.envs.execution.EnvState` plus the market and what it showed.

    Attributes:
        market: the simulated market (book, owners' positions and cash).
        price_history: ``float32[T]`` the day's bar prices: real before the window,
            simulated mids (currency) for the minutes already simulated.
        feature_history: ``float32[T, F]`` normalized features of the same bars.
        volume_history: ``float32[T]`` the same bars' volumes, shares (what participation
            child orders forecast the minute's volume from).
    """

    market: MarketState = None
    price_history: jax.Array = None
    feature_history: jax.Array = None
    volume_history: jax.Array = None


class DynamicExecutionEnv(ExecutionEnv):
    """Parent-order execution in the simulated multi-agent market (module docstring).

    Args:
        reward_fn: the reward slot, as for :class:`~serl_jax.envs.execution.ExecutionEnv`.
    """

    def __init__(self, reward_fn=default_reward):
        super().__init__(reward_fn)

    @property
    def name(self) -> str:
        return "DynamicExecutionEnv"

    def init_state(
        self,
        params: DynamicEnvParams,
        episode,
        start,
        window_len,
        quantity_multiplier=1.0,
    ) -> DynamicEnvState:
        """The static initial state (benchmark, arrival price) with ``Q`` rounded to whole
        shares and a fresh market around the arrival price (see the static ``init_state``
        for the arguments).

        Raises:
            ValueError: if ``params`` is not a :class:`DynamicEnvParams` from
                :meth:`DynamicEnvParams.from_static`.
        """
        if not isinstance(params, DynamicEnvParams) or params.feature_mean is None:
            raise ValueError("DynamicExecutionEnv needs DynamicEnvParams.from_static(...)")
        base = super().init_state(params, episode, start, window_len, quantity_multiplier)
        quantity = jnp.round(base.quantity)
        data = params.data
        market = reset_market(
            base.arrival_price / params.market.tick_size,
            params.market.volume_unit(data, base.episode),
            params.market,
        )
        fields = {f: getattr(base, f) for f in base.__dataclass_fields__}
        fields.update(quantity=quantity, inventory=quantity)
        return DynamicEnvState(
            **fields,
            market=market,
            price_history=data.price[base.episode],
            feature_history=data.features[base.episode],
            volume_history=data.volume[base.episode],
        )

    def child_messages(
        self, state: DynamicEnvState, qty, forced, params: DynamicEnvParams, agent=0
    ) -> Message:
        """The agent's 2 messages of a step: the cancel of its resting passive order (a
        no-op for market child orders), then the new child order of ``qty`` shares
        (``int32``). No-ops when there is nothing to do, so an agent with ``Q = 0`` leaves
        the market exactly as it would be without it.

        Args:
            state: the agent's state and the market.
            qty: ``int32`` shares of the child order.
            forced: ``bool``, the forced last step (a market order whatever the type).
            params: the agent's parameters (its ``side``).
            agent: ``int32`` agent index i: owner ``FIRST_AGENT_OWNER + i``, order id
                ``AGENT_ORDER_ID + i``.

        Returns:
            A :class:`~serl_jax.lob.book.Message` with ``int32[2]`` fields.
        """
        book_side = jnp.where(params.side > 0, SELL, BUY)
        owner, order_id = FIRST_AGENT_OWNER + agent, AGENT_ORDER_ID + agent
        view = round_view(state.market.book, state.market.reference)
        cancel = 0  # a market child order never rests: nothing to cancel
        if params.child_order == "passive":
            # the agent's only resting order is its passive child order
            resting = own_orders(state.market.book, owner).mask.any()
            cancel = jnp.where(resting, CANCEL, 0)
            best_own = jnp.where(
                book_side == SELL,
                jnp.where(view.has_ask, view.best_ask, jnp.ceil(view.reference + 0.5)),
                jnp.where(view.has_bid, view.best_bid, jnp.floor(view.reference - 0.5)),
            )
            kind = jnp.where(forced, MARKET, LIMIT)
        else:
            best_own = jnp.int32(0)
            kind = jnp.int32(MARKET)
        return messages(
            kind=[cancel, jnp.where(qty > 0, kind, 0)],
            side=[book_side, book_side],
            price=[0, best_own],
            qty=[CANCEL_ALL, qty],
            order_id=[order_id, order_id],
            owner=[owner, owner],
        )

    def step_env(
        self, key: jax.Array, state: DynamicEnvState, action, params: DynamicEnvParams
    ) -> tuple[jnp.ndarray, DynamicEnvState, jnp.ndarray, jnp.ndarray, dict[str, Any]]:
        """One minute of the market with the child order in it; the same
        ``(obs, state, reward, terminated, info)`` as the static ``step_env``."""
        data, market = params.data, params.market
        n_slots = data.num_slots
        slot = jnp.minimum(state.start + state.time, n_slots - 1)
        fraction = jnp.clip(jnp.asarray(action, jnp.float32).reshape(()), 0.0, 1.0)
        forced = jnp.logical_and(params.force_liquidation, state.time + 1 >= state.window_len)
        qty = jnp.where(forced, state.inventory, jnp.floor(fraction * state.inventory))
        participation, qty = self.worked_order(state, params, slot, fraction, qty, forced)
        agent_messages = self.child_messages(state, qty.astype(jnp.int32), forced, params)
        new_market, minute, market_price = self.market_minute(
            state.market, state.episode, slot, agent_messages, participation, key, params
        )
        filled, value, exec_price = self.owner_fill(minute, FIRST_AGENT_OWNER, market_price, params)
        inventory = state.inventory - filled
        price_history = state.price_history.at[slot].set(minute.mid * market.tick_size)
        features = self.minute_features(state.episode, params, slot, price_history, minute)
        next_state = state.replace(
            time=state.time + 1,
            inventory=inventory,
            executed=state.quantity - inventory,
            notional=state.notional + value,
            last_qty=filled,
            last_price=exec_price,
            last_market_price=market_price,
            last_replayed_price=data.price[state.episode, slot],
            market=new_market,
            price_history=price_history,
            feature_history=state.feature_history.at[slot].set(features),
            volume_history=state.volume_history.at[slot].set(minute.volume),
        )
        return self.finish_step(
            state, fraction, next_state, params, filled, exec_price, market_price
        )

    def market_minute(
        self, market_state, episode, slot, agent_messages, participation, key, params
    ) -> tuple[Any, Any, jax.Array]:
        """Runs minute ``slot`` of day ``episode`` with the agents' messages (and POV
        orders): the informed traders' fundamental is the replayed day's path over the
        minute's rounds (module docstring), the activity its volume profile.

        Returns:
            ``(market, summary, market_price)``: the market after the minute, its
            :class:`~serl_jax.market.simulator.MinuteSummary`, and the mid before the
            agents' orders, currency per share.
        """
        data, market = params.data, params.market
        real = data.price[episode] / market.tick_size
        before, after = real[jnp.maximum(slot - 1, 0)], real[slot]
        rounds = market.rounds_per_minute
        fundamental = before + (jnp.arange(1, rounds + 1) / rounds) * (after - before)
        activity = data.volume_profile[episode, slot] * data.num_slots
        pre_trade_mid = round_view(market_state.book, market_state.reference).reference
        new_market, minute = run_minute(
            market_state,
            agent_messages,
            fundamental,
            activity,
            market.volume_unit(data, episode),
            key,
            market,
            participation,
            engine=params.lob_engine,
        )
        return new_market, minute, pre_trade_mid * market.tick_size

    def owner_fill(self, minute, owner, market_price, params) -> tuple[jax.Array, ...]:
        """An agent's fills in the minute, read from its owner id's settlement.

        Returns:
            ``(filled, value, exec_price)``: float32 shares executed, their value
            (currency; ``side`` signed so that it adds to the order's notional) and the
            average price (``market_price`` when nothing filled).
        """
        side, tick = params.side, params.market.tick_size
        filled = (-side * minute.position_change[owner]).astype(jnp.float32)
        value = side * minute.cash_change[owner] * tick
        return filled, value, jnp.where(filled > 0, safe_divide(value, filled), market_price)

    def worked_order(
        self, state: DynamicEnvState, params, slot, fraction, qty, forced, agent=0
    ) -> tuple[ParticipationOrder | None, jax.Array]:
        """The part of the minute's child order that the rounds work, and the shares sent
        at once (``float32``): a POV order (:meth:`participation_order`; market
        participation child orders), a sliced one (``child_order="sliced"``: the child
        order's ``qty`` shares split evenly over the rounds, nothing at once), or None
        and ``qty`` (everything at once)."""
        if params.child_quantity == "participation" and params.child_order != "passive":
            order, works = self.participation_order(state, params, slot, fraction, forced, agent)
            return order, jnp.where(works, 0.0, qty)  # the rounds send it
        if params.child_order == "sliced":
            order = ParticipationOrder(
                side=jnp.where(params.side > 0, SELL, BUY).astype(jnp.int32),
                rate=jnp.float32(0.0),
                limit=jnp.asarray(qty, jnp.int32),
                owner=jnp.asarray(FIRST_AGENT_OWNER + agent, jnp.int32),
                order_id=jnp.asarray(AGENT_ORDER_ID + agent, jnp.int32),
                sliced=jnp.bool_(True),
                parts=jnp.int32(params.child_slices),
            )
            return order, jnp.zeros_like(qty)
        return None, qty

    def participation_order(
        self, state: DynamicEnvState, params, slot, fraction, forced, agent=0
    ) -> tuple[ParticipationOrder, jax.Array]:
        """The minute's POV child order, rate ``a I_t / V̂_s`` of the other traders'
        volume and at most ``I_t`` shares (a busy minute trades more than ``a I_t``), and
        whether it works (``bool``): not at a forced last step (all of ``I_t`` goes at
        once) nor where the forecast is 0 (the child order is then sent at once at its size
        ``a I_t``, as the static market does). ``agent`` is the agent index i (owner
        ``FIRST_AGENT_OWNER + i``, order id ``AGENT_ORDER_ID + i``)."""
        forecast = history_volume_forecast(state.volume_history, params.data, state.episode, slot)
        works = jnp.logical_and(~forced, forecast > 0)
        order = ParticipationOrder(
            side=jnp.where(params.side > 0, SELL, BUY).astype(jnp.int32),
            rate=safe_divide(fraction * state.inventory, forecast).astype(jnp.float32),
            limit=jnp.where(works, jnp.floor(state.inventory), 0.0).astype(jnp.int32),
            owner=jnp.asarray(FIRST_AGENT_OWNER + agent, jnp.int32),
            order_id=jnp.asarray(AGENT_ORDER_ID + agent, jnp.int32),
            sliced=jnp.bool_(False),
            parts=jnp.int32(0),
        )
        return order, works

    def minute_features(self, episode, params: DynamicEnvParams, slot, prices, minute):
        """Normalized ``float32[F]`` features of the simulated bar at ``slot`` of day
        ``episode`` (``prices`` ``float32[T]`` the day's bar prices so far, ``minute`` the
        :class:`~serl_jax.market.simulator.MinuteSummary`; the formulas of
        :func:`serl_jax.data.episodes._raw_features`)."""
        window = params.vol_window
        lags = slot - window + jnp.arange(window + 1)  # prices of slots s-w .. s
        p = prices[jnp.maximum(lags, 0)]
        returns = jnp.log(p[1:] / p[:-1])
        valid = lags[1:] >= 1  # r_j needs slot j - 1 of the same day
        count = jnp.maximum(valid.sum(), 1)
        mean = jnp.where(valid, returns, 0.0).sum() / count
        var = jnp.where(valid, (returns - mean) ** 2, 0.0).sum() / count
        scale = params.data.expected_day_volume[episode]
        raw = jnp.zeros((len(FEATURE_NAMES),), jnp.float32)
        raw = raw.at[_RETURN].set(jnp.where(slot > 0, returns[-1], 0.0))
        raw = raw.at[_VOLATILITY].set(jnp.where(valid.any(), jnp.sqrt(var), 0.0))
        raw = raw.at[_VOLUME].set(minute.volume / jnp.where(scale > 0, scale, 1.0))
        raw = raw.at[_TIME].set(slot / params.data.num_slots)
        raw = raw.at[_RANGE].set((minute.high - minute.low) / minute.mid)
        constant = params.feature_std <= STD_FLOOR
        raw = jnp.where(constant, params.feature_mean, raw)
        return (raw - params.feature_mean) / params.feature_std

    def history_price(self, state: DynamicEnvState, params, slot) -> jnp.ndarray:
        """Price of an observed bar: real before the window, the simulated mid after."""
        return state.price_history[slot]

    def history_features(self, state: DynamicEnvState, params, slots) -> jnp.ndarray:
        """Normalized features ``[len(slots), F]`` of observed bars (real, then simulated)."""
        return state.feature_history[slots]
