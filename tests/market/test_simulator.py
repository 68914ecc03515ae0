"""The simulated market: ladder, attribution by owner, conservation, determinism."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from serl_jax.lob.book import BUY, CANCEL, LIMIT, MARKET, SELL, Message, Trades
from serl_jax.market.agents import market_maker_orders, round_view
from serl_jax.market.params import (
    AGENT_KERNEL_EXPONENTIALS,
    AGENT_ORDER_ID,
    FIRST_AGENT_OWNER,
    INFORMED_TRADER,
    MARKET_MAKER,
    MarketParams,
)
from serl_jax.market.simulator import (
    ParticipationOrder,
    agent_memory_level,
    flow_response,
    learn_from_flow,
    participation_quantity,
    remember_flow,
    reset_market,
    run_minute,
    settle,
    signed_flow,
    sliced_quantity,
    value_shift,
)

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
    every, uninformed, agents = signed_flow(trades)
    assert int(every) == 3 - 2 and float(uninformed) == 1.0
    assert float(agents) == 3.0  # owner 5's aggressive buy; owner 2 is background
    # the informed traders' own buying is not news to them
    informed = trades.replace(aggressor_owner=jnp.array([[INFORMED_TRADER, 2]]))
    every, uninformed, agents = signed_flow(informed)
    assert int(every) == 1 and float(uninformed) == -2.0 and float(agents) == 0.0


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
    # net aggressive flow -25 + 5: the informed traders remember -20 / V = -0.2 of it,
    # decayed over the minute's two quiet rounds
    assert int(minute.signed_volume) == -20 and int(state.signed_volume) == -20
    decay = 2.0 ** (-1.0 / (params.flow_impact_halflife_minutes * params.rounds_per_minute))
    assert float(state.order_flow) == pytest.approx(-0.2 * decay**2, rel=1e-5)
    assert float(state.agent_flow) == 0.0


def test_the_agents_own_flow_memory_takes_their_flow_alone():
    """``agent_flow_memory`` 1: the same minute as above; the agents' net flow (-20 of
    V = 100) goes to ``agent_flow``, decayed the same way, and ``order_flow`` stays 0."""
    params = MarketParams(**QUIET, agent_flow_memory=1)
    state = reset_market(100.5, 100.0, params, num_agents=2)
    seller, buyer = FIRST_AGENT_OWNER, FIRST_AGENT_OWNER + 1
    orders = _orders((MARKET, SELL, 0, 25, 0, seller), (LIMIT, BUY, 101, 5, 900, buyer))
    fundamental = jnp.full((params.rounds_per_minute,), 100.5)
    state, _ = run_minute(state, orders, fundamental, 1.0, 100.0, jax.random.PRNGKey(0), params)
    decay = 2.0 ** (-1.0 / (params.flow_impact_halflife_minutes * params.rounds_per_minute))
    assert float(state.agent_flow) == pytest.approx(-0.2 * decay**2, rel=1e-5)
    assert float(state.order_flow) == 0.0


def test_value_shift_by_hand():
    """Background memory 0.25 and agents' memory -0.04 (both in V), exponent 0.5, 8 and
    10 bps: one memory reads only ``order_flow`` (+4 bps); two add the agents'
    -10 x 0.2 = -2 bps. With two, the agents' increment is the same on any background."""
    state = reset_market(100.5, 100.0, MarketParams(**QUIET)).replace(
        order_flow=jnp.float32(0.25), agent_flow=jnp.float32(-0.04)
    )
    pooled = MarketParams(flow_impact_bps=8.0, agent_flow_impact_bps=10.0)
    separate = pooled.replace(agent_flow_memory=1)
    assert float(value_shift(state, pooled)) == pytest.approx(4e-4)
    assert float(value_shift(state, separate)) == pytest.approx(2e-4)
    for background in (-0.5, 0.0, 0.3):
        with_agents = state.replace(order_flow=jnp.float32(background))
        without = with_agents.replace(agent_flow=jnp.float32(0.0))
        increment = float(value_shift(with_agents, separate) - value_shift(without, separate))
        assert increment == pytest.approx(-2e-4, abs=1e-9)


