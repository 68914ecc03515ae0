"""Background agent populations: pure functions from what they see to order messages.

Each population reads a :class:`RoundView` of the book taken at the start of a trading
round, its own state and a row of uniforms, and returns a fixed number of
:class:`~serl_jax.lob.book.Message` rows (no-ops where it does not act), so every round
of every market has the same shape and ``vmap`` runs them in lockstep. Prices are
integer ticks, sizes integer shares (the data's volume unit), ``V`` the symbol's mean
volume per minute. See :class:`~serl_jax.market.params.MarketParams` for the meaning of
each parameter.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from serl_jax.lob.book import BUY, CANCEL, LIMIT, MARKET, SELL, Book, Message
from serl_jax.market.params import (
    INFORMED_TRADER,
    MARKET_MAKER,
    MOMENTUM_TRADER,
    NOISE_TRADER,
    MarketParams,
)

CANCEL_ALL = 1 << 30
"""Cancel quantity that deletes any resting order whole."""

NOISE_UNIFORMS = 5
"""Uniforms a noise slot consumes: kind, side, size, price offset, cancel."""


@struct.dataclass
class RoundView:
    """What every trader sees at the start of a round (scalars).

    Attributes:
        reference: ``float32`` the mid in ticks, or the last known mid when a side is empty.
        best_bid, best_ask: ``int32`` best quotes in ticks (0 when the side is empty).
        has_bid, has_ask: ``bool`` whether the side has orders.
    """

    reference: jax.Array
    best_bid: jax.Array
    best_ask: jax.Array
    has_bid: jax.Array
    has_ask: jax.Array


def round_view(book: Book, last_reference: jax.Array) -> RoundView:
    """The :class:`RoundView` of ``book``.

    With one side empty (e.g. swept by a large order) the reference is ``last_reference``
    (ticks: the last mid, or the last trade price after a sweep, see
    :func:`serl_jax.market.simulator.last_trade_price`) moved to half a tick inside the
    remaining best quote if that is further (a swept bid side leaves the reference at
    most ``best_ask - 0.5``); with both sides empty it is ``last_reference``.
    """
    has_bid, has_ask = book.bids.qty[0] > 0, book.asks.qty[0] > 0
    best_bid, best_ask = book.bids.price[0], book.asks.price[0]
    mid = (best_bid.astype(jnp.float32) + best_ask) / 2
    last = jnp.asarray(last_reference, jnp.float32)
    one_sided = jnp.where(
        has_ask,
        jnp.minimum(last, best_ask - 0.5),
        jnp.where(has_bid, jnp.maximum(last, best_bid + 0.5), last),
    )
    return RoundView(
        reference=jnp.where(has_bid & has_ask, mid, one_sided).astype(jnp.float32),
        best_bid=best_bid,
        best_ask=best_ask,
        has_bid=has_bid,
        has_ask=has_ask,
    )


def messages(kind, side, price, qty, order_id, owner) -> Message:
    """Stacks equal-length lists of scalars into a :class:`Message` with ``int32[n]`` fields."""

    def stack(values):
        return jnp.stack([jnp.asarray(v, jnp.int32) for v in values])

    return Message(
        kind=stack(kind),
        side=stack(side),
        price=stack(price),
        qty=stack(qty),
        order_id=stack(order_id),
        owner=stack(owner),
    )


def shares(fraction, volume_unit) -> jax.Array:
    """``int32`` size of at least one share: ``round(fraction * V)``."""
    return jnp.maximum(jnp.round(fraction * volume_unit), 1.0).astype(jnp.int32)


def _passive_bid(view: RoundView, price) -> jax.Array:
    """A bid price that does not cross the asks (and stays >= 1 tick)."""
    price = jnp.where(view.has_ask, jnp.minimum(price, view.best_ask - 1), price)
    return jnp.maximum(price, 1).astype(jnp.int32)


def _passive_ask(view: RoundView, price) -> jax.Array:
    """An ask price that does not cross the bids."""
    price = jnp.where(view.has_bid, jnp.maximum(price, view.best_bid + 1), price)
    return jnp.maximum(price, 1).astype(jnp.int32)


def market_maker_orders(
    view: RoundView, inventory, cursor, params: MarketParams, volume_unit
) -> Message:
    """Refreshes the best rung and ``n = mm_refresh_rungs`` rotating outer rungs of each
    side of the ladder.

    The ladder is centred on ``reference - mm_skew_ticks * inventory / V``: rung ``k``
    bids at ``floor(ref - h - k s)`` and asks at ``ceil(ref + h + k s)`` (``h`` the half
    spread, ``s`` the spacing, both in ticks), never crossing the other side, with
    ``mm_size * (1 + k) ** mm_size_growth * V`` shares. Rung ``k``'s order id is ``k + 1``
    on both sides, so a refresh is a cancel of that id followed by a new limit order.
    Round ``r`` refreshes the outer rungs ``1 + (r n + j) mod (L - 1)``, ``j < n``, so
    ``n = L - 1`` re-posts the whole ladder every round.

    Args:
        view: the round's view of the book.
        inventory: ``int32`` the market makers' net position, shares.
        cursor: ``int32`` round counter ``r`` choosing the outer rungs.
        params: market parameters.
        volume_unit: ``float32`` V, shares per minute.

    Returns:
        ``4 (1 + n)`` messages, (cancel, limit) x (bid, ask) x (best rung, ``n`` outer
        rungs); 4 when L = 1
        (:meth:`~serl_jax.market.params.MarketParams.messages_per_round` counts them).
    """
    levels = params.mm_levels
    ref = view.reference - params.mm_skew_ticks * inventory / jnp.maximum(volume_unit, 1.0)
    n = params.outer_rungs_per_round()
    rungs = [jnp.int32(0)] + [1 + (cursor * n + j) % (levels - 1) for j in range(n)]
    kind, side, price, qty, order_id, owner = [], [], [], [], [], []
    for k in rungs:
        distance = params.mm_half_spread_ticks + k * params.mm_level_spacing_ticks
        size = shares(params.mm_size * (1.0 + k) ** params.mm_size_growth, volume_unit)
        bid = _passive_bid(view, jnp.floor(ref - distance))
        ask = _passive_ask(view, jnp.ceil(ref + distance))
        for s, p in ((BUY, bid), (SELL, ask)):
            kind += [CANCEL, LIMIT]
            side += [s, s]
            price += [0, p]
            qty += [CANCEL_ALL, size]
            order_id += [k + 1, k + 1]
            owner += [MARKET_MAKER, MARKET_MAKER]
    return messages(kind, side, price, qty, order_id, owner)


@struct.dataclass
class NoiseBook:
    """Resting orders of a population, a ring buffer (the noise traders cancel the
    oldest first; the informed traders keep one entry per slot).

    Attributes:
        order_id: ``int32[R]`` ids of resting noise orders (0 = empty slot).
        side: ``int32[R]`` their sides.
        cursor: ``int32`` the oldest slot.
    """

    order_id: jax.Array
    side: jax.Array
    cursor: jax.Array

    @classmethod
    def empty(cls, size: int) -> NoiseBook:
        zeros = jnp.zeros((size,), jnp.int32)
        return cls(order_id=zeros, side=zeros, cursor=jnp.int32(0))


def _geometric(u, mean) -> jax.Array:
    """Integer >= 0 with ``P(X >= k) = (mean / (1 + mean)) ** k`` (mean ``mean``)."""
    ratio = mean / (1.0 + mean)
    safe = jnp.clip(ratio, 1e-6, 1.0 - 1e-6)
    return jnp.where(mean > 0, jnp.floor(jnp.log1p(-u) / jnp.log(safe)), 0.0)


def noise_orders(
    view: RoundView,
    ring: NoiseBook,
    next_order_id,
    uniforms,
    activity,
    params: MarketParams,
    volume_unit,
) -> tuple[Message, NoiseBook, jax.Array]:
    """Random-side market and limit orders with Pareto sizes, and cancellations.

    Slot ``j`` (of ``noise_slots``) sends a market order with probability
    ``min(1, noise_market_prob * activity)`` or a limit order with probability
    ``noise_limit_prob * activity`` (at most the rest), buy or sell with equal odds. A
    limit buy rests at ``floor(ref - 0.5) - d`` (a sell at ``ceil(ref + 0.5) + d``), ``d``
    geometric with mean ``noise_offset_ticks``, so it joins the best quote, improves a
    wide spread or queues behind. Each new limit order first cancels the oldest resting
    noise order (the ring holds ``noise_orders``), and a slot that sends nothing cancels it
    with probability ``noise_cancel_prob``.

    Args:
        view: the round's view of the book.
        ring: the resting noise orders.
        next_order_id: ``int32`` first unused order id.
        uniforms: ``float32[noise_slots * NOISE_UNIFORMS]`` in [0, 1).
        activity: ``float32`` intraday activity (the volume profile times T, mean 1).
        params: market parameters.
        volume_unit: ``float32`` V, shares per minute.

    Returns:
        ``(messages [2 * noise_slots], ring, next_order_id)``.
    """
    u = uniforms.reshape(params.noise_slots, NOISE_UNIFORMS)
    p_market = jnp.minimum(params.noise_market_prob * activity, 1.0)
    p_limit = jnp.minimum(params.noise_limit_prob * activity, 1.0 - p_market)
    kind, side, price, qty, order_id, owner = [], [], [], [], [], []
    ids, sides, cursor = ring.order_id, ring.side, ring.cursor
    n_ring = ids.shape[0]
    for j in range(params.noise_slots):
        u_kind, u_side, u_size, u_offset, u_cancel = (u[j, i] for i in range(NOISE_UNIFORMS))
        is_market = u_kind < p_market
        is_limit = ~is_market & (u_kind < p_market + p_limit)
        s = jnp.where(u_side < 0.5, BUY, SELL)
        pareto = (1.0 - u_size) ** (-1.0 / params.noise_tail)
        size = shares(jnp.minimum(params.noise_size * pareto, params.noise_max_size), volume_unit)
        offset = _geometric(u_offset, params.noise_offset_ticks)
        limit_price = jnp.where(
            s == BUY,
            _passive_bid(view, jnp.floor(view.reference - 0.5) - offset),
            _passive_ask(view, jnp.ceil(view.reference + 0.5) + offset),
        )
        slot = cursor % n_ring
        frees = is_limit | (~is_market & (u_cancel < params.noise_cancel_prob))
        old_id = ids[slot]
        kind += [jnp.where(frees & (old_id > 0), CANCEL, 0)]
        side += [sides[slot]]
        price += [0]
        qty += [CANCEL_ALL]
        order_id += [old_id]
        owner += [NOISE_TRADER]
        kind += [jnp.where(is_market, MARKET, jnp.where(is_limit, LIMIT, 0))]
        side += [s]
        price += [limit_price]
        qty += [size]
        order_id += [next_order_id]
        owner += [NOISE_TRADER]
        ids = ids.at[slot].set(jnp.where(is_limit, next_order_id, jnp.where(frees, 0, old_id)))
        sides = sides.at[slot].set(jnp.where(is_limit, s, sides[slot]))
        cursor = cursor + frees.astype(jnp.int32)
        next_order_id = next_order_id + 1
    ring = NoiseBook(order_id=ids, side=sides, cursor=cursor)
    return messages(kind, side, price, qty, order_id, owner), ring, next_order_id


def informed_orders(
    view: RoundView,
    ring: NoiseBook,
    next_order_id,
    fundamental,
    uniforms,
    params: MarketParams,
    volume_unit,
) -> tuple[Message, NoiseBook, jax.Array]:
    """Value traders: they see the fundamental price before others and quote it.

    When ``|fundamental - ref| >= informed_threshold_ticks`` slot ``j`` acts with
    probability ``informed_prob``: it cancels its previous order and sends a limit order
    for ``informed_size * V`` shares at the fundamental (a buy at ``floor(F)``, a sell at
    ``ceil(F)``). It takes the liquidity priced better than the fundamental and rests the
    rest there, so the quotes, and with them the mid, move to the fundamental (after
    ABIDES's value agents, which post limit orders at their value estimate). Each slot
    holds at most one resting order (``ring``, one entry per slot).

    Args:
        view: the round's view of the book.
        ring: the informed traders' resting orders (``informed_slots`` entries).
        next_order_id: ``int32`` first unused order id.
        fundamental: ``float32`` fundamental price, ticks.
        uniforms: ``float32[informed_slots]``.
        params: market parameters.
        volume_unit: ``float32`` V.

    Returns:
        ``(messages [2 * informed_slots], ring, next_order_id)``.
    """
    gap = fundamental - view.reference
    s = jnp.where(gap > 0, BUY, SELL)
    price = jnp.maximum(jnp.where(gap > 0, jnp.floor(fundamental), jnp.ceil(fundamental)), 1)
    size = shares(params.informed_size, volume_unit)
    kind, side, prices, qty, order_id, owner = [], [], [], [], [], []
    ids, sides = ring.order_id, ring.side
    for j in range(params.informed_slots):
        acts = (uniforms[j] < params.informed_prob) & (
            jnp.abs(gap) >= params.informed_threshold_ticks
        )
        kind += [jnp.where(acts & (ids[j] > 0), CANCEL, 0), jnp.where(acts, LIMIT, 0)]
        side += [sides[j], s]
        prices += [0, price]
        qty += [CANCEL_ALL, size]
        order_id += [ids[j], next_order_id]
        owner += [INFORMED_TRADER, INFORMED_TRADER]
        ids = ids.at[j].set(jnp.where(acts, next_order_id, ids[j]))
        sides = sides.at[j].set(jnp.where(acts, s, sides[j]))
        next_order_id = next_order_id + 1
    ring = NoiseBook(order_id=ids, side=sides, cursor=ring.cursor)
    return messages(kind, side, prices, qty, order_id, owner), ring, next_order_id


def momentum_orders(ema_fast, ema_slow, uniforms, params: MarketParams, volume_unit) -> Message:
    """Trend followers: buy when the fast mid average is above the slow one by more than
    ``momentum_threshold_bps`` (sell when below), with probability ``momentum_prob``.

    Args:
        ema_fast, ema_slow: ``float32`` moving averages of the mid, ticks.
        uniforms: ``float32[momentum_slots]``.
        params: market parameters.
        volume_unit: ``float32`` V.

    Returns:
        ``momentum_slots`` market-order messages (no-ops where they do not trade).
    """
    signal_bps = (ema_fast / jnp.maximum(ema_slow, 1e-6) - 1.0) * 1e4
    signalled = jnp.abs(signal_bps) > params.momentum_threshold_bps
    size = shares(params.momentum_size, volume_unit)
    n = params.momentum_slots
    kind = [
        jnp.where(signalled & (uniforms[j] < params.momentum_prob), MARKET, 0) for j in range(n)
    ]
    side = [jnp.where(signal_bps > 0, BUY, SELL)] * n
    return messages(kind, side, [0] * n, [size] * n, [0] * n, [MOMENTUM_TRADER] * n)
