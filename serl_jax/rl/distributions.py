"""The Beta action distribution on [0, 1] used by the PPO policy.

Bounded actions (the fraction of remaining inventory) suit a Beta better than a clipped
Gaussian: no probability mass piles up at the bounds (Chou, Maturana & Scherer 2017,
"Improving Stochastic Policy Gradients in Continuous Control with Deep RL using the Beta
Distribution").
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from jax.scipy.special import betaln, digamma

# Samples are kept this far from 0 and 1 so log-densities stay finite in float32.
_EPS = 1e-6


@struct.dataclass
class Beta:
    """Beta(alpha, beta) with elementwise parameters of any shape (float32, > 0)."""

    alpha: jnp.ndarray
    beta: jnp.ndarray

    @classmethod
    def from_logits(cls, logits: jnp.ndarray) -> Beta:
        """From unconstrained ``[..., 2]`` outputs: concentration ``1 + softplus(x)``.

        Keeping both concentrations above 1 makes the density unimodal (no spikes at the
        bounds), the usual choice for Beta policies.
        """
        concentration = 1.0 + jax.nn.softplus(logits)
        return cls(alpha=concentration[..., 0], beta=concentration[..., 1])

    def sample(self, key: jax.Array) -> jnp.ndarray:
        """Draws one sample per element, clipped to ``[eps, 1 - eps]``."""
        x = jax.random.beta(key, self.alpha, self.beta)
        return jnp.clip(x, _EPS, 1.0 - _EPS)

    def log_prob(self, x: jnp.ndarray) -> jnp.ndarray:
        """Log-density ``(a-1)log x + (b-1)log(1-x) - ln B(a, b)``."""
        x = jnp.clip(x, _EPS, 1.0 - _EPS)
        return (
            (self.alpha - 1.0) * jnp.log(x)
            + (self.beta - 1.0) * jnp.log1p(-x)
            - betaln(self.alpha, self.beta)
        )

    def entropy(self) -> jnp.ndarray:
        """Differential entropy (nats): ``ln B(a,b) - (a-1)ψ(a) - (b-1)ψ(b) + (a+b-2)ψ(a+b)``."""
        a, b = self.alpha, self.beta
        return (
            betaln(a, b)
            - (a - 1.0) * digamma(a)
            - (b - 1.0) * digamma(b)
            + (a + b - 2.0) * digamma(a + b)
        )

    def mean(self) -> jnp.ndarray:
        """``a / (a + b)``: the deterministic action used in evaluation."""
        return self.alpha / (self.alpha + self.beta)
