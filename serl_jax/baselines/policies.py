"""Classic execution baselines, and a hindsight bound, with the learned policy's interface.

A policy is ``policy(policy_params, key, obs, state, env_params) -> action`` for ONE
episode (float32 scalar in [0, 1], the fraction of the remaining inventory to trade);
:func:`serl_jax.evaluation.rollout` vmaps it over episodes. Baselines read the
``EnvState`` (their schedules need the window and step) and ignore the observation; each
tracks its target remaining fraction and catches up when the participation cap held it
back (:func:`serl_jax.baselines.schedules.action_from_target`).

The volume-driven baselines (POV, adaptive VWAP) see only the minutes before the current
one, as the agent does; the oracle sees the whole day and is not achievable.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from serl_jax.baselines.schedules import (
    action_from_target,
    almgren_chriss_kappa,
    almgren_chriss_remaining,
    cost_optimal_quantities,
    twap_remaining,
    vwap_remaining,
)
from serl_jax.envs.execution import EnvParams, EnvState, safe_divide


def _remaining_fraction(state: EnvState) -> jnp.ndarray:
    return safe_divide(state.inventory, state.quantity)


def twap_policy(policy_params, key: jax.Array, obs, state: EnvState, params: EnvParams):
    """Equal child orders over the window: target ``(T - t - 1)/T`` remaining after step t."""
    del policy_params, key, obs
    target = twap_remaining(state.time, state.window_len)
    return action_from_target(_remaining_fraction(state), target)


def twap_pov_policy(policy_params, key: jax.Array, obs, state: EnvState, params: EnvParams):
    """TWAP's schedule executed with participation child orders (a broker's TWAP that
    slices each interval by volume): the TWAP action, always run with
    ``EnvParams.child_quantity="participation"`` (:data:`PARTICIPATION_POLICIES`), so a
    minute trades the TWAP slice when its volume is as forecast, more in a busier one,
    and the next minute catches up to the schedule. The baseline that separates what the
    order type gains from what a learned schedule gains."""
    return twap_policy(policy_params, key, obs, state, params)


def immediate_policy(policy_params, key: jax.Array, obs, state: EnvState, params: EnvParams):
    """Trade everything at once: action 1 at every step.

    In the dynamic market (no participation cap) the whole parent order goes to the book
    at ``t = 0``: the reference point for market impact. The static environment still
    caps each child order at ``participation_cap`` of the minute's volume.
    """
    del policy_params, key, obs, state, params
    return jnp.float32(1.0)


def vwap_policy(policy_params, key: jax.Array, obs, state: EnvState, params: EnvParams):
    """Follows the symbol's intraday volume profile estimated on training days only.

    The profile (``MarketData.volume_profile``) is restricted to the order window and
    renormalized; the target after step t is the profile mass left after slot start + t.
    """
    del policy_params, key, obs
    slots = jnp.arange(params.data.num_slots)
    in_window = (slots >= state.start) & (slots < state.start + state.window_len)
    profile = params.data.volume_profile[state.episode] * in_window
    target = vwap_remaining(state.start + state.time, profile)
    return action_from_target(_remaining_fraction(state), target)


def almgren_chriss_eta(state: EnvState, params: EnvParams) -> jnp.ndarray:
    """Linear temporary-impact coefficient equivalent to the env's cost model.

    The env charges ``eta * (q/v)^k`` per share (fraction of price). With trades ``n`` in
    fractions of Q per step and ``v`` the symbol's training mean minute volume, the cost
    ``Σ eta (Q/v)^k n^(1+k)`` (units of Q·P) is matched at the TWAP rate ``n = 1/T`` by the
    Almgren–Chriss linear cost ``Σ eta_lin n^2``: ``eta_lin = eta (Q/v)^k T^(1-k)``.
    """
    eta = params.impact_eta_bps * 1e-4
    minute_volume = params.data.mean_minute_volume[state.episode]
    participation = safe_divide(state.quantity, minute_volume)
    horizon = state.window_len.astype(jnp.float32)
    return eta * participation**params.impact_exponent * horizon ** (1.0 - params.impact_exponent)


def almgren_chriss_policy(risk_aversion, key: jax.Array, obs, state: EnvState, params: EnvParams):
    """Almgren & Chriss (2000) optimal trajectory ``x_j = X sinh(κ(T - t_j)) / sinh(κT)``.

    Args:
        risk_aversion: λ ≥ 0 (the policy's parameter), in units of 1/(Q·P): the cost of a
            unit of variance of the order's value measured in (Q·P)^2. λ → 0 gives TWAP.

    σ is the symbol's per-minute return volatility on training days (``MarketData.sigma``)
    and η the linearized impact of :func:`almgren_chriss_eta`; no permanent impact.
    """
    del key, obs
    kappa = almgren_chriss_kappa(
        risk_aversion, params.data.sigma[state.episode], almgren_chriss_eta(state, params)
    )
    target = almgren_chriss_remaining(state.time, state.window_len, kappa)
    return action_from_target(_remaining_fraction(state), target)


def _window_mask(state: EnvState, params: EnvParams) -> jnp.ndarray:
    slots = jnp.arange(params.data.num_slots)
    return (slots >= state.start) & (slots < state.start + state.window_len)


def _expected_volume(state: EnvState, params: EnvParams) -> jnp.ndarray:
    """``[T]`` the symbol's training-day expected volume per slot of the window, 0 outside."""
    data = params.data
    expected = data.volume_profile[state.episode] * data.expected_day_volume[state.episode]
    return expected * _window_mask(state, params)


def pov_policy(policy_params, key: jax.Array, obs, state: EnvState, params: EnvParams):
    """Percentage of volume: trades ``ρ`` times the market volume observed so far.

    ``ρ = Q / E[V_window]`` (the order's size against the window's expected volume from
    training days), so the target executed after step t is ``ρ V_<s``, ``V_<s`` the
    market volume of the window's minutes before the current one (lagged: the current
    minute is not observed yet). To finish in the window it never holds more than the rate
    ``ρ`` would trade in the expected volume still to come, i.e. the target remaining is
    ``min(1 - V_<s / E[V_window], E[V_>s] / E[V_window])``: on a quiet day it catches up
    to the VWAP schedule.
    """
    del policy_params, key, obs
    expected = _expected_volume(state, params)
    slot = state.start + state.time
    seen = (jnp.arange(params.data.num_slots) < slot) & _window_mask(state, params)
    observed = jnp.where(seen, params.data.volume[state.episode], 0.0).sum()
    pov_left = 1.0 - safe_divide(observed, expected.sum())
    target = jnp.minimum(jnp.maximum(pov_left, 0.0), vwap_remaining(slot, expected))
    return action_from_target(_remaining_fraction(state), target)


# Adaptive VWAP's volume forecast (chosen on validation days, docs/guide/metrics.md).
AVWAP_LOOKBACK = 60  # minutes over which the day's volume is compared with the profile
AVWAP_DECAY = 0.98  # per minute: how fast that surprise fades into the profile's forecast


def adaptive_vwap_policy(policy_params, key: jax.Array, obs, state: EnvState, params: EnvParams):
    """Dynamic VWAP (after Białkowski, Darolles & Le Fol 2008): the VWAP schedule of the day's
    volume as observed so far plus a forecast of the rest from the training-day profile,
    rescaled by the observed volume.

    The forecast of minute ``k >= s`` is ``V̂_k = E_k (1 + (r - 1) φ^(k - s))``: the profile's
    expected volume ``E_k`` times the surprise ``r`` (observed over expected volume in the
    last ``AVWAP_LOOKBACK`` minutes seen, clipped to [0.2, 5]) fading with ``φ =
    AVWAP_DECAY`` per minute ahead. The target executed after step t is the share of the
    day's volume done by then, ``(V_<s + V̂_s) / (V_<s + Σ_{k>=s} V̂_k)``, ``V_<s`` the
    observed volume of the window's earlier minutes; the policy tracks it and catches up
    like VWAP. (Rescaling the profile by the whole day's observed volume would cancel out
    of the shares.)
    """
    del policy_params, key, obs
    data = params.data
    expected = _expected_volume(state, params)
    slots = jnp.arange(data.num_slots)
    slot = state.start + state.time
    window = _window_mask(state, params)
    volume = data.volume[state.episode]
    recent = (slots < slot) & (slots >= slot - AVWAP_LOOKBACK) & window
    seen = jnp.where(recent, volume, 0.0).sum()
    due = jnp.where(recent, expected, 0.0).sum()
    surprise = jnp.where(due > 0, jnp.clip(safe_divide(seen, due), 0.2, 5.0), 1.0)
    ahead = jnp.maximum(slots - slot, 0).astype(jnp.float32)
    forecast = jnp.where(
        slots >= slot, expected * (1.0 + (surprise - 1.0) * AVWAP_DECAY**ahead), 0.0
    )
    observed = jnp.where((slots < slot) & window, volume, 0.0).sum()
    now = forecast[jnp.minimum(slot, data.num_slots - 1)]
    total = observed + forecast.sum()
    target = jnp.where(
        total > 0,
        1.0 - safe_divide(observed + now, total),
        twap_remaining(state.time, state.window_len),
    )
    return action_from_target(_remaining_fraction(state), jnp.clip(target, 0.0, 1.0))


def oracle_policy(policy_params, key: jax.Array, obs, state: EnvState, params: EnvParams):
    """Hindsight bound, not achievable: the least-cost schedule given the day's volumes.

    Knows every minute's volume of the window in advance and follows
    :func:`serl_jax.baselines.schedules.cost_optimal_quantities` under the env's cost model
    (volume-proportional where the participation cap and the forced last minute do not
    bind). No policy can have a lower execution shortfall (spread and impact) on the same
    orders; its PA is not an upper bound, since the timing part of PA
    (:func:`serl_jax.metrics.timing_advantage`) depends on the price path, which this
    oracle ignores.
    """
    del policy_params, key, obs
    data = params.data
    window = _window_mask(state, params)
    slots = jnp.arange(data.num_slots)
    last = slots == state.start + state.window_len - 1
    forced = last & params.force_liquidation
    volume = data.volume[state.episode]
    liquidity = jnp.where(
        forced, jnp.maximum(volume, data.mean_minute_volume[state.episode]), volume
    )
    plan = cost_optimal_quantities(
        jnp.where(window, liquidity, 0.0),
        forced,
        state.quantity,
        params.half_spread_bps,
        params.impact_eta_bps,
        params.impact_exponent,
        params.participation_cap,
        params.force_penalty_bps,
    )
    done_after = jnp.where(slots <= state.start + state.time, plan, 0.0).sum()
    target = 1.0 - safe_divide(done_after, state.quantity)
    return action_from_target(_remaining_fraction(state), jnp.clip(target, 0.0, 1.0))


# The baselines' child orders, whatever the learned policies' ``EnvParams.child_quantity``:
# fixed-size ones (their definitions say how many shares each minute trades), except
# TWAP-POV's participation ones.
FIXED_SIZE_POLICIES = (
    twap_policy,
    immediate_policy,
    vwap_policy,
    almgren_chriss_policy,
    pov_policy,
    adaptive_vwap_policy,
    oracle_policy,
)
PARTICIPATION_POLICIES = (twap_pov_policy,)
