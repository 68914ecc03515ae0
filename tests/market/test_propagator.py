"""The propagator market: the impact model against closed forms and the empirical laws it is
calibrated to, and the environments against a plain-NumPy twin written from the module
docstrings (float64 Python loops; it shares only the kernel's fitted exponentials)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from serl_jax.config import ConfigError, load_config
from serl_jax.data import load_market, sample_path
from serl_jax.envs.execution import EnvParams
from serl_jax.envs.market_data import MarketData
from serl_jax.envs.propagator import (
    PropagatorEnvParams,
    PropagatorExecutionEnv,
    PropagatorMultiAgentEnv,
)
from serl_jax.envs.reference import NumpyExecutionEnv
from serl_jax.market.propagator import (
    PropagatorConfig,
    power_law_exponentials,
    round_trip_profit,
    schedule_impacts,
)


@pytest.fixture(scope="module")
def cn_market():
    return load_market(sample_path("cn_1min"))


def impacts(config: PropagatorConfig, rates, shares=None):
    """Mean and end-of-minute impact (sigma_day units) of one schedule, float64."""
    rates = np.asarray(rates, np.float64)
    shares = np.zeros_like(rates) if shares is None else np.asarray(shares, np.float64)
    mean, end = schedule_impacts(
        jnp.asarray(rates, jnp.float32), jnp.asarray(shares, jnp.float32), config.params()
    )
    return np.asarray(mean, np.float64), np.asarray(end, np.float64)


# ----------------------------------------------------------------------------- the model


def test_power_law_fit_is_accurate_and_completely_monotone():
    weights, rates = power_law_exponentials(0.5, 5.0, 10)
    lags = np.linspace(0.0, 1000.0, 2001)
    fitted = np.exp(-np.outer(lags, rates)) @ weights
    exact = (1.0 + lags / 5.0) ** -0.5
    assert np.max(np.abs(fitted / exact - 1.0)) < 1e-3
    assert weights.sum() == pytest.approx(1.0, abs=1e-12) and (weights >= 0).all()


def test_linear_minute_means_match_the_closed_form():
    """With delta = 1, the mean impact of minute i is sum_j M_ij x_j with
    M_ij = sum_k w_k e^{-r_k (i-j-1)} g_k^2 (j < i) and M_ii = sum_k w_k (1 - g_k)/r_k,
    g_k = (1 - e^{-r_k})/r_k: the quadrature against the exact integral."""
    config = PropagatorConfig(
        kernel="exponential", resilience=0.3, delta=1.0, permanent=0.0, temporary=0.0
    )
    rates = np.array([0.4, 0.0, -0.2, 0.7, 0.1, 0.0, 0.3])
    mean, _ = impacts(config, rates)
    r = 0.3
    g = (1.0 - np.exp(-r)) / r
    expected = np.zeros(len(rates))
    for i in range(len(rates)):
        expected[i] = (1.0 - g) / r * rates[i]
        for j in range(i):
            expected[i] += np.exp(-r * (i - j - 1)) * g * g * rates[j]
    np.testing.assert_allclose(mean, config.amplitude() * expected, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("kernel", ["power_law", "exponential"])
def test_a_metaorder_peaks_at_the_square_root_law(kernel):
    """Constant participation Q/V over reference_minutes from rest peaks at
    Y (Q/V)^delta (transient part; sigma_day = 1)."""
    config = PropagatorConfig(kernel=kernel, permanent=0.0, temporary=0.0)
    minutes = int(config.reference_minutes)
    peaks = []
    for participation in (0.001, 0.01, 0.05, 0.2):
        _, end = impacts(config, np.full(minutes, participation))
        peaks.append(end[-1])
        assert end[-1] == pytest.approx(config.y * participation**config.delta, rel=1e-5)
    slope = np.polyfit(np.log([0.001, 0.01, 0.05, 0.2]), np.log(peaks), 1)[0]
    assert slope == pytest.approx(0.5, abs=1e-4)


def test_impact_relaxes_to_about_two_thirds_of_its_peak():
    """The calibration's relaxation target: 0.5-0.8 of the peak one and two order
    durations after the order ends (defaults, permanent part included)."""
    config = PropagatorConfig()
    minutes = int(config.reference_minutes)
    rates = np.concatenate([np.full(minutes, -0.05), np.zeros(2 * minutes)])
    _, end = impacts(config, rates, shares=rates / 240.0)
    peak = end[minutes - 1]
    after_1x, after_2x = end[2 * minutes - 1] / peak, end[3 * minutes - 1] / peak
    assert 0.5 < after_2x < after_1x < 0.8


def test_permanent_part_is_linear_and_stays():
    config = PropagatorConfig(y=0.0, permanent=0.3, temporary=0.0)
    shares = np.array([0.01, 0.02, 0.0, -0.01])
    mean, end = impacts(config, np.zeros(4), shares)
    np.testing.assert_allclose(end, 0.3 * np.cumsum(shares), rtol=1e-5)
    np.testing.assert_allclose(mean, 0.3 * (np.cumsum(shares) - shares / 2), rtol=1e-5)


round_trips = st.tuples(
    st.floats(0.005, 5.0),  # buy participation
    st.integers(1, 40),  # buy minutes
    st.integers(0, 30),  # wait
    st.floats(0.005, 5.0),  # sell participation
)


@settings(max_examples=25, deadline=None)
@given(trip=round_trips, kernel=st.sampled_from(["power_law", "exponential"]))
def test_no_round_trip_earns(trip, kernel):
    """Buy, wait, sell the same shares (a partial last minute): the trades never earn."""
    buy, minutes, wait, sell = trip
    total = buy * minutes
    full = int(total // sell)
    selling = [-sell] * full + ([-(total - full * sell)] if total - full * sell > 1e-9 else [])
    rates = np.array([buy] * minutes + [0.0] * wait + selling)
    mean, _ = impacts(PropagatorConfig(kernel=kernel), rates, shares=rates / 240.0)
    cost = float(np.sum(rates * mean))
    assert cost >= -1e-5 * total * np.abs(mean).max()


def test_a_concave_price_propagator_earns_and_is_refused():
    """Propagating F(x) itself (Bouchaud et al. 2004's form) with delta = 0.5 lets a
    slow buy and a fast sell earn (Gatheral 2010): the checks refuse it, naming the key."""
    config = PropagatorConfig(form="price")
    assert round_trip_profit(config) > 0.01
    with pytest.raises(ValueError, match=r"impact\.form: a buy-then-sell round trip earns"):
        config.params()
    with pytest.raises(ConfigError, match=r"impact\.form"):
        load_config(None, ["market.simulator=propagator", "impact.form=price"])
    # linear: the two forms agree, and nothing earns
    assert round_trip_profit(PropagatorConfig(form="price", delta=1.0)) == 0.0
    load_config(None, ["impact.form=price", "market.simulator=lob"])  # unused: not checked


@pytest.mark.parametrize("size", [0.001, 0.01, 0.05, 0.2])
def test_reslicing_a_schedule_into_five_minute_child_orders_costs_little_more(size):
    """The impact report's re-slicing (a 60-minute order at participation ``size``, or
    five-minute bursts at the middle minute of each five) in a time-homogeneous default
    market costs more by under 5% at every size of the report; the temporary part adds
    exactly ``eta sum(rate^2)``: 60 size^2 every minute, 12 (5 size)^2 in bursts."""
    config = PropagatorConfig(liquidity="constant")
    every_minute = np.r_[np.full(60, size), np.zeros(120)]
    every_fifth = np.zeros(180)
    every_fifth[2:60:5] = 5 * size

    def cost(market, rates):
        mean, _ = impacts(market, rates, rates / 390.0)
        return float(np.sum(rates * mean))

    change = cost(config, every_fifth) / cost(config, every_minute) - 1.0
    assert 0.0 < change < 0.05
    no_temporary = dataclasses.replace(config, temporary=0.0)
    for rates, squares in ((every_minute, 60 * size**2), (every_fifth, 12 * (5 * size) ** 2)):
        assert cost(config, rates) - cost(no_temporary, rates) == pytest.approx(
            config.temporary * squares, rel=1e-4
        )


@pytest.mark.parametrize(
    "override, message",
    [
        ("impact.beta=-0.2", r"impact\.beta: the kernel increases"),
        ("impact.resilience=0", r"impact\.resilience: the kernel increases"),
        ("impact.delta=1.5", r"impact\.delta: must be in \(0, 1\]"),
        ("impact.y=-0.1", r"impact\.y: must be >= 0"),
        ("impact.permanent=-1", r"impact\.permanent"),
        ("impact.kernel=gaussian", r"impact\.kernel: expected one of"),
        ("market.simulator=abides", r"market\.simulator: expected one of"),
    ],
)
def test_bad_impact_settings_are_one_line_errors(override, message):
    extra = ["impact.kernel=exponential"] if "resilience" in override else []
    with pytest.raises(ConfigError, match=message):
        load_config(None, [*extra, override])


# ----------------------------------------------------------------------------- the env


class PropagatorTwin:
    """The single-agent propagator environment for one order, in float64 Python: the
    static twin's reset and observation (:class:`NumpyExecutionEnv`) with the module
    docstrings' impact, fill price and observation shift."""

    def __init__(self, data, params: EnvParams, config: PropagatorConfig, return_std: float):
        self.base = NumpyExecutionEnv(data, params)
        self.p, self.config, self.return_std = params, config, return_std
        self.sigma = np.asarray(data.sigma, np.float64)
        self.weights, self.rates = config.exponentials()
        s, w = np.polynomial.legendre.leggauss(8)
        self.times = ((s + 1) / 2) ** 2
        self.node_weights = w * (s + 1) / 2

    def reset(self, episode, start, window_len):
        self.base.reset(episode, start, window_len)
        self.components = [0.0] * len(self.weights)
        self.permanent = 0.0
        self.recent = [0.0] * (int(self.p.lookback) + 1)
        return self.observation()

    def response(self, z):
        return float(np.sign(z) * abs(z) ** self.config.delta)

    def step(self, action):
        b, s, c = self.base, self.base.state, self.config
        slot = s.start + s.time
        price, volume = b.price[s.episode, slot], b.volume[s.episode, slot]
        sigma_day = self.sigma[s.episode] * np.sqrt(b.price.shape[1])
        liquidity = max(volume, c.liquidity_floor * b.minute_volume[s.episode])
        cap = float(self.p.participation_cap) * liquidity
        penalty = 0.0
        if s.time + 1 >= s.window_len:
            qty = s.inventory
            if qty > cap:  # the forced block's shares above the cap
                penalty = float(self.p.force_penalty_bps) * 1e-4 * (qty - cap) / qty
        else:
            qty = min(min(max(float(action), 0.0), 1.0) * s.inventory, cap)
        side = float(self.p.side)
        x = -side * qty / liquidity
        day_share = -side * qty / b.day_volume[s.episode]
        amplitude = c.amplitude()
        transient = 0.0
        for t, w in zip(self.times, self.node_weights, strict=True):
            level = 0.0
            for k, (wk, rk) in enumerate(zip(self.weights, self.rates, strict=True)):
                gain = t if rk == 0 else (1 - np.exp(-rk * t)) / rk
                level += wk * (self.components[k] * np.exp(-rk * t) + x * gain)
            transient += w * self.response(level)
        mean = amplitude * transient + c.permanent * (self.permanent + day_share / 2)
        mean += c.temporary * x
        for k, rk in enumerate(self.rates):
            gain = 1.0 if rk == 0 else (1 - np.exp(-rk)) / rk
            self.components[k] = self.components[k] * np.exp(-rk) + x * gain
        self.permanent += day_share
        level = sum(w * e for w, e in zip(self.weights, self.components, strict=True))
        end = amplitude * self.response(level) + c.permanent * self.permanent
        cost = self.p.half_spread_bps * 1e-4 + penalty - side * sigma_day * mean
        cost = min(max(cost, 0.0), float(self.p.max_cost_bps) * 1e-4)
        exec_price = price * (1.0 - side * cost)
        s.inventory -= qty
        s.executed += qty
        s.notional += qty * exec_price
        s.time += 1
        self.recent = [*self.recent[1:], sigma_day * end]
        frac = qty / s.quantity
        pa_step = side * ((exec_price if qty > 0 else price) / s.benchmark_price - 1.0) * 1e4
        reward = pa_step * frac - float(self.p.concentration_penalty) * frac**2
        return self.observation(), float(self.p.reward_scale) * reward, exec_price, qty

    def observation(self):
        b, s = self.base, self.base.state
        obs = b.observation()
        slot = s.start + s.time
        if slot > 0:
            last_seen = b.price[s.episode, slot - 1]
            obs[3] += last_seen * self.recent[-1] / s.arrival_price * 100.0
        n_features = b.features.shape[2]
        for j in range(int(self.p.lookback)):
            change = np.log1p(self.recent[j + 1]) - np.log1p(self.recent[j])
            obs[6 + j * n_features] += change / self.return_std
        return obs


