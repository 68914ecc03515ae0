"""The linear propagator's optimal schedules: the slot kernel matrix against the kernel's
double integral, the KKT optimum against a numerical minimizer, the Almgren–Chriss and
Obizhaeva–Wang closed forms, bad inputs, and a schedule followed through the env."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest
from scipy.integrate import dblquad
from scipy.optimize import minimize

from serl_jax.baselines.optimal import (
    almgren_chriss_kappa_for,
    almgren_chriss_objective,
    almgren_chriss_schedule,
    obizhaeva_wang_cost,
    obizhaeva_wang_schedule,
    optimal_schedule,
    remaining_targets,
    schedule_objective,
    schedule_policy,
    slot_kernel_matrix,
    twap_schedule,
)
from serl_jax.envs.execution import EnvParams, ExecutionEnv
from serl_jax.envs.market_data import trend_market
from serl_jax.evaluation import rollout
from serl_jax.market.propagator import PropagatorConfig, power_law_exponentials

# A power-law-like kernel: fast, medium and slow exponentials.
THREE_WEIGHTS, THREE_RATES = [0.5, 0.3, 0.2], [2.0, 0.2, 0.01]


def _kernel(weights, rates):
    return lambda tau: sum(w * math.exp(-r * tau) for w, r in zip(weights, rates, strict=True))


def test_slot_kernel_matrix_is_the_kernel_averaged_over_both_slots():
    weights, rates = [0.35, 0.65], [0.02, 1.7]  # one rate on each side of the series cutoff
    kernel = _kernel(weights, rates)
    gamma = slot_kernel_matrix(weights, rates, 5)
    for i in range(5):
        for j in range(i + 1):
            if i == j:  # the kink at t = s: twice the smooth triangle s < t
                value = 2.0 * dblquad(lambda s, t: kernel(t - s), 0, 1, 0, lambda t: t)[0]
            else:
                value = dblquad(lambda s, t: kernel(t - s), i, i + 1, j, j + 1)[0]
            assert gamma[i, j] == pytest.approx(value, abs=1e-6, rel=1e-10)
            assert gamma[j, i] == gamma[i, j]


def test_slot_kernel_matrix_limits():
    np.testing.assert_allclose(slot_kernel_matrix([1.0], [0.0], 4), np.ones((4, 4)), atol=0)
    tiny = slot_kernel_matrix([1.0], [1e-12], 4)
    np.testing.assert_allclose(tiny, np.ones((4, 4)), rtol=0, atol=1e-11)
    # Both branches of the slot gains (series below r = 0.5) against the plain formulas,
    # which are accurate at r near 0.5.
    for rate in (0.5 - 1e-9, 0.5, 0.5 + 1e-9):
        g = -math.expm1(-rate) / rate
        m = (1.0 - g) / rate
        lags = np.abs(np.subtract.outer(np.arange(4), np.arange(4)))
        plain = np.where(lags == 0, 2.0 * m, g**2 * np.exp(-rate * (lags - 1.0)))
        np.testing.assert_allclose(slot_kernel_matrix([1.0], [rate], 4), plain, rtol=1e-14)
    # Why the positivity theorem of Alfonsi, Schied & Slynko does not carry over: slot
    # averages of a convex kernel are concave at lag 1.
    gamma = slot_kernel_matrix([1.0], [1e-3], 3)
    second_difference = gamma[0, 0] - 2.0 * gamma[0, 1] + gamma[0, 2]
    assert second_difference == pytest.approx(-1e-3 / 3.0 + 1e-6, rel=1e-3)


def _slsqp(gamma, transient, temporary, risk):
    """The reference optimum: SLSQP on sum(xi) = 1 with the analytic gradient."""
    size = gamma.shape[0]
    lower = np.tril(np.ones((size, size)))

    def objective(xi):
        return schedule_objective(xi, gamma, transient, temporary, risk)

    def gradient(xi):
        held = 1.0 - lower @ xi
        return transient * gamma @ xi + 2.0 * temporary * xi - 2.0 * risk * lower.T @ held

    result = minimize(
        objective,
        twap_schedule(size),
        jac=gradient,
        method="SLSQP",
        constraints=[{"type": "eq", "fun": lambda xi: xi.sum() - 1.0, "jac": np.ones_like}],
        options={"ftol": 1e-15, "maxiter": 1000},
    )
    assert result.success, result.message
    return result.x


@pytest.mark.parametrize(
    ("weights", "rates", "num_slots", "transient", "temporary", "risk"),
    [
        ([1.0], [0.3], 8, 1.0, 0.0, 0.0),  # Obizhaeva–Wang
        (THREE_WEIGHTS, THREE_RATES, 10, 1.0, 0.0, 0.0),  # power-law-like, risk neutral
        ([1.0], [0.0], 8, 0.7, 0.5, 0.1),  # Almgren–Chriss: constant kernel
        (THREE_WEIGHTS, THREE_RATES, 12, 1.0, 0.2, 0.05),  # all three terms
    ],
    ids=["obizhaeva_wang", "three_exponentials", "almgren_chriss", "mixed"],
)
def test_optimal_schedule_matches_a_numerical_minimizer(
    weights, rates, num_slots, transient, temporary, risk
):
    gamma = slot_kernel_matrix(weights, rates, num_slots)
    exact = optimal_schedule(gamma, transient, temporary, risk)
    reference = _slsqp(gamma, transient, temporary, risk)
    assert exact.sum() == pytest.approx(1.0, abs=1e-12)
    best = schedule_objective(exact, gamma, transient, temporary, risk)
    assert best == pytest.approx(
        schedule_objective(reference, gamma, transient, temporary, risk), rel=1e-7
    )
    assert best <= schedule_objective(reference, gamma, transient, temporary, risk) + 1e-14
    np.testing.assert_allclose(exact, reference, rtol=0, atol=1e-4)


def test_risk_neutral_optimum_is_the_normalized_inverse_kernel_row_sum():
    gamma = slot_kernel_matrix(THREE_WEIGHTS, THREE_RATES, 30)
    solved = np.linalg.solve(gamma, np.ones(30))
    np.testing.assert_allclose(
        optimal_schedule(gamma, 2.5, 0.0, 0.0), solved / solved.sum(), rtol=1e-10, atol=0
    )


def test_the_default_kernels_risk_neutral_optima_buy_back():
    """With e = u = 0 the slot optimum oscillates (xi_1 < 0) for the market's default
    decaying kernels; a temporary term makes it positive."""
    power_law = power_law_exponentials(
        PropagatorConfig.beta, PropagatorConfig.tau0, PropagatorConfig.num_exponentials
    )
    exponential = (np.ones(1), np.full(1, PropagatorConfig.resilience))
    for weights, rates in (power_law, exponential):
        gamma = slot_kernel_matrix(weights, rates, 30)
        risk_neutral = optimal_schedule(gamma, 1.0, 0.0, 0.0)
        assert risk_neutral[1] < 0 < risk_neutral[0]
        assert optimal_schedule(gamma, 1.0, 0.1, 1e-3).min() > 0
    constant = slot_kernel_matrix([1.0], [0.0], 30)
    assert optimal_schedule(constant, 1.0, 0.1, 1e-3).min() > 0


def test_almgren_chriss_closed_forms():
    num_slots, kappa, temporary = 12, 0.25, 0.5  # kappa T = 3
    risk = 2.0 * (math.cosh(kappa) - 1.0) * temporary
    assert almgren_chriss_kappa_for(temporary, risk) == pytest.approx(kappa, rel=1e-12)
    constant = slot_kernel_matrix([1.0], [0.0], num_slots)
    schedule = almgren_chriss_schedule(num_slots, kappa)
    np.testing.assert_allclose(
        optimal_schedule(constant, 0.7, temporary, risk), schedule, rtol=0, atol=1e-8
    )
    best = almgren_chriss_objective(num_slots, kappa, temporary, risk)
    # The constant kernel's transient term is the constant a/2: left out of the comparison.
    assert schedule_objective(schedule, constant, 0.0, temporary, risk) == pytest.approx(
        best, rel=1e-9
    )
    # At the optimum J collapses to the first slot's temporary cost.
    assert best == pytest.approx(temporary * schedule[0], rel=1e-12)

    # TWAP costs more by the closed forms' difference.
    twap = schedule_objective(twap_schedule(num_slots), constant, 0.0, temporary, risk)
    twap_closed = temporary / num_slots + risk * (num_slots - 1) * (2 * num_slots - 1) / (
        6 * num_slots
    )
    assert almgren_chriss_objective(num_slots, 0.0, temporary, risk) == pytest.approx(
        twap_closed, rel=1e-14
    )
    excess = twap - schedule_objective(schedule, constant, 0.0, temporary, risk)
    assert excess == pytest.approx(twap_closed - best, rel=1e-9)
    assert excess == pytest.approx(0.0408215, rel=1e-6)  # measured: TWAP 36.7% above AC


@pytest.mark.parametrize("num_slots", [1, 2, 12, 390])
@pytest.mark.parametrize("kappa_t", [0.0, 1e-9, 1e-5, 0.3, 1.0, 1.5, 20.0, 1e4, math.inf])
def test_almgren_chriss_objective_is_the_schedules_cost(num_slots, kappa_t):
    """Any kappa, not only the optimal one, across every branch of the closed form."""
    kappa = kappa_t / num_slots
    ones = np.ones((num_slots, num_slots))
    direct = schedule_objective(almgren_chriss_schedule(num_slots, kappa), ones, 0.0, 0.3, 0.07)
    assert almgren_chriss_objective(num_slots, kappa, 0.3, 0.07) == pytest.approx(direct, rel=1e-11)


def test_obizhaeva_wang_cost_is_the_fine_slot_limit():
    """Slots of 1/n minute: the continuous optimum's cost is a lower bound that the
    discretized schedule approaches as O(1/n); Richardson's extrapolation hits it."""
    resilience, duration = 0.75, 4.0  # rho T = 3
    cost = obizhaeva_wang_cost(resilience, duration)
    assert cost == pytest.approx(0.2)

    def fine(n):
        slots = int(duration * n)
        gamma = slot_kernel_matrix([1.0], [resilience / n], slots)
        form = obizhaeva_wang_schedule(slots, resilience / n)
        return gamma, schedule_objective(form, gamma, 1.0, 0.0, 0.0)

    gamma, coarse = fine(100)
    _, finer = fine(200)
    optimum = schedule_objective(optimal_schedule(gamma, 1.0, 0.0, 0.0), gamma, 1.0, 0.0, 0.0)
    assert cost < optimum < coarse < cost * (1 + 1.1e-3)  # measured 9.97e-4 above
    assert finer - cost == pytest.approx((coarse - cost) / 2, rel=1e-2)
    assert 2 * finer - coarse == pytest.approx(cost, rel=1e-5)


