"""The EMA stopping rule against hand-computed values."""

from __future__ import annotations

import pytest

from serl_jax.loop import EmaConvergence


def test_ema_follows_the_recursion_and_stops_on_small_changes():
    conv = EmaConvergence(decay=0.9, epsilon=0.1, min_iterations=1, max_iterations=50)
    assert conv.update(0, -20.0) == (-20.0, False)  # PA_ema_0 = PA_0
    ema, stop = conv.update(1, -10.0)  # 0.9 * -20 + 0.1 * -10 = -19; change 1.0
    assert ema == pytest.approx(-19.0) and not stop
    ema, stop = conv.update(2, -18.5)  # 0.9 * -19 + 0.1 * -18.5 = -18.95; change 0.05
    assert ema == pytest.approx(-18.95) and stop


def test_min_and_max_iterations():
    conv = EmaConvergence(decay=0.5, epsilon=1.0, min_iterations=3, max_iterations=4)
    conv.update(0, 0.0)
    assert conv.update(1, 0.0) == (0.0, False)  # converged, but before min_iterations
    assert conv.update(2, 0.0)[1] is False
    assert conv.update(3, 0.0)[1] is True
    conv = EmaConvergence(decay=0.5, epsilon=1e-9, min_iterations=1, max_iterations=2)
    conv.update(0, 0.0)
    assert conv.update(1, 10.0) == (5.0, False)
    assert conv.update(2, 100.0) == (52.5, True)  # J_max reached
