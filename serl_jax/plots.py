"""PNG plots of a run: training curve, inventory trajectories, PA distributions, and the
benchmark's forest plot of paired differences with their intervals.

Uses ``matplotlib.figure.Figure`` directly (no pyplot), so plotting neither needs a
display nor changes global matplotlib state.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure


def plot_training_curve(curves: Mapping[str, np.ndarray], selected_seed: int, path: Path) -> Path:
    """Mean order PA (bps) of the training rollouts per update, one line per seed.

    Args:
        curves: per-update metrics ``[num_seeds, num_updates]``; uses ``order_pa`` and
            ``episode_return``.
        selected_seed: the seed kept on validation (drawn thicker).
        path: output PNG.
    """
    fig = Figure(figsize=(9, 3.5), layout="constrained")
    axes = fig.subplots(1, 2)
    for name, ax in zip(("order_pa", "episode_return"), axes, strict=True):
        for seed, values in enumerate(curves[name]):
            ax.plot(values, lw=2.0 if seed == selected_seed else 0.8, label=f"seed {seed}")
        ax.set_xlabel("PPO update")
        ax.set_title(
            {"order_pa": "training order PA (bps)", "episode_return": "episode return"}[name]
        )
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    fig.savefig(path, dpi=110)
    return path


def plot_trajectories(
    remaining: Mapping[str, np.ndarray], labels: Sequence[str], path: Path
) -> Path:
    """Inventory left (fraction of Q) against the step, per policy, for a few days.

    Args:
        remaining: ``{policy: [D, T + 1]}`` remaining fractions for the same D days.
        labels: D titles (e.g. ``"AAPL 2019-02-15"``).
        path: output PNG.
    """
    n_days = len(labels)
    fig = Figure(figsize=(4 * n_days, 3.4), layout="constrained")
    axes = np.atleast_1d(fig.subplots(1, n_days, sharey=True))
    for day, ax in enumerate(axes):
        for policy, paths in remaining.items():
            ax.plot(paths[day], label=policy, lw=1.4)
        ax.set_title(labels[day], fontsize="medium")
        ax.set_xlabel("step (minute of the window)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("inventory left / Q")
    axes[0].legend(fontsize="small")
    fig.savefig(path, dpi=110)
    return path


def plot_pa_distribution(pa: Mapping[str, np.ndarray], path: Path) -> Path:
    """Box plot of per-order PA (bps) per policy, with each order as a dot.

    Args:
        pa: ``{policy: [n_orders]}`` price advantages in bps.
        path: output PNG.
    """
    fig = Figure(figsize=(1.6 * len(pa) + 2, 3.8), layout="constrained")
    ax = fig.subplots()
    names = list(pa)
    ax.boxplot([pa[n] for n in names], showfliers=False)
    ax.set_xticks(range(1, len(names) + 1), names)
    jitter = np.random.default_rng(0)
    for i, name in enumerate(names, start=1):
        ax.scatter(i + jitter.uniform(-0.15, 0.15, len(pa[name])), pa[name], s=8, alpha=0.6)
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.set_ylabel("PA vs benchmark (bps)")
    ax.grid(alpha=0.3, axis="y")
    fig.savefig(path, dpi=110)
    return path


def plot_loop_progress(
    iterations: Sequence[int],
    scores: Sequence[float],
    ema: Sequence[float],
    path: Path,
    label: str = "PA",
) -> Path:
    """The best validation score of each outer iteration (bps) and its moving average.

    Args:
        iterations: outer iterations j (0 = the default program).
        scores: the iteration's best score per iteration, bps.
        ema: the score's moving average per iteration, bps.
        path: output PNG.
        label: the score's name (``loop.score``: ``shortfall`` or ``PA``).
    """
    fig = Figure(figsize=(6, 3.5), layout="constrained")
    ax = fig.subplots()
    ax.plot(iterations, scores, "o-", label=f"{label}_j (best of iteration)")
    ax.plot(iterations, ema, "s--", label=f"{label}_ema")
    ax.set_xlabel("outer iteration j")
    ax.set_ylabel(f"validation {label} (bps)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.savefig(path, dpi=110)
    return path


#: An estimate and its interval ``(value, low, high)``; a bound that is ``None`` or NaN
#: (too few days for an interval) draws the estimate alone.
Estimate = tuple[float, float | None, float | None]


def _bound(x: float | None) -> float:
    return math.nan if x is None else float(x)


def plot_forest(panels: Mapping[str, Mapping[str, Mapping[str, Estimate]]], path: Path) -> Figure:
    """A forest plot: per panel (a dataset and its days) one row per policy, per measure
    (e.g. PA − TWAP, shortfall − TWAP) one column, each row its estimate with its
    interval, the values written on the right, and a line at 0 (no difference).

    Panels keep their own x scale: a 3-day set's intervals are tens of bps wide, a
    201-day set's under one.

    Args:
        panels: ``{panel title: {policy: {measure: (value, low, high)}}}``; the measures
            are the columns, in order of first appearance; a policy without a measure
            leaves its row empty in that column.
        path: output PNG.

    Returns:
        The figure (axes ``[panel][measure]``, row by row: ``fig.axes[i * n_measures + j]``).
    """
    measures = list(dict.fromkeys(m for rows in panels.values() for e in rows.values() for m in e))
    heights = [max(len(rows), 1) for rows in panels.values()]
    fig = Figure(
        figsize=(2.0 + 5.2 * len(measures), 0.8 * len(panels) + 0.3 * sum(heights)),
        layout="constrained",
    )
    axes = fig.subplots(
        len(panels), len(measures), squeeze=False, gridspec_kw={"height_ratios": heights}
    )
    for row_axes, (title, rows) in zip(axes, panels.items(), strict=True):
        policies = list(rows)
        y = len(policies) - 1 - np.arange(len(policies))  # the first policy on top
        for col, (ax, measure) in enumerate(zip(row_axes, measures, strict=True)):
            labels = []
            for yi, policy in zip(y, policies, strict=True):
                if measure not in rows[policy]:
                    labels.append("")
                    continue
                value, low, high = (_bound(v) for v in rows[policy][measure])
                has_interval = math.isfinite(low) and math.isfinite(high)
                xerr = [[value - low], [high - value]] if has_interval else None
                ax.errorbar(value, yi, xerr=xerr, fmt="o", ms=4, capsize=3, color="C0")
                interval = f" [{low:+.2f}, {high:+.2f}]" if has_interval else ""
                labels.append(f"{value:+.2f}{interval}")
            ax.axvline(0.0, color="grey", lw=0.8)
            ax.set_ylim(-0.6, len(policies) - 0.4)
            ax.set_yticks(y, policies)
            ax.tick_params(axis="y", labelleft=col == 0)
            right = ax.secondary_yaxis("right")
            right.set_yticks(y, labels)
            right.tick_params(labelsize="small", length=0)
            ax.set_title(f"{title}\n{measure}", fontsize="medium", loc="left")
            ax.grid(alpha=0.3, axis="x")
    fig.savefig(path, dpi=110)
    return fig
