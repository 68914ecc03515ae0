"""The numerical optimum of the propagator market against the closed form, random starts
and the environment itself."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import minimize

from serl_jax import evaluate
from serl_jax.baselines.optimal import (
    linear_market,
    propagator_optimum,
    remaining_targets,
    schedule_objective,
    schedule_policy,
)
from serl_jax.baselines.static_optimum import (
    expected_schedule_cost,
    optimal_label,
    optimal_targets,
    static_optimum,
)
from serl_jax.data import load_market, sample_path
from serl_jax.envs.execution import EnvParams
from serl_jax.envs.market_data import MarketData, trend_market
from serl_jax.envs.propagator import PropagatorEnvParams, PropagatorExecutionEnv
from serl_jax.evaluation import rollout
from serl_jax.market.propagator import PropagatorConfig


def _schedule(targets: np.ndarray) -> np.ndarray:
    return -np.diff(np.concatenate([[1.0], targets]))


def u_shaped_market(num_slots: int = 40) -> MarketData:
    """Two days of one symbol whose expected volume is U-shaped (3x at the open and close)."""
    t = np.linspace(-1.0, 1.0, num_slots)
    profile = 1.0 + 2.0 * t**2
    profile /= profile.sum()
    data = trend_market(n_episodes=2, n_slots=num_slots, drift_per_minute=0.0)
    return data.replace(volume_profile=jnp.asarray(np.stack([profile, profile]), jnp.float32))


@pytest.mark.parametrize("kernel", ["exponential", "power_law"])
def test_linear_constant_liquidity_optimum_is_the_closed_form(kernel):
    """delta = 1 and constant liquidity: the minimizer of the scanned market's cost is
    the KKT solution on the slot kernel matrix, and its J is the closed form's plus the
    permanent part's constant gamma X/V / 2."""
    config = PropagatorConfig(kernel=kernel, delta=1.0, liquidity="constant", temporary=0.02)
    params = EnvParams(data=trend_market(n_episodes=2, n_slots=40), order_fraction=0.05)
    found = static_optimum(config, params)
    exact = propagator_optimum(config, params)
    np.testing.assert_allclose(found.targets, exact, atol=2e-6)
    gamma, transient, temporary, risk = linear_market(config, params)
    closed = schedule_objective(_schedule(exact[0]), gamma, transient[0], temporary[0], risk)
    constant = 0.5 * config.permanent * 0.05
    assert found.objective[0] == pytest.approx(closed + constant, rel=1e-6)
    assert found.objective[0] < found.twap[0]


def test_concave_optimum_is_reached_from_random_starts_and_beats_twap_and_vwap():
    """The default (delta = 0.5) market with expected liquidity: the optimum obeys the
    participation cap in every slot, costs less than TWAP and the volume-proportional
    schedule, and SLSQP from random feasible starts finds no better schedule."""
    config = PropagatorConfig(liquidity="expected")
    data = u_shaped_market()
    params = EnvParams(data=data, order_fraction=0.05, participation_cap=0.2)
    found = static_optimum(config, params)
    schedule = _schedule(found.targets[0])
    profile = np.asarray(data.volume_profile[0], np.float64)
    upper = 0.2 * profile / 0.05
    assert schedule.min() >= 0.0 and np.all(schedule <= upper + 1e-9)
    assert found.objective[0] < found.volume_proportional[0] < found.twap[0]
    assert found.objective[0] < 0.99 * found.volume_proportional[0]
    np.testing.assert_array_equal(found.targets[0], found.targets[1])  # one solve, two days

    with jax.enable_x64(True):
        impact = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), config.params())
        participation = jnp.asarray(0.05 / profile)
        value_and_grad = jax.jit(
            jax.value_and_grad(
                lambda xi: expected_schedule_cost(xi, participation, 0.05, 0.0, impact)
            )
        )

        def fun(xi):
            value, grad = value_and_grad(jnp.asarray(xi))
            return float(value), np.asarray(grad)

        assert fun(schedule)[0] == pytest.approx(found.objective[0], rel=1e-7)  # f32 profile
        rng = np.random.default_rng(0)
        for _ in range(3):
            start = np.minimum(rng.dirichlet(np.ones(len(profile))), upper)
            start /= start.sum()  # upper sums to 4: still feasible after one rescale
            result = minimize(
                fun, start, jac=True, method="SLSQP",
                bounds=list(zip(np.zeros_like(upper), upper, strict=True)),
                constraints=[{"type": "eq", "fun": lambda xi: xi.sum() - 1.0}],
                options={"ftol": 1e-13, "maxiter": 1000},
            )  # fmt: skip
            assert result.success
            assert result.fun >= found.objective[0] - 1e-9


@pytest.fixture(scope="module")
def cn_market():
    return load_market(sample_path("cn_1min"))


