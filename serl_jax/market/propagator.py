"""The propagator (transient-impact) market model: the agents' own price impact on
replayed bars, in O(K) per minute.

Prices are the replayed real minute bars ``p_s``, shifted by the impact of the agents'
own trades. Every minute each agent works its child order at a constant rate; the signed
participation rate of all agents together is ``x = sum_i d_i q_i / v_s`` (``d_i = +1``
buy, ``-1`` sell; ``v_s`` the minute's liquidity, shares), and the price at time ``t``
(minutes) is ``p_s (1 + pi(t))`` with ``pi`` a fraction of the price::

    pi(t) = sigma_day * ( A * F(E(t)) + gamma * P(t) + eta * x(t) )
    E(t)  = int_{u <= t} G(t - u) x(u) du          # form "volume" (default)
    F(z)  = sign(z) |z|^delta
    P(t)  = (signed shares traded up to t) / (expected day volume)

- ``G`` is the propagator kernel, ``G(0) = 1``: ``power_law`` ``(1 + tau/tau0)^-beta``
  (Bouchaud, Gefen, Potters & Wyart 2004), ``exponential`` ``exp(-rho tau)``
  (the resilience of Obizhaeva & Wang 2013) or ``constant`` ``1`` (no decay: with
  ``delta = 1`` the linear permanent impact of Almgren & Chriss 2000). It is held as a
  sum of K exponentials ``sum_k w_k exp(-r_k tau)`` (exact for the last two; fitted to
  the power law, :func:`power_law_exponentials`), so the impact state is K numbers and a
  minute costs O(K).
- ``gamma P`` is the small linear permanent part (Almgren, Thum, Hauptmann & Li 2005,
  "Direct estimation of equity market impact", Risk 18(7): permanent impact linear in
  the traded fraction of daily volume, gamma ~ 0.3), ``eta x`` the instantaneous
  (temporary) impact of the minute's own flow, linear as in Almgren & Chriss (2000):
  the book holds a finite depth within a minute, so taking several minutes' volume at
  once costs in proportion (the square-root law describes metaorders traded over time,
  not block trades: Donier, Bonart, Mastromatteo & Bouchaud 2015, "A fully consistent,
  minimal model for non-linear market impact", Quant. Finance 15(7)). eta = 0.01 (a
  fourteenth of Almgren et al.'s (2005) temporary coefficient 0.142, whose exponent is
  0.6; the kernel's short end already carries most of the temporary impact): at the
  participation of a day-long schedule (~5%) it adds 0.0005 sigma_day. With constant
  liquidity a day's 5% sold in one minute costs 2.75x the day-long TWAP (1.86x without
  it), and a 60-minute order re-sliced into five-minute bursts costs 0.8-3.9% more than
  one sliced every minute at 0.1-20% of the window's volume (0.5% without). A
  time-consistent market should keep that within 5%: eta = 0.02 (the default until
  2026-11-29) gave 7.2% at 20%, and 3.5-4.7% on the three large sets' validation days
  with their replayed volumes, where 0.01 gives 1.3-2.6%.
- The half-spread is paid on top, as in the static market
  (:class:`~serl_jax.envs.execution.EnvParams` ``half_spread_bps``).

Why ``F`` acts on the propagated flow. The classic form ``I_t = sum_{s<=t} G(t-s)
f(q_s/v_s)`` (``form="price"``: the price impact itself propagates, Bouchaud et al.
2004; Gatheral 2010) admits price manipulation whenever ``delta < 1``: buying slowly
and selling in one fast minute earns money, because concave ``f`` charges the fast leg
little for moving the price back (Gatheral 2010, "No-dynamic-arbitrage and market
impact", Quant. Finance 10(7), shows it for exponential decay; :func:`round_trip_profit`
finds it for the power law too). ``form="volume"`` propagates the flow and applies the
concave response to the state, the limit-order-book model of Alfonsi, Fruth & Schied
(2010), "Optimal execution strategies in limit order books with general shape
functions", Quant. Finance 10(2): the price is a function of how much of the book has
been eaten and not yet refilled, so a round trip through the same state never earns
(Alfonsi & Schied 2010, SIAM J. Financial Math. 1). With ``delta = 1`` both forms are the
same linear propagator. :class:`PropagatorConfig` refuses any parameters for which a
round trip on a grid of buy-then-sell schedules earns money.

Calibration. ``A`` is set so that a metaorder at constant participation ``Q/V`` over
``reference_minutes`` peaks at the square-root law ``Y sigma_day (Q/V)^delta`` (Tóth,
Lempérière, Deremble, de Lataillade, Kockelkoren & Bouchaud 2011, "Anomalous price
impact and the critical nature of liquidity in financial markets", Phys. Rev. X 1:
delta ~ 0.5, Y of order 1; Y = 0.7 here): ``A = Y / H(T_ref)^delta`` with
``H(T) = int_0^T G``. The power law's defaults (beta = 0.5, tau0 = 5 minutes) make the
impact relax to about 2/3 of its peak (0.6-0.75) within one to two order durations after
the order ends (Bacry, Iuga, Lasnier & Lehalle 2015, "Market impacts and the life cycle
of investors orders", Market Microstructure and Liquidity 1; Zarinelli, Treccani, Farmer
& Lillo 2015: decay to ~2/3 of the peak). Per dataset, the symbol's training
volatility ``sigma_day = sigma_minute sqrt(T)`` and volumes scale it
(:class:`~serl_jax.envs.market_data.MarketData`).

Within a minute the flow is constant, so ``E`` and ``P`` are closed-form in ``t`` and the
mean price an agent pays over the minute is ``p_s (1 + mean_t pi(t))``, integrated by
Gauss–Legendre quadrature in ``s = sqrt(t)`` (exact at the square-root kink of a first
trade to 1e-4, to 1e-9 for ``delta = 1``). Because a minute is a constant-rate interval
of continuous time, re-slicing a schedule into coarser slots changes its cost only
through the flow's variation inside the slot.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from scipy.optimize import nnls

KERNELS = ("power_law", "exponential", "constant")
IMPACT_FORMS = ("volume", "price")
LIQUIDITIES = ("realized", "expected", "constant")
QUADRATURE_NODES = 8
# The power law is fitted on lags up to this many minutes: two long trading days.
FIT_HORIZON_MINUTES = 1000.0


def power_law_exponentials(
    beta: float, tau0: float, num: int, horizon: float = FIT_HORIZON_MINUTES
) -> tuple[np.ndarray, np.ndarray]:
    """``(1 + tau/tau0)^-beta`` as ``sum_k w_k exp(-r_k tau)`` with ``w_k >= 0``.

    Rates on a geometric grid from ``0.1/horizon`` to ``10/tau0`` per minute; weights by
    non-negative least squares on the relative error over ``tau`` in ``[0, horizon]``
    (log-spaced), then scaled so that ``sum w = G(0) = 1`` exactly (after Bochud & Challet
    2007, "Optimal approximations of power laws with exponentials", Quant. Finance 7(6)).
    A sum of decaying exponentials with positive weights is completely monotone, so the
    fit is decreasing, convex and a positive-definite kernel (no price manipulation with
    linear impact: Alfonsi, Schied & Slynko 2012). With ``num = 10`` the relative error
    is below 1e-3 for beta in [0.2, 0.7].

    Args:
        beta: decay exponent, > 0.
        tau0: short-lag cutoff, minutes, > 0.
        num: K, the number of exponentials (>= 1).
        horizon: longest lag fitted, minutes.

    Returns:
        ``(weights float64[K], rates float64[K])``, rates per minute (zero weights kept so
        that K is the static shape asked for).
    """
    rates = np.geomspace(0.1 / horizon, 10.0 / tau0, num)
    lags = np.concatenate([[0.0], np.geomspace(1e-2, horizon, 300)])
    target = (1.0 + lags / tau0) ** -beta
    design = np.exp(-np.outer(lags, rates)) / target[:, None]
    rhs = np.ones_like(lags)
    design[0] *= 100.0  # pin G(0) = 1
    rhs[0] *= 100.0
    weights, _ = nnls(design, rhs)
    return weights / weights.sum(), rates


@dataclasses.dataclass(frozen=True)
class PropagatorConfig:
    """The propagator market's settings (config section ``impact``; module docstring).

    Attributes:
        kernel: ``power_law``, ``exponential`` or ``constant`` (:data:`KERNELS`).
        y: Y, the square-root law's prefactor (>= 0): a metaorder at constant
            participation ``Q/V`` over ``reference_minutes`` peaks at
            ``Y sigma_day (Q/V)^delta``.
        delta: the impact exponent, in (0, 1] (0.5: the square-root law).
        beta: the power-law kernel's decay exponent, in (0, 2).
        tau0: the power-law kernel's short-lag cutoff, minutes (> 0).
        resilience: the exponential kernel's decay rate rho, per minute (> 0).
        num_exponentials: K, exponentials in the power-law fit (static shape, 1 to 32).
        reference_minutes: the duration at which ``y`` holds, minutes (> 0).
        permanent: gamma, the linear permanent impact per unit of the day's expected
            volume traded, in units of sigma_day (>= 0).
        temporary: eta, the instantaneous (linear) impact of the minute's own flow, in
            units of sigma_day per unit of participation (>= 0).
        form: ``volume`` (``F`` of the propagated flow; no price manipulation) or
            ``price`` (the propagated ``F`` of each minute's flow; only with
            ``delta = 1``, where the two agree).
        liquidity: the minute's volume ``v_s`` in the participation rate: ``realized``
            (the replayed bar's), ``expected`` (the training volume profile times the
            expected day volume: known before the day) or ``constant`` (the training mean
            minute volume: a time-homogeneous market, where the closed-form optima of
            :mod:`serl_jax.baselines.optimal` hold).
        liquidity_floor: the least ``v_s``, as a fraction of the training mean minute
            volume (> 0), so a minute without volume has a finite impact.

    Raises:
        ValueError: a value out of its range or an unknown name, naming the key
            (``impact.<key>``); :meth:`check_round_trips` (called by :meth:`params`)
            also refuses parameters with which a buy-then-sell round trip earns money.
    """

    kernel: str = "power_law"
    y: float = 0.7
    delta: float = 0.5
    beta: float = 0.5
    tau0: float = 5.0
    resilience: float = 0.05
    num_exponentials: int = 10
    reference_minutes: float = 60.0
    permanent: float = 0.3
    temporary: float = 0.01
    form: str = "volume"
    liquidity: str = "realized"
    liquidity_floor: float = 0.1

    def __post_init__(self):
        choices = {"kernel": KERNELS, "form": IMPACT_FORMS, "liquidity": LIQUIDITIES}
        for key, allowed in choices.items():
            if getattr(self, key) not in allowed:
                raise ValueError(
                    f"impact.{key}: expected one of {list(allowed)}, got {getattr(self, key)!r}"
                )
        if self.kernel == "power_law" and self.beta <= 0:
            raise ValueError(f"impact.beta: the kernel increases with beta <= 0, got {self.beta}")
        if self.kernel == "exponential" and self.resilience <= 0:
            raise ValueError(
                f"impact.resilience: the kernel increases with resilience <= 0 "
                f"(use kernel=constant for no decay), got {self.resilience}"
            )
        ranges = {
            "delta": (0.0 < self.delta <= 1.0, "in (0, 1]"),
            "beta": (0.0 < self.beta < 2.0, "in (0, 2)"),
            "y": (self.y >= 0.0, ">= 0"),
            "tau0": (self.tau0 > 0.0, "> 0"),
            "reference_minutes": (self.reference_minutes > 0.0, "> 0"),
            "permanent": (self.permanent >= 0.0, ">= 0 (a negative one lets round trips earn)"),
            "temporary": (self.temporary >= 0.0, ">= 0"),
            "liquidity_floor": (self.liquidity_floor > 0.0, "> 0"),
            "num_exponentials": (1 <= self.num_exponentials <= 32, "in 1..32"),
        }
        for key, (ok, allowed) in ranges.items():
            if not ok:
                raise ValueError(f"impact.{key}: must be {allowed}, got {getattr(self, key)}")

    def check_round_trips(self) -> None:
        """Raises ``ValueError`` (naming ``impact.form``) if a buy-then-sell round trip on
        :func:`round_trip_profit`'s grid earns money with these parameters. Kept out of
        construction, which must stay cheap (it compiles the market once per setting);
        :meth:`params` and the config loader call it."""
        profit = round_trip_profit(self)
        if profit > 1e-4:
            raise ValueError(
                f"impact.form: a buy-then-sell round trip earns {profit:.3g} of its peak "
                f"impact with form={self.form}, delta={self.delta}, kernel={self.kernel} "
                "(price manipulation, Gatheral 2010); use form=volume or delta=1"
            )

    def exponentials(self) -> tuple[np.ndarray, np.ndarray]:
        """The kernel as ``(weights float64[K], rates float64[K] per minute)``, ``sum w = 1``."""
        if self.kernel == "power_law":
            return power_law_exponentials(self.beta, self.tau0, self.num_exponentials)
        rate = self.resilience if self.kernel == "exponential" else 0.0
        return np.ones(1), np.full(1, rate)

    def kernel_values(self, lags: np.ndarray) -> np.ndarray:
        """The exact kernel ``G(lags)`` (lags in minutes, >= 0), float64."""
        lags = np.asarray(lags, np.float64)
        if self.kernel == "power_law":
            return (1.0 + lags / self.tau0) ** -self.beta
        if self.kernel == "exponential":
            return np.exp(-self.resilience * lags)
        return np.ones_like(lags)

    def amplitude(self) -> float:
        """``A = Y / H(T_ref)^delta`` (form ``volume``) or ``Y / H(T_ref)`` (``price``),
        ``H(T) = int_0^T G`` of the kernel's exponentials (module docstring)."""
        weights, rates = self.exponentials()
        h = float(np.sum(weights * integrated_decay(rates, self.reference_minutes)))
        return self.y / (h**self.delta if self.form == "volume" else h)

    def params(self) -> PropagatorParams:
        """The device-side :class:`PropagatorParams` of these settings.

        Raises:
            ValueError: parameters with which a round trip earns (:meth:`check_round_trips`).
        """
        self.check_round_trips()
        return self.unchecked_params()

    def unchecked_params(self) -> PropagatorParams:
        """:meth:`params` without the round-trip check (the check itself runs on these)."""
        weights, rates = self.exponentials()
        s, s_weights = np.polynomial.legendre.leggauss(QUADRATURE_NODES)
        s = (s + 1.0) / 2.0  # nodes in s = sqrt(t) on [0, 1]
        node_times = s**2
        node_weights = s_weights * s  # dt = 2 s ds, and ds = ds'/2 from [-1, 1]
        f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
        return PropagatorParams(
            weights=f32(weights),
            decay=f32(np.exp(-rates)),
            gain=f32(integrated_decay(rates, 1.0)),
            node_decay=f32(np.exp(-np.outer(rates, node_times))),
            node_gain=f32(integrated_decay(rates[:, None], node_times[None, :])),
            node_weights=f32(node_weights),
            amplitude=f32(self.amplitude()),
            permanent=f32(self.permanent),
            temporary=f32(self.temporary),
            liquidity_floor=f32(self.liquidity_floor),
            delta=float(self.delta),
            form=self.form,
            liquidity=self.liquidity,
        )


