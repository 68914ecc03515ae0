"""The impact report (serl_jax.impact): on a flat synthetic market the propagator's report is
the model's closed form, figure by figure; on the real sample's order book it runs and
sees impact grow with size."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from serl_jax.baselines import twap_policy
from serl_jax.baselines.optimal import optimal_schedule, remaining_targets, schedule_policy
from serl_jax.config import load_config
from serl_jax.envs.dynamic import DynamicExecutionEnv
from serl_jax.envs.execution import mean_variance_reward
from serl_jax.envs.market_data import MarketData, trend_market
from serl_jax.envs.multi_agent import MultiAgentExecutionEnv
from serl_jax.envs.propagator import (
    PropagatorEnvParams,
    PropagatorExecutionEnv,
    PropagatorMultiAgentEnv,
)
from serl_jax.evaluation import rollout
from serl_jax.experiment import calibrated_market, dynamic_env_params, load_splits, train_policy
from serl_jax.impact import (
    REFERENCE_SIZE,
    _round_trip_program,
    fit_propagator,
    fit_square_root_law,
    measure_impact,
    relative_change,
    scripted_orders,
    se_text,
)
from serl_jax.market.propagator import PropagatorConfig, schedule_impacts
from serl_jax.rl.policy import make_ppo_policy


def test_square_root_fit_recovers_a_power_law_and_refuses_too_few_points():
    x = np.array([0.001, 0.01, 0.1])
    delta, y, se = fit_square_root_law(x, 0.8 * x**0.45)
    assert (delta, y, se) == (pytest.approx(0.45), pytest.approx(0.8), None)
    with pytest.raises(ValueError, match="1 size"):
        fit_square_root_law(x, [-0.1, 0.0, 0.3])


def test_square_root_fit_weighs_each_size_by_its_precision():
    """Two exact points on 0.8 x^0.5 and a third, noisy one off the line: with equal
    weights the third pulls the slope (by hand, the OLS slope of the three logs); with
    its error 100 times the others' it hardly counts, and se(delta) is the known-variance
    GLS error, by hand for the two precise points alone: sqrt(2) * s / ln(10) (the slope
    of two points a decade apart, each log with variance s^2)."""
    x = np.array([0.01, 0.1, 0.001])
    y = 0.8 * x**0.5
    y[2] *= 4.0
    logx, logy = np.log(x), np.log(y)
    ols = np.sum((logx - logx.mean()) * (logy - logy.mean())) / np.sum((logx - logx.mean()) ** 2)
    assert fit_square_root_law(x, y)[0] == pytest.approx(ols)
    assert ols < 0.3
    s = 0.01
    errors = np.array([s * y[0], s * y[1], 100 * s * y[2]])
    delta, y_fit, se = fit_square_root_law(x, y, errors)
    assert delta == pytest.approx(0.5, abs=2e-3) and y_fit == pytest.approx(0.8, rel=1e-2)
    assert se == pytest.approx(np.sqrt(2) * s / np.log(10), rel=1e-3)
    # a zero error (a deterministic market) falls back to equal weights
    assert fit_square_root_law(x, y, [0.0, 1.0, 1.0])[0] == pytest.approx(ols)


def test_relative_change_and_its_standard_error_by_hand():
    old, new = np.array([1.0, 2.0, 3.0]), np.array([1.5, 2.0, 4.0])
    change, se = relative_change(new, old)
    assert change == pytest.approx(7.5 / 6.0 - 1.0)  # mean 2.5 over mean 2
    # residuals new - 1.25 old = 0.25, -0.5, 0.25: sd sqrt(0.1875 / 2 x 3) = 0.4330
    assert se == pytest.approx(0.4330127 / np.sqrt(3) / 2.0, rel=1e-6)
    assert relative_change(2 * old, old) == pytest.approx((1.0, 0.0))  # no noise in a ratio
    assert relative_change([3.0], [2.0]) == (pytest.approx(0.5), None)
    assert (se_text(0.0123), se_text(None)) == ("(0.012)", "n/a")


FLAT = PropagatorConfig(permanent=0.0, temporary=0.0, liquidity="constant")


@pytest.fixture(scope="module")
def flat_report():
    """The report of :data:`FLAT` on a flat market (constant volume, no spread)."""
    data = trend_market(n_episodes=3, n_slots=240, drift_per_minute=0.0, n_features=5)
    params = PropagatorEnvParams(
        data=data, impact=FLAT.params(), return_std=jnp.float32(1.0), half_spread_bps=0.0
    )
    return measure_impact(
        PropagatorExecutionEnv(), PropagatorMultiAgentEnv, params,
        market="propagator", dataset="flat", days=3, sizes=(0.01, 0.05, 0.2),
    )  # fmt: skip


def test_propagator_report_is_the_closed_form_on_a_flat_market(flat_report):
    """Flat volume, no spread, no permanent or temporary part: the metaorders' peaks are
    Y (Q/V)^delta exactly, and every other figure is the model's own."""
    config, report = FLAT, flat_report
    assert report.delta == pytest.approx(0.5, abs=1e-4)
    assert report.y == pytest.approx(0.7, rel=1e-4)
    np.testing.assert_allclose(report.participation, [0.01, 0.05, 0.2], rtol=1e-5)

    def impacts(rates):
        rates = jnp.asarray(rates, jnp.float32)
        mean, end = schedule_impacts(rates, jnp.zeros_like(rates), config.params())
        return np.asarray(mean, np.float64), np.asarray(end, np.float64)

    order = np.r_[np.full(60, REFERENCE_SIZE), np.zeros(120)]
    _, end = impacts(order)  # the price before minute t is the end of minute t - 1
    assert report.post_fraction_1x == pytest.approx(end[119] / end[59], rel=1e-4)
    assert report.post_fraction_2x == pytest.approx(end[179] / end[59], rel=1e-4)
    mean, _ = impacts(np.full(240, REFERENCE_SIZE))  # the whole-day TWAP
    expected = mean.mean() / np.sqrt(REFERENCE_SIZE)
    assert report.twap_cost_over_sqrt_law == pytest.approx(expected, rel=1e-4)
    burst = np.zeros(180)
    burst[2:60:5] = 5 * REFERENCE_SIZE  # each at the middle minute of its five
    change = np.sum(burst * impacts(burst)[0]) / np.sum(order * impacts(order)[0]) - 1
    assert report.reslice_change == pytest.approx(change, abs=1e-4)
    assert report.reslice_change_se == pytest.approx(0.0, abs=1e-6)  # the same every day
    assert report.executed_fraction == pytest.approx(1.0)
    assert report.reslice_executed_fraction == pytest.approx(1.0)
    assert abs(report.reslice_change) < 0.01  # continuous-time consistent
    assert report.round_trip_bps < 0.0  # the buy's impact decays before the sell
    assert report.relaxation[0] == 0.0 and report.relaxation[60] == pytest.approx(1.0)