@pytest.mark.parametrize(
    "settings_",
    [
        {},
        {"kernel": "exponential", "resilience": 0.1, "delta": 1.0, "form": "price"},
    ],
)
def test_env_matches_the_numpy_twin_on_a_scripted_schedule(cn_market, settings_):
    config = PropagatorConfig(**settings_)
    data = MarketData.from_episodes(cn_market.split("test"))
    params = PropagatorEnvParams.from_static(
        EnvParams(data=data, order_fraction=0.2), cn_market.stats, config.params()
    )
    env = PropagatorExecutionEnv()
    twin = PropagatorTwin(data, params, config, float(params.return_std))
    episode, start, window_len = 3, 100, 25
    state = env.init_state(params, episode, start, window_len)
    obs_twin = twin.reset(episode, start, window_len)
    np.testing.assert_allclose(env.get_obs(state, params), obs_twin, rtol=1e-5, atol=1e-5)
    step = jax.jit(env.step_env)
    actions = np.random.default_rng(0).uniform(0.0, 0.3, window_len)
    actions[[4, 5, 11]] = [0.0, 1.0, 0.0]  # idle minutes and a block
    for action in actions:
        obs, state, reward, _, info = step(jax.random.key(0), state, action, params)
        obs_twin, reward_twin, price_twin, qty_twin = twin.step(action)
        np.testing.assert_allclose(float(info["exec_qty"]), qty_twin, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(float(info["exec_price"]), price_twin, rtol=1e-5)
        np.testing.assert_allclose(float(reward), reward_twin, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(obs, obs_twin, rtol=1e-4, atol=1e-4)
    assert float(state.inventory) == pytest.approx(0.0, abs=1e-3)


def _agents_params(cn_market, **settings_):
    data = MarketData.from_episodes(cn_market.split("test"))
    static = EnvParams(data=data, quantity_low=1.0, quantity_high=1.0, order_fraction=0.1)
    return PropagatorEnvParams.from_static(
        static, cn_market.stats, PropagatorConfig(**settings_).params()
    )


def _shortfalls(env, params, action, key):
    """Each agent's spread-and-impact cost over one day at a constant action, bps of its
    notional at the replayed prices (sells: a cost is positive)."""
    _, state = env.reset(key, params)
    actions = jnp.full(env.num_agents, action)

    def minute(carry, _):
        state, paid, replayed = carry
        _, state, _, _, _, info = env.step(key, state, actions, params)
        qty = info["exec_qty"]
        paid = paid + qty * info["exec_price"]
        replayed = replayed + qty * state.agents.last_replayed_price
        return (state, paid, replayed), None

    zeros = jnp.zeros(env.num_agents)
    # the whole-day windows end together: one day, without the auto-reset's next one
    steps = params.data.num_slots
    (_, paid, replayed), _ = jax.jit(
        lambda s: jax.lax.scan(minute, (s, zeros, zeros), None, steps)
    )(state)
    return (1.0 - np.asarray(paid, np.float64) / np.asarray(replayed, np.float64)) * 1e4


def test_two_agents_selling_together_pay_more_than_each_alone(cn_market):
    """Crowding: the agents' flows add up in one impact state."""
    params = _agents_params(cn_market)
    key = jax.random.key(7)
    alone = _shortfalls(PropagatorMultiAgentEnv(1), params, 0.02, key)
    together = _shortfalls(PropagatorMultiAgentEnv(2), params, 0.02, key)
    assert together[0] == pytest.approx(together[1], rel=1e-5)
    assert together[0] > alone[0] + 1.0


def test_the_forced_block_above_the_cap_pays_the_force_penalty(cn_market):
    """An order held to the forced last step pays ``force_penalty_bps`` on the shares
    above the participation cap, and only on them; one that finishes within the cap pays
    nothing more."""
    data = MarketData.from_episodes(cn_market.split("test"))
    env, key = PropagatorExecutionEnv(), jax.random.key(0)
    episode, start, window_len = 2, 30, 10

    def notional(action, penalty_bps):
        static = EnvParams(data=data, order_fraction=0.1, force_penalty_bps=penalty_bps)
        params = PropagatorEnvParams.from_static(
            static, cn_market.stats, PropagatorConfig().params()
        )
        state = env.init_state(params, episode, start, window_len)
        for t in range(window_len):
            _, state, _, _, info = env.step_env(key, state, action(t), params)
        return float(state.notional), float(info["exec_qty"]), float(state.quantity)

    def hold(t):
        return 0.0

    def twap(t):  # the fraction of the remaining inventory that keeps TWAP's pace
        return 1.0 / (window_len - t)

    held, last, quantity = notional(hold, 0.0)
    penalized, _, _ = notional(hold, 10.0)
    assert last == pytest.approx(quantity)  # the whole order at the forced step
    slot = start + window_len - 1
    liquidity = max(
        float(data.volume[episode, slot]), 0.1 * float(data.mean_minute_volume[episode])
    )
    excess = quantity - 0.2 * liquidity
    assert excess > 0.5 * quantity
    price = float(data.price[episode, slot])
    # the notional is float32: its difference is exact to a few units in its last place
    ulp = float(np.spacing(np.float32(held)))
    assert held - penalized == pytest.approx(price * excess * 10.0 * 1e-4, abs=4 * ulp)
    # TWAP: the forced step's remainder is within the cap
    paced, last, _ = notional(twap, 10.0)
    assert paced == notional(twap, 0.0)[0] and last > 0


def test_one_agent_is_the_single_agent_env_bit_for_bit(cn_market):
    params = _agents_params(cn_market)
    single, multi = PropagatorExecutionEnv(), PropagatorMultiAgentEnv(1)
    key = jax.random.key(3)
    obs_s, state_s = single.reset(key, params)
    obs_m, state_m = multi.reset(key, params)
    np.testing.assert_array_equal(obs_m[0], obs_s)
    step_s, step_m = jax.jit(single.step), jax.jit(multi.step)
    for t in range(12):
        action = jnp.float32(0.01 * (t % 4))
        obs_s, state_s, reward_s, _, _, info_s = step_s(key, state_s, action, params)
        obs_m, state_m, reward_m, _, _, info_m = step_m(key, state_m, action[None], params)
        np.testing.assert_array_equal(obs_m[0], obs_s)
        np.testing.assert_array_equal(reward_m[0], reward_s)
        np.testing.assert_array_equal(info_m["exec_price"][0], info_s["exec_price"])
