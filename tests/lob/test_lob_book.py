"""The JAX book against hand-computed cases and, on random streams, the pure-Python reference."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from serl_jax.lob.batched import apply_messages_batched
from serl_jax.lob.book import (
    BUY,
    CANCEL,
    EXECUTE,
    LIMIT,
    MARKET,
    SELL,
    UNKNOWN_ORDER_ID,
    Message,
    apply_message,
    apply_messages,
    book_from_levels,
    cancel_order,
    empty_book,
    limit_order,
    market_order,
)
from serl_jax.lob.reference import ReferenceBook

FIELDS = ("price", "qty", "order_id", "owner", "arrival")


def side_rows(side) -> list[tuple[int, ...]]:
    """Live orders of a JAX side as (price, qty, id, owner, arrival) tuples, slot order."""
    arr = np.stack([np.asarray(getattr(side, f)) for f in FIELDS], axis=-1)
    return [tuple(int(v) for v in r) for r in arr if r[1] > 0]


def ref_rows(ref: ReferenceBook, side: int) -> list[tuple[int, ...]]:
    return [(o.price, o.qty, o.order_id, o.owner, o.arrival) for o in ref.orders(side)]


def trade_rows(trades) -> list[tuple[int, ...]]:
    names = ("price", "qty", "aggressor_owner", "passive_owner", "passive_order_id")
    names += ("aggressor_side",)
    arr = np.stack([np.asarray(getattr(trades, f)) for f in names], axis=-1)
    return [tuple(int(v) for v in r) for r in arr if r[1] > 0]


def ref_trade_rows(trades, max_trades) -> list[tuple[int, ...]]:
    return [
        (t.price, t.qty, t.aggressor_owner, t.passive_owner, t.passive_order_id, t.aggressor_side)
        for t in trades[:max_trades]
    ]


COUNTERS = (
    "next_arrival",
    "submitted_qty",
    "filled_qty",
    "cancelled_qty",
    "overflow_qty",
    "overflow_orders",
    "dropped_trades",
    "missed_cancels",
)


def check_invariants(book) -> None:
    """Sorted, compact, positive, uncrossed, and conserving shares."""
    for side, sign in ((book.bids, BUY), (book.asks, SELL)):
        qty = np.asarray(side.qty)
        n = int((qty > 0).sum())
        assert (qty[:n] > 0).all(), "live orders must be a prefix with positive quantity"
        for f in FIELDS:
            assert (np.asarray(getattr(side, f))[n:] == 0).all(), f"empty slots must be zero ({f})"
        key = np.stack([-sign * np.asarray(side.price)[:n], np.asarray(side.arrival)[:n]], 1)
        assert all(tuple(key[i]) < tuple(key[i + 1]) for i in range(n - 1)), "priority order"
    if book.bids.qty[0] > 0 and book.asks.qty[0] > 0:
        assert int(book.bids.price[0]) < int(book.asks.price[0]), "crossed book at rest"
    resting = int(book.bids.qty.sum() + book.asks.qty.sum())
    total = resting + int(book.filled_qty) + int(book.cancelled_qty) + int(book.overflow_qty)
    assert int(book.submitted_qty) == total, "conservation"


MESSAGE_FIELDS = ("kind", "side", "price", "qty", "order_id", "owner")


def msg(*values) -> Message:
    """One message (or a stream, if the values are sequences) in MESSAGE_FIELDS order."""
    return Message(
        **{f: jnp.asarray(v, jnp.int32) for f, v in zip(MESSAGE_FIELDS, values, strict=True)}
    )


# --- hand-computed cases --------------------------------------------------------------


@pytest.mark.parametrize("matching", ["sweep", "loop"])
def test_multi_level_sweep_fifo_and_partial_fill(matching):
    book = empty_book(8)
    book, _ = limit_order(book, SELL, 101, 5, 1, 10)
    book, _ = limit_order(book, SELL, 100, 3, 2, 11)
    book, _ = limit_order(book, SELL, 100, 4, 3, 12)
    book, _ = limit_order(book, SELL, 103, 9, 4, 13)
    # buy 10 up to 101: 3 @100 (id 2), 4 @100 (id 3), 3 of 5 @101 (id 1); nothing rests.
    book, trades = limit_order(book, BUY, 101, 10, 5, 99, max_trades=4, matching=matching)
    assert trade_rows(trades) == [
        (100, 3, 99, 11, 2, BUY),
        (100, 4, 99, 12, 3, BUY),
        (101, 3, 99, 10, 1, BUY),
    ]
    assert side_rows(book.asks) == [(101, 2, 1, 10, 0), (103, 9, 4, 13, 3)]
    assert side_rows(book.bids) == []
    # buy 20 up to 102: 2 @101, then 18 rest at 102.
    book, trades = limit_order(book, BUY, 102, 20, 6, 98, matching=matching)
    assert trade_rows(trades) == [(101, 2, 98, 10, 1, BUY)]
    assert side_rows(book.bids) == [(102, 18, 6, 98, 5)]
    assert int(book.filled_qty) == 2 * 12
    check_invariants(book)


def test_partial_cancel_keeps_queue_place_full_cancel_deletes():
    book = empty_book(4)
    for oid in (1, 2, 3):
        book, _ = limit_order(book, BUY, 50, 10, oid, oid)
    book = cancel_order(book, BUY, 1, 4)
    assert side_rows(book.bids)[0] == (50, 6, 1, 1, 0)
    book = cancel_order(book, BUY, 2, 100)
    assert [r[2] for r in side_rows(book.bids)] == [1, 3]
    book, trades = market_order(book, SELL, 7, 5)
    assert trade_rows(trades) == [(50, 6, 5, 1, 1, SELL), (50, 1, 5, 3, 3, SELL)]
    book = cancel_order(book, BUY, 42, 1)
    assert int(book.missed_cancels) == 1
    assert int(book.cancelled_qty) == 4 + 10
    check_invariants(book)


@pytest.mark.parametrize("matching", ["sweep", "loop"])
def test_side_full_and_trade_buffer_full_are_counted(matching):
    book = empty_book(2)
    book, _ = limit_order(book, SELL, 10, 1, 1, 0)
    book, _ = limit_order(book, SELL, 11, 1, 2, 0)
    book, _ = limit_order(book, SELL, 9, 5, 3, 0)  # side full: rejected, counted
    assert int(book.overflow_orders) == 1 and int(book.overflow_qty) == 5
    assert [r[0] for r in side_rows(book.asks)] == [10, 11]
    book, trades = market_order(book, BUY, 5, 7, max_trades=1, matching=matching)
    assert trade_rows(trades) == [(10, 1, 7, 0, 1, BUY)]
    assert int(book.dropped_trades) == 1
    assert int(book.cancelled_qty) == 3  # unfilled market shares
    assert side_rows(book.asks) == []
    check_invariants(book)


def test_execute_and_cancel_fall_back_to_unknown_level_order():
    book = book_from_levels(
        jnp.array([101, 102]), jnp.array([30, 40]), jnp.array([99, 0]), jnp.array([20, 0]), 4
    )
    assert side_rows(book.asks) == [(101, 30, -1, 0, 0), (102, 40, -1, 0, 0)]
    book, trades = apply_message(book, msg(EXECUTE, SELL, 101, 12, 777, 3))
    assert trade_rows(trades) == [(101, 12, 3, 0, UNKNOWN_ORDER_ID, BUY)]
    book, _ = apply_message(book, msg(CANCEL, SELL, 102, 40, 778, 0))
    assert side_rows(book.asks) == [(101, 18, -1, 0, 0)]
    book, _ = apply_message(book, msg(CANCEL, BUY, 98, 5, 779, 0))  # no such level
    assert int(book.missed_cancels) == 1
    check_invariants(book)


def test_bad_matching_option_raises():
    with pytest.raises(ValueError, match="matching"):
        limit_order(empty_book(2), BUY, 1, 1, 1, 0, matching="heap")


# --- differential tests against the reference ---------------------------------------

CAPACITY = 4
MAX_TRADES = 3
STREAM = 24


@st.composite
def streams(draw):
    n_ask = draw(st.integers(0, 3))
    n_bid = draw(st.integers(0, 3))
    asks = [(103 + i, draw(st.integers(1, 9))) for i in range(n_ask)]
    bids = [(100 - i, draw(st.integers(1, 9))) for i in range(n_bid)]
    rows = []
    next_id = 1
    placed = []  # (side, id, price)
    for _ in range(draw(st.integers(1, STREAM))):
        kind = draw(st.sampled_from([LIMIT, LIMIT, LIMIT, MARKET, CANCEL, EXECUTE, 0]))
        side = draw(st.sampled_from([BUY, SELL]))
        qty = draw(st.integers(0, 30 if kind == MARKET else 12))
        owner = draw(st.integers(0, 3))
        if kind == LIMIT:
            price = draw(st.integers(97, 106))
            rows.append((kind, side, price, qty, next_id, owner))
            placed.append((side, next_id, price))
            next_id += 1
        elif kind in (CANCEL, EXECUTE):
            if placed and draw(st.booleans()):
                side, oid, price = draw(st.sampled_from(placed))
            else:  # an id never placed: falls back to a seeded level, or misses
                oid, price = 10_000 + next_id, draw(st.integers(97, 106))
            rows.append((kind, side, price, qty, oid, owner))
        else:
            rows.append((kind, side, 0, qty, 0, owner))
    return asks, bids, rows


def _pad(levels):
    levels = levels + [(0, 0)] * (3 - len(levels))
    return jnp.array([p for p, _ in levels]), jnp.array([s for _, s in levels])


def _scan_all(matching):
    def run(book, msgs):
        def step(b, m):
            b, t = apply_message(b, m, max_trades=MAX_TRADES, matching=matching)
            return b, (b, t)

        return jax.lax.scan(step, book, msgs)[1]

    return jax.jit(run)


_RUNNERS = {m: _scan_all(m) for m in ("sweep", "loop")}


@pytest.mark.parametrize("matching", ["sweep", "loop"])
@settings(max_examples=60, deadline=None)
@given(stream=streams())
def test_differential_against_reference(matching, stream):
    asks, bids, rows = stream
    ap, asz = _pad(asks)
    bp, bsz = _pad(bids)
    book = book_from_levels(ap, asz, bp, bsz, CAPACITY)
    ref = ReferenceBook.from_levels(asks, bids, CAPACITY, MAX_TRADES)
    padded = rows + [(0, BUY, 0, 0, 0, 0)] * (STREAM - len(rows))
    cols = np.array(padded, dtype=np.int32).T
    books, trades = _RUNNERS[matching](book, msg(*cols))
    for i, row in enumerate(rows):
        b = jax.tree.map(lambda x, i=i: x[i], books)
        t = jax.tree.map(lambda x, i=i: x[i], trades)
        ref_trades = ref.apply(*row)
        assert trade_rows(t) == ref_trade_rows(ref_trades, MAX_TRADES), f"trades at {i}: {row}"
        assert side_rows(b.bids) == ref_rows(ref, BUY), f"bids after {i}: {row}"
        assert side_rows(b.asks) == ref_rows(ref, SELL), f"asks after {i}: {row}"
        for name in COUNTERS:
            assert int(getattr(b, name)) == getattr(ref, name), f"{name} after {i}: {row}"
        check_invariants(b)
        assert ref.submitted_qty == (
            ref.resting_qty() + ref.filled_qty + ref.cancelled_qty + ref.overflow_qty
        )


def test_apply_messages_matches_single_steps():
    rows = [
        (LIMIT, SELL, 101, 5, 1, 1),
        (LIMIT, SELL, 102, 5, 2, 1),
        (MARKET, BUY, 0, 7, 0, 2),
        (LIMIT, BUY, 100, 4, 3, 2),
        (CANCEL, BUY, 0, 1, 3, 0),
    ]
    cols = np.array(rows, dtype=np.int32).T
    final, trades = jax.jit(apply_messages)(empty_book(4), msg(*cols))
    assert trades.qty.shape == (5, 8)
    assert trade_rows(jax.tree.map(lambda x: x[2], trades)) == [
        (101, 5, 2, 1, 1, BUY),
        (102, 2, 2, 1, 2, BUY),
    ]
    assert side_rows(final.asks) == [(102, 3, 2, 1, 1)]
    assert side_rows(final.bids) == [(100, 3, 3, 2, 3)]
    check_invariants(final)


def test_vmap_over_books_matches_per_book_results():
    books = jax.vmap(lambda _: empty_book(4))(jnp.arange(3))
    prices = jnp.array([100, 101, 102])
    books, _ = jax.vmap(lambda b, p: limit_order(b, SELL, p, 5, 1, 0))(books, prices)
    books, trades = jax.vmap(lambda b: market_order(b, BUY, 2, 9))(books)
    assert np.asarray(trades.price[:, 0]).tolist() == [100, 101, 102]
    assert np.asarray(books.asks.qty[:, 0]).tolist() == [3, 3, 3]


# --- the batched engine: same books and trades as vmap of the one-book step -------------


def _stream_batch(batch):
    books, cols = [], []
    for asks, bids, rows in batch:
        ap, asz = _pad(asks)
        bp, bsz = _pad(bids)
        books.append(book_from_levels(ap, asz, bp, bsz, CAPACITY))
        padded = rows + [(0, BUY, 0, 0, 0, 0)] * (STREAM - len(rows))
        cols.append(np.array(padded, dtype=np.int32).T)
    books = jax.tree.map(lambda *x: jnp.stack(x), *books)
    return books, msg(*np.stack(cols, 1))


_VMAPPED = jax.jit(jax.vmap(lambda b, m: apply_messages(b, m, max_trades=MAX_TRADES)))
_BATCHED = jax.jit(lambda b, m: apply_messages_batched(b, m, max_trades=MAX_TRADES, block=2))


@settings(max_examples=40, deadline=None)
@given(batch=st.lists(streams(), min_size=3, max_size=3))
def test_batched_engine_matches_vmap_and_reference(batch):
    books, msgs = _stream_batch(batch)  # 3 books in blocks of 2: one padded block
    want = _VMAPPED(books, msgs)
    got = _BATCHED(books, msgs)
    jax.tree.map(np.testing.assert_array_equal, got, want)
    final = got[0]
    for b, (asks, bids, rows) in enumerate(batch):
        ref = ReferenceBook.from_levels(asks, bids, CAPACITY, MAX_TRADES)
        for row in rows + [(0, BUY, 0, 0, 0, 0)] * (STREAM - len(rows)):
            ref.apply(*row)
        one = jax.tree.map(lambda x, b=b: x[b], final)
        assert side_rows(one.bids) == ref_rows(ref, BUY)
        assert side_rows(one.asks) == ref_rows(ref, SELL)
        for name in COUNTERS:
            assert int(getattr(one, name)) == getattr(ref, name), name
        check_invariants(one)


@pytest.mark.parametrize(("capacity", "max_trades"), [(1, 1), (2, 5), (3, 2)])
def test_batched_engine_small_capacities_and_wide_trade_buffers(capacity, max_trades):
    rows = [
        (LIMIT, SELL, 101, 5, 1, 1),
        (LIMIT, SELL, 102, 5, 2, 1),
        (LIMIT, SELL, 100, 5, 3, 1),
        (MARKET, BUY, 0, 30, 0, 2),
        (LIMIT, BUY, 99, 4, 4, 2),
        (EXECUTE, BUY, 99, 1, 4, 5),
        (LIMIT, BUY, 99, 4, 5, 3),
        (CANCEL, BUY, 0, 9, 4, 0),
        (LIMIT, SELL, 98, 9, 6, 1),
    ]
    cols = np.array(rows, dtype=np.int32).T
    books = jax.vmap(lambda _: empty_book(capacity))(jnp.arange(2))
    msgs = msg(*np.stack([cols, cols[:, ::-1]], 1))
    want = jax.vmap(lambda b, m: apply_messages(b, m, max_trades=max_trades))(books, msgs)
    got = apply_messages_batched(books, msgs, max_trades=max_trades, block=1)
    jax.tree.map(np.testing.assert_array_equal, got, want)
    assert got[1].qty.shape == (2, len(rows), max_trades)


def test_batched_engine_rejects_bad_options():
    books = jax.vmap(lambda _: empty_book(2))(jnp.arange(1))
    msgs = msg(*np.zeros((6, 1, 1), np.int32))
    with pytest.raises(ValueError, match="max_trades"):
        apply_messages_batched(books, msgs, max_trades=0)
    with pytest.raises(ValueError, match="block"):
        apply_messages_batched(books, msgs, block=0)
