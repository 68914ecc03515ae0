"""Imagination programs of the offline designer (the LLM4Imagine slot).

Each program is ``imagine(key, price, volume, params) -> (price, volume)`` over one real
training day (:mod:`serl_jax.components.imagination`): ``price`` and ``volume`` are
``float32[T]`` minute closes (currency per share) and volumes (data units);
``params.realized_volatility`` is the day's one-minute log-return std (a fraction),
``params.volume_profile`` its volume share per minute, ``params.n_slots`` T. Programs
work on log prices, so prices stay positive, and multiply volumes by positive factors,
so volumes stay non-negative; their constants keep the imagined day inside the default
bounds (``ImaginationBounds``: daily move within 3 daily stds, volatility and total
volume within 4x, volume-profile distance below 0.5).

The programs are text, never executed here; ``tests/components/test_imagination.py``
runs each through the full validator and checks what it does on hand-made days.
"""

from __future__ import annotations

from llm.designs import Design

__all__ = ["IMAGINATIONS"]

_VOLATILITY_SCALE = """\
# volatility_scale: the same day with its one-minute log returns scaled by VOL_SCALE (a
# calmer or a more turbulent version of the path); volumes unchanged.
import jax.numpy as jnp

VOL_SCALE = 1.5  # multiplies every one-minute log return


def imagine(key, price, volume, params):
    log_price = jnp.log(price)
    path = log_price[0] + VOL_SCALE * (log_price - log_price[0])
    return jnp.exp(path), volume
"""

_TREND_REGIME = """\
# trend_regime: a regime change: from a random minute on, a drift of up to TREND_STDS daily
# standard deviations (random sign and size) is added to the log price; volumes unchanged.
import jax
import jax.numpy as jnp

TREND_STDS = 1.0  # largest added move at the close, in daily standard deviations


def imagine(key, price, volume, params):
    key_start, key_size = jax.random.split(key)
    n = params.n_slots
    start = jax.random.randint(key_start, (), 0, n - 1)
    size = jax.random.uniform(key_size, (), minval=-1.0, maxval=1.0)
    daily_std = params.realized_volatility * jnp.sqrt(n - 1.0)
    t = jnp.arange(n)
    ramp = jnp.clip(t - start, 0, None) / jnp.maximum(n - 1 - start, 1)
    return price * jnp.exp(size * TREND_STDS * daily_std * ramp), volume
"""

_VOLUME_SHOCK = """\
# volume_shock: a burst of trading: a random window of SHOCK_MINUTES minutes trades
# SHOCK_MULTIPLE times its volume, and the day's profile is tilted toward the open or the
# close by up to PROFILE_TILT; prices unchanged.
import jax
import jax.numpy as jnp

SHOCK_MINUTES = 20  # length of the burst, minutes
SHOCK_MULTIPLE = 3.0  # volume multiple inside the burst
PROFILE_TILT = 0.5  # log-volume slope over the day at most (+-)


def imagine(key, price, volume, params):
    key_start, key_tilt = jax.random.split(key)
    n = params.n_slots
    t = jnp.arange(n)
    start = jax.random.randint(key_start, (), 0, n - SHOCK_MINUTES)
    burst = (t >= start) & (t < start + SHOCK_MINUTES)
    tilt = jax.random.uniform(key_tilt, (), minval=-1.0, maxval=1.0) * PROFILE_TILT
    factor = jnp.where(burst, SHOCK_MULTIPLE, 1.0) * jnp.exp(tilt * (t / n - 0.5))
    return price, volume * factor
"""

_MEAN_REVERSION = """\
# mean_reversion: intraday mean reversion: an AR(1) deviation x_t = PHI x_(t-1) + e_t with
# e_t of NOISE_SCALE times the day's one-minute volatility is added to the log price (a
# price that overshoots and comes back); volumes unchanged.
import jax
import jax.numpy as jnp

PHI = 0.8  # persistence of the deviation per minute
NOISE_SCALE = 0.5  # innovation std, in the day's one-minute volatilities


def imagine(key, price, volume, params):
    shocks = jax.random.normal(key, price.shape) * NOISE_SCALE * params.realized_volatility

    def step(x, e):
        x = PHI * x + e
        return x, x

    _, deviation = jax.lax.scan(step, 0.0, shocks)
    deviation = deviation - deviation[0]
    return price * jnp.exp(deviation), volume
"""

_FLASH_DIP = """\
# flash_dip: a flash crash and recovery: at a random minute the price drops by DIP_STDS
# daily standard deviations and recovers linearly over RECOVERY_MINUTES, while volume
# trades VOLUME_SPIKE times its level during the recovery.
import jax
import jax.numpy as jnp

DIP_STDS = 0.5  # depth of the dip, in daily standard deviations
RECOVERY_MINUTES = 15  # minutes back to the undisturbed path
VOLUME_SPIKE = 2.0  # volume multiple during the recovery


def imagine(key, price, volume, params):
    n = params.n_slots
    t = jnp.arange(n)
    start = jax.random.randint(key, (), 1, n - RECOVERY_MINUTES)
    since = t - start
    during = (since >= 0) & (since < RECOVERY_MINUTES)
    depth = DIP_STDS * params.realized_volatility * jnp.sqrt(n - 1.0)
    dip = jnp.where(during, depth * (1.0 - since / RECOVERY_MINUTES), 0.0)
    return price * jnp.exp(-dip), volume * jnp.where(during, VOLUME_SPIKE, 1.0)
"""

IMAGINATIONS: tuple[Design, ...] = (
    Design("volatility_scale", "imagination", _VOLATILITY_SCALE),
    Design("trend_regime", "imagination", _TREND_REGIME),
    Design("volume_shock", "imagination", _VOLUME_SHOCK),
    Design("mean_reversion", "imagination", _MEAN_REVERSION),
    Design("flash_dip", "imagination", _FLASH_DIP),
)
