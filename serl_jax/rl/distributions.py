"""The policy's action distributions: the logit-normal (sigmoid-squashed Gaussian) on
(0, 1), the default, and a categorical over multiples of the prior's child order (a
discrete action set, as in the OPD of Qlib's execution examples).

Execution actions live on a log scale: a TWAP child order is 1/(T - t) of the remaining
inventory (0.4% at the start of a 240-minute day) while the last step needs 1. A Gaussian
on the logit ``z`` reaches all of these with O(1) network outputs, and PPO works on ``z``
itself: the environment receives ``a = sigmoid(z)``, and because the squashing is a fixed
bijection the probability ratios of ``z`` and ``a`` are equal, so ``log_prob`` is the
exact Gaussian density with no clipping at the bounds. (A Beta policy with concentrations
below 1 puts much of its mass within float32 rounding of 0, where clipped samples bias
the gradient; with concentrations above 1 its mean cannot get near 1/240 from O(1)
outputs.)

The discrete set (:class:`PriorMultiples`) has the agent pick one of K fixed multiples
``m_k`` of the action prior's child order, ``a = min(m_k · sigmoid(prior_logit), 1)``; the
network's K outputs are the categorical's logits. Both classes offer ``sample``,
``log_prob``, ``entropy``, ``cross_entropy``, ``action`` and ``deterministic_action``, so
PPO, distillation and evaluation use either through :func:`action_distribution`.
"""

from __future__ import annotations

from collections.abc import Sequence

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

    def deterministic_action(self) -> jnp.ndarray:
        """``sigmoid(loc)``: the deterministic action used in evaluation (the median of a)."""
        return jax.nn.sigmoid(self.loc)


@struct.dataclass
class PriorMultiples:
    """A categorical choice among K multiples of the action prior's child order.

    The sample is the chosen index k (stored as float32 so that rollouts keep one dtype);
    the environment trades ``a = clip(m_k · sigmoid(prior_logit), 0, 1)`` of the remaining
    inventory. ``m = 1`` is the prior's (anchored) child order, the VWAP or TWAP schedule's
    pace, 0 skips the minute and 2 trades twice that pace: Qlib's discrete OPD action set
    ("values" times the TWAP amount; Fang et al. 2021, AAAI) around this project's anchored
    prior.

    Attributes:
        logits: ``[..., K]`` float32 unnormalized log-probabilities.
        prior_action: ``[...]`` float32 prior action ``sigmoid(prior_logit)`` in (0, 1).
        multiples: the K multiples ``m_k`` (static, non-negative).
    """

    logits: jnp.ndarray
    prior_action: jnp.ndarray
    multiples: tuple[float, ...] = struct.field(pytree_node=False)

    @classmethod
    def from_logits(
        cls, outputs: jnp.ndarray, multiples: Sequence[float], prior_logit: jnp.ndarray = 0.0
    ) -> PriorMultiples:
        """From the network slot's ``[..., K]`` outputs (K = ``len(multiples)``)."""
        prior_action = jax.nn.sigmoid(jnp.broadcast_to(prior_logit, outputs.shape[:-1]))
        return cls(logits=outputs, prior_action=prior_action, multiples=tuple(multiples))

    def _log_probs(self) -> jnp.ndarray:
        return jax.nn.log_softmax(self.logits, axis=-1)

    def sample(self, key: jax.Array) -> jnp.ndarray:
        """Draws indices k ``[...]`` (float32; pass them through :meth:`action`)."""
        return jax.random.categorical(key, self.logits, axis=-1).astype(jnp.float32)

    def log_prob(self, k: jnp.ndarray) -> jnp.ndarray:
        """``log p(k)`` of indices ``k`` ``[...]`` (float or int)."""
        index = jnp.asarray(k).astype(jnp.int32)[..., None]
        return jnp.take_along_axis(self._log_probs(), index, axis=-1)[..., 0]

    def cross_entropy(self, target: PriorMultiples) -> jnp.ndarray:
        """``H(target, self) = -Σ_k p_target(k) log p_self(k)`` (nats), elementwise."""
        return -(jax.nn.softmax(target.logits, axis=-1) * self._log_probs()).sum(-1)

    def entropy(self) -> jnp.ndarray:
        """``-Σ_k p(k) log p(k)`` (nats): the exploration bonus."""
        log_p = self._log_probs()
        return -(jnp.exp(log_p) * log_p).sum(-1)

    def action(self, k: jnp.ndarray) -> jnp.ndarray:
        """The environment action ``clip(m_k · prior_action, 0, 1)`` ``[...]``."""
        multiple = jnp.asarray(self.multiples, jnp.float32)[jnp.asarray(k).astype(jnp.int32)]
        return jnp.clip(multiple * self.prior_action, 0.0, 1.0)

    def deterministic_action(self) -> jnp.ndarray:
        """The action of the most probable multiple (the mode): the evaluation action."""
        return self.action(jnp.argmax(self.logits, axis=-1))


ActionDistribution = LogitNormal | PriorMultiples


def action_distribution(
    outputs: jnp.ndarray,
    prior_logit: jnp.ndarray = 0.0,
    multiples: Sequence[float] | None = None,
) -> ActionDistribution:
    """The policy the network slot's outputs define.

    Args:
        outputs: ``[..., 2]`` ``(loc, log_scale)`` of a logit-normal, or ``[..., K]``
            categorical logits when ``multiples`` (K values) is given.
        prior_logit: ``[...]`` logit of the reference action (0 for none).
        multiples: the discrete action set's multiples of the prior action
            (:class:`PriorMultiples`), or None for the logit-normal.
    """
    if multiples:
        return PriorMultiples.from_logits(outputs, multiples, prior_logit)
    return LogitNormal.from_logits(outputs, prior_logit)
