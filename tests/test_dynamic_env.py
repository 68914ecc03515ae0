"""The dynamic execution environment: costs that emerge from the book, a Q = 0 agent that
leaves the market untouched, the static environment's interface, whole-share accounting,
no book overflow, passive child orders and the simulated features.

Everything runs on a few test-split days of the A-share sample (two per symbol) in the
calibrated CN market; the calibrated values may change, so no test depends on them.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from serl_jax.baselines import twap_policy
from serl_jax.data.episodes import FEATURE_NAMES, STD_FLOOR
from serl_jax.envs.dynamic import DynamicEnvParams, DynamicExecutionEnv
from serl_jax.envs.execution import (
    EnvParams,
    ExecutionEnv,
    default_reward,
    history_volume_forecast,
    minute_volume_forecast,
)
from serl_jax.envs.market_data import MarketData
from serl_jax.evaluation import rollout
from serl_jax.lob.book import CANCEL, LIMIT, Message, apply_messages
from serl_jax.lob.engine import resolve_engine
from serl_jax.market.agents import round_view
from serl_jax.market.params import FIRST_AGENT_OWNER, load_market_params
from serl_jax.market.simulator import reset_market, run_minute
from serl_jax.metrics import price_advantage, shortfall, timing_advantage

MARKET_YAML = Path(__file__).parents[1] / "configs" / "market" / "cn_1min.yaml"
EPISODES = [0, 1, 10, 11, 20, 21, 30, 31]  # two test days of each of the 4 symbols
ENV = DynamicExecutionEnv()
STATIC_ENV = ExecutionEnv()
SIDE = 1.0  # sell
KEY = jax.random.PRNGKey(7)


def immediate_policy(policy_params, key, obs, state, params):
    """Everything left, every step: the whole parent order at t = 0 (no participation cap
    in the dynamic market; what the book cannot absorb stays and is sent again)."""
    return jnp.float32(1.0)


def twap_or_immediate(immediate, key, obs, state, params):
    """:func:`immediate_policy` if ``immediate`` else TWAP: one compiled rollout for both
    (compiling a dynamic-market rollout costs seconds, running it a fraction of that)."""
    twap = twap_policy(None, key, obs, state, params)
    return jnp.where(immediate, jnp.float32(1.0), twap)


def _record(prev_state, action, next_state, params):
    """Per step: the book's overflow counters, whether the observation is finite, the
    minute's volume, the bid depth the child order met, the inventory before it, and the
    bar prices and features the agent has seen (the tests read the last step's)."""
    book = next_state.market.book
    return {
        "overflow_orders": book.overflow_orders,
        "overflow_qty": book.overflow_qty,
        "dropped_trades": book.dropped_trades,
        "obs_finite": jnp.isfinite(ENV.get_obs(next_state, params)).all(),
        "volume": (book.filled_qty - prev_state.market.book.filled_qty) / 2,
        "bid_depth_before": prev_state.market.book.bids.qty.sum(),
        "inventory_before": prev_state.inventory,
        "market_price": next_state.last_market_price,
        "price_history": next_state.price_history,
        "feature_history": next_state.feature_history,
    }


@pytest.fixture(scope="module")
def setup(cn_market):
    data = jax.tree.map(lambda x: x[np.asarray(EPISODES)], MarketData.from_episodes(cn_market.test))
    market = load_market_params(MARKET_YAML)
    static = EnvParams(data=data, side=SIDE, quantity_low=1.0, quantity_high=1.0)
    dynamic = DynamicEnvParams.from_static(static, cn_market.stats, market)
    return {"stats": cn_market.stats, "market": market, "static": static, "dynamic": dynamic}


def test_decision_intervals_are_refused_in_the_dynamic_market(setup):
    """``env.step_minutes`` is a static-market setting: a one-line error, not a market
    that silently decides every minute."""
    with pytest.raises(ValueError, match="step_minutes=5: decision intervals run in the static"):
        DynamicEnvParams.from_static(
            setup["static"].replace(step_minutes=5), setup["stats"], setup["market"]
        )


@pytest.fixture(scope="module")
def runs(setup):
    """The rollouts the tests share (each compiles once)."""
    dyn, static = setup["dynamic"], setup["static"]
    passive = DynamicEnvParams.from_static(
        static, setup["stats"], setup["market"], child_order="passive"
    )
    return {
        "twap": _dynamic_rollout(False, dyn, KEY),
        "immediate": _dynamic_rollout(True, dyn, KEY),
        "passive_twap": _dynamic_rollout(False, passive, KEY),
        "static_immediate": rollout(STATIC_ENV, immediate_policy, None, static, KEY),
    }


def _dynamic_rollout(immediate: bool, params, key):
    return rollout(ENV, twap_or_immediate, jnp.bool_(immediate), params, key, record=_record)


def _pa(result) -> np.ndarray:
    return price_advantage(result.outcomes(SIDE))


# --------------------------------------------------------------------------- costs


def test_immediate_execution_is_costly(runs):
    """Dumping the parent order into the book costs far more than spreading it (TWAP),
    and more than the static market's capped immediate order on the same days."""
    immediate, twap = _pa(runs["immediate"]), _pa(runs["twap"])
    static_immediate = _pa(runs["static_immediate"])
    summary = (
        f"mean PA (bps): dynamic immediate {immediate.mean():.1f}, dynamic TWAP "
        f"{twap.mean():.1f}, static immediate {static_immediate.mean():.1f}"
    )
    assert immediate.mean() < twap.mean() - 50.0, summary
    assert immediate.mean() < static_immediate.mean(), summary


def _cost_vs_pre_trade_mid(result) -> np.ndarray:
    """Per order: side * (average fill / share-weighted pre-trade mid - 1), bps: what the
    book charged, free of the day's trend that dominates PA against the day's VWAP."""
    qty = np.asarray(result.exec_qty, np.float64)
    mid = np.asarray(result.recorded["market_price"], np.float64)
    notional = np.asarray(result.notional, np.float64)
    return SIDE * (notional / (qty * mid).sum(1) - 1.0) * 1e4


def test_immediate_execution_pays_more_of_the_book(runs):
    """Against the mid each child order met, sweeping the book costs more than TWAP."""
    immediate = _cost_vs_pre_trade_mid(runs["immediate"])
    twap = _cost_vs_pre_trade_mid(runs["twap"])
    assert immediate.mean() < twap.mean() < 0, (
        f"mean cost vs the pre-trade mid (bps): immediate {immediate.mean():.1f}, "
        f"TWAP {twap.mean():.1f}"
    )


def test_passive_child_orders_beat_market_orders(runs):
    """TWAP with passive child orders earns the spread instead of paying it."""
    passive, market = _pa(runs["passive_twap"]), _pa(runs["twap"])
    assert passive.mean() > market.mean(), (
        f"mean PA (bps): passive TWAP {passive.mean():.1f}, market TWAP {market.mean():.1f}"
    )
    passive_cost = _cost_vs_pre_trade_mid(runs["passive_twap"])
    market_cost = _cost_vs_pre_trade_mid(runs["twap"])
    assert passive_cost.mean() > market_cost.mean(), (
        f"mean cost vs the pre-trade mid (bps): passive {passive_cost.mean():.1f}, "
        f"market {market_cost.mean():.1f}"
    )


def test_passive_child_order_is_cancelled_only_while_it_rests(setup):
    """The first passive child order rests at the best ask; the next step cancels it (and
    only then: a cancel of nothing would count as a missed cancel in the book)."""
    params = DynamicEnvParams.from_static(
        setup["static"], setup["stats"], setup["market"], child_order="passive"
    )
    state = ENV.init_state(params, 0, 0, params.data.num_slots)
    first = ENV.child_messages(state, jnp.int32(5), jnp.bool_(False), params)
    assert np.asarray(first.kind).tolist() == [0, LIMIT]
    asks = state.market.book.asks
    assert int(first.price[1]) == int(asks.price[0])  # joins the best ask
    state = state.replace(
        market=state.market.replace(
            book=apply_messages(state.market.book, first, max_trades=state.market.book.capacity)[0]
        )
    )
    second = ENV.child_messages(state, jnp.int32(5), jnp.bool_(False), params)
    assert np.asarray(second.kind).tolist() == [CANCEL, LIMIT]


# --------------------------------------------------------------------------- accounting


@pytest.mark.parametrize("name", ["twap", "immediate", "passive_twap"])
def test_whole_shares_and_forced_liquidation(runs, name):
    """Q, fills and inventory are whole shares, ``executed + inventory == Q`` exactly, and
    the forced last order sells everything the book's bid side can absorb."""
    result = runs[name]
    quantity = np.asarray(result.quantity, np.float64)
    executed = np.asarray(result.executed, np.float64)
    exec_qty = np.asarray(result.exec_qty, np.float64)
    inventory = np.asarray(result.remaining[:, -1], np.float64) * quantity
    assert (quantity > 0).all()
    for x in (quantity, executed, exec_qty):
        np.testing.assert_array_equal(x, np.round(x))
    np.testing.assert_array_equal(exec_qty.sum(1), executed)
    np.testing.assert_allclose(executed + inventory, quantity, rtol=0, atol=1e-3)
    # the last (forced) child order is a market order for the whole inventory: it fills
    # min(inventory, bid depth), so the order completes whenever the book can absorb it
    depth = np.asarray(result.recorded["bid_depth_before"][:, -1], np.float64)
    left = np.asarray(result.recorded["inventory_before"][:, -1], np.float64)
    np.testing.assert_array_equal(exec_qty[:, -1], np.minimum(left, depth))
    could_absorb = depth >= left
    np.testing.assert_array_equal(executed[could_absorb], quantity[could_absorb])


@pytest.mark.parametrize("name", ["twap", "immediate", "passive_twap"])
def test_books_never_overflow_and_observations_are_finite(runs, name):
    recorded = runs[name].recorded
    for counter in ("overflow_orders", "overflow_qty", "dropped_trades"):
        np.testing.assert_array_equal(recorded[counter][:, -1], 0, err_msg=counter)
    assert bool(np.all(recorded["obs_finite"]))


def test_default_reward_sums_to_the_order_pa(runs, setup):
    """The default reward slot runs in the dynamic env; undiscounted, its PA terms add up to
    ``executed / Q * PA`` (the concentration and terminal penalties recomputed by hand)."""
    assert ENV.reward_fn is default_reward
    params = setup["dynamic"]
    for name in ("twap", "immediate"):
        result = runs[name]
        reward = np.asarray(result.reward, np.float64)
        assert np.isfinite(reward).all()
        quantity = np.asarray(result.quantity, np.float64)
        fraction = np.asarray(result.exec_qty, np.float64) / quantity[:, None]
        left = np.asarray(result.remaining[:, -1], np.float64)
        executed = np.asarray(result.executed, np.float64) / quantity
        expected = (
            executed * _pa(result)
            - params.concentration_penalty * (fraction**2).sum(1)
            - params.terminal_penalty_bps * left
        )
        np.testing.assert_allclose(reward.sum(1) / params.reward_scale, expected, atol=0.05)


def test_rollouts_are_deterministic_given_the_key(runs, setup):
    again = _dynamic_rollout(False, setup["dynamic"], KEY)
    for a, b in zip(jax.tree.leaves(runs["twap"]), jax.tree.leaves(again), strict=True):
        np.testing.assert_array_equal(a, b)
    other = _dynamic_rollout(False, setup["dynamic"], jax.random.PRNGKey(8))
    assert not np.array_equal(runs["twap"].notional, other.notional)


# --------------------------------------------------------------------------- interface


_step = jax.jit(ENV.step_env)


def test_same_interface_as_the_static_env(setup):
    static, dynamic = setup["static"], setup["dynamic"]
    assert ENV.observation_size(dynamic) == STATIC_ENV.observation_size(static)
    a, b = ENV.action_space(dynamic), STATIC_ENV.action_space(static)
    assert (a.low, a.high, a.shape, a.dtype) == (b.low, b.high, b.shape, b.dtype)
    obs_d, state_d = ENV.reset_env(KEY, dynamic)
    obs_s, state_s = STATIC_ENV.reset_env(KEY, static)
    assert obs_d.shape == obs_s.shape == (ENV.observation_size(dynamic),)
    assert obs_d.dtype == obs_s.dtype == jnp.float32
    assert bool(jnp.isfinite(obs_d).all())
    out_d = _step(KEY, state_d, jnp.float32(0.3), dynamic)
    out_s = STATIC_ENV.step_env(KEY, state_s, jnp.float32(0.3), static)
    assert out_d[0].shape == out_s[0].shape
    assert bool(jnp.isfinite(out_d[0]).all())
    assert set(out_d[4]) == set(out_s[4])
    assert out_d[2].shape == out_s[2].shape == ()
    # the gymnax step (with auto-reset) traces to the same shapes (compiling it would cost
    # seconds; the rollouts run step_env)
    obs, _, reward, done, _, info = jax.eval_shape(ENV.step, KEY, state_d, 0.3, dynamic)
    assert obs.shape == obs_s.shape and reward.shape == done.shape == ()
    assert set(out_d[4]) <= set(info)


# --------------------------------------------------------------------------- Q = 0


def _noop_messages() -> Message:
    zeros = jnp.zeros((2,), jnp.int32)
    return Message(kind=zeros, side=zeros, price=zeros, qty=zeros, order_id=zeros, owner=zeros)


@jax.jit
def _reference_minute(market_state, params, episode, slot, key):
    """One minute of the market without the agent: what ``step_env`` feeds ``run_minute``
    (fundamental, activity, volume unit), recomputed here."""
    data, market = params.data, params.market
    real = data.price[episode] / market.tick_size
    before, after = real[jnp.maximum(slot - 1, 0)], real[slot]
    rounds = market.rounds_per_minute
    fundamental = before + (jnp.arange(1, rounds + 1) / rounds) * (after - before)
    activity = data.volume_profile[episode, slot] * data.num_slots
    return run_minute(
        market_state,
        _noop_messages(),
        fundamental,
        activity,
        market.volume_unit(data, episode),
        key,
        market,
    )


minute_features = jax.jit(ENV.minute_features)  # as compiled inside step_env


def _assert_trees_equal(a, b, what):
    paths_a = jax.tree_util.tree_flatten_with_path(a)[0]
    leaves_b = jax.tree.leaves(b)
    assert len(paths_a) == len(leaves_b)
    for (path, x), y in zip(paths_a, leaves_b, strict=True):
        np.testing.assert_array_equal(x, y, err_msg=f"{what}{jax.tree_util.keystr(path)}")


def test_the_trailing_volume_unit_sizes_the_book_in_the_days_before(setup, cn_market):
    """With ``trailing_volume_unit`` 1 the book is reset and run in the episode's
    trailing volume, not the training mean: minute by minute the same market as one run
    by hand with it, its resting depth in the ratio of the two volumes."""
    static = setup["static"].replace(order_fraction=0.0)
    data = static.data
    ratio = np.asarray(data.trailing_minute_volume) / np.asarray(data.mean_minute_volume)
    episode = int(np.argmax(np.abs(ratio - 1.0)))
    assert abs(ratio[episode] - 1.0) > 0.05
    # market makers quoting a whole V per level, so that whole shares resolve V's ratio
    market = setup["market"].replace(trailing_volume_unit=1, mm_size=1.0)
    params = DynamicEnvParams.from_static(static, cn_market.stats, market)
    state = ENV.init_state(params, episode, 0, data.num_slots)
    price = data.price[episode, 0] / market.tick_size
    reference = reset_market(price, data.trailing_minute_volume[episode], market)
    _assert_trees_equal(state.market, reference, "reset")
    training = reset_market(price, data.mean_minute_volume[episode], market)

    def depth(m):
        return int(m.book.bids.qty.sum() + m.book.asks.qty.sum())

    assert depth(state.market) / depth(training) == pytest.approx(ratio[episode], rel=0.05)
    keys = jax.random.split(jax.random.PRNGKey(3), 5)
    for t in range(5):
        _, state, _, _, _ = _step(keys[t], state, jnp.float32(0.5), params)
        reference, _ = _reference_minute(reference, params, episode, t, keys[t])
        _assert_trees_equal(state.market, reference, f"minute {t}: market")


def test_zero_quantity_leaves_the_market_unchanged(setup, cn_market):
    minutes, episode = 30, 3
    static = setup["static"].replace(order_fraction=0.0)
    params = DynamicEnvParams.from_static(static, cn_market.stats, setup["market"])
    market = params.market
    state = ENV.init_state(params, episode, 0, params.data.num_slots)
    assert float(state.quantity) == 0.0
    reference = reset_market(
        params.data.price[episode, 0] / market.tick_size,
        params.data.mean_minute_volume[episode],
        market,
    )
    _assert_trees_equal(state.market, reference, "reset")
    keys = jax.random.split(jax.random.PRNGKey(3), minutes)
    for t in range(minutes):
        prev = state
        _, state, _, _, info = _step(keys[t], state, jnp.float32(0.5), params)
        reference, summary = _reference_minute(reference, params, episode, t, keys[t])
        # the whole market (book, owners' positions and cash, references, rings) ...
        _assert_trees_equal(state.market, reference, f"minute {t}: market")
        assert float(info["exec_qty"]) == 0.0
        # ... and the minute's summary as the env used it: mid, volume, high/low
        assert float(state.price_history[t]) == float(summary.mid * market.tick_size)
        expected = minute_features(prev.episode, params, jnp.int32(t), state.price_history, summary)
        np.testing.assert_array_equal(state.feature_history[t], expected)
    assert int(reference.position[FIRST_AGENT_OWNER]) == 0
    assert int(summary.volume) >= 0

    # an agent that trades, with the same keys, moves the market
    trading = DynamicEnvParams.from_static(
        static.replace(order_fraction=0.05), cn_market.stats, setup["market"]
    )
    moved = ENV.init_state(trading, episode, 0, trading.data.num_slots)
    assert float(moved.quantity) > 0
    for t in range(minutes):
        _, moved, _, _, _ = _step(keys[t], moved, jnp.float32(0.2), trading)
    assert int(moved.market.position[FIRST_AGENT_OWNER]) < 0
    assert not np.array_equal(moved.price_history[:minutes], state.price_history[:minutes])
    assert not np.array_equal(moved.market.book.bids.qty, state.market.book.bids.qty)


# --------------------------------------------------------------------------- features


def _numpy_features(prices: np.ndarray, vol_window: int) -> np.ndarray:
    """log return, rolling volatility (ddof 0 over the last ``vol_window`` returns) and time
    of day of one day's bar prices, as ``serl_jax.data.episodes._raw_features``."""
    n = len(prices)
    returns = np.zeros(n)
    returns[1:] = np.log(prices[1:] / prices[:-1])
    vol = np.zeros(n)
    for t in range(1, n):
        vol[t] = np.std(returns[max(1, t - vol_window + 1) : t + 1])
    return np.stack([returns, vol, np.arange(n) / n], axis=-1)


def test_simulated_features_match_an_independent_computation(runs, setup):
    params, stats = setup["dynamic"], setup["stats"]
    recorded = runs["twap"].recorded
    prices = np.asarray(recorded["price_history"][:, -1], np.float64)  # every slot simulated
    features = np.asarray(recorded["feature_history"][:, -1], np.float64)
    mean = np.asarray(stats.feature_mean)
    std = np.asarray(stats.feature_std)
    names = list(FEATURE_NAMES)
    columns = [names.index(n) for n in ("log_return", "rolling_volatility", "time_of_day")]
    assert np.isfinite(features).all()
    for i in range(prices.shape[0]):
        raw = _numpy_features(prices[i], params.vol_window)
        expected = (raw - mean[columns]) / std[columns]
        np.testing.assert_allclose(features[i][:, columns], expected, rtol=1e-4, atol=2e-3)
    # the minute's traded volume, as a share of the expected day volume
    volume = np.asarray(recorded["volume"], np.float64)
    scale = np.asarray(params.data.expected_day_volume, np.float64)[:, None]
    k = names.index("volume_share")
    np.testing.assert_allclose(
        features[:, :, k], (volume / scale - mean[k]) / std[k], rtol=1e-4, atol=1e-3
    )
    # a feature constant on the training days (no highs/lows in this sample) stays at its
    # training value
    for k in np.flatnonzero(std <= STD_FLOOR):
        np.testing.assert_array_equal(features[:, :, k], 0.0)
    # the prices are the simulated mids (currency), not the replayed bars
    assert not np.allclose(prices, np.asarray(params.data.price, np.float64))
    ticks = prices / params.market.tick_size
    np.testing.assert_allclose(ticks * 2, np.round(ticks * 2), atol=1e-3)


def test_market_price_is_the_pre_trade_mid(setup):
    """``info['market_price']`` is the mid before the child order."""
    params = setup["dynamic"]
    state = ENV.init_state(params, 0, 0, params.data.num_slots)
    mid = round_view(state.market.book, state.market.reference).reference
    _, _, _, _, info = _step(KEY, state, jnp.float32(1.0), params)
    assert float(info["market_price"]) == pytest.approx(float(mid) * params.market.tick_size)
    assert float(info["exec_qty"]) > 0
    assert float(info["exec_price"]) < float(info["market_price"])  # a sell pays the spread


def test_timing_and_shortfall_against_the_replayed_day(runs, setup):
    """In the dynamic market the shortfall is measured against the replayed (undisturbed)
    bars, so it holds all the impact of the agent's orders: selling everything at once
    pays far more than TWAP, and timing plus shortfall is the order's PA."""
    data = setup["static"].data
    for name in ("twap", "immediate"):
        result = runs[name]
        by_hand = (np.asarray(result.exec_qty) * np.asarray(data.price)).sum(1)
        np.testing.assert_allclose(result.replayed_notional, by_hand, rtol=1e-4)
        outcomes = result.outcomes(SIDE)
        np.testing.assert_allclose(
            timing_advantage(outcomes) + shortfall(outcomes), _pa(result), atol=1e-9
        )
    assert shortfall(runs["immediate"].outcomes(SIDE)).mean() < (
        shortfall(runs["twap"].outcomes(SIDE)).mean() - 50.0
    )


def test_the_diagnostic_volume_leak_is_static_only(setup):
    leaky = setup["static"].replace(diagnostic_volume_leak=True)
    with pytest.raises(ValueError, match="diagnostic_volume_leak"):
        DynamicEnvParams.from_static(leaky, setup["stats"], setup["market"])


def test_history_forecast_matches_the_static_forecast_on_replayed_volumes(setup):
    data = setup["static"].data
    for episode, slot in ((0, 0), (1, 30), (3, 200), (7, 239)):
        np.testing.assert_allclose(
            history_volume_forecast(data.volume[episode], data, episode, slot),
            minute_volume_forecast(data, episode, slot),
            rtol=1e-5,
        )


def test_participation_child_orders_in_the_dynamic_market(setup):
    """Worked over the rounds: whole shares, never more than held, a = 0 sends nothing,
    a busier minute trades more at the same a, and the forced last minute is one order."""
    params = setup["dynamic"].replace(child_quantity="participation")
    step = jax.jit(ENV.step_env)
    state = ENV.init_state(params, 0, 0, params.data.num_slots)
    _, idle, *_ = step(KEY, state, jnp.float32(0.0), params)
    assert float(idle.inventory) == float(state.inventory)
    fills, volumes = [], []
    for t in range(12):
        _, nxt, _, _, info = step(jax.random.fold_in(KEY, t), state, jnp.float32(0.05), params)
        qty = float(info["exec_qty"])
        assert qty == np.floor(qty) and 0 <= qty <= float(state.inventory)
        fills.append(qty)
        volumes.append(float(nxt.volume_history[t]) - qty)
        state = nxt
    assert sum(fills) > 0
    assert np.corrcoef(fills, volumes)[0, 1] > 0  # it follows the minute's volume
    # the forced last minute sends all of I_t at once, as a fixed-size child order does
    last = ENV.init_state(params, 0, 0, 3).replace(time=jnp.int32(2))
    _, forced, _, _, info = step(KEY, last, jnp.float32(0.0), params)
    _, fixed, *_ = step(KEY, last, jnp.float32(0.0), setup["dynamic"])
    assert float(info["exec_qty"]) > 0
    assert float(forced.inventory) == float(fixed.inventory)


def test_sliced_child_orders_in_the_dynamic_market(setup):
    """The same child order as a market order, sent over the minute's rounds: whole
    shares, a = 0 sends nothing, an order larger than the bids' depth fills more than
    the market order (which takes what the bids hold) because the book refills between
    rounds, and the forced last minute sends the whole inventory over the rounds."""
    sliced = setup["dynamic"].replace(child_order="sliced")
    step = jax.jit(ENV.step_env)
    state = ENV.init_state(sliced, 0, 0, sliced.data.num_slots)
    _, idle, *_ = step(KEY, state, jnp.float32(0.0), sliced)
    assert float(idle.inventory) == float(state.inventory)
    _, after, _, _, info = step(KEY, state, jnp.float32(0.01), sliced)
    sent = np.floor(0.01 * float(state.inventory))
    assert float(info["exec_qty"]) == sent == float(state.inventory) - float(after.inventory)
    depth = float(state.market.book.bids.qty.sum())
    assert np.floor(0.05 * float(state.inventory)) > depth  # the market order runs out
    _, _, _, _, at_once = step(KEY, state, jnp.float32(0.05), setup["dynamic"])
    _, _, _, _, worked = step(KEY, state, jnp.float32(0.05), sliced)
    assert float(at_once["exec_qty"]) == depth < float(worked["exec_qty"])
    last = ENV.init_state(sliced, 0, 0, 3).replace(time=jnp.int32(2))
    _, forced, *_ = step(KEY, last, jnp.float32(0.0), sliced)
    _, forced_at_once, *_ = step(KEY, last, jnp.float32(0.0), setup["dynamic"])
    # 568 shares against 196 on the bids: at once 196 fill, over the rounds 553
    assert float(last.inventory) > depth == float(last.inventory - forced_at_once.inventory)
    assert float(forced.inventory) < float(forced_at_once.inventory)


def test_a_sliced_child_order_in_fewer_parts(setup):
    """``child_slices``: one part a minute is the whole child order at the first round
    (deeper into the bids than six parts, so a lower average price for the seller), six
    are the default; a count above the book's rounds is a one-line error."""
    sliced = setup["dynamic"].replace(child_order="sliced")
    step = jax.jit(ENV.step_env)
    state = ENV.init_state(sliced, 0, 0, sliced.data.num_slots)
    _, _, _, _, six = step(KEY, state, jnp.float32(0.05), sliced)
    _, _, _, _, one = step(KEY, state, jnp.float32(0.05), sliced.replace(child_slices=1))
    _, _, _, _, default = step(KEY, state, jnp.float32(0.05), sliced.replace(child_slices=6))
    assert float(one["exec_price"]) < float(six["exec_price"])
    assert float(default["exec_price"]) == float(six["exec_price"])
    assert float(default["exec_qty"]) == float(six["exec_qty"])
    rounds = setup["market"].rounds_per_minute
    with pytest.raises(
        ValueError,
        match=rf"^child_slices must be in \[0, rounds_per_minute = {rounds}\], got {rounds + 1}$",
    ):
        DynamicEnvParams.from_static(
            setup["static"], setup["stats"], setup["market"], "sliced", child_slices=rounds + 1
        )


# --------------------------------------------------------------------------- engines


def test_the_batched_book_engine_gives_the_same_market(runs, setup):
    """``lob_engine="batched"`` (the CPU engine, :mod:`serl_jax.lob.engine`) changes how the
    books are computed, not what they hold: the same rollouts bit for bit, with fixed-size
    and participation child orders, under one ``vmap`` (episodes) and two (seeds x
    episodes, as PPO runs it)."""
    batched = setup["dynamic"].replace(lob_engine="batched")
    got = _dynamic_rollout(False, batched, KEY)
    jax.tree.map(np.testing.assert_array_equal, got, runs["twap"])

    def seeds(params):
        pov = params.replace(child_quantity="participation")
        keys = jax.random.split(KEY, 2)
        return jax.jit(jax.vmap(lambda k: rollout(ENV, twap_policy, None, pov, k)))(keys)

    jax.tree.map(np.testing.assert_array_equal, seeds(batched), seeds(setup["dynamic"]))


def test_book_engine_names_are_checked(setup):
    with pytest.raises(ValueError, match="lob_engine must be 'vmap' or 'batched', got 'auto'"):
        DynamicEnvParams.from_static(
            setup["static"], setup["stats"], setup["market"], lob_engine="auto"
        )


def test_auto_engine_is_the_measured_fastest():
    assert resolve_engine("auto") == "vmap"  # CPU and GPU measurements (serl_jax.lob.engine)
    assert resolve_engine("batched") == "batched"
    with pytest.raises(ValueError, match=r"^lob.engine: expected one of"):
        resolve_engine("fast")
