"""The outer loop's stopping rule: an exponential moving average of the iteration's best
score (the seeds' test on PA; ``loop.score`` names the metric, shortfall or PA).

``S_ema_j = decay * S_ema_{j-1} + (1 - decay) * S_j``; the loop stops when
``|S_ema_j - S_ema_{j-1}| < epsilon`` (after ``min_iterations``) or after ``J_max``
iterations. The reference candidate of iteration 0 initializes the average:
``S_ema_0 = S_0``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["EmaConvergence"]


@dataclass
class EmaConvergence:
    """The EMA convergence test.

    Attributes:
        decay: weight of the previous average (seeds: 0.9), in [0, 1).
        epsilon: threshold on the change of the average, bps (seeds: 0.1).
        min_iterations: iterations j >= 1 before a stop is allowed.
        max_iterations: J_max (seeds: 50).
        ema: the current average (None before the first value).
    """

    decay: float = 0.9
    epsilon: float = 0.1
    min_iterations: int = 1
    max_iterations: int = 50
    ema: float | None = None

    def update(self, iteration: int, score: float) -> tuple[float, bool]:
        """Folds in ``S_j``; returns ``(S_ema_j, stop)``.

        Args:
            iteration: j (0 initializes the average and never stops).
            score: S_j, the iteration's best score, bps.
        """
        if self.ema is None:
            self.ema = float(score)
            return self.ema, iteration >= self.max_iterations
        previous = self.ema
        self.ema = self.decay * previous + (1.0 - self.decay) * float(score)
        converged = iteration >= self.min_iterations and abs(self.ema - previous) < self.epsilon
        return self.ema, converged or iteration >= self.max_iterations