@pytest.mark.parametrize("beta", [0.0, 0.5])
def test_the_agents_own_memory_leaves_a_market_without_agent_orders_unchanged(beta):
    """A noisy market with no agent orders: one memory or two (the agents' with one
    exponential or a power-law kernel) give the same days."""
    base = MarketParams(mm_levels=4, noise_orders=12, rounds_per_minute=3)
    pooled, pooled_days = _noisy_days(base, 2, 20, jax.random.PRNGKey(5))
    separate, separate_days = _noisy_days(
        base.replace(agent_flow_memory=1, agent_flow_beta=beta), 2, 20, jax.random.PRNGKey(5)
    )
    np.testing.assert_array_equal(pooled_days.mid, separate_days.mid)
    np.testing.assert_array_equal(pooled.order_flow, separate.order_flow)
    assert np.abs(pooled.order_flow).max() > 0  # the background's flow was remembered
    np.testing.assert_array_equal(separate.agent_flow, 0.0)
    assert separate.agent_flow.shape == (2,) + ((AGENT_KERNEL_EXPONENTIALS,) if beta else ())


def test_the_agents_power_law_memory_is_the_kernel_by_hand():
    """``agent_flow_beta`` 0.5, ``tau0`` 5 minutes: the weights sum to G(0) = 1 and a
    unit of flow remembered ``tau`` minutes ago weighs ``(1 + tau/5) ** -0.5`` (the
    kernel's sum of exponentials, to 1e-3); each round decays every exponential by its
    own factor and adds the round's flow in V; the value shift reads ``sum_k w_k E_k``."""
    params = MarketParams(
        rounds_per_minute=6, agent_flow_memory=1, agent_flow_beta=0.5,
        agent_flow_tau0_minutes=5.0, agent_flow_impact_bps=10.0,
    )  # fmt: skip
    weights, decay = params.agent_kernel()
    assert weights.shape == decay.shape == (AGENT_KERNEL_EXPONENTIALS,)
    assert weights.sum() == pytest.approx(1.0, abs=1e-6) and (weights >= 0).all()
    for tau in (0.0, 1.0, 10.0, 60.0, 240.0):
        remembered = float((weights * decay ** (6 * tau)).sum())
        assert remembered == pytest.approx((1 + tau / 5.0) ** -0.5, rel=1e-3)
    state = reset_market(100.5, 100.0, params)
    components = jnp.linspace(0.1, 1.0, AGENT_KERNEL_EXPONENTIALS, dtype=jnp.float32)
    state = state.replace(agent_flow=components)
    after = remember_flow(state, -30.0, -20.0, 100.0, params)
    np.testing.assert_allclose(after.agent_flow, components * decay - 0.2, rtol=1e-6)
    level = float(np.dot(weights, np.asarray(after.agent_flow)))
    assert float(agent_memory_level(after.agent_flow, params)) == pytest.approx(level, rel=1e-6)
    # plus the background's -10 shares in its own memory: 5 bps x -sqrt(0.1)
    assert float(after.order_flow) == pytest.approx(-0.1)
    expected = 10e-4 * np.sign(level) * np.sqrt(abs(level)) - 5e-4 * np.sqrt(0.1)
    assert float(value_shift(after, params)) == pytest.approx(expected, rel=1e-5)
    with pytest.raises(ValueError, match="agent_flow_beta is 0: the agents' memory is one"):
        MarketParams().agent_kernel()
    with pytest.raises(ValueError, match="market.agent_flow_beta must be in"):
        MarketParams.from_mapping({"agent_flow_beta": 2.5})
    assert MarketParams.from_mapping({"agent_flow_beta": 0.5}).agent_flow_beta == 0.5


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


