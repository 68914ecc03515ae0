"""Optimal execution schedules of the linear propagator market, and a policy that follows one.

The propagator market (:mod:`serl_jax.market.propagator`) with ``delta = 1`` and constant
minute volume ``v`` prices a schedule in closed form. A parent order of ``X`` shares is
executed over ``T`` one-minute slots; ``xi_i >= 0`` is the fraction of ``X`` traded in slot
``i`` (``i = 0 .. T-1``, ``sum xi = 1``) at a constant rate within the slot, and
``x_i = 1 - sum_{j<=i} xi_j`` the fraction still held after slot ``i`` (``x_{T-1} = 0``).
The kernel is a sum of exponentials ``G(tau) = sum_k w_k exp(-r_k tau)`` (``tau`` in
minutes, ``sum w = 1``, ``r_k >= 0`` per minute). The expected cost in units of
``sigma_day`` (times ``X`` and the price; the market multiplies by sigma elsewhere) is::

    J(xi) = a (1/2) xi^T Gamma xi  +  e sum_i xi_i^2  +  u sum_i x_i^2  (+ a constant)

- ``Gamma_ij`` is ``G(|t - s|)`` averaged over ``t`` in slot ``i`` and ``s`` in slot ``j``
  (:func:`slot_kernel_matrix`): the discrete propagator of Gatheral (2010),
  "No-dynamic-arbitrage and market impact", Quant. Finance 10(7), and Alfonsi, Schied &
  Slynko (2012), "Order book resilience, price manipulations, and the positive portfolio
  problem", SIAM J. Financial Math. 3, whose block trades ``Gamma_ij = G(|t_i - t_j|)``
  become slot averages for constant-rate slots. ``a >= 0`` is the transient amplitude
  times ``X / v``.
- ``e >= 0`` is the temporary (instantaneous) impact times ``X / v``.
- ``u >= 0`` weighs the risk term ``sum x_i^2`` (``lambda sigma^2`` of Almgren & Chriss
  2000, "Optimal execution of portfolio transactions", J. Risk 3(2)).
- A linear permanent part only adds a constant (each slot pays half its own impact), so
  it is not part of ``J``.

Special cases: Almgren & Chriss (2000) (``a = 0`` or a constant kernel, whose ``Gamma`` is
all ones; :func:`almgren_chriss_schedule`), Obizhaeva & Wang (2013), "Optimal trading
strategy and supply/demand dynamics", J. Financial Markets 16 (one exponential, ``e = u =
0``; :func:`obizhaeva_wang_schedule`), and TWAP. :func:`optimal_schedule` solves any kernel
exactly. Everything here is NumPy float64 on the host, computed once per configuration;
:func:`schedule_policy` turns a result into a JAX policy for
:func:`serl_jax.evaluation.rollout`.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from scipy.linalg import toeplitz
from scipy.special import factorial

from serl_jax.baselines.policies import _remaining_fraction
from serl_jax.baselines.schedules import (
    action_from_target,
    almgren_chriss_kappa,
    almgren_chriss_remaining,
)
from serl_jax.envs.execution import EnvParams, EnvState
from serl_jax.market.propagator import PropagatorConfig

__all__ = [
    "almgren_chriss_kappa_for",
    "almgren_chriss_objective",
    "almgren_chriss_schedule",
    "obizhaeva_wang_cost",
    "obizhaeva_wang_schedule",
    "optimal_schedule",
    "linear_market",
    "propagator_optimum",
    "remaining_targets",
    "schedule_objective",
    "schedule_policy",
    "slot_kernel_matrix",
    "twap_schedule",
]

# Below this rate the slot gains are summed as Taylor series (16 terms reach 1e-20 at
# r = 0.5), where (1 - g)/r would cancel; above it the closed forms lose < 1e-15.
_SERIES_RATE = 0.5
_SERIES_TERMS = 16
# Below this kappa * T the Almgren–Chriss sums are TWAP's (relative error (kappa T)^2).
_TWAP_KAPPA_T = 1e-8
# A bordered KKT matrix (objective scaled to max 1) more ill-conditioned than this has no
# unique optimum: the objective is flat along some schedule of zero total.
_MAX_CONDITION = 1e12


def _slot_gains(rates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``g = (1 - exp(-r))/r`` and ``m = (1 - g)/r`` (1 and 1/2 at ``r = 0``), float64.

    ``g`` is a slot's mean of ``exp(-r tau)`` over its own minute and ``m`` the mean over
    the triangle ``s < t`` of one minute (``int_0^1 int_0^t exp(-r (t - s)) ds dt``). For
    ``r < 0.5`` the series ``g = sum_n (-r)^n/(n+1)!`` and ``m = sum_n (-r)^n/(n+2)!``.
    """
    small = rates < _SERIES_RATE
    safe = np.where(small, 1.0, rates)
    g_direct = -np.expm1(-safe) / safe
    m_direct = (1.0 - g_direct) / safe
    n = np.arange(_SERIES_TERMS)
    powers = (-np.where(small, rates, 0.0)[:, None]) ** n
    g_series = (powers / factorial(n + 1)).sum(-1)
    m_series = (powers / factorial(n + 2)).sum(-1)
    return np.where(small, g_series, g_direct), np.where(small, m_series, m_direct)


