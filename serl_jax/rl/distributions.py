"""The logit-normal (sigmoid-squashed Gaussian) action distribution on (0, 1).

Execution actions live on a log scale: a TWAP child order is 1/(T - t) of the remaining
inventory (0.4% at the start of a 240-minute day) while the last step needs 1. A Gaussian
on the logit ``z`` reaches all of these with O(1) network outputs, and PPO works on ``z``
itself: the environment receives ``a = sigmoid(z)``, and because the squashing is a fixed
bijection the probability ratios of ``z`` and ``a`` are equal, so ``log_prob`` is the
exact Gaussian density with no clipping at the bounds. (A Beta policy with concentrations
below 1 puts much of its mass within float32 rounding of 0, where clipped samples bias
the gradient; with concentrations above 1 its mean cannot get near 1/240 from O(1)
outputs.)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

_LOG_SQRT_2PI = 0.5 * jnp.log(2.0 * jnp.pi)
# Bounds on log σ of the logit: σ in [0.007, 7.4] keeps ratios and entropies finite.
_LOG_SCALE_MIN, _LOG_SCALE_MAX = -5.0, 2.0


@struct.dataclass
class LogitNormal:
    """``z ~ Normal(loc, scale)``, action ``a = sigmoid(z)``; elementwise, float32.

    Attributes:
        loc: mean of the logit z (any shape).
        scale: standard deviation of z (> 0, same shape).
    """

    loc: jnp.ndarray
    scale: jnp.ndarray

    @classmethod
    def from_logits(cls, outputs: jnp.ndarray, prior_logit: jnp.ndarray = 0.0) -> LogitNormal:
        """From the network slot's ``[..., 2]`` outputs ``(loc, log_scale)``.

        Args:
            outputs: ``[..., 2]`` network outputs; ``log_scale`` is clipped to ``[-5, 2]``.
            prior_logit: ``[...]`` logit of a reference action added to ``loc`` (a residual
                policy around e.g. the TWAP pace); 0 for none.
        """
        log_scale = jnp.clip(outputs[..., 1], _LOG_SCALE_MIN, _LOG_SCALE_MAX)
        return cls(loc=outputs[..., 0] + prior_logit, scale=jnp.exp(log_scale))

    def sample(self, key: jax.Array) -> jnp.ndarray:
        """Draws logits ``z`` (pass them through :meth:`action` for the env)."""
        return self.loc + self.scale * jax.random.normal(key, jnp.shape(self.loc))

    def log_prob(self, z: jnp.ndarray) -> jnp.ndarray:
        """Gaussian log-density of the logit ``z``."""
        u = (z - self.loc) / self.scale
        return -0.5 * u**2 - jnp.log(self.scale) - _LOG_SQRT_2PI

    def cross_entropy(self, target: LogitNormal) -> jnp.ndarray:
        """``H(target, self) = E_{z ~ target}[-log self(z)]`` (nats), elementwise.

        Closed form for two Gaussians: ``log σ + ½ log 2π + (σ_t² + (μ_t - μ)²) / (2 σ²)``
        (``μ_t, σ_t`` the target's). It is ``KL(target ‖ self)`` plus the target's own
        entropy, so its gradient in ``self``'s parameters is the KL's; as ``σ_t → 0`` it
        becomes the negative log-likelihood of the target's action ``μ_t``.
        """
        u = (target.loc - self.loc) / self.scale
        ratio = target.scale / self.scale
        return 0.5 * (u**2 + ratio**2) + jnp.log(self.scale) + _LOG_SQRT_2PI

    def entropy(self) -> jnp.ndarray:
        """Entropy of ``z`` (nats), ``0.5 + log(σ √(2π))``: the exploration bonus."""
        return 0.5 + _LOG_SQRT_2PI + jnp.log(self.scale)

    @staticmethod
    def action(z: jnp.ndarray) -> jnp.ndarray:
        """The environment action ``sigmoid(z)`` in (0, 1)."""
        return jax.nn.sigmoid(z)

    def median_action(self) -> jnp.ndarray:
        """``sigmoid(loc)``: the deterministic action used in evaluation (the median of a)."""
        return jax.nn.sigmoid(self.loc)
