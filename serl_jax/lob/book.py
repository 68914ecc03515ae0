"""Fixed-shape limit order book with price-time priority, as pure JAX functions.

Each side of a book is a set of parallel ``int32`` arrays of static length ``capacity``
(one slot per resting order). The live orders of a side always occupy the slots
``0 .. n-1`` in priority order (best price first, then earliest arrival); empty slots
have every field equal to 0. Keeping the sides sorted makes every operation a
fixed-shape sweep:

* matching an incoming order is a cumulative sum over the opposite side (the orders it
  can trade with form a prefix), then one gather that drops the filled prefix;
* resting an order or deleting one is a one-slot shift of the arrays.

No operation loops over a data-dependent number of steps (unless ``matching="loop"`` is
asked for, the ``lax.while_loop`` alternative kept for comparison), so ``jax.vmap``
over thousands of books costs the same for every lane.

Units: prices are integer ticks (any integer price grid; the LOBSTER tools use
1/10000 dollar), quantities are shares, order and owner ids are integers. Sides are
``BUY = 1`` (bids) and ``SELL = -1`` (asks).

Nothing is dropped silently: an order that cannot rest because its side is full, and
trades that do not fit in the fixed trade buffer, are counted in the book
(``overflow_orders``/``overflow_qty`` and ``dropped_trades``).

Many books: ``jax.vmap`` of these functions works (one-book steps, any message at any
time, e.g. inside an environment). To replay message streams through hundreds of books
or more, :func:`serl_jax.lob.batched.apply_messages_batched` gives the same books and
trades 2-3x faster on CPU (a scan step written for a block of books, no data-dependent
shifts or gathers); ``benchmarks/bench_lob.py`` measures both designs (columns
``batched`` and ``vmap``/``loop``).
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp
from flax import struct

BUY = 1
SELL = -1
UNKNOWN_ORDER_ID = -1
"""Order id of an order whose identity is unknown (one per price level, seeded from a
snapshot of aggregated levels). Cancels and executions that name an id not resting in
the book fall back to the unknown-identity order at the message's price."""

LIMIT = 1
MARKET = 2
CANCEL = 3
EXECUTE = 4
"""Message kinds for :class:`Message` (0 is a no-op)."""

_MAX_PRICE = jnp.iinfo(jnp.int32).max

Matching = Literal["sweep", "loop"]


@struct.dataclass
class BookSide:
    """Resting orders of one side, sorted by priority; empty slots are all-zero.

    Attributes:
        price: ``int32[capacity]`` limit price in ticks.
        qty: ``int32[capacity]`` remaining quantity in shares; 0 marks an empty slot.
        order_id: ``int32[capacity]`` order id (``UNKNOWN_ORDER_ID`` for seeded levels).
        owner: ``int32[capacity]`` id of the trader or agent that placed the order.
        arrival: ``int32[capacity]`` sequence number of the operation that placed it.
    """

    price: jax.Array
    qty: jax.Array
    order_id: jax.Array
    owner: jax.Array
    arrival: jax.Array


@struct.dataclass
class Book:
    """One limit order book. All scalars are ``int32[]``; add leading axes with ``vmap``.

    Attributes:
        bids: buy orders, highest price first.
        asks: sell orders, lowest price first.
        next_arrival: sequence number given to the next operation.
        submitted_qty: shares of all orders submitted (limit, market, seeded).
        filled_qty: shares removed from orders by trades, counting both the aggressor's
            and the passive order's shares (a trade of q adds 2q; an ``EXECUTE`` of a
            resting order, whose aggressor never entered this book, adds q).
        cancelled_qty: shares removed by cancels, plus unfilled market-order shares.
        overflow_qty: shares of limit orders that could not rest because the side was full.
        overflow_orders: number of such orders.
        dropped_trades: trades executed but not recorded because the trade buffer was full.
        missed_cancels: cancels/executions whose order was not found (nothing removed).

    Conservation: ``submitted_qty == resting + filled_qty + cancelled_qty + overflow_qty``
    (``EXECUTE`` messages add to ``filled_qty`` only what they take from resting orders).
    """

    bids: BookSide
    asks: BookSide
    next_arrival: jax.Array
    submitted_qty: jax.Array
    filled_qty: jax.Array
    cancelled_qty: jax.Array
    overflow_qty: jax.Array
    overflow_orders: jax.Array
    dropped_trades: jax.Array
    missed_cancels: jax.Array

    @property
    def capacity(self) -> int:
        """Static number of order slots per side."""
        return self.bids.qty.shape[-1]