def test_several_windows_a_day_are_averaged_per_day_and_clustered_by_day():
    """The propagator on the cn sample's days (deterministic: each window's figures are
    its own): two windows a day give the mean of the two one-window reports' means, and
    the same window twice gives the one-window report exactly, standard errors included
    (they are over days, not over the doubled count of orders)."""
    cfg = load_config(None, [])
    splits = load_splits(cfg, "sample:cn_1min")
    static = cfg.env_params(MarketData.from_episodes(splits.train))
    params = PropagatorEnvParams.from_static(static, splits.stats, cfg.impact.params())

    def report(starts):
        return measure_impact(
            PropagatorExecutionEnv(), PropagatorMultiAgentEnv, params, market="propagator",
            dataset="cn_1min", duration=20, starts=starts, days=6, sizes=(0.01, 0.05, 0.2),
        )  # fmt: skip

    early, late, both = report((30,)), report((90,)), report((30, 90))
    compiled = _round_trip_program.cache_info()
    twice = report((30, 30))  # the round trip's window 30 is not compiled again
    assert _round_trip_program.cache_info().misses == compiled.misses
    assert (early.days, both.days, both.starts, twice.starts) == (6, 6, (30, 90), (30, 30))
    assert min(early.peak_sigma_se) > 0  # the days differ
    for name in ("participation", "peak_sigma"):
        mean = (np.asarray(getattr(early, name)) + np.asarray(getattr(late, name))) / 2
        np.testing.assert_allclose(getattr(both, name), mean, rtol=1e-6)
    assert both.round_trip_bps == pytest.approx((early.round_trip_bps + late.round_trip_bps) / 2)
    assert both.twap_cost_over_sqrt_law == early.twap_cost_over_sqrt_law  # the whole day
    one = dataclasses.asdict(early)
    assert dataclasses.asdict(twice) == {**one, "starts": (30, 30)}
    with pytest.raises(ValueError, match="start 200 \\+ 3 x 20 \\+ 1 minutes do not fit"):
        report((30, 200))
    with pytest.raises(ValueError, match="starts is empty"):
        report(())


