"""The benchmark's table: stored cells -> paired statistics -> results.md/json and a
forest plot.

Per dataset and reported split (test days of the training symbols, test days of the
held-out symbols, and the validation days where rows were chosen), every row is scored on
the same orders as TWAP. A learned row pools its seeds' orders (``n = seeds x orders``,
each paired with TWAP's on the same order), so its PA, WR and paired means are averages
over the seeds' runs; every interval clusters the orders by day (all seeds' orders of a
day together, :mod:`serl_jax.metrics.inference`), and the seeds' own means are listed
beside it. Each learned row is also paired with the default ``PPO`` row (same seed, same
orders), which gives "SE-RL best − default PPO" and the static-vs-hybrid comparison;
every other SE-RL row (a language model as designer, a DEK ablation) with SE-RL offline,
which gives "model − designer library"; and with the hindsight oracle's edge (the share
of it captured).
"""

from __future__ import annotations

import datetime as dt
import math
import os
import platform
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from serl_jax.benchmark.cells import PROPAGATOR_TEST, CellStore, SplitOrders
from serl_jax.cli import Column, render_table
from serl_jax.data.episodes import HELDOUT
from serl_jax.metrics import (
    OrderOutcomes,
    compute_metrics,
    paired_difference,
    price_advantage,
    shortfall,
)
from serl_jax.plots import Estimate, plot_forest

__all__ = [
    "SPLIT_TITLES",
    "agents_results",
    "dataset_results",
    "forest_panels",
    "machine_description",
    "plot_results",
    "results_markdown",
    "results_text",
]

TWAP = "TWAP"
ORACLE = "oracle (not achievable)"
REFERENCE_ROW = "PPO"
#: The SE-RL row of the offline designer: every other SE-RL row (a language model as
#: designer, a DEK ablation) is also paired with it, the designer's reference.
DESIGNER_REFERENCE_KEY = "serl-offline"
SPLIT_TITLES = {
    "test": "test days, training symbols",
    HELDOUT: "test days, held-out symbols",
    PROPAGATOR_TEST: "test days, training symbols, in the propagator market (own impact)",
    "val": "validation days (where rows were chosen; not a result)",
}


def machine_description() -> str:
    """``<CPU model>, <n> cores usable; jax <version> on <device>`` (one line)."""
    import jax

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            models = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        cpu = models[0] if models else cpu
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    device = jax.devices()[0]
    return f"{cpu}, {cores} cores usable; jax {jax.__version__} on {device.device_kind}"


def _concat(parts: Sequence[OrderOutcomes]) -> OrderOutcomes:
    def cat(field: str):
        values = [getattr(p, field) for p in parts]
        return None if any(v is None for v in values) else np.concatenate(values)

    return OrderOutcomes(
        side=cat("side"),
        quantity=cat("quantity"),
        executed=cat("executed"),
        notional=cat("notional"),
        benchmark=cat("benchmark"),
        replayed_notional=cat("replayed_notional"),
    )


def _same_orders(a: SplitOrders, b: SplitOrders, where: str) -> None:
    if not (np.array_equal(a.symbols, b.symbols) and np.array_equal(a.days, b.days)):
        raise ValueError(f"{where}: the cell's orders are not the baselines' (stale cell?)")


def _paired(a: np.ndarray, b: np.ndarray, days: np.ndarray, boot: dict) -> dict[str, Any]:
    return paired_difference(a, b, days=days, **boot).to_dict()