@struct.dataclass
class Trades:
    """Fixed-size buffer of the trades caused by one operation; unused rows have ``qty == 0``.

    Attributes:
        price: ``int32[max_trades]`` execution price in ticks (the passive order's price).
        qty: ``int32[max_trades]`` shares traded.
        aggressor_owner: ``int32[max_trades]`` owner of the incoming order.
        passive_owner: ``int32[max_trades]`` owner of the resting order.
        passive_order_id: ``int32[max_trades]`` id of the resting order.
        aggressor_side: ``int32[max_trades]`` ``BUY`` or ``SELL`` (0 in unused rows).
    """

    price: jax.Array
    qty: jax.Array
    aggressor_owner: jax.Array
    passive_owner: jax.Array
    passive_order_id: jax.Array
    aggressor_side: jax.Array


@struct.dataclass
class Message:
    """An order-flow event; fields are ``int32`` scalars (or ``int32[M]`` for a stream).

    Attributes:
        kind: 0 no-op, ``LIMIT``, ``MARKET``, ``CANCEL`` or ``EXECUTE``.
        side: ``BUY``/``SELL``: the incoming order's side for ``LIMIT``/``MARKET``, the
            resting order's side for ``CANCEL``/``EXECUTE``.
        price: limit price in ticks (``LIMIT``); for ``CANCEL``/``EXECUTE`` the level
            whose unknown-identity order absorbs the message if ``order_id`` is not
            resting (0 disables that fallback); ignored for ``MARKET``.
        qty: shares; for ``CANCEL`` a quantity at least the remaining one deletes the order.
        order_id: id of the new order (``LIMIT``) or of the resting order
            (``CANCEL``/``EXECUTE``).
        owner: owner of the new order, or the aggressor's owner for ``EXECUTE``.
    """

    kind: jax.Array
    side: jax.Array
    price: jax.Array
    qty: jax.Array
    order_id: jax.Array
    owner: jax.Array


def _i32(x) -> jax.Array:
    return jnp.asarray(x, dtype=jnp.int32)


def _empty_side(capacity: int) -> BookSide:
    zeros = jnp.zeros((capacity,), jnp.int32)
    return BookSide(price=zeros, qty=zeros, order_id=zeros, owner=zeros, arrival=zeros)


def empty_book(capacity: int) -> Book:
    """An empty book.

    Args:
        capacity: static number of order slots per side (>= 1).

    Returns:
        A :class:`Book` with ``int32[capacity]`` side arrays and zero counters.

    Raises:
        ValueError: if ``capacity < 1``.
    """
    if capacity < 1:
        raise ValueError(f"capacity must be >= 1, got {capacity}")
    zero = _i32(0)
    return Book(
        bids=_empty_side(capacity),
        asks=_empty_side(capacity),
        next_arrival=zero,
        submitted_qty=zero,
        filled_qty=zero,
        cancelled_qty=zero,
        overflow_qty=zero,
        overflow_orders=zero,
        dropped_trades=zero,
        missed_cancels=zero,
    )


def _seed_side(prices: jax.Array, sizes: jax.Array, capacity: int, arrival) -> BookSide:
    levels = prices.shape[0]
    present = sizes > 0
    pad = capacity - levels

    def fill(x):
        return jnp.pad(jnp.where(present, x, 0).astype(jnp.int32), (0, pad))

    return BookSide(
        price=fill(prices),
        qty=fill(sizes),
        order_id=fill(jnp.full((levels,), UNKNOWN_ORDER_ID, jnp.int32)),
        owner=jnp.zeros((capacity,), jnp.int32),
        arrival=fill(jnp.broadcast_to(arrival, (levels,))),
    )


