"""Readers for LOBSTER message and orderbook files (plain ``.csv`` or ``.csv.gz``).

Format (LOBSTER_SampleFiles_ReadMe.txt, shipped in ``serl_jax/data/sample/lobster``): no
header row; message files have six columns ``time, type, order_id, size, price,
direction`` (time in seconds after midnight, price in 1/10000 dollar, direction 1 buy /
-1 sell, event types 1-7); orderbook files have ``4 * levels`` columns
``ask_price, ask_size, bid_price, bid_size`` per level, best level first, with absent
levels filled by the dummy prices 9999999999 (ask) / -9999999999 (bid) and size 0.

Every problem raises :class:`LobsterFormatError`, whose one-line message names the file,
the 1-based row and the problem.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from serl_jax.lob.book import BUY, CANCEL, EXECUTE, LIMIT, SELL, Message

EVENT_TYPES = (1, 2, 3, 4, 5, 6, 7)
DUMMY_ASK_PRICE = 9_999_999_999
DUMMY_BID_PRICE = -9_999_999_999
_INT32_MAX = np.iinfo(np.int32).max


class LobsterFormatError(ValueError):
    """A LOBSTER file is malformed, or message and orderbook files do not match."""


@dataclass(frozen=True)
class LobsterMessages:
    """Parsed message file, ``N`` rows.

    Attributes:
        time: ``float64[N]`` seconds after midnight.
        event_type: ``int32[N]`` LOBSTER event type, 1-7.
        order_id: ``int32[N]`` order reference number.
        size: ``int32[N]`` shares.
        price: ``int32[N]`` price in 1/10000 dollar (-1, 0 or 1 for halt messages).
        direction: ``int32[N]`` 1 buy limit order, -1 sell limit order.
    """

    time: np.ndarray
    event_type: np.ndarray
    order_id: np.ndarray
    size: np.ndarray
    price: np.ndarray
    direction: np.ndarray

    def __len__(self) -> int:
        return len(self.time)

    def to_book_messages(self) -> Message:
        """Book messages (``int32[N]`` fields, owner 0) with LOBSTER's meaning.

        Type 1 -> ``LIMIT``; types 2 and 3 -> ``CANCEL`` of ``size`` shares of the order on
        the message's side (falling back to the unknown-identity order at its price);
        type 4 -> ``EXECUTE`` of the visible resting order; types 5 (hidden execution),
        6 (cross trade) and 7 (halt) leave the visible book unchanged -> no-op (kind 0).
        """
        t = self.event_type
        kind = np.select([t == 1, (t == 2) | (t == 3), t == 4], [LIMIT, CANCEL, EXECUTE], 0).astype(
            np.int32
        )
        return Message(
            kind=kind,
            side=self.direction.astype(np.int32),
            price=self.price,
            qty=self.size,
            order_id=self.order_id,
            owner=np.zeros_like(self.size),
        )


@dataclass(frozen=True)
class LobsterOrderbook:
    """Parsed orderbook file, ``N`` rows of ``L`` levels; absent levels are price 0, size 0.

    Attributes:
        ask_price: ``int32[N, L]`` ask prices in 1/10000 dollar, best first.
        ask_size: ``int32[N, L]`` shares per ask level.
        bid_price: ``int32[N, L]`` bid prices, best first.
        bid_size: ``int32[N, L]`` shares per bid level.
    """

    ask_price: np.ndarray
    ask_size: np.ndarray
    bid_price: np.ndarray
    bid_size: np.ndarray

    def __len__(self) -> int:
        return self.ask_price.shape[0]

    @property
    def levels(self) -> int:
        """Number of levels per side."""
        return self.ask_price.shape[1]


def _fail(path, row: int | None, problem: str):
    where = f"{Path(path).name}" + (f", row {row}" if row is not None else "")
    raise LobsterFormatError(f"{where}: {problem}")


def _read_numeric(path, n_cols_check) -> np.ndarray:
    """Read a header-less CSV into float64 ``[rows, cols]``, with row-level errors."""
    path = Path(path)
    if not path.is_file():
        _fail(path, None, "file not found")
    try:
        frame = pd.read_csv(
            path, header=None, dtype=str, keep_default_na=False, skip_blank_lines=False
        )
    except pd.errors.EmptyDataError:
        _fail(path, None, "file is empty")
    except pd.errors.ParserError as err:
        match = re.search(r"line (\d+), saw (\d+)", str(err))
        if match:
            _fail(
                path,
                int(match.group(1)),
                f"expected a fixed number of columns, saw {match.group(2)}",
            )
        _fail(path, None, f"cannot parse CSV ({err})".replace("\n", " "))
    except (OSError, UnicodeDecodeError, EOFError) as err:
        _fail(path, None, f"cannot read file ({err})")
    n_cols_check(frame.shape[1])
    values = frame.apply(lambda col: pd.to_numeric(col.str.strip(), errors="coerce"))
    data = values.to_numpy(dtype=np.float64)
    bad = ~np.isfinite(data)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        text = frame.iat[row, col]
        if not isinstance(text, str) or not text.strip():
            _fail(path, int(row) + 1, f"column {col + 1} is missing")
        _fail(path, int(row) + 1, f"column {col + 1} is not a number ({text!r})")
    return data


def _as_int32(path, data: np.ndarray, what: str) -> np.ndarray:
    bad = (data != np.round(data)) | (np.abs(data) > _INT32_MAX)
    if bad.any():
        row = int(np.argwhere(bad)[0][0])
        _fail(path, row + 1, f"{what} is not an integer in the int32 range")
    return data.astype(np.int32)


def read_messages(path) -> LobsterMessages:
    """Read a LOBSTER message file.

    Args:
        path: ``.csv`` or ``.csv.gz`` file.

    Returns:
        :class:`LobsterMessages`.

    Raises:
        LobsterFormatError: missing/empty file, wrong column count, non-numeric fields,
            unknown event type, direction other than +-1, negative size, negative price
            in an order event, decreasing time, or values outside int32.
    """

    def six(n):
        if n != 6:
            _fail(path, 1, f"a message file has 6 columns, found {n}")

    data = _read_numeric(path, six)
    event_type = _as_int32(path, data[:, 1], "event type")
    bad = ~np.isin(event_type, EVENT_TYPES)
    if bad.any():
        row = int(np.argmax(bad))
        _fail(path, row + 1, f"unknown event type {event_type[row]} (expected 1-7)")
    direction = _as_int32(path, data[:, 5], "direction")
    bad = (direction != BUY) & (direction != SELL)
    if bad.any():
        row = int(np.argmax(bad))
        _fail(path, row + 1, f"direction must be 1 or -1, got {direction[row]}")
    size = _as_int32(path, data[:, 3], "size")
    if (size < 0).any():
        _fail(path, int(np.argmax(size < 0)) + 1, "negative size")
    price = _as_int32(path, data[:, 4], "price")
    bad = (event_type != 7) & (price <= 0)
    if bad.any():
        _fail(path, int(np.argmax(bad)) + 1, f"non-positive price {price[np.argmax(bad)]}")
    time = data[:, 0]
    back = np.diff(time) < 0
    if back.any():
        _fail(path, int(np.argmax(back)) + 2, "time goes backwards")
    return LobsterMessages(
        time=time,
        event_type=event_type,
        order_id=_as_int32(path, data[:, 2], "order id"),
        size=size,
        price=price,
        direction=direction,
    )


def read_orderbook(path) -> LobsterOrderbook:
    """Read a LOBSTER orderbook file of any level count.

    Args:
        path: ``.csv`` or ``.csv.gz`` file.

    Returns:
        :class:`LobsterOrderbook` with dummy levels mapped to price 0, size 0.

    Raises:
        LobsterFormatError: missing/empty file, a column count that is not a positive
            multiple of 4, non-numeric fields, negative sizes, a real level after an
            absent one, levels out of price order, or a crossed row.
    """

    def four(n):
        if n % 4:
            _fail(path, 1, f"an orderbook file has 4 columns per level, found {n}")

    data = _read_numeric(path, four)
    ask_price, ask_size = data[:, 0::4], data[:, 1::4]
    bid_price, bid_size = data[:, 2::4], data[:, 3::4]
    ask_dummy = ask_price == DUMMY_ASK_PRICE
    bid_dummy = bid_price == DUMMY_BID_PRICE
    for name, sizes, dummy in (("ask", ask_size, ask_dummy), ("bid", bid_size, bid_dummy)):
        bad = (sizes < 0) | (dummy & (sizes != 0)) | (~dummy & (sizes == 0))
        if bad.any():
            _fail(
                path,
                int(np.argwhere(bad)[0][0]) + 1,
                f"bad {name} size (a dummy level must have size 0, a real one > 0)",
            )
        gap = dummy[:, :-1] & ~dummy[:, 1:]
        if gap.any():
            _fail(
                path, int(np.argwhere(gap)[0][0]) + 1, f"a real {name} level follows an absent one"
            )
    ask_price = np.where(ask_dummy, 0, ask_price)
    bid_price = np.where(bid_dummy, 0, bid_price)
    real_a, real_b = ~ask_dummy, ~bid_dummy
    bad = (real_a[:, 1:] & (np.diff(ask_price, axis=1) <= 0)).any(1)
    bad |= (real_b[:, 1:] & (np.diff(bid_price, axis=1) >= 0)).any(1)
    bad |= real_a[:, 0] & real_b[:, 0] & (bid_price[:, 0] >= ask_price[:, 0])
    if bad.any():
        _fail(path, int(np.argmax(bad)) + 1, "levels are not in price order or the book is crossed")
    return LobsterOrderbook(
        ask_price=_as_int32(path, ask_price, "ask price"),
        ask_size=_as_int32(path, ask_size, "ask size"),
        bid_price=_as_int32(path, bid_price, "bid price"),
        bid_size=_as_int32(path, bid_size, "bid size"),
    )


def read_lobster(message_path, orderbook_path) -> tuple[LobsterMessages, LobsterOrderbook]:
    """Read a message file and its orderbook file and check they have the same length.

    Raises:
        LobsterFormatError: as :func:`read_messages`/:func:`read_orderbook`, or when the
            row counts differ.
    """
    messages = read_messages(message_path)
    book = read_orderbook(orderbook_path)
    if len(messages) != len(book):
        raise LobsterFormatError(
            f"{Path(message_path).name} has {len(messages)} rows but "
            f"{Path(orderbook_path).name} has {len(book)}: they must match row for row"
        )
    return messages, book