def test_a_window_without_volume_is_left_out_of_the_participation_and_counted():
    """A data gap (no volume over one day's order minutes) has no Q/V: that order is left
    out of the participation mean and counted, and the other days' figures stand. The
    flat market's constant liquidity prices orders without the day's volume, so the
    report is otherwise the gapless one."""
    data = trend_market(n_episodes=3, n_slots=240, drift_per_minute=0.0, n_features=5)
    volume = np.diff(np.asarray(data.cum_volume), axis=1)
    volume[1, 30:90] = 0.0  # day 1: nothing traded over the order's 60 minutes
    gapped = data.replace(cum_volume=jnp.asarray(np.c_[np.zeros(3), np.cumsum(volume, 1)]))

    def report(market_data):
        params = PropagatorEnvParams(
            data=market_data, impact=FLAT.params(), return_std=jnp.float32(1.0),
            half_spread_bps=0.0,
        )  # fmt: skip
        return measure_impact(
            PropagatorExecutionEnv(), PropagatorMultiAgentEnv, params,
            market="propagator", dataset="flat", days=3, sizes=(0.01, 0.05, 0.2),
        )  # fmt: skip

    clean, with_gap = report(data), report(gapped)
    assert (clean.gap_windows, with_gap.gap_windows) == (0, 1)
    np.testing.assert_allclose(with_gap.participation, [0.01, 0.05, 0.2], rtol=1e-5)
    assert with_gap.peak_sigma == clean.peak_sigma
    assert with_gap.delta == pytest.approx(clean.delta, abs=1e-6)


def test_fitting_a_propagator_to_its_own_report_recovers_it(flat_report):
    fitted, rmse = fit_propagator(flat_report, PropagatorConfig())
    assert (fitted.kernel, fitted.beta, fitted.tau0) == ("power_law", FLAT.beta, FLAT.tau0)
    assert rmse < 1e-4
    assert fitted.delta == pytest.approx(0.5, abs=1e-4)
    assert fitted.y == pytest.approx(0.7, rel=1e-4) and fitted.reference_minutes == 60.0
    with pytest.raises(ValueError, match="delta 1.300"):
        fit_propagator(dataclasses.replace(flat_report, delta=1.3), PropagatorConfig())


def test_a_scripted_order_sends_what_its_child_orders_could_not_fill_the_next_minute():
    """In the cn sample's book (196 shares on the bids at its first minute) a burst of
    2,000 shares fills in part; the next minute, unscheduled, sends the rest of it, and
    the schedule's next slot (minute 2) its own share plus what is still left."""
    cfg = load_config(None, ["market.simulator=lob"])
    splits = load_splits(cfg, "sample:cn_1min")
    static = cfg.env_params(MarketData.from_episodes(splits.test))
    params = dynamic_env_params(cfg, calibrated_market(cfg, "sample:cn_1min"), static, splits.stats)
    params = params.replace(
        side=1.0, quantity_low=1.0, quantity_high=1.0, random_window=False,
        force_liquidation=False, participation_cap=1e9,
    )  # fmt: skip
    episodes = jnp.arange(2, dtype=jnp.int32)
    data = params.data  # Q = order_fraction x the window's expected volume x the size
    window = data.expected_day_volume[episodes] * data.cum_profile[episodes, 3]
    size = 2000.0 / (params.order_fraction * window)
    schedule = jnp.asarray([0.8, 0.0, 0.2], jnp.float32)
    key = jax.random.PRNGKey(0)
    out = jax.device_get(
        scripted_orders(DynamicExecutionEnv(), params, episodes, 0, 3, size, schedule, key)
    )
    q, filled = out["quantity"], out["exec_qty"]
    np.testing.assert_allclose(q, 2000.0, rtol=1e-4)
    assert (0 < filled[:, 0]).all() and (filled[:, 0] < 0.8 * q).all()  # the book ran out
    # minute 1's child order: the burst's rest, 0.8 Q less minute 0's fills
    assert (0 < filled[:, 1]).all() and (filled[:, 1] <= 0.8 * q - filled[:, 0] + 1).all()
    # minute 2's child order: all of Q less what minutes 0 and 1 filled
    assert (filled[:, 2] > 0).all()
    assert (filled[:, 2] <= q - filled[:, 0] - filled[:, 1] + 1).all()


