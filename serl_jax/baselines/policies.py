"""TWAP, VWAP and Almgren–Chriss as policies with the learned policy's interface.

A policy is ``policy(policy_params, key, obs, state, env_params) -> action`` for ONE
episode (float32 scalar in [0, 1], the fraction of the remaining inventory to trade);
:func:`serl_jax.evaluation.rollout` vmaps it over episodes. Baselines read the
``EnvState`` (their schedules need the window and step) and ignore the observation; each
tracks its target remaining fraction and catches up when the participation cap held it
back (:func:`serl_jax.baselines.schedules.action_from_target`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from serl_jax.baselines.schedules import (
    action_from_target,
    almgren_chriss_kappa,
    almgren_chriss_remaining,
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
