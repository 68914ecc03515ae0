"""LLM4Imagine: the slot's bounds by hand, each library program on hand-made days, the
JAX features against the NumPy ones, validation verdicts, and mixed sampling."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from llm.designs import library
from llm.validate import load_validated, validate
from serl_jax.components.imagination import (
    ImaginationBounds,
    check_imagined_days,
    day_statistics,
    imagine_params,
    reflection_statistics,
)
from serl_jax.config import ConfigError, load_config
from serl_jax.envs.execution import EnvParams, ExecutionEnv
from serl_jax.envs.imagined_market import FeatureStats, imagine_days, market_features
from serl_jax.envs.market_data import MarketData
from serl_jax.experiment import make_imagination, train_policy
from serl_jax.rl.mixed_sampling import (
    Imagination,
    imagined_pool_size,
    imagined_share,
    imagined_vs_real,
    lane_episodes,
    mix_imagined,
)
from serl_jax.rl.networks import make_network
from serl_jax.rl.ppo import PPOConfig, make_trainer

PROGRAMS = {d.name: d.code for d in library("imagination")}
IDENTITY = "def imagine(key, price, volume, params):\n    return price, volume\n"


def program(name: str, **constants: float):
    """A library program with some module constants replaced, defined (stage 1 only: the
    library is trusted text; the validator test below runs every program through both
    stages)."""
    code = PROGRAMS[name]
    for const, value in constants.items():
        line = next(x for x in code.splitlines() if x.startswith(f"{const} = "))
        code = code.replace(line, f"{const} = {value!r}")
    return load_validated(code, "imagination")


def hand_made_day(n: int = 200, seed: int = 0):
    """A random-walk day (10 bps a minute around 20.0) with U-shaped volume."""
    rng = np.random.default_rng(seed)
    log_price = np.log(20.0) + np.cumsum(rng.normal(0.0, 1e-3, n))
    t = np.arange(n) / n
    volume = 1000.0 * (1.0 + 4.0 * (t - 0.5) ** 2) * rng.uniform(0.5, 1.5, n)
    return jnp.asarray(np.exp(log_price), jnp.float32), jnp.asarray(volume, jnp.float32)


def run_program(fn, price, volume, key=0):
    params = imagine_params(price, volume, jnp.float32(1000.0), 0.01)
    out_p, out_v = jax.jit(fn)(jax.random.PRNGKey(key), price, volume, params)
    return np.asarray(out_p, np.float64), np.asarray(out_v, np.float64), params


def log_returns(price):
    return np.diff(np.log(np.asarray(price, np.float64)))


# --- the bounds, by hand ---------------------------------------------------------------


def test_day_statistics_by_hand():
    price = jnp.array([10.0, 11.0, 11.0, 10.0])
    volume = jnp.array([1.0, 0.0, 3.0, 0.0])
    s = day_statistics(price, volume)
    r = np.log([1.1, 1.0, 10 / 11])
    assert float(s["daily_return"]) == pytest.approx(0.0, abs=1e-6)
    assert float(s["volatility"]) == pytest.approx(r.std(), rel=1e-5)
    assert float(s["total_volume"]) == 4.0
    np.testing.assert_allclose(s["profile"], [0.25, 0.0, 0.75, 0.0])
    # a day without volume has the uniform profile
    np.testing.assert_allclose(day_statistics(price, jnp.zeros(4))["profile"], 0.25)


def test_reflection_statistics_by_hand():
    # Day 0 alternates 100, 101: log returns d, -d, d, -d exactly (a - b = -(b - a)), so
    # the lag-1 autocorrelation is 3 (-d^2) / (4 d^2) = -0.75; day 1 never moves (0).
    price = jnp.array([[100.0, 101.0, 100.0, 101.0, 100.0], [50.0] * 5], jnp.float32)
    volume = jnp.array([[1.0, 2.0, 3.0, 4.0, 0.0], [6.0] * 5], jnp.float32)
    s = reflection_statistics(price, volume)
    d = np.log(101.0 / 100.0)
    assert s["volatility_bps"] == pytest.approx(1e4 * d / 2, rel=1e-4)
    assert s["abs_daily_return_bps"] == 0.0
    assert s["day_volume"] == 20.0
    assert s["return_autocorrelation"] == pytest.approx(-0.75 / 2, abs=1e-5)


def test_check_imagined_days_names_each_statistic():
    price, volume = hand_made_day()
    src_p, src_v = np.asarray(price)[None], np.asarray(volume)[None]
    bounds = ImaginationBounds()
    assert check_imagined_days(src_p, src_v, src_p, src_v, bounds) is None

    def reason(p, v):
        return check_imagined_days(src_p, src_v, np.float32(p), np.float32(v), bounds)

    assert "total_volume" in reason(src_p, src_v * 5) and "5x" in reason(src_p, src_v * 5)
    assert "total_volume" in reason(src_p, src_v * 0)
    path = np.log(src_p[0, 0]) + 6.0 * (np.log(src_p) - np.log(src_p[0, 0]))
    assert "volatility" in reason(np.exp(path), src_v)
    assert "daily_return" in reason(src_p * np.exp(np.linspace(0, 0.5, 200)), src_v)
    late = np.where(np.arange(200) >= 150, src_v * 10, src_v * 0.05)
    late *= src_v.sum() / late.sum()
    assert "profile" in reason(src_p, late)
    assert "> 0" in reason(-src_p, src_v)
    assert ">= 0" in reason(src_p, -src_v)
    assert "not finite" in reason(src_p * np.nan, src_v)
    assert "shape" in check_imagined_days(src_p, src_v, src_p[:, :10], src_v, bounds)
    assert "float32" in check_imagined_days(src_p, src_v, src_p.astype(np.float64), src_v, bounds)


def test_bounds_refuse_nonsense():
    with pytest.raises(ValueError, match="volume_multiple"):
        ImaginationBounds(volume_multiple=0.5)
    with pytest.raises(ConfigError, match="imagine.ratio"):
        load_config(None, ["imagine.ratio=1.5"])
    with pytest.raises(ConfigError, match="'imagination' needs imagine.ratio > 0"):
        load_config(None, ['loop.modules=["reward", "imagination"]', "imagine.ratio=0"])


# --- the library on hand-made days -----------------------------------------------------


def test_volatility_scale_of_two_doubles_the_minute_volatility():
    price, volume = hand_made_day()
    out_p, out_v, _ = run_program(program("volatility_scale", VOL_SCALE=2.0), price, volume)
    np.testing.assert_allclose(log_returns(out_p), 2.0 * log_returns(price), atol=2e-6)
    assert log_returns(out_p).std() == pytest.approx(2.0 * log_returns(price).std(), rel=1e-3)
    assert out_p[0] == pytest.approx(float(price[0]), rel=1e-6)
    np.testing.assert_array_equal(out_v, volume)


def test_trend_regime_adds_a_ramp_after_its_start():
    price, volume = hand_made_day()
    out_p, out_v, params = run_program(program("trend_regime", TREND_STDS=1.0), price, volume)
    added = np.log(out_p) - np.log(np.asarray(price, np.float64))
    start = int(np.argmax(np.abs(added) > 1e-7)) - 1  # the ramp is 0 up to its start
    assert np.abs(added[: start + 1]).max() < 1e-6
    steps = np.diff(added[start:])
    np.testing.assert_allclose(steps, steps.mean(), atol=1e-5)  # a straight line
    daily_std = float(params.realized_volatility) * np.sqrt(199)
    assert 0 < abs(added[-1]) <= daily_std * 1.0001
    np.testing.assert_array_equal(out_v, volume)


def test_volume_shock_is_a_burst_times_a_log_linear_tilt():
    price, volume = hand_made_day()
    fn = program("volume_shock", SHOCK_MINUTES=20, SHOCK_MULTIPLE=3.0, PROFILE_TILT=0.5)
    out_p, out_v, _ = run_program(fn, price, volume)
    np.testing.assert_array_equal(out_p, price)
    log_ratio = np.log(out_v / np.asarray(volume, np.float64))
    in_burst = log_ratio > np.median(log_ratio) + np.log(3.0) / 2
    assert in_burst.sum() == 20 and np.all(np.diff(np.flatnonzero(in_burst)) == 1)
    tilt = log_ratio - np.where(in_burst, np.log(3.0), 0.0)
    slope = np.diff(tilt) * 200  # tilt * (t/n - 0.5): a slope of `tilt` per day
    np.testing.assert_allclose(slope, slope[0], atol=1e-3)
    assert abs(slope[0]) <= 0.5 + 1e-4


def test_mean_reversion_adds_an_ar1_deviation():
    price, volume = hand_made_day(n=2000)
    out_p, out_v, params = run_program(
        program("mean_reversion", PHI=0.8, NOISE_SCALE=0.5), price, volume
    )
    d = np.log(out_p) - np.log(np.asarray(price, np.float64))
    assert abs(d[0]) < 1e-6
    innovations = d[1:] - 0.8 * d[:-1]  # e_t - (1 - PHI) e_0: a constant shift of e_t
    expected = 0.5 * float(params.realized_volatility)
    assert innovations.std() == pytest.approx(expected, rel=0.1)
    np.testing.assert_array_equal(out_v, volume)


def test_flash_dip_drops_and_recovers_linearly():
    price, volume = hand_made_day()
    fn = program("flash_dip", DIP_STDS=0.5, RECOVERY_MINUTES=15, VOLUME_SPIKE=2.0)
    out_p, out_v, params = run_program(fn, price, volume)
    dip = np.log(np.asarray(price, np.float64)) - np.log(out_p)
    during = dip > 1e-7
    start = int(np.argmax(during))
    assert during.sum() == 15 and during[start : start + 15].all()
    depth = 0.5 * float(params.realized_volatility) * np.sqrt(199)
    np.testing.assert_allclose(dip[start : start + 15], depth * (1 - np.arange(15) / 15), rtol=1e-3)
    np.testing.assert_allclose(out_v / np.asarray(volume, np.float64), np.where(during, 2.0, 1.0))


def test_programs_are_deterministic_given_a_key():
    price, volume = hand_made_day()
    for name in PROGRAMS:
        fn = program(name)
        a, b = run_program(fn, price, volume, key=1), run_program(fn, price, volume, key=1)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
    c = run_program(program("trend_regime"), price, volume, key=2)
    assert not np.array_equal(c[0], run_program(program("trend_regime"), price, volume, key=1)[0])


# --- validation ------------------------------------------------------------------------

BAD_PROGRAMS = {
    "zero_volume": ("return price, volume * 0.0", "runtime", "total_volume"),
    "negative_price": ("return -price, volume", "runtime", "price must be > 0"),
    "nan": ("return price * jnp.nan, volume", "runtime", "not finite"),
    "distorted": ("return price, volume * 100.0", "runtime", "total_volume"),
    "wrong_shape": ("return price[:10], volume[:10]", "runtime", "shape"),
}


def test_library_programs_pass_both_stages_and_bad_ones_are_named():
    for name, code in PROGRAMS.items():
        verdict = validate(code, "imagination")
        assert verdict.ok, (name, verdict.reason)
    for name, (body, stage, needle) in BAD_PROGRAMS.items():
        code = (
            f"import jax.numpy as jnp\n\n\ndef imagine(key, price, volume, params):\n    {body}\n"  # noqa: E501
        )
        verdict = validate(code, "imagination")
        assert not verdict.ok and verdict.stage == stage, (name, verdict)
        assert needle in verdict.reason, (name, verdict.reason)
    verdict = validate("def imagine(price, volume):\n    return price, volume\n", "imagination")
    assert verdict.stage == "static" and "expected 4" in verdict.reason


# --- features and imagined markets -----------------------------------------------------


def test_jax_features_equal_the_numpy_features_on_real_days(cn_market):
    days = cn_market.train
    stats = FeatureStats.from_train_stats(cn_market.stats)
    f_std = np.asarray(cn_market.stats.feature_std)
    f_mean = np.asarray(cn_market.stats.feature_mean)
    names = list(days.feature_names)
    hl = days.features[..., names.index("high_low_range")] * f_std[-1] + f_mean[-1]
    scale = np.where(days.expected_day_volume > 0, days.expected_day_volume, 1.0)
    got = jax.vmap(market_features, in_axes=(0, 0, 0, 0, None))(
        jnp.asarray(days.price), jnp.asarray(days.volume), jnp.asarray(hl, jnp.float32),
        jnp.asarray(scale), stats,
    )  # fmt: skip
    # in raw units (a normalized near-constant feature magnifies float32 rounding)
    raw_got = np.asarray(got, np.float64) * f_std + f_mean
    raw_want = np.asarray(days.features, np.float64) * f_std + f_mean
    for i, name in enumerate(names):
        np.testing.assert_allclose(raw_got[..., i], raw_want[..., i], atol=2e-6, err_msg=name)


def _us_setup(us_market):
    data = MarketData.from_episodes(us_market.train)
    return data, FeatureStats.from_train_stats(us_market.stats)


def test_identity_program_imagines_the_real_days(us_market):
    data, stats = _us_setup(us_market)
    sources = jnp.arange(data.num_episodes)[::-1]
    imagined, replaced = imagine_days(
        load_validated(IDENTITY, "imagination"), jax.random.PRNGKey(0), data, sources, stats,
        ImaginationBounds(),
    )  # fmt: skip
    assert not np.asarray(replaced).any()
    src = jax.tree.map(lambda x: x[sources], data)
    for field in dataclasses.fields(MarketData):
        got, want = getattr(imagined, field.name), getattr(src, field.name)
        # features: log returns of float32 prices (~170 USD) against NumPy's of float64
        # ones differ by ~1e-7, i.e. up to 1e-3 once divided by the returns' std
        atol = 2e-3 if field.name == "features" else 2e-5
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=atol, err_msg=field.name)


def test_reflection_of_the_identity_and_of_a_volatility_scale(us_market):
    data, stats = _us_setup(us_market)

    def reflect(fn):
        imagination = Imagination(imagine_fn=fn, ratio=0.5, stats=stats)
        return imagined_vs_real(imagination, data, jax.random.PRNGKey(3))

    same = reflect(load_validated(IDENTITY, "imagination"))
    assert same["out_of_bounds"] == 0.0
    for key, value in same["real"].items():
        assert same["imagined"][key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    doubled = reflect(program("volatility_scale", VOL_SCALE=2.0))
    real, imagined = doubled["real"], doubled["imagined"]
    assert imagined["volatility_bps"] == pytest.approx(2 * real["volatility_bps"], rel=1e-3)
    assert imagined["day_volume"] == pytest.approx(real["day_volume"], rel=1e-6)
    assert imagined["return_autocorrelation"] == pytest.approx(
        real["return_autocorrelation"], abs=1e-3
    )


def test_days_out_of_bounds_are_replayed_from_their_source(us_market):
    data, stats = _us_setup(us_market)
    shock = load_validated(
        "def imagine(key, price, volume, params):\n    return price, volume * 100.0\n",
        "imagination",
    )
    sources = jnp.arange(data.num_episodes)
    imagined, replaced = imagine_days(
        shock, jax.random.PRNGKey(0), data, sources, stats, ImaginationBounds()
    )
    assert np.asarray(replaced).all()
    np.testing.assert_array_equal(imagined.volume, data.volume)


# --- mixed sampling --------------------------------------------------------------------


def test_pool_size_and_share():
    assert imagined_pool_size(10, 0.5) == 10 and imagined_share(10, 0.5) == 0.5
    assert imagined_pool_size(10, 0.25) == 3 and imagined_share(10, 0.25) == 3 / 13
    assert imagined_pool_size(7, 1.0) == 7 and imagined_share(7, 1.0) == 1.0
    with pytest.raises(ValueError, match="ratio"):
        Imagination(imagine_fn=None, ratio=0.0, stats=None)


def _mixed_trainer(us_market, program_fn, ratio=0.5):
    data, stats = _us_setup(us_market)
    params = EnvParams(data=data, random_window=True, min_window_len=30, lookback=4)
    config = PPOConfig(num_envs=32, num_steps=16, total_timesteps=32 * 16 * 3, group_size=1)
    imagination = Imagination(imagine_fn=program_fn, ratio=ratio, stats=stats)

    def trainer_for(market):
        return make_trainer(
            config, ExecutionEnv(), params.replace(data=market), make_network((8,), "tanh")
        )

    return mix_imagined(trainer_for, data, imagination, config.num_updates), data.num_episodes


def test_pool_is_fresh_every_update_except_the_days_in_use(us_market):
    trainer, n_real = _mixed_trainer(us_market, program("mean_reversion"))
    runner = jax.jit(trainer.init)(jax.random.PRNGKey(0))
    update = jax.jit(trainer.update)
    seen_imagined = []
    for _ in range(6):
        episodes = np.asarray(lane_episodes(runner.inner))
        seen_imagined.append(episodes >= n_real)
        in_use = np.zeros(runner.pool.num_episodes, bool)
        in_use[episodes[episodes >= n_real] - n_real] = True
        before = np.asarray(runner.pool.price)
        runner, metrics = update(runner)
        assert float(metrics["imagined_lane_share"]) == pytest.approx(np.mean(episodes >= n_real))
        after = np.asarray(runner.pool.price)
        np.testing.assert_array_equal(after[in_use], before[in_use])
        assert (np.abs(after[~in_use] - before[~in_use]).max(axis=1) > 0).all()
        assert float(metrics["imagined_out_of_bounds"]) == 0.0
    # about half the running episodes are on imagined days (M = N)
    share = np.mean(seen_imagined)
    assert 0.3 < share < 0.7, share


def test_mixed_trainer_is_deterministic_given_a_key(us_market):
    trainer, _ = _mixed_trainer(us_market, program("trend_regime"))
    first = jax.jit(trainer.train)(jax.random.PRNGKey(3))
    second = jax.jit(trainer.train)(jax.random.PRNGKey(3))
    jax.tree.map(np.testing.assert_array_equal, first, second)


def test_ratio_zero_trains_bit_identically(us_market):
    cfg = load_config("configs/tiny.yaml", ["market.mode=static", "run.num_seeds=1"])
    zero = load_config(
        "configs/tiny.yaml",
        ["market.mode=static", "run.num_seeds=1", "imagine.program=flash_dip", "imagine.ratio=0"],
    )
    fn = program("flash_dip")
    assert make_imagination(zero, fn, us_market.stats) is None
    half = load_config("configs/tiny.yaml", ["market.mode=static", "run.num_seeds=1"])
    assert make_imagination(half, fn, us_market.stats).ratio == 0.5
    env = ExecutionEnv()
    train = cfg.env_params(MarketData.from_episodes(us_market.train))
    val = cfg.env_params(MarketData.from_episodes(us_market.val))
    plain = train_policy(cfg, env, train, val, progress=False)
    again = train_policy(
        zero, env, train, val, progress=False,
        imagination=make_imagination(zero, fn, us_market.stats),
    )  # fmt: skip
    jax.tree.map(np.testing.assert_array_equal, plain.policy_params, again.policy_params)
    mixed = train_policy(
        half, env, train, val, progress=False,
        imagination=make_imagination(half, fn, us_market.stats),
    )  # fmt: skip
    assert "imagined_out_of_bounds" in mixed.curves
    differs = jax.tree.map(
        lambda a, b: not np.array_equal(a, b), plain.policy_params, mixed.policy_params
    )
    assert any(jax.tree.leaves(differs))
