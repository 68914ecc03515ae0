"""benchmarks/bench_lobster_refill.py: refill times after aggressive orders, on a hand-made
LOBSTER day of two levels."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

from serl_jax.lob.lobster import LobsterMessages, LobsterOrderbook

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_lobster_refill  # noqa: E402


def _day():
    """Asks 101 (100 sh) and 102 (50 sh), bid 99 (100 sh), 1/10000 $ units.

    t=1: a buy walks the ask (executes 100 at 101 and 10 at 102, one timestamp);
    t=3: a sell limit of 30 at 101 (best ask back at 101, 30 < half of 100);
    t=6: another 40 at 101 (70 >= 50: best price back with half its size);
    t=8: a sell executes 20 at the bid 99 without clearing it (not counted).
    """
    rows = [  # time, type, id, size, price, direction; book after: ask p/s x2, bid p/s x2
        (0.0, 1, 1, 100, 101, -1, (101, 100, 102, 50), (99, 100, 98, 10)),
        (1.0, 4, 1, 100, 101, -1, (102, 50, 0, 0), (99, 100, 98, 10)),
        (1.0, 4, 2, 10, 102, -1, (102, 40, 0, 0), (99, 100, 98, 10)),
        (3.0, 1, 3, 30, 101, -1, (101, 30, 102, 40), (99, 100, 98, 10)),
        (6.0, 1, 4, 40, 101, -1, (101, 70, 102, 40), (99, 100, 98, 10)),
        (8.0, 4, 5, 20, 99, 1, (101, 70, 102, 40), (99, 80, 98, 10)),
    ]
    col = lambda k: np.asarray([r[k] for r in rows])  # noqa: E731
    messages = LobsterMessages(
        time=col(0).astype(np.float64), event_type=col(1).astype(np.int32),
        order_id=col(2).astype(np.int32), size=col(3).astype(np.int32),
        price=col(4).astype(np.int32), direction=col(5).astype(np.int32),
    )  # fmt: skip
    ask = np.asarray([r[6] for r in rows], np.int32)
    bid = np.asarray([r[7] for r in rows], np.int32)
    book = LobsterOrderbook(
        ask_price=ask[:, 0::2], ask_size=ask[:, 1::2], bid_price=bid[:, 0::2], bid_size=bid[:, 1::2]
    )
    return messages, book


def test_aggressive_orders_group_one_timestamp_and_side():
    messages, _ = _day()
    assert bench_lobster_refill.aggressive_orders(messages) == [(1, 2), (5, 5)]


def test_refill_times_by_hand():
    messages, book = _day()
    stats = bench_lobster_refill.refill_times(messages, book)
    # one order clears the best level (the bid hit at t=8 keeps its price); it walks
    assert stats["walks"].tolist() == [True]
    assert stats["spread"].tolist() == [2.0]  # spread 2 before; 3 after; 2 again at t=3
    assert stats["best"].tolist() == [5.0]  # 101 with 70 >= 50 shares at t=6
    assert stats["top1"].tolist() == [5.0]  # top level: 40 at t=1, 30 at t=3, 70 at t=6
    assert stats["top3"].tolist() == [5.0]  # 150 before; 40, 70, then 110 >= 75 at t=6


def test_a_refill_that_never_comes_is_censored():
    messages, book = _day()
    cut = slice(0, 4)  # the day ends before the ask has half its size back
    messages = LobsterMessages(**{k: v[cut] for k, v in vars(messages).items()})
    book = LobsterOrderbook(**{k: v[cut] for k, v in vars(book).items()})
    stats = bench_lobster_refill.refill_times(messages, book)
    assert math.isnan(stats["best"][0]) and stats["spread"].tolist() == [2.0]
