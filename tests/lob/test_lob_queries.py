"""Book queries against hand-computed values."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from serl_jax.lob.book import BUY, SELL, empty_book, limit_order
from serl_jax.lob.queries import (
    best_ask,
    best_bid,
    mid_price,
    order_imbalance,
    own_orders,
    spread,
    state_vector,
    top_levels,
)


def _book():
    book = empty_book(6)
    orders = [
        (SELL, 102, 5, 1, 7),
        (SELL, 101, 3, 2, 8),
        (SELL, 101, 4, 3, 7),
        (BUY, 99, 6, 4, 8),
        (BUY, 98, 2, 5, 7),
        (BUY, 99, 1, 6, 7),
    ]
    for side, price, qty, oid, owner in orders:
        book, _ = limit_order(book, side, price, qty, oid, owner)
    return book


def test_quotes_and_levels():
    book = _book()
    assert int(best_bid(book)) == 99 and int(best_ask(book)) == 101
    assert float(mid_price(book)) == 100.0
    assert float(spread(book)) == 2.0
    levels = top_levels(book, 3)
    assert levels.ask_price.tolist() == [101, 102, 0]
    assert levels.ask_size.tolist() == [7, 5, 0]
    assert levels.bid_price.tolist() == [99, 98, 0]
    assert levels.bid_size.tolist() == [7, 2, 0]
    # bids 9 vs asks 12 over two levels; only the best level: 7 vs 7.
    assert float(order_imbalance(book, 2)) == pytest.approx((9 - 12) / 21)
    assert float(order_imbalance(book, 1)) == 0.0


def test_one_sided_book_quotes_are_nan():
    book, _ = limit_order(empty_book(2), BUY, 50, 1, 1, 0)
    assert math.isnan(float(mid_price(book))) and math.isnan(float(spread(book)))
    assert float(order_imbalance(book, 1)) == 1.0
    vec = state_vector(book, 2)
    assert np.isfinite(np.asarray(vec)).all()
    assert np.asarray(vec)[:4].tolist() == [0, 0, 0, 0]


def test_own_orders_queue_position():
    own = own_orders(_book(), 7)
    rows = sorted(
        (int(s), int(p), int(q), int(i), int(a), int(n))
        for m, s, p, q, i, a, n in zip(
            *(
                np.asarray(x)
                for x in (
                    own.mask,
                    own.side,
                    own.price,
                    own.qty,
                    own.order_id,
                    own.shares_ahead,
                    own.orders_ahead,
                )
            ),
            strict=True,
        )
        if m
    )
    # owner 7: ask id 3 behind id 2 (3 shares) at 101; ask id 1 first at 102;
    # bid id 6 behind id 4 (6 shares) at 99; bid id 5 first at 98.
    assert rows == [
        (SELL, 101, 4, 3, 3, 1),
        (SELL, 102, 5, 1, 0, 0),
        (BUY, 98, 2, 5, 0, 0),
        (BUY, 99, 1, 6, 6, 1),
    ]


def test_state_vector_layout_and_vmap():
    vec = np.asarray(state_vector(_book(), 2))
    assert vec.shape == (10,)
    np.testing.assert_allclose(vec[0:2], [1 / 100, 2 / 100])  # asks 101, 102 vs mid 100
    np.testing.assert_allclose(vec[2:4], [1 / 100, 2 / 100])  # bids 99, 98
    np.testing.assert_allclose(vec[4:6], [7 / 21, 5 / 21])
    np.testing.assert_allclose(vec[6:8], [7 / 21, 2 / 21])
    np.testing.assert_allclose(vec[8:], [2 / 100, (9 - 12) / 21], rtol=1e-6)
    books = jax.tree.map(lambda x: jnp.stack([x, x]), _book())
    batch = jax.jit(jax.vmap(lambda b: state_vector(b, 2)))(books)
    np.testing.assert_allclose(np.asarray(batch), np.stack([vec, vec]), rtol=1e-6)