def integrated_decay(rates, duration) -> np.ndarray:
    """``int_0^duration exp(-r u) du = (1 - exp(-r d)) / r`` (``d`` at ``r = 0``), float64,
    broadcast over ``rates`` and ``duration``."""
    rates = np.asarray(rates, np.float64)
    duration = np.asarray(duration, np.float64)
    x = rates * duration
    small = x < 1e-8
    safe = np.where(small, 1.0, rates)
    return np.where(small, duration * (1.0 - x / 2.0), -np.expm1(-x) / safe)


@struct.dataclass
class PropagatorParams:
    """The propagator market on the device (:meth:`PropagatorConfig.params` builds it).

    Attributes:
        weights: ``float32[K]`` the kernel's exponential weights (sum 1).
        decay: ``float32[K]`` ``exp(-r_k)``, one minute's decay of each component.
        gain: ``float32[K]`` ``int_0^1 exp(-r_k u) du``, one minute of unit flow's
            contribution to each component at the minute's end.
        node_decay, node_gain: ``float32[K, n]`` the same at the quadrature nodes' times.
        node_weights: ``float32[n]`` quadrature weights over the minute (sum 1).
        amplitude: A, per sigma_day (module docstring).
        permanent: gamma, per sigma_day and unit of the day's expected volume.
        temporary: eta, per sigma_day.
        liquidity_floor: the least liquidity, a fraction of the mean minute volume.
        delta: the impact exponent (static).
        form: ``volume`` or ``price`` (static).
        liquidity: ``realized``, ``expected`` or ``constant`` (static).
    """

    weights: jax.Array
    decay: jax.Array
    gain: jax.Array
    node_decay: jax.Array
    node_gain: jax.Array
    node_weights: jax.Array
    amplitude: jax.Array
    permanent: jax.Array
    temporary: jax.Array
    liquidity_floor: jax.Array
    delta: float = struct.field(pytree_node=False, default=0.5)
    form: str = struct.field(pytree_node=False, default="volume")
    liquidity: str = struct.field(pytree_node=False, default="realized")

    @property
    def num_exponentials(self) -> int:
        """K, the kernel's exponentials (the impact state's size)."""
        return self.weights.shape[0]


