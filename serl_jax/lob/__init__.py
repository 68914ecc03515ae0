"""Vectorized limit order book with price-time priority, verified against LOBSTER.

Modules: :mod:`~serl_jax.lob.book` (state and operations), :mod:`~serl_jax.lob.batched`
(``apply_messages_batched``: the same message semantics for a batch of books, the fast
path for many books and long streams on CPU), :mod:`~serl_jax.lob.engine` (which of the
two the dynamic market runs, ``lob.engine``), :mod:`~serl_jax.lob.queries`
(quotes, depth, own orders, ``state_vector``), :mod:`~serl_jax.lob.lobster` (file readers),
:mod:`~serl_jax.lob.replay` (``python -m serl_jax.lob.replay``), and
:mod:`~serl_jax.lob.reference` (the pure-Python reference book used by the tests).
"""

from serl_jax.lob.batched import apply_messages_batched
from serl_jax.lob.book import (
    BUY,
    CANCEL,
    EXECUTE,
    LIMIT,
    MARKET,
    SELL,
    UNKNOWN_ORDER_ID,
    Book,
    BookSide,
    Message,
    Trades,
    apply_message,
    apply_messages,
    book_from_levels,
    cancel_order,
    empty_book,
    limit_order,
    market_order,
)
from serl_jax.lob.lobster import (
    LobsterFormatError,
    LobsterMessages,
    LobsterOrderbook,
    read_lobster,
    read_messages,
    read_orderbook,
)
from serl_jax.lob.queries import (
    Levels,
    OwnOrders,
    best_ask,
    best_bid,
    mid_price,
    order_imbalance,
    own_orders,
    spread,
    state_vector,
    top_levels,
)

__all__ = [
    "BUY",
    "CANCEL",
    "EXECUTE",
    "LIMIT",
    "MARKET",
    "SELL",
    "UNKNOWN_ORDER_ID",
    "Book",
    "BookSide",
    "Levels",
    "LobsterFormatError",
    "LobsterMessages",
    "LobsterOrderbook",
    "Message",
    "OwnOrders",
    "Trades",
    "apply_message",
    "apply_messages",
    "apply_messages_batched",
    "best_ask",
    "best_bid",
    "book_from_levels",
    "cancel_order",
    "empty_book",
    "limit_order",
    "market_order",
    "mid_price",
    "order_imbalance",
    "own_orders",
    "read_lobster",
    "read_messages",
    "read_orderbook",
    "spread",
    "state_vector",
    "top_levels",
]