@pytest.mark.parametrize("rho_t", [2.0, 3.0, 4.0, 5.0])
def test_obizhaeva_wang_minute_form_is_near_the_discrete_optimum(rho_t):
    """Measured gaps (T = 240): 1.84e-4, 2.19e-4, 2.42e-4, 2.57e-4 of the optimum's cost."""
    num_slots = 240
    resilience = rho_t / num_slots
    gamma = slot_kernel_matrix([1.0], [resilience], num_slots)
    exact = optimal_schedule(gamma, 1.0, 0.0, 0.0)
    form = obizhaeva_wang_schedule(num_slots, resilience)
    assert form.sum() == pytest.approx(1.0, abs=1e-14)
    best = schedule_objective(exact, gamma, 1.0, 0.0, 0.0)
    gap = schedule_objective(form, gamma, 1.0, 0.0, 0.0) / best - 1.0
    assert 1e-4 < gap < 3e-4
    assert 0 < best / obizhaeva_wang_cost(resilience, num_slots) - 1.0 < 2e-3
    assert exact[1] < 0  # the exact optimum buys back; the minute form never does


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: optimal_schedule(np.ones((3, 4)), 1.0, 0.0, 0.0), "gamma"),
        (lambda: optimal_schedule(np.ones(3), 1.0, 0.0, 0.0), "gamma"),
        (lambda: optimal_schedule(np.triu(np.ones((3, 3))), 1.0, 0.1, 0.0), "gamma"),
        (lambda: optimal_schedule(np.ones((3, 3)), -1.0, 0.1, 0.0), "transient"),
        (lambda: optimal_schedule(np.ones((3, 3)), 1.0, -0.1, 0.0), "temporary"),
        (lambda: optimal_schedule(np.ones((3, 3)), 1.0, 0.1, float("nan")), "risk"),
        (lambda: optimal_schedule(np.ones((3, 3)), 1.0, 0.0, 0.0), "gamma: singular"),
        (lambda: optimal_schedule(np.zeros((3, 3)), 0.0, 0.0, 0.0), "gamma: singular"),
        (lambda: schedule_objective(np.ones(2), np.ones((3, 3)), 1.0, 0.0, 0.0), "xi"),
        (lambda: slot_kernel_matrix([1.0], [-0.1], 3), "rates"),
        (lambda: slot_kernel_matrix([0.5, 0.5], [0.1], 3), "weights and rates"),
        (lambda: slot_kernel_matrix([1.0], [0.1], 0), "num_slots"),
        (lambda: almgren_chriss_kappa_for(0.0, 0.0), "temporary and risk"),
        (lambda: almgren_chriss_objective(5, -1.0, 0.1, 0.1), "kappa"),
        (lambda: almgren_chriss_schedule(0, 0.1), "num_slots"),
        (lambda: obizhaeva_wang_schedule(5, -0.1), "resilience"),
        (lambda: obizhaeva_wang_cost(0.1, 0.0), "duration_minutes"),
        (lambda: remaining_targets([0.5, 0.4]), "sum to 1"),
    ],
)
def test_bad_inputs_name_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_a_one_slot_order_trades_at_once():
    assert optimal_schedule(np.ones((1, 1)), 0.0, 0.0, 0.0) == pytest.approx([1.0])
    assert obizhaeva_wang_schedule(1, 0.3) == pytest.approx([1.0])
    assert almgren_chriss_kappa_for(0.0, 1.0) == math.inf
    np.testing.assert_array_equal(almgren_chriss_schedule(4, math.inf), [1.0, 0.0, 0.0, 0.0])


