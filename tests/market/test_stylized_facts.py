"""Stylized facts of the calibrated CN market: a positive, uncrossed spread, heavy-tailed
1-minute returns, volatility clustering and a concave price-impact curve.

The calibrated parameters may be re-fitted, so the tests check signs and shapes, never the
fitted values.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from serl_jax.calibrate import simulate_days
from serl_jax.lob.book import SELL, market_order
from serl_jax.market.agents import messages, round_view
from serl_jax.market.params import FIRST_AGENT_OWNER, load_market_params
from serl_jax.market.simulator import last_trade_price, reset_market, run_minute

MARKET_YAML = Path(__file__).parents[2] / "configs" / "market" / "cn_1min.yaml"
SIZES = np.array([0.05, 0.1, 0.2, 0.4, 0.8])  # market order sizes, fractions of V
N_MARKETS = 64
WARMUP_MINUTES = 30


@pytest.fixture(scope="module")
def market():
    return load_market_params(MARKET_YAML)


@pytest.fixture(scope="module")
def days(cn_market, market):
    """Two simulated training days per symbol (8 days), no execution agent."""
    arrays, symbols = simulate_days(cn_market, market, jax.random.PRNGKey(0), days=2)
    assert len(symbols) == 8
    return arrays


def _returns(mid: np.ndarray) -> np.ndarray:
    """``[days, T - 1]`` within-day 1-minute log returns of the mid."""
    assert np.isfinite(mid).all() and (mid > 0).all()
    return np.diff(np.log(mid), axis=1)


def test_spread_is_positive_and_the_book_never_crossed(days):
    spread = days["spread"]
    two_sided = np.isfinite(spread)
    assert two_sided.mean() > 0.5, f"only {two_sided.mean():.1%} of minute ends are two-sided"
    assert spread[two_sided].min() >= 1.0
    np.testing.assert_array_equal(spread[two_sided], np.round(spread[two_sided]))


def test_returns_are_heavy_tailed(days):
    """Excess kurtosis > 0 after standardizing each day's returns (so it is not the mixture
    of calm and volatile days that makes the pooled tails heavy)."""
    r = _returns(days["mid"])
    sd = r.std(axis=1, keepdims=True)
    assert (sd > 0).all()
    z = ((r - r.mean(axis=1, keepdims=True)) / sd).ravel()
    kurtosis = np.mean(z**4) / np.mean(z**2) ** 2 - 3.0
    assert kurtosis > 0, f"excess kurtosis {kurtosis:.3f}"


def test_volatility_clusters(days):
    """Lag-1 autocorrelation of |r| over consecutive returns of the same day (each day's
    mean removed) is positive."""
    a = np.abs(_returns(days["mid"]))
    c = a - a.mean(axis=1, keepdims=True)
    acf1 = (c[:, 1:] * c[:, :-1]).sum() / (c**2).sum()
    per_day = (c[:, 1:] * c[:, :-1]).sum(1) / (c**2).sum(1)
    assert acf1 > 0, f"|r| acf1 {acf1:.3f}, per day {np.round(per_day, 3)}"


def _warm_markets(cn_market, market, key):
    """``N_MARKETS`` markets of the first training day of the first symbol, each simulated
    for ``WARMUP_MINUTES`` minutes with its own key (fundamental = the real day, as in the
    dynamic environment)."""
    train = cn_market.train
    n_slots = train.price.shape[1]
    real = jnp.asarray(train.price[0], jnp.float32) / market.tick_size
    activity = jnp.asarray(train.volume_profile[0], jnp.float32) * n_slots
    volume_unit = jnp.float32(train.mean_minute_volume[0])
    rounds = market.rounds_per_minute
    no_op = messages([0, 0], [0, 0], [0, 0], [0, 0], [0, 0], [0, 0])

    def one(key):
        state = reset_market(real[0], volume_unit, market)

        def minute(state, inputs):
            slot, key = inputs
            before, after = real[jnp.maximum(slot - 1, 0)], real[slot]
            fundamental = before + (jnp.arange(1, rounds + 1) / rounds) * (after - before)
            state, _ = run_minute(
                state, no_op, fundamental, activity[slot], volume_unit, key, market
            )
            return state, None

        keys = jax.random.split(key, WARMUP_MINUTES)
        state, _ = jax.lax.scan(minute, state, (jnp.arange(WARMUP_MINUTES), keys))
        return state

    return jax.jit(jax.vmap(one))(jax.random.split(key, N_MARKETS)), float(volume_unit)


def _mid_drop(state, qty):
    """Mid before minus mid after one sell market order of ``qty`` shares, ticks (the
    reference as the simulator computes it after the agents' messages: the last trade
    price when the order empties the bid side)."""
    before = round_view(state.book, state.reference).reference
    book, trades = market_order(
        state.book, SELL, qty, FIRST_AGENT_OWNER, max_trades=state.book.capacity
    )
    after = round_view(book, last_trade_price(trades, before)).reference
    return before - after


def test_impact_is_concave_in_order_size(cn_market, market):
    states, volume_unit = _warm_markets(cn_market, market, jax.random.PRNGKey(1))
    two_sided = (states.book.bids.qty[:, 0] > 0) & (states.book.asks.qty[:, 0] > 0)
    assert bool(two_sided.all())
    drop_fn = jax.jit(jax.vmap(_mid_drop, in_axes=(0, None)))
    qty = np.maximum(np.round(SIZES * volume_unit), 1).astype(np.int32)
    drops = np.array([np.asarray(drop_fn(states, jnp.int32(q))) for q in qty])  # [sizes, M]
    assert (drops >= 0).all()  # a sell never raises the mid
    mean = drops.mean(axis=1)
    bid_depth = np.asarray(states.book.bids.qty.sum(-1))
    summary = (
        f"mean mid drop (ticks) for sizes {SIZES.tolist()} x V={volume_unit:.0f}: "
        f"{np.round(mean, 3).tolist()}; orders that empty the bid side: "
        f"{[float((bid_depth <= q).mean()) for q in qty]}"
    )
    assert (np.diff(mean) > 0).all(), summary
    slope = np.polyfit(np.log(SIZES), np.log(mean), 1)[0]
    assert slope < 1.0, f"log-log slope {slope:.2f}; {summary}"
    assert mean[-1] < (SIZES[-1] / SIZES[0]) * mean[0], summary
