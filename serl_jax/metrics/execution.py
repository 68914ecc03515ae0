"""Order-execution metrics: PA, PA-std, WR, GLR, AFI with confidence intervals.

Plain NumPy (no JAX): metrics are computed once per evaluation on the host, from the
per-order totals that the environment's ``info`` carries (shares and cash executed per
step, benchmark prices). Definitions follow the design card and the SE-RL seed paper
(Qlib's ``PA`` indicator):

* Side ``d``: ``+1`` for a sell order, ``-1`` for a buy order.
* Average execution price of order ``i``: ``P̄_i = notional_i / executed_i``.
* Price advantage in basis points: ``PA_i = d_i · (P̄_i / P̃_i − 1) · 1e4`` with ``P̃_i``
  the benchmark price (interval VWAP by default, TWAP as an option; see :func:`vwap`,
  :func:`twap`). Positive is good for both sides: a seller sold above the benchmark, a
  buyer bought below it.
* ``PA`` = mean of ``PA_i``; ``PA_std`` = sample standard deviation (``ddof=1``; 0 for a
  single order); ``WR`` = share of orders with ``PA_i > 0``;
  ``GLR = mean(PA_i | PA_i > 0) / |mean(PA_i | PA_i < 0)|``;
  ``AFI = mean((Q_i − executed_i) / Q_i)`` (average fraction of the order left unfilled).

Edge cases (chosen so that no order is silently dropped):

* An order with ``executed == 0`` has ``PA_i = 0`` (no execution price exists); it counts
  in every mean and as a non-win in WR, and is charged in full through AFI (unfilled
  fraction 1).
* A partially filled order's PA is measured over the shares it did execute (Qlib's
  convention); the unfilled part shows up in AFI only.
* Orders with ``PA_i == 0`` exactly are neither wins nor losses for GLR.
* GLR is ``inf`` when there are winners but no losers, ``0`` when there are losers but no
  winners, and ``nan`` when there are neither (every ``PA_i == 0``).

Paired comparison with TWAP. Every policy executes the same orders, so a policy is compared
with the TWAP baseline order by order: ``vs_TWAP`` is the mean of ``PA_i − PA_i^TWAP`` with
its bootstrap interval and the share of orders on which the policy did better (``win_rate``);
unpaired intervals over a few dozen orders are too wide to show a few bps. PA splits exactly
into a timing part, the PA of the replayed (undisturbed) minute prices at which the order
traded, ``d · (Σ q p_t / executed / P̃ − 1) · 1e4``, and the execution shortfall, the rest
(spread and impact); ``shortfall_vs_TWAP`` is the paired difference of the shortfall alone,
the part a policy controls when the replayed prices are a martingale.

Confidence intervals respect days (:mod:`serl_jax.metrics.inference`): given each order's
day, orders on one day are resampled together (the day-clustered bootstrap, 20 days or
more), or a cluster-robust t interval with ``G - 1`` degrees of freedom is used (fewer
days); the percentile bootstrap over orders applies when each day holds one order or no
days are given. Bootstrap resamples come from a seeded ``numpy.random.Generator`` (the
same inputs and seed give identical intervals). For GLR, resamples where GLR is
undefined (``nan``) are left out of the interval; ``inf`` resamples are kept (the upper
bound may be ``inf``). WR, a proportion, has the Wilson score interval instead, with the
days' effective sample size when days hold several orders
(:func:`serl_jax.metrics.inference.proportion_interval`), so it stays in ``[0, 1]``.
Every paired difference also reports its minimum detectable effect
(80% power, two-sided at ``1 - confidence``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from serl_jax.cli import Column, render_table
from serl_jax.metrics.inference import (
    CLUSTER_T,
    Clustering,
    bootstrap_chunks,
    cluster_robust_mean,
    describe_interval,
    minimum_detectable_effect,
    proportion_interval,
    t_interval,
)

__all__ = [
    "Estimate",
    "ExecutionMetrics",
    "OrderOutcomes",
    "PairedDifference",
    "compute_metrics",
    "format_table",
    "paired_difference",
    "price_advantage",
    "shortfall",
    "timing_advantage",
    "twap",
    "vwap",
]

_BPS = 1e4
_FILL_TOL = 1e-6  # executed may exceed Q by this relative amount (float accumulation).
_METRIC_NAMES = ("PA", "PA_std", "WR", "GLR", "AFI")
# The means of a per-order value with cluster-robust t intervals (WR, a proportion, has
# the Wilson interval of inference.proportion_interval whatever the method).
_MEAN_METRICS = ("PA", "AFI")
# The metrics whose interval is the percentile bootstrap's when the method is one.
_BOOTSTRAP_METRICS = ("PA", "PA_std", "GLR", "AFI")


# --------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class OrderOutcomes:
    """Per-order execution totals for ``n`` parent orders (all 1-D float64, length ``n``).

    Arrays are converted to read-only float64 NumPy arrays on construction (JAX arrays and
    lists are accepted) and validated; a bad field raises a one-line ``ValueError`` naming it.

    Attributes:
        side: ``[n]`` order side, ``+1.0`` sell or ``-1.0`` buy.
        quantity: ``[n]`` parent order size ``Q`` in shares, ``> 0``.
        executed: ``[n]`` shares executed, ``0 <= executed <= Q · (1 + 1e-6)``.
        notional: ``[n]`` cash value of the fills, ``Σ q · p_exec`` over the order's child
            fills, in currency, ``>= 0`` (and ``0`` when ``executed == 0``).
        benchmark: ``[n]`` benchmark price ``P̃`` per share (currency/share), ``> 0``.
        replayed_notional: ``[n]`` or None, ``Σ q · p_t`` over the fills at the replayed
            (undisturbed) price ``p_t`` of their minutes, currency, ``>= 0``: what the same
            shares were worth in the market without the agent's spread and impact (needed
            for :func:`timing_advantage` and :func:`shortfall`).
    """

    side: np.ndarray
    quantity: np.ndarray
    executed: np.ndarray
    notional: np.ndarray
    benchmark: np.ndarray
    replayed_notional: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = None
        for field in dataclasses.fields(self):
            name = field.name
            if name == "replayed_notional" and self.replayed_notional is None:
                continue
            try:
                arr = np.array(getattr(self, name), dtype=np.float64)
            except (TypeError, ValueError) as err:
                raise ValueError(
                    f"OrderOutcomes.{name}: not convertible to float64 ({err})"
                ) from err
            if arr.ndim != 1:
                raise ValueError(
                    f"OrderOutcomes.{name}: expected a 1-D array, got shape {arr.shape}"
                )
            if n is None:
                n = arr.shape[0]
            elif arr.shape[0] != n:
                raise ValueError(
                    f"OrderOutcomes.{name}: length {arr.shape[0]} differs from side's length {n}"
                )
            bad = ~np.isfinite(arr)
            if bad.any():
                raise ValueError(
                    f"OrderOutcomes.{name}: non-finite value at order {int(np.argmax(bad))}"
                )
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)

        def _check(name: str, ok: np.ndarray, what: str) -> None:
            if not ok.all():
                i = int(np.argmin(ok))
                value = float(getattr(self, name)[i])
                raise ValueError(f"OrderOutcomes.{name}: order {i} has {value!r}, expected {what}")

        _check("side", (self.side == 1.0) | (self.side == -1.0), "+1 (sell) or -1 (buy)")
        _check("quantity", self.quantity > 0, "> 0 shares")
        _check("executed", self.executed >= 0, ">= 0 shares")
        _check(
            "executed",
            self.executed <= self.quantity * (1.0 + _FILL_TOL),
            "<= quantity (1e-6 relative tolerance)",
        )
        _check("notional", self.notional >= 0, ">= 0")
        _check("notional", (self.executed > 0) | (self.notional == 0), "0 when executed == 0")
        _check("benchmark", self.benchmark > 0, "> 0 (a price)")
        if self.replayed_notional is not None:
            _check("replayed_notional", self.replayed_notional >= 0, ">= 0")
            _check(
                "replayed_notional",
                (self.executed > 0) | (self.replayed_notional == 0),
                "0 when executed == 0",
            )

    @property
    def n_orders(self) -> int:
        """Number of orders ``n``."""
        return int(self.side.shape[0])

    @classmethod
    def from_fills(
        cls,
        side: Any,
        quantity: Any,
        shares: Any,
        cash: Any,
        benchmark: Any,
    ) -> OrderOutcomes:
        """Builds outcomes from per-step fills, e.g. an environment rollout's ``info``.

        Args:
            side: ``[n]`` or scalar, ``+1`` sell / ``-1`` buy (broadcast to ``n``).
            quantity: ``[n]`` or scalar parent order size ``Q`` in shares.
            shares: ``[n, T]`` shares executed at each step.
            cash: ``[n, T]`` cash value ``q · p_exec`` of each step's fill.
            benchmark: ``[n]`` or scalar benchmark price per share.

        Returns:
            ``OrderOutcomes`` with ``executed = shares.sum(-1)`` and ``notional = cash.sum(-1)``
            (summed in float64).
        """
        shares = np.asarray(shares, dtype=np.float64)
        cash = np.asarray(cash, dtype=np.float64)
        if shares.ndim != 2 or cash.shape != shares.shape:
            raise ValueError(
                f"OrderOutcomes.from_fills: shares and cash must both be [n, T], got "
                f"{shares.shape} and {cash.shape}"
            )
        n = shares.shape[0]

        def _vec(name: str, x: Any) -> np.ndarray:
            arr = np.asarray(x, dtype=np.float64)
            if arr.ndim == 0:
                return np.full(n, float(arr))
            if arr.shape != (n,):
                raise ValueError(
                    f"OrderOutcomes.{name}: expected shape ({n},) or scalar, got {arr.shape}"
                )
            return arr

        return cls(
            side=_vec("side", side),
            quantity=_vec("quantity", quantity),
            executed=shares.sum(axis=-1),
            notional=cash.sum(axis=-1),
            benchmark=_vec("benchmark", benchmark),
        )

    @classmethod
    def team(cls, agents: Sequence[OrderOutcomes]) -> OrderOutcomes:
        """Several agents' orders of the same ``n`` days as the team's ``n`` parent orders:
        shares, executed shares and notionals summed, side and benchmark shared.

        Args:
            agents: one ``OrderOutcomes`` per agent, each ``[n]``.

        Raises:
            ValueError: if the agents' sides or benchmarks differ on some day (not a team).
        """
        first = agents[0]
        if any(
            not (
                np.array_equal(a.side, first.side) and np.array_equal(a.benchmark, first.benchmark)
            )
            for a in agents
        ):
            raise ValueError(
                "OrderOutcomes.team: the agents' sides or benchmarks differ (not a team)"
            )

        def total(field: str) -> np.ndarray | None:
            parts = [getattr(a, field) for a in agents]
            return None if any(p is None for p in parts) else np.sum(parts, axis=0)

        return cls(
            side=first.side,
            quantity=total("quantity"),
            executed=total("executed"),
            notional=total("notional"),
            benchmark=first.benchmark,
            replayed_notional=total("replayed_notional"),
        )


# --------------------------------------------------------------------------------------
# Benchmarks
# --------------------------------------------------------------------------------------


def _window_array(name: str, x: Any) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim == 0 or arr.shape[-1] == 0:
        raise ValueError(
            f"{name}: expected a non-empty window along the last axis, got shape {arr.shape}"
        )
    if not np.isfinite(arr).all():
        raise ValueError(f"{name}: contains NaN or inf")
    return arr


def twap(price: Any) -> np.ndarray | float:
    """Time-weighted average price of a window: the plain mean of the per-step prices.

    Args:
        price: ``[..., T]`` per-step prices (currency/share), finite; the window is the last axis.

    Returns:
        ``[...]`` TWAP per window (a Python float for a 1-D input), float64.
    """
    p = _window_array("twap: price", price)
    out = p.mean(axis=-1)
    return float(out) if out.ndim == 0 else out


def vwap(price: Any, volume: Any) -> np.ndarray | float:
    """Volume-weighted average price of a window: ``Σ_t p_t v_t / Σ_t v_t``.

    A window whose total volume is 0 falls back to its TWAP (mean price), so the benchmark
    is always defined.

    Args:
        price: ``[..., T]`` per-step prices (currency/share), finite; window on the last axis.
        volume: ``[..., T]`` per-step traded volume (shares), finite and ``>= 0``; same shape.

    Returns:
        ``[...]`` VWAP per window (a Python float for 1-D inputs), float64.
    """
    p = _window_array("vwap: price", price)
    v = _window_array("vwap: volume", volume)
    if p.shape != v.shape:
        raise ValueError(f"vwap: price shape {p.shape} differs from volume shape {v.shape}")
    if (v < 0).any():
        raise ValueError("vwap: volume contains negative values")
    total = v.sum(axis=-1)
    has_volume = total > 0
    out = np.where(
        has_volume,
        (p * v).sum(axis=-1) / np.where(has_volume, total, 1.0),
        p.mean(axis=-1),
    )
    return float(out) if out.ndim == 0 else out


# --------------------------------------------------------------------------------------
# Metrics
# --------------------------------------------------------------------------------------


def price_advantage(outcomes: OrderOutcomes) -> np.ndarray:
    """Per-order price advantage in basis points.

    ``PA_i = d_i · (P̄_i / P̃_i − 1) · 1e4`` with ``P̄_i = notional_i / executed_i``. Orders with
    ``executed_i == 0`` get ``PA_i = 0`` (they are charged through AFI instead); partially filled
    orders are measured over their executed shares.

    Args:
        outcomes: per-order totals.

    Returns:
        ``[n]`` float64 PA in bps.
    """
    executed = outcomes.executed
    filled = executed > 0
    avg_price = outcomes.notional / np.where(filled, executed, 1.0)
    pa = outcomes.side * (avg_price / outcomes.benchmark - 1.0) * _BPS
    return np.where(filled, pa, 0.0)


def timing_advantage(outcomes: OrderOutcomes) -> np.ndarray:
    """Per-order timing part of PA, bps: the PA of the replayed minute prices it traded at.

    ``d · (Σ q p_t / executed / P̃ − 1) · 1e4`` (0 when nothing executed). With the
    shortfall (:func:`shortfall`) it sums to :func:`price_advantage` exactly.

    Raises:
        ValueError: if ``outcomes.replayed_notional`` is None.
    """
    if outcomes.replayed_notional is None:
        raise ValueError("timing_advantage: OrderOutcomes.replayed_notional is missing")
    executed = outcomes.executed
    filled = executed > 0
    avg_price = outcomes.replayed_notional / np.where(filled, executed, 1.0)
    return np.where(filled, outcomes.side * (avg_price / outcomes.benchmark - 1.0) * _BPS, 0.0)


def shortfall(outcomes: OrderOutcomes) -> np.ndarray:
    """Per-order execution shortfall, bps: ``PA − timing`` (:func:`timing_advantage`), i.e.
    ``d · (notional − replayed_notional) / executed / P̃ · 1e4``: spread and impact paid
    against the replayed prices (negative is a cost).

    Raises:
        ValueError: if ``outcomes.replayed_notional`` is None.
    """
    return price_advantage(outcomes) - timing_advantage(outcomes)


@dataclasses.dataclass(frozen=True)
class Estimate:
    """A point estimate with a confidence interval ``[low, high]`` (``nan`` when unavailable)."""

    value: float
    low: float
    high: float

    def to_dict(self) -> dict[str, float | None]:
        """``{"value", "ci_low", "ci_high"}`` with non-finite floats mapped to ``None``."""
        return {
            "value": _json_float(self.value),
            "ci_low": _json_float(self.low),
            "ci_high": _json_float(self.high),
        }


@dataclasses.dataclass(frozen=True)
class PairedDifference(Estimate):
    """A policy against a reference on the same orders: the mean of ``x_i − x_i^ref``
    (``value``, bps) with its interval ``[low, high]`` (``nan`` without one; the method
    follows the orders' days, :mod:`serl_jax.metrics.inference`), ``win_rate``, the share
    of orders with ``x_i > x_i^ref`` in ``[0, 1]``, and ``mde``, the minimum detectable
    effect (bps; 80% power, two-sided at ``1 - confidence``; ``nan`` without an interval).
    """

    win_rate: float
    mde: float = math.nan

    def to_dict(self) -> dict[str, float | None]:
        """``{"value", "ci_low", "ci_high", "win_rate", "mde"}`` (non-finite floats ->
        ``None``)."""
        return {
            **super().to_dict(),
            "win_rate": _json_float(self.win_rate),
            "mde": _json_float(self.mde),
        }


def paired_difference(
    values: np.ndarray,
    reference: np.ndarray,
    confidence: float = 0.95,
    n_bootstrap: int = 2000,
    seed: int = 0,
    days: Any = None,
    power: float = 0.8,
) -> PairedDifference:
    """Mean of ``values − reference`` over orders with an interval that respects days.

    Each order's pair stays together. With ``days``, orders of a day are resampled
    together (20 days or more: the day-clustered bootstrap) or the interval is the
    cluster-robust t with ``G − 1`` degrees of freedom (fewer days); without, or with one
    order per day, orders are resampled (:mod:`serl_jax.metrics.inference`). Bootstrap
    resamples come from ``numpy.random.default_rng(seed)``.

    Args:
        values: ``[n]`` per-order values of the policy (e.g. PA, bps).
        reference: ``[n]`` the reference policy's values on the same orders.
        confidence: confidence level in ``(0, 1)``.
        n_bootstrap: resamples (0: no bootstrap interval and no MDE where one is needed).
        seed: bootstrap seed.
        days: ``[n]`` each order's day (any hashable), or None.
        power: the power of the minimum detectable effect.

    Returns:
        The :class:`PairedDifference`.

    Raises:
        ValueError: shapes that differ or are not ``[n]`` with ``n >= 1``, or ``days``
            of another length.
    """
    values = np.asarray(values, np.float64)
    reference = np.asarray(reference, np.float64)
    if values.ndim != 1 or values.shape != reference.shape or values.size == 0:
        raise ValueError(
            f"paired_difference: need two [n] arrays of the same orders, got {values.shape} "
            f"and {reference.shape}"
        )
    diff = values - reference
    clustering = Clustering.from_days(days, diff.size)
    low = high = mde = math.nan
    if clustering.method == CLUSTER_T:
        mean, se = cluster_robust_mean(diff, clustering)
        df = clustering.n_clusters - 1
        low, high = t_interval(mean, se, df, confidence)
        mde = minimum_detectable_effect(se, confidence, power, df=df)
    elif clustering.bootstrap and n_bootstrap > 0:
        rng = np.random.default_rng(seed)
        means = np.concatenate(
            [(w @ diff) / w.sum(axis=-1) for w in bootstrap_chunks(clustering, rng, n_bootstrap)]
        )
        low, high = _percentile_interval(means, confidence)
        if n_bootstrap > 1:
            mde = minimum_detectable_effect(float(means.std(ddof=1)), confidence, power)
    return PairedDifference(float(diff.mean()), low, high, float((diff > 0).mean()), mde)


@dataclasses.dataclass(frozen=True)
class ExecutionMetrics:
    """Execution metrics over a set of orders, each with a confidence interval
    (:func:`compute_metrics` says which).

    Attributes:
        PA: mean price advantage (bps).
        PA_std: sample standard deviation of PA (bps, ``ddof=1``; 0 for one order).
        WR: win ratio, share of orders with ``PA_i > 0`` (in ``[0, 1]``).
        GLR: gain-loss ratio ``mean(PA | PA > 0) / |mean(PA | PA < 0)|`` (``inf``: no losers
            but some winners; ``0``: losers but no winners; ``nan``: neither).
        AFI: average fraction of the order left unfilled (in ``[0, 1]``).
        n_orders: number of orders.
        confidence: confidence level of the intervals (e.g. 0.95).
        vs_TWAP: PA paired with the TWAP baseline's on the same orders
            (:func:`paired_difference`); None when not computed (e.g. for TWAP itself).
        shortfall_vs_TWAP: the same for the execution shortfall (:func:`shortfall`); None
            when not computed or the outcomes lack ``replayed_notional``.
        interval: how the intervals were made (:mod:`serl_jax.metrics.inference`:
            ``order bootstrap``, ``day-clustered bootstrap``, ``cluster-robust t``, ...).
        n_days: ``G``, the number of distinct days the orders fall on (``n_orders`` when
            no days were given).
    """

    PA: Estimate
    PA_std: Estimate
    WR: Estimate
    GLR: Estimate
    AFI: Estimate
    n_orders: int
    confidence: float = 0.95
    vs_TWAP: PairedDifference | None = None
    shortfall_vs_TWAP: PairedDifference | None = None
    interval: str = "order bootstrap"
    n_days: int | None = None

    def interval_description(self) -> str:
        """The footer line naming the interval method and ``G``
        (:func:`serl_jax.metrics.inference.describe_interval`)."""
        g = self.n_orders if self.n_days is None else self.n_days
        return describe_interval(self.interval, g, self.n_orders, self.confidence)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dictionary.

        Keys ``PA``, ``PA_std``, ``WR``, ``GLR``, ``AFI`` each map to
        ``{"value", "ci_low", "ci_high"}``; ``n_orders`` is an int. Non-finite floats (e.g. GLR
        ``inf`` with no losing orders, ``nan`` when undefined) become ``None`` so the result
        passes ``json.dumps(..., allow_nan=False)``. ``vs_TWAP`` and ``shortfall_vs_TWAP``,
        when computed, map to ``{"value", "ci_low", "ci_high", "win_rate", "mde"}``.
        ``interval`` is ``{"method", "days", "confidence"}``.
        """
        out: dict[str, Any] = {name: getattr(self, name).to_dict() for name in _METRIC_NAMES}
        out["n_orders"] = int(self.n_orders)
        out["interval"] = {
            "method": self.interval,
            "days": int(self.n_orders if self.n_days is None else self.n_days),
            "confidence": float(self.confidence),
        }
        for name in ("vs_TWAP", "shortfall_vs_TWAP"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name).to_dict()
        return out


def _json_float(x: float) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def _statistics(pa: np.ndarray, unfilled: np.ndarray, weights: np.ndarray) -> dict[str, np.ndarray]:
    """Metric values of ``[n]`` orders under frequency weights ``[..., n]`` (leading axes
    are resamples; weights of ones give the plain statistics): each equals the statistic
    of the sample that holds order ``i`` ``weights[..., i]`` times."""
    total = weights.sum(axis=-1)
    mean = (weights @ pa) / total
    spread = weights * (pa - mean[..., None]) ** 2
    std = np.sqrt(spread.sum(axis=-1) / np.maximum(total - 1.0, 1.0))
    win, loss = pa > 0, pa < 0
    n_win = weights @ win.astype(np.float64)
    n_loss = weights @ loss.astype(np.float64)
    mean_gain = (weights @ np.where(win, pa, 0.0)) / np.maximum(n_win, 1.0)
    mean_loss = -(weights @ np.where(loss, pa, 0.0)) / np.maximum(n_loss, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        glr = np.where(
            n_loss > 0,
            mean_gain / np.where(n_loss > 0, mean_loss, 1.0),
            np.where(n_win > 0, np.inf, np.nan),
        )
    return {
        "PA": mean,
        "PA_std": np.where(total > 1.0, std, 0.0),
        "WR": n_win / total,
        "GLR": glr,
        "AFI": (weights @ unfilled) / total,
    }


def _percentile_interval(samples: np.ndarray, confidence: float) -> tuple[float, float]:
    samples = samples[~np.isnan(samples)]
    if samples.size == 0:
        return math.nan, math.nan
    q = [(1.0 - confidence) / 2.0, (1.0 + confidence) / 2.0]
    # Linear interpolation between an ``inf`` and a finite order statistic is ill-defined,
    # so samples with infinities use the plain order statistic (inverted CDF).
    method = "linear" if np.isfinite(samples).all() else "inverted_cdf"
    low, high = np.quantile(samples, q, method=method)
    return float(low), float(high)


def compute_metrics(
    outcomes: OrderOutcomes,
    confidence: float = 0.95,
    n_bootstrap: int = 2000,
    seed: int = 0,
    twap: OrderOutcomes | None = None,
    days: Any = None,
) -> ExecutionMetrics:
    """Computes PA, PA-std, WR, GLR and AFI with confidence intervals that respect days.

    The method follows the orders' days (:mod:`serl_jax.metrics.inference`): the
    ``[(1 − c)/2, (1 + c)/2]`` percentile range of the metric over ``n_bootstrap``
    resamples of orders (no ``days``, or one order per day) or of whole days (20 days or
    more), drawn from ``numpy.random.default_rng(seed)`` (identical inputs and seed give
    identical results; vectorized in chunks of bounded memory); with 2 to 19 days, the
    cluster-robust t interval with ``G − 1`` degrees of freedom for PA and AFI and
    none for PA-std and GLR; with one day, none. WR's interval is the Wilson score
    interval whatever the method (:func:`serl_jax.metrics.inference.proportion_interval`:
    the orders' ``n``, or the days' effective sample size and ``t_{G-1}``; none on one
    day); it needs no bootstrap.

    Args:
        outcomes: per-order totals (at least one order).
        confidence: confidence level in ``(0, 1)``.
        n_bootstrap: number of bootstrap resamples, ``>= 0``; 0 skips the bootstrap
            intervals (``nan``; WR's Wilson interval remains).
        seed: seed for the bootstrap generator.
        twap: the TWAP baseline's outcomes on the same orders; gives ``vs_TWAP`` (and
            ``shortfall_vs_TWAP`` when both have ``replayed_notional``).
        days: ``[n]`` each order's day (any hashable, e.g. ``datetime.date``), or None
            (orders treated as independent).

    Returns:
        ``ExecutionMetrics`` (see the module docstring for the edge-case conventions).

    Raises:
        ValueError: no orders, a bad ``confidence`` / ``n_bootstrap``, ``days`` of another
            length, or ``twap`` outcomes of other orders (a different count, side or
            quantity).
    """
    if not isinstance(outcomes, OrderOutcomes):
        raise ValueError(f"compute_metrics: expected OrderOutcomes, got {type(outcomes).__name__}")
    n = outcomes.n_orders
    if n == 0:
        raise ValueError("compute_metrics: no orders to evaluate")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"compute_metrics: confidence must be in (0, 1), got {confidence}")
    if int(n_bootstrap) != n_bootstrap or n_bootstrap < 0:
        raise ValueError(f"compute_metrics: n_bootstrap must be an integer >= 0, got {n_bootstrap}")
    n_bootstrap = int(n_bootstrap)
    clustering = Clustering.from_days(days, n)

    pa = price_advantage(outcomes)
    unfilled = np.clip((outcomes.quantity - outcomes.executed) / outcomes.quantity, 0.0, 1.0)
    point = _statistics(pa, unfilled, np.ones(n))
    intervals = {name: (math.nan, math.nan) for name in _METRIC_NAMES}
    if clustering.method == CLUSTER_T:
        per_order = {"PA": pa, "AFI": unfilled}
        for name in _MEAN_METRICS:
            mean, se = cluster_robust_mean(per_order[name], clustering)
            intervals[name] = t_interval(mean, se, clustering.n_clusters - 1, confidence)
    elif clustering.bootstrap and n_bootstrap > 0:
        rng = np.random.default_rng(seed)
        parts: dict[str, list[np.ndarray]] = {name: [] for name in _BOOTSTRAP_METRICS}
        for weights in bootstrap_chunks(clustering, rng, n_bootstrap):
            values = _statistics(pa, unfilled, weights)
            for name in _BOOTSTRAP_METRICS:
                parts[name].append(values[name])
        for name, values in parts.items():
            intervals[name] = _percentile_interval(np.concatenate(values), confidence)
    intervals["WR"] = proportion_interval(pa > 0, clustering, confidence)
    estimates = {name: Estimate(float(point[name]), *intervals[name]) for name in _METRIC_NAMES}
    paired = {}
    if twap is not None:
        same = (
            twap.n_orders == n
            and np.array_equal(twap.side, outcomes.side)
            and np.allclose(twap.quantity, outcomes.quantity, rtol=1e-6)
        )
        if not same:
            raise ValueError("compute_metrics: the TWAP outcomes are not of the same orders")
        boot = {"confidence": confidence, "n_bootstrap": n_bootstrap, "seed": seed, "days": days}
        paired["vs_TWAP"] = paired_difference(pa, price_advantage(twap), **boot)
        if outcomes.replayed_notional is not None and twap.replayed_notional is not None:
            paired["shortfall_vs_TWAP"] = paired_difference(
                shortfall(outcomes), shortfall(twap), **boot
            )
    return ExecutionMetrics(
        **estimates,
        n_orders=n,
        confidence=float(confidence),
        **paired,
        interval=clustering.method,
        n_days=clustering.n_clusters,
    )


# --------------------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------------------

# (column title, metric attribute, number format, interval shown in the compact table)
_COLUMNS = (
    ("PA (bps)", "PA", "{:.2f}", True),
    ("PA-std (bps)", "PA_std", "{:.2f}", False),
    ("WR", "WR", "{:.3f}", True),
    ("GLR", "GLR", "{:.2f}", False),
    ("AFI", "AFI", "{:.4f}", False),
)
_PAIRED_NOTE = (
    "PA-TWAP: mean of PA_i - PA_i(TWAP) on the same orders; MDE: its minimum detectable "
    "effect (80% power, two-sided); won: share of orders with PA_i > PA_i(TWAP); "
    "shortfall-TWAP: the same for the spread-and-impact part of PA"
)


def _fmt(fmt: str, x: float) -> str:
    if math.isnan(x):
        return "n/a"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return fmt.format(x)


def _interval_cell(fmt: str, value: float, low: float, high: float) -> tuple[str, str, str]:
    return _fmt(fmt, value), _fmt(fmt, low), _fmt(fmt, high)


def _paired_cell(diff: PairedDifference | None) -> str | tuple[str, str, str]:
    if diff is None:
        return "-"
    return _interval_cell("{:+.2f}", diff.value, diff.low, diff.high)


def format_table(rows: Mapping[tuple[str, str], ExecutionMetrics], wide: bool = False) -> str:
    """Formats metrics as a text table, one row per ``(market, policy)``
    (:func:`serl_jax.cli.render_table`).

    Columns: market, policy, PA (bps), PA-std (bps), WR, GLR, AFI, each as
    ``"value [low, high]"`` (``n/a`` for undefined values), n (orders), then the paired
    comparison with TWAP on the same orders: PA − TWAP (bps), its minimum detectable
    effect (MDE, bps), the share of orders won and the shortfall's difference (``-``
    where not computed, e.g. for TWAP itself). Footer lines name the interval method and
    the number of days ``G`` (per market where they differ) and say what the paired
    columns are.

    The default (compact) table fits 120 characters a line: rows grouped under their
    market, columns that are undefined or the same on every row left out and named in a
    note, and only PA's, WR's and the paired differences' intervals, each under its value.
    ``wide`` gives every column, one line per row in the mapping's order, as the run
    folders' ``results.txt`` keeps it.

    Args:
        rows: ``{(market, policy): ExecutionMetrics}``.
        wide: every column (default: the compact table).

    Returns:
        The table as one string (no trailing newline).

    Raises:
        ValueError: a key that is no ``(market, policy)`` tuple, or a value that is no
            ``ExecutionMetrics``.
    """
    columns = [
        Column("policy", text=True),
        *(Column(title, compact_interval=compact) for title, _, _, compact in _COLUMNS),
        Column("n"),
        Column("PA-TWAP (bps)", compact_interval=True),
        Column("MDE"),
        Column("won"),
        Column("shortfall-TWAP (bps)", compact_interval=True),
    ]
    body, markets = [], []
    intervals: dict[str, str] = {}
    for key, metrics in rows.items():
        if not (isinstance(key, tuple) and len(key) == 2):
            raise ValueError(f"format_table: row keys must be (market, policy) tuples, got {key!r}")
        if not isinstance(metrics, ExecutionMetrics):
            raise ValueError(
                f"format_table: row {key!r} is a {type(metrics).__name__}, "
                "expected ExecutionMetrics"
            )
        intervals.setdefault(str(key[0]), metrics.interval_description())
        markets.append(str(key[0]))
        cells: list[str | tuple[str, str, str]] = [str(key[1])]
        for _, attr, fmt, _ in _COLUMNS:
            est: Estimate = getattr(metrics, attr)
            cells.append(_interval_cell(fmt, est.value, est.low, est.high))
        cells.append(str(metrics.n_orders))
        vs = metrics.vs_TWAP
        cells.append(_paired_cell(vs))
        cells.append("-" if vs is None else _fmt("{:.2f}", vs.mde))
        cells.append("-" if vs is None or math.isnan(vs.win_rate) else f"{vs.win_rate:.2f}")
        cells.append(_paired_cell(metrics.shortfall_vs_TWAP))
        body.append(cells)

    if len(set(intervals.values())) == 1:
        notes = [f"[low, high]: {next(iter(intervals.values()))}"]
    else:
        notes = [f"[low, high] of {market}: {text}" for market, text in intervals.items()]
    if any(m.vs_TWAP is not None for m in rows.values()):
        notes.append(_PAIRED_NOTE)
    return render_table(columns, body, groups=markets, wide=wide, notes=notes)