@pytest.mark.parametrize(
    ("levels", "refresh", "cursor", "rungs"),
    [
        (3, 1, 0, [0, 1]),  # the default: the best rung and one outer rung in rotation
        (3, 1, 1, [0, 2]),
        (5, 2, 0, [0, 1, 2]),  # two outer rungs a round: 1 + (2r + j) mod 4
        (5, 2, 1, [0, 3, 4]),
        (5, 2, 2, [0, 1, 2]),
        (5, 4, 7, [0, 1, 2, 3, 4]),  # the whole ladder every round
        (1, 1, 3, [0]),  # a one-rung ladder has no outer rung
    ],
)
def test_the_market_makers_refresh_their_rungs_in_rotation_by_hand(levels, refresh, cursor, rungs):
    params = MarketParams(**{**QUIET, "mm_levels": levels, "mm_refresh_rungs": refresh})
    view = round_view(reset_market(100.5, 100.0, params).book, 100.5)
    orders = market_maker_orders(view, 0, jnp.int32(cursor), params, 100.0)
    assert len(orders.kind) == params.messages_per_round() - (
        2 * params.informed_slots + params.momentum_slots + 2 * params.noise_slots
    )
    # per rung k: (cancel, limit) on the bid, then on the ask; id k + 1 on both sides
    np.testing.assert_array_equal(orders.kind, [CANCEL, LIMIT] * 2 * len(rungs))
    ids = np.asarray(orders.order_id).reshape(len(rungs), 4)
    np.testing.assert_array_equal(ids[:, 0], np.asarray(rungs) + 1)
    limits = np.asarray(orders.price).reshape(len(rungs), 4)
    # rung k bids at floor(100.5 - 0.5 - k) and asks at ceil(100.5 + 0.5 + k)
    np.testing.assert_array_equal(limits[:, 1], [100 - k for k in rungs])
    np.testing.assert_array_equal(limits[:, 3], [101 + k for k in rungs])
    sizes = np.asarray(orders.qty).reshape(len(rungs), 4)
    np.testing.assert_array_equal(sizes[:, 1], [10 * (1 + k) for k in rungs])


def test_a_walked_ladder_is_whole_again_a_round_later_when_every_rung_is_refreshed():
    """An agent sells through the bid ladder's three rungs; after one round the market
    makers have re-posted all three (every rung refreshed) or two (the default)."""
    one_round = {**QUIET, "rounds_per_minute": 1}
    sweep = _orders((MARKET, SELL, 0, 60, 0, FIRST_AGENT_OWNER))  # 10 + 20 + 30 shares
    fundamental = jnp.full((1,), 100.5)
    resting = {}
    for refresh in (1, 2):
        params = MarketParams(**one_round, mm_refresh_rungs=refresh)
        state = reset_market(100.5, 100.0, params)
        state, minute = run_minute(
            state, sweep, fundamental, 1.0, 100.0, jax.random.PRNGKey(0), params
        )
        assert int(minute.position_change[FIRST_AGENT_OWNER]) == -60
        bids = state.book.bids
        maker = (np.asarray(bids.owner) == MARKET_MAKER) & (np.asarray(bids.qty) > 0)
        resting[refresh] = sorted(np.asarray(bids.order_id)[maker].tolist())
    assert resting[2] == [1, 2, 3]
    assert resting[1] == [1, 2]  # round 0 refreshes rung 0 and outer rung 1 + 0 mod 2


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


def test_flow_response_by_hand():
    """``flow_impact_bps * 1e-4 * sign(E) |E| ** delta``: 8 bps at E = 1 either way; at
    E = -0.25 the square root gives -4 bps, the linear response -2 bps; four times the
    flow moves the square-root response twice as far."""
    linear = MarketParams(flow_impact_bps=8.0, flow_impact_exponent=1.0)
    root = MarketParams(flow_impact_bps=8.0, flow_impact_exponent=0.5)
    for params in (linear, root):
        assert float(flow_response(1.0, params)) == pytest.approx(8e-4)
        assert float(flow_response(0.0, params)) == 0.0
    assert float(flow_response(-0.25, root)) == pytest.approx(-4e-4)
    assert float(flow_response(-0.25, linear)) == pytest.approx(-2e-4)
    assert float(flow_response(1.0, root)) == pytest.approx(2 * float(flow_response(0.25, root)))
    # the memory: 30 shares of V = 100 on top of E = 0.5, decayed by one round of a
    # half-life of 1 / R minutes (one round): 0.25 + 0.3
    quick = MarketParams(flow_impact_halflife_minutes=1.0 / 6.0)
    assert float(learn_from_flow(0.5, 30.0, 100.0, quick)) == pytest.approx(0.55)


