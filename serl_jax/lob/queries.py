"""Read-only queries on a :class:`~serl_jax.lob.book.Book`: quotes, depth, imbalance, own orders.

All functions are pure JAX on one book (``vmap`` them for many). Prices are integer ticks,
sizes are shares.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from serl_jax.lob.book import BUY, SELL, Book, BookSide


@struct.dataclass
class Levels:
    """Top-of-book depth by price level, best first; absent levels have price and size 0.

    Attributes:
        ask_price: ``int32[n]`` ask level prices in ticks (ascending).
        ask_size: ``int32[n]`` shares at each ask level.
        bid_price: ``int32[n]`` bid level prices in ticks (descending).
        bid_size: ``int32[n]`` shares at each bid level.
    """

    ask_price: jax.Array
    ask_size: jax.Array
    bid_price: jax.Array
    bid_size: jax.Array


@struct.dataclass
class OwnOrders:
    """One owner's resting orders; rows follow ``concat(bids slots, asks slots)``, length 2C.

    Attributes:
        mask: ``bool[2C]`` True where the row is a live order of the owner.
        side: ``int32[2C]`` ``BUY`` for the first C rows, ``SELL`` for the rest.
        price: ``int32[2C]`` price in ticks.
        qty: ``int32[2C]`` remaining shares.
        order_id: ``int32[2C]`` order id.
        shares_ahead: ``int32[2C]`` shares at the same price with higher time priority.
        orders_ahead: ``int32[2C]`` number of such orders.
    """

    mask: jax.Array
    side: jax.Array
    price: jax.Array
    qty: jax.Array
    order_id: jax.Array
    shares_ahead: jax.Array
    orders_ahead: jax.Array


def best_bid(book: Book) -> jax.Array:
    """Highest bid price, ``int32[]`` ticks; 0 when there are no bids."""
    return book.bids.price[0]


def best_ask(book: Book) -> jax.Array:
    """Lowest ask price, ``int32[]`` ticks; 0 when there are no asks."""
    return book.asks.price[0]


def _two_sided(book: Book) -> jax.Array:
    return (book.bids.qty[0] > 0) & (book.asks.qty[0] > 0)


def mid_price(book: Book) -> jax.Array:
    """``float32[]`` (best bid + best ask) / 2 in ticks; NaN unless both sides have orders."""
    mid = (book.bids.price[0].astype(jnp.float32) + book.asks.price[0]) / 2
    return jnp.where(_two_sided(book), mid, jnp.nan)


def spread(book: Book) -> jax.Array:
    """``float32[]`` best ask - best bid in ticks; NaN unless both sides have orders."""
    gap = (book.asks.price[0] - book.bids.price[0]).astype(jnp.float32)
    return jnp.where(_two_sided(book), gap, jnp.nan)


def _side_levels(side: BookSide, n: int) -> tuple[jax.Array, jax.Array]:
    live = side.qty > 0
    prev = jnp.concatenate([jnp.full((1,), -1, side.price.dtype), side.price[:-1]])
    starts = live & (side.price != prev)
    level = jnp.cumsum(starts) - 1
    onehot = live[:, None] & (level[:, None] == jnp.arange(n)[None, :])
    sizes = jnp.where(onehot, side.qty[:, None], 0).sum(0)
    prices = jnp.where(onehot & starts[:, None], side.price[:, None], 0).sum(0)
    return prices.astype(jnp.int32), sizes.astype(jnp.int32)


def top_levels(book: Book, n: int) -> Levels:
    """Prices and total sizes of the best ``n`` occupied price levels per side.

    Args:
        book: the book.
        n: static number of levels.

    Returns:
        :class:`Levels` with ``int32[n]`` fields (absent levels are 0).
    """
    ask_price, ask_size = _side_levels(book.asks, n)
    bid_price, bid_size = _side_levels(book.bids, n)
    return Levels(ask_price=ask_price, ask_size=ask_size, bid_price=bid_price, bid_size=bid_size)


def order_imbalance(book: Book, n: int) -> jax.Array:
    """``float32[]`` (bid shares - ask shares) / (bid + ask shares) over the top ``n`` levels.

    In [-1, 1]; 0 when both sides are empty.
    """
    levels = top_levels(book, n)
    bid = levels.bid_size.sum().astype(jnp.float32)
    ask = levels.ask_size.sum().astype(jnp.float32)
    total = bid + ask
    return jnp.where(total > 0, (bid - ask) / jnp.maximum(total, 1), 0.0)


def _queue_ahead(side: BookSide) -> tuple[jax.Array, jax.Array]:
    same_level = (side.price[None, :] == side.price[:, None]) & (side.qty[None, :] > 0)
    ahead = same_level & (
        jnp.arange(side.qty.shape[0])[None, :] < jnp.arange(side.qty.shape[0])[:, None]
    )
    shares = jnp.where(ahead, side.qty[None, :], 0).sum(1)
    return shares.astype(jnp.int32), ahead.sum(1).astype(jnp.int32)


def own_orders(book: Book, owner) -> OwnOrders:
    """The resting orders of ``owner`` (``int32[]``) with their queue positions.

    Returns:
        :class:`OwnOrders` with ``2 * capacity`` rows (bid slots, then ask slots).
    """
    capacity = book.capacity
    bid_shares, bid_orders = _queue_ahead(book.bids)
    ask_shares, ask_orders = _queue_ahead(book.asks)

    def both(f):
        return jnp.concatenate([getattr(book.bids, f), getattr(book.asks, f)])

    qty = both("qty")
    return OwnOrders(
        mask=(qty > 0) & (both("owner") == owner),
        side=jnp.concatenate(
            [jnp.full((capacity,), BUY, jnp.int32), jnp.full((capacity,), SELL, jnp.int32)]
        ),
        price=both("price"),
        qty=qty,
        order_id=both("order_id"),
        shares_ahead=jnp.concatenate([bid_shares, ask_shares]),
        orders_ahead=jnp.concatenate([bid_orders, ask_orders]),
    )


def state_vector(book: Book, depth_levels: int) -> jax.Array:
    """Scale-free observation of the book for RL, ``float32[4 * depth_levels + 2]``.

    Layout: for each of the ``depth_levels`` best levels, ask distance from the mid and bid
    distance from the mid as fractions of the mid price (``(ask - mid) / mid`` >= 0,
    ``(mid - bid) / mid`` >= 0); then ask sizes and bid sizes as fractions of all shares
    shown in those levels; then the spread as a fraction of the mid and the order
    imbalance (see :func:`order_imbalance`). Absent levels contribute 0; with a one-sided
    or empty book the price features are 0.

    Args:
        book: the book.
        depth_levels: static number of levels per side.
    """
    levels = top_levels(book, depth_levels)
    mid = mid_price(book)
    valid = jnp.isfinite(mid)
    safe_mid = jnp.where(valid, mid, 1.0)
    ask_dist = jnp.where(levels.ask_size > 0, (levels.ask_price - safe_mid) / safe_mid, 0.0)
    bid_dist = jnp.where(levels.bid_size > 0, (safe_mid - levels.bid_price) / safe_mid, 0.0)
    total = (levels.ask_size.sum() + levels.bid_size.sum()).astype(jnp.float32)
    scale = jnp.maximum(total, 1.0)
    rel_spread = jnp.where(valid, spread(book) / safe_mid, 0.0)
    return jnp.concatenate(
        [
            jnp.where(valid, ask_dist, 0.0),
            jnp.where(valid, bid_dist, 0.0),
            levels.ask_size / scale,
            levels.bid_size / scale,
            jnp.stack([rel_spread, order_imbalance(book, depth_levels)]),
        ]
    ).astype(jnp.float32)
