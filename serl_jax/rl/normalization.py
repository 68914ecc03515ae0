"""Running observation normalization (the state travels with the policy parameters).

Batched parallel update of mean and variance (Chan, Golub & LeVeque 1979), as in
Stable-Baselines3's ``RunningMeanStd`` and PureJaxRL's ``NormalizeVecObservation``.
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import struct


@struct.dataclass
class RunningStats:
    """Mean and variance of observations seen so far.

    Attributes:
        mean: ``[D]`` float32.
        var: ``[D]`` float32.
        count: float32 scalar, number of observations (starts at a small epsilon).
    """

    mean: jnp.ndarray
    var: jnp.ndarray
    count: jnp.ndarray

    @classmethod
    def create(cls, size: int) -> RunningStats:
        """Empty statistics for ``size``-dimensional observations."""
        return cls(jnp.zeros(size), jnp.ones(size), jnp.asarray(1e-4))

    def update(self, batch: jnp.ndarray, mask: jnp.ndarray | None = None) -> RunningStats:
        """Merges a ``[B, D]`` batch into the statistics (with ``mask`` ``bool[B]``, only
        its rows where the mask is set; an all-false mask changes nothing)."""
        if mask is None:
            batch_mean = batch.mean(axis=0)
            batch_var = batch.var(axis=0)
            batch_count = batch.shape[0]
        else:
            weight = mask.astype(batch.dtype)[:, None]
            batch_count = weight.sum()
            safe_count = jnp.maximum(batch_count, 1.0)
            batch_mean = (weight * batch).sum(axis=0) / safe_count
            batch_var = (weight * (batch - batch_mean) ** 2).sum(axis=0) / safe_count
        delta = batch_mean - self.mean
        total = self.count + batch_count
        mean = self.mean + delta * batch_count / total
        m2 = (
            self.var * self.count
            + batch_var * batch_count
            + delta**2 * self.count * batch_count / total
        )
        return RunningStats(mean=mean, var=m2 / total, count=total)

    def normalize(self, obs: jnp.ndarray, clip: float = 10.0) -> jnp.ndarray:
        """``clip((obs - mean) / sqrt(var + 1e-8), -clip, clip)`` for ``[..., D]`` obs."""
        return jnp.clip((obs - self.mean) / jnp.sqrt(self.var + 1e-8), -clip, clip)
