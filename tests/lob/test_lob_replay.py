"""LOBSTER replay: the issue's targets on the shipped files, hand-built files, the CLI."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import serl_jax
from serl_jax.lob.book import BUY, SELL, apply_messages, book_from_levels
from serl_jax.lob.lobster import read_lobster
from serl_jax.lob.reference import ReferenceBook
from serl_jax.lob.replay import main, replay

SAMPLE = Path(serl_jax.__file__).parent / "data" / "sample" / "lobster"
AMZN = (
    SAMPLE / "AMZN_2012-06-21_34200000_57600000_message_1.csv.gz",
    SAMPLE / "AMZN_2012-06-21_34200000_57600000_orderbook_1.csv.gz",
)
AAPL = (
    SAMPLE / "AAPL_2012-06-21_34200000_57600000_message_10_first999.csv.gz",
    SAMPLE / "AAPL_2012-06-21_34200000_57600000_orderbook_10_first999.csv.gz",
)


@pytest.fixture(scope="module")
def amzn():
    return read_lobster(*AMZN)


@pytest.fixture(scope="module")
def aapl():
    return read_lobster(*AAPL)


def test_target_step_mode_amzn_level1_whole_day(amzn):
    result = replay(*amzn, mode="step")
    assert result.messages == 57515
    assert result.compared + result.undetermined == result.messages
    # Undetermined: best levels that empty (level 2 unseen) and message 0.
    assert result.compared > 40000
    assert result.agree == result.compared
    assert result.first_disagreement is None


def test_target_step_mode_aapl_level10(aapl):
    result = replay(*aapl, mode="step")
    assert result.messages == 999
    assert result.compared > 600
    assert result.agree == result.compared


def test_target_full_mode_aapl_level10(aapl):
    result = replay(*aapl, mode="full")
    assert result.messages == 999
    assert result.compared > 600
    assert result.agree == result.compared
    assert result.overflow_orders == 0


def test_full_mode_amzn_level1_whole_day(amzn):
    result = replay(*amzn, mode="full")
    assert result.compared > 40000
    assert result.agree == result.compared


@pytest.mark.parametrize("mode", ["step", "full"])
def test_a_corrupted_message_is_caught(aapl, mode):
    msgs, book = aapl
    clean = replay(msgs, book, mode="step")
    # Corrupt the first visible execution that leaves its level standing (so the outcome
    # is determined): one share less than LOBSTER reports.
    prices = np.where(msgs.direction[:, None] == 1, book.bid_price, book.ask_price)
    standing = (prices == msgs.price[:, None]).any(1)
    i = int(np.flatnonzero((msgs.event_type == 4) & standing & (msgs.size > 1))[0])
    size = msgs.size.copy()
    size[i] -= 1
    result = replay(dataclasses.replace(msgs, size=size), book, mode=mode)
    assert result.first_disagreement is not None
    assert result.first_disagreement.index == i
    assert result.agree < result.compared
    if mode == "step":
        assert result.agree == clean.agree - 1


def test_real_stream_matches_reference_book(aapl):
    """The raw AAPL stream (no resync) through the JAX book and the reference book."""
    msgs, ob = aapl
    capacity, max_trades = 256, 4
    book = book_from_levels(
        ob.ask_price[0], ob.ask_size[0], ob.bid_price[0], ob.bid_size[0], capacity
    )
    stream = jax.tree.map(lambda x: jnp.asarray(x[1:]), msgs.to_book_messages())
    final, trades = jax.jit(apply_messages, static_argnames="max_trades")(
        book, stream, max_trades=max_trades
    )
    ref = ReferenceBook.from_levels(
        zip(ob.ask_price[0], ob.ask_size[0], strict=True),
        zip(ob.bid_price[0], ob.bid_size[0], strict=True),
        capacity,
        max_trades,
    )
    cols = np.stack(
        [
            np.asarray(x)
            for x in (
                stream.kind,
                stream.side,
                stream.price,
                stream.qty,
                stream.order_id,
                stream.owner,
            )
        ],
        1,
    )
    n_trades = 0
    for i, row in enumerate(cols.tolist()):
        ref_trades = ref.apply(*row)
        got = [
            (int(trades.price[i, k]), int(trades.qty[i, k]), int(trades.passive_order_id[i, k]))
            for k in range(max_trades)
            if trades.qty[i, k] > 0
        ]
        assert got == [(t.price, t.qty, t.passive_order_id) for t in ref_trades], i
        n_trades += len(got)
    # Without resync, a few executions hit orders deeper than row 0 ever showed (missed).
    executions = int((msgs.event_type[1:] == 4).sum())
    assert executions - 5 <= n_trades < executions
    for side, jside in ((BUY, final.bids), (SELL, final.asks)):
        rows = [(o.price, o.qty, o.order_id, o.arrival) for o in ref.orders(side)]
        live = np.asarray(jside.qty) > 0
        got = list(
            zip(
                *(
                    np.asarray(getattr(jside, f))[live].tolist()
                    for f in ("price", "qty", "order_id", "arrival")
                ),
                strict=True,
            )
        )
        assert got == rows
    assert int(final.missed_cancels) == ref.missed_cancels
    assert int(final.filled_qty) == ref.filled_qty


# A two-level file whose outcome is worked out by hand:
#   msg 1 adds 4 @101 (id 2); msg 2 executes the whole bid level 99 (level 3 of the bids,
#   97, appears: undetermined); msg 3 cancels order 2; msg 4 is a hidden execution.
HAND_MSG = """34200.0,1,1,7,9800,1
34200.1,1,2,4,10100,-1
34200.2,4,50,5,9900,1
34200.3,2,2,4,10100,-1
34200.4,5,0,3,10000,1
"""
HAND_OB = """10100,10,9900,5,10200,20,9800,7
10100,14,9900,5,10200,20,9800,7
10100,14,9800,7,10200,20,9700,3
10100,10,9800,7,10200,20,9700,3
10100,10,9800,7,10200,20,9700,3
"""


def _write(tmp_path, msg=HAND_MSG, ob=HAND_OB):
    m, o = tmp_path / "m.csv", tmp_path / "o.csv"
    m.write_text(msg)
    o.write_text(ob)
    return str(m), str(o)


@pytest.mark.parametrize("mode", ["step", "full"])
def test_hand_built_file_counts(tmp_path, capsys, mode):
    m, o = _write(tmp_path)
    assert main([m, o, "--mode", mode, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"messages": 5, "compared": 3, "agree": 3, "undetermined": 2}


def test_disagreement_exit_code_and_report(tmp_path, capsys):
    bad_ob = HAND_OB.replace(
        "10100,10,9800,7,10200,20,9700,3\n", "10100,9,9800,7,10200,20,9700,3\n", 1
    )
    m, o = _write(tmp_path, ob=bad_ob)
    assert main([m, o, "--mode", "full"]) == 1
    out = capsys.readouterr().out
    assert "compared: 3\nagree: 2\n" in out
    assert "first disagreement at row 4" in out
    assert "9@10100" in out and "10@10100" in out


def test_cli_reports_bad_input_in_one_line(tmp_path, capsys):
    m, o = _write(tmp_path, ob=HAND_OB + "10100,10,9800,7,10200,20,9700,3\n")
    assert main([m, o]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "error: m.csv has 5 rows but o.csv has 6: they must match row for row"
    m, o = _write(tmp_path, msg=HAND_MSG.replace("34200.3,2", "34200.3,x"))
    assert main([m, o]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: m.csv, row 4: column 2 is not a number ('x')"


def test_module_cli_subprocess_json_and_error(tmp_path):
    """``python -m serl_jax.lob.replay`` prints one JSON object; bad input: one line, exit 2."""
    cmd = [sys.executable, "-m", "serl_jax.lob.replay", *map(str, AAPL), "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert set(out) == {"messages", "compared", "agree", "undetermined"}
    assert out["agree"] == out["compared"] > 600
    bad = tmp_path / "bad.csv"
    bad.write_text("1,2,3\n")
    done = subprocess.run(
        [sys.executable, "-m", "serl_jax.lob.replay", str(bad), str(AAPL[1])],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: bad.csv, row 1: a message file has 6 columns, found 3"
    ]
