"""The benchmark's forest plot: one row per policy per dataset, each measure a column,
drawn from a hand-made input and from a run's results (checked on the figure's axes,
not its pixels)."""

from __future__ import annotations

import math

from serl_jax.benchmark.tables import forest_panels, plot_results
from serl_jax.plots import plot_forest


def _labels(ticks) -> list[str]:
    return [t.get_text() for t in ticks]


def test_forest_plot_draws_one_row_per_policy_per_dataset(tmp_path):
    panels = {
        "index, test days": {
            "VWAP": {"PA": (0.74, -0.12, 1.56), "shortfall": (0.71, 0.67, 0.74)},
            "PPO": {"PA": (-0.14, -0.71, 0.45), "shortfall": (0.37, 0.32, 0.41)},
            "oracle": {"PA": (1.87, 0.82, 2.91)},
        },
        "us, test days": {
            "VWAP": {"PA": (-6.57, None, None), "shortfall": (3.49, math.nan, math.nan)},
        },
    }
    path = tmp_path / "forest.png"
    fig = plot_forest(panels, path)
    assert path.stat().st_size > 10_000
    axes = fig.axes
    assert len(axes) == 4  # [dataset][measure]
    index_pa, index_sf, us_pa, us_sf = axes
    assert index_pa.get_title(loc="left") == "index, test days\nPA"
    assert us_sf.get_title(loc="left") == "us, test days\nshortfall"
    # policies top to bottom, named in the first column only
    assert _labels(index_pa.get_yticklabels()) == ["VWAP", "PPO", "oracle"]
    assert list(index_pa.get_yticks()) == [2, 1, 0]
    assert _labels(us_pa.get_yticklabels()) == ["VWAP"]
    assert not index_sf.yaxis.get_tick_params()["labelleft"]
    # each row's value and interval on the right; none where the row lacks the measure
    (index_pa_values,) = index_pa.child_axes
    assert _labels(index_pa_values.get_yticklabels()) == [
        "+0.74 [-0.12, +1.56]",
        "-0.14 [-0.71, +0.45]",
        "+1.87 [+0.82, +2.91]",
    ]
    (index_sf_values,) = index_sf.child_axes
    assert _labels(index_sf_values.get_yticklabels())[2] == ""
    assert len(index_pa.containers) == 3 and len(index_sf.containers) == 2  # error bars
    # no interval (too few days): the estimate alone
    (us_pa_values,) = us_pa.child_axes
    assert _labels(us_pa_values.get_yticklabels()) == ["-6.57"]
    (us_pa_bar,) = us_pa.containers
    assert not us_pa_bar.has_xerr and all(c.has_xerr for c in index_pa.containers)


def _metric(value, low, high):
    return {"value": value, "ci_low": low, "ci_high": high, "mde": None}


def test_benchmark_figure_is_the_forest_plot_of_its_results(tmp_path):
    twap = {"metrics": {"vs_TWAP": None}}
    rows = {
        "TWAP": twap,
        "PPO": {
            "metrics": {
                "vs_TWAP": _metric(-0.14, -0.71, 0.45),
                "shortfall_vs_TWAP": _metric(0.37, 0.32, 0.41),
            }
        },
    }
    results = {
        "datasets": {
            "cn_index_1min": {
                "splits": {"test": {"rows": rows}, "val": {"rows": rows}},
            },
            "cn_xsec_1min": {
                "splits": {"heldout": {"rows": rows}, "test@propagator": {"rows": rows}},
            },
        }
    }
    panels = forest_panels(results)
    # validation days are not a result; TWAP is the reference, not a row
    assert list(panels) == [
        "cn_index_1min, test days, training symbols",
        "cn_xsec_1min, test days, held-out symbols",
        "cn_xsec_1min, test days, propagator market",
    ]
    assert panels["cn_index_1min, test days, training symbols"] == {
        "PPO": {
            "PA − TWAP (bps)": (-0.14, -0.71, 0.45),
            "shortfall − TWAP (bps)": (0.37, 0.32, 0.41),
        }
    }
    path = tmp_path / "results.png"
    assert plot_results(results, path) == path and path.stat().st_size > 10_000
