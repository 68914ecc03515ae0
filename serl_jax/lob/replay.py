"""Replay LOBSTER files through the JAX book and compare with LOBSTER's own snapshots.

Usage::

    python -m serl_jax.lob.replay MESSAGE_CSV ORDERBOOK_CSV [--mode step|full] [--json]

Both modes compare the visible levels (prices and sizes, both sides) after message ``i``
with orderbook row ``i``. A comparison is *undetermined* (not counted as compared) when
one of the compared levels lies beyond the deepest level the file showed in row ``i - 1``
on a side whose every level was occupied: liquidity there was never shown (a LOBSTER
file of L levels omits messages that only touch deeper prices), so the outcome is not
determined by the file. Message 0 has no preceding row and is always undetermined.

* ``step``: one book per message, all messages at once under ``vmap``: the book of row
  ``i - 1`` (one unknown-identity order per level), message ``i`` applied, compared.
* ``full``: one book seeded from row 0 and run through every message with ``lax.scan``.
  After each comparison, levels beyond the previous row's deepest level are replaced by
  what row ``i`` shows (the file revealing liquidity it never showed before); everything
  within that range is carried by the book alone.

Exit status: 0 when every compared message agrees, 1 when one disagrees or (full mode)
orders overflowed ``--capacity``, 2 for unreadable input (one ``error:`` line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from serl_jax.lob.book import (
    BUY,
    SELL,
    UNKNOWN_ORDER_ID,
    Book,
    BookSide,
    Message,
    apply_message,
    book_from_levels,
)
from serl_jax.lob.lobster import LobsterFormatError, LobsterMessages, LobsterOrderbook, read_lobster
from serl_jax.lob.queries import Levels, top_levels

EVENT_NAMES = {
    1: "new limit",
    2: "partial cancel",
    3: "delete",
    4: "visible execution",
    5: "hidden execution",
    6: "cross trade",
    7: "halt",
}


@dataclass(frozen=True)
class Disagreement:
    """First compared message whose visible book differs from the file.

    Attributes:
        index: 0-based message/row index.
        message: the message row ``(time, type, order_id, size, price, direction)``.
        expected: orderbook row ``index`` as :class:`Levels` of numpy ``int32[L]``.
        got: the replayed book's levels, same layout.
    """

    index: int
    message: tuple
    expected: Levels
    got: Levels


@dataclass(frozen=True)
class ReplayResult:
    """Counts of a replay; ``compared + undetermined == messages``.

    Attributes:
        mode: ``"step"`` or ``"full"``.
        messages: rows in the file.
        compared: messages whose outcome the file determines.
        agree: compared messages whose visible book matches the file exactly.
        undetermined: messages not compared.
        first_disagreement: the first compared message that disagrees (``None`` if none).
        overflow_orders: orders the book could not rest because a side was full
            (full mode; always 0 in step mode, where capacity is levels + 1).
    """

    mode: str
    messages: int
    compared: int
    agree: int
    undetermined: int
    first_disagreement: Disagreement | None
    overflow_orders: int

    @property
    def ok(self) -> bool:
        """Whether every compared message agrees and nothing overflowed."""
        return self.agree == self.compared and self.overflow_orders == 0

    def counts(self) -> dict[str, int]:
        """The JSON summary: ``messages``, ``compared``, ``agree``, ``undetermined``."""
        return {
            "messages": self.messages,
            "compared": self.compared,
            "agree": self.agree,
            "undetermined": self.undetermined,
        }


def _rows(book: LobsterOrderbook) -> Levels:
    return Levels(
        ask_price=jnp.asarray(book.ask_price),
        ask_size=jnp.asarray(book.ask_size),
        bid_price=jnp.asarray(book.bid_price),
        bid_size=jnp.asarray(book.bid_size),
    )


def _bound(price: jax.Array, size: jax.Array) -> jax.Array:
    """Deepest shown price of a side when all its levels are occupied, else 0 (no bound)."""
    return jnp.where(size[..., -1] > 0, price[..., -1], 0)


def _beyond(price, bound, sign):
    """Prices strictly worse than ``bound`` for a side with priority sign (+1 bid, -1 ask)."""
    return (bound > 0) & (sign * (price - bound) < 0)


def _check(got: Levels, expected: Levels, ask_bound, bid_bound):
    """(determined, agree) for one message."""
    agree = jnp.array(True)
    for name in ("ask_price", "ask_size", "bid_price", "bid_size"):
        agree &= (getattr(got, name) == getattr(expected, name)).all()
    hidden = jnp.array(False)
    for levels in (got, expected):
        hidden |= ((levels.ask_size > 0) & _beyond(levels.ask_price, ask_bound, SELL)).any()
        hidden |= ((levels.bid_size > 0) & _beyond(levels.bid_price, bid_bound, BUY)).any()
    return ~hidden, agree


@jax.jit
def _step_all(prev: Levels, expected: Levels, msgs: Message):
    levels = prev.ask_price.shape[-1]

    def one(prev, expected, msg):
        book = book_from_levels(
            prev.ask_price, prev.ask_size, prev.bid_price, prev.bid_size, levels + 1
        )
        book, _ = apply_message(book, msg, max_trades=1)
        got = top_levels(book, levels)
        determined, agree = _check(
            got,
            expected,
            _bound(prev.ask_price, prev.ask_size),
            _bound(prev.bid_price, prev.bid_size),
        )
        return determined, agree, got

    return jax.vmap(one)(prev, expected, msgs)


def _resync_side(side: BookSide, sign, bound, row_price, row_size, arrival):
    """Replace orders beyond ``bound`` by one unknown-identity order per row level there.

    Returns the new side and (removed shares, seeded shares, unseeded orders, unseeded
    shares) for the book's counters.
    """
    capacity = side.qty.shape[0]
    live = side.qty > 0
    keep = live & ~_beyond(side.price, bound, sign)
    n_keep = keep.sum()
    removed = jnp.where(live & ~keep, side.qty, 0).sum()
    add = (row_size > 0) & _beyond(row_price, bound, sign)
    first = jnp.argmax(add)
    j = jnp.arange(capacity)
    offset = j - n_keep
    from_row = (offset >= 0) & (offset < add.sum())
    src = jnp.clip(first + offset, 0, row_price.shape[0] - 1)

    def merged(old, new):
        return jnp.where(keep, old, jnp.where(from_row, new, 0)).astype(jnp.int32)

    seeded_qty = jnp.where(from_row, row_size[src], 0)
    new_side = BookSide(
        price=merged(side.price, row_price[src]),
        qty=merged(side.qty, seeded_qty),
        order_id=merged(side.order_id, jnp.full((capacity,), UNKNOWN_ORDER_ID)),
        owner=merged(side.owner, jnp.zeros((capacity,), jnp.int32)),
        arrival=merged(side.arrival, jnp.full((capacity,), arrival)),
    )
    unseeded = add.sum() - from_row.sum()
    unseeded_qty = jnp.where(add, row_size, 0).sum() - seeded_qty.sum()
    return new_side, removed, seeded_qty.sum(), unseeded, unseeded_qty


def _resync(book: Book, row: Levels, ask_bound, bid_bound) -> Book:
    bids, b_rm, b_seed, b_over, b_over_qty = _resync_side(
        book.bids, BUY, bid_bound, row.bid_price, row.bid_size, book.next_arrival
    )
    asks, a_rm, a_seed, a_over, a_over_qty = _resync_side(
        book.asks, SELL, ask_bound, row.ask_price, row.ask_size, book.next_arrival
    )
    return book.replace(
        bids=bids,
        asks=asks,
        submitted_qty=book.submitted_qty + b_seed + a_seed + b_over_qty + a_over_qty,
        cancelled_qty=book.cancelled_qty + b_rm + a_rm,
        overflow_orders=book.overflow_orders + b_over + a_over,
        overflow_qty=book.overflow_qty + b_over_qty + a_over_qty,
    )


@partial(jax.jit, static_argnames=("capacity",))
def _full_scan(rows: Levels, msgs: Message, capacity: int):
    levels = rows.ask_price.shape[-1]
    first = jax.tree.map(lambda x: x[0], rows)
    book = book_from_levels(
        first.ask_price, first.ask_size, first.bid_price, first.bid_size, capacity
    )
    prev = jax.tree.map(lambda x: x[:-1], rows)
    expected = jax.tree.map(lambda x: x[1:], rows)
    rest = jax.tree.map(lambda x: x[1:], msgs)
    bounds = (_bound(prev.ask_price, prev.ask_size), _bound(prev.bid_price, prev.bid_size))

    def step(book, xs):
        msg, row, ask_bound, bid_bound = xs
        book, _ = apply_message(book, msg, max_trades=1)
        got = top_levels(book, levels)
        determined, agree = _check(got, row, ask_bound, bid_bound)
        return _resync(book, row, ask_bound, bid_bound), (determined, agree, got)

    return jax.lax.scan(step, book, (rest, expected, *bounds))


def _to_levels(levels: Levels, i: int) -> Levels:
    return jax.tree.map(lambda x: np.asarray(x[i]), levels)


def replay(
    messages: LobsterMessages, orderbook: LobsterOrderbook, mode: str = "step", capacity: int = 256
) -> ReplayResult:
    """Replay a LOBSTER file pair and count agreeing messages.

    Args:
        messages: parsed message file (``N`` rows).
        orderbook: parsed orderbook file (``N`` rows, ``L`` levels).
        mode: ``"step"`` or ``"full"`` (see the module docstring).
        capacity: order slots per side in full mode (>= ``L``); overflow is reported.

    Returns:
        :class:`ReplayResult`.

    Raises:
        ValueError: unknown mode, mismatched lengths, or ``capacity < L`` in full mode.
    """
    if mode not in ("step", "full"):
        raise ValueError(f"mode must be 'step' or 'full', got {mode!r}")
    n = len(messages)
    if n != len(orderbook):
        raise ValueError(f"{n} messages but {len(orderbook)} orderbook rows")
    if n < 2:
        return ReplayResult(mode, n, 0, 0, n, None, 0)
    rows = _rows(orderbook)
    msgs = jax.tree.map(jnp.asarray, messages.to_book_messages())
    overflow = 0
    if mode == "step":
        prev = jax.tree.map(lambda x: x[:-1], rows)
        expected = jax.tree.map(lambda x: x[1:], rows)
        rest = jax.tree.map(lambda x: x[1:], msgs)
        determined, agree, got = _step_all(prev, expected, rest)
    else:
        if capacity < orderbook.levels:
            raise ValueError(f"capacity {capacity} is below the file's {orderbook.levels} levels")
        book, (determined, agree, got) = _full_scan(rows, msgs, capacity)
        overflow = int(book.overflow_orders)
    determined = np.asarray(determined)
    agree = np.asarray(agree)
    wrong = np.flatnonzero(determined & ~agree)
    first = None
    if wrong.size:
        k = int(wrong[0])
        i = k + 1
        message = (
            float(messages.time[i]),
            int(messages.event_type[i]),
            int(messages.order_id[i]),
            int(messages.size[i]),
            int(messages.price[i]),
            int(messages.direction[i]),
        )
        first = Disagreement(i, message, _to_levels(rows, i), _to_levels(got, k))
    compared = int(determined.sum())
    return ReplayResult(
        mode=mode,
        messages=n,
        compared=compared,
        agree=int((determined & agree).sum()),
        undetermined=n - compared,
        first_disagreement=first,
        overflow_orders=overflow,
    )


def format_disagreement(d: Disagreement) -> str:
    """Human-readable report of a disagreement: the message and both books side by side."""
    t, etype, oid, size, price, direction = d.message
    lines = [
        f"first disagreement at row {d.index + 1} (0-based message {d.index}): "
        f"t={t:.9f} type={etype} ({EVENT_NAMES.get(etype, '?')}) id={oid} size={size} "
        f"price={price} direction={direction}",
        f"{'level':>5} | {'file ask':>18} {'file bid':>18} | {'book ask':>18} {'book bid':>18}",
    ]
    for lv in range(d.expected.ask_price.shape[0]):

        def cell(levels, side, lv=lv):
            p = getattr(levels, f"{side}_price")[lv]
            s = getattr(levels, f"{side}_size")[lv]
            return f"{s}@{p}" if s > 0 else "-"

        lines.append(
            f"{lv + 1:>5} | {cell(d.expected, 'ask'):>18} {cell(d.expected, 'bid'):>18} | "
            f"{cell(d.got, 'ask'):>18} {cell(d.got, 'bid'):>18}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status (0 agree, 1 disagree, 2 bad input)."""
    parser = argparse.ArgumentParser(
        prog="python -m serl_jax.lob.replay",
        description="Replay a LOBSTER message file through the JAX order book and compare "
        "the visible book with the orderbook file after every message.",
    )
    parser.add_argument("message_csv", help="LOBSTER message file (.csv or .csv.gz)")
    parser.add_argument("orderbook_csv", help="LOBSTER orderbook file (.csv or .csv.gz)")
    parser.add_argument("--mode", choices=("step", "full"), default="step")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--capacity", type=int, default=256, help="order slots per side in full mode"
    )
    args = parser.parse_args(argv)
    try:
        messages, orderbook = read_lobster(args.message_csv, args.orderbook_csv)
        result = replay(messages, orderbook, args.mode, args.capacity)
    except (LobsterFormatError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.counts()))
    else:
        for key, value in result.counts().items():
            print(f"{key}: {value}")
        if result.overflow_orders:
            print(f"overflow: {result.overflow_orders} orders did not fit (raise --capacity)")
        if args.mode == "full" and result.first_disagreement is not None:
            print(format_disagreement(result.first_disagreement))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