def book_from_levels(
    ask_prices: jax.Array,
    ask_sizes: jax.Array,
    bid_prices: jax.Array,
    bid_sizes: jax.Array,
    capacity: int,
) -> Book:
    """A book holding one unknown-identity order (owner 0) per visible price level.

    This is how a snapshot of aggregated levels (a LOBSTER orderbook row) becomes a book.

    Args:
        ask_prices: ``int32[L]`` ask prices in ticks, best (lowest) first.
        ask_sizes: ``int32[L]`` shares per ask level; 0 marks an absent level. Present
            levels must come first.
        bid_prices: ``int32[L]`` bid prices in ticks, best (highest) first.
        bid_sizes: ``int32[L]`` shares per bid level, as for asks.
        capacity: static slots per side, ``>= L``.

    Returns:
        A :class:`Book` whose orders have ``order_id == UNKNOWN_ORDER_ID`` and arrival 0.

    Raises:
        ValueError: if ``capacity < L``.
    """
    levels = ask_prices.shape[-1]
    if capacity < levels:
        raise ValueError(f"capacity {capacity} is smaller than the {levels} levels to seed")
    book = empty_book(capacity)
    bids = _seed_side(_i32(bid_prices), _i32(bid_sizes), capacity, 0)
    asks = _seed_side(_i32(ask_prices), _i32(ask_sizes), capacity, 0)
    return book.replace(
        bids=bids,
        asks=asks,
        next_arrival=_i32(1),
        submitted_qty=bids.qty.sum() + asks.qty.sum(),
    )


# --- side-array primitives -------------------------------------------------------------


def _map_side(fn, *sides: BookSide) -> BookSide:
    return jax.tree.map(fn, *sides)


def _select_side(cond, a: BookSide, b: BookSide) -> BookSide:
    return _map_side(lambda x, y: jnp.where(cond, x, y), a, b)


def _shift_up(x: jax.Array, k: int) -> jax.Array:
    """Static shift towards slot 0 by ``k``: slot j takes slot j + k, zeros enter at the end."""
    return jnp.concatenate([x[k:], jnp.zeros((k,), x.dtype)])


def _shift_down(x: jax.Array, k: int) -> jax.Array:
    """Static shift away from slot 0 by ``k``: slot j takes slot j - k, zeros enter at 0."""
    return jnp.concatenate([jnp.zeros((k,), x.dtype), x[:-k]])


def _prefix_sum(x: jax.Array) -> jax.Array:
    """Inclusive prefix sum in ceil(log2(n)) static shift-and-add steps.

    XLA's CPU ``cumsum`` is a quadratic ``reduce_window``; this stays elementwise.
    """
    k = 1
    while k < x.shape[0]:
        x = x + _shift_down(x, k)
        k *= 2
    return x


def _shift_out(side: BookSide, n) -> BookSide:
    """Drop the first ``n`` slots (a filled prefix); slot j takes slot j + n."""
    capacity = side.qty.shape[0]
    src = jnp.arange(capacity) + n
    valid = src < capacity
    src = jnp.minimum(src, capacity - 1)
    return _map_side(lambda x: jnp.where(valid, x[src], 0), side)


def _delete_slot(side: BookSide, k) -> BookSide:
    """Remove slot ``k`` (no-op when ``k == capacity``); later slots move up by one."""
    j = jnp.arange(side.qty.shape[0])

    def shift(x):
        return jnp.where(j < k, x, _shift_up(x, 1))

    return _map_side(shift, side)


def _insert_slot(side: BookSide, pos, values: BookSide) -> BookSide:
    """Insert one order at slot ``pos`` (no-op when ``pos == capacity``); later slots move
    down by one, the last slot falls off (callers only insert when it is empty)."""
    j = jnp.arange(side.qty.shape[0])

    def shift(x, v):
        return jnp.where(j < pos, x, jnp.where(j == pos, v, _shift_down(x, 1)))

    return _map_side(shift, side, values)


def _trades_from_fills(opp: BookSide, fills, aggressor_side, aggressor_owner, max_trades):
    """Trade rows for the first ``max_trades`` filled slots of a sorted opposite side."""
    capacity = fills.shape[0]
    if max_trades > capacity:
        pad = max_trades - capacity

        def head(x):
            return jnp.pad(x, (0, pad))

        dropped = _i32(0)
    else:

        def head(x):
            return x[:max_trades]

        dropped = (fills[max_trades:] > 0).sum(dtype=jnp.int32)
    qty = head(fills)
    traded = qty > 0
    trades = Trades(
        price=jnp.where(traded, head(opp.price), 0),
        qty=qty,
        aggressor_owner=jnp.where(traded, aggressor_owner, 0),
        passive_owner=jnp.where(traded, head(opp.owner), 0),
        passive_order_id=jnp.where(traded, head(opp.order_id), 0),
        aggressor_side=jnp.where(traded, aggressor_side, 0),
    )
    return trades, dropped


