"""Mixed sampling: training episodes drawn from real and imagined days (the seeds' 50%).

:func:`mix_imagined` wraps any trainer (plain PPO, hybrid PPO) that is built for one
:class:`~serl_jax.envs.market_data.MarketData`. The trainer's market becomes the N real
training days followed by a pool of M imagined days; the environments draw a day
uniformly, so a share ``M / (N + M)`` of the episodes is imagined, ``M = round(N r /
(1 - r))`` for the ratio ``r`` (``r = 1``: the pool alone, M = N). Imagined day ``j`` is
imagined from real day ``j mod N``.

The pool is imagined afresh inside the jitted update, every update, vmapped (no host
round trip), except the days that a lane's running episode is on: an episode spans
rollouts, and its benchmark price and parent order were fixed from its day at reset, so
that day stays as it is until the episode ends. In the dynamic market the imagined day is
the fundamental the informed traders follow (:mod:`serl_jax.envs.dynamic` replays
``params.data``). A day the program makes outside the bounds
(:class:`~serl_jax.components.imagination.ImaginationBounds`) is replayed from its source
instead; the share of such days is the update's ``imagined_out_of_bounds`` metric.

Validation and test days stay real: only the trainer's market is mixed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from serl_jax.components.imagination import (
    ImaginationBounds,
    ImagineFn,
    reflection_statistics,
)
from serl_jax.envs.imagined_market import FeatureStats, concat_markets, imagine_days, source_rows
from serl_jax.envs.market_data import MarketData
from serl_jax.rl.ppo import RunnerState, Trainer, assemble_trainer

__all__ = [
    "Imagination",
    "ImaginedRunner",
    "imagined_pool_size",
    "imagined_share",
    "imagined_vs_real",
    "mix_imagined",
]


@dataclass(frozen=True)
class Imagination:
    """What :func:`mix_imagined` needs.

    Attributes:
        imagine_fn: a validated program of the imagination slot.
        ratio: share of training episodes on imagined days, in (0, 1].
        stats: the training feature normalization the real days were built with.
        bounds: an imagined day outside them is replayed from its source.
        tick_size: handed to the program (currency per share; 0 unknown).
    """

    imagine_fn: ImagineFn
    ratio: float
    stats: FeatureStats
    bounds: ImaginationBounds = field(default_factory=ImaginationBounds)
    tick_size: float = 0.0

    def __post_init__(self):
        if not 0.0 < self.ratio <= 1.0:
            raise ValueError(f"imagination ratio must be in (0, 1], got {self.ratio}")


def imagined_pool_size(n_real: int, ratio: float) -> int:
    """M, the imagined days kept beside ``n_real`` real ones for the share ``ratio``."""
    if ratio >= 1.0:
        return n_real
    return max(1, round(n_real * ratio / (1.0 - ratio)))


def imagined_share(n_real: int, ratio: float) -> float:
    """The share of episodes actually drawn from imagined days (``M / (N + M)``, or 1)."""
    if ratio >= 1.0:
        return 1.0
    m = imagined_pool_size(n_real, ratio)
    return m / (n_real + m)


class ImaginedRunner(NamedTuple):
    """The wrapped trainer's state, the imagined days and the key that imagines them."""

    inner: Any
    pool: MarketData
    key: jax.Array

    @property
    def train_state(self):
        """The wrapped runner's ``train_state``."""
        return self.inner.train_state

    @property
    def obs_stats(self):
        """The wrapped runner's ``obs_stats``."""
        return self.inner.obs_stats


def lane_episodes(runner: Any) -> jnp.ndarray:
    """``int32[L]``: the day each lane's running episode is on (plain or hybrid PPO)."""
    if isinstance(runner, RunnerState):
        return runner.env_state.episode
    return jnp.concatenate([runner.static.env_state.episode, runner.dynamic.env_state.episode])