@struct.dataclass
class ImpactState:
    """The impact the agents' trades have left (a batch under ``vmap``).

    Attributes:
        components: ``float32[K]`` the kernel's components of the propagated flow (form
            ``volume``: participation-minutes; ``price``: ``F``-minutes).
        permanent: ``float32`` signed shares traded so far over the day's expected volume.
    """

    components: jax.Array
    permanent: jax.Array


def initial_impact(params: PropagatorParams) -> ImpactState:
    """No trade yet: every component 0 (in the dtype of ``params``: float32 in the markets,
    float64 where :mod:`serl_jax.baselines.static_optimum` minimizes a schedule's cost)."""
    return ImpactState(
        components=jnp.zeros_like(params.weights), permanent=jnp.zeros_like(params.permanent)
    )


def signed_power(z: jax.Array, delta: float) -> jax.Array:
    """``F(z) = sign(z) |z|^delta``, 0 at 0 (finite gradients there); ``delta`` a Python
    float (static)."""
    if delta == 1.0:
        return z
    magnitude = jnp.abs(z)
    safe = jnp.where(magnitude > 0, magnitude, 1.0)
    power = jnp.sqrt(safe) if delta == 0.5 else safe**delta  # sqrt: no exp(log) pair
    return jnp.where(magnitude > 0, jnp.sign(z) * power, 0.0)