def _match_sweep(opp: BookSide, side, limit_price, qty, owner, max_trades):
    """Match ``qty`` against the sorted opposite side with one cumulative-sum sweep."""
    eligible = (opp.qty > 0) & (side * (limit_price - opp.price) >= 0)
    avail = jnp.where(eligible, opp.qty, 0)
    before = _prefix_sum(avail) - avail
    fills = jnp.clip(qty - before, 0, avail)
    left = opp.qty - fills
    n_gone = (eligible & (left == 0)).sum(dtype=jnp.int32)
    trades, dropped = _trades_from_fills(opp, fills, side, owner, max_trades)
    new_opp = _shift_out(opp.replace(qty=left), n_gone)
    return new_opp, fills.sum(dtype=jnp.int32), trades, dropped


def _match_loop(opp: BookSide, side, limit_price, qty, owner, max_trades):
    """Same result as :func:`_match_sweep`, one resting order per ``while_loop`` step."""
    zeros = jnp.zeros((max_trades,), jnp.int32)
    trades0 = Trades(
        price=zeros,
        qty=zeros,
        aggressor_owner=zeros,
        passive_owner=zeros,
        passive_order_id=zeros,
        aggressor_side=zeros,
    )

    def cond(carry):
        opp, remaining, _, _, _ = carry
        head_ok = (opp.qty[0] > 0) & (side * (limit_price - opp.price[0]) >= 0)
        return (remaining > 0) & head_ok

    def body(carry):
        opp, remaining, n, trades, dropped = carry
        fill = jnp.minimum(remaining, opp.qty[0])
        row = Trades(
            price=opp.price[0],
            qty=fill,
            aggressor_owner=_i32(owner),
            passive_owner=opp.owner[0],
            passive_order_id=opp.order_id[0],
            aggressor_side=_i32(side),
        )
        slot = jnp.where(n < max_trades, n, max_trades)
        trades = jax.tree.map(lambda buf, v: buf.at[slot].set(v, mode="drop"), trades, row)
        dropped = dropped + (n >= max_trades)
        left = opp.qty[0] - fill
        opp = opp.replace(qty=opp.qty.at[0].set(left))
        opp = _delete_slot(opp, jnp.where(left == 0, 0, opp.qty.shape[0]))
        return opp, remaining - fill, n + 1, trades, dropped

    init = (opp, _i32(qty), _i32(0), trades0, _i32(0))
    opp, remaining, _, trades, dropped = jax.lax.while_loop(cond, body, init)
    return opp, _i32(qty) - remaining, trades, dropped


_MATCHERS = {"sweep": _match_sweep, "loop": _match_loop}


def _place(book: Book, side, limit_price, qty, order_id, owner, rests, max_trades, matching):
    """Match an incoming order, then rest its remainder when ``rests`` (limit orders)."""
    if matching not in _MATCHERS:
        raise ValueError(f"matching must be 'sweep' or 'loop', got {matching!r}")
    if max_trades < 1:
        raise ValueError(f"max_trades must be >= 1, got {max_trades}")
    qty = jnp.maximum(_i32(qty), 0)
    is_buy = side > 0
    own = _select_side(is_buy, book.bids, book.asks)
    opp = _select_side(is_buy, book.asks, book.bids)
    opp, filled, trades, dropped = _MATCHERS[matching](
        opp, side, limit_price, qty, owner, max_trades
    )
    remainder = qty - filled
    wants_rest = rests & (remainder > 0)
    capacity = book.capacity
    live = own.qty > 0
    side_full = live.sum() >= capacity
    pos = (live & (side * (own.price - limit_price) >= 0)).sum(dtype=jnp.int32)
    do_rest = wants_rest & ~side_full
    new_order = BookSide(
        price=_i32(limit_price),
        qty=remainder,
        order_id=_i32(order_id),
        owner=_i32(owner),
        arrival=book.next_arrival,
    )
    own = _insert_slot(own, jnp.where(do_rest, pos, capacity), new_order)
    overflow = wants_rest & side_full
    book = book.replace(
        bids=_select_side(is_buy, own, opp),
        asks=_select_side(is_buy, opp, own),
        submitted_qty=book.submitted_qty + qty,
        filled_qty=book.filled_qty + 2 * filled,
        cancelled_qty=book.cancelled_qty + jnp.where(rests, 0, remainder),
        overflow_qty=book.overflow_qty + jnp.where(overflow, remainder, 0),
        overflow_orders=book.overflow_orders + overflow.astype(jnp.int32),
        dropped_trades=book.dropped_trades + dropped,
    )
    return book, trades