def _flat_price_market(market, **settings) -> PropagatorEnvParams:
    """The cn sample's test days in the expected-liquidity propagator market, with a flat
    replayed price (so that the notional weighs every share alike, as J does) and no
    spread."""
    data = MarketData.from_episodes(market.split("test"))
    static = EnvParams(
        data=data.replace(price=jnp.full_like(data.price, 10.0)),
        order_fraction=0.05,
        half_spread_bps=0.0,
        quantity_low=1.0,
        quantity_high=1.0,
        **settings,
    )
    config = PropagatorConfig(liquidity="expected")
    return PropagatorEnvParams.from_static(static, market.stats, config.params())


def _charged_bps(params, targets) -> np.ndarray:
    """Each order's spread-and-impact cost in the env, bps."""
    env, key = PropagatorExecutionEnv(), jax.random.key(0)
    out = jax.device_get(rollout(env, schedule_policy, targets, params, key))
    return (1.0 - np.asarray(out.notional, np.float64) / out.replayed_notional) * 1e4


@pytest.mark.parametrize(
    "cap, penalty_bps", [(10.0, 10.0), (0.2, 10.0), (0.2, 0.0)], ids=["no-cap", "cap", "free"]
)
def test_the_environment_charges_the_optimum_its_objective(cn_market, cap, penalty_bps):
    """Rolled out in the env, every order's cost is sigma_day * J: without a binding cap
    (TWAP too), within the 20% cap, and with a free forced block (no penalty), where the
    optimum leaves part of the order to the last minute's block above the cap."""
    params = _flat_price_market(cn_market, participation_cap=cap, force_penalty_bps=penalty_bps)
    found = static_optimum(PropagatorConfig(liquidity="expected"), params)
    sigma_bps = np.asarray(params.data.sigma, np.float64) * np.sqrt(params.data.num_slots) * 1e4
    charged = _charged_bps(params, found.targets)
    np.testing.assert_allclose(charged, sigma_bps * found.objective, rtol=5e-4)  # f32 env
    assert np.all(found.objective < found.volume_proportional)
    last = found.targets[:, -2]  # held before the last minute: its share of the order
    profile = np.asarray(params.data.volume_profile[:, -1], np.float64)
    above_cap = last > cap * profile / 0.05 + 1e-6
    if cap > 1.0:
        twap = remaining_targets(np.full(params.data.num_slots, 1.0 / params.data.num_slots))
        np.testing.assert_allclose(
            _charged_bps(params, twap[None]), sigma_bps * found.twap, rtol=5e-4
        )
    else:  # the block pays only where it is free
        assert above_cap.all() if penalty_bps == 0.0 else not above_cap.any()


def test_optimal_targets_dispatch_and_label():
    params = EnvParams(data=trend_market(n_episodes=1, n_slots=20), order_fraction=0.05)
    linear = PropagatorConfig(delta=1.0, liquidity="constant")
    np.testing.assert_array_equal(
        optimal_targets(linear, params), propagator_optimum(linear, params)
    )
    concave = PropagatorConfig(liquidity="expected")
    np.testing.assert_array_equal(
        optimal_targets(concave, params), static_optimum(concave, params).targets
    )
    assert optimal_label(concave) == "optimal"
    assert optimal_label(PropagatorConfig()) == "optimal static"  # realized volumes


def test_evaluate_scores_the_optimum_in_the_propagator_market(capsys):
    """``--policy optimal`` in the default (concave) market with expected liquidity: it
    saves more of TWAP's spread-and-impact cost than VWAP on the same orders, and where
    the market uses realized volumes it is named the optimal static schedule."""
    argv = ["--data", "sample:cn_1min", "--env", "propagator", "--json", "--policy", "vwap",
            "--policy", "optimal"]  # fmt: skip
    assert evaluate.main([*argv, "impact.liquidity=expected"]) == 0
    rows = {r["policy"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    optimal, vwap = rows["optimal"]["shortfall_vs_TWAP"], rows["VWAP"]["shortfall_vs_TWAP"]
    assert optimal["ci_low"] > vwap["ci_high"] and vwap["value"] > 0
    assert evaluate.main([*argv, "--policy", "twap"]) == 0
    names = {json.loads(r)["policy"] for r in capsys.readouterr().out.splitlines()}
    assert "optimal static" in names


def test_bad_inputs_are_one_line_errors():
    data = trend_market(n_episodes=1, n_slots=20)
    with pytest.raises(ValueError, match="env.random_window"):
        static_optimum(PropagatorConfig(), EnvParams(data=data, random_window=True))
    thin = EnvParams(data=data, order_fraction=0.05, participation_cap=0.01,
                     force_liquidation=False)  # fmt: skip
    with pytest.raises(ValueError, match="env.participation_cap=0.01"):
        static_optimum(PropagatorConfig(), thin)