def test_params_from_mapping_rejects_bad_keys():
    assert MarketParams.from_mapping({"mm_levels": 4}).mm_levels == 4
    with pytest.raises(ValueError, match="market.bogus: unknown"):
        MarketParams.from_mapping({"bogus": 1})
    with pytest.raises(ValueError, match="market.mm_levels: expected an integer"):
        MarketParams.from_mapping({"mm_levels": 2.5})
    with pytest.raises(ValueError, match="market.mm_levels must be >= 1"):
        MarketParams(mm_levels=0)
    for bad in (0.0, 1.5, -0.5):
        with pytest.raises(ValueError, match="market.flow_impact_exponent: must be in"):
            MarketParams.from_mapping({"flow_impact_exponent": bad})
    assert MarketParams.from_mapping({"flow_impact_exponent": 0.5}).flow_impact_exponent == 0.5
    with pytest.raises(ValueError, match="market.agent_flow_memory must be 0"):
        MarketParams.from_mapping({"agent_flow_memory": 2})
    with pytest.raises(ValueError, match="market.trailing_volume_unit must be 0"):
        MarketParams.from_mapping({"trailing_volume_unit": 2})
    for levels, bad in ((6, 0), (6, 6), (1, 2)):
        with pytest.raises(ValueError, match=r"market.mm_refresh_rungs must be in \[1, "):
            MarketParams(mm_levels=levels, mm_refresh_rungs=bad)
    assert MarketParams.from_mapping({"mm_refresh_rungs": 5}).outer_rungs_per_round() == 5


def test_participation_quantity_by_hand():
    # target floor(0.1 x 95) = 9 shares; 4 done: 5 more, unless the limit binds
    assert int(participation_quantity(0.1, 95.0, 4, 100)) == 5
    assert int(participation_quantity(0.1, 95.0, 4, 6)) == 2
    assert int(participation_quantity(0.1, 95.0, 12, 100)) == 0  # ahead: wait
    assert int(participation_quantity(0.1, 95.0, 6, 6)) == 0  # limit reached


def test_sliced_quantity_by_hand():
    # 20 shares over 6 rounds: targets floor(20 (r + 1) / 6) = 3, 6, 10, 13, 16, 20
    done, sent = 0, []
    for r in range(6):
        sent.append(int(sliced_quantity(20, done, r, 6)))
        done += sent[-1]
    assert sent == [3, 3, 4, 3, 3, 4] and done == 20
    assert int(sliced_quantity(20, 4, 2, 6)) == 6  # behind (a part did not fill): catch up
    assert int(sliced_quantity(20, 12, 2, 6)) == 0  # ahead: wait
    assert int(sliced_quantity(5, 5, 5, 6)) == 0  # limit reached
    assert int(sliced_quantity(0, 0, 5, 6)) == 0


@pytest.mark.parametrize(
    ("parts", "expected"),
    [
        (0, [3, 3, 4, 3, 3, 4]),  # one part per round, as above
        (6, [3, 3, 4, 3, 3, 4]),
        (1, [20, 0, 0, 0, 0, 0]),  # all at round 0
        (2, [10, 0, 0, 10, 0, 0]),  # parts due at rounds 0 and 3
        (3, [6, 0, 7, 0, 7, 0]),  # targets floor(20 k / 3) = 6, 13, 20 at rounds 0, 2, 4
        (4, [5, 0, 5, 5, 0, 5]),  # parts at rounds ceil(6 j / 4) = 0, 2, 3, 5
    ],
)
def test_a_sliced_order_in_fewer_parts_by_hand(parts, expected):
    done, sent = 0, []
    for r in range(6):
        sent.append(int(sliced_quantity(20, done, r, 6, parts)))
        done += sent[-1]
    assert sent == expected and done == 20


def _pov_minute(rate, limit, participate=True, sliced=False, parts=0):
    """One noisy minute (default populations, 6 rounds) with a selling POV (or sliced,
    in ``parts`` parts) order."""
    params = MarketParams()
    state = reset_market(1000.5, 500.0, params)
    noop = _orders((0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0))
    order = ParticipationOrder(
        side=jnp.int32(SELL),
        rate=jnp.float32(rate),
        limit=jnp.int32(limit),
        owner=jnp.int32(FIRST_AGENT_OWNER),
        order_id=jnp.int32(AGENT_ORDER_ID),
        sliced=jnp.bool_(sliced),
        parts=jnp.int32(parts),
    )
    path = jnp.full((params.rounds_per_minute,), 1000.5)
    return run_minute(
        state,
        noop,
        path,
        1.0,
        500.0,
        jax.random.PRNGKey(3),
        params,
        order if participate else None,
    )


def test_a_pov_child_order_tracks_the_other_traders_volume():
    _, minute = _pov_minute(0.2, 10_000)
    sold = -int(minute.position_change[FIRST_AGENT_OWNER])
    others = int(minute.volume) - sold
    assert others > 0 and sold > 0
    # each round's order tops its fills up to 20% of the others' volume seen before it,
    # so in all it never exceeds 20% of the minute's other volume
    assert sold <= int(np.floor(0.2 * others))
    assert float(minute.cash_change[FIRST_AGENT_OWNER]) > 0  # it sold
    _, slower = _pov_minute(0.05, 10_000)
    assert 0 < -int(slower.position_change[FIRST_AGENT_OWNER]) < sold


