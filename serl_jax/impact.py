"""The impact response of an execution market, measured through its environment.

Any market that runs the execution task (the propagator,
:class:`~serl_jax.envs.propagator.PropagatorExecutionEnv`; the order book,
:class:`~serl_jax.envs.dynamic.DynamicExecutionEnv`) is measured the same way, with the
same scripted orders on the same days, against the empirical laws of market impact:

- **Square-root law** (Tóth et al. 2011; Almgren et al. 2005): sell metaorders of
  ``Q = f * E[V]`` (``f`` in :data:`DEFAULT_SIZES`, ``V`` the volume of a ``duration``
  -minute window starting at each minute of ``starts``), one TWAP slice a minute. The
  peak impact, the price at the order's end against the same market without the order, is
  fitted to ``Y * sigma_day * (Q/V)^delta`` over the sizes (weighted least squares of the
  logs of the means over days, each weighted by its inverse variance, so a size whose
  mean impact is within the noise between days, such as a sub-tick move in the order
  book, counts little; ``Q/V`` with the shares executed by the order's end and the day's
  realized window volume; a window with no realized volume, a gap in the data, has no
  ``Q/V`` and is left out of that mean, counted in the report, while its prices count).
- **Relaxation** (Bacry et al. 2015; Zarinelli et al. 2015: to about 2/3 of the peak):
  the impact one and two order durations after the order ends, over its peak, at the
  reference size (:data:`REFERENCE_SIZE`).
- **TWAP's cost against the square-root law**: the environment's own task, a whole-day
  TWAP order of the reference size of the day's expected volume: its cost against the
  undisturbed market's prices, spread included, in units of ``sigma_day * sqrt(Q/V)``
  (``V`` the day's realized volume; means over days).
- **Re-slicing**: the reference metaorder's cost when its child orders go every
  :data:`RESLICE_MINUTES` minutes (five minutes' slices at once) instead of every minute,
  as a relative change. Each burst trades at the middle minute of its five, so the
  order's mean execution time stays the reference's: bursts at the start of their five
  minutes trade two minutes earlier on average and, on an impact path that rises over
  the order, pay less for that timing alone (about 5–7% on the order book's paths), which
  is not what re-slicing tests.
- **Round trip**: buy at the reference size over the window, then sell at the same size
  over the next one (two agents of the market's multi-agent environment): the sell's
  average price minus the buy's, each against the undisturbed market's prices at its
  fills, in bps of the arrival price. A market in which it is positive can be
  manipulated.

Every scripted order follows its cumulative schedule: every minute it sends what brings
its executed shares to the schedule's running total, so the shares a child order could
not fill (an order book thinner than the child order) go the next minute, within the
order's window rather than after it, and two schedules are compared on the same shares
(the report gives the fraction executed by the order's end).

**Several windows a day.** With more than one start, each day runs one metaorder per
window (each its own scripted run, on the same day), every figure but the whole-day
TWAP's is first averaged over a day's windows, and standard errors are taken over days:
the windows of one day share its volatility and volume regime, so they are clustered
by day, not counted as independent orders. The first window draws the order book's
numbers from ``key``, the ``i``-th later one from ``fold_in(key, i)``, so a one-start
report is unchanged, two windows do not replay the same background draws, and a start
given twice is a second, independent draw of the book's randomness in the same window
(a replication, which narrows the part of the error that is the book's own noise).

"The undisturbed market" is the same environment and days with ``Q = 0`` and the same
PRNG keys, so in the order book the background populations draw the same numbers and the
difference is the order's own impact (in the propagator the undisturbed price is the
replayed bar). ``sigma_day`` is the symbol's training volatility,
``sigma_minute * sqrt(T)``.

:func:`fit_propagator` turns a market's report into the propagator settings that
reproduce it (``python -m serl_jax.calibrate --fit-propagator`` fits the order book's).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from serl_jax.components.profiling import AgentProfile
from serl_jax.envs.execution import EnvParams, ExecutionEnv
from serl_jax.market.propagator import PropagatorConfig, schedule_impacts

DEFAULT_SIZES = (0.001, 0.003, 0.01, 0.03, 0.1, 0.2)
"""Metaorder sizes, fractions of the window's expected volume (0.1% to 20%)."""
REFERENCE_SIZE = 0.05
"""The size of the relaxation, cost, re-slicing and round-trip measurements."""
RESLICE_MINUTES = 5