def test_schedule_policy_realizes_the_schedule_in_the_env():
    num_slots = 12
    gamma = slot_kernel_matrix(THREE_WEIGHTS, THREE_RATES, num_slots)
    schedule = optimal_schedule(gamma, 1.0, 0.2, 0.05)
    assert schedule.min() > 0
    targets = remaining_targets(schedule)
    assert targets[-1] == 0.0
    np.testing.assert_allclose(targets[:-1], 1.0 - np.cumsum(schedule)[:-1], rtol=0, atol=1e-15)

    data = trend_market(n_episodes=2, n_slots=num_slots, drift_per_minute=0.0)
    params = EnvParams(data=data, participation_cap=1e6, quantity_low=1.0, quantity_high=1.0)
    env, key = ExecutionEnv(), jax.random.key(0)
    # one schedule for every episode, then one per episode (the second is TWAP)
    result = jax.device_get(rollout(env, schedule_policy, targets[None], params, key))
    realized = result.exec_qty / result.quantity[:, None]
    np.testing.assert_allclose(realized, np.broadcast_to(schedule, realized.shape), atol=1e-5)
    twap = remaining_targets(np.full(num_slots, 1.0 / num_slots))
    per_episode = jax.device_get(
        rollout(env, schedule_policy, np.stack([targets, twap]), params, key)
    )
    realized = per_episode.exec_qty / per_episode.quantity[:, None]
    np.testing.assert_allclose(realized[0], schedule, atol=1e-5)
    np.testing.assert_allclose(realized[1], 1.0 / num_slots, atol=1e-5)


