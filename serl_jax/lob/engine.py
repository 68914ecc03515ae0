"""Which order-book engine runs the dynamic market's books.

Two engines apply message streams with the same semantics (same books, trades and
counters; the tests compare whole market rollouts bit for bit):

* ``"vmap"``: ``jax.vmap`` of the one-book step :func:`serl_jax.lob.book.apply_messages`.
* ``"batched"``: :func:`serl_jax.lob.batched.apply_messages_batched`, a step written for a
  batch with books on the last axis.

On long streams (``benchmarks/bench_lob.py``: 500 messages per call) the batched engine
is 1.9-3x faster than ``vmap`` on 2 CPU cores and 0.06x on an H100. The market calls the
book once per trading round with a short stream (the agents' 2 messages, then 17
background messages per round), and there the batched engine's per-call change of layout
and block loop cost more than they save: ``benchmarks/bench_dynamic.py`` (2026-11-23,
2 CPU cores, jax 0.10.2) measured it at 0.62x, 0.50x, 0.34x and 0.31x the ``vmap``
engine's steps/s at 1, 32, 256 and 1,024 markets. So ``"auto"`` (:func:`resolve_engine`)
is ``vmap`` on every platform measured (CPU, GPU); ``"batched"`` stays selectable and
benchmarked, for other CPUs and for a layout that persists across calls.

:func:`book_messages` is the one call the market simulator makes. It is written for one
book, so the simulator stays a per-market function that callers ``vmap``; with the
batched engine it is a :func:`jax.custom_batching.custom_vmap` whose batching rule hands
the whole batch to :func:`~serl_jax.lob.batched.apply_messages_batched`. Under nested
``vmap`` (seeds x markets) the innermost axis takes the rule and the outer axes batch the
batched engine itself.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from serl_jax.lob.batched import apply_messages_batched
from serl_jax.lob.book import Book, Message, Trades, apply_messages

LOB_ENGINES = ("auto", "vmap", "batched")
#: The engine ``"auto"`` picks per platform, from ``benchmarks/bench_dynamic.py``
#: (CPU, 2026-11-23) and ``benchmarks/bench_lob.py`` on an H100 (GPU, 2026-11-22).
FASTEST_MARKET_ENGINE = {"cpu": "vmap", "gpu": "vmap"}


def resolve_engine(engine: str) -> str:
    """``"vmap"`` or ``"batched"`` for a configured engine name.

    Args:
        engine: ``"auto"`` (the engine measured fastest for the market's short streams on
            the default device's platform: ``vmap`` on CPU and GPU, see the module
            docstring; ``vmap`` where not measured), ``"vmap"`` or ``"batched"``.

    Raises:
        ValueError: for any other name.
    """
    if engine not in LOB_ENGINES:
        raise ValueError(f"lob.engine: expected one of {list(LOB_ENGINES)}, got {engine!r}")
    if engine == "auto":
        return FASTEST_MARKET_ENGINE.get(jax.default_backend(), "vmap")
    return engine


@functools.cache
def _batched_engine(max_trades: int):
    """``apply_messages`` for one book whose ``vmap`` runs the batched engine."""

    @jax.custom_batching.custom_vmap
    def run(book: Book, msgs: Message) -> tuple[Book, Trades]:
        return apply_messages(book, msgs, max_trades=max_trades)

    @run.def_vmap
    def run_batch(axis_size, in_batched, book, msgs):
        book_batched, msgs_batched = in_batched

        def batch(tree, batched):  # an argument vmap did not map is the same for every book
            return jax.tree.map(
                lambda x, b: x if b else jnp.broadcast_to(x, (axis_size, *x.shape)),
                tree,
                batched,
            )

        out = apply_messages_batched(
            batch(book, book_batched), batch(msgs, msgs_batched), max_trades=max_trades
        )
        return out, jax.tree.map(lambda _: True, out)

    return run


def book_messages(
    book: Book, msgs: Message, *, max_trades: int, engine: str = "vmap"
) -> tuple[Book, Trades]:
    """Apply a stream of messages to one book with the given engine (``vmap`` this over
    books; the engines agree on every output).

    Args:
        book: the book (side fields ``int32[capacity]``).
        msgs: a :class:`~serl_jax.lob.book.Message` with ``int32[M]`` fields.
        max_trades: static size of the per-message trade buffer.
        engine: ``"vmap"`` or ``"batched"`` (resolve ``"auto"`` first with
            :func:`resolve_engine`).

    Returns:
        ``(book, trades)`` with trade fields ``int32[M, max_trades]``, as
        :func:`serl_jax.lob.book.apply_messages`.

    Raises:
        ValueError: for an engine other than ``vmap`` or ``batched``.
    """
    if engine == "vmap":
        return apply_messages(book, msgs, max_trades=max_trades)
    if engine == "batched":
        return _batched_engine(max_trades)(book, msgs)
    raise ValueError(f"book_messages: engine must be 'vmap' or 'batched', got {engine!r}")
