"""The calibration step rules, the fit error and the CLI (a tiny run on the A-share sample)."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pandas as pd
import pytest

from serl_jax import calibrate
from serl_jax.calibrate import (
    fit_agent_impact,
    fit_error,
    main,
    next_agent_impact,
    update_params,
)
from serl_jax.config import load_config
from serl_jax.impact import ImpactReport
from serl_jax.market.params import MarketParams, load_market_params
from serl_jax.market.statistics import STAT_COLUMNS, MarketStatistics

REAL = {
    "spread_ticks": 3.0,
    "minute_volatility_bps": 12.0,
    "volume_per_minute": 1000.0,
    "depth_to_minute_volume": 0.1,
    "flow_impact_per_sigma": 0.8,
}


def _stats(**columns) -> MarketStatistics:
    """Two symbols with the same figures (``columns`` override :data:`REAL`)."""
    row = {c: math.nan for c in STAT_COLUMNS} | REAL | columns
    index = pd.Index(["A", "B"], name="symbol")
    table = pd.DataFrame([row, row], index=index)
    return MarketStatistics(table, pd.DataFrame([[1.0], [1.0]], index=index))


def test_update_params_moves_each_knob_as_documented():
    start = MarketParams(
        mm_half_spread_ticks=1.0,
        mm_size=0.05,
        noise_limit_prob=0.3,
        noise_size=0.04,
        informed_size=0.1,
        flow_impact_bps=10.0,
    )
    sim = _stats(
        spread_ticks=2.0,  # 1 tick too narrow: half spread + 0.5
        depth_to_minute_volume=0.05,  # half the depth: x2
        volume_per_minute=2000.0,  # twice the volume: noise size x0.5
        minute_volatility_bps=8.0,  # vol gain 1.5: informed size x2.25
        # lambda = 0.8 * 12 = 9.6 real vs 0.3 * 8 = 2.4: gain 4, damped to x2
        flow_impact_per_sigma=0.3,
    )
    new = update_params(start, _stats(), sim)
    assert new.mm_half_spread_ticks == pytest.approx(1.5)
    assert new.mm_size == pytest.approx(0.1)
    assert new.noise_limit_prob == pytest.approx(0.6)
    assert new.noise_size == pytest.approx(0.02)
    assert new.informed_size == pytest.approx(0.225)
    assert new.flow_impact_bps == pytest.approx(20.0)
    # factors are clipped to [1/4, 4] and knobs to their bounds
    far = update_params(start, _stats(), _stats(depth_to_minute_volume=0.001))
    assert far.mm_size == pytest.approx(0.2)
    assert far.noise_limit_prob == 1.0


def test_fit_error_is_the_mean_absolute_log_ratio():
    assert fit_error(_stats(), _stats()) == 0.0
    # volume off by 2x: one of the five targets
    assert fit_error(_stats(), _stats(volume_per_minute=2000.0)) == pytest.approx(math.log(2.0) / 5)
    # lambda = flow_impact_per_sigma * volatility: halving the volatility halves lambda too
    assert fit_error(_stats(), _stats(minute_volatility_bps=6.0)) == pytest.approx(
        2 * math.log(2.0) / 5
    )
    # a missing simulated figure is skipped, not counted as a perfect fit
    assert fit_error(_stats(), _stats(flow_impact_per_sigma=math.nan)) == 0.0


def test_cli_writes_the_best_fit_it_simulated(tmp_path, capsys):
    out = tmp_path / "cn.yaml"
    argv = ["--data", "sample:cn_1min", "--iterations", "1", "--days", "1", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    errors = [
        float(line.rsplit(" ", 1)[1])
        for line in printed.splitlines()
        if "fit error" in line and line.startswith("iteration")
    ]
    assert len(errors) == 2
    assert f"(fit error {min(errors):.3f})" in printed
    assert "symbol(s), pooled (--verbose: per symbol)" in printed  # one line per statistic
    market = load_market_params(out)
    assert market.tick_size == 0.01
    text = out.read_text()
    assert text.startswith("# Calibrated with: python -m serl_jax.calibrate --data")
    assert "flow_impact_per_sigma" in text and "minute_volatility_bps" in text
    assert np.isfinite(market.flow_impact_bps)


def test_cli_rejects_bad_arguments(capsys):
    assert main(["--data", "sample:cn_1min", "--iterations", "-1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: --iterations and --days must be >= 0"
    assert main(["--data", "no/such/bars.csv"]) == 2
    assert capsys.readouterr().err.startswith("error: ")
    assert main(["--data", "sample:cn_1min", "--mm-refresh-rungs", "6"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: market.mm_refresh_rungs must be in [1, max(1, mm_levels - 1)] = [1, 5], got 6"
    )


def test_cli_calibrates_with_the_refreshed_rungs_held_fixed(tmp_path, capsys):
    """``--mm-refresh-rungs 2`` is simulated and written; the fitted knobs start from the
    defaults, so with no update step the book is the defaults with that one key."""
    out = tmp_path / "cn.yaml"
    argv = ["--data", "sample:cn_1min", "--iterations", "0", "--days", "1"]
    assert main([*argv, "--mm-refresh-rungs", "2", "--out", str(out)]) == 0
    capsys.readouterr()
    assert load_market_params(out) == MarketParams().replace(mm_refresh_rungs=2)


REPORT = ImpactReport(
    market="lob", dataset="stub", days=2, duration_minutes=60, starts=(30,), delta=0.5,
    y=0.7, delta_se=None, post_fraction_1x=0.7, post_fraction_2x=0.5,
    twap_cost_over_sqrt_law=1.0, reslice_change=0.0, reslice_change_se=None,
    executed_fraction=1.0, reslice_executed_fraction=1.0, round_trip_bps=-1.0,
    participation=(0.1,), gap_windows=0, peak_sigma=(0.2,), peak_sigma_se=(0.01,),
    relaxation=(0.0,),
)  # fmt: skip
"""An impact report whose ``y`` the fit's tests replace (the rest is not read)."""

