"""How fast a real order book refills after aggressive orders, on the LOBSTER samples: what
the order book's ``market.mm_refresh_rungs`` (the market makers' outer rungs refreshed a
round) would be calibrated to, if the data showed it.

For each aggressive order (the executions at one timestamp on one side, LOBSTER event
types 4 and 5; direction -1 hits the ask, +1 the bid), from the order book row before
its first execution:

- ``clears the best level``: the best price on the hit side is worse after the order;
- ``spread back``: seconds until the spread is at most its pre-trade value;
- ``best price back``: seconds until the hit side's best price is at least as good as
  before, with at least half the pre-trade size at that price;
- ``top-k depth back``: seconds until the hit side's first ``k`` levels hold at least half
  their pre-trade shares, whatever their prices.

Quartiles are over the orders that clear the best level (``walk`` other levels: more than
one price executed); an order whose statistic never comes back before the file ends is
counted as censored, not dropped.

Usage (from the repository root)::

    python benchmarks/bench_lobster_refill.py            # the shipped AMZN and AAPL samples
    python benchmarks/bench_lobster_refill.py --files MESSAGE ORDERBOOK [--files ...]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from serl_jax.calibrate import default_lobster
from serl_jax.data import sample_path
from serl_jax.lob.lobster import LobsterMessages, LobsterOrderbook, read_lobster

AAPL = (
    "AAPL_2012-06-21_34200000_57600000_message_10_first999.csv.gz",
    "AAPL_2012-06-21_34200000_57600000_orderbook_10_first999.csv.gz",
)


def aggressive_orders(messages: LobsterMessages) -> list[tuple[int, int]]:
    """``(first, last)`` message rows of each aggressive order: consecutive executions
    (types 4 and 5) with one timestamp and one direction."""
    executed = np.isin(messages.event_type, (4, 5))
    orders, i = [], 0
    while i < len(messages):
        if not executed[i]:
            i += 1
            continue
        j = i
        while (
            j + 1 < len(messages)
            and executed[j + 1]
            and messages.time[j + 1] == messages.time[i]
            and messages.direction[j + 1] == messages.direction[i]
        ):
            j += 1
        orders.append((i, j))
        i = j + 1
    return orders


def _first_time(ok: np.ndarray, times: np.ndarray, start: float) -> float:
    """Seconds from ``start`` to the first ``True`` of ``ok``; NaN if none (censored)."""
    hit = np.flatnonzero(ok)
    return float(times[hit[0]] - start) if hit.size else float("nan")


def refill_times(messages: LobsterMessages, book: LobsterOrderbook) -> dict[str, np.ndarray]:
    """The statistics of the module docstring, one ``float64`` per aggressive order that
    clears the best level (seconds, NaN when censored), and ``walks``: ``bool``, more than
    one price executed."""
    spread = (book.ask_price[:, 0] - book.bid_price[:, 0]).astype(np.float64)
    out: dict[str, list] = {"spread": [], "best": [], "top1": [], "top3": [], "walks": []}
    for first, last in aggressive_orders(messages):
        if first == 0:  # no book before it
            continue
        ask_hit = messages.direction[first] == -1
        price = book.ask_price if ask_hit else book.bid_price
        size = book.ask_size if ask_hit else book.bid_size
        before, after = first - 1, slice(last, None)
        worse = price[last, 0] > price[before, 0] if ask_hit else price[last, 0] < price[before, 0]
        if not worse:
            continue
        times, start = messages.time[after], messages.time[first]
        best, best0 = price[after, 0], price[before, 0]
        better = best < best0 if ask_hit else best > best0
        back = better | ((best == best0) & (size[after, 0] >= 0.5 * size[before, 0]))
        out["spread"].append(_first_time(spread[after] <= spread[before], times, start))
        out["best"].append(_first_time(back, times, start))
        for k in (1, 3):
            depth = size[after, :k].sum(axis=1)
            out[f"top{k}"].append(_first_time(depth >= 0.5 * size[before, :k].sum(), times, start))
        out["walks"].append(len(set(messages.price[first : last + 1].tolist())) > 1)
    return {name: np.asarray(values) for name, values in out.items()}


def describe(name: str, messages: LobsterMessages, book: LobsterOrderbook) -> str:
    """One block of text: the file's span, the orders and each statistic's quartiles."""
    stats = refill_times(messages, book)
    orders = len(aggressive_orders(messages))
    span = messages.time[-1] - messages.time[0]
    lines = [
        f"{name}: {book.levels} level(s), {span:,.0f} s, {orders:,} aggressive orders, "
        f"{stats['walks'].size:,} clear the best level ({int(stats['walks'].sum()):,} walk)"
    ]
    for key, label in (
        ("spread", "spread back"),
        ("best", "best price back (half its size)"),
        ("top1", "top-1 depth back (half)"),
        ("top3", "top-3 depth back (half)"),
    ):
        if key == "top3" and book.levels < 3:
            continue
        values = stats[key]
        done = values[np.isfinite(values)]
        quartiles = np.percentile(done, [25, 50, 75]) if done.size else [np.nan] * 3
        lines.append(
            f"  {label:<34} quartiles {quartiles[0]:8.3f} {quartiles[1]:8.3f} "
            f"{quartiles[2]:8.3f} s  (censored {values.size - done.size})"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--files", nargs=2, action="append", metavar=("MESSAGE", "ORDERBOOK"),
        help="a LOBSTER message and orderbook file (repeatable; default: the samples)",
    )  # fmt: skip
    args = parser.parse_args()
    aapl = tuple(sample_path("lobster") / name for name in AAPL)
    pairs = args.files or [default_lobster(), aapl]
    for message_path, orderbook_path in pairs:
        messages, book = read_lobster(message_path, orderbook_path)
        print(describe(Path(message_path).name.split("_")[0], messages, book))


if __name__ == "__main__":
    main()