def _reduce(book: Book, side, order_id, price, qty, is_execution, aggressor_owner, max_trades):
    """Take up to ``qty`` shares from one resting order (a cancel or an execution)."""
    qty = jnp.maximum(_i32(qty), 0)
    is_buy = side > 0
    own = _select_side(is_buy, book.bids, book.asks)
    capacity = book.capacity
    live = own.qty > 0
    by_id = live & (own.order_id == order_id) & (order_id != UNKNOWN_ORDER_ID)
    by_level = live & (own.order_id == UNKNOWN_ORDER_ID) & (own.price == price) & (price > 0)
    slots = jnp.arange(capacity)
    k_id = jnp.where(by_id, slots, capacity).min()
    k_level = jnp.where(by_level, slots, capacity).min()
    found_id = k_id < capacity
    k = jnp.where(found_id, k_id, k_level)
    found = (k < capacity) & (qty > 0)
    hit = (slots == k) & found
    take = jnp.minimum(qty, jnp.where(hit, own.qty, 0).sum())
    left = own.qty - jnp.where(hit, take, 0)
    gone = found & (jnp.where(hit, left, 0).sum() == 0)

    def at_k(x):
        return jnp.where(hit, x, 0).sum()

    trade_qty = jnp.where(is_execution, take, 0)
    row = jnp.arange(max_trades) == 0
    traded = row & (trade_qty > 0)
    trades = Trades(
        price=jnp.where(traded, at_k(own.price), 0),
        qty=jnp.where(row, trade_qty, 0),
        aggressor_owner=jnp.where(traded, aggressor_owner, 0),
        passive_owner=jnp.where(traded, at_k(own.owner), 0),
        passive_order_id=jnp.where(traded, at_k(own.order_id), 0),
        aggressor_side=jnp.where(traded, -side, 0),
    )
    own = _delete_slot(own.replace(qty=left), jnp.where(gone, k, capacity))
    book = book.replace(
        bids=_select_side(is_buy, own, book.bids),
        asks=_select_side(is_buy, book.asks, own),
        filled_qty=book.filled_qty + trade_qty,
        cancelled_qty=book.cancelled_qty + jnp.where(is_execution, 0, take),
        missed_cancels=book.missed_cancels + ((qty > 0) & ~found).astype(jnp.int32),
    )
    return book, trades


def _tick(book: Book) -> Book:
    return book.replace(next_arrival=book.next_arrival + 1)


def limit_order(
    book: Book,
    side,
    price,
    qty,
    order_id,
    owner,
    *,
    max_trades: int = 8,
    matching: Matching = "sweep",
) -> tuple[Book, Trades]:
    """Submit a limit order: it trades with the opposite side up to ``price``, the rest rests.

    Args:
        book: the book.
        side: ``int32[]`` ``BUY`` (1) or ``SELL`` (-1).
        price: ``int32[]`` limit price in ticks (> 0).
        qty: ``int32[]`` shares; non-positive quantities do nothing.
        order_id: ``int32[]`` id of the new order (unique per side, not ``UNKNOWN_ORDER_ID``).
        owner: ``int32[]`` trader/agent id.
        max_trades: static size of the returned trade buffer; extra trades still execute
            and are counted in ``book.dropped_trades``.
        matching: static; ``"sweep"`` (fixed-shape, default) or ``"loop"`` (while_loop).

    Returns:
        ``(book, trades)``: the new book and a :class:`Trades` buffer of ``max_trades`` rows
        in execution order. If the side is full the remainder is not rested and is counted
        in ``overflow_orders``/``overflow_qty``.

    Raises:
        ValueError: if ``matching`` is not ``"sweep"`` or ``"loop"``, or ``max_trades < 1``.
    """
    book, trades = _place(book, side, price, qty, order_id, owner, True, max_trades, matching)
    return _tick(book), trades


