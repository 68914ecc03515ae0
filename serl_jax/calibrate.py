"""Fit the background populations so the simulated market matches a real one.

Usage::

    python -m serl_jax.calibrate --data sample:cn_1min --out configs/market/cn_1min.yaml
    python -m serl_jax.calibrate --data PATH [--lobster MESSAGE ORDERBOOK]
        [--tick-size 0.01] [--iterations 6] [--days 8] [--start FILE] [--seed 0]
        [--mm-refresh-rungs 1]
        [--fit-agent-impact [--agent-impact-y 0.7] [--agent-impact-steps 6]
            [--child-order market] [--child-slices 0]]
        [--fit-propagator [--propagator-out FILE] [--impact-days 16]]

Targets (training days only, :mod:`serl_jax.market.statistics`): quoted spread (Roll's
estimator on minute bars), 1-minute return volatility, volume per minute (its intraday
profile is matched by construction: noise activity follows the training profile), and
top-of-book depth and the price response to order flow, which minute bars do not show:
they are transferred from the LOBSTER AMZN day as depth per unit of minute volume and
as the response in volatilities per minute of volume (``--lobster``, the shipped day by
default).

The simulation is the dynamic environment with an agent of ``Q = 0`` (which leaves the
market as it would be without it), one whole day per training episode. Each iteration
simulates, compares and updates five knobs by the pooled log-ratio over symbols
``g = exp(mean_s log(target_s / simulated_s))``:

* ``mm_half_spread_ticks += (median target spread - median simulated spread) / 2``;
* ``mm_size`` and ``noise_limit_prob`` ``*= g(depth per minute volume)`` (the market
  makers' best rungs and the noise limit orders that join the best quotes make the depth);
* ``noise_size *= g(volume per minute)`` (noise market orders make most of the volume);
* ``informed_size *= g(volatility) ** 2`` (the informed traders carry the fundamental's
  moves into the book: more of them, and the mid follows the real minute moves more
  closely instead of sticking to the market makers' quotes);
* ``flow_impact_bps *= g(lambda) ** 0.5`` with ``lambda = flow_impact_per_sigma *
  volatility``, the mid's response to a minute of net order flow in bps (how far the
  informed traders' value follows order flow sets it; the target's
  ``flow_impact_per_sigma`` is measured on the LOBSTER day and transferred like the
  depth, and the simulated flow's own volatility caps that ratio, so the rule matches
  lambda itself; damped because a larger lambda also raises the volatility),

each factor clipped to [1/4, 4] and each knob to :data:`KNOB_BOUNDS`. The rules are
heuristics that move each statistic the right way; the printed table, not the rules,
says how close the fit is. The rules are coupled (``informed_size`` is also the channel
through which flow moves the mid, so cutting it to lower the volatility lowers the
response too) and do not always converge, so the CLI keeps the iterate with the
smallest :func:`fit_error` (mean absolute log-ratio over the targets), never a worse
fit than its start.

It prints real and simulated statistics side by side and writes the fitted parameters
as YAML (with the comparison as comments) for :func:`load_market_params`.

``--fit-agent-impact`` then gives the book the agents' own flow memory
(``agent_flow_memory: 1``) and scales its coefficient until metaorders on
``--impact-days`` training days follow the square-root law with ``Y`` =
``--agent-impact-y`` (:func:`fit_agent_impact`: at most ``--agent-impact-steps``
steps, stopping within 5%), with the agents' child orders of
``--child-order`` (``market``, or ``sliced`` over the minute's rounds: use the run's
``market.child_order``); the background populations stay as fitted. The written
parameters hold the result.

``--fit-propagator`` then measures the calibrated book's impact response on the training
days (:func:`serl_jax.impact.measure_impact`: metaorders of 0.1-20% of a 60-minute
window, each against the same book without it) and fits the propagator market to it
(:func:`serl_jax.impact.fit_propagator`: its square-root law, and the kernel whose
relaxation after the order is closest). It prints both reports side by side and, with
``--propagator-out``, writes the fitted ``impact`` section as a config preset
(``--config FILE`` of the train and evaluate CLIs).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import yaml

from serl_jax.data import DataError, MinuteBars, load_minute_bars, split_days
from serl_jax.data.episodes import MarketSplits, load_market
from serl_jax.data.samples import sample_path
from serl_jax.envs.dynamic import DynamicEnvParams, DynamicExecutionEnv
from serl_jax.envs.execution import EnvParams
from serl_jax.envs.market_data import MarketData
from serl_jax.envs.multi_agent import MultiAgentExecutionEnv
from serl_jax.envs.propagator import (
    PropagatorEnvParams,
    PropagatorExecutionEnv,
    PropagatorMultiAgentEnv,
)
from serl_jax.evaluation import rollout
from serl_jax.impact import ImpactReport, fit_propagator, measure_impact, se_text
from serl_jax.lob.queries import spread, top_levels
from serl_jax.market.params import MarketParams, load_market_params
from serl_jax.market.propagator import PropagatorConfig
from serl_jax.market.statistics import (
    MarketStatistics,
    comparison_table,
    lobster_statistics,
    minute_bar_statistics,
    pooled_comparison_table,
    simulated_statistics,
    transfer_depth,
    transfer_flow_impact,
)

SAMPLE_PREFIX = "sample:"
_LOBSTER_AMZN = (
    "AMZN_2012-06-21_34200000_57600000_message_1.csv.gz",
    "AMZN_2012-06-21_34200000_57600000_orderbook_1.csv.gz",
)
_MAX_STEP = 4.0


def default_lobster() -> tuple[Path, Path]:
    """The shipped LOBSTER AMZN day (message, order book): the default source of the
    depth and flow-response targets minute bars do not show."""
    return tuple(sample_path("lobster") / name for name in _LOBSTER_AMZN)


KNOB_BOUNDS = {
    "mm_size": (0.01, 1.0),
    "noise_limit_prob": (0.1, 1.0),
    "noise_size": (0.005, 0.2),
    "informed_size": (0.02, 0.3),
    "flow_impact_bps": (1.0, 60.0),
}
"""Ranges the fitted knobs stay in (fractions of V, probabilities): they keep every
population present, so a fit that cannot match all targets at once leaves a working
market and shows the mismatch in the table instead of switching a population off."""


def _no_order(policy_params, key, obs, state, params):
    return jnp.float32(0.0)


def _minute_record(prev_state, action, next_state, params):
    book = next_state.market.book
    best = top_levels(book, 1)
    return {
        "mid": next_state.market.reference,
        # filled_qty counts both sides of every trade
        "volume": (book.filled_qty - prev_state.market.book.filled_qty) / 2,
        "spread": spread(book),
        "bid_depth": best.bid_size[0],
        "ask_depth": best.ask_size[0],
        "signed_volume": next_state.market.signed_volume - prev_state.market.signed_volume,
    }


def simulate_days(
    splits: MarketSplits, market: MarketParams, key: jax.Array, days: int | None = None
) -> tuple[dict[str, np.ndarray], tuple[str, ...]]:
    """Simulates whole training days of the market with no execution agent.

    Args:
        splits: the market (training episodes and statistics).
        market: background-population parameters.
        key: PRNG key.
        days: the first ``days`` training days of each symbol (all when None).

    Returns:
        ``({"mid", "volume", "spread", "bid_depth", "ask_depth", "signed_volume"}: float64
        [N, T], symbols [N])`` with mids and spreads in ticks, volumes and depths in shares.
    """
    episodes = splits.train
    rows = np.arange(len(episodes.symbols))
    if days is not None:
        first = {}
        keep = []
        for i, s in enumerate(episodes.symbols):
            first[s] = first.get(s, 0) + 1
            if first[s] <= days:
                keep.append(i)
        rows = np.asarray(keep)
    data = MarketData.from_episodes(episodes)
    data = jax.tree.map(lambda x: x[rows], data)
    static = EnvParams(data=data, order_fraction=0.0, quantity_low=1.0, quantity_high=1.0)
    params = DynamicEnvParams.from_static(static, splits.stats, market)
    result = rollout(DynamicExecutionEnv(), _no_order, None, params, key, record=_minute_record)
    arrays = {k: np.asarray(v, np.float64) for k, v in jax.device_get(result.recorded).items()}
    return arrays, tuple(episodes.symbols[i] for i in rows)


def real_statistics(
    train: MinuteBars, tick_size: float, lobster: tuple[Path, Path]
) -> MarketStatistics:
    """Statistics of the training days' minute bars; depth and the response to order
    flow, which minute bars do not show, transferred from a LOBSTER day.

    Args:
        train: the training days (:func:`serl_jax.data.split_days`' ``train``).
        tick_size: currency per tick.
        lobster: the LOBSTER message and order-book files.

    Raises:
        ``LobsterFormatError``: unreadable LOBSTER files.
    """
    stats = minute_bar_statistics(train, tick_size)
    reference = lobster_statistics(*lobster, tick_size_dollars=tick_size)
    return transfer_flow_impact(transfer_depth(stats, reference), reference)


def _column(stats: MarketStatistics, column: str, symbols) -> np.ndarray:
    """``float[S]`` of a statistic; ``flow_impact_bps`` is Kyle's lambda in bps per minute
    of volume, ``flow_impact_per_sigma * minute_volatility_bps``."""
    table = stats.table.loc[list(symbols)]
    if column == "flow_impact_bps":
        return (table["flow_impact_per_sigma"] * table["minute_volatility_bps"]).to_numpy(float)
    return table[column].to_numpy(float)


def _log_ratios(real: MarketStatistics, sim: MarketStatistics, column: str) -> np.ndarray:
    """``log(target / simulated)`` per symbol of ``real``, where both are finite and > 0."""
    target = _column(real, column, real.table.index)
    got = _column(sim, column, real.table.index)
    ok = np.isfinite(target) & np.isfinite(got) & (target > 0) & (got > 0)
    return np.log(target[ok] / got[ok])


def _gain(real: MarketStatistics, sim: MarketStatistics, column: str) -> float:
    ratios = _log_ratios(real, sim, column)
    if ratios.size == 0:
        return 1.0
    return float(np.clip(np.exp(np.mean(ratios)), 1 / _MAX_STEP, _MAX_STEP))


def update_params(
    market: MarketParams, real: MarketStatistics, sim: MarketStatistics
) -> MarketParams:
    """One calibration step (the rules in the module docstring)."""
    spread_gap = np.nanmedian(real.table["spread_ticks"]) - np.nanmedian(sim.table["spread_ticks"])
    half = float(np.clip(market.mm_half_spread_ticks + spread_gap / 2, 0.5, 100.0))
    depth = _gain(real, sim, "depth_to_minute_volume")
    vol = _gain(real, sim, "minute_volatility_bps")

    def scaled(name: str, gain: float) -> float:
        low, high = KNOB_BOUNDS[name]
        return float(np.clip(getattr(market, name) * gain, low, high))

    return market.replace(
        mm_half_spread_ticks=half,
        mm_size=scaled("mm_size", depth),
        noise_limit_prob=scaled("noise_limit_prob", depth),
        noise_size=scaled("noise_size", _gain(real, sim, "volume_per_minute")),
        informed_size=scaled("informed_size", vol**2),
        # damped: a larger lambda also raises the volatility the other rules react to
        flow_impact_bps=scaled("flow_impact_bps", _gain(real, sim, "flow_impact_bps") ** 0.5),
    )


FIT_COLUMNS = (
    "spread_ticks",
    "minute_volatility_bps",
    "volume_per_minute",
    "depth_to_minute_volume",
    "flow_impact_bps",
)
"""The statistics the knobs target (``flow_impact_bps`` is lambda, see :func:`_column`)."""


def fit_error(real: MarketStatistics, sim: MarketStatistics) -> float:
    """Mean over :data:`FIT_COLUMNS` of the mean over symbols of ``|log(sim / real)|``
    (pairs with a non-finite or non-positive value skipped; 0 is a perfect fit, 0.69 a
    factor of 2 off on average)."""
    ratios = [_log_ratios(real, sim, column) for column in FIT_COLUMNS]
    errors = [float(np.mean(np.abs(r))) for r in ratios if r.size]
    return float(np.mean(errors)) if errors else float("inf")


def calibrate(
    splits: MarketSplits,
    real: MarketStatistics,
    start: MarketParams,
    iterations: int,
    key: jax.Array,
    days: int | None = None,
    log=print,
) -> tuple[MarketParams, MarketStatistics]:
    """Simulates ``start`` and ``iterations`` updated parameter sets (the rules in the
    module docstring) and keeps the one with the smallest :func:`fit_error`: the rules
    are coupled heuristics, so a later iterate is not always a better fit.

    Returns:
        The best parameters and the statistics of their simulation.
    """
    market, best = start, None
    for i in range(iterations + 1):
        arrays, symbols = simulate_days(splits, market, jax.random.fold_in(key, i), days)
        sim = simulated_statistics(
            arrays["mid"],
            arrays["volume"],
            arrays["spread"],
            arrays["bid_depth"],
            arrays["ask_depth"],
            symbols,
            market.tick_size,
            signed_volume=arrays["signed_volume"],
        )
        error = fit_error(real, sim)
        log(
            f"iteration {i}: spread {np.nanmedian(sim.table['spread_ticks']):.2f} ticks, "
            f"vol {np.nanmedian(sim.table['minute_volatility_bps']):.2f} bps, "
            f"depth/volume {np.nanmedian(sim.table['depth_to_minute_volume']):.3f}, "
            f"flow impact {np.nanmedian(sim.table['flow_impact_per_sigma']):.3f} sigma/V, "
            f"fit error {error:.3f}"
        )
        if best is None or error < best[0]:
            best = (error, i, market, sim)
        if i < iterations:
            market = update_params(market, real, sim)
    error, i, market, sim = best
    log(f"kept iteration {i} (fit error {error:.3f})")
    return market, sim


def write_params(
    path: Path, market: MarketParams, real: MarketStatistics, sim: MarketStatistics, command: str
):
    """Writes the parameters as YAML with the comparison table and sources as comments."""
    lines = [f"# Calibrated with: {command}", "# Real (training days) vs simulated:"]
    lines += [f"#   {line}" for line in comparison_table(real, sim).splitlines()]
    lines += ["# Sources of the real figures:"]
    lines += [f"#   {line}" for line in real.describe_sources().splitlines()]
    body = yaml.safe_dump({"market": market.to_mapping()}, sort_keys=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("\n".join(lines) + "\n" + body)
    tmp.replace(path)  # never leave a half-written file behind


def fit_propagator_to_book(
    splits: MarketSplits, market: MarketParams, days: int, log=print
) -> tuple[PropagatorConfig, float, ImpactReport, ImpactReport]:
    """The propagator fitted to the order book's impact response on the training days.

    Returns:
        ``(config, rmse, book_report, propagator_report)``: the fitted settings, the
        error of their relaxation (fractions of the peak), and both markets' reports on
        the same days and orders.

    Raises:
        ValueError: a response no propagator reproduces (``delta`` outside (0, 1]).
    """
    static = EnvParams(data=MarketData.from_episodes(splits.train))
    book = DynamicEnvParams.from_static(static, splits.stats, market)
    book_report = measure_impact(
        DynamicExecutionEnv(), MultiAgentExecutionEnv, book,
        market="lob", dataset=splits.name, days=days,
    )  # fmt: skip
    config, rmse = fit_propagator(book_report, PropagatorConfig())
    fitted = PropagatorEnvParams.from_static(static, splits.stats, config.params())
    fitted_report = measure_impact(
        PropagatorExecutionEnv(), PropagatorMultiAgentEnv, fitted,
        market="propagator", dataset=splits.name, days=days,
    )  # fmt: skip
    log(impact_comparison(book_report, fitted_report))
    return config, rmse, book_report, fitted_report


AGENT_IMPACT_Y = 0.7
"""Target prefactor ``Y`` of the square-root law ``Y sigma_day (Q/V)^delta`` for
:func:`fit_agent_impact`: the middle of the published 0.5-1 (Tóth et al. 2011; Bouchaud,
Bonart, Donier & Gould 2018, ch. 12)."""


AGENT_IMPACT_TOLERANCE = 0.05
"""Relative distance of the measured ``Y`` from its target at which
:func:`fit_agent_impact` stops: ``Y`` in 0.665-0.735 for the default target, well inside
the published 0.5-1."""


def next_agent_impact(points: list[tuple[float, float]], target_y: float) -> float:
    """The next ``agent_flow_impact_bps`` to try in :func:`fit_agent_impact`.

    ``Y`` is modelled as affine in the coefficient (the informed traders' response is
    linear in it, the book's own mechanical impact is not), so after one proportional step
    (``c * target_y / Y``, the affine model without its intercept) each step is the
    secant through the last two points. A step that would leave the bracket of the
    measured points (the largest coefficient below the target and the smallest above it),
    or a secant that does not rise, is replaced by the bracket's geometric midpoint, or
    when there is no bracket by the proportional step from the last point: the fit never
    walks away from a root it has enclosed (a safeguarded secant, e.g. Press et al.,
    Numerical Recipes, 3rd ed., 2007, sec. 9.2-9.3).

    Args:
        points: ``(agent_flow_impact_bps, Y)`` measured so far, oldest first (>= 1 point,
            every ``Y`` > 0).
        target_y: the ``Y`` to reach (> 0).

    Returns:
        The next coefficient, bps (> 0).

    Raises:
        ValueError: no points.
    """
    if not points:
        raise ValueError("next_agent_impact: need at least one measured point")
    c1, y1 = points[-1]
    proportional = c1 * target_y / y1
    step = proportional
    if len(points) > 1:
        c0, y0 = points[-2]
        slope = (y1 - y0) / (c1 - c0) if c1 != c0 else 0.0
        if slope > 0:
            step = c1 + (target_y - y1) / slope
    below = [c for c, y in points if y < target_y]
    above = [c for c, y in points if y > target_y]
    if below and above and max(below) < min(above):
        low, high = max(below), min(above)
        if not low < step < high:
            step = float(np.sqrt(low * high))
    return float(step) if step > 0 else float(proportional)


def fit_agent_impact(
    splits: MarketSplits,
    market: MarketParams,
    days: int,
    target_y: float = AGENT_IMPACT_Y,
    iterations: int = 6,
    log=print,
    child_order: str = "market",
    tolerance: float = AGENT_IMPACT_TOLERANCE,
    child_slices: int = 0,
) -> tuple[MarketParams, ImpactReport]:
    """The book with the agents' own flow memory (``agent_flow_memory`` 1), its
    ``agent_flow_impact_bps`` searched until metaorders on the training days follow the
    square-root law with prefactor ``target_y``.

    Each iteration measures the book's :class:`~serl_jax.impact.ImpactReport` on
    ``days`` training days spread evenly over the training period
    (:meth:`~serl_jax.data.EpisodeSet.spread`: a fit on the first days alone carries
    their regime to every later day), with the same key each time so that the
    measurements are paired, and moves the coefficient by :func:`next_agent_impact`
    (a proportional step, then safeguarded secant steps). It stops at the first
    measurement within ``tolerance`` of the target; one that never gets there says so in
    the log and returns the coefficient whose ``Y`` was nearest the target. The
    background is untouched: without agent orders the market is the same with either
    memory.

    Args:
        splits: the dataset (its training days are measured).
        market: the calibrated background; its ``agent_flow_impact_bps`` is the start.
        days: training days measured per iteration.
        target_y: the ``Y`` to reach (> 0).
        iterations: the most coefficient steps (>= 1); the last one is measured too.
        log: where progress lines go.
        child_order: the metaorders' child orders, ``"market"`` or ``"sliced"``
            (:class:`~serl_jax.envs.dynamic.DynamicEnvParams`): the run that uses the
            book should use the same, since a sliced order pays more of its own response.
        tolerance: relative distance ``|Y / target_y - 1|`` that ends the search (>= 0).
        child_slices: a sliced child order's parts (0: one per trading round).

    Returns:
        ``(market, report)``: the fitted parameters and their report on the same days.

    Raises:
        ValueError: ``target_y``, ``iterations`` or ``tolerance`` out of range, or a
            measured ``Y`` that is not positive or cannot be fitted (no response to
            scale: start from a larger ``agent_flow_impact_bps``).
    """
    if not target_y > 0 or iterations < 1 or not tolerance >= 0:
        raise ValueError(
            f"fit_agent_impact: need target_y > 0, iterations >= 1 and tolerance >= 0, "
            f"got {target_y}, {iterations} and {tolerance}"
        )
    static = EnvParams(data=MarketData.from_episodes(splits.train.spread(days)))
    market = market.replace(agent_flow_memory=1)

    def measure(market: MarketParams) -> ImpactReport:
        book = DynamicEnvParams.from_static(
            static, splits.stats, market, child_order, child_slices=child_slices
        )
        try:
            report = measure_impact(
                DynamicExecutionEnv(), MultiAgentExecutionEnv, book,
                market="lob", dataset=splits.name, days=days,
            )  # fmt: skip
        except ValueError as err:  # no measurable impact to scale from
            raise ValueError(
                f"fit_agent_impact: {err} at agent_flow_impact_bps "
                f"{market.agent_flow_impact_bps}; start from a larger one (the starting "
                "book's agent_flow_impact_bps, calibrate --start FILE)"
            ) from err
        if not np.isfinite(report.y) or report.y <= 0:
            raise ValueError(f"fit_agent_impact: measured Y = {report.y} at "
                             f"agent_flow_impact_bps {market.agent_flow_impact_bps}")  # fmt: skip
        return report

    points: list[tuple[float, float]] = []
    tried: list[tuple[MarketParams, ImpactReport]] = []
    for i in range(iterations + 1):
        report = measure(market)
        coefficient = market.agent_flow_impact_bps
        points.append((coefficient, report.y))
        tried.append((market, report))
        if abs(report.y / target_y - 1) <= tolerance:
            log(f"agent impact {i}: agent_flow_impact_bps {coefficient:.3f}: "
                f"delta {report.delta:.3f}, Y {report.y:.3f}: within {tolerance:.0%}")  # fmt: skip
            break
        if i == iterations:  # a noisy or non-monotone response: the nearest point measured
            market, report = min(tried, key=lambda pair: abs(pair[1].y / target_y - 1))
            log(f"agent impact: not within {tolerance:.0%} of Y {target_y} after "
                f"{iterations} steps; kept the nearest, agent_flow_impact_bps "
                f"{market.agent_flow_impact_bps:.3f} (Y {report.y:.3f})")  # fmt: skip
            break
        scaled = next_agent_impact(points, target_y)
        log(f"agent impact {i}: agent_flow_impact_bps {coefficient:.3f}: "
            f"delta {report.delta:.3f}, Y {report.y:.3f} -> {scaled:.3f}")  # fmt: skip
        market = market.replace(agent_flow_impact_bps=float(scaled))
    log(impact_comparison(report))
    return market, report


def impact_comparison(*reports: ImpactReport) -> str:
    """The reports' figures side by side, one row per market."""
    lines = [
        f"{'market':<12} {'delta':>6} {'Y':>6} {'left 1x':>8} {'left 2x':>8} "
        f"{'TWAP/sqrt':>9} {'reslice':>8} {'(se)':>7} {'round trip bps':>14}"
    ]
    for r in reports:
        lines.append(
            f"{r.market:<12} {r.delta:>6.3f} {r.y:>6.3f} {r.post_fraction_1x:>8.3f} "
            f"{r.post_fraction_2x:>8.3f} {r.twap_cost_over_sqrt_law:>9.3f} "
            f"{r.reslice_change:>+8.3f} {se_text(r.reslice_change_se):>7} "
            f"{r.round_trip_bps:>+14.2f}"
        )
    return "\n".join(lines)


def write_propagator(path: Path, config: PropagatorConfig, rmse: float, command: str) -> None:
    """Writes the fitted propagator as a config preset (``impact`` section, and
    ``market.simulator: propagator``), with its fit as a comment."""
    lines = [
        f"# Fitted with: {command}",
        f"# Relaxation after the order: RMSE {rmse:.4f} of the peak against the order book's",
    ]
    body = yaml.safe_dump(
        {"market": {"simulator": "propagator"}, "impact": dataclasses.asdict(config)},
        sort_keys=False,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("\n".join(lines) + "\n" + body)
    tmp.replace(path)  # never leave a half-written file behind


def _resolve(spec: str) -> Path:
    return sample_path(spec[len(SAMPLE_PREFIX) :]) if spec.startswith(SAMPLE_PREFIX) else Path(spec)


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status (2 for bad input, one ``error:`` line)."""
    parser = argparse.ArgumentParser(
        prog="python -m serl_jax.calibrate", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--data", required=True, help="minute bars: a path or sample:<name>")
    parser.add_argument(
        "--lobster",
        nargs=2,
        metavar=("MESSAGE", "ORDERBOOK"),
        help="LOBSTER files for the depth ratio (default: the shipped AMZN day)",
    )
    parser.add_argument("--tick-size", type=float, default=0.01, help="currency per tick")
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument(
        "--days", type=int, default=8, help="training days per symbol to simulate (0: all)"
    )
    parser.add_argument(
        "--start", help="YAML of starting parameters (default: MarketParams defaults)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--mm-refresh-rungs",
        type=int,
        help="outer rungs the market makers refresh every round, held fixed in the fit "
        "(market.mm_refresh_rungs; default: the start's, 1 without --start)",
    )
    parser.add_argument(
        "--short-days",
        choices=("error", "drop"),
        default="error",
        help="days with fewer than 100 bars: an error (default) or dropped and reported",
    )
    parser.add_argument("--out", help="write the fitted parameters here (YAML)")
    parser.add_argument(
        "--fit-propagator",
        action="store_true",
        help="also fit the propagator market to the calibrated book's impact response",
    )
    parser.add_argument(
        "--fit-agent-impact",
        action="store_true",
        help="give the agents their own flow memory, scaled to the square-root law's Y",
    )
    parser.add_argument(
        "--agent-impact-y", type=float, default=AGENT_IMPACT_Y, help="Y to fit (> 0)"
    )
    parser.add_argument(
        "--agent-impact-steps", type=int, default=6, help="the agent-impact fit's most steps"
    )
    parser.add_argument(
        "--child-order",
        choices=("market", "sliced"),
        default="market",
        help="the agents' child orders in the agent-impact fit (market.child_order)",
    )
    parser.add_argument(
        "--child-slices",
        type=int,
        default=0,
        help="a sliced child order's parts (market.child_slices; 0: one per round)",
    )
    parser.add_argument("--propagator-out", help="write the fitted propagator here (YAML)")
    parser.add_argument(
        "--impact-days", type=int, default=16, help="training days of the impact response"
    )
    parser.add_argument(
        "--verbose", action="store_true", help="the comparison per symbol (default: pooled)"
    )
    args = parser.parse_args(argv)
    try:
        if args.iterations < 0 or args.days < 0:
            raise ValueError("--iterations and --days must be >= 0")
        if not args.agent_impact_y > 0:
            raise ValueError(f"--agent-impact-y must be > 0, got {args.agent_impact_y}")
        if args.agent_impact_steps < 1:
            raise ValueError(f"--agent-impact-steps must be >= 1, got {args.agent_impact_steps}")
        path = _resolve(args.data)
        lobster = tuple(Path(p) for p in args.lobster) if args.lobster else default_lobster()
        start = load_market_params(args.start) if args.start else MarketParams()
        start = start.replace(tick_size=args.tick_size)
        if args.mm_refresh_rungs is not None:
            start = start.replace(mm_refresh_rungs=args.mm_refresh_rungs)
        bars = load_minute_bars(path, short_days=args.short_days)
        real = real_statistics(split_days(bars)["train"], args.tick_size, lobster)
        splits = load_market(path, short_days=args.short_days)
    except (DataError, ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    market, sim = calibrate(
        splits, real, start, args.iterations, jax.random.PRNGKey(args.seed), args.days or None
    )
    print(comparison_table(real, sim) if args.verbose else pooled_comparison_table(real, sim))
    print(real.describe_sources())
    command = "python -m serl_jax.calibrate " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.fit_agent_impact:
        try:
            market, _ = fit_agent_impact(
                splits, market, args.impact_days, args.agent_impact_y,
                iterations=args.agent_impact_steps, child_order=args.child_order,
                child_slices=args.child_slices,
            )  # fmt: skip
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    if args.out:
        write_params(Path(args.out), market, real, sim, command)
        print(f"wrote {args.out}")
    if args.fit_propagator:
        try:
            config, rmse, _, _ = fit_propagator_to_book(splits, market, args.impact_days)
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        print(f"fitted propagator (relaxation RMSE {rmse:.4f} of the peak):")
        print(yaml.safe_dump({"impact": dataclasses.asdict(config)}, sort_keys=False))
        if args.propagator_out:
            write_propagator(Path(args.propagator_out), config, rmse, command)
            print(f"wrote {args.propagator_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
