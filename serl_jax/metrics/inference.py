"""Intervals that respect days: orders on the same day share the market's intraday path.

Every order of a day trades against the same price path, so their PAs move together and
are not independent draws. Resampling orders as if they were overstates the evidence
(300 orders on 3 days are 3 observations of the day's path, not 300). The interval is
therefore clustered by day, with the method chosen by the number of days ``G``:

* every day holds one order (``G = n``), or no day labels are given: the percentile
  bootstrap over orders (:data:`ORDER_BOOTSTRAP`);
* ``G >= 20``: the day-clustered bootstrap (:data:`DAY_BOOTSTRAP`): each resample draws
  ``G`` days with replacement and keeps all their orders together;
* ``2 <= G < 20``: the cluster-robust t interval with ``G - 1`` degrees of freedom
  (:data:`CLUSTER_T`) for means, ``x̄ ± t_{G-1} · SE_CR`` with the CR1 variance
  ``SE_CR² = G/(G-1) · Σ_g (Σ_{i∈g} (x_i - x̄))² / n²`` (Cameron and Miller 2015, "A
  Practitioner's Guide to Cluster-Robust Inference", J. Human Resources 50(2), sections
  VI.C-D: with few clusters, t(G-1) critical values; with equal cluster sizes this is the
  one-sample t interval of the day means). Statistics that are not means (PA-std, GLR)
  get no interval there;
* ``G = 1``: no interval.

WR, a proportion, gets a Wilson score interval instead (:func:`proportion_interval`),
which stays inside ``[0, 1]`` where the t interval of a mean does not (``0.075 [-0.011,
0.161]``): with the orders' own ``n`` when they are independent, and with the effective
sample size of the day clusters (Kish's design effect from the CR1 variance) and
``t_{G-1}`` when days hold several orders.

The minimum detectable effect of a paired mean (80% power, two-sided test at level
``1 - confidence``) is ``(q_{1-α/2} + q_{power}) · SE`` (Bloom 1995, "Minimum Detectable
Effects", Evaluation Review 19(5)), with normal quantiles and the bootstrap standard
error, or t quantiles with ``G - 1`` degrees of freedom and ``SE_CR``.

Bootstrap resamples are frequency weights: a resample is the count of times each order
was drawn (for days, each order takes its day's count), so resamples of days of
different sizes stay fixed-shape arrays and every weighted statistic equals the one of
the concatenated resample.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats as scipy_stats

__all__ = [
    "CLUSTER_T",
    "DAY_BOOTSTRAP",
    "MIN_BOOTSTRAP_DAYS",
    "NO_INTERVAL",
    "ORDER_BOOTSTRAP",
    "Clustering",
    "bootstrap_chunks",
    "bootstrap_weights",
    "cluster_robust_mean",
    "describe_interval",
    "minimum_detectable_effect",
    "proportion_interval",
    "t_interval",
    "wilson_interval",
]

ORDER_BOOTSTRAP = "order bootstrap"
DAY_BOOTSTRAP = "day-clustered bootstrap"
CLUSTER_T = "cluster-robust t"
NO_INTERVAL = "none (one day)"
MIN_BOOTSTRAP_DAYS = 20
"""Fewest days for the day-clustered bootstrap; below it the cluster-robust t interval."""
# Upper bound on elements per bootstrap chunk (resamples x orders), to bound memory.
CHUNK_ELEMENTS = 2_000_000


@dataclasses.dataclass(frozen=True, eq=False)
class Clustering:
    """Which day each order belongs to, and the interval method that follows from it.

    Build it with :meth:`from_days`.

    Attributes:
        labels: ``[n]`` int64, the order's day as an index in ``0 .. G-1``.
        n_clusters: ``G``, the number of distinct days.
        method: :data:`ORDER_BOOTSTRAP`, :data:`DAY_BOOTSTRAP`, :data:`CLUSTER_T` or
            ``NO_INTERVAL`` (see the module docstring).
    """

    labels: np.ndarray
    n_clusters: int
    method: str

    @classmethod
    def from_days(cls, days: Sequence[Any] | np.ndarray | None, n_orders: int) -> Clustering:
        """The clustering of ``n_orders`` orders by their days.

        Args:
            days: ``[n]`` the day of each order (any hashable: ``datetime.date``, str), or
                None: orders treated as independent (the order bootstrap).
            n_orders: ``n``.

        Raises:
            ValueError: ``days`` is not ``n`` long.
        """
        if days is None:
            return cls(np.arange(n_orders, dtype=np.int64), n_orders, ORDER_BOOTSTRAP)
        days = list(days)
        if len(days) != n_orders:
            raise ValueError(f"clustering: {len(days)} day labels for {n_orders} orders")
        index: dict[Any, int] = {}
        labels = np.array([index.setdefault(d, len(index)) for d in days], dtype=np.int64)
        g = len(index)
        if g == n_orders:
            method = ORDER_BOOTSTRAP
        elif g >= MIN_BOOTSTRAP_DAYS:
            method = DAY_BOOTSTRAP
        elif g >= 2:
            method = CLUSTER_T
        else:
            method = NO_INTERVAL
        labels.setflags(write=False)
        return cls(labels, g, method)

    @property
    def n_orders(self) -> int:
        """``n``."""
        return int(self.labels.shape[0])

    @property
    def bootstrap(self) -> bool:
        """Whether the interval is a (order or day) bootstrap."""
        return self.method in (ORDER_BOOTSTRAP, DAY_BOOTSTRAP)

    def describe(self, confidence: float) -> str:
        """One line for a table footer (:func:`describe_interval`)."""
        return describe_interval(self.method, self.n_clusters, self.n_orders, confidence)


def describe_interval(method: str, n_days: int, n_orders: int, confidence: float) -> str:
    """One line naming an interval method and the number of days ``G``, e.g. ``95%
    day-clustered bootstrap (G = 45 days; each resample draws whole days with all their
    orders)``.

    Args:
        method: a :class:`Clustering` method.
        n_days: ``G``.
        n_orders: ``n`` (says whether an order bootstrap had one order per day).
        confidence: the confidence level.
    """
    pct = f"{100 * confidence:g}%"
    clustered_wr = "; WR: Wilson score interval with the days' effective n and t(G-1)"
    if method == ORDER_BOOTSTRAP:
        what = "one order per day" if n_days == n_orders else "no day labels"
        return (
            f"{pct} percentile bootstrap over orders (G = {n_days}, {what}); "
            "WR: Wilson score interval"
        )
    if method == DAY_BOOTSTRAP:
        return (
            f"{pct} day-clustered bootstrap (G = {n_days} days; each resample draws whole "
            f"days with all their orders){clustered_wr}"
        )
    if method == CLUSTER_T:
        return (
            f"{pct} cluster-robust t interval by day (G = {n_days} days, {n_days - 1} df; "
            f"Cameron & Miller 2015); none for PA-std and GLR{clustered_wr}"
        )
    return f"no interval: all {n_orders} orders are on one day (G = 1)"


def bootstrap_weights(
    clustering: Clustering, rng: np.random.Generator, n_resamples: int
) -> np.ndarray:
    """Frequency weights of ``n_resamples`` bootstrap resamples, ``[B, n]`` float64.

    Order bootstrap: row ``b`` counts how often each order was drawn among ``n`` draws
    ``rng.integers(0, n, size=(B, n))``. Day-clustered bootstrap: ``G`` days are drawn,
    ``rng.integers(0, G, size=(B, G))``, and each order takes its day's count.

    Raises:
        ValueError: for a clustering that is no bootstrap (:attr:`Clustering.bootstrap`).
    """
    if not clustering.bootstrap:
        raise ValueError(f"bootstrap_weights: the interval method is {clustering.method}")
    units = clustering.n_orders if clustering.method == ORDER_BOOTSTRAP else clustering.n_clusters
    draws = rng.integers(0, units, size=(n_resamples, units))
    offsets = (np.arange(n_resamples) * units)[:, None]
    counts = np.bincount((draws + offsets).ravel(), minlength=n_resamples * units)
    counts = counts.reshape(n_resamples, units).astype(np.float64)
    if clustering.method == ORDER_BOOTSTRAP:
        return counts
    return counts[:, clustering.labels]


def bootstrap_chunks(clustering: Clustering, rng: np.random.Generator, n_resamples: int):
    """:func:`bootstrap_weights` in chunks of at most :data:`CHUNK_ELEMENTS` elements
    (resamples × orders), yielded in order (the same draws as one call for all)."""
    chunk = max(1, CHUNK_ELEMENTS // max(clustering.n_orders, 1))
    for start in range(0, n_resamples, chunk):
        yield bootstrap_weights(clustering, rng, min(chunk, n_resamples - start))


def cluster_robust_mean(values: np.ndarray, clustering: Clustering) -> tuple[float, float]:
    """The mean of ``values`` and its cluster-robust (CR1) standard error.

    ``SE² = G/(G-1) · Σ_g (Σ_{i∈g} (x_i - x̄))² / n²`` (Cameron and Miller 2015, eq. 11
    with the ``G/(G-1)`` small-sample factor; a regression on a constant).

    Args:
        values: ``[n]`` float per-order values.
        clustering: the orders' days (``G >= 2``).

    Returns:
        ``(mean, standard error)``; the error is nan for ``G < 2``.
    """
    values = np.asarray(values, np.float64)
    mean = float(values.mean())
    g = clustering.n_clusters
    if g < 2:
        return mean, math.nan
    sums = np.bincount(clustering.labels, values - mean, minlength=g)
    variance = g / (g - 1) * float((sums**2).sum()) / values.size**2
    return mean, math.sqrt(variance)


def t_interval(mean: float, se: float, df: int, confidence: float) -> tuple[float, float]:
    """The two-sided t interval ``mean ± t_{df, (1+c)/2} · se`` at confidence ``c``."""
    half = float(scipy_stats.t.ppf((1.0 + confidence) / 2.0, df)) * se
    return mean - half, mean + half


def wilson_interval(
    p: float, n: float, confidence: float = 0.95, df: int | None = None
) -> tuple[float, float]:
    """The Wilson score interval of a proportion ``p`` observed on ``n`` trials.

    The interval inverts the score test: it is the set of ``π`` with
    ``(p - π)² <= q² π (1 - π) / n``, so with ``q`` the ``(1 + c)/2`` quantile its
    centre and half-width are (Wilson 1927, "Probable inference, the law of succession,
    and statistical inference", J. Am. Stat. Assoc. 22(158))::

        centre = (p + q²/(2n)) / (1 + q²/n)
        half   = q / (1 + q²/n) · sqrt(p (1 - p)/n + q²/(4n²))

    It always lies in ``[0, 1]`` (at ``p = 0`` the lower end is 0, at ``p = 1`` the upper
    end is 1) and keeps close to its nominal coverage for small ``n`` and ``p`` near 0 or
    1, where the Wald interval ``p ± q·sqrt(p(1-p)/n)`` leaves ``[0, 1]`` and undercovers
    (Agresti & Coull 1998, "Approximate is better than 'exact' for interval estimation
    of binomial proportions", The American Statistician 52(2), compare the two).

    Args:
        p: the observed proportion, in ``[0, 1]``.
        n: the number of trials, ``> 0``; need not be an integer (an effective sample
            size, :func:`proportion_interval`).
        confidence: ``c``, in (0, 1).
        df: None for the standard normal quantile ``z``, or Student t degrees of freedom
            (``>= 1``) for ``q = t_{df}``.

    Returns:
        ``(low, high)``, floats in ``[0, 1]``.

    Raises:
        ValueError: ``p`` outside ``[0, 1]``, ``n <= 0``, ``confidence`` outside (0, 1)
            or ``df < 1``.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"wilson_interval: the proportion p must be in [0, 1], got {p}")
    if not n > 0:
        raise ValueError(f"wilson_interval: the number of trials n must be > 0, got {n}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"wilson_interval: confidence must be in (0, 1), got {confidence}")
    if df is not None and df < 1:
        raise ValueError(f"wilson_interval: df must be >= 1, got {df}")
    level = (1.0 + confidence) / 2.0
    q = float(scipy_stats.norm.ppf(level) if df is None else scipy_stats.t.ppf(level, df))
    shrink = 1.0 + q * q / n
    centre = (p + q * q / (2.0 * n)) / shrink
    half = q / shrink * math.sqrt(p * (1.0 - p) / n + q * q / (4.0 * n * n))
    # the ends are exactly 0 at p = 0 and 1 at p = 1; rounding would leave 1e-19 or 1 - 1e-16
    low = 0.0 if p == 0.0 else max(0.0, centre - half)
    high = 1.0 if p == 1.0 else min(1.0, centre + half)
    return low, high


def proportion_interval(
    successes: np.ndarray, clustering: Clustering, confidence: float = 0.95
) -> tuple[float, float]:
    """The interval of a share of orders (WR: the share with ``PA_i > 0``), clustered by
    day the way the means' intervals are.

    * Independent orders (:data:`ORDER_BOOTSTRAP`: no day labels, or one order a day):
      the Wilson score interval (:func:`wilson_interval`) with ``n`` orders and ``z``.
    * Days with several orders (:data:`DAY_BOOTSTRAP`, :data:`CLUSTER_T`): orders of a
      day win or lose together, so ``n`` overstates the evidence. The Wilson interval is
      taken with the effective sample size ``n_eff = n / deff``, Kish's design effect
      ``deff = SE_CR² / (p (1 - p) / n)`` (Kish 1965, "Survey Sampling", section 8.2),
      with ``SE_CR`` the CR1 standard error of the share (:func:`cluster_robust_mean`),
      and the ``t_{G-1}`` quantile in place of ``z``: for the Wilson interval this equals
      Korn & Graubard's degrees-of-freedom-adjusted effective size
      ``n_eff · (z / t_{G-1})²`` with ``z`` (Korn & Graubard 1998, "Confidence intervals
      for proportions with small expected number of positive counts estimated from
      survey data", Survey Methodology 24(2)). ``deff`` is taken as at least 1
      (``n_eff <= n``: a negative within-day correlation estimated from a few days is
      more likely noise than design), and as 1 when ``p`` is 0 or 1 or ``SE_CR`` is 0
      (every day has the same share, so the clustered variance says nothing).
    * One day (:data:`NO_INTERVAL`): none, ``(nan, nan)``.

    Why not the means' intervals: the cluster-robust t interval can leave ``[0, 1]``, and
    it and the bootstrap collapse to a point when every order lost (``p = 0``), where the
    Wilson interval still gives ``[0, high]`` with ``high > 0``.

    Args:
        successes: ``[n]`` bool or 0/1 values, one per order.
        clustering: the orders' days (:meth:`Clustering.from_days`).
        confidence: the confidence level, in (0, 1).

    Returns:
        ``(low, high)`` in ``[0, 1]``, or ``(nan, nan)`` for one day.

    Raises:
        ValueError: ``successes`` not ``[n]`` 0/1 values for the clustering's ``n``.
    """
    x = np.asarray(successes, dtype=np.float64)
    if x.shape != (clustering.n_orders,) or not np.isin(x, (0.0, 1.0)).all():
        raise ValueError(
            f"proportion_interval: expected {clustering.n_orders} values of 0 or 1, got "
            f"shape {x.shape}"
        )
    if clustering.method == NO_INTERVAL:
        return math.nan, math.nan
    n = x.size
    p = float(x.mean())
    if clustering.method == ORDER_BOOTSTRAP:
        return wilson_interval(p, n, confidence)
    _, se = cluster_robust_mean(x, clustering)
    n_eff = n if p in (0.0, 1.0) or se == 0.0 else min(n, p * (1.0 - p) / se**2)
    return wilson_interval(p, n_eff, confidence, df=clustering.n_clusters - 1)


def minimum_detectable_effect(
    se: float, confidence: float = 0.95, power: float = 0.8, df: int | None = None
) -> float:
    """The smallest true mean difference a two-sided test at level ``1 - confidence``
    detects with probability ``power``: ``(q_{(1+c)/2} + q_{power}) · se`` (Bloom 1995),
    with standard normal quantiles, or Student t quantiles with ``df`` degrees of freedom.

    Args:
        se: standard error of the mean difference (bps).
        confidence: ``1 - α``, in (0, 1).
        power: ``1 - β``, in (0, 1).
        df: degrees of freedom (``G - 1`` for the cluster-robust t), or None (normal).

    Returns:
        The MDE in the units of ``se`` (nan when ``se`` is nan).
    """
    if not (0.0 < confidence < 1.0 and 0.0 < power < 1.0):
        raise ValueError(f"need 0 < confidence, power < 1; got {confidence}, {power}")
    dist = scipy_stats.norm if df is None else scipy_stats.t(df)
    return float((dist.ppf((1.0 + confidence) / 2.0) + dist.ppf(power)) * se)