def _row_entry(
    seeds: dict[int, SplitOrders], twap: SplitOrders, oracle: SplitOrders | None, boot: dict
) -> dict[str, Any]:
    """One row on one split, its seeds' orders pooled."""
    order = sorted(seeds)
    pooled = _concat([seeds[s].outcomes for s in order])
    reference = _concat([twap.outcomes] * len(order))
    days = np.concatenate([twap.days] * len(order))
    is_twap = len(order) == 1 and seeds[order[0]] is twap
    metrics = compute_metrics(pooled, twap=None if is_twap else reference, days=days, **boot)
    entry: dict[str, Any] = {"metrics": metrics.to_dict(), "seeds": order}
    if is_twap:
        return entry
    pa_twap = price_advantage(twap.outcomes)
    sf_twap = shortfall(twap.outcomes)
    entry["pa_vs_twap_per_seed"] = [
        float((price_advantage(seeds[s].outcomes) - pa_twap).mean()) for s in order
    ]
    gap = price_advantage(pooled) - price_advantage(reference)
    by_day: dict[str, list[float]] = {}
    for day, value in zip(days, gap, strict=True):
        by_day.setdefault(str(day), []).append(float(value))
    entry["pa_vs_twap_per_day"] = {d: float(np.mean(v)) for d, v in sorted(by_day.items())}
    if oracle is not None:
        edge_pa = float((price_advantage(oracle.outcomes) - pa_twap).mean())
        edge_sf = float((shortfall(oracle.outcomes) - sf_twap).mean())
        ours_sf = float((shortfall(pooled) - shortfall(reference)).mean())
        entry["oracle_share"] = {
            "pa": float(gap.mean()) / edge_pa if edge_pa else None,
            "shortfall": ours_sf / edge_sf if edge_sf else None,
        }
    return entry


def dataset_results(
    store: CellStore,
    dataset: str,
    learned: Sequence[tuple[str, str]],
    seeds: Sequence[int],
    boot: dict[str, Any],
) -> dict[str, Any]:
    """One dataset's results from its stored cells.

    Args:
        store: the run's cells.
        dataset: the dataset's name.
        learned: ``(row key, row name)`` of the learned rows, in table order; seeds whose
            cell is not stored yet are left out (the entry lists the seeds used).
        seeds: the run's seeds.
        boot: ``confidence``, ``n_bootstrap``, ``seed`` of the intervals.

    Returns:
        ``{split: {"orders", "days", "symbols", "rows": {name: entry}, "vs_PPO": {name:
        {"seeds", "pa", "shortfall"}}, "vs_designer": {"reference": name, "rows": {name:
        {"seeds", "pa", "shortfall"}}}}}`` (see :func:`_row_entry` for an entry's keys):
        ``vs_PPO`` pairs every learned row with the default PPO, ``vs_designer`` every
        other SE-RL row with SE-RL offline (:data:`DESIGNER_REFERENCE_KEY`; empty when
        the run has no such pair).
    """
    baselines, _ = store.read(dataset, "baselines", None)
    cells = {
        key: {s: store.read(dataset, key, s)[0] for s in seeds if store.done(dataset, key, s)}
        for key, _ in learned
    }
    names = dict(learned)
    designer = names.get(DESIGNER_REFERENCE_KEY)
    serl_rows = [names[k] for k in names if k.startswith("serl-") and k != DESIGNER_REFERENCE_KEY]
    out: dict[str, Any] = {}
    reported = [s for s in SPLIT_TITLES if s in baselines]  # test, held-out, then validation
    for split in reported:
        by_policy = baselines[split]
        twap = by_policy[TWAP]
        oracle = by_policy.get(ORACLE)
        rows: dict[str, Any] = {}
        for name, orders in by_policy.items():
            if name != ORACLE:
                rows[name] = _row_entry({0: orders}, twap, None, boot)
        pooled_orders: dict[str, dict[int, SplitOrders]] = {}
        for key, name in learned:
            per_seed = {s: cell[split][name] for s, cell in cells[key].items()}
            for s, orders in per_seed.items():
                _same_orders(orders, twap, f"{dataset}/{key}/seed{s}/{split}")
            if per_seed:
                pooled_orders[name] = per_seed
                rows[name] = _row_entry(per_seed, twap, oracle, boot)
        if oracle is not None:
            rows[ORACLE] = _row_entry({0: oracle}, twap, None, boot)
        out[split] = {
            "orders": int(twap.outcomes.n_orders),
            "days": len(set(twap.days.tolist())),
            "symbols": len(set(twap.symbols.tolist())),
            "rows": rows,
            "vs_PPO": _paired_with(pooled_orders, REFERENCE_ROW, list(pooled_orders), twap, boot),
            "vs_designer": {
                "reference": designer,
                "rows": _paired_with(pooled_orders, designer, serl_rows, twap, boot),
            },
        }
    return out