def mix_imagined(
    trainer_for: Callable[[MarketData], Trainer],
    real: MarketData,
    imagination: Imagination,
    num_updates: int,
) -> Trainer:
    """A trainer whose market mixes real and imagined days (see the module docstring).

    Args:
        trainer_for: builds the wrapped trainer for a market (called inside the trace
            every update; the markets differ only in values, so it compiles once).
        real: the N real training days.
        imagination: the program, ratio, normalization and bounds.
        num_updates: updates of ``train(key)``.

    Returns:
        A :class:`~serl_jax.rl.ppo.Trainer` over :class:`ImaginedRunner`; its metrics are
        the wrapped trainer's plus ``imagined_out_of_bounds`` (share of the update's
        freshly imagined days replayed from their source) and ``imagined_lane_share``
        (share of the lanes whose episode is on an imagined day as the update starts).
    """
    n_real = real.num_episodes
    n_pool = imagined_pool_size(n_real, imagination.ratio)
    sources = jnp.asarray(source_rows(n_real, n_pool))
    pool_only = imagination.ratio >= 1.0
    first_imagined = 0 if pool_only else n_real

    def imagine(key):
        return imagine_days(
            imagination.imagine_fn,
            key,
            real,
            sources,
            imagination.stats,
            imagination.bounds,
            imagination.tick_size,
        )

    def market(pool: MarketData) -> MarketData:
        return pool if pool_only else concat_markets(real, pool)

    def init(key: jax.Array) -> ImaginedRunner:
        key, key_pool, key_inner = jax.random.split(key, 3)
        pool, _ = imagine(key_pool)
        return ImaginedRunner(trainer_for(market(pool)).init(key_inner), pool, key)

    def update(runner: ImaginedRunner) -> tuple[ImaginedRunner, dict[str, jnp.ndarray]]:
        key, key_pool = jax.random.split(runner.key)
        episodes = lane_episodes(runner.inner)
        row = episodes - first_imagined
        row = jnp.where(row >= 0, row, n_pool)  # real days: an index the scatter drops
        in_use = jnp.zeros((n_pool,), bool).at[row].set(True, mode="drop")
        fresh, out_of_bounds = imagine(key_pool)

        def keep_in_use(old, new):
            return jnp.where(in_use.reshape((-1,) + (1,) * (new.ndim - 1)), old, new)

        pool = jax.tree.map(keep_in_use, runner.pool, fresh)
        inner, metrics = trainer_for(market(pool)).update(runner.inner)
        refreshed = ~in_use
        metrics["imagined_out_of_bounds"] = (out_of_bounds & refreshed).sum() / jnp.maximum(
            refreshed.sum(), 1
        )
        # Lanes draw a day only at reset: with few lanes and episodes longer than the
        # training, the share actually on imagined days can be far from the ratio's.
        metrics["imagined_lane_share"] = jnp.mean(episodes >= first_imagined)
        return ImaginedRunner(inner, pool, key), metrics

    return assemble_trainer(init, update, num_updates)


def imagined_vs_real(imagination: Imagination, real: MarketData, key: jax.Array) -> dict:
    """The reflection of an imagination program: statistics of one imagined day per real
    training day against those real days (LLM4Imagine's feedback to the designer).

    Args:
        imagination: the program and its bounds.
        real: the N real training days.
        key: PRNG key of the imagined days.

    Returns:
        ``{"real": {...}, "imagined": {...}, "out_of_bounds": share}``: the
        :func:`~serl_jax.components.imagination.reflection_statistics` of the real days
        and of the days training sees in their place (an out-of-bounds day replayed from
        its source), and the share of days out of bounds.
    """
    n = real.num_episodes
    imagined, replaced = jax.jit(
        lambda k: imagine_days(
            imagination.imagine_fn,
            k,
            real,
            jnp.arange(n, dtype=jnp.int32),
            imagination.stats,
            imagination.bounds,
            imagination.tick_size,
        )
    )(key)
    return {
        "real": reflection_statistics(real.price, real.volume),
        "imagined": reflection_statistics(imagined.price, imagined.volume),
        "out_of_bounds": float(replaced.mean()),
    }
