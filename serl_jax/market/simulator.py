"""One market: a JAX order book traded by background populations and learning agents.

:func:`reset_market` seeds the book with the market makers' ladder around a reference
price; :func:`run_minute` first applies the agents' messages (child orders, cancels),
then ``rounds_per_minute`` trading rounds in which the informed, momentum, noise and
market-maker populations (:mod:`serl_jax.market.agents`) send their messages through
:func:`serl_jax.lob.engine.book_messages`, and an agent's percentage-of-volume child order
(:class:`ParticipationOrder`), if any, sends a market order at the start of every round.
Every trade is settled to its two owners, so positions and cash are attributed by owner
id (:data:`~serl_jax.market.params.MARKET_MAKER` ... and the agents from
:data:`~serl_jax.market.params.FIRST_AGENT_OWNER` on).

The informed traders learn from the order flow they see (:func:`learn_from_flow`), so
a parent order's selling lowers the value they quote toward, and the impact stays
until it decays. The reference price after every round is the book midpoint,
``P = (p_bid + p_ask) / 2`` (the last trade price when a side is empty). Both functions
are pure and deterministic given the key; ``vmap`` them over markets.

No order or trade is ever lost: the book's capacity is
:meth:`~serl_jax.market.params.MarketParams.capacity` (the most orders that can rest at
once) and every message's trade buffer holds ``capacity`` rows (the most orders one
message can match), so ``overflow_orders``, ``overflow_qty`` and ``dropped_trades`` stay
0 by construction; the tests assert it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from serl_jax.lob.book import (
    MARKET,
    Book,
    BookSide,
    Message,
    Trades,
    empty_book,
)
from serl_jax.lob.engine import book_messages
from serl_jax.lob.queries import spread, top_levels
from serl_jax.market.agents import (
    NOISE_UNIFORMS,
    NoiseBook,
    informed_orders,
    market_maker_orders,
    momentum_orders,
    noise_orders,
    round_view,
    shares,
)
from serl_jax.market.params import (
    AGENT_KERNEL_EXPONENTIALS,
    FIRST_AGENT_OWNER,
    INFORMED_TRADER,
    MARKET_MAKER,
    MarketParams,
)


@struct.dataclass
class MarketState:
    """State of one simulated market (add a leading axis with ``vmap``).

    Attributes:
        book: the order book (capacity ``params.capacity(num_agents)``).
        position: ``int32[O]`` net shares bought per owner id since reset.
        cash: ``float32[O]`` cash per owner since reset, ticks x shares (sells add).
        reference: ``float32`` the last mid, ticks.
        ema_fast, ema_slow: ``float32`` the momentum traders' mid averages, ticks.
        next_order_id: ``int32`` first unused order id.
        round: ``int32`` rounds run since reset (the market makers' rung cursor).
        noise: the noise traders' resting orders.
        informed: the informed traders' resting orders (one per slot).
        order_flow: ``float32`` the informed traders' memory of the other traders' net
            aggressive flow, in ``V`` (buys positive; decays with
            ``flow_impact_halflife_minutes``); their value is the fundamental times
            ``exp(flow_response(order_flow))`` (:func:`flow_response`).
        signed_volume: ``int32`` net aggressive volume since reset, shares (buyer- minus
            seller-initiated; a counter, like the book's ``filled_qty``).
        agent_flow: ``float32`` (``float32[K]`` with a power-law kernel,
            ``params.agent_flow_beta`` > 0: one per exponential) the informed traders'
            memory of the execution agents' own net aggressive flow, in ``V``
            (``params.agent_flow_memory`` 1; 0 otherwise, the agents' flow then being
            part of ``order_flow``).
    """

    book: Book
    position: jax.Array
    cash: jax.Array
    reference: jax.Array
    ema_fast: jax.Array
    ema_slow: jax.Array
    next_order_id: jax.Array
    round: jax.Array
    noise: NoiseBook
    informed: NoiseBook
    order_flow: jax.Array
    signed_volume: jax.Array
    agent_flow: jax.Array

    @property
    def num_owners(self) -> int:
        """O, the static number of owner ids (background populations plus agents)."""
        return self.position.shape[-1]


@struct.dataclass
class ParticipationOrder:
    """Agents' child orders worked over one minute: percentage-of-volume (POV) or
    sliced evenly over the rounds.

    At the start of each trading round each sends a market order. A POV order
    (``sliced`` False) sends :func:`participation_quantity` shares: what keeps its
    executed shares at ``rate`` times the volume the other traders (everyone but itself,
    other agents included) have traded in the minute so far (a POV algorithm reacting to
    the prints, one round behind). A sliced order sends :func:`sliced_quantity` shares:
    ``limit`` split evenly over the minute's rounds (a TWAP within the minute), so its
    later parts meet the informed traders' response to its earlier ones. Neither sends
    more than ``limit`` in all. Scalar fields are one agent's order; ``[N]`` fields are N
    agents' orders, sent in index order at the start of each round.

    Attributes:
        side: ``int32`` (or ``int32[N]``) book side of the market orders (``BUY`` or
            ``SELL``).
        rate: ``float32`` (``[N]``) shares per share of the other traders' volume (POV
            orders; not read by sliced ones).
        limit: ``int32`` (``[N]``) the most shares traded in the minute (0: nothing sent).
        owner: ``int32`` (``[N]``) the agents' owner ids (distinct).
        order_id: ``int32`` (``[N]``) the ids of their messages.
        sliced: ``bool`` (``[N]``) an even split of ``limit`` over the rounds instead of
            a POV order.
        parts: ``int32`` (``[N]``) a sliced order's parts, sent at evenly spaced rounds
            (:func:`sliced_quantity`; 0: one per round).
    """

    side: jax.Array
    rate: jax.Array
    limit: jax.Array
    owner: jax.Array
    order_id: jax.Array
    sliced: jax.Array
    parts: jax.Array = 0


def participation_quantity(rate, volume_seen, done, limit) -> jax.Array:
    """Shares a POV order sends now: ``clip(floor(rate * volume_seen) - done, 0, limit -
    done)``, ``int32`` (``volume_seen`` the other traders' shares so far, ``done`` its own
    executed shares)."""
    target = jnp.floor(rate * volume_seen).astype(jnp.int32)
    return jnp.clip(target - done, 0, jnp.maximum(limit - done, 0)).astype(jnp.int32)


def sliced_quantity(limit, done, round_index, rounds: int, parts=0) -> jax.Array:
    """Shares a sliced order sends at the start of round ``round_index`` (0-based) of
    ``rounds``: ``clip(floor(limit * k / parts) - done, 0, limit - done)``, ``int32``,
    with ``k = floor(round_index * parts / rounds) + 1`` the parts due by this round
    (``done`` its own executed shares; ``parts`` 0 means ``rounds``: one part per round,
    ``k = round_index + 1``). Part ``j`` is due at round ``ceil(j * rounds / parts)``,
    so the parts are evenly spaced from round 0, and a book which fills every part has
    executed ``limit`` shares after the last round."""
    limit = jnp.asarray(limit, jnp.int32)
    parts = jnp.where(jnp.asarray(parts) > 0, parts, rounds).astype(jnp.int32)
    due = (round_index * parts) // rounds + 1
    target = (limit * due) // parts
    return jnp.clip(target - done, 0, jnp.maximum(limit - done, 0)).astype(jnp.int32)


@struct.dataclass
class MinuteSummary:
    """What happened in one minute (scalars, or ``[...]`` under ``vmap``).

    Attributes:
        mid: ``float32`` mid at the end of the minute, ticks.
        high, low: ``float32`` highest and lowest mid seen after any round, ticks.
        volume: ``int32`` shares traded in the minute (each trade counted once).
        position_change: ``int32[O]`` net shares bought per owner in the minute.
        cash_change: ``float32[O]`` cash per owner in the minute, ticks x shares.
        spread: ``float32`` best ask - best bid at the end, ticks (NaN if one-sided).
        bid_depth, ask_depth: ``int32`` shares at the best bid and ask at the end.
        signed_volume: ``int32`` buyer- minus seller-initiated shares in the minute (all
            aggressors).
    """

    mid: jax.Array
    high: jax.Array
    low: jax.Array
    volume: jax.Array
    position_change: jax.Array
    cash_change: jax.Array
    spread: jax.Array
    bid_depth: jax.Array
    ask_depth: jax.Array
    signed_volume: jax.Array


def _ladder_side(prices, sizes, capacity: int, first_arrival: int) -> BookSide:
    levels = prices.shape[0]

    def pad(x):
        return jnp.pad(jnp.asarray(x, jnp.int32), (0, capacity - levels))

    return BookSide(
        price=pad(prices),
        qty=pad(sizes),
        order_id=pad(jnp.arange(1, levels + 1)),
        owner=pad(jnp.full((levels,), MARKET_MAKER)),
        arrival=pad(first_arrival + jnp.arange(levels)),
    )


def reset_market(reference, volume_unit, params: MarketParams, num_agents: int = 1) -> MarketState:
    """A market holding only the market makers' full ladder around ``reference``.

    Args:
        reference: ``float32`` reference (mid) price, ticks (> ``mm_levels`` ticks).
        volume_unit: ``float32`` V, the symbol's mean volume per minute, shares.
        params: market parameters.
        num_agents: static number of learning agents (owner ids 5 .. 5 + n - 1).

    Returns:
        The :class:`MarketState`; rung ``k`` rests at the prices of
        :func:`~serl_jax.market.agents.market_maker_orders` with no inventory skew.
    """
    reference = jnp.asarray(reference, jnp.float32)
    levels = params.mm_levels
    capacity = params.capacity(num_agents)
    k = jnp.arange(levels, dtype=jnp.float32)
    distance = params.mm_half_spread_ticks + k * params.mm_level_spacing_ticks
    sizes = shares(params.mm_size * (1.0 + k) ** params.mm_size_growth, volume_unit)
    bids = jnp.maximum(jnp.floor(reference - distance), 1)
    asks = jnp.maximum(jnp.ceil(reference + distance), bids[0] + 1)
    book = empty_book(capacity).replace(
        bids=_ladder_side(bids, sizes, capacity, 0),
        asks=_ladder_side(asks, sizes, capacity, levels),
        next_arrival=jnp.int32(2 * levels),
        submitted_qty=2 * sizes.sum(dtype=jnp.int32),
    )
    n_owners = FIRST_AGENT_OWNER + num_agents
    return MarketState(
        book=book,
        position=jnp.zeros((n_owners,), jnp.int32),
        cash=jnp.zeros((n_owners,), jnp.float32),
        reference=reference,
        ema_fast=reference,
        ema_slow=reference,
        next_order_id=jnp.int32(levels + 1),
        round=jnp.int32(0),
        noise=NoiseBook.empty(params.noise_orders),
        informed=NoiseBook.empty(params.informed_slots),
        order_flow=jnp.float32(0.0),
        signed_volume=jnp.int32(0),
        agent_flow=jnp.zeros(_agent_memory_shape(params), jnp.float32),
    )


def _agent_memory_shape(params: MarketParams) -> tuple[int, ...]:
    """The agents' flow memory: a scalar, or one value per exponential of a power law."""
    return (AGENT_KERNEL_EXPONENTIALS,) if params.agent_flow_beta > 0 else ()


def agent_memory_level(agent_flow, params: MarketParams) -> jax.Array:
    """``float32`` ``E_a``, the agents' remembered flow in ``V``: the memory itself, or
    with a power-law kernel ``sum_k w_k E_k`` (:meth:`MarketParams.agent_kernel`)."""
    if params.agent_flow_beta == 0:
        return agent_flow
    weights, _ = params.agent_kernel()
    return jnp.dot(jnp.asarray(weights), agent_flow)


def settle(trades: Trades, num_owners: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Net shares and cash per owner from a trade buffer of any shape.

    The aggressor of a trade of ``q`` shares at price ``p`` with side ``s`` (+1 buy)
    gets ``+s q`` shares and ``-s q p`` cash; the passive owner the opposite.

    Returns:
        ``(position_change int32[O], cash_change float32[O] ticks x shares, volume int32)``.
    """
    owners = jnp.arange(num_owners)
    signed = (trades.aggressor_side * trades.qty)[..., None]
    by_aggressor = trades.aggressor_owner[..., None] == owners
    by_passive = trades.passive_owner[..., None] == owners
    axes = tuple(range(trades.qty.ndim))
    net = jnp.where(by_aggressor, signed, 0).sum(axes) - jnp.where(by_passive, signed, 0).sum(axes)
    value = signed.astype(jnp.float32) * trades.price[..., None]
    cash = jnp.where(by_passive, value, 0.0).sum(axes) - jnp.where(by_aggressor, value, 0.0).sum(
        axes
    )
    return net.astype(jnp.int32), cash, trades.qty.sum(dtype=jnp.int32)


def last_trade_price(trades: Trades, fallback) -> jax.Array:
    """``float32`` price of the last trade in a buffer ``[M, max_trades]`` (execution
    order), ticks; ``fallback`` when nothing traded.

    This is the reference :func:`~serl_jax.market.agents.round_view` falls back on when
    a side is empty: after an order sweeps a side, the price it reached, not the mid
    before it, is where the market makers quote again.
    """
    price = trades.price.reshape(-1)
    traded = trades.qty.reshape(-1) > 0
    last = jnp.where(traded, jnp.arange(price.shape[0]), -1).max()
    return jnp.where(last >= 0, price[jnp.maximum(last, 0)], fallback).astype(jnp.float32)


def signed_flow(trades: Trades) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Net aggressive volume of a trade buffer of any shape, shares (buys positive).

    Returns:
        ``(all_aggressors int32, uninformed float32, agents float32)``: the second
        leaves out the informed traders' own orders (the flow they learn from, see
        :func:`learn_from_flow`); the third is the execution agents' part of it (owner
        ids from :data:`~serl_jax.market.params.FIRST_AGENT_OWNER`).
    """
    signed = trades.aggressor_side * trades.qty
    uninformed = jnp.where(trades.aggressor_owner == INFORMED_TRADER, 0, signed)
    agents = jnp.where(trades.aggressor_owner >= FIRST_AGENT_OWNER, signed, 0)
    return (
        signed.sum(dtype=jnp.int32),
        uninformed.sum().astype(jnp.float32),
        agents.sum().astype(jnp.float32),
    )


def flow_response(order_flow, params: MarketParams) -> jax.Array:
    """``float32`` shift of the informed traders' value, log price, from their memory of
    net order flow ``E`` (in ``V``): ``flow_impact_bps * 1e-4 * sign(E) |E| ** delta``
    with ``delta = flow_impact_exponent``.

    ``delta = 1`` is Kyle's (1985) linear response; ``delta = 0.5`` makes the price move
    of a metaorder grow as the square root of its size, the empirical law (Tóth et al.
    2011, "Anomalous price impact and the critical nature of liquidity in financial
    markets", Phys. Rev. X 1; Bouchaud, Bonart, Donier & Gould 2018, "Trades, Quotes and
    Prices", ch. 12), as the propagator market's ``F`` does.
    """
    return _power_response(order_flow, params.flow_impact_bps, params)


def _power_response(flow, bps, params: MarketParams) -> jax.Array:
    """``bps * 1e-4 * sign(flow) |flow| ** flow_impact_exponent``, log price."""
    magnitude = jnp.abs(flow) ** params.flow_impact_exponent
    return bps * 1e-4 * jnp.sign(flow) * magnitude


def value_shift(state: MarketState, params: MarketParams) -> jax.Array:
    """``float32`` log shift of the informed traders' value: :func:`flow_response` of
    the background's memory plus, with ``params.agent_flow_memory`` 1, the agents' own
    memory's ``agent_flow_impact_bps * 1e-4 * sign(E_a) |E_a| ** delta``."""
    shift = flow_response(state.order_flow, params)
    if params.agent_flow_memory:
        level = agent_memory_level(state.agent_flow, params)
        shift = shift + _power_response(level, params.agent_flow_impact_bps, params)
    return shift


def remember_flow(
    state: MarketState, flow, agents_flow, volume_unit, params: MarketParams
) -> MarketState:
    """One round of :func:`learn_from_flow` on the informed traders' memories:
    ``flow`` (shares, uninformed net aggressive flow, the agents' ``agents_flow``
    included) into ``order_flow`` with ``params.agent_flow_memory`` 0; else
    ``flow - agents_flow`` into ``order_flow`` and ``agents_flow`` into ``agent_flow``
    (each exponential of a power-law kernel decayed by its own factor,
    :meth:`~serl_jax.market.params.MarketParams.agent_kernel`)."""
    if not params.agent_flow_memory:
        return state.replace(
            order_flow=learn_from_flow(state.order_flow, flow, volume_unit, params)
        )
    if params.agent_flow_beta > 0:  # each exponential decays at its own rate
        _, decay = params.agent_kernel()
        agent_flow = state.agent_flow * jnp.asarray(decay) + agents_flow / volume_unit
    else:
        agent_flow = learn_from_flow(state.agent_flow, agents_flow, volume_unit, params)
    return state.replace(
        order_flow=learn_from_flow(state.order_flow, flow - agents_flow, volume_unit, params),
        agent_flow=agent_flow,
    )


def learn_from_flow(order_flow, flow, volume_unit, params: MarketParams) -> jax.Array:
    """One round of the informed traders' memory of order flow: decay, then the round's
    net flow ``flow`` (shares) in ``V``.

    ``E <- E * 2 ** (-1 / (halflife * R)) + flow / V`` (``R`` rounds per minute); the
    agents' messages at the start of a minute add their flow without a decay.
    """
    rounds = params.flow_impact_halflife_minutes * params.rounds_per_minute
    decay = jnp.exp2(-1.0 / jnp.maximum(rounds, 1e-6))
    return order_flow * decay + flow / volume_unit


def uniforms_per_round(params: MarketParams) -> int:
    """Uniform draws one round consumes."""
    return params.informed_slots + params.momentum_slots + NOISE_UNIFORMS * params.noise_slots


def _concat(*parts: Message) -> Message:
    return jax.tree.map(lambda *x: jnp.concatenate(x), *parts)


def _book_agent_messages(state: MarketState, messages: Message, volume_unit, params, engine):
    """Books the agents' messages ahead of everyone else's (the minute's child orders, or
    a round's worked parts): the book, the mid after their trades and the informed
    traders' flow memory are updated, their flow entering it without a decay. Returns
    ``(state, position_change, cash_change, volume, signed_volume)``; positions and cash
    are the caller's to apply."""
    book, trades = book_messages(
        state.book, messages, max_trades=state.book.capacity, engine=engine
    )
    position_change, cash_change, volume = settle(trades, state.num_owners)
    signed_volume, agent_flow, _ = signed_flow(trades)
    mid = round_view(book, last_trade_price(trades, state.reference)).reference
    state = state.replace(book=book, reference=mid)
    if params.agent_flow_memory:
        state = state.replace(agent_flow=state.agent_flow + agent_flow / volume_unit)
    else:
        state = state.replace(order_flow=state.order_flow + agent_flow / volume_unit)
    return state, position_change, cash_change, volume, signed_volume


def run_minute(
    state: MarketState,
    agent_messages: Message,
    fundamental,
    activity,
    volume_unit,
    key: jax.Array,
    params: MarketParams,
    participation: ParticipationOrder | None = None,
    engine: str = "vmap",
) -> tuple[MarketState, MinuteSummary]:
    """Advances one market by one minute.

    Args:
        state: the market.
        agent_messages: the agents' messages for this minute, ``int32[A]`` fields (kind
            0 for none), applied first in the given order.
        fundamental: ``float32[rounds_per_minute]`` the fundamental price the informed
            traders see in each round, ticks (their value is this times
            ``exp(flow_response(state.order_flow))``, which order flow moves:
            :func:`learn_from_flow`).
        activity: ``float32`` the intraday activity multiplier of the minute (mean 1).
        volume_unit: ``float32`` V, shares per minute.
        key: PRNG key of this minute.
        params: market parameters.
        participation: agents' POV or sliced child orders worked over the rounds
            (:class:`ParticipationOrder`; their market orders are booked first in each
            round, in agent order, and the round's other orders are computed from the
            book they leave), or None.
        engine: static; the order-book engine, ``"vmap"`` or ``"batched"``
            (:mod:`serl_jax.lob.engine`; the same result, the speed differs by backend).

    Returns:
        ``(state, summary)``.
    """
    capacity = state.book.capacity
    n_owners = state.num_owners
    volume_unit = jnp.asarray(volume_unit, jnp.float32)
    state, position_change, cash_change, volume, signed_volume = _book_agent_messages(
        state, agent_messages, volume_unit, params, engine
    )
    first_mid = state.reference
    n_informed, n_momentum = params.informed_slots, params.momentum_slots
    u = jax.random.uniform(key, (params.rounds_per_minute, uniforms_per_round(params)))

    def trading_round(carry, inputs):
        st, position_change, cash_change, volume, signed_volume, pov_done, pov_seen = carry
        fundamental, u, round_index = inputs
        if participation is not None:
            qty = jnp.where(
                participation.sliced,
                sliced_quantity(
                    participation.limit,
                    pov_done,
                    round_index,
                    params.rounds_per_minute,
                    participation.parts,
                ),
                participation_quantity(participation.rate, pov_seen, pov_done, participation.limit),
            )

            def field(x):
                return jnp.atleast_1d(jnp.asarray(x, jnp.int32))

            worked = Message(
                kind=field(jnp.where(qty > 0, MARKET, 0)),
                side=field(participation.side),
                price=field(jnp.zeros_like(qty)),
                qty=field(qty),
                order_id=field(participation.order_id),
                owner=field(participation.owner),
            )
            # the parts trade first and the round's other orders see the book they
            # left, as the minute's child orders do; booked in one batch with orders
            # computed from the book before them, quotes refill at pre-trade prices and
            # a part's impact stops growing with its size
            st, d_position, d_cash, d_volume, d_signed = _book_agent_messages(
                st, worked, volume_unit, params, engine
            )
            st = st.replace(position=st.position + d_position, cash=st.cash + d_cash)
            own = jnp.abs(d_position[participation.owner])  # market orders: the aggressor
            pov_done, pov_seen = pov_done + own, pov_seen + (d_volume - own)  # other agents'
            position_change, cash_change = position_change + d_position, cash_change + d_cash
            volume, signed_volume = volume + d_volume, signed_volume + d_signed
        view = round_view(st.book, st.reference)
        value = fundamental * jnp.exp(value_shift(st, params))
        informed, informed_ring, next_id = informed_orders(
            view, st.informed, st.next_order_id, value, u[:n_informed], params, volume_unit
        )
        momentum = momentum_orders(
            st.ema_fast, st.ema_slow, u[n_informed : n_informed + n_momentum], params, volume_unit
        )
        noise, ring, next_id = noise_orders(
            view,
            st.noise,
            next_id,
            u[n_informed + n_momentum :],
            activity,
            params,
            volume_unit,
        )
        maker = market_maker_orders(view, st.position[MARKET_MAKER], st.round, params, volume_unit)
        book, trades = book_messages(
            st.book,
            _concat(informed, momentum, noise, maker),
            max_trades=capacity,
            engine=engine,
        )
        d_position, d_cash, d_volume = settle(trades, n_owners)
        pov_seen = pov_seen + d_volume  # the other traders' (the parts never rest)
        d_signed, flow, agents_flow = signed_flow(trades)
        mid = round_view(book, last_trade_price(trades, view.reference)).reference
        st = st.replace(
            book=book,
            position=st.position + d_position,
            cash=st.cash + d_cash,
            reference=mid,
            ema_fast=st.ema_fast + params.momentum_fast * (mid - st.ema_fast),
            ema_slow=st.ema_slow + params.momentum_slow * (mid - st.ema_slow),
            next_order_id=next_id,
            round=st.round + 1,
            noise=ring,
            informed=informed_ring,
        )
        st = remember_flow(st, flow, agents_flow, volume_unit, params)
        carry = (
            st,
            position_change + d_position,
            cash_change + d_cash,
            volume + d_volume,
            signed_volume + d_signed,
            pov_done,
            pov_seen,
        )
        return carry, mid

    state = state.replace(position=state.position + position_change, cash=state.cash + cash_change)
    # each POV order's own executed shares and the other traders' volume seen so far
    zero = jnp.zeros(() if participation is None else jnp.shape(participation.rate), jnp.int32)
    (state, position_change, cash_change, volume, signed_volume, _, _), mids = jax.lax.scan(
        trading_round,
        (state, position_change, cash_change, volume, signed_volume, zero, zero),
        (jnp.asarray(fundamental, jnp.float32), u, jnp.arange(params.rounds_per_minute)),
    )
    state = state.replace(signed_volume=state.signed_volume + signed_volume)
    best = top_levels(state.book, 1)
    summary = MinuteSummary(
        mid=state.reference,
        high=jnp.maximum(mids.max(), first_mid),
        low=jnp.minimum(mids.min(), first_mid),
        volume=volume,
        position_change=position_change,
        cash_change=cash_change,
        spread=spread(state.book),
        bid_depth=best.bid_size[0],
        ask_depth=best.ask_size[0],
        signed_volume=signed_volume,
    )
    return state, summary