def transient_impact(components: jax.Array, params: PropagatorParams) -> jax.Array:
    """``A F(E)`` (form ``volume``) or ``A E`` (``price``) of a state's components, in
    units of sigma_day."""
    level = jnp.dot(params.weights, components)
    if params.form == "volume":
        level = signed_power(level, params.delta)
    return params.amplitude * level


def impact_minute(
    state: ImpactState,
    rate: jax.Array,
    shares: jax.Array,
    params: PropagatorParams,
) -> tuple[ImpactState, jax.Array, jax.Array]:
    """One minute of constant flow: the mean impact paid over it and the state after it.

    Args:
        state: the impact before the minute.
        rate: ``float32`` the signed participation rate of all agents together,
            ``sum_i d_i q_i / v_s`` (buys positive).
        shares: ``float32`` the signed shares of the minute over the day's expected
            volume (the permanent part's unit).
        params: the propagator.

    Returns:
        ``(state, mean_impact, end_impact)``: the state after the minute; the mean of
        ``pi(t)/sigma_day`` over the minute (what every share traded in it pays, with the
        temporary part); the impact at the minute's end without the temporary part (the
        bar's price shift), both in units of sigma_day.
    """
    inflow = rate if params.form == "volume" else signed_power(rate, params.delta)
    # E at each quadrature node: the old components decayed plus the minute's inflow
    level = (params.weights * state.components) @ params.node_decay
    level = level + inflow * (params.weights @ params.node_gain)
    if params.form == "volume":
        level = signed_power(level, params.delta)
    transient = params.amplitude * jnp.dot(params.node_weights, level)
    permanent = params.permanent * (state.permanent + 0.5 * shares)
    temporary = params.temporary * rate
    after = ImpactState(
        components=state.components * params.decay + inflow * params.gain,
        permanent=state.permanent + shares,
    )
    end = transient_impact(after.components, params) + params.permanent * after.permanent
    return after, transient + permanent + temporary, end