TINY_IMPACT_FIT = [
    "--data", "sample:cn_1min", "--iterations", "0", "--days", "1", "--impact-days", "2",
]  # fmt: skip
"""The CLI on the cn sample at the smallest sizes: no calibration step, 2 impact days."""


def test_the_agent_impact_fit_rejects_bad_targets(capsys):
    assert main(["--data", "sample:cn_1min", "--agent-impact-y", "0"]) == 2
    assert capsys.readouterr().err.strip() == "error: --agent-impact-y must be > 0, got 0.0"
    assert main(["--data", "sample:cn_1min", "--agent-impact-steps", "0"]) == 2
    assert capsys.readouterr().err.strip() == "error: --agent-impact-steps must be >= 1, got 0"
    with pytest.raises(ValueError, match="need target_y > 0, iterations >= 1 and tolerance"):
        fit_agent_impact(None, MarketParams(), days=2, iterations=0)
    with pytest.raises(ValueError, match="got 0.7, 6 and -0.1"):
        fit_agent_impact(None, MarketParams(), days=2, tolerance=-0.1)


@pytest.mark.parametrize(
    "points, expected",
    [
        ([(10.0, 0.35)], 20.0),  # one point: proportional, 10 * 0.7 / 0.35
        # the US sliced fit's two steps of 2026-11-29: the secant, 34.483 + 0.318 / slope
        ([(5.0, 0.101), (34.483, 0.382)], 34.483 + 0.318 * 29.483 / 0.281),
        ([(10.0, 0.5), (30.0, 0.9)], 20.0),  # the secant, inside the bracket (10, 30)
        # a falling secant: proportional from the last point, 20 * 0.7 / 0.95, inside (10, 20)
        ([(10.0, 0.5), (30.0, 0.9), (20.0, 0.95)], 20.0 * 0.7 / 0.95),
        # a secant (to -60) that leaves the bracket (10, 30): its geometric midpoint
        ([(10.0, 0.5), (40.0, 0.8), (30.0, 0.79)], 300.0**0.5),
        # no bracket and a secant to 0: proportional from the last point
        ([(10.0, 0.8), (20.0, 0.9)], 20.0 * 0.7 / 0.9),
    ],
)
def test_the_agent_impact_search_steps_by_hand(points, expected):
    assert next_agent_impact(points, 0.7) == pytest.approx(expected, rel=1e-9)


def test_the_agent_impact_search_needs_a_point():
    with pytest.raises(ValueError, match="need at least one measured point"):
        next_agent_impact([], 0.7)


def test_the_agent_impact_fit_stops_within_its_tolerance(cn_market, monkeypatch):
    """On a book whose Y is affine in the coefficient (0.1 + 0.01 c), the proportional
    step then one secant step land on the target (c = 60): three measurements, and the
    last is the report returned."""
    tried = []

    def affine_book(env, multi_env, book, **kwargs):
        bps = float(book.market.agent_flow_impact_bps)
        tried.append(bps)
        return dataclasses.replace(REPORT, y=0.1 + 0.01 * bps)

    monkeypatch.setattr(calibrate, "measure_impact", affine_book)
    lines = []
    market, report = fit_agent_impact(cn_market, MarketParams(), days=2, log=lines.append)
    assert tried == pytest.approx([5.0, 5.0 * 0.7 / 0.15, 60.0])
    assert market.agent_flow_impact_bps == pytest.approx(60.0)
    assert report.y == pytest.approx(0.7)
    assert lines[2].endswith("Y 0.700: within 5%")


