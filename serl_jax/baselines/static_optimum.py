"""The optimal static schedule of any propagator market, by numerical minimization.

:mod:`serl_jax.baselines.optimal` solves the linear propagator market with constant
liquidity in closed form. The default market is neither: its response is concave
(``delta = 0.5``) and it measures participation against each minute's volume. This module
minimizes the same market's expected cost over whole-day schedules known before the day
(static schedules), for any kernel, exponent and liquidity.

A parent order of ``X`` shares over ``T`` one-minute slots trades ``xi_t >= 0`` of it in
slot ``t`` (``sum xi = 1``) at a constant rate; ``x_t = 1 - sum_{s<=t} xi_s`` is the
fraction held after the slot. With ``m_t(xi)`` the mean impact a share traded in slot
``t`` pays (:func:`~serl_jax.market.propagator.schedule_impacts`: transient, permanent
and temporary parts, in units of ``sigma_day``; participation ``xi_t X / v_t``, the
permanent part's shares ``xi_t X / V``) the objective is::

    J(xi) = sum_t xi_t m_t(xi)  +  u sum_t x_t^2        (units of sigma_day, per unit X)

``u = urgency / T``, the risk term of
:func:`~serl_jax.envs.execution.mean_variance_reward` (0 for a risk-neutral order). The
half-spread is the same for every schedule and is left out. ``v_t`` is the minute's
liquidity as the market defines it (:func:`~serl_jax.envs.propagator.minute_liquidity`),
except that ``realized`` volumes are replaced by their expectation (the training volume
profile times the expected day volume): a static schedule cannot know them. With
``liquidity = expected`` or ``constant`` the market's impact is a deterministic function
of the schedule, and the replayed prices do not depend on it, so the minimizer is the
optimum of the expected cost over all schedules, adaptive ones included; with
``realized`` volumes it is the best schedule fixed before the day.

The minimization is SLSQP (:func:`scipy.optimize.minimize`, float64) over the simplex
with the participation cap as an upper bound per slot (``participation_cap * v_t / X``),
with the gradient from JAX. With ``force_liquidation`` one more variable ``b >= 0`` is the
forced last slot's trade above the cap, which pays ``force_penalty_bps`` on top of its
impact, as the market charges it
(:func:`~serl_jax.envs.propagator.forced_block_penalty`). For ``delta < 1`` the problem
need not be convex, so it starts from both TWAP and the volume-proportional schedule and
keeps the better; the tests check that random starts reach the same cost. With
``delta = 1`` and constant liquidity it reproduces
:func:`~serl_jax.baselines.optimal.optimal_schedule`.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from scipy.optimize import minimize

from serl_jax.baselines.optimal import propagator_optimum, remaining_targets
from serl_jax.envs.execution import EnvParams
from serl_jax.market.propagator import PropagatorConfig, PropagatorParams, schedule_impacts

__all__ = [
    "StaticOptimum",
    "expected_schedule_cost",
    "optimal_label",
    "optimal_targets",
    "static_optimum",
]

# SLSQP's stopping tolerances on J (units of sigma_day; J is ~0.1 for a day's 5%), tried in
# turn from where the last stopped: near the optimum the rounding of J can exceed a line
# search's gain at 1e-13 ("positive directional derivative", seen with XLA's unoptimized
# builds), and the looser one then confirms the point. 240-390-slot problems converge in
# 15-25 iterations.
_TOLERANCES = (1e-13, 1e-11)
_MAX_ITERATIONS = 2000


@dataclasses.dataclass(frozen=True)
class StaticOptimum:
    """Each episode's optimal static schedule (:func:`static_optimum`).

    Attributes:
        targets: ``float64[N, T]`` the remaining fraction after each slot, for
            :func:`~serl_jax.baselines.optimal.schedule_policy` (last 0).
        objective: ``float64[N]`` the optimum's ``J`` (module docstring), sigma_day.
        twap: ``float64[N]`` TWAP's ``J`` under the same liquidity, sigma_day.
        volume_proportional: ``float64[N]`` ``J`` of the schedule proportional to the
            liquidity ``v_t`` (VWAP's, with expected volumes), sigma_day.
    """

    targets: np.ndarray
    objective: np.ndarray
    twap: np.ndarray
    volume_proportional: np.ndarray


def expected_schedule_cost(
    schedule: jax.Array,
    participation: jax.Array,
    day_share: float,
    risk: float,
    impact: PropagatorParams,
) -> jax.Array:
    """``J(xi)`` of one schedule (module docstring), differentiable in ``schedule``.

    Args:
        schedule: ``float[T]`` fractions of the order per slot (``xi``).
        participation: ``float[T]`` ``X / v_t``, the order over each slot's liquidity
            (a schedule trading all of it in slot ``t`` participates at this rate).
        day_share: ``X / V``, the order over the expected day volume (the permanent part).
        risk: ``u >= 0``, the weight of the held fractions' squares.
        impact: the propagator.

    Returns:
        scalar ``J`` in units of sigma_day, the dtype of ``schedule``.
    """
    mean, _ = schedule_impacts(
        (schedule * participation)[None], (schedule * day_share)[None], impact
    )
    held = 1.0 - jnp.cumsum(schedule)
    return jnp.dot(schedule, mean[0]) + risk * jnp.dot(held, held)


# J and its gradient in the schedule; compiled once per shape (not per problem)
_cost_and_grad = jax.jit(jax.value_and_grad(expected_schedule_cost))


def _solve(
    participation, upper, day_share, risk, impact, block_penalty, starts
) -> tuple[np.ndarray, float]:
    """SLSQP from each start; the best schedule and its ``J``.

    The variables are the slots' fractions within the cap and, when ``block_penalty`` is
    not None, ``b >= 0``: the forced last slot's fraction above the cap, which pays
    ``block_penalty * b`` (sigma_day) on top of its impact."""
    participation = jnp.asarray(participation, jnp.float64)
    blocks = block_penalty is not None

    def fun(z):
        xi = z[:-1].copy() if blocks else z
        if blocks:
            xi[-1] += z[-1]
        value, grad = _cost_and_grad(
            jnp.asarray(xi, jnp.float64), participation, day_share, risk, impact
        )
        grad = np.asarray(grad, np.float64)
        if not blocks:
            return float(value), grad
        return float(value) + block_penalty * z[-1], np.append(grad, grad[-1] + block_penalty)

    bounds = list(zip(np.zeros_like(upper), upper, strict=True)) + ([(0.0, 1.0)] if blocks else [])
    best, best_value = None, np.inf
    for start in starts:
        z = np.append(start, 1.0 - start.sum()) if blocks else start
        for tolerance in _TOLERANCES:
            result = minimize(
                fun,
                z,
                jac=True,
                method="SLSQP",
                bounds=bounds,
                constraints=[{"type": "eq", "fun": lambda z: z.sum() - 1.0, "jac": np.ones_like}],
                options={"ftol": tolerance, "maxiter": _MAX_ITERATIONS},
            )
            z = result.x
            if result.success:
                break
        else:
            raise RuntimeError(f"static_optimum: SLSQP did not converge: {result.message}")
        z = np.clip(z, 0.0, None)
        z /= z.sum()
        value = fun(z)[0]
        if value < best_value:
            best, best_value = z, value
    if blocks:  # the block joins the last slot's trade
        best = np.concatenate([best[:-2], [best[-2] + best[-1]]])
    return best, best_value


def _feasible(weights: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """``weights`` normalized to sum 1 and moved inside ``[0, upper]``: the excess of
    capped slots is spread over the others in proportion; what no slot can take (``upper``
    summing to less than 1) is left out, for the forced block."""
    schedule = weights / weights.sum()
    for _ in range(len(schedule)):
        over = schedule > upper
        free = ~over & (schedule < upper)
        if not over.any() or not free.any():
            break
        excess = (schedule[over] - upper[over]).sum()
        schedule = np.where(over, upper, schedule)
        schedule[free] += excess * schedule[free] / schedule[free].sum()
    return np.minimum(schedule, upper)


def static_optimum(config: PropagatorConfig, params: EnvParams) -> StaticOptimum:
    """Every episode's optimal static schedule in the propagator market of ``config``.

    One SLSQP solve (two starts) per distinct problem: episodes share one when they share
    the volume profile, the liquidity floor and the volatility (a symbol's days), since
    ``X`` scales with the expected day volume.

    Args:
        config: the propagator's settings.
        params: the environment over N whole-day episodes (``order_fraction``,
            ``participation_cap``, ``force_liquidation``, ``urgency`` and the data's
            volume profile, expected day volume and mean minute volume).

    Returns:
        :class:`StaticOptimum` over the N episodes.

    Raises:
        ValueError: random sub-windows (``env.random_window``), or a participation cap
            under which no schedule completes the order before the last slot without
            ``env.force_liquidation``.
        RuntimeError: the minimization did not converge.
    """
    if params.random_window:
        raise ValueError("optimal: needs whole-day orders, got env.random_window=true")
    data = params.data
    num_slots = data.num_slots
    profile = np.asarray(data.volume_profile, np.float64)
    day_volume = np.asarray(data.expected_day_volume, np.float64)
    mean_minute = np.asarray(data.mean_minute_volume, np.float64)
    sigma_day = np.asarray(data.sigma, np.float64) * np.sqrt(num_slots)
    risk = float(params.urgency) / num_slots
    solved: dict[bytes, tuple[np.ndarray, float, float, float]] = {}
    rows = []
    with jax.enable_x64(True):
        impact = jax.tree.map(lambda a: jnp.asarray(a, jnp.float64), config.params())
        for n in range(profile.shape[0]):
            floor = config.liquidity_floor * mean_minute[n] / day_volume[n]
            if config.liquidity == "constant":
                liquidity = np.full(num_slots, mean_minute[n] / day_volume[n])
            else:  # expected volumes, also for a realized-liquidity market
                liquidity = np.maximum(profile[n], floor)
            day_share = float(params.order_fraction) * profile[n].sum()
            block_penalty = None  # forced_block_penalty, per unit of the order in sigma_day
            if params.force_liquidation:
                block_penalty = float(params.force_penalty_bps) * 1e-4 / sigma_day[n]
            key = np.concatenate([liquidity, [day_share, block_penalty or 0.0]])
            key = key.round(15).tobytes()
            if key not in solved:
                participation = day_share / liquidity  # liquidity in units of V
                upper = np.minimum(float(params.participation_cap) * liquidity / day_share, 1.0)
                if upper.sum() < 1.0 and not params.force_liquidation:
                    raise ValueError(
                        f"optimal: env.participation_cap={params.participation_cap} lets a "
                        f"schedule trade only {upper.sum():.3g} of the order "
                        "(env.force_liquidation=false)"
                    )
                twap = np.full(num_slots, 1.0 / num_slots)
                proportional = liquidity / liquidity.sum()
                starts = [_feasible(twap, upper), _feasible(proportional, upper)]
                schedule, value = _solve(
                    participation, upper, day_share, risk, impact, block_penalty, starts
                )
                references = [
                    float(
                        _cost_and_grad(jnp.asarray(xi), participation, day_share, risk, impact)[0]
                    )
                    for xi in (twap, proportional)
                ]
                solved[key] = (schedule, value, *references)
            rows.append(solved[key])
    return StaticOptimum(
        targets=np.stack([remaining_targets(row[0]) for row in rows]),
        objective=np.array([row[1] for row in rows]),
        twap=np.array([row[2] for row in rows]),
        volume_proportional=np.array([row[3] for row in rows]),
    )


def optimal_targets(config: PropagatorConfig, params: EnvParams) -> np.ndarray:
    """Every episode's optimal schedule in the propagator market of ``config``, as
    remaining-fraction targets ``float64[N, T]`` for
    :func:`~serl_jax.baselines.optimal.schedule_policy`: the closed form
    (:func:`~serl_jax.baselines.optimal.propagator_optimum`) for a linear market with
    constant liquidity, else :func:`static_optimum`.

    Raises:
        ValueError, RuntimeError: as :func:`static_optimum`.
    """
    if config.delta == 1.0 and config.liquidity == "constant":
        return propagator_optimum(config, params)
    return static_optimum(config, params).targets


def optimal_label(config: PropagatorConfig) -> str:
    """The row name of :func:`optimal_targets`' policy: ``optimal``, or ``optimal static``
    where the market's realized volumes would let an adaptive schedule do better."""
    return "optimal static" if config.liquidity == "realized" else "optimal"
