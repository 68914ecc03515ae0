"""The simulated market: ladder, attribution by owner, conservation, determinism."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from serl_jax.lob.book import BUY, LIMIT, MARKET, SELL, Message, Trades
from serl_jax.market.params import (
    FIRST_AGENT_OWNER,
    INFORMED_TRADER,
    MARKET_MAKER,
    MarketParams,
)
from serl_jax.market.simulator import reset_market, run_minute, settle, signed_flow

QUIET = dict(
    mm_levels=3,
    mm_size=0.1,
    mm_size_growth=1.0,
    noise_market_prob=0.0,
    noise_limit_prob=0.0,
    noise_cancel_prob=0.0,
    informed_prob=0.0,
    momentum_prob=0.0,
    rounds_per_minute=2,
)


def _orders(*rows):
    """Message rows ``(kind, side, price, qty, order_id, owner)``."""
    cols = list(zip(*rows, strict=True))
    return Message(*(jnp.asarray(c, jnp.int32) for c in cols))


def test_reset_builds_the_ladder_by_hand():
    params = MarketParams(**QUIET)
    state = reset_market(100.5, 100.0, params)
    book = state.book
    # rungs + noise ring + one resting order per informed slot + one per agent
    assert book.capacity == 3 + params.noise_orders + params.informed_slots + 1
    # rung k: bid floor(100.5 - 0.5 - k), ask ceil(100.5 + 0.5 + k), size round(0.1 * 100 * (1 + k))
    np.testing.assert_array_equal(book.bids.price[:4], [100, 99, 98, 0])
    np.testing.assert_array_equal(book.asks.price[:4], [101, 102, 103, 0])
    np.testing.assert_array_equal(book.bids.qty[:4], [10, 20, 30, 0])
    np.testing.assert_array_equal(book.asks.qty[:4], [10, 20, 30, 0])
    np.testing.assert_array_equal(book.bids.owner[:3], [MARKET_MAKER] * 3)
    assert int(book.submitted_qty) == 120


def test_settle_by_hand():
    # owner 5 buys 3 @ 10 from owner 1; owner 2 sells 2 @ 9 to owner 5 (passive).
    trades = Trades(
        price=jnp.array([[10, 9]]),
        qty=jnp.array([[3, 2]]),
        aggressor_owner=jnp.array([[5, 2]]),
        passive_owner=jnp.array([[1, 5]]),
        passive_order_id=jnp.array([[7, 8]]),
        aggressor_side=jnp.array([[BUY, SELL]]),
    )
    position, cash, volume = settle(trades, 6)
    np.testing.assert_array_equal(position, [0, -3, -2, 0, 0, 5])
    np.testing.assert_allclose(cash, [0, 30, 18, 0, 0, -48])
    assert int(volume) == 5
    every, uninformed = signed_flow(trades)
    assert int(every) == 3 - 2 and float(uninformed) == 1.0
    # the informed traders' own buying is not news to them
    informed = trades.replace(aggressor_owner=jnp.array([[INFORMED_TRADER, 2]]))
    every, uninformed = signed_flow(informed)
    assert int(every) == 1 and float(uninformed) == -2.0


def test_agent_fills_are_attributed_by_owner():
    """Two agents in a quiet market: fills and cash by hand from the ladder."""
    params = MarketParams(**QUIET)
    state = reset_market(100.5, 100.0, params, num_agents=2)
    seller, buyer = FIRST_AGENT_OWNER, FIRST_AGENT_OWNER + 1
    orders = _orders(
        (MARKET, SELL, 0, 25, 0, seller),  # 10 @ 100 + 15 @ 99
        (LIMIT, BUY, 101, 5, 900, buyer),  # 5 @ 101 from the ask ladder
    )
    fundamental = jnp.full((params.rounds_per_minute,), 100.5)
    state, minute = run_minute(
        state, orders, fundamental, 1.0, 100.0, jax.random.PRNGKey(0), params
    )
    assert int(minute.position_change[seller]) == -25
    assert float(minute.cash_change[seller]) == pytest.approx(10 * 100 + 15 * 99)
    assert int(minute.position_change[buyer]) == 5
    assert float(minute.cash_change[buyer]) == pytest.approx(-5 * 101)
    assert int(minute.position_change[MARKET_MAKER]) == 20
    assert int(minute.volume) == 30
    np.testing.assert_array_equal(state.position, minute.position_change)
    assert int(state.position.sum()) == 0
    # net aggressive flow -25 + 5: the informed traders' value moves by flow_impact_bps per
    # V = 100 shares of it, then decays over the minute's two quiet rounds
    assert int(minute.signed_volume) == -20 and int(state.signed_volume) == -20
    decay = 2.0 ** (-1.0 / (params.flow_impact_halflife_minutes * params.rounds_per_minute))
    expected = params.flow_impact_bps * 1e-4 * (-20 / 100.0) * decay**2
    assert float(state.flow_impact) == pytest.approx(expected, rel=1e-5)


def _noisy_days(params, n_markets, minutes, key):
    def one(key):
        state = reset_market(1000.5, 500.0, params)
        noop = _orders((0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0))

        def minute(state, key):
            path = jnp.full((params.rounds_per_minute,), 1000.5)
            state, summary = run_minute(state, noop, path, 1.0, 500.0, key, params)
            return state, summary

        return jax.lax.scan(minute, state, jax.random.split(key, minutes))

    return jax.jit(jax.vmap(one))(jax.random.split(key, n_markets))


def test_market_conserves_shares_and_cash_and_never_overflows():
    params = MarketParams()
    state, summary = _noisy_days(params, 4, 120, jax.random.PRNGKey(1))
    book = state.book
    assert int(summary.volume.sum()) > 0
    for counter in (book.overflow_orders, book.overflow_qty, book.dropped_trades):
        np.testing.assert_array_equal(counter, 0)
    resting = book.bids.qty.sum(-1) + book.asks.qty.sum(-1)
    np.testing.assert_array_equal(
        book.submitted_qty, resting + book.filled_qty + book.cancelled_qty + book.overflow_qty
    )
    np.testing.assert_array_equal(state.position.sum(-1), 0)
    total_cash = np.abs(np.asarray(state.cash)).sum(-1)
    np.testing.assert_allclose(np.asarray(state.cash).sum(-1), 0.0, atol=1e-6 * total_cash.max())
    # the book is never crossed or locked at the end of a minute
    spread = np.asarray(summary.spread)
    assert np.nanmin(spread) >= 1
    # every trade has two sides, so the per-owner position changes sum to 0 each minute
    np.testing.assert_array_equal(np.asarray(summary.position_change).sum(-1), 0)


def test_market_is_deterministic_given_the_key():
    params = MarketParams()
    _, a = _noisy_days(params, 2, 30, jax.random.PRNGKey(3))
    _, b = _noisy_days(params, 2, 30, jax.random.PRNGKey(3))
    _, c = _noisy_days(params, 2, 30, jax.random.PRNGKey(4))
    np.testing.assert_array_equal(a.mid, b.mid)
    np.testing.assert_array_equal(a.volume, b.volume)
    assert not np.array_equal(a.mid, c.mid)


def test_params_from_mapping_rejects_bad_keys():
    assert MarketParams.from_mapping({"mm_levels": 4}).mm_levels == 4
    with pytest.raises(ValueError, match="market.bogus: unknown"):
        MarketParams.from_mapping({"bogus": 1})
    with pytest.raises(ValueError, match="market.mm_levels: expected an integer"):
        MarketParams.from_mapping({"mm_levels": 2.5})
    with pytest.raises(ValueError, match="market.mm_levels must be >= 1"):
        MarketParams(mm_levels=0)