def test_the_agent_impact_fit_says_when_it_does_not_converge(cn_market, monkeypatch):
    """A noisy book (Y 0.5, 0.8, 0.4 at the coefficients tried): every step taken, and the
    coefficient whose Y was nearest 0.7 kept with its report."""
    tried, answers = [], iter([0.5, 0.8, 0.4])

    def noisy_book(env, multi_env, book, **kwargs):
        tried.append(float(book.market.agent_flow_impact_bps))
        return dataclasses.replace(REPORT, y=next(answers))

    monkeypatch.setattr(calibrate, "measure_impact", noisy_book)
    lines = []
    market, report = fit_agent_impact(
        cn_market, MarketParams(), days=2, iterations=2, log=lines.append
    )
    # 5 * 0.7 / 0.5 = 7, then the secant through (5, 0.5) and (7, 0.8): 7 - 0.1 / 0.15
    assert tried == pytest.approx([5.0, 7.0, 7.0 - 0.1 / 0.15])
    assert market.agent_flow_impact_bps == pytest.approx(7.0)
    assert report.y == 0.8
    assert lines[2] == (
        "agent impact: not within 5% of Y 0.7 after 2 steps; kept the nearest, "
        "agent_flow_impact_bps 7.000 (Y 0.800)"
    )


def test_the_agent_impact_fit_names_the_coefficient_without_a_measurable_impact(
    cn_market, monkeypatch
):
    """A book whose metaorders move no price at the starting coefficient (as the US
    book's sliced orders at 5 bps) has nothing to scale: one line naming the start."""

    def no_impact(*args, **kwargs):
        raise ValueError("impact fit: 1 size(s) with a positive mean peak, need 2")

    monkeypatch.setattr(calibrate, "measure_impact", no_impact)
    with pytest.raises(ValueError) as err:
        fit_agent_impact(cn_market, MarketParams(), days=2, child_order="sliced")
    message = str(err.value)
    assert message.startswith("fit_agent_impact: impact fit: 1 size(s) with a positive mean")
    assert "at agent_flow_impact_bps 5.0; start from a larger one" in message
    assert "\n" not in message


@pytest.mark.slow
def test_cli_fits_the_agents_own_impact_to_the_square_root_law(tmp_path, capsys):
    """The first step multiplies the coefficient by 0.7 / Y, later ones follow
    :func:`next_agent_impact` through the points printed so far (read back from the log,
    3 decimals); the search ends within 5% of 0.7 or says it did not, and the written book
    has the agents' memory and the last coefficient measured. Sliced child orders
    (``--child-order sliced``) are measured as such: another Y at the same start."""
    first_y = {}
    for child_order in ("market", "sliced"):
        out = tmp_path / f"{child_order}.yaml"
        argv = [*TINY_IMPACT_FIT, "--fit-agent-impact", "--agent-impact-steps", "2"]
        argv += ["--child-order", child_order]
        assert main([*argv, "--out", str(out)]) == 0
        lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("agent impact")]
        steps = [
            [float(x) for x in re.findall(r"[-+]?\d+\.\d+", line)] for line in lines if "->" in line
        ]
        assert steps[0][0] == 5.0  # the default coefficient, 5 bps
        bps, _delta, y, scaled = steps[0]  # each printed to 3 decimals
        assert scaled == pytest.approx(bps * 0.7 / y, rel=5e-4 / bps + 5e-4 / y + 5e-4 / scaled)
        points = [(n[0], n[2]) for n in steps]
        for i, step in enumerate(steps[1:], start=1):
            assert step[0] == pytest.approx(steps[i - 1][3], abs=1e-3)
            assert step[3] == pytest.approx(next_agent_impact(points[: i + 1], 0.7), rel=1e-2)
        final = lines[-1]
        market = load_market_params(out)
        assert market.agent_flow_memory == 1
        if final.endswith(": within 5%"):  # the last coefficient measured
            assert market.agent_flow_impact_bps == pytest.approx(steps[-1][3], abs=1e-3)
        else:  # one of the three measured, no printed one nearer 0.7
            assert "not within 5% of Y 0.7 after 2 steps; kept the nearest" in final
            kept, kept_y = (float(x) for x in re.findall(r"\d+\.\d+", final)[-2:])
            measured = [step[0] for step in steps] + [steps[-1][3]]
            assert min(abs(kept - c) for c in measured) < 1e-3
            assert all(abs(kept_y / 0.7 - 1) <= abs(step[2] / 0.7 - 1) + 1e-3 for step in steps)
            assert market.agent_flow_impact_bps == pytest.approx(kept, abs=1e-3)
        first_y[child_order] = steps[0][2]
    assert first_y["sliced"] != first_y["market"]


@pytest.mark.slow
def test_cli_fits_the_propagator_to_the_books_impact_response(tmp_path, capsys):
    out = tmp_path / "propagator.yaml"
    assert main([*TINY_IMPACT_FIT, "--fit-propagator", "--propagator-out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "fitted propagator (relaxation RMSE" in printed
    assert [line.split()[0] for line in printed.splitlines() if line[:4] in ("lob ", "prop")] == [
        "lob",
        "propagator",
    ]
    cfg = load_config(out)  # a config preset: the fitted impact section
    assert cfg.market.simulator == "propagator"
    assert 0.0 < cfg.impact.delta <= 1.0 and cfg.impact.permanent == 0.0
    assert out.read_text().startswith("# Fitted with: python -m serl_jax.calibrate")
