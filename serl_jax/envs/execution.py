"""Optimal-execution environment over historical minute bars (the "static" market).

A gymnax ``Environment``: ``reset(key, params)`` and ``step(key, state, action, params)``
are pure, jittable and vmappable; the market data live in ``EnvParams`` so thousands of
episodes share one copy on the device.

Task. Sell (``side = +1``) or buy (``side = -1``) a parent order of ``Q`` shares within a
window of ``window_len`` one-minute slots of one trading day. By default the window is
the whole day and ``Q = order_fraction * expected window volume``, the expected volume
being the symbol's training-day mean daily volume times its training volume profile
summed over the window. Augmentation: random sub-windows (``random_window``) and a
random multiplier on ``Q`` drawn from ``[quantity_low, quantity_high]``.

Timing. At step ``t`` the agent sees bars of slots ``< start + t`` only, chooses
``a_t ∈ [0, 1]`` (the fraction of the remaining inventory to trade), and its child order
fills at slot ``s = start + t``.

Cost model (per share, in bps of the minute's price ``p_s``, ``v_s`` the minute's volume)::

    q_s      = min(a_t * I_t, participation_cap * v_s)            # participation cap
    cost_bps = half_spread_bps + impact_eta_bps * (q_s / v_s) ** impact_exponent
    p_exec   = p_s * (1 - side * cost_bps * 1e-4)                 # sells get less, buys pay more

With ``child_quantity="participation"`` the child order is a percentage-of-volume order:
``a_t * I_t`` becomes ``min(a_t * I_t * v_s / V̂_s, I_t)``, ``V̂_s`` a forecast of the
minute's volume from earlier bars (:func:`minute_volume_forecast`).

At the last step with ``force_liquidation`` the whole remaining inventory trades
regardless of the cap, with liquidity ``max(v_s, mean_minute_volume)`` in the impact
term (so an illiquid last minute stays finite) and ``force_penalty_bps`` added to the
cost. Without it the remainder stays unfilled and is counted in AFI. ``cost_bps`` is
clipped at ``max_cost_bps`` so execution prices stay positive.

Benchmark. ``P~`` is the market VWAP over the order window (``benchmark="twap"``: the
mean price); a window with no volume falls back to TWAP. It uses the whole window
(hindsight), which is fine for a reward and the metrics but never enters observations.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces

from serl_jax.components.reward import total_reward
from serl_jax.envs.market_data import MarketData

# (T - t)/T, log(T - t), I_t/Q, price move since arrival (percent), the share of the
# window's expected volume still ahead, the current minute's share of it
NUM_PRIVATE_FEATURES = 6
MOVE_SINCE_ARRIVAL = 3
"""Index of the price move since arrival (percent) in the observation."""
CHILD_QUANTITIES = ("fixed", "participation")
# Participation child orders' volume forecast: the profile rescaled by the day's volume
# over the last 60 minutes, the adaptive VWAP baseline's look-back (chosen on validation
# days for that baseline; not tuned again for participation orders).
FORECAST_LOOKBACK = 60


@struct.dataclass
class EnvParams:
    """Parameters of :class:`ExecutionEnv` (pytree leaves but the static
    ``random_window``, ``lookback`` and ``benchmark``).

    Attributes:
        data: the episodes to replay (``MarketData``).
        side: +1.0 sell, -1.0 buy.
        order_fraction: Q as a fraction of the window's expected volume.
        quantity_low, quantity_high: range of the uniform multiplier on Q drawn at reset
            (training augmentation; evaluation rollouts use 1). Equal values fix Q.
        random_window: draw a random sub-window ``[start, start + window_len)`` at reset
            (static: switching it recompiles).
        min_window_len: shortest random window, in slots.
        half_spread_bps: half the bid-ask spread paid on every share, bps.
        impact_eta_bps: temporary impact at 100% participation, bps.
        impact_exponent: k in ``eta * (q/v)^k`` (0.5 = square-root law).
        participation_cap: the most a child order may take of the minute's volume.
        force_liquidation: trade the remainder at the last step (else leave it unfilled).
        force_penalty_bps: extra cost on the forced trade, bps.
        max_cost_bps: upper clip of the per-share cost, bps.
        concentration_penalty: c in the reward's ``-c * (q_t/Q)^2`` term (Qlib PAPenalty).
        terminal_penalty_bps: reward penalty per unit fraction of Q left at the end, bps.
        reward_scale: multiplies the whole reward (rewards are in bps before scaling).
        urgency: an agent's risk aversion (>= 0) for rewards that use it; the multi-agent
            environment sets it per agent from the agent's profile
            (:mod:`serl_jax.components.profiling`). The default reward ignores it.
        lookback: number of past slots of market features in the observation (static).
        benchmark: ``"vwap"`` or ``"twap"`` (static).
        diagnostic_volume_leak: DIAGNOSTIC ONLY, a deliberate leak of the future (static):
            append the current minute's true volume, ``log1p(v_s / mean minute volume)``,
            to the observation, which no real agent sees before trading. Rung (b) of the
            learnability ladder (``benchmarks/bench_learning.py``): with it, a policy that
            learns must recover the volume-following part of the oracle's edge. The static
            market only.
        child_quantity: how a child order's size is set (static), one of
            :data:`CHILD_QUANTITIES`: ``"fixed"`` trades ``a_t * I_t`` shares;
            ``"participation"`` sends a percentage-of-volume child order that trades the
            rate ``a_t * I_t / V̂_s`` of the minute's volume as it prints
            (:func:`minute_volume_forecast`), so it trades ``a_t * I_t`` shares when the
            minute's volume is as forecast and more (less) in a busier (quieter) one. The
            dynamic market works it over the minute's trading rounds
            (:mod:`serl_jax.envs.dynamic`).
        step_minutes: the decision interval n, in minutes (static field; the static
            market only). With n > 1 the action is read every n minutes of the window (``t % n
            == 0``) and sets the child order's size for the interval, ``a_t * I_t`` shares
            a minute (the TWAP slice when ``a_t`` is the TWAP pace); the other minutes
            trade that size (at most the inventory) whatever the action: a TWAP executor
            inside each interval, as in Qlib's nested execution examples (30-minute
            decisions). ``info["acted"]`` then tells which steps read their action.
    """

    data: MarketData
    side: float = 1.0
    order_fraction: float = 0.05
    quantity_low: float = 0.5
    quantity_high: float = 1.5
    random_window: bool = struct.field(pytree_node=False, default=False)
    min_window_len: int = 30
    half_spread_bps: float = 2.0
    impact_eta_bps: float = 50.0
    impact_exponent: float = 0.5
    participation_cap: float = 0.2
    force_liquidation: bool = True
    force_penalty_bps: float = 10.0
    max_cost_bps: float = 5000.0
    concentration_penalty: float = 100.0
    terminal_penalty_bps: float = 100.0
    reward_scale: float = 0.1
    urgency: float = 0.0
    lookback: int = struct.field(pytree_node=False, default=10)
    benchmark: str = struct.field(pytree_node=False, default="vwap")
    diagnostic_volume_leak: bool = struct.field(pytree_node=False, default=False)
    child_quantity: str = struct.field(pytree_node=False, default="fixed")
    step_minutes: int = struct.field(pytree_node=False, default=1)


@struct.dataclass
class EnvState:
    """State of one execution episode (scalars; a batch under ``vmap``).

    Attributes:
        time: steps taken in the window, int32 (gymnax's name for t).
        episode: index of the symbol-day in ``params.data``, int32.
        start: first slot of the window, int32.
        window_len: number of slots in the window (T of the task), int32.
        quantity: parent-order size Q, shares.
        inventory: remaining shares I_t.
        executed: shares executed so far.
        notional: sum of q * p_exec over the child fills so far, currency.
        benchmark_price: P~ of the window (VWAP or TWAP), currency per share.
        arrival_price: price of the last bar before the window (first bar if none).
        last_qty: shares executed by the last step.
        last_price: execution price of the last step (market price if nothing traded).
        last_market_price: the market price of the last step's slot.
        last_replayed_price: the replayed (real) price of the last step's slot, the price
            the market offered without the agent: ``last_market_price`` in the static
            market, the historical bar while the dynamic market's mid moves with the
            agent's orders.
        pace: the child order's size in the current decision interval, shares a minute
            (``EnvParams.step_minutes`` > 1; 0 otherwise).
    """

    time: jnp.ndarray
    episode: jnp.ndarray
    start: jnp.ndarray
    window_len: jnp.ndarray
    quantity: jnp.ndarray
    inventory: jnp.ndarray
    executed: jnp.ndarray
    notional: jnp.ndarray
    benchmark_price: jnp.ndarray
    arrival_price: jnp.ndarray
    last_qty: jnp.ndarray
    last_price: jnp.ndarray
    last_market_price: jnp.ndarray
    last_replayed_price: jnp.ndarray
    pace: jnp.ndarray


RewardFn = Callable[[EnvState, jnp.ndarray, EnvState, EnvParams], jnp.ndarray]


def safe_divide(numerator: jnp.ndarray, denominator: jnp.ndarray) -> jnp.ndarray:
    """``numerator / denominator`` where the denominator is positive, else 0."""
    positive = denominator > 0
    return jnp.where(positive, numerator / jnp.where(positive, denominator, 1.0), 0.0)


def minute_volume_forecast(
    data: MarketData, episode: jnp.ndarray, slot: jnp.ndarray, lookback: int = FORECAST_LOOKBACK
) -> jnp.ndarray:
    """Forecast of minute ``slot``'s volume from the bars before it, volume units.

    ``V̂_s = E[V_day] * profile_s * r`` with ``E[V_day]`` and ``profile`` from training
    days and ``r`` the day's surprise: observed over expected volume in the ``lookback``
    minutes before ``s`` (all of the day's bars, before and inside the order window),
    clipped to ``[0.2, 5]``; ``r = 1`` before the first bar. The estimator of the adaptive
    VWAP baseline's current minute (after Białkowski, Darolles & Le Fol 2008). O(1) from
    the running sums.

    Args:
        data: the episodes.
        episode: int32 index of the symbol-day.
        slot: int32 minute being forecast (its own volume is not used).
        lookback: minutes of the surprise ratio.

    Returns:
        float32 scalar, ``>= 0`` (0 where the profile is 0).
    """
    first = jnp.maximum(slot - lookback, 0)
    seen = data.cum_volume[episode, slot] - data.cum_volume[episode, first]
    expected_day = data.expected_day_volume[episode]
    due = expected_day * (data.cum_profile[episode, slot] - data.cum_profile[episode, first])
    return _forecast(expected_day * data.volume_profile[episode, slot], seen, due)


def _forecast(expected: jnp.ndarray, seen: jnp.ndarray, due: jnp.ndarray) -> jnp.ndarray:
    """The profile's expected volume times the clipped surprise ``seen / due``."""
    surprise = jnp.where(due > 0, jnp.clip(safe_divide(seen, due), 0.2, 5.0), 1.0)
    return expected * surprise


def history_volume_forecast(
    volume: jnp.ndarray,
    data: MarketData,
    episode: jnp.ndarray,
    slot: jnp.ndarray,
    lookback: int = FORECAST_LOOKBACK,
) -> jnp.ndarray:
    """:func:`minute_volume_forecast` from a day's volume history ``float32[T]`` other
    than the replayed one (the dynamic market's: real bars before the window, simulated
    minutes after), O(lookback)."""
    past = slot - lookback + jnp.arange(lookback)
    seen_mask = past >= 0
    slots = jnp.clip(past, 0, data.num_slots - 1)
    expected_day = data.expected_day_volume[episode]
    seen = jnp.where(seen_mask, volume[slots], 0.0).sum()
    due = expected_day * jnp.where(seen_mask, data.volume_profile[episode, slots], 0.0).sum()
    return _forecast(expected_day * data.volume_profile[episode, slot], seen, due)


def desired_quantity(
    state: EnvState, fraction: jnp.ndarray, params: EnvParams, slot: jnp.ndarray, volume
) -> jnp.ndarray:
    """The child order's size before any cap, shares: ``a_t * I_t``, or with
    ``params.child_quantity="participation"`` the percentage-of-volume order
    ``min(a_t * I_t * v_s / V̂_s, I_t)`` (``V̂_s`` from :func:`minute_volume_forecast`;
    ``a_t * I_t`` where the forecast is 0).

    Args:
        state: the episode before the step.
        fraction: float32 ``a_t`` in [0, 1].
        params: environment parameters.
        slot: int32 minute of the step.
        volume: float32 the minute's replayed volume ``v_s``.
    """
    desired = fraction * state.inventory
    if params.child_quantity == "participation":
        forecast = minute_volume_forecast(params.data, state.episode, slot)
        rate = safe_divide(desired, forecast)
        desired = jnp.where(forecast > 0, jnp.minimum(rate * volume, state.inventory), desired)
    return desired


def step_price_advantage(state: EnvState, params: EnvParams) -> jnp.ndarray:
    """PA of the last child fill against the order benchmark, bps.

    ``PA_t = side * (p_exec_t / P~ - 1) * 1e4`` (the design doc's PA applied to one fill).
    """
    return params.side * (state.last_price / state.benchmark_price - 1.0) * 1e4


def order_price_advantage(state: EnvState, params: EnvParams) -> jnp.ndarray:
    """PA of the parent order so far, bps: ``side * (P_exec / P~ - 1) * 1e4``.

    ``P_exec = notional / executed``; 0 when nothing executed (the unfilled part is
    charged through AFI, as in :func:`serl_jax.metrics.price_advantage`).
    """
    avg_price = safe_divide(state.notional, state.executed)
    pa = params.side * (avg_price / state.benchmark_price - 1.0) * 1e4
    return jnp.where(state.executed > 0, pa, 0.0)


def default_reward(
    prev_state: EnvState, action: jnp.ndarray, next_state: EnvState, params: EnvParams
) -> jnp.ndarray:
    """The default reward slot: per-step price advantage with concentration penalties.

    After Qlib's ``PAPenaltyReward`` (qlib/rl/order_execution/reward.py)::

        r_t = scale * [ PA_t * q_t/Q - c * (q_t/Q)^2 - 1{t = T-1} * terminal_penalty_bps * I_T/Q ]

    with ``PA_t`` the fill's price advantage in bps (:func:`step_price_advantage`). For a
    fully executed order the undiscounted sum of the first term is exactly the order's PA.

    Args:
        prev_state: state before the step.
        action: the action taken, float32 scalar in [0, 1] (unused by the default).
        next_state: state after the step (``last_qty``, ``last_price`` describe the fill).
        params: environment parameters.

    Returns:
        float32 scalar reward.
    """
    del prev_state, action
    fraction = safe_divide(next_state.last_qty, next_state.quantity)
    pa_term = step_price_advantage(next_state, params) * fraction
    concentration = params.concentration_penalty * fraction**2
    done = next_state.time >= next_state.window_len
    leftover = safe_divide(next_state.inventory, next_state.quantity)
    terminal = jnp.where(done, params.terminal_penalty_bps * leftover, 0.0)
    return params.reward_scale * (pa_term - concentration - terminal)


def sigma_day(params: EnvParams, episode: jnp.ndarray) -> jnp.ndarray:
    """The symbol's daily volatility from training days, ``sigma_minute * sqrt(T)`` (a
    fraction: 0.01 = 100 bps; ``T`` the day's minutes)."""
    return params.data.sigma[episode] * jnp.sqrt(jnp.float32(params.data.num_slots))


def mean_variance_reward(
    prev_state: EnvState, action: jnp.ndarray, next_state: EnvState, params: EnvParams
) -> jnp.ndarray:
    """Almgren & Chriss's (2000) mean-variance objective as a reward slot, bps of the order.

    ::

        r_t = -scale * [ c_t + u * sigma_day_bps / T * x_t^2 + terminal ]

    with ``c_t = side * (1 - p_exec/p_t) * 1e4 * q_t/Q`` the spread and impact the step's
    fill paid against the replayed (undisturbed) price ``p_t``, ``x_t = I_{t+1}/Q`` the
    fraction still held after the step, ``u = params.urgency`` the risk aversion in units
    of ``1/sigma_day`` (``lambda = u / sigma_day`` in AC's ``lambda sigma_minute^2 tau
    x^2`` with ``tau`` one minute and ``sigma_minute^2 = sigma_day^2 / T``, ``T`` the
    day's minutes), and ``terminal`` the default reward's ``terminal_penalty_bps`` on what
    is left at the end. The undiscounted sum of ``-r_t / scale`` is the order's expected
    objective ``E[cost] + lambda Var[cost]``; with a linear impact model its minimizer is
    AC's schedule (:mod:`serl_jax.baselines.optimal`), which makes a learner's distance to
    the optimum measurable. The cost does not depend on the day's price path, only on the
    schedule (and, with realized liquidity, the day's volumes).

    Args:
        prev_state: state before the step (unused).
        action: the action taken (unused).
        next_state: state after the step (``last_qty``, ``last_price``,
            ``last_replayed_price`` describe the fill).
        params: environment parameters (``side``, ``urgency``, ``reward_scale``, the data's
            ``sigma``).

    Returns:
        float32 scalar reward.
    """
    del prev_state, action
    fraction = safe_divide(next_state.last_qty, next_state.quantity)
    paid = params.side * (1.0 - safe_divide(next_state.last_price, next_state.last_replayed_price))
    cost = paid * 1e4 * fraction
    held = safe_divide(next_state.inventory, next_state.quantity)
    sigma_day_bps = sigma_day(params, next_state.episode) * 1e4
    risk = params.urgency * sigma_day_bps / params.data.num_slots * held**2
    done = next_state.time >= next_state.window_len
    terminal = jnp.where(done, params.terminal_penalty_bps * held, 0.0)
    return -params.reward_scale * (cost + risk + terminal)


def profile_schedule(
    state: EnvState, params: EnvParams, time_left: jnp.ndarray, steps_left: jnp.ndarray
) -> tuple[jnp.ndarray, jnp.ndarray]:
    """The VWAP schedule's clock at the current step, from the training volume profile.

    With ``c`` the symbol's cumulative training profile (``MarketData.cum_profile``), the
    window ``[start, end)`` and ``s = start + t`` the current minute:

    - ``profile_left = (c[end] - c[s]) / (c[end] - c[start])``: the share of the window's
      expected volume still ahead, this minute included (the VWAP baseline's holdings
      before this step; ``(T - t)/T`` where the window's profile is 0);
    - ``profile_pace = profile[s] / (c[end] - c[s])``: this minute's share of it (the VWAP
      baseline's fraction of the remaining inventory; ``1/(T - t)`` where nothing is
      left).

    Both come from training days only, so they are honest observations.

    Args:
        state: the episode's state (scalars).
        params: environment parameters.
        time_left: float32 ``(T - t)/T``, the fallback of ``profile_left``.
        steps_left: float32 ``max(T - t, 1)``, whose inverse is the fallback pace.

    Returns:
        ``(profile_left, profile_pace)``, float32 scalars in ``[0, 1]``.
    """
    data = params.data
    cum = data.cum_profile[state.episode]
    end = jnp.minimum(state.start + state.window_len, data.num_slots)
    slot = jnp.minimum(state.start + state.time, end)
    total = cum[end] - cum[state.start]
    left = cum[end] - cum[slot]
    current = data.volume_profile[state.episode, jnp.minimum(slot, data.num_slots - 1)]
    profile_left = jnp.where(total > 0, safe_divide(left, total), time_left)
    pace = jnp.clip(safe_divide(current, left), 0.0, 1.0)
    profile_pace = jnp.where(left > 0, pace, 1.0 / steps_left)
    return profile_left, profile_pace


def twap_action_prior(obs: jnp.ndarray, anchor_steps: float = 0.0) -> jnp.ndarray:
    """Logit of a TWAP action, read from an observation ``[..., D]``: the policy prior.

    From the raw private features ``τ = (T - t)/T``, ``n = T - t`` and ``h = I_t/Q``, with
    ``d = (τ - h) T`` the number of TWAP slices the order is ahead of the linear schedule:

    - ``anchor_steps = 0``: the TWAP baseline's schedule tracking
      (:func:`serl_jax.baselines.twap_policy`): trade to the schedule's holdings after
      this step, ``a = (h - τ (1 - 1/n)) / h``, catching up a shortfall at once and
      waiting while ahead;
    - ``anchor_steps = k > 0``: the pace of the remaining inventory scaled by
      ``exp(-d/k)``, ``a = exp(-d/k) / n``: on schedule it is TWAP's slice; a deviation
      from the schedule is pulled back with a time constant of k steps instead of in one
      step. A residual policy around this prior can trade more in one minute and less in
      the next few (following volume) without the prior undoing it at the next step,
      which the one-step tracking does (docs/results/learning.md, "Why PPO did not learn").

    At the last step (``n = 1``) the prior trades everything. The logit is clipped to
    ``[-10, 10]``.

    Args:
        obs: float32 ``[..., D]`` raw (unnormalized) observations of
            :class:`ExecutionEnv`.
        anchor_steps: k, the pull-back time constant in steps (0: one-step tracking).

    Returns:
        float32 ``[...]`` action logits.
    """
    steps_left = jnp.exp(obs[..., 1])
    pace = 1.0 / jnp.maximum(steps_left, 1.0)
    return _schedule_prior_logit(obs[..., 0], pace, obs[..., 2], steps_left, anchor_steps)


def vwap_action_prior(obs: jnp.ndarray, anchor_steps: float = 0.0) -> jnp.ndarray:
    """Logit of a VWAP action, read from an observation ``[..., D]``: the policy prior on
    the volume clock.

    :func:`twap_action_prior` with the VWAP schedule of the training volume profile in
    place of the linear one: from ``n = T - t``, ``h = I_t/Q``, the schedule's holdings
    ``τ_v`` and the current minute's share ``π`` of the remaining profile (the
    observation's :func:`profile_schedule` features), with ``d = (τ_v - h) n / τ_v`` the
    number of average remaining slices the order is ahead of the schedule:

    - ``anchor_steps = 0``: the VWAP baseline's schedule tracking
      (:func:`serl_jax.baselines.vwap_policy`): trade to the schedule's holdings after
      this step, ``a = (h - τ_v (1 - π)) / h``;
    - ``anchor_steps = k > 0``: the schedule's pace scaled by ``exp(-d/k)``,
      ``a = π exp(-d/k)``, pulling a deviation back over k steps.

    With participation child orders (``EnvParams.child_quantity``) the pace becomes a
    percentage-of-volume order at the rate that finishes the order on the expected
    remaining volume. At the last step the prior trades everything; the logit is clipped
    to ``[-10, 10]``.

    Args:
        obs: float32 ``[..., D]`` raw (unnormalized) observations of
            :class:`ExecutionEnv`.
        anchor_steps: k, the pull-back time constant in steps (0: one-step tracking).

    Returns:
        float32 ``[...]`` action logits.
    """
    steps_left = jnp.exp(obs[..., 1])
    return _schedule_prior_logit(obs[..., 4], obs[..., 5], obs[..., 2], steps_left, anchor_steps)


def _schedule_prior_logit(
    schedule_left: jnp.ndarray,
    pace: jnp.ndarray,
    held: jnp.ndarray,
    steps_left: jnp.ndarray,
    anchor_steps: float,
) -> jnp.ndarray:
    """The anchored prior's logit on a schedule's clock (holdings ``schedule_left``, this
    step's share ``pace`` of what remains), shared by the TWAP and VWAP priors."""
    if anchor_steps > 0:
        slices_ahead = (schedule_left - held) * steps_left / jnp.maximum(schedule_left, 1e-12)
        pull = jnp.exp(jnp.clip(-slices_ahead / anchor_steps, -20.0, 20.0))
        action = jnp.where(steps_left <= 1.5, 1.0, pace * pull)
    else:
        target = schedule_left * (1.0 - pace)
        action = (held - target) / jnp.maximum(held, 1e-12)
    action = jnp.clip(action, 1e-5, 1.0 - 1e-5)
    return jnp.clip(jnp.log(action) - jnp.log1p(-action), -10.0, 10.0)


def hash_uniforms(key: jax.Array, n: int) -> jnp.ndarray:
    """``n`` float32 uniforms in [0, 1) hashed from a PRNG key's bits (24-bit resolution).

    The auto-reset runs for every lane at every step, and a threefry draw there cost as
    much as the step itself (``benchmarks/bench_env.py``: 3.4-5.8 M vs 8.2 M steps/s at
    4,096 episodes). The key handed to ``step`` is already a threefry output, so the
    32-bit murmur3 finalizer (Appleby, MurmurHash3 ``fmix32``) of its words, salted per
    output, mixes it enough for drawing episodes and windows. The first ``k`` of ``n``
    outputs do not depend on ``n``.
    """
    words = jax.random.key_data(key).reshape(-1).astype(jnp.uint32)
    salt = jnp.arange(n, dtype=jnp.uint32) * jnp.uint32(0x85EBCA6B)
    x = words[0] ^ (words[-1] * jnp.uint32(0x9E3779B9)) ^ salt
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * jnp.uint32(0xC2B2AE35)
    x = x ^ (x >> 16)
    return (x >> 8).astype(jnp.float32) * (1.0 / (1 << 24))


def draw_order(u: jnp.ndarray, params: EnvParams) -> tuple[jnp.ndarray, ...]:
    """An order's Q multiplier and window from uniforms, as :meth:`ExecutionEnv.reset_state`
    draws them.

    Args:
        u: float32 ``[3]`` uniforms in [0, 1) (``[1]`` suffices without
            ``params.random_window``): the multiplier, the window's start, its length.
        params: environment parameters (``quantity_low``, ``quantity_high``,
            ``random_window``, ``min_window_len``, the data's number of slots).

    Returns:
        ``(multiplier, start, window_len)``: float32 in ``[quantity_low, quantity_high]``,
        int32 first slot and int32 number of slots, a window of at least
        ``min_window_len`` slots inside the day (the whole day without ``random_window``).
    """
    n_slots = params.data.num_slots
    multiplier = params.quantity_low + u[0] * (params.quantity_high - params.quantity_low)
    if not params.random_window:
        return multiplier, jnp.int32(0), jnp.int32(n_slots)
    min_len = jnp.clip(params.min_window_len, 1, n_slots)
    n_starts = n_slots - min_len + 1
    start = jnp.minimum((u[1] * n_starts).astype(jnp.int32), n_starts - 1)
    n_lens = n_slots - start - min_len + 1
    window_len = min_len + jnp.minimum((u[2] * n_lens).astype(jnp.int32), n_lens - 1)
    return multiplier, start, window_len


class ExecutionEnv(environment.Environment[EnvState, EnvParams]):
    """Parent-order execution on replayed minute bars (see the module docstring).

    Args:
        reward_fn: the reward slot, a pure function
            ``reward(prev_state, action, next_state, params) -> float32 scalar`` or a dict
            of named float32 scalar terms whose sum is the reward
            (:mod:`serl_jax.components.reward`); :func:`default_reward` unless replaced
            (e.g. by validated LLM code).

    Observation: float32 ``[6 + lookback * F]``: ``(T - t)/T``, ``log(T - t)`` (so the
    TWAP pace ``1/(T - t)`` is a linear function of the input), ``I_t/Q``, the move of the
    last seen price since arrival in percent, the VWAP schedule's clock from the training
    volume profile (:func:`profile_schedule`: the share of the window's expected volume
    still ahead and the current minute's share of it), then the normalized market features of the
    ``lookback`` slots before the current one (zeros before the day's first bar), and with
    ``EnvParams.diagnostic_volume_leak`` (a diagnostic, never for real use) the current
    minute's true volume last.
    """

    def __init__(self, reward_fn: RewardFn = default_reward):
        super().__init__()
        self.reward_fn = reward_fn

    @property
    def default_params(self) -> EnvParams:
        raise ValueError(
            "ExecutionEnv has no default market: pass EnvParams(data=MarketData...) explicitly"
        )

    def init_state(
        self,
        params: EnvParams,
        episode: jnp.ndarray,
        start: jnp.ndarray,
        window_len: jnp.ndarray,
        quantity_multiplier: jnp.ndarray = 1.0,
    ) -> EnvState:
        """The state at the start of an order on a given symbol-day and window.

        Args:
            params: environment parameters.
            episode: int32 index into ``params.data``.
            start: int32 first slot of the window.
            window_len: int32 number of slots (``start + window_len <= T``).
            quantity_multiplier: multiplies ``order_fraction * expected window volume``.

        Returns:
            The initial ``EnvState``.
        """
        data = params.data
        end = start + window_len

        def window_sum(cumulative):  # O(1) from the running sums
            return cumulative[episode, end] - cumulative[episode, start]

        twap = window_sum(data.cum_price) / jnp.maximum(window_len, 1)
        window_volume = window_sum(data.cum_volume)
        vwap = jnp.where(
            window_volume > 0, safe_divide(window_sum(data.cum_notional), window_volume), twap
        )
        benchmark = twap if params.benchmark == "twap" else vwap
        expected_volume = data.expected_day_volume[episode] * window_sum(data.cum_profile)
        quantity = params.order_fraction * quantity_multiplier * expected_volume
        arrival = data.price[episode, jnp.maximum(start - 1, 0)]
        zero = jnp.zeros((), jnp.float32)
        return EnvState(
            time=jnp.zeros((), jnp.int32),
            episode=jnp.asarray(episode, jnp.int32),
            start=jnp.asarray(start, jnp.int32),
            window_len=jnp.asarray(window_len, jnp.int32),
            quantity=quantity.astype(jnp.float32),
            inventory=quantity.astype(jnp.float32),
            executed=zero,
            notional=zero,
            benchmark_price=benchmark.astype(jnp.float32),
            arrival_price=arrival.astype(jnp.float32),
            last_qty=zero,
            last_price=arrival.astype(jnp.float32),
            last_market_price=arrival.astype(jnp.float32),
            last_replayed_price=arrival.astype(jnp.float32),
            pace=zero,
        )

    def reset_state(self, key: jax.Array, params: EnvParams) -> EnvState:
        """Draws a symbol-day, Q and (if ``random_window``) a window; returns the state.

        The uniforms come from a hash of the key's bits (:func:`hash_uniforms`): this runs
        for every lane at every step of the auto-reset, where a threefry draw doubled the
        cost of a step. Deterministic given the key.
        """
        u = hash_uniforms(key, 4 if params.random_window else 2)
        episode = jnp.minimum(
            (u[0] * params.data.num_episodes).astype(jnp.int32), params.data.num_episodes - 1
        )
        multiplier, start, window_len = draw_order(u[1:], params)
        return self.init_state(params, episode, start, window_len, multiplier)

    def reset_env(self, key: jax.Array, params: EnvParams) -> tuple[jnp.ndarray, EnvState]:
        """Draws a symbol-day, a window and Q; returns ``(obs, state)``."""
        state = self.reset_state(key, params)
        return self.get_obs(state, params), state

    @partial(jax.jit, static_argnames=("self",))
    def step(
        self,
        key: jax.Array,
        state: EnvState,
        action: jnp.ndarray,
        params: EnvParams | None = None,
    ) -> tuple[jnp.ndarray, EnvState, jnp.ndarray, jnp.ndarray, jnp.ndarray, dict[str, Any]]:
        """gymnax ``step`` with auto-reset: ``(obs, state, reward, terminated, truncated, info)``.

        Same contract as ``gymnax.environments.environment.Environment.step`` (including
        ``info["final_observation"]``), restructured for speed: the reset draws its
        randomness once and the observation is gathered once, from the selected state,
        instead of for both the stepped and the reset state, and no key is split (the
        transition itself is deterministic). ``final_observation`` costs nothing when
        unused (XLA drops it).
        """
        if params is None:
            params = self.default_params
        # step_env is deterministic (it ignores its key), so the whole key feeds the reset.
        obs_step, state_step, reward, terminated, info = self.step_env(key, state, action, params)
        truncated = self.is_truncated(state_step, params)
        done = jnp.logical_or(terminated, truncated)
        state_reset = self.reset_state(key, params)
        state = jax.tree.map(lambda r, s: jax.lax.select(done, r, s), state_reset, state_step)
        info = {
            **info,
            "terminated": terminated,
            "truncated": truncated,
            "final_observation": obs_step,
        }
        return self.get_obs(state, params), state, reward, terminated, truncated, info

    def step_env(
        self, key: jax.Array, state: EnvState, action: jnp.ndarray, params: EnvParams
    ) -> tuple[jnp.ndarray, EnvState, jnp.ndarray, jnp.ndarray, dict[str, Any]]:
        """Executes one child order; returns ``(obs, state, reward, terminated, info)``.

        ``info`` holds per-step ``exec_qty`` (shares), ``exec_price``, ``market_price``,
        ``benchmark_price`` and, for the metrics, the order's ``quantity``, ``executed``,
        ``notional`` and ``order_pa`` (bps, meaningful when ``terminated``); with
        ``params.step_minutes`` > 1 also ``acted`` (bool: the step read its action).
        """
        del key
        data = params.data
        slot = jnp.minimum(state.start + state.time, data.num_slots - 1)
        price = data.price[state.episode, slot]
        volume = data.volume[state.episode, slot]
        fraction = jnp.clip(jnp.asarray(action, jnp.float32).reshape(()), 0.0, 1.0)
        pace = state.pace
        if params.step_minutes > 1:  # a decision interval: the size is set at its start
            acted = state.time % params.step_minutes == 0
            pace = jnp.where(acted, fraction * state.inventory, state.pace)
            fraction = jnp.where(acted, fraction, safe_divide(pace, state.inventory))
            fraction = jnp.minimum(fraction, 1.0)
        is_last = state.time + 1 >= state.window_len
        forced = jnp.logical_and(params.force_liquidation, is_last)
        desired = desired_quantity(state, fraction, params, slot, volume)
        capped = jnp.minimum(desired, params.participation_cap * volume)
        qty = jnp.where(forced, state.inventory, capped)
        liquidity = jnp.where(
            forced, jnp.maximum(volume, data.mean_minute_volume[state.episode]), volume
        )
        participation = safe_divide(qty, liquidity)
        cost_bps = (
            params.half_spread_bps
            + params.impact_eta_bps * participation**params.impact_exponent
            + jnp.where(forced, params.force_penalty_bps, 0.0)
        )
        cost_bps = jnp.minimum(cost_bps, params.max_cost_bps)
        exec_price = price * (1.0 - params.side * cost_bps * 1e-4)
        inventory = jnp.where(forced, 0.0, state.inventory - qty)
        next_state = state.replace(
            time=state.time + 1,
            inventory=inventory,
            executed=state.quantity - inventory,  # so executed + remaining = Q exactly
            notional=state.notional + qty * exec_price,
            last_qty=qty,
            last_price=jnp.where(qty > 0, exec_price, price),
            last_market_price=price,
            last_replayed_price=price,
            pace=pace,
        )
        step = self.finish_step(state, fraction, next_state, params, qty, exec_price, price)
        if params.step_minutes > 1:
            step[-1]["acted"] = acted
        return step

    def finish_step(self, state, fraction, next_state, params, qty, exec_price, market_price):
        """Reward, termination, observation and ``info`` of a step: the part of
        ``step_env`` every market shares (``qty`` shares filled at ``exec_price``,
        ``market_price`` the minute's reference price)."""
        reward = total_reward(self.reward_fn(state, fraction, next_state, params))
        terminated = self.is_terminated(next_state, params)
        info = {
            "exec_qty": qty,
            "exec_price": exec_price,
            "market_price": market_price,
            "benchmark_price": next_state.benchmark_price,
            "quantity": next_state.quantity,
            "executed": next_state.executed,
            "notional": next_state.notional,
            "order_pa": order_price_advantage(next_state, params),
        }
        return self.get_obs(next_state, params), next_state, reward, terminated, info

    def get_obs(
        self, state: EnvState, params: EnvParams, key: jax.Array | None = None
    ) -> jnp.ndarray:
        """Observation ``[6 + lookback * F]`` float32 (see the class docstring)."""
        del key
        n_slots = params.data.num_slots
        slot = state.start + state.time
        time_left = safe_divide(
            (state.window_len - state.time).astype(jnp.float32),
            state.window_len.astype(jnp.float32),
        )
        inventory_left = safe_divide(state.inventory, state.quantity)
        last_seen = self.history_price(state, params, jnp.clip(slot - 1, 0, n_slots - 1))
        move_pct = jnp.where(slot > 0, (last_seen / state.arrival_price - 1.0) * 100.0, 0.0)
        past = slot - params.lookback + jnp.arange(params.lookback)
        features = self.history_features(state, params, jnp.clip(past, 0, n_slots - 1))
        features = jnp.where((past >= 0)[:, None], features, 0.0)
        steps_left = jnp.maximum(state.window_len - state.time, 1).astype(jnp.float32)
        profile_left, profile_pace = profile_schedule(state, params, time_left, steps_left)
        private = jnp.stack(
            [time_left, jnp.log(steps_left), inventory_left, move_pct, profile_left, profile_pace]
        )
        parts = [private, features.reshape(-1)]
        if params.diagnostic_volume_leak:
            current = jnp.minimum(slot, n_slots - 1)
            volume = params.data.volume[state.episode, current]
            leak = jnp.log1p(safe_divide(volume, params.data.mean_minute_volume[state.episode]))
            parts.append(leak[None])
        return jnp.concatenate(parts).astype(jnp.float32)

    def history_price(self, state: EnvState, params: EnvParams, slot: jnp.ndarray) -> jnp.ndarray:
        """Price of an observed slot of the episode's day (the replayed bar), float32."""
        return params.data.price[state.episode, slot]

    def history_features(
        self, state: EnvState, params: EnvParams, slots: jnp.ndarray
    ) -> jnp.ndarray:
        """Normalized market features ``[len(slots), F]`` of observed slots (replayed)."""
        return params.data.features[state.episode, slots]

    def is_terminated(self, state: EnvState, params: EnvParams) -> jnp.ndarray:
        """The order ends when its window is over."""
        return state.time >= state.window_len

    def is_truncated(self, state: EnvState, params: EnvParams) -> jnp.ndarray:
        """No time-limit truncation: the window end is the task's natural end."""
        return jnp.zeros((), jnp.bool_)

    @property
    def name(self) -> str:
        return "ExecutionEnv"

    def observation_size(self, params: EnvParams) -> int:
        """Length of the observation vector, ``6 + lookback * F`` (+1 with the diagnostic
        volume leak)."""
        leak = 1 if params.diagnostic_volume_leak else 0
        return NUM_PRIVATE_FEATURES + params.lookback * params.data.num_features + leak

    def action_space(self, params: EnvParams | None = None) -> spaces.Box:
        """``a ∈ [0, 1]``: the fraction of the remaining inventory to trade."""
        return spaces.Box(0.0, 1.0, (), jnp.float32)

    def observation_space(self, params: EnvParams) -> spaces.Box:
        """Unbounded float32 box of size :meth:`observation_size`."""
        return spaces.Box(-jnp.inf, jnp.inf, (self.observation_size(params),), jnp.float32)