def _paired_with(
    pooled_orders: dict[str, dict[int, SplitOrders]],
    reference: str | None,
    names: Sequence[str],
    twap: SplitOrders,
    boot: dict[str, Any],
) -> dict[str, Any]:
    """Each of ``names`` minus ``reference`` on the same orders (the seeds both have,
    pooled; intervals clustered by day), PA and shortfall; rows without a common seed
    are left out."""
    theirs_by_seed = pooled_orders.get(reference, {}) if reference else {}
    paired = {}
    for name in names:
        per_seed = pooled_orders.get(name, {})
        common = sorted(set(per_seed) & set(theirs_by_seed))
        if name == reference or not common:
            continue
        ours = _concat([per_seed[s].outcomes for s in common])
        theirs = _concat([theirs_by_seed[s].outcomes for s in common])
        days = np.concatenate([twap.days] * len(common))
        paired[name] = {
            "seeds": common,
            "pa": _paired(price_advantage(ours), price_advantage(theirs), days, boot),
            "shortfall": _paired(shortfall(ours), shortfall(theirs), days, boot),
        }
    return paired


def _team(agents: Sequence[OrderOutcomes]) -> OrderOutcomes | None:
    """The agents' orders of each day as one (None when they are not a team, e.g. a buyer
    and a seller)."""
    try:
        return OrderOutcomes.team(agents)
    except ValueError:
        return None


def agents_results(
    store: CellStore,
    dataset: str,
    rows: Sequence[tuple[str, str]],
    seeds: Sequence[int],
    boot: dict[str, Any],
) -> dict[str, Any]:
    """The multi-agent rows (dynamic market): per row and split, each agent and the team
    paired with every agent running TWAP in the same market, seeds pooled, intervals
    clustered by day.

    Returns:
        ``{row name: {split: {"agent i" | "team": {"PA", "vs_TWAP", "shortfall_vs_TWAP",
        "n_orders", "interval"}}}}``.
    """
    out: dict[str, Any] = {}
    for key, name in rows:
        cells = {s: store.read(dataset, key, s)[0] for s in seeds if store.done(dataset, key, s)}
        if not cells:
            continue
        out[name] = {}
        for split in [s for s in SPLIT_TITLES if s in next(iter(cells.values()))]:
            by_seed = {s: cell[split] for s, cell in cells.items()}
            n_agents = sum(k.startswith("agent ") for k in next(iter(by_seed.values())))
            who: dict[str, tuple[list, list]] = {}
            for _, orders in sorted(by_seed.items()):
                agents = [orders[f"agent {i}"].outcomes for i in range(n_agents)]
                twaps = [orders[f"TWAP agent {i}"].outcomes for i in range(n_agents)]
                for i in range(n_agents):
                    who.setdefault(f"agent {i}", ([], []))[0].append(agents[i])
                    who[f"agent {i}"][1].append(twaps[i])
                team, team_twap = _team(agents), _team(twaps)
                if n_agents > 1 and team is not None and team_twap is not None:
                    who.setdefault("team", ([], []))[0].append(team)
                    who["team"][1].append(team_twap)
            days = np.concatenate([by_seed[s]["agent 0"].days for s in sorted(by_seed)])
            entry = {}
            for label, (ours, twap) in who.items():
                m = compute_metrics(_concat(ours), twap=_concat(twap), days=days, **boot)
                d = m.to_dict()
                entry[label] = {
                    k: d[k] for k in ("PA", "vs_TWAP", "shortfall_vs_TWAP", "n_orders", "interval")
                }
            out[name][split] = {"seeds": sorted(by_seed), "who": entry}
    return out


