"""TWAP, VWAP and Almgren–Chriss schedules against float64 NumPy references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from serl_jax.baselines.schedules import (
    action_from_target,
    almgren_chriss_kappa,
    almgren_chriss_remaining,
    twap_remaining,
    vwap_remaining,
)

WINDOWS = [1, 2, 5, 30, 240, 390]


def _ac_reference(window_len, kappa):
    """Remaining after each step, sinh(κ(T − k − 1)) / sinh(κT) in float64 (κ > 0)."""
    k = np.arange(window_len, dtype=np.float64)
    return np.sinh(kappa * (window_len - k - 1)) / np.sinh(kappa * window_len)


# Jitted once and evaluated on a fixed step grid with traced window length and κ, so the
# whole module compiles each schedule only a handful of times (this also covers tracing).
_STEPS = jnp.arange(max(WINDOWS) + 5)
_twap = jax.jit(twap_remaining)
_ac = jax.jit(almgren_chriss_remaining)
_vwap = jax.jit(vwap_remaining)
_kappa = jax.jit(almgren_chriss_kappa)


def _twap_curve(window_len):
    out = _twap(_STEPS, jnp.int32(window_len))
    return np.asarray(out, dtype=np.float64)[:window_len]


def _ac_curve(window_len, kappa):
    out = _ac(_STEPS, jnp.int32(window_len), jnp.float32(kappa))
    return np.asarray(out, dtype=np.float64)[:window_len]


def _vwap_curve(profile):
    profile = jnp.asarray(profile, jnp.float32)
    out = _vwap(jnp.arange(profile.shape[-1]), profile)
    return np.asarray(out, dtype=np.float64)


def _check_shape_of_schedule(curve):
    assert curve[-1] == 0.0  # exactly empty after the last step
    assert np.all(np.diff(curve) <= 0)  # non-increasing
    assert 0.0 <= curve[0] <= 1.0


# --------------------------------------------------------------------------------------
# TWAP
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("window_len", WINDOWS)
def test_twap_hand_values(window_len):
    curve = _twap_curve(window_len)
    expected = (window_len - np.arange(window_len) - 1) / window_len
    np.testing.assert_allclose(curve, expected, atol=1e-6)
    _check_shape_of_schedule(curve)
    assert float(_twap(-1, jnp.int32(window_len))) == 1.0
    assert float(_twap(window_len + 3, jnp.int32(window_len))) == 0.0


# --------------------------------------------------------------------------------------
# VWAP
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("window_len", WINDOWS)
def test_vwap_uniform_profile_equals_twap(window_len):
    for profile in (np.ones(window_len), 7.5 * np.ones(window_len), np.zeros(window_len)):
        curve = _vwap_curve(profile)
        np.testing.assert_allclose(curve, _twap_curve(window_len), atol=1e-6)


def test_vwap_hand_values_and_normalization():
    profile = np.array([4.0, 0.0, 1.0, 3.0])  # sum 8
    expected = np.array([0.5, 0.5, 0.375, 0.0])
    np.testing.assert_allclose(_vwap_curve(profile), expected)
    np.testing.assert_allclose(_vwap_curve(100 * profile), expected)
    assert float(_vwap(-1, profile)) == 1.0
    assert float(_vwap(10, profile)) == 0.0


def test_vwap_random_profiles_against_numpy():
    rng = np.random.default_rng(0)
    profiles = rng.gamma(0.5, size=(8, 390)).astype(np.float32)
    profiles[3] = 0.0
    steps = np.arange(390)
    got = np.asarray(jax.jit(jax.vmap(lambda p: vwap_remaining(steps, p[None, :])))(profiles))
    for p, curve in zip(profiles, got, strict=True):
        p64 = p.astype(np.float64)
        if p64.sum() > 0:
            ref = 1.0 - np.cumsum(p64) / p64.sum()
        else:
            ref = (389 - steps) / 390
        np.testing.assert_allclose(curve, ref, atol=2e-6)
        _check_shape_of_schedule(curve)


def test_vwap_broadcasts_step_against_batched_profiles():
    profiles = jnp.stack([jnp.ones(10), jnp.arange(1.0, 11.0)])
    out = _vwap(jnp.array([4, 4]), profiles)
    assert out.shape == (2,)
    np.testing.assert_allclose(out, [0.5, 1 - 15 / 55], atol=1e-6)
    assert _vwap(jnp.array([[0], [4]]), profiles).shape == (2, 2)


# --------------------------------------------------------------------------------------
# Almgren–Chriss
# --------------------------------------------------------------------------------------


def test_kappa_against_numpy_arccosh():
    lam = np.array([0.0, 1e-6, 1e-2, 1.0, 10.0, 1e4])
    sigma, eta = 2e-3, 5e-4
    got = np.asarray(_kappa(jnp.asarray(lam, jnp.float32), sigma, eta), dtype=np.float64)
    ref = np.arccosh(1.0 + lam * sigma**2 / eta / 2.0)
    np.testing.assert_allclose(got, ref, rtol=1e-5)
    # Small κ̃: κ ≈ κ̃ (arccosh(1 + x²/2) = x + O(x³)); the NumPy form loses it to rounding.
    kt = float(np.sqrt(1e-6 * sigma**2 / eta))
    assert float(almgren_chriss_kappa(1e-6, sigma, eta)) == pytest.approx(kt, rel=1e-5)
    assert float(almgren_chriss_kappa(1.0, 1.0, 0.0)) == np.inf
    assert np.all(np.diff(got) > 0)  # κ increases with risk aversion


@pytest.mark.parametrize(
    ("window_len", "kappa"),
    [
        (w, k)
        for w in WINDOWS
        for k in (1e-3, 1e-2, 0.1, 0.5, 2.0, 10.0)
        if k * w < 700  # NumPy's sinh overflows beyond; see test_ac_large_kappa_t_no_overflow
    ],
)
def test_ac_against_float64_sinh(window_len, kappa):
    curve = _ac_curve(window_len, kappa)
    np.testing.assert_allclose(curve, _ac_reference(window_len, kappa), rtol=2e-5, atol=1e-7)
    _check_shape_of_schedule(curve)


@pytest.mark.parametrize("window_len", WINDOWS)
def test_ac_small_kappa_equals_twap(window_len):
    twap = _twap_curve(window_len)
    for kappa in (0.0, 1e-12, 1e-7, 0.5e-4 / window_len, 2e-4 / window_len):
        curve = _ac_curve(window_len, kappa)
        np.testing.assert_allclose(curve, twap, atol=1e-6)
        _check_shape_of_schedule(curve)


def test_ac_continuous_across_taylor_threshold():
    window_len = 240
    for kappa_t in (0.99e-4, 1.01e-4, 1e-3):
        kappa = kappa_t / window_len
        got = _ac_curve(window_len, kappa)
        np.testing.assert_allclose(got, _ac_reference(window_len, kappa), rtol=2e-6, atol=1e-7)


def test_ac_large_kappa_t_no_overflow():
    window_len = 390
    for kappa in (5.0, 50.0, 1e4, np.inf):
        curve = _ac_curve(window_len, kappa)
        assert np.all(np.isfinite(curve))
        _check_shape_of_schedule(curve)
        # sinh(κa)/sinh(κT) → exp(−κ(step + 1)) for large κ.
        np.testing.assert_allclose(
            curve[:3], np.exp(-kappa * np.arange(1, 4)), rtol=1e-5, atol=1e-30
        )


def test_ac_front_loads_more_as_risk_aversion_grows():
    window_len = 60
    sigma, eta = 1e-3, 1e-4
    lams = [0.0, 1e-3, 1e-2, 1e-1, 1.0, 10.0]
    kappas = np.asarray(_kappa(jnp.asarray(lams, jnp.float32), sigma, eta))
    curves = np.stack([_ac_curve(window_len, k) for k in kappas])
    assert np.all(np.diff(curves, axis=0) <= 1e-7)  # pointwise lower remaining as λ grows
    assert np.all(curves[-1, :-1] < curves[0, :-1])  # strictly more front-loaded than TWAP
    for curve in curves:
        _check_shape_of_schedule(curve)


def test_ac_gradients_finite():
    grad = jax.jit(jax.vmap(jax.grad(lambda k: almgren_chriss_remaining(5, 20, k))))
    grads = np.asarray(grad(jnp.array([0.0, 1e-6, 0.1, 3.0])))
    assert np.all(np.isfinite(grads))
    assert grads[2] < 0


# --------------------------------------------------------------------------------------
# Transformations, actions
# --------------------------------------------------------------------------------------


def test_jit_and_vmap_with_traced_window_len():
    steps = jnp.arange(30)
    windows = jnp.array([10, 20, 30])
    kappas = jnp.array([0.0, 0.05, 0.5])

    @jax.jit
    def all_curves(window_len, kappa):
        return (
            twap_remaining(steps, window_len),
            almgren_chriss_remaining(steps, window_len, kappa),
        )

    twap, ac = jax.vmap(all_curves)(windows, kappas)
    assert twap.shape == ac.shape == (3, 30)
    for i, (w, k) in enumerate(zip([10, 20, 30], [0.0, 0.05, 0.5], strict=True)):
        expected_twap = np.clip((w - np.arange(30) - 1) / w, 0, 1)
        np.testing.assert_allclose(twap[i], expected_twap, atol=1e-6)
        ref = expected_twap if k == 0 else np.concatenate([_ac_reference(w, k), np.zeros(30 - w)])
        np.testing.assert_allclose(ac[i], ref, rtol=2e-5, atol=1e-7)

    kappa = jax.jit(jax.vmap(almgren_chriss_kappa, in_axes=(0, None, None)))(
        jnp.array([0.0, 1.0]), 0.01, 0.001
    )
    assert kappa.shape == (2,)
    vw = jax.jit(jax.vmap(vwap_remaining, in_axes=(0, None)))(jnp.arange(5), jnp.ones(5))
    np.testing.assert_allclose(vw, [0.8, 0.6, 0.4, 0.2, 0.0], atol=1e-6)


def test_action_from_target_tracks_schedule():
    window_len = 12
    kappa = 0.3
    inventory = 1.0
    for step in range(window_len):
        target = float(_ac(step, jnp.int32(window_len), jnp.float32(kappa)))
        action = float(action_from_target(inventory, target))
        assert 0.0 <= action <= 1.0
        inventory *= 1.0 - action
        assert inventory == pytest.approx(target, abs=1e-6)
    assert action == 1.0 and inventory == 0.0
    assert float(action_from_target(0.0, 0.0)) == 0.0  # nothing left
    assert float(action_from_target(0.3, 0.5)) == 0.0  # ahead of schedule: wait


def test_ac_float64_precision_under_x64():
    """With 64-bit types enabled (scoped), the AC ratio is accurate to float64 rounding."""
    with jax.enable_x64(True):
        for window_len in (5, 390):
            steps = jnp.arange(window_len)
            for kappa in (1e-6, 0.9e-4 / window_len, 1e-3, 0.1, 1.0):
                got = np.asarray(almgren_chriss_remaining(steps, window_len, jnp.float64(kappa)))
                assert got.dtype == np.float64
                ref = _ac_reference(window_len, kappa)
                np.testing.assert_allclose(got, ref, rtol=1e-13, atol=1e-300)