@pytest.mark.slow
def test_order_book_report_runs_and_impact_grows_with_size():
    cfg = load_config(None, ["market.simulator=lob"])
    splits = load_splits(cfg, "sample:cn_1min")
    static = cfg.env_params(MarketData.from_episodes(splits.test))
    params = dynamic_env_params(cfg, calibrated_market(cfg, "sample:cn_1min"), static, splits.stats)
    report = measure_impact(
        DynamicExecutionEnv(), MultiAgentExecutionEnv, params,
        market="lob", dataset="cn_1min", duration=5, starts=(30,), days=4, sizes=(0.05, 0.5),
    )  # fmt: skip
    # from minute 30: at the open, two days of 5-minute orders moved the mid a tick or none
    assert report.peak_sigma[1] > report.peak_sigma[0] > 0.0
    assert all(se > 0.0 for se in report.peak_sigma_se) and report.delta_se > 0.0
    assert report.round_trip_bps < 0.0  # two spreads at least
    assert 0.0 < report.reslice_executed_fraction <= report.executed_fraction <= 1.0
    values = [report.delta, report.y, report.post_fraction_1x, report.twap_cost_over_sqrt_law]
    assert np.isfinite(values).all()
    # the same window twice: the second is a fresh draw of the book's randomness, so the
    # day means move (a replication), unlike the deterministic propagator's
    twice = measure_impact(
        DynamicExecutionEnv(), MultiAgentExecutionEnv, params,
        market="lob", dataset="cn_1min", duration=5, starts=(30, 30), days=4, sizes=(0.05, 0.5),
    )  # fmt: skip
    assert twice.starts == (30, 30) and twice.peak_sigma != report.peak_sigma


@pytest.mark.slow
def test_tiny_ppo_beats_twap_in_the_almgren_chriss_configuration():
    """The AC configuration (no decay, linear temporary impact, risk term; the reward is
    the mean-variance objective; kappa T = 20, where TWAP pays 9x the optimum): 30 PPO
    updates come within 10% of the optimal schedule's objective."""
    cfg = load_config(
        "configs/tiny.yaml",
        [
            "ppo.num_envs=64", "ppo.num_steps=30", "ppo.total_timesteps=57600",
            "ppo.gae_lambda=1.0", "ppo.lr=0.003", "network.action_prior=twap",
            "network.prior_anchor_steps=1000000.0", "run.num_seeds=1",
            "env.quantity_low=1.0", "env.quantity_high=1.0", "env.child_quantity=fixed",
            "env.half_spread_bps=0.0", "env.urgency=2.0", "env.participation_cap=1000000.0",
        ],
    )  # fmt: skip
    config = PropagatorConfig(
        kernel="constant", delta=1.0, y=0.0, permanent=0.0, temporary=0.1, liquidity="constant"
    )
    data = trend_market(n_episodes=8, n_slots=30, drift_per_minute=0.0, n_features=5)
    params = PropagatorEnvParams(
        data=data, impact=config.params(), return_std=jnp.float32(1.0), **cfg.env
    )
    env = PropagatorExecutionEnv(mean_variance_reward)
    trained = train_policy(cfg, env, params, params, progress=False)
    policy = make_ppo_policy(
        trained.network, cfg.ppo.normalize_obs, action_prior=cfg.network.prior()
    )

    def objective(policy, policy_params):
        out = rollout(env, policy, policy_params, params, jax.random.key(0))
        return float(-np.asarray(out.reward).sum(1).mean() / params.reward_scale)

    c = 0.05 * 30  # Q over the minute volume: order_fraction times the day's minutes
    schedule = optimal_schedule(np.ones((30, 30)), 0.0, 0.1 * c, 2.0 / 30)
    optimal = objective(schedule_policy, remaining_targets(schedule)[None])
    twap = objective(twap_policy, None)
    learned = objective(policy, trained.policy_params)
    assert optimal < learned < 1.1 * optimal < twap  # measured: 0.06% above the optimum