def market_order(
    book: Book, side, qty, owner, *, max_trades: int = 8, matching: Matching = "sweep"
) -> tuple[Book, Trades]:
    """Submit a market order: it trades until filled or the opposite side is empty.

    Args:
        book: the book.
        side: ``int32[]`` ``BUY`` or ``SELL``.
        qty: ``int32[]`` shares; the unfilled part is added to ``cancelled_qty``.
        owner: ``int32[]`` trader/agent id.
        max_trades: static size of the returned trade buffer (see :func:`limit_order`).
        matching: static; ``"sweep"`` or ``"loop"``.

    Returns:
        ``(book, trades)`` as for :func:`limit_order`.

    Raises:
        ValueError: if ``matching`` is not ``"sweep"`` or ``"loop"``, or ``max_trades < 1``.
    """
    limit_price = jnp.where(side > 0, _MAX_PRICE, 0)
    book, trades = _place(book, side, limit_price, qty, 0, owner, False, max_trades, matching)
    return _tick(book), trades


def cancel_order(book: Book, side, order_id, qty) -> Book:
    """Cancel ``qty`` shares of a resting order.

    A partial cancel keeps the order's place in its queue; ``qty`` at least the remaining
    quantity deletes it. An id that is not resting on ``side`` only increments
    ``missed_cancels``.

    Args:
        book: the book.
        side: ``int32[]`` side of the resting order, ``BUY`` or ``SELL``.
        order_id: ``int32[]`` id of the resting order.
        qty: ``int32[]`` shares to cancel.

    Returns:
        The new book.
    """
    book, _ = _reduce(book, side, order_id, 0, qty, False, 0, 1)
    return _tick(book)


def apply_message(
    book: Book, msg: Message, *, max_trades: int = 8, matching: Matching = "sweep"
) -> tuple[Book, Trades]:
    """Apply one :class:`Message` of any kind with masked arithmetic (no branching).

    Args:
        book: the book.
        msg: a message with ``int32[]`` fields.
        max_trades: static size of the trade buffer.
        matching: static; ``"sweep"`` or ``"loop"``.

    Returns:
        ``(book, trades)``. ``EXECUTE`` takes ``qty`` from the resting order ``order_id``
        and records one trade whose aggressor is ``owner`` on the other side.

    Raises:
        ValueError: if ``matching`` is not ``"sweep"`` or ``"loop"``, or ``max_trades < 1``.
    """
    kind = msg.kind
    is_market = kind == MARKET
    places = (kind == LIMIT) | is_market
    limit_price = jnp.where(is_market, jnp.where(msg.side > 0, _MAX_PRICE, 0), msg.price)
    book, placed = _place(
        book,
        msg.side,
        limit_price,
        jnp.where(places, msg.qty, 0),
        msg.order_id,
        msg.owner,
        kind == LIMIT,
        max_trades,
        matching,
    )
    reduces = (kind == CANCEL) | (kind == EXECUTE)
    book, reduced = _reduce(
        book,
        msg.side,
        msg.order_id,
        msg.price,
        jnp.where(reduces, msg.qty, 0),
        kind == EXECUTE,
        msg.owner,
        max_trades,
    )
    trades = jax.tree.map(lambda a, b: jnp.where(places, a, b), placed, reduced)
    return _tick(book), trades


def apply_messages(
    book: Book, msgs: Message, *, max_trades: int = 8, matching: Matching = "sweep"
) -> tuple[Book, Trades]:
    """Apply a stream of messages in order with ``lax.scan``.

    For a batch of books with one stream each, prefer
    :func:`serl_jax.lob.batched.apply_messages_batched` (same result as ``jax.vmap`` of
    this function, faster on CPU).

    Args:
        book: the book.
        msgs: a :class:`Message` whose fields are ``int32[M]``.
        max_trades: static size of the per-message trade buffer.
        matching: static; ``"sweep"`` or ``"loop"``.

    Returns:
        ``(book, trades)`` with trade fields ``int32[M, max_trades]``.

    Raises:
        ValueError: if ``matching`` is not ``"sweep"`` or ``"loop"``, or ``max_trades < 1``.
    """

    def step(b, m):
        return apply_message(b, m, max_trades=max_trades, matching=matching)

    return jax.lax.scan(step, book, msgs)