def test_a_sliced_child_order_sells_its_limit_over_the_rounds():
    """Whatever the other traders' volume (rate 0: a POV order would send nothing), a
    sliced order sells its whole limit in a deep book, and a zero limit sends nothing."""
    _, minute = _pov_minute(0.0, 37, sliced=True)
    assert -int(minute.position_change[FIRST_AGENT_OWNER]) == 37
    assert float(minute.cash_change[FIRST_AGENT_OWNER]) > 0
    _, idle = _pov_minute(0.0, 0, sliced=True)
    assert int(idle.position_change[FIRST_AGENT_OWNER]) == 0
    _, pov = _pov_minute(0.0, 37)
    assert int(pov.position_change[FIRST_AGENT_OWNER]) == 0


def test_a_sliced_child_order_in_two_parts_sells_its_limit():
    """Two parts a minute sell the same 37 shares as six in a deep book, and six parts
    given as 6 are the default 0 to the last cent."""
    _, six = _pov_minute(0.0, 37, sliced=True)
    _, two = _pov_minute(0.0, 37, sliced=True, parts=2)
    _, also_six = _pov_minute(0.0, 37, sliced=True, parts=6)
    assert -int(two.position_change[FIRST_AGENT_OWNER]) == 37
    assert float(also_six.cash_change[FIRST_AGENT_OWNER]) == float(
        six.cash_change[FIRST_AGENT_OWNER]
    )


def test_a_one_part_sliced_order_trades_as_a_market_child_order():
    """A worked part is booked first in its round and the round's other orders see the
    book it left, as they see the book a market child order left at the minute's start:
    a sliced sell of 200 shares in one part (all at round 0, through four bid levels)
    and the same shares sent as the minute's market order leave every owner the same
    position, the same volume, mid and agents' flow memory. Booked in one batch with the
    round's other orders (computed from the book before it), the part left three other
    owners' positions different and the mid half a tick higher, 999.5 against 999.0."""
    params = MarketParams(agent_flow_memory=1, agent_flow_impact_bps=20.0)
    state = reset_market(1000.5, 500.0, params)
    noop = _orders((0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0))
    market_order = _orders(
        (MARKET, SELL, 0, 200, AGENT_ORDER_ID, FIRST_AGENT_OWNER), (0, 0, 0, 0, 0, 0)
    )
    one_part = ParticipationOrder(
        side=jnp.int32(SELL),
        rate=jnp.float32(0.0),
        limit=jnp.int32(200),
        owner=jnp.int32(FIRST_AGENT_OWNER),
        order_id=jnp.int32(AGENT_ORDER_ID),
        sliced=jnp.bool_(True),
        parts=jnp.int32(1),
    )
    path = jnp.full((params.rounds_per_minute,), 1000.5)
    key = jax.random.PRNGKey(3)
    at_once_state, at_once = run_minute(state, market_order, path, 1.0, 500.0, key, params)
    worked_state, worked = run_minute(state, noop, path, 1.0, 500.0, key, params, one_part)
    assert -int(worked.position_change[FIRST_AGENT_OWNER]) == 200
    np.testing.assert_array_equal(worked.position_change, at_once.position_change)
    np.testing.assert_array_equal(worked.cash_change, at_once.cash_change)
    assert int(worked.volume) == int(at_once.volume)
    assert float(worked.mid) == float(at_once.mid) == 999.0
    assert float(worked_state.agent_flow) == float(at_once_state.agent_flow)


def test_a_pov_child_order_stops_at_its_limit():
    _, minute = _pov_minute(50.0, 37)
    assert -int(minute.position_change[FIRST_AGENT_OWNER]) == 37


