"""Classic execution schedules as target remaining fractions (pure JAX, jittable, vmappable).

Every schedule gives the fraction of the parent order that should still be held *after*
executing step ``step`` of a ``T``-step window (``step = 0 .. T-1``): in the notation of
Almgren & Chriss (2000) with holdings ``x_k`` (``x_0 = X``, ``x_T = 0``), the value at
``step`` is ``x_{step+1} / X``. So it starts just below 1 (``1 − 1/T`` for TWAP after the
first step) and is exactly 0 after the last step. ``step < 0`` (nothing executed yet) gives 1
and ``step >= T - 1`` gives 0.

Inputs may be Python scalars or arrays that broadcast against each other; outputs are
floating arrays (float32 unless float64 inputs are used with ``jax_enable_x64``). Nothing
here uses Python control flow on values, so all functions work under ``jax.jit`` and
``jax.vmap``, with ``window_len`` either static or traced.

To turn a target into the environment's action (fraction of the *current* inventory to
trade) use :func:`action_from_target`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import Array
from jax.typing import ArrayLike

__all__ = [
    "action_from_target",
    "almgren_chriss_kappa",
    "almgren_chriss_remaining",
    "cost_optimal_quantities",
    "twap_remaining",
    "vwap_remaining",
]

# Below this value of κT the sinh ratio is evaluated by its Taylor expansion
# (error O((κT)^4) ≈ 1e-16, below float64 resolution); above it by exponentials.
_SMALL_KAPPA_T = 1e-4


def _float_dtype(*xs: ArrayLike) -> jnp.dtype:
    return jnp.result_type(jnp.float32, *xs)


def twap_remaining(step: ArrayLike, window_len: ArrayLike) -> Array:
    """TWAP target remaining fraction after executing step ``step``: ``(T − step − 1) / T``.

    Equal slices of ``1/T`` per step. Clipped to ``[0, 1]``, so ``step >= T − 1`` gives
    exactly 0 and ``step < 0`` gives 1.

    Args:
        step: int, any shape; the step just executed (``0 .. T−1``).
        window_len: int ``T >= 1`` (steps in the window), broadcastable against ``step``.

    Returns:
        Float array of the broadcast shape, in ``[0, 1]``.
    """
    dtype = _float_dtype()
    t = jnp.asarray(window_len).astype(dtype)
    s = jnp.asarray(step).astype(dtype)
    return jnp.clip((t - s - 1.0) / t, 0.0, 1.0)


def vwap_remaining(step: ArrayLike, profile: ArrayLike) -> Array:
    """VWAP target remaining fraction: ``1 − cumsum(profile)[step] / sum(profile)``.

    Trades in proportion to an expected intraday volume profile (estimated on training days
    only, by the caller). The profile need not be normalized; negative entries are treated
    as 0, and a profile summing to 0 falls back to the uniform profile (TWAP). The value after
    the last step is exactly 0; ``step < 0`` gives 1 and ``step > T − 1`` gives 0.

    Args:
        step: int, shape broadcastable to ``profile.shape[:-1]`` (e.g. scalar for a single
            profile ``[T]``, or ``[B]`` for profiles ``[B, T]``).
        profile: float ``[..., T]`` expected volume per step of the window (any units).

    Returns:
        Float array of shape ``broadcast(step.shape, profile.shape[:-1])``, in ``[0, 1]``.
    """
    profile = jnp.asarray(profile)
    profile = jnp.maximum(profile.astype(_float_dtype(profile)), 0.0)
    window = profile.shape[-1]
    step = jnp.asarray(step)
    batch = jnp.broadcast_shapes(step.shape, profile.shape[:-1])

    cumulative = jnp.cumsum(profile, axis=-1)
    total = cumulative[..., -1:]
    has_volume = total > 0
    # Remaining after each step as ``(total − cumsum) / total``: the cumsum of non-negative
    # terms is non-decreasing and ends at ``total``, so the curve is non-increasing and its
    # last entry is exactly 0.
    steps_left = jnp.arange(window - 1, -1, -1, dtype=profile.dtype)
    left = jnp.where(
        has_volume,
        (total - cumulative) / jnp.where(has_volume, total, 1.0),
        steps_left / window,
    )
    left = jnp.broadcast_to(left, (*batch, window))
    idx = jnp.broadcast_to(jnp.clip(step, 0, window - 1), batch).astype(jnp.int32)
    left_at = jnp.take_along_axis(left, idx[..., None], axis=-1)[..., 0]
    remaining = jnp.where(jnp.broadcast_to(step, batch) < 0, 1.0, left_at)
    return jnp.clip(remaining, 0.0, 1.0)


def almgren_chriss_kappa(risk_aversion: ArrayLike, sigma: ArrayLike, eta: ArrayLike) -> Array:
    """Urgency ``κ`` of the discrete-time Almgren–Chriss schedule (one step per period).

    Almgren & Chriss (2000), "Optimal execution of portfolio transactions", J. Risk 3(2),
    optimal trajectories with period length ``τ = 1`` step and no permanent impact (``γ = 0``, so
    ``η̃ = η``): ``κ̃² = λσ²/η`` and ``(2/τ²)(cosh(κτ) − 1) = κ̃²``, i.e.

        κ = arccosh(1 + κ̃²/2),

    evaluated as ``log1p(u + sqrt(u(u + 2)))`` with ``u = κ̃²/2`` (accurate for small ``u``).
    ``κ → 0`` as ``λ → 0`` (TWAP); ``η = 0`` gives ``κ = inf`` (trade everything at once).

    Units must be consistent; ``κ`` (per step) depends only on ``λσ²/η``. The normalized
    convention used here: prices in units of the arrival price (so ``σ`` is the standard
    deviation of one step's return), quantities in units of the parent order ``X`` (so
    ``X = 1``), ``η`` the temporary impact as a return per unit trading rate (fraction of
    ``X`` per step), and ``λ`` the risk aversion per unit of variance of the order's cost in
    those units (cost measured in arrival-price × ``X``). For a per-share impact model
    ``Δp/p = η_env · q / v`` at volume ``v`` per step, ``η = η_env · X / v``.

    Args:
        risk_aversion: ``λ >= 0``, any shape.
        sigma: per-step volatility ``σ >= 0``, broadcastable.
        eta: temporary-impact coefficient ``η >= 0``, broadcastable.

    Returns:
        ``κ >= 0`` per step, float, broadcast shape. Negative inputs are outside the model and
        give ``nan`` (values are not checked, so the function stays jittable).
    """
    dtype = _float_dtype(risk_aversion, sigma, eta)
    lam = jnp.asarray(risk_aversion, dtype)
    sig = jnp.asarray(sigma, dtype)
    eta = jnp.asarray(eta, dtype)
    kappa_tilde_sq = lam * sig**2 / eta
    u = 0.5 * kappa_tilde_sq
    return jnp.log1p(u + jnp.sqrt(u * (u + 2.0)))


def almgren_chriss_remaining(step: ArrayLike, window_len: ArrayLike, kappa: ArrayLike) -> Array:
    """Almgren–Chriss target remaining fraction ``sinh(κ(T − step − 1)) / sinh(κT)``.

    The optimal holdings ``x_k = X sinh(κ(T − k)) / sinh(κT)`` of Almgren & Chriss (2000)
    in discrete time with ``τ = 1``, evaluated at ``k = step + 1``. With
    ``a = T − step − 1`` and ``b = T`` the ratio is computed as

        sinh(κa) / sinh(κb) = exp(κ(a − b)) · expm1(−2κa) / expm1(−2κb),

    which never overflows for large ``κT`` and keeps full relative precision for small ``κ``;
    for ``κT < 1e-4`` the Taylor form ``(a/b)(1 + κ²(a² − b²)/6)`` is used, so ``κ = 0`` gives
    TWAP exactly and gradients stay finite. ``κ = inf`` executes everything in the first
    step. Clipped to ``[0, 1]``: ``step >= T − 1`` gives exactly 0 and ``step < 0`` gives 1.

    Args:
        step: int, any shape; the step just executed (``0 .. T−1``).
        window_len: int ``T >= 1``, broadcastable against ``step``.
        kappa: urgency ``κ >= 0`` per step (see :func:`almgren_chriss_kappa`), broadcastable.

    Returns:
        Float array of the broadcast shape, in ``[0, 1]``; non-increasing in ``step`` and, for
        fixed ``step``, non-increasing in ``κ``.
    """
    dtype = _float_dtype(kappa)
    kappa = jnp.asarray(kappa, dtype)
    b = jnp.asarray(window_len).astype(dtype)
    s = jnp.asarray(step).astype(dtype)
    a = jnp.clip(b - s - 1.0, 0.0, b)

    small = kappa * b < _SMALL_KAPPA_T
    # Double-`where` so neither branch sees values that produce nan (or nan gradients).
    k_big = jnp.where(small, 1.0, kappa)
    k_small = jnp.where(small, kappa, 0.0)
    ratio_big = (
        jnp.exp(jnp.where(a < b, k_big * (a - b), 0.0))
        * jnp.expm1(-2.0 * k_big * a)
        / jnp.expm1(-2.0 * k_big * b)
    )
    ratio_big = jnp.where(a > 0, ratio_big, 0.0)
    ratio_small = (a / b) * (1.0 + k_small**2 * (a**2 - b**2) / 6.0)
    ratio = jnp.where(small, ratio_small, ratio_big)
    return jnp.clip(ratio, 0.0, 1.0)


def cost_optimal_quantities(
    liquidity: ArrayLike,
    forced: ArrayLike,
    quantity: ArrayLike,
    half_spread_bps: ArrayLike,
    impact_eta_bps: ArrayLike,
    impact_exponent: ArrayLike,
    participation_cap: ArrayLike,
    force_penalty_bps: ArrayLike,
    iterations: int = 50,
) -> Array:
    """The child orders that execute ``quantity`` at the least cost, given every slot's volume.

    The static market charges ``q (h + η (q/L)^k)`` (bps of the price, ``h`` the half spread,
    ``η`` the impact coefficient, ``k`` its exponent, ``L`` the slot's liquidity) with
    ``q <= cap · L``, and on a forced slot ``q (h + p + η (q/L)^k)`` without the cap
    (:class:`serl_jax.envs.ExecutionEnv`). The costs are convex, so the optimum equalizes
    the marginal cost ``λ`` (Karush–Kuhn–Tucker): ``q = L ((λ - h) / ((1 + k) η))^(1/k)``,
    capped, on ordinary slots and ``q = L ((λ - h - p) / ((1 + k) η))^(1/k)`` on forced
    ones; ``λ`` is found by bisection so that ``Σ q = quantity``. Without a cap or forced
    slot this is ``q ∝ L``, the volume-proportional schedule. Prices are taken as equal
    across slots (they differ by a fraction of a percent within a day).

    Args:
        liquidity: ``[..., T]`` volume of each slot (0 outside the window: nothing trades
            there), shares; a forced slot's liquidity as the env computes it.
        forced: ``[..., T]`` bool, the forced last slot of the window (all False when the
            env does not force liquidation).
        quantity: ``[...]`` shares to execute, ``>= 0``.
        half_spread_bps, impact_eta_bps, impact_exponent, participation_cap, force_penalty_bps:
            the env's cost model (:class:`serl_jax.envs.EnvParams`; scalars, traced or
            not; ``impact_exponent > 0``).
        iterations: bisection steps (50 halvings reach float32 resolution).

    Returns:
        ``[..., T]`` float32 shares per slot summing to ``quantity`` (less when the caps
        cannot absorb it and no slot is forced).

    Raises:
        ValueError: a concrete ``impact_exponent <= 0`` (linear costs have corner solutions).
    """
    if isinstance(impact_exponent, int | float) and impact_exponent <= 0:
        raise ValueError(
            f"cost_optimal_quantities: impact_exponent must be > 0, got {impact_exponent}"
        )
    liquidity = jnp.maximum(jnp.asarray(liquidity, jnp.float32), 0.0)
    forced = jnp.asarray(forced, bool)
    quantity = jnp.asarray(quantity, jnp.float32)
    h = jnp.asarray(half_spread_bps, jnp.float32)
    p = jnp.asarray(force_penalty_bps, jnp.float32)
    k = jnp.asarray(impact_exponent, jnp.float32)
    slope = (1.0 + k) * jnp.asarray(impact_eta_bps, jnp.float32)
    cap = jnp.where(forced, jnp.inf, participation_cap * liquidity)
    offset = jnp.where(forced, h + p, h)

    def fills(lam):
        rate = (jnp.maximum(lam[..., None] - offset, 0.0) / slope) ** (1.0 / k)
        return jnp.minimum(liquidity * rate, cap)

    # At the upper bracket a single slot of the least liquidity absorbs everything.
    smallest = jnp.min(jnp.where(liquidity > 0, liquidity, jnp.inf), axis=-1)
    high = h + p + slope * (quantity / jnp.where(jnp.isfinite(smallest), smallest, 1.0)) ** k
    low = jnp.broadcast_to(h, high.shape)

    def bisect(_, bracket):
        low, high = bracket
        mid = 0.5 * (low + high)
        enough = fills(mid).sum(-1) >= quantity
        return jnp.where(enough, low, mid), jnp.where(enough, mid, high)

    _, high = jax.lax.fori_loop(0, iterations, bisect, (low, high))
    q = fills(high)
    total = q.sum(-1, keepdims=True)
    # Rescale the last bisection error away (never above a cap: only shrinks it).
    return jnp.where(total > quantity[..., None], q * quantity[..., None] / total, q)


def action_from_target(remaining: ArrayLike, target_remaining: ArrayLike) -> Array:
    """Converts a target remaining fraction into the env action (fraction of inventory).

    ``a = (remaining − target) / remaining`` clipped to ``[0, 1]``: the share of the current
    inventory to trade so that the holdings reach the target this step (catching up when
    behind schedule, trading nothing when ahead). Returns 0 when nothing remains.

    Args:
        remaining: current inventory as a fraction of the parent order, ``I_t / I_0``.
        target_remaining: schedule value after this step (e.g. from :func:`twap_remaining`).

    Returns:
        Action in ``[0, 1]``, float, broadcast shape.
    """
    dtype = _float_dtype(remaining, target_remaining)
    remaining = jnp.asarray(remaining, dtype)
    target = jnp.asarray(target_remaining, dtype)
    has_inventory = remaining > 0
    action = (remaining - target) / jnp.where(has_inventory, remaining, 1.0)
    return jnp.where(has_inventory, jnp.clip(action, 0.0, 1.0), 0.0)