@pytest.mark.parametrize("case", ["exponential", "power_law"])
def test_sell_only_optimum_matches_a_bounded_numerical_minimizer(case):
    """Without temporary impact the market's decaying kernels' exact optima buy back; the
    sell-only optimum is the bounded minimizer's, and it costs at least the unconstrained
    one."""
    num_slots = 30
    weights, rates = (
        ([1.0], [0.05]) if case == "exponential" else power_law_exponentials(0.5, 5, 10)
    )
    gamma = slot_kernel_matrix(weights, rates, num_slots)
    free = optimal_schedule(gamma, 1.0, 0.0, 0.0)
    assert free.min() < 0  # the reason for the constraint
    sell = optimal_schedule(gamma, 1.0, 0.0, 0.0, sell_only=True)
    assert sell.min() >= 0 and sell.sum() == pytest.approx(1.0)
    result = minimize(
        lambda xi: schedule_objective(xi, gamma, 1.0, 0.0, 0.0),
        np.full(num_slots, 1.0 / num_slots),
        method="SLSQP",
        bounds=[(0.0, 1.0)] * num_slots,
        constraints=[{"type": "eq", "fun": lambda xi: xi.sum() - 1.0}],
        options={"ftol": 1e-14, "maxiter": 1000},
    )
    objective = schedule_objective(sell, gamma, 1.0, 0.0, 0.0)
    assert objective == pytest.approx(result.fun, rel=1e-7)
    np.testing.assert_allclose(sell, result.x, atol=1e-4)
    assert objective >= schedule_objective(free, gamma, 1.0, 0.0, 0.0)
    # where the exact optimum sells everywhere, the constraint changes nothing
    positive = optimal_schedule(gamma, 1.0, 0.5, 0.0)
    assert positive.min() > 0
    np.testing.assert_allclose(optimal_schedule(gamma, 1.0, 0.5, 0.0, sell_only=True), positive)