@dataclasses.dataclass(frozen=True)
class ImpactReport:
    """One market's impact response (module docstring).

    Attributes:
        market, dataset: names.
        days: days (episodes) measured.
        duration_minutes: the metaorders' duration D, minutes.
        starts: the metaorders' first minutes, one window each per day.
        delta, y: the square-root law's fitted exponent and prefactor.
        delta_se: the standard error of ``delta`` (None without the sizes' errors).
        post_fraction_1x, post_fraction_2x: the impact D and 2D minutes after the order
            ends, over its peak.
        twap_cost_over_sqrt_law: the whole-day TWAP order's mean cost over
            ``mean sigma_day sqrt(Q/V_day)``.
        reslice_change: relative change of the reference metaorder's cost with child
            orders every :data:`RESLICE_MINUTES` minutes, each at the middle minute of
            its five.
        reslice_change_se: its standard error over days (:func:`relative_change`;
            None with one day).
        executed_fraction, reslice_executed_fraction: the reference metaorder's shares
            executed by its end over ``Q`` (mean over days), with 1-minute and with
            re-sliced child orders (below 1 where the book could not fill them).
        round_trip_bps: a buy-then-sell round trip's profit, bps (never above 0 in a
            market without price manipulation).
        participation: ``[len(sizes)]`` mean realized ``Q/V`` per size.
        gap_windows: metaorder windows (days x starts) whose order minutes have no
            realized volume (a data gap), left out of ``participation``.
        peak_sigma: ``[len(sizes)]`` mean peak impact per size, units of sigma_day.
        peak_sigma_se: ``[len(sizes)]`` its standard error over days.
        relaxation: ``[3D + 1]`` the mean impact path of the reference order over its
            peak, minute by minute from its start.
    """

    market: str
    dataset: str
    days: int
    duration_minutes: int
    starts: tuple[int, ...]
    delta: float
    y: float
    delta_se: float | None
    post_fraction_1x: float
    post_fraction_2x: float
    twap_cost_over_sqrt_law: float
    reslice_change: float
    reslice_change_se: float | None
    executed_fraction: float
    reslice_executed_fraction: float
    round_trip_bps: float
    participation: tuple[float, ...]
    gap_windows: int
    peak_sigma: tuple[float, ...]
    peak_sigma_se: tuple[float, ...]
    relaxation: tuple[float, ...]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (lists for the tuples)."""
        out = dataclasses.asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}


def fit_square_root_law(
    participation, peak_sigma, standard_error=None
) -> tuple[float, float, float | None]:
    """``(delta, Y, se(delta))`` of ``peak = Y (Q/V)^delta`` by least squares on the logs.

    With ``standard_error``, each size's log is weighted by its inverse variance,
    ``(peak / se)^2`` (the delta method: ``se(log peak) = se / peak``), and ``se(delta)``
    is the slope's standard error with those variances known (Aitken's generalized least
    squares); without it, or where any error is 0, every size weighs the same and
    ``se(delta)`` is None.

    Args:
        participation: ``float[n]`` mean ``Q/V`` per size, > 0.
        peak_sigma: ``float[n]`` mean peak impact per size, units of sigma_day.
        standard_error: ``float[n]`` the standard error of each mean over days, or None.

    Raises:
        ValueError: fewer than two sizes with a positive mean peak (no fit).
    """
    x, y = np.asarray(participation, np.float64), np.asarray(peak_sigma, np.float64)
    keep = (x > 0) & (y > 0)
    if keep.sum() < 2:
        raise ValueError(f"impact fit: {keep.sum()} size(s) with a positive mean peak, need 2")
    logx, logy = np.log(x[keep]), np.log(y[keep])
    se = None if standard_error is None else np.asarray(standard_error, np.float64)[keep]
    if se is None or not np.all(se > 0):
        slope, intercept = np.polyfit(logx, logy, 1)
        return float(slope), float(np.exp(intercept)), None
    weight = (y[keep] / se) ** 2
    design = np.stack([np.ones_like(logx), logx], axis=1)
    covariance = np.linalg.inv(design.T @ (weight[:, None] * design))
    intercept, slope = covariance @ (design.T @ (weight * logy))
    return float(slope), float(np.exp(intercept)), float(np.sqrt(covariance[1, 1]))


def _window_volume(data, episodes, start, minutes, cumulative):
    """Per-episode sum over ``[start, start + minutes)`` of a ``[N, T + 1]`` running sum."""
    return cumulative[episodes, start + minutes] - cumulative[episodes, start]


def scripted_orders(
    env: ExecutionEnv,
    params: EnvParams,
    episodes: jax.Array,
    start: int,
    length: int,
    quantity: jax.Array,
    schedule: jax.Array,
    key: jax.Array,
) -> dict[str, jax.Array]:
    """Runs one scripted order per episode: at each step ``t`` a child order of ``Q *
    sum(schedule[:t + 1])`` minus the shares executed so far, so a step with
    ``schedule[t] > 0`` sends its share and what an earlier child order could not fill
    goes with the next minute's (a broker behind schedule catches up at once); a step
    on schedule sends nothing. The window's last step trades what is left with
    ``force_liquidation``.

    Args:
        env: the market's single-agent environment.
        params: its parameters.
        episodes: ``int32[E]`` days.
        start: the window's first minute.
        length: the window's minutes (the last step trades what is left, if anything).
        quantity: ``float32[E]`` the parent order's multiplier on ``order_fraction *
            E[window volume]`` (0: no order, the undisturbed market).
        schedule: ``float32[length]`` fractions of Q per step (>= 0).
        key: PRNG key; step ``t`` of episode ``e`` uses ``fold_in(fold_in(key, e), t)``
            whatever the order, so runs that differ only in Q are paired.

    Returns:
        ``{"quantity": [E], "market_price": [E, length], "exec_qty": [E, length],
        "exec_price": [E, length]}`` (shares and currency; ``market_price`` is the
        price before each minute's trades).
    """

    q, market_price, qty, price = _scripted_orders(
        env, params, episodes, start, length, quantity, schedule, key
    )
    return {"quantity": q, "market_price": market_price, "exec_qty": qty, "exec_price": price}


@functools.partial(jax.jit, static_argnames=("env", "length"))
def _scripted_orders(env, params, episodes, start, length, quantity, schedule, key):
    """:func:`scripted_orders`' compiled part: one program per environment and length."""

    total = jnp.cumsum(schedule)

    def one(episode, multiplier):
        state = env.init_state(params, episode, jnp.int32(start), jnp.int32(length), multiplier)
        episode_key = jax.random.fold_in(key, episode)

        def minute(state, t):
            executed = state.quantity - state.inventory
            target = total[t] * state.quantity - executed  # behind schedule: catch up
            action = jnp.clip(jnp.where(state.inventory > 0, target / state.inventory, 0.0), 0, 1)
            _, state, _, _, info = env.step_env(
                jax.random.fold_in(episode_key, t), state, action, params
            )
            return state, (info["market_price"], info["exec_qty"], info["exec_price"])

        _, (market_price, qty, price) = jax.lax.scan(minute, state, jnp.arange(length))
        return state.quantity, market_price, qty, price

    return jax.vmap(one)(episodes, quantity)


def relative_change(new, old) -> tuple[float, float | None]:
    """The relative change of a mean cost, ``mean(new) / mean(old) - 1``, and its
    standard error over days.

    The error is the delta method's for a ratio of paired means: ``sd(new_i - (1 + c)
    old_i) / (sqrt(n) mean(old))`` with ``c`` the change (e.g. Cochran 1977, ch. 6, the
    ratio estimator's variance).

    Args:
        new, old: ``float[n]`` per-day costs of the two schedules on the same days.

    Returns:
        ``(change, se)``, ``se`` None when ``n`` < 2.
    """
    new, old = np.asarray(new, np.float64), np.asarray(old, np.float64)
    ratio = new.mean() / old.mean()
    if new.size < 2:
        return float(ratio - 1.0), None
    residual = new - ratio * old
    return float(ratio - 1.0), float(residual.std(ddof=1) / np.sqrt(new.size) / abs(old.mean()))


def se_text(value: float | None) -> str:
    """A standard error as a table shows it: ``"(0.012)"``, or ``"n/a"`` for None."""
    return "n/a" if value is None else f"({value:.3f})"


def _cost_sigma(run, undisturbed, sigma, side):
    """Per-order cost against the undisturbed prices, units of sigma_day (a fraction)."""
    qty = run["exec_qty"]
    paid = (qty * run["exec_price"]).sum(1)
    reference = (qty * undisturbed["market_price"]).sum(1)
    return side * (1.0 - paid / reference) / sigma


def measure_impact(
    env: ExecutionEnv,
    multi_agent_env_class,
    params: EnvParams,
    *,
    market: str,
    dataset: str,
    duration: int = 60,
    starts: tuple[int, ...] = (30,),
    days: int = 32,
    sizes: tuple[float, ...] = DEFAULT_SIZES,
    key: jax.Array | None = None,
) -> ImpactReport:
    """The market's :class:`ImpactReport` (module docstring) on the first ``days`` days
    of ``params.data``.

    Args:
        env: the market's single-agent environment (its reward slot is not used).
        multi_agent_env_class: its multi-agent environment's class (the round trip's two
            agents), called as ``cls(2, "independent", profile_fn=...)``.
        params: the market's parameters (set to sells of fixed-size child orders, with no
            participation cap: the report measures the market, not a broker's limit).
        market, dataset: names for the report.
        duration: D, the metaorders' minutes.
        starts: their first minutes, one window per start and day (``start + 3D + 1``
            minutes must fit in the day); several are clustered by day (module
            docstring).
        days: days measured (fewer if the data has fewer).
        sizes: metaorder sizes, fractions of the window's expected volume.
        key: PRNG key (default ``PRNGKey(0)``).

    Raises:
        ValueError: no start, a window that does not fit in the day, no window with
            realized volume, or a square-root fit with fewer than two sizes with a
            positive mean peak.
    """
    data = params.data
    length = 3 * duration + 1
    if not starts:
        raise ValueError("impact: starts is empty, need at least one metaorder start")
    for start in starts:
        if start < 0 or start + length > data.num_slots:
            raise ValueError(
                f"impact: start {start} + 3 x {duration} + 1 minutes do not fit in a day "
                f"of {data.num_slots} minutes"
            )
    key = jax.random.PRNGKey(0) if key is None else key
    params = params.replace(
        side=1.0, quantity_low=1.0, quantity_high=1.0, random_window=False,
        child_quantity="fixed", participation_cap=1e9,
    )  # fmt: skip
    episodes = jnp.arange(min(days, data.num_episodes), dtype=jnp.int32)
    sigma = np.asarray(data.sigma[episodes]) * np.sqrt(data.num_slots)
    twap = np.zeros(length, np.float32)
    twap[:duration] = 1.0 / duration
    every_fifth = np.zeros(length, np.float32)
    every_fifth[RESLICE_MINUTES // 2 : duration : RESLICE_MINUTES] = RESLICE_MINUTES / duration

    def window(start: int, window_key: jax.Array) -> dict[str, Any]:
        """Every metaorder of the window from ``start``, per day (``[..., E]`` arrays)."""
        expected_order = _window_volume(data, episodes, start, duration, data.cum_profile)
        expected_window = _window_volume(data, episodes, start, length, data.cum_profile)
        per_size = expected_order / expected_window / params.order_fraction
        realized = np.asarray(_window_volume(data, episodes, start, duration, data.cum_volume))

        def run(size, schedule):
            schedule = jnp.asarray(schedule)
            quantity = size * per_size
            return jax.device_get(
                scripted_orders(
                    env, params, episodes, start, length, quantity, schedule, window_key
                )
            )

        undisturbed = run(0.0, twap)

        def impact_path(orders):  # sells: a price below the undisturbed one is impact
            base = undisturbed["market_price"]
            return (base - orders["market_price"]) / base / sigma[:, None]

        participation, peaks = [], []
        for size in sizes:
            orders = run(size, twap)
            executed = orders["exec_qty"][:, :duration].sum(1)
            participation.append(
                np.where(realized > 0, executed / np.where(realized > 0, realized, 1.0), np.nan)
            )
            peaks.append(impact_path(orders)[:, duration])
        reference = run(REFERENCE_SIZE, twap)
        resliced = run(REFERENCE_SIZE, every_fifth)
        return {
            "participation": np.stack(participation),
            "peak": np.stack(peaks),
            "path": impact_path(reference),
            "cost": _cost_sigma(reference, undisturbed, sigma, 1.0),
            "reslice_cost": _cost_sigma(resliced, undisturbed, sigma, 1.0),
            "executed": reference["exec_qty"][:, :duration].sum(1) / reference["quantity"],
            "reslice_executed": resliced["exec_qty"][:, :duration].sum(1) / resliced["quantity"],
            "round_trip": round_trip_profit_bps(
                multi_agent_env_class, params, episodes, start, duration, window_key
            ),
        }

    keys = [key] + [jax.random.fold_in(key, i) for i in range(1, len(starts))]
    windows = [window(start, k) for start, k in zip(starts, keys, strict=True)]
    by_order = np.stack([w.pop("participation") for w in windows])  # [starts, sizes, E]
    gaps = np.isnan(by_order[:, 0])
    if gaps.all():
        raise ValueError("impact: no metaorder window has realized volume (all data gaps)")
    participation = np.nanmean(by_order, axis=(0, 2))
    # each day's mean over its windows: the days are the independent units
    per_day = {name: np.mean([w[name] for w in windows], axis=0) for name in windows[0]}
    n_days = int(episodes.shape[0])
    peaks = per_day["peak"].mean(1)
    if n_days > 1:
        peak_errors = per_day["peak"].std(1, ddof=1) / np.sqrt(n_days)
    else:
        peak_errors = np.zeros(len(sizes))
    delta, y, delta_se = fit_square_root_law(participation, peaks, peak_errors)
    path = per_day["path"].mean(0)
    peak = path[duration]
    reslice_change, reslice_change_se = relative_change(per_day["reslice_cost"], per_day["cost"])

    n_slots = data.num_slots  # the whole-day TWAP order of the reference size
    day = jnp.full(n_slots, 1.0 / n_slots, jnp.float32)
    day_size = jnp.full(episodes.shape, REFERENCE_SIZE / params.order_fraction)

    def whole_day(multiplier):
        return jax.device_get(
            scripted_orders(env, params, episodes, 0, n_slots, multiplier, day, key)
        )

    day_orders, day_undisturbed = whole_day(day_size), whole_day(0.0 * day_size)
    day_volume = np.asarray(data.cum_volume[episodes, n_slots] - data.cum_volume[episodes, 0])
    twap_cost = np.mean(_cost_sigma(day_orders, day_undisturbed, sigma, 1.0))
    sqrt_law = np.mean(np.sqrt(day_orders["exec_qty"].sum(1) / day_volume))

    return ImpactReport(
        market=market,
        dataset=dataset,
        days=n_days,
        duration_minutes=duration,
        starts=tuple(int(start) for start in starts),
        delta=delta,
        y=y,
        delta_se=delta_se,
        post_fraction_1x=float(path[2 * duration] / peak),
        post_fraction_2x=float(path[3 * duration] / peak),
        twap_cost_over_sqrt_law=float(twap_cost / sqrt_law),
        reslice_change=reslice_change,
        reslice_change_se=reslice_change_se,
        executed_fraction=float(per_day["executed"].mean()),
        reslice_executed_fraction=float(per_day["reslice_executed"].mean()),
        round_trip_bps=float(per_day["round_trip"]),
        participation=tuple(float(v) for v in participation),
        gap_windows=int(gaps.sum()),
        peak_sigma=tuple(float(v) for v in peaks),
        peak_sigma_se=tuple(float(v) for v in peak_errors),
        relaxation=tuple(float(v) for v in path / peak),
    )


@functools.lru_cache(maxsize=32)
def _round_trip_program(multi_agent_env_class, start: int, duration: int):
    """:func:`round_trip_profit_bps`' compiled run, one per market, window and duration
    (cached: a window measured again, in a replication or the next step of a fit, is not
    compiled again): ``run(params, episodes, multiplier, key)`` gives the ``[E, 2D, 2]``
    market prices, executed shares and fill prices."""

    def profile(_key, agent, _n_agents, env_params):
        return AgentProfile(
            side=jnp.where(agent == 0, -1.0, 1.0).astype(jnp.float32),
            quantity=jnp.float32(1.0),
            start=jnp.int32(start) + agent * duration,
            window_len=jnp.int32(duration),
            urgency=jnp.float32(0.0),
        )

    env = multi_agent_env_class(2, "independent", profile_fn=profile)

    def run(params, episodes, multiplier, key):
        sized = params.replace(order_fraction=params.order_fraction * multiplier)

        def one(episode):
            state = env.init_state(sized, episode, key)
            episode_key = jax.random.fold_in(key, episode)

            def minute(state, t):
                agents = state.agents
                actions = 1.0 / jnp.maximum(agents.window_len - agents.time, 1).astype(jnp.float32)
                _, state, _, _, info = env.step_env(
                    jax.random.fold_in(episode_key, t), state, actions, params
                )
                return state, (info["market_price"], info["exec_qty"], info["exec_price"])

            _, out = jax.lax.scan(minute, state, jnp.arange(2 * duration))
            return out

        return jax.vmap(one)(episodes)

    return jax.jit(run)


def round_trip_profit_bps(
    multi_agent_env_class,
    params: EnvParams,
    episodes: jax.Array,
    start: int,
    duration: int,
    key: jax.Array,
) -> float:
    """A buy over ``[start, start + D)`` then a sell over the next ``D`` minutes (TWAP
    slices, two agents, each ``Q`` the reference size of its window's expected volume):
    the mean over days of ``(sell price - buy price)`` against the undisturbed market's
    prices at the same fills, bps of the arrival price (module docstring)."""

    run = _round_trip_program(multi_agent_env_class, int(start), int(duration))
    per_window = REFERENCE_SIZE / params.order_fraction
    base_price, _, _ = jax.device_get(run(params, episodes, jnp.float32(0.0), key))
    _, qty, paid = jax.device_get(run(params, episodes, jnp.float32(per_window), key))
    # [E, 2D, 2 agents]: each agent's average fill against the undisturbed prices
    excess = (qty * (paid - base_price)).sum(1) / qty.sum(1)
    arrival = base_price[:, 0, 0]
    profit = (excess[:, 1] - excess[:, 0]) / arrival * 1e4
    return float(np.mean(profit))


KERNEL_GRID = {
    "power_law": [
        {"beta": beta, "tau0": tau0}
        for beta in (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.3)
        for tau0 in (1.0, 2.0, 5.0, 10.0, 20.0, 60.0)
    ],
    "exponential": [{"resilience": float(rate)} for rate in np.geomspace(0.002, 0.5, 25)],
}
"""The kernels :func:`fit_propagator` tries: power laws and exponentials."""


def fit_propagator(report: ImpactReport, base: PropagatorConfig) -> tuple[PropagatorConfig, float]:
    """The propagator that reproduces a market's measured impact response.

    ``delta`` and ``Y`` are the report's square-root fit (at its metaorders' duration,
    which becomes ``reference_minutes``); the kernel is the one of :data:`KERNEL_GRID`
    whose relaxation after a constant-rate order of that duration (the propagator's
    closed form, no permanent part) is closest to the report's, in least squares over
    the minutes after the order ends. The other settings are ``base``'s, with the
    permanent part off (the fitted kernel carries what stays).

    Args:
        report: the market's :class:`ImpactReport`.
        base: the settings to start from (liquidity, temporary part, K).

    Returns:
        ``(config, rmse)``: the fitted settings and the root-mean-square error of its
        relaxation against the report's (fractions of the peak).

    Raises:
        ValueError: a fitted ``delta`` outside (0, 1] or ``Y`` below 0 (the market's
            response is not a concave impact), naming the value.
    """
    if not 0.0 < report.delta <= 1.0 or report.y < 0.0:
        raise ValueError(
            f"fit_propagator: the measured response has delta {report.delta:.3f} and Y "
            f"{report.y:.3f}; a propagator needs delta in (0, 1] and Y >= 0"
        )
    duration = report.duration_minutes
    target = np.asarray(report.relaxation, np.float64)[duration:]
    rates = np.concatenate([np.full(duration, REFERENCE_SIZE), np.zeros(2 * duration + 1)])
    rates = jnp.asarray(rates, jnp.float32)
    best = None
    for kernel, grid in KERNEL_GRID.items():
        for settings in grid:
            candidate = dataclasses.replace(
                base, kernel=kernel, delta=float(report.delta), y=float(report.y),
                reference_minutes=float(duration), permanent=0.0, **settings,
            )  # fmt: skip
            _, end = schedule_impacts(rates, jnp.zeros_like(rates), candidate.unchecked_params())
            end = np.asarray(end, np.float64)
            # the price before minute t is the impact at the end of minute t - 1
            path = np.concatenate([[0.0], end[:-1]])[duration:] / end[duration - 1]
            rmse = float(np.sqrt(np.mean((path - target) ** 2)))
            if best is None or rmse < best[1]:
                best = (candidate, rmse)
    best[0].check_round_trips()
    return best