def slot_kernel_matrix(weights, rates, num_slots: int) -> np.ndarray:
    """The slot-averaged kernel matrix ``Gamma`` of constant-rate one-minute slots.

    ``Gamma_ij`` is ``G(|t - s|)`` averaged over ``t`` in slot ``i`` and ``s`` in slot
    ``j``, for ``G(tau) = sum_k w_k exp(-r_k tau)`` (Alfonsi, Schied & Slynko 2012 with
    slot averages in place of block trades). With ``g_k, m_k`` of the module's slot gains::

        Gamma_ij = sum_k w_k exp(-r_k (|i - j| - 1)) g_k^2   (i != j)
        Gamma_ii = 2 sum_k w_k m_k

    so ``(1/2) xi^T Gamma xi = sum_i xi_i sum_{j<=i} M_ij xi_j`` is the transient cost of
    :mod:`serl_jax.market.propagator` per unit amplitude. A kernel with ``r = 0`` (no decay)
    gives the all-ones matrix. Slots of ``h`` minutes: pass ``rates * h`` (time in slots).

    Args:
        weights: ``float[K]`` the exponentials' weights (``sum w = 1`` for ``G(0) = 1``).
        rates: ``float[K]`` their decay rates, per minute, finite and ``>= 0``.
        num_slots: ``T >= 1``.

    Returns:
        ``float64[T, T]`` symmetric Toeplitz matrix, in units of the kernel.

    Raises:
        ValueError: ``weights`` and ``rates`` not 1-D of one length ``K >= 1``, a rate
            negative or not finite, or ``num_slots < 1``.
    """
    weights = np.asarray(weights, np.float64)
    rates = np.asarray(rates, np.float64)
    if weights.ndim != 1 or weights.shape != rates.shape or weights.size == 0:
        raise ValueError(
            f"slot_kernel_matrix: weights and rates must be 1-D of one length K >= 1, got "
            f"shapes {weights.shape} and {rates.shape}"
        )
    if not np.all(np.isfinite(rates) & (rates >= 0)):
        raise ValueError(f"slot_kernel_matrix: rates must be finite and >= 0, got {rates}")
    if num_slots < 1:
        raise ValueError(f"slot_kernel_matrix: num_slots must be >= 1, got {num_slots}")
    g, m = _slot_gains(rates)
    gaps = np.arange(num_slots - 1, dtype=np.float64)  # |i - j| - 1 for |i - j| >= 1
    off_diagonal = (weights * g**2 * np.exp(-np.outer(gaps, rates))).sum(-1)
    return toeplitz(np.concatenate([[2.0 * np.dot(weights, m)], off_diagonal]))