# --------------------------------------------------------------------------- checks


@jax.jit
def schedule_impacts(
    rates: jax.Array, shares: jax.Array, params: PropagatorParams
) -> tuple[jax.Array, jax.Array]:
    """Mean and end-of-minute impact (units of sigma_day) of schedules of constant-rate
    minutes, from no impact: :func:`impact_minute` scanned over the minutes.

    Args:
        rates: ``float32[..., M]`` signed participation per minute (buys positive).
        shares: ``float32[..., M]`` signed shares per minute over the day's expected
            volume (the permanent part).
        params: the propagator.

    Returns:
        ``(mean float32[..., M], end float32[..., M])``.
    """

    def one(rate_path, share_path):
        def minute(state, flow):
            state, mean, end = impact_minute(state, flow[0], flow[1], params)
            return state, (mean, end)

        _, out = jax.lax.scan(minute, initial_impact(params), jnp.stack([rate_path, share_path], 1))
        return out

    batch = rates.shape[:-1]
    flat = (rates.reshape(-1, rates.shape[-1]), shares.reshape(-1, rates.shape[-1]))
    mean, end = jax.vmap(one)(*flat)
    return mean.reshape(rates.shape), end.reshape(*batch, rates.shape[-1])


@functools.lru_cache(maxsize=64)
def round_trip_profit(config: PropagatorConfig) -> float:
    """The most a buy-then-sell round trip earns, as a fraction of its peak impact.

    Buys at participation ``r1`` for ``n1`` minutes, waits ``gap`` minutes, then sells
    the same shares at ``r2`` (a last partial minute completes it), over a grid: ``r1,
    r2`` in {0.01, 0.1, 1, 10} of the minute's volume, ``n1`` in {1, 2, 5, 20, 60},
    ``gap`` in {0, 1, 10, 60}. Constant liquidity, no spread (the spread only adds to the
    cost), permanent part included (shares at 1% of the day's volume per unit of
    participation). The concave ``form="price"`` propagator earns on the fast-sell legs
    (module docstring). Cached per configuration.

    Returns:
        ``max(0, max over the grid of -cost / (shares * peak |mean impact|))``: 0 when no
        round trip on the grid earns (float32 noise, about 1e-6, is not a profit).
    """
    schedules = []
    for r1, r2, n1, gap in itertools.product(
        [0.01, 0.1, 1.0, 10.0], [0.01, 0.1, 1.0, 10.0], [1, 2, 5, 20, 60], [0, 1, 10, 60]
    ):
        total = r1 * n1
        full = int(math.floor(total / r2 + 1e-9))
        tail = total - full * r2
        if full > 120:
            continue
        sell = [r2] * full + ([tail] if tail > 1e-9 else [])
        schedules.append([r1] * n1 + [0.0] * gap + [-r for r in sell])
    length = max(len(s) for s in schedules)
    rates = np.zeros((len(schedules), length))
    for i, s in enumerate(schedules):
        rates[i, : len(s)] = s
    mean, _ = schedule_impacts(
        jnp.asarray(rates, jnp.float32),
        jnp.asarray(0.01 * rates, jnp.float32),
        config.unchecked_params(),
    )
    mean = np.asarray(mean, np.float64)
    cost = np.sum(rates * mean, axis=1)
    scale = np.abs(rates).sum(axis=1) / 2.0 * np.abs(mean).max(axis=1)
    profit = np.where(scale > 0, -cost / np.where(scale > 0, scale, 1.0), 0.0)
    return max(0.0, float(profit.max()))