# --------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------


def _num(x: float | None, fmt: str = "{:+.2f}") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return fmt.format(x)


def _interval(d: dict[str, Any] | None, fmt: str = "{:+.2f}") -> str:
    if d is None:
        return "-"
    return f"{_num(d['value'], fmt)} [{_num(d['ci_low'], fmt)}, {_num(d['ci_high'], fmt)}]"


def _seeds(entry: dict[str, Any]) -> str:
    """A learned row's PA−TWAP per seed, ``a / b / c`` (``-`` for one seed or a baseline)."""
    seeds = entry.get("pa_vs_twap_per_seed")
    return " / ".join(_num(v) for v in seeds) if seeds and len(seeds) > 1 else "-"


def _table_md(split: dict[str, Any]) -> list[str]:
    lines = [
        "| policy | PA (bps) | PA-std | WR | GLR | AFI | n | PA−TWAP (bps) | MDE | won "
        "| shortfall−TWAP (bps) | PA−TWAP per seed |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, entry in split["rows"].items():
        m = entry["metrics"]
        vs = m.get("vs_TWAP")
        lines.append(
            f"| {name} | {_interval(m['PA'])} | {_num(m['PA_std']['value'], '{:.2f}')} "
            f"| {_num(m['WR']['value'], '{:.3f}')} | {_num(m['GLR']['value'], '{:.2f}')} "
            f"| {_num(m['AFI']['value'], '{:.4f}')} | {m['n_orders']} | {_interval(vs)} "
            f"| {_num(vs['mde'], '{:.2f}') if vs else '-'} "
            f"| {_num(vs['win_rate'], '{:.2f}') if vs else '-'} "
            f"| {_interval(m.get('shortfall_vs_TWAP'))} | {_seeds(entry)} |"
        )
    return lines


def _cell(d: dict[str, Any] | None, fmt: str = "{:+.2f}") -> str | tuple[str, str, str]:
    """``{"value", "ci_low", "ci_high"}`` as a cell of :func:`serl_jax.cli.render_table`
    (``-`` when not computed)."""
    if d is None:
        return "-"
    return _num(d["value"], fmt), _num(d["ci_low"], fmt), _num(d["ci_high"], fmt)


# The printed table's columns: results.md's, with every interval the metrics have.
_TEXT_COLUMNS = (
    Column("policy", text=True),
    Column("PA (bps)", compact_interval=True),
    Column("PA-std (bps)"),
    Column("WR", compact_interval=True),
    Column("GLR"),
    Column("AFI"),
    Column("n"),
    Column("PA-TWAP (bps)", compact_interval=True),
    Column("MDE"),
    Column("won"),
    Column("shortfall-TWAP (bps)", compact_interval=True),
    Column("PA-TWAP per seed", compact=False),
)


def _table_text(split: dict[str, Any], wide: bool) -> list[str]:
    """A split's table for the terminal (:func:`serl_jax.cli.render_table`): compact,
    or every column with ``wide``."""
    rows = []
    for name, entry in split["rows"].items():
        m = entry["metrics"]
        vs = m.get("vs_TWAP")
        rows.append(
            [
                name,
                _cell(m["PA"]),
                _cell(m["PA_std"], "{:.2f}"),
                _cell(m["WR"], "{:.3f}"),
                _cell(m["GLR"], "{:.2f}"),
                _cell(m["AFI"], "{:.4f}"),
                str(m["n_orders"]),
                _cell(vs),
                _num(vs["mde"], "{:.2f}") if vs else "-",
                _num(vs["win_rate"], "{:.2f}") if vs else "-",
                _cell(m.get("shortfall_vs_TWAP")),
                _seeds(entry),
            ]
        )
    return render_table(_TEXT_COLUMNS, rows, wide=wide).splitlines()


def _footer_md(split: dict[str, Any]) -> list[str]:
    from serl_jax.metrics.inference import describe_interval

    twap = split["rows"][TWAP]["metrics"]["interval"]
    text = describe_interval(twap["method"], twap["days"], split["orders"], twap["confidence"])
    lines = [f"Intervals: {text}. Learned rows pool their seeds' orders (n = seeds × orders)."]
    shares = [
        (name, e["oracle_share"]) for name, e in split["rows"].items() if e.get("oracle_share")
    ]
    if shares:
        parts = [
            f"{name} {_num(100 * s['pa'], '{:.0f}')}% (PA), "
            f"{_num(100 * s['shortfall'], '{:.0f}')}% (shortfall)"
            for name, s in shares
            if s["pa"] is not None and s["shortfall"] is not None
        ]
        lines.append("Share of the hindsight oracle's edge over TWAP captured: " + "; ".join(parts))
    for name, entry in split["rows"].items():
        per_day = entry.get("pa_vs_twap_per_day")
        if per_day and "oracle_share" in entry and len(per_day) <= 10:
            days = ", ".join(f"{d} {_num(v)}" for d, v in per_day.items())
            positive = sum(v > 0 for v in per_day.values())
            lines.append(
                f"{name}, PA−TWAP by day (positive on {positive} of {len(per_day)}): {days}"
            )
    designer = split.get("vs_designer", {})
    for title, short, paired in (
        ("the default PPO", "PPO", split["vs_PPO"]),
        (f"{designer.get('reference')}, the designer library", "offline", designer.get("rows")),
    ):
        if not paired:
            continue
        lines += [
            "",
            f"Paired with {title} (same seeds, same orders):",
            "",
            f"| policy − {short} | PA (bps) | MDE | shortfall (bps) | MDE |",
            "|---|---|---|---|---|",
        ]
        for name, v in paired.items():
            lines.append(
                f"| {name} | {_interval(v['pa'])} | {_num(v['pa']['mde'], '{:.2f}')} "
                f"| {_interval(v['shortfall'])} | {_num(v['shortfall']['mde'], '{:.2f}')} |"
            )
    return lines


def _agents_md(agents: dict[str, Any]) -> list[str]:
    lines = [
        "### Several agents (dynamic market, each paired with every agent running TWAP)",
        "",
        "| row | days | who | n | PA (bps) | PA−TWAP (bps) | MDE | shortfall−TWAP (bps) "
        "| interval |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, by_split in agents.items():
        for split, entry in by_split.items():
            for who, m in entry["who"].items():
                vs = m["vs_TWAP"]
                interval = f"{m['interval']['method']}, G = {m['interval']['days']}"
                lines.append(
                    f"| {name} | {split} | {who} | {m['n_orders']} | {_interval(m['PA'])} "
                    f"| {_interval(vs)} | {_num(vs['mde'], '{:.2f}')} "
                    f"| {_interval(m['shortfall_vs_TWAP'])} | {interval} |"
                )
    return [*lines, ""]


def results_markdown(results: dict[str, Any]) -> str:
    """The run's ``results.md``: per dataset and split, the table, the interval method,
    the oracle share, the paired comparisons with the default PPO, and the run's facts.

    The tables are markdown with every column (a results page, read where markdown
    renders and wide tables scroll); :func:`results_text` is the page for the terminal."""
    return _page(results, _table_md)


def results_text(results: dict[str, Any], wide: bool = False) -> str:
    """The results page as ``python -m serl_jax.benchmark`` prints it: :func:`results_markdown`
    with each split's main table as text (:func:`serl_jax.cli.render_table`), the compact
    table that fits 120 columns (intervals of PA, WR and the paired differences under their
    values; the per-seed column and the columns the same on every row named under it), or
    with ``wide`` every column with its interval, one line per row."""
    return _page(results, lambda split: _table_text(split, wide))


def _page(results: dict[str, Any], table: Callable[[dict[str, Any]], list[str]]) -> str:
    """The results page with ``table(split)`` giving each split's main table's lines."""
    meta = results["meta"]
    lines = [
        f"# Benchmark: {meta['suite']}",
        "",
        f"{meta['date']}, {meta['machine']}; seeds {meta['seeds']}; "
        f"run time {meta['run_seconds'] / 60:.1f} min; peak RSS {meta['peak_rss_gb']:.2f} GB.",
        f"Command: `{meta['command']}`",
        "",
        "How to read it: PA is the price advantage over the interval VWAP (bps, higher is "
        "better). PA−TWAP pairs each policy with TWAP on the same orders; its interval "
        "clusters orders by day, and MDE is the smallest true difference the data detects "
        "with 80% power (two-sided 5%): an interval containing 0 with an MDE of 2 bps says "
        "nothing about effects under 2 bps. shortfall−TWAP is the spread-and-impact part "
        "of PA, the part a policy controls on replayed prices. The oracle knows the day's "
        "volumes in hindsight: an upper bound on shortfall, not on PA.",
    ]
    for name, ds in results["datasets"].items():
        lines += ["", f"## {name}", "", f"{ds['path']}: {ds['why']}.", ""]
        for split, entry in ds["splits"].items():
            lines += [
                f"### {SPLIT_TITLES.get(split, split)}: {entry['orders']} orders, "
                f"{entry['symbols']} symbols, {entry['days']} days",
                "",
                *table(entry),
                "",
                *_footer_md(entry),
                "",
            ]
        if ds.get("agents"):
            lines += _agents_md(ds["agents"])
        timing = ds.get("seconds_per_cell", {})
        if timing:
            lines.append(
                "Time per cell (mean over seeds): "
                + ", ".join(f"{row} {s:.0f} s" for row, s in timing.items())
            )
    return "\n".join(lines) + "\n"


def today() -> str:
    """Today's date and time, UTC."""
    return f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M UTC}"


#: The forest plot's measures: each row's paired difference to TWAP, its key in the metrics.
FOREST_MEASURES = {
    "PA − TWAP (bps)": "vs_TWAP",
    "shortfall − TWAP (bps)": "shortfall_vs_TWAP",
}
#: The forest plot's panels: the reported splits (validation days are not a result).
FOREST_SPLITS = {
    "test": "test days, training symbols",
    HELDOUT: "test days, held-out symbols",
    PROPAGATOR_TEST: "test days, propagator market",
}


def forest_panels(results: dict[str, Any]) -> dict[str, dict[str, dict[str, Estimate]]]:
    """The forest plot's input from a run's results: one panel per dataset and
    :data:`FOREST_SPLITS` split, one row per policy paired with TWAP (TWAP itself left
    out), each of :data:`FOREST_MEASURES` with its interval clustered by day."""
    panels: dict[str, dict[str, dict[str, Estimate]]] = {}
    for name, ds in results["datasets"].items():
        for split, entry in ds["splits"].items():
            if split not in FOREST_SPLITS:
                continue
            rows = {}
            for policy, row in entry["rows"].items():
                m = row["metrics"]
                measures = {
                    label: (m[key]["value"], m[key]["ci_low"], m[key]["ci_high"])
                    for label, key in FOREST_MEASURES.items()
                    if m.get(key) is not None
                }
                if measures:
                    rows[policy] = measures
            panels[f"{name}, {FOREST_SPLITS[split]}"] = rows
    return panels


def plot_results(results: dict[str, Any], path: Path) -> Path:
    """The run's forest plot (``results.png``): each row's PA − TWAP and shortfall − TWAP
    with its interval, one panel per dataset and reported split (test days of the training
    symbols, of the held-out symbols, in the propagator market)."""
    plot_forest(forest_panels(results), path)
    return path