def _check_problem(caller: str, gamma, transient, temporary, risk) -> np.ndarray:
    """``gamma`` as float64 after the argument checks shared by the objective and solver."""
    gamma = np.asarray(gamma, np.float64)
    if gamma.ndim != 2 or gamma.shape[0] != gamma.shape[1] or gamma.shape[0] == 0:
        raise ValueError(f"{caller}: gamma must be a non-empty square matrix, got {gamma.shape}")
    if not np.allclose(gamma, gamma.T, rtol=1e-12, atol=0.0):
        raise ValueError(f"{caller}: gamma must be symmetric (Gamma = M + M^T)")
    for name, value in (("transient", transient), ("temporary", temporary), ("risk", risk)):
        if not value >= 0:  # also refuses nan
            raise ValueError(f"{caller}: {name} must be >= 0, got {value}")
    return gamma


def schedule_objective(xi, gamma, transient: float, temporary: float, risk: float) -> float:
    """The linear propagator cost ``J(xi)`` of a schedule, without its constant.

    ``J = a (1/2) xi^T Gamma xi + e sum_i xi_i^2 + u sum_{i=0}^{T-1} x_i^2`` with
    ``x_i = 1 - sum_{j<=i} xi_j`` (module docstring: Alfonsi, Schied & Slynko 2012 for the
    transient term, Almgren & Chriss 2000 for the other two).

    Args:
        xi: ``float[T]`` fraction of the order traded in each slot.
        gamma: ``float[T, T]`` slot kernel matrix (:func:`slot_kernel_matrix`).
        transient: ``a >= 0``, the transient amplitude times ``X / v``.
        temporary: ``e >= 0``, the temporary impact times ``X / v``.
        risk: ``u >= 0``, the weight of the held fractions' squares.

    Returns:
        ``J`` in units of ``sigma_day`` (times ``X`` and the price), a float.

    Raises:
        ValueError: a non-square or asymmetric ``gamma``, ``xi`` not of length ``T``, or a
            negative coefficient (naming it).
    """
    gamma = _check_problem("schedule_objective", gamma, transient, temporary, risk)
    xi = np.asarray(xi, np.float64)
    if xi.shape != gamma.shape[:1]:
        raise ValueError(
            f"schedule_objective: xi must have shape {gamma.shape[:1]}, got {xi.shape}"
        )
    held = 1.0 - np.cumsum(xi)
    return float(0.5 * transient * xi @ gamma @ xi + temporary * xi @ xi + risk * held @ held)


