"""Pure-Python reference limit order book with the same semantics as :mod:`serl_jax.lob.book`.

Written for clarity, not speed: a ``SortedDict`` of price levels per side, each level an
insertion-ordered ``dict`` of order id -> order (FIFO). Tests run it side by side with the
JAX book on random order streams and on LOBSTER files; the benchmark uses it as the
baseline. Units are the JAX book's: integer ticks, shares, integer ids.
"""

from __future__ import annotations

from dataclasses import dataclass

from sortedcontainers import SortedDict

from serl_jax.lob.book import BUY, CANCEL, EXECUTE, LIMIT, MARKET, UNKNOWN_ORDER_ID


@dataclass
class RefOrder:
    """A resting order. ``price`` in ticks, ``qty`` in shares."""

    price: int
    qty: int
    order_id: int
    owner: int
    arrival: int


@dataclass(frozen=True)
class RefTrade:
    """One execution: price in ticks, qty in shares, ``aggressor_side`` is 1 or -1."""

    price: int
    qty: int
    aggressor_owner: int
    passive_owner: int
    passive_order_id: int
    aggressor_side: int


class ReferenceBook:
    """Price-time priority book mirroring :class:`serl_jax.lob.book.Book` operation by operation.

    Order ids must be unique per side (as in the JAX book, where a cancel would otherwise
    target the best-priority order with that id).

    Args:
        capacity: maximum resting orders per side; limit orders that would exceed it are
            not rested and are counted in ``overflow_orders``/``overflow_qty``.
        max_trades: trades per operation that fit in the JAX trade buffer; the rest are
            still returned by this class but counted in ``dropped_trades``.

    Raises:
        ValueError: if ``capacity < 1`` or ``max_trades < 1``.
    """

    def __init__(self, capacity: int, max_trades: int = 8):
        if capacity < 1 or max_trades < 1:
            raise ValueError(f"capacity and max_trades must be >= 1, got {capacity}, {max_trades}")
        self.capacity = capacity
        self.max_trades = max_trades
        self._levels: dict[int, SortedDict] = {BUY: SortedDict(), -BUY: SortedDict()}
        self._count = {BUY: 0, -BUY: 0}
        self._by_id: dict[int, dict[int, RefOrder]] = {BUY: {}, -BUY: {}}
        self.next_arrival = 0
        self.submitted_qty = 0
        self.filled_qty = 0
        self.cancelled_qty = 0
        self.overflow_qty = 0
        self.overflow_orders = 0
        self.dropped_trades = 0
        self.missed_cancels = 0

    @classmethod
    def from_levels(cls, asks, bids, capacity: int, max_trades: int = 8) -> ReferenceBook:
        """Seed one unknown-identity order per level (as ``book_from_levels``).

        Args:
            asks: iterable of ``(price, size)`` best first; size 0 entries are skipped.
            bids: same for bids.
            capacity: as for the constructor.
            max_trades: as for the constructor.
        """
        book = cls(capacity, max_trades)
        for side, levels in ((-BUY, asks), (BUY, bids)):
            for price, size in levels:
                if size > 0:
                    book._rest(side, RefOrder(int(price), int(size), UNKNOWN_ORDER_ID, 0, 0))
                    book.submitted_qty += int(size)
        book.next_arrival = 1
        return book

    # --- views -------------------------------------------------------------------------

    def orders(self, side: int) -> list[RefOrder]:
        """Resting orders of ``side`` in priority order (best price, then arrival)."""
        levels = self._levels[side]
        prices = reversed(levels) if side == BUY else iter(levels)
        return [o for p in prices for o in levels[p].values()]

    def levels(self, side: int) -> list[tuple[int, int]]:
        """``(price, total shares)`` per price level of ``side``, best first."""
        levels = self._levels[side]
        prices = reversed(levels) if side == BUY else iter(levels)
        return [(p, sum(o.qty for o in levels[p].values())) for p in prices]

    def resting_qty(self) -> int:
        """Total resting shares on both sides."""
        return sum(o.qty for s in (BUY, -BUY) for o in self.orders(s))

    # --- internals -----------------------------------------------------------------------

    def _rest(self, side: int, order: RefOrder) -> None:
        level = self._levels[side].setdefault(order.price, {})
        level[order.order_id] = order
        if order.order_id != UNKNOWN_ORDER_ID:
            self._by_id[side][order.order_id] = order
        self._count[side] += 1

    def _remove(self, side: int, order: RefOrder) -> None:
        level = self._levels[side][order.price]
        del level[order.order_id]
        if not level:
            del self._levels[side][order.price]
        self._by_id[side].pop(order.order_id, None)
        self._count[side] -= 1

    def _record(self, trades: list[RefTrade], trade: RefTrade) -> None:
        if len(trades) >= self.max_trades:
            self.dropped_trades += 1
        trades.append(trade)

    def _place(self, side, price, qty, order_id, owner, rests) -> list[RefTrade]:
        qty = max(int(qty), 0)
        self.submitted_qty += qty
        opposite = self._levels[-side]
        trades: list[RefTrade] = []
        remaining = qty
        while remaining > 0 and opposite:
            best = opposite.peekitem(-1 if side == -BUY else 0)[0]
            if price is not None and side * (price - best) < 0:
                break
            for order in list(opposite[best].values()):
                fill = min(remaining, order.qty)
                order.qty -= fill
                remaining -= fill
                self._record(trades, RefTrade(best, fill, owner, order.owner, order.order_id, side))
                if order.qty == 0:
                    self._remove(-side, order)
                if remaining == 0:
                    break
        filled = qty - remaining
        self.filled_qty += 2 * filled
        if remaining > 0:
            if not rests:
                self.cancelled_qty += remaining
            elif self._count[side] >= self.capacity:
                self.overflow_orders += 1
                self.overflow_qty += remaining
            else:
                self._rest(side, RefOrder(price, remaining, order_id, owner, self.next_arrival))
        self.next_arrival += 1
        return trades

    def _find(self, side, order_id, price) -> RefOrder | None:
        order = self._by_id[side].get(order_id)
        if order is not None:
            return order
        if price > 0:
            level = self._levels[side].get(price, {})
            return level.get(UNKNOWN_ORDER_ID)
        return None

    def _reduce(self, side, order_id, price, qty, execution, owner) -> list[RefTrade]:
        qty = max(int(qty), 0)
        trades: list[RefTrade] = []
        self.next_arrival += 1
        if qty == 0:
            return trades
        order = self._find(side, order_id, price)
        if order is None:
            self.missed_cancels += 1
            return trades
        take = min(qty, order.qty)
        order.qty -= take
        if execution:
            self.filled_qty += take
            self._record(
                trades, RefTrade(order.price, take, owner, order.owner, order.order_id, -side)
            )
        else:
            self.cancelled_qty += take
        if order.qty == 0:
            self._remove(side, order)
        return trades

    # --- operations ------------------------------------------------------------------------

    def limit_order(self, side: int, price: int, qty: int, order_id: int, owner: int):
        """As :func:`serl_jax.lob.book.limit_order`; returns every trade (list of RefTrade)."""
        return self._place(side, int(price), qty, int(order_id), int(owner), True)

    def market_order(self, side: int, qty: int, owner: int):
        """As :func:`serl_jax.lob.book.market_order`; returns every trade."""
        return self._place(side, None, qty, 0, int(owner), False)

    def cancel_order(self, side: int, order_id: int, qty: int) -> None:
        """As :func:`serl_jax.lob.book.cancel_order`."""
        self._reduce(side, int(order_id), 0, qty, False, 0)

    def apply(self, kind: int, side: int, price: int, qty: int, order_id: int, owner: int):
        """As :func:`serl_jax.lob.book.apply_message` for one message; returns every trade."""
        if kind == LIMIT:
            return self.limit_order(side, price, qty, order_id, owner)
        if kind == MARKET:
            return self.market_order(side, qty, owner)
        if kind in (CANCEL, EXECUTE):
            return self._reduce(side, int(order_id), int(price), qty, kind == EXECUTE, int(owner))
        self.next_arrival += 1
        return []