def test_a_pov_child_order_with_no_limit_leaves_the_market_unchanged():
    """Same orders, trades, positions and cash; only the arrival stamps (the book's
    message counter, which its no-op messages advance) differ, in the same time order."""
    with_order = _pov_minute(0.2, 0)
    alone = _pov_minute(0.2, 0, participate=False)
    stamps = ("arrival", "next_arrival")
    for (path, a), b in zip(
        jax.tree_util.tree_leaves_with_path(with_order), jax.tree.leaves(alone), strict=True
    ):
        if jax.tree_util.keystr(path).endswith(stamps):
            continue
        np.testing.assert_array_equal(a, b, err_msg=jax.tree_util.keystr(path))
    for side in ("bids", "asks"):
        a, b = (getattr(m[0].book, side) for m in (with_order, alone))
        live = np.asarray(b.qty) > 0
        np.testing.assert_array_equal(
            np.argsort(np.asarray(a.arrival)[live]), np.argsort(np.asarray(b.arrival)[live])
        )


def _pov_orders_minute(rates, limits, sides, num_agents=None, vector=True):
    """One noisy minute (as :func:`_pov_minute`) with POV orders of ``len(rates)`` agents
    (owner ids 5, 6, ...); ``vector=False`` gives one agent's order as scalars."""
    n = len(rates)
    params = MarketParams()
    state = reset_market(1000.5, 500.0, params, num_agents=num_agents or n)
    noop = _orders((0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0))
    shape = (lambda x: x) if vector else (lambda x: x[0])
    order = ParticipationOrder(
        side=shape(jnp.asarray(sides, jnp.int32)),
        rate=shape(jnp.asarray(rates, jnp.float32)),
        limit=shape(jnp.asarray(limits, jnp.int32)),
        owner=shape(FIRST_AGENT_OWNER + jnp.arange(n, dtype=jnp.int32)),
        order_id=shape(AGENT_ORDER_ID + jnp.arange(n, dtype=jnp.int32)),
        sliced=shape(jnp.zeros(n, bool)),
    )
    path = jnp.full((params.rounds_per_minute,), 1000.5)
    return run_minute(state, noop, path, 1.0, 500.0, jax.random.PRNGKey(3), params, order)


def test_one_agents_pov_order_as_a_vector_equals_the_scalar_order():
    vector = _pov_orders_minute([0.2], [10_000], [SELL])
    scalar = _pov_orders_minute([0.2], [10_000], [SELL], vector=False)
    for a, b in zip(jax.tree.leaves(vector), jax.tree.leaves(scalar), strict=True):
        np.testing.assert_array_equal(a, b)
    # and the scalar order of a market with one agent is _pov_minute's
    for a, b in zip(
        jax.tree.leaves(scalar), jax.tree.leaves(_pov_minute(0.2, 10_000)), strict=True
    ):
        np.testing.assert_array_equal(a, b)


def test_an_idle_second_agent_leaves_the_first_agents_minute_unchanged():
    """Agent 6 sends nothing (limit 0): trades, positions and cash are those of agent 5
    alone in a market sized for two agents (only the book's arrival stamps move)."""
    both = _pov_orders_minute([0.2, 0.3], [10_000, 0], [SELL, BUY])
    alone = _pov_orders_minute([0.2], [10_000], [SELL], num_agents=2)
    for name in ("position_change", "cash_change", "volume", "mid", "high", "low"):
        np.testing.assert_array_equal(getattr(both[1], name), getattr(alone[1], name), name)
    np.testing.assert_array_equal(both[0].position, alone[0].position)
    np.testing.assert_array_equal(both[0].cash, alone[0].cash)


def test_two_agents_pov_orders_each_track_everyone_elses_volume():
    (_, minute) = _pov_orders_minute([0.2, 0.1], [10_000, 10_000], [SELL, SELL])
    sold = -np.asarray(minute.position_change[FIRST_AGENT_OWNER : FIRST_AGENT_OWNER + 2])
    assert (sold > 0).all()
    # each tops its fills up to its rate times the volume of everyone else (the other
    # agent included) seen before its order, so in all at most rate x that volume
    volume = int(minute.volume)
    assert sold[0] <= np.floor(0.2 * (volume - sold[0]))
    assert sold[1] <= np.floor(0.1 * (volume - sold[1]))
    assert sold[1] < sold[0]
    # shares and cash are conserved over all owners, agents included
    assert int(minute.position_change.sum()) == 0
    assert int(minute.cash_change.sum()) == 0
    (_, capped) = _pov_orders_minute([50.0, 50.0], [37, 11], [SELL, BUY])
    assert -int(capped.position_change[FIRST_AGENT_OWNER]) == 37
    assert int(capped.position_change[FIRST_AGENT_OWNER + 1]) == 11