def optimal_schedule(
    gamma, transient: float, temporary: float, risk: float, sell_only: bool = False
) -> np.ndarray:
    """The exact minimizer of :func:`schedule_objective` over ``sum xi = 1`` (and, with
    ``sell_only``, ``xi >= 0``).

    ``J = xi^T Q xi - 2 u c^T xi + const`` with ``Q = (a/2) Gamma + e I + u L^T L``,
    ``L`` the lower-triangular ones (``x = 1 - L xi``) and ``c = L^T 1``; its stationary
    point on the constraint solves the Karush–Kuhn–Tucker system::

        [2Q  1] [xi    ]   [2 u c]
        [1^T 0] [lambda] = [1    ]

    (``numpy.linalg.solve``, float64). With ``e = u = 0`` this is ``Gamma^-1 1 / (1^T
    Gamma^-1 1)``, the risk-neutral optimum of Alfonsi, Schied & Slynko (2012).

    No sign constraint is imposed, and ``xi`` can be negative (buying back). Alfonsi,
    Schied & Slynko prove the risk-neutral optimum nonnegative for convex nonincreasing
    kernels sampled at block-trade times, but the slot averages of a decaying kernel are
    not convex at lag 1 (``Gamma_00 - 2 Gamma_01 + Gamma_02 = -r/3 + O(r^2)`` for one
    exponential), and the optimum oscillates at both ends: with ``e = u = 0`` the
    market's default exponential (``rho = 0.05``) and power-law kernels give ``xi_1 < 0``
    after a large ``xi_0`` (``T = 30``: 0.374 then -0.082, and 0.230 then -0.021). A
    temporary term (``e = 0.1``) makes them positive, and a constant kernel with ``e > 0``
    gives the positive Almgren–Chriss schedule. The env's policies cannot buy back
    (:func:`schedule_policy`): ``sell_only`` adds ``xi >= 0`` and solves the quadratic
    program by a primal active set (Nocedal & Wright 2006, "Numerical Optimization",
    Algorithm 16.3): the KKT system on the free slots, slots that go negative fixed at 0,
    a fixed slot freed again while its multiplier is negative.

    Args:
        gamma: ``float[T, T]`` symmetric slot kernel matrix (:func:`slot_kernel_matrix`).
        transient: ``a >= 0``, the transient amplitude times ``X / v``.
        temporary: ``e >= 0``, the temporary impact times ``X / v``.
        risk: ``u >= 0``, the weight of the held fractions' squares.
        sell_only: constrain every slot to ``xi >= 0``.

    Returns:
        ``float64[T]`` fractions of the order per slot, summing to 1.

    Raises:
        ValueError: a non-square or asymmetric ``gamma``, a negative coefficient (naming
            it), or a singular system (``J`` not strictly convex on ``sum xi = 1``, e.g.
            a constant kernel with ``e = u = 0``).
    """
    gamma = _check_problem("optimal_schedule", gamma, transient, temporary, risk)
    num_slots = gamma.shape[0]
    lower = np.tril(np.ones((num_slots, num_slots)))
    hessian = transient * gamma + 2.0 * temporary * np.eye(num_slots) + 2.0 * risk * lower.T @ lower
    gradient_shift = 2.0 * risk * lower.sum(0)
    # Scaling the objective leaves the optimum unchanged and makes the condition number
    # measure the problem's degeneracy rather than the coefficients' units.
    scale = np.abs(hessian).max() or 1.0
    ones = np.ones((num_slots, 1))
    kkt = np.block([[hessian / scale, ones], [ones.T, np.zeros((1, 1))]])
    rhs = np.concatenate([gradient_shift / scale, [1.0]])
    condition = np.linalg.cond(kkt)
    if not condition < _MAX_CONDITION:
        raise ValueError(
            f"optimal_schedule: gamma: singular system (condition {condition:.3g}): J is not "
            "strictly convex on sum(xi) = 1; add a temporary or risk term"
        )
    if not sell_only:
        return np.linalg.solve(kkt, rhs)[:num_slots]
    return _active_set(hessian / scale, gradient_shift / scale)


def _active_set(hessian: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """``argmin xi^T H xi / 2 - shift^T xi`` over ``sum xi = 1, xi >= 0`` (``H`` positive
    definite on ``sum xi = 0``): :func:`optimal_schedule`'s ``sell_only`` solve."""
    num_slots = hessian.shape[0]
    free = np.ones(num_slots, bool)
    for _ in range(4 * num_slots):
        idx = np.flatnonzero(free)
        ones = np.ones((idx.size, 1))
        kkt = np.block([[hessian[np.ix_(idx, idx)], ones], [ones.T, np.zeros((1, 1))]])
        solution = np.linalg.solve(kkt, np.concatenate([shift[idx], [1.0]]))
        xi = np.zeros(num_slots)
        xi[idx] = solution[:-1]
        if xi[idx].min() < -1e-12:
            free[idx[xi[idx] < -1e-12]] = False  # these slots sell nothing
            continue
        multiplier = hessian @ xi - shift + solution[-1]  # >= 0 where fixed at 0
        fixed = np.flatnonzero(~free)
        if fixed.size == 0 or multiplier[fixed].min() >= -1e-12:
            return np.maximum(xi, 0.0)
        free[fixed[np.argmin(multiplier[fixed])]] = True
    raise ValueError("optimal_schedule: sell_only: the active set did not settle")


def twap_schedule(num_slots: int) -> np.ndarray:
    """Equal slices: ``float64[T]`` all ``1/T`` (Almgren–Chriss with ``kappa = 0``)."""
    return np.full(num_slots, 1.0 / num_slots)


def almgren_chriss_kappa_for(temporary: float, risk: float) -> float:
    """The urgency ``kappa`` per slot that makes Almgren–Chriss optimal for ``e`` and ``u``.

    ``2 (cosh kappa - 1) = u / e`` (Almgren & Chriss 2000 with ``tau = 1``: ``eta-tilde =
    e`` because a constant-rate slot pays half its own permanent impact, so no ``-gamma
    tau / 2`` correction), from :func:`serl_jax.baselines.schedules.almgren_chriss_kappa`
    with ``lambda = u``, ``sigma = 1``, ``eta = e``, in float64.

    Args:
        temporary: ``e >= 0``.
        risk: ``u >= 0``.

    Returns:
        ``kappa >= 0`` per slot; ``inf`` when ``e = 0 < u`` (trade all at once).

    Raises:
        ValueError: a negative coefficient, or ``e = u = 0`` (every schedule is optimal).
    """
    for name, value in (("temporary", temporary), ("risk", risk)):
        if not value >= 0:
            raise ValueError(f"almgren_chriss_kappa_for: {name} must be >= 0, got {value}")
    if temporary == 0 and risk == 0:
        raise ValueError("almgren_chriss_kappa_for: temporary and risk are both 0: no optimum")
    if temporary == 0:
        return math.inf
    with jax.enable_x64(True):
        return float(almgren_chriss_kappa(np.float64(risk), 1.0, np.float64(temporary)))


def _check_kappa(caller: str, num_slots: int, kappa: float) -> None:
    if num_slots < 1:
        raise ValueError(f"{caller}: num_slots must be >= 1, got {num_slots}")
    if not kappa >= 0:
        raise ValueError(f"{caller}: kappa must be >= 0, got {kappa}")


def almgren_chriss_schedule(num_slots: int, kappa: float) -> np.ndarray:
    """The Almgren–Chriss schedule: holdings ``sinh(kappa (T - k)) / sinh(kappa T)`` after
    the ``k``-th slot (Almgren & Chriss 2000), as fractions traded per slot.

    Differences of :func:`serl_jax.baselines.schedules.almgren_chriss_remaining`,
    evaluated in float64. It minimizes :func:`schedule_objective` for a constant kernel
    (or ``a = 0``) when ``kappa = almgren_chriss_kappa_for(e, u)``.

    Args:
        num_slots: ``T >= 1``.
        kappa: urgency ``>= 0`` per slot (0: TWAP; ``inf``: all in the first slot).

    Returns:
        ``float64[T]`` fractions per slot, positive and non-increasing, summing to 1.

    Raises:
        ValueError: ``num_slots < 1`` or ``kappa`` negative or nan.
    """
    _check_kappa("almgren_chriss_schedule", num_slots, kappa)
    with jax.enable_x64(True):
        remaining = almgren_chriss_remaining(np.arange(num_slots), num_slots, np.float64(kappa))
        remaining = np.asarray(remaining, np.float64)
    return -np.diff(remaining, prepend=1.0)


def _sinh_ratio(a: float, b: float) -> float:
    """``sinh(a) / sinh(b)`` for ``0 <= a <= b``, ``b > 0``, without overflow."""
    return math.exp(a - b) * math.expm1(-2.0 * a) / math.expm1(-2.0 * b)


def _almgren_chriss_sums(num_slots: int, kappa: float) -> tuple[float, float]:
    """``(sum_k n_k^2, sum_k x_k^2)`` of the Almgren–Chriss schedule, in closed form.

    With ``S_m = sinh(kappa m)``, ``x_k = S_{T-k} / S_T`` and ``n_k = x_{k-1} - x_k``:

    - ``S_{m+1} - S_m = 2 sinh(kappa/2) cosh(kappa (m + 1/2))``, and
      ``sum_{m<T} cosh((2m + 1) kappa) = sinh(2 kappa T) / (2 sinh kappa)``, so
      ``sum n^2 = tanh(kappa/2) / tanh(kappa T) + 2T (sinh(kappa/2) / S_T)^2``;
    - ``sum_{m=1}^{T-1} sinh^2(kappa m) = (sinh((2T - 1) kappa) - (2T - 1) sinh kappa) /
      (4 sinh kappa)`` (from ``sinh^2 = (cosh 2y - 1)/2`` and the same cosh sum). For
      ``kappa T <= 1`` the numerator is the series ``sum_j (A^(2j+1) - A) kappa^(2j+1) /
      (2j+1)!`` (``A = 2T - 1``, positive terms: no cancellation); above, it and ``S_T^2``
      are scaled by ``exp(-2 kappa T)``: with ``q = exp(-2 kappa)``, ``Q = exp(-2 kappa T)``,
      ``sum x^2 = ((q - Q^2)/(1 - q) - A Q) / (1 - Q)^2``.

    ``kappa T < 1e-8`` gives TWAP's ``(1/T, (T - 1)(2T - 1)/(6T))``.
    """
    t = float(num_slots)
    if kappa * t < _TWAP_KAPPA_T:
        return 1.0 / t, (t - 1.0) * (2.0 * t - 1.0) / (6.0 * t)
    trades = math.tanh(kappa / 2.0) / math.tanh(kappa * t)
    trades += 2.0 * t * _sinh_ratio(kappa / 2.0, kappa * t) ** 2
    span = 2.0 * t - 1.0
    if kappa * t <= 1.0:
        odd = np.arange(3, 3 + 2 * 12, 2)  # (A kappa)^25 / 25! < 1e-17 for A kappa <= 2
        numerator = np.sum(((span * kappa) ** odd - span * kappa**odd) / factorial(odd))
        held = numerator / (4.0 * math.sinh(kappa) * math.sinh(kappa * t) ** 2)
    else:
        q, big_q = math.exp(-2.0 * kappa), math.exp(-2.0 * kappa * t)
        held = ((q - big_q**2) / -math.expm1(-2.0 * kappa) - span * big_q) / math.expm1(
            -2.0 * kappa * t
        ) ** 2
    return trades, float(held)


def almgren_chriss_objective(num_slots: int, kappa: float, temporary: float, risk: float) -> float:
    """``J`` of :func:`almgren_chriss_schedule` for a constant kernel (or ``a = 0``), in
    closed form: ``e sum_k n_k^2 + u sum_k x_k^2`` (hyperbolic sums of
    ``_almgren_chriss_sums``), any ``kappa``.

    At the optimal ``kappa`` (:func:`almgren_chriss_kappa_for`) summation by parts with
    ``e (x_{k-1} - 2 x_k + x_{k+1}) = u x_k`` collapses it to ``e n_1 = e (1 - S_{T-1} /
    S_T)``, the temporary cost of the first slot alone. TWAP (``kappa = 0``) costs
    ``e / T + u (T - 1)(2T - 1) / (6T)``.

    Args:
        num_slots: ``T >= 1``.
        kappa: urgency ``>= 0`` per slot (``inf``: all in the first slot, costing ``e``).
        temporary: ``e >= 0``.
        risk: ``u >= 0``.

    Returns:
        ``J`` without its constant (the constant kernel's ``a/2``), a float.

    Raises:
        ValueError: ``num_slots < 1``, ``kappa`` negative or nan, or a negative
            coefficient.
    """
    _check_kappa("almgren_chriss_objective", num_slots, kappa)
    for name, value in (("temporary", temporary), ("risk", risk)):
        if not value >= 0:
            raise ValueError(f"almgren_chriss_objective: {name} must be >= 0, got {value}")
    if math.isinf(kappa):
        return float(temporary)
    trades, held = _almgren_chriss_sums(num_slots, kappa)
    return temporary * trades + risk * held


def obizhaeva_wang_schedule(num_slots: int, resilience: float) -> np.ndarray:
    """The Obizhaeva–Wang optimum in minute slots (Obizhaeva & Wang 2013).

    In continuous time, for ``G(tau) = exp(-rho tau)`` and no other cost, the optimum
    trades a block ``X/(rho T + 2)`` at the start, the rate ``rho X/(rho T + 2)`` over
    ``[0, T]`` and a block ``X/(rho T + 2)`` at the end: the transient impact jumps to
    ``X/(rho T + 2)`` and stays there. Here slot 0 takes the first block plus a minute of
    the rate, slots ``1 .. T-2`` the rate, slot ``T-1`` the rate plus the last block. Its
    ``J`` is within 0.03% of the exact discrete optimum of :func:`optimal_schedule` for
    one exponential (measured for ``T = 240``, ``rho T`` in [2, 5]: 0.018% to 0.026%),
    which oscillates in the first and last few slots (negative ``xi_1``) and is not a
    long-only schedule; both cost 0.1-0.2% more than the continuous optimum
    (:func:`obizhaeva_wang_cost`) at these settings.

    Args:
        num_slots: ``T >= 1``.
        resilience: ``rho >= 0``, per minute.

    Returns:
        ``float64[T]`` fractions per slot, summing to 1.

    Raises:
        ValueError: ``num_slots < 1`` or ``resilience`` negative or not finite.
    """
    if num_slots < 1:
        raise ValueError(f"obizhaeva_wang_schedule: num_slots must be >= 1, got {num_slots}")
    if not 0 <= resilience < math.inf:
        raise ValueError(
            f"obizhaeva_wang_schedule: resilience must be finite and >= 0, got {resilience}"
        )
    block = 1.0 / (resilience * num_slots + 2.0)
    xi = np.full(num_slots, resilience * block)
    xi[0] += block
    xi[-1] += block
    return xi


def obizhaeva_wang_cost(resilience: float, duration_minutes: float) -> float:
    """The continuous-time Obizhaeva–Wang optimum's cost, ``1 / (rho T + 2)``.

    Per unit ``X^2`` and unit amplitude, in the units where a block of size ``y`` alone
    costs ``y^2/2`` (``(1/2) int int G(|t - s|) dX_t dX_s``; the transient term of
    :func:`schedule_objective` with ``a = 1``). Derivation (Obizhaeva & Wang 2013): with
    ``c = X/(rho T + 2)`` the impact is ``c`` from the first block on (the rate ``rho c``
    balances the decay ``rho c``); the first block costs ``c^2/2``, the rate ``rho c * c * T``,
    the last block ``c * c + c^2/2``, in all ``c^2 (rho T + 2) = X^2 / (rho T + 2)``. It is
    the infimum over all strategies, so any slot schedule costs at least this.

    Args:
        resilience: ``rho >= 0``, per minute.
        duration_minutes: ``T > 0``, minutes.

    Returns:
        The cost, a float in ``(0, 1/2]``.

    Raises:
        ValueError: ``resilience < 0`` or ``duration_minutes <= 0``.
    """
    if not resilience >= 0:
        raise ValueError(f"obizhaeva_wang_cost: resilience must be >= 0, got {resilience}")
    if not duration_minutes > 0:
        raise ValueError(
            f"obizhaeva_wang_cost: duration_minutes must be > 0, got {duration_minutes}"
        )
    return 1.0 / (resilience * duration_minutes + 2.0)


def remaining_targets(schedule) -> np.ndarray:
    """Remaining-fraction targets after each slot of a schedule: ``1 - cumsum(xi)``.

    What :func:`serl_jax.baselines.schedules.action_from_target` follows (the convention
    of :mod:`serl_jax.baselines.schedules`: the value at ``step`` is the fraction held
    after executing it).

    Args:
        schedule: ``float[T]`` fractions per slot, summing to 1.

    Returns:
        ``float64[T]``, the last entry exactly 0 (the rounding of the sum dropped).

    Raises:
        ValueError: ``schedule`` not 1-D and non-empty, or its sum not 1 (to 1e-9).
    """
    schedule = np.asarray(schedule, np.float64)
    if schedule.ndim != 1 or schedule.size == 0:
        raise ValueError(f"remaining_targets: schedule must be 1-D, got shape {schedule.shape}")
    if not abs(schedule.sum() - 1.0) <= 1e-9:
        raise ValueError(f"remaining_targets: schedule must sum to 1, got {schedule.sum()}")
    targets = 1.0 - np.cumsum(schedule)
    targets[-1] = 0.0
    return targets


def schedule_policy(targets, key: jax.Array, obs, state: EnvState, params: EnvParams):
    """Follows precomputed whole-day schedules, one per episode (a policy for
    :func:`serl_jax.evaluation.rollout`, with the schedules as its parameters).

    Like the other baselines (:mod:`serl_jax.baselines.policies`) it reads the state,
    ignores the observation, and catches up when the participation cap held it back. It
    never buys back: a target above the current holdings (a negative slot of the
    schedule) trades nothing, and the next slots catch up, so it realizes a schedule
    exactly only if every slot is ``>= 0``.

    Args:
        targets: ``float32[N, T]`` the remaining fraction after each step of episode
            ``n``'s whole-day window (:func:`remaining_targets`; last 0), the policy's
            parameters; one row broadcasts to every episode.
        key, obs: unused.
        state: the episode's state (``episode``, ``time``, inventory and quantity).
        params: unused.

    Returns:
        float32 action: the fraction of the current inventory that reaches the target.
    """
    del key, obs, params
    targets = jnp.asarray(targets, jnp.float32)
    row = jnp.minimum(state.episode, targets.shape[0] - 1)
    target = targets[row, jnp.clip(state.time, 0, targets.shape[1] - 1)]
    return action_from_target(_remaining_fraction(state), target)


def propagator_optimum(config: PropagatorConfig, params: EnvParams) -> np.ndarray:
    """Every episode's optimal whole-day schedule in a linear propagator market, as
    remaining-fraction targets for :func:`schedule_policy`.

    The market of ``config`` with ``delta = 1`` and constant liquidity prices a schedule
    by :func:`schedule_objective` with ``a = A c``, ``e = eta c`` (``c = Q / v``: the
    order over the training mean minute volume) and ``u = urgency / T`` (the risk term
    of :func:`~serl_jax.envs.execution.mean_variance_reward`; 0 for a risk-neutral
    order), all in units of ``sigma_day`` (the permanent part and the half-spread are
    the same for every schedule). The optimum is :func:`optimal_schedule` with
    ``sell_only``, one solve per distinct ``c``.

    Args:
        config: the propagator's settings.
        params: the environment's parameters over N episodes (whole-day orders of
            ``order_fraction`` times the expected day volume, ``urgency``).

    Returns:
        ``float64[N, T]`` targets.

    Raises:
        ValueError: a market that is not linear with constant liquidity
            (:func:`linear_market`).
    """
    gamma, transient, temporary, risk = linear_market(config, params)
    solved: dict[tuple[float, float], np.ndarray] = {}
    rows = []
    for a, e in zip(transient, temporary, strict=True):
        key = (round(float(a), 12), round(float(e), 12))
        if key not in solved:
            schedule = optimal_schedule(gamma, a, e, risk, sell_only=True)
            solved[key] = remaining_targets(schedule)
        rows.append(solved[key])
    return np.stack(rows)


def linear_market(
    config: PropagatorConfig, params: EnvParams
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """The coefficients of :func:`schedule_objective` of each episode's whole-day order
    in a linear propagator market with constant liquidity (:func:`propagator_optimum`).

    Returns:
        ``(gamma float64[T, T], transient float64[N], temporary float64[N], risk)``: the
        slot kernel matrix, ``a = A c`` and ``e = eta c`` per episode (``c = Q / v``), and
        ``u = urgency / T``; the objective is in units of ``sigma_day``.

    Raises:
        ValueError: a market that is not linear with constant liquidity (no closed form;
            naming the key).
    """
    if config.delta != 1.0 or config.liquidity != "constant":
        raise ValueError(
            "optimal: the optimum is known for a linear market with constant liquidity "
            f"(impact.delta=1, impact.liquidity=constant), got impact.delta={config.delta}, "
            f"impact.liquidity={config.liquidity}"
        )
    data = params.data
    weights, rates = config.exponentials()
    minute_volume = np.asarray(data.mean_minute_volume, np.float64)
    quantity = float(params.order_fraction) * np.asarray(data.expected_day_volume, np.float64)
    c = quantity / np.maximum(minute_volume, config.liquidity_floor * minute_volume)
    return (
        slot_kernel_matrix(weights, rates, data.num_slots),
        config.amplitude() * c,
        config.temporary * c,
        float(params.urgency) / data.num_slots,
    )
