"""Search curves: the best validation score against candidates designed, per designer.

Runs the SE-RL search (``python -m serl_jax.train --budget-candidates N``,
:mod:`serl_jax.loop.search`) once per designer and seed, with the same preset, market,
budget and seeds, then reads each run store:

- the curve: after each designed candidate (in run order), the best full-stage
  validation score so far (the reference and the library seeds count from the start);
- the final pick's paired difference to the default PPO on the test days (the run's
  report, ``best_vs_default``), and its novelty (copies and functional duplicates pooled
  over seeds: count / designed valid, the duplicates' Wilson 95% interval; distinct valid
  programs) and cascade counts;
- the novelty by the kind of change the designer's prompts named (``search.hints``,
  :data:`llm.prompts.hints.CHANGES`): answers, valid, copies, duplicates, and for a
  constant's change the valid answers that set the value named;
- per designer other than the first, the paired difference of the final best
  validation score to the first designer's, seed by seed (the same seed gives both the
  same reference, library seeds and training keys), with a t interval over seeds and its
  minimum detectable effect (80% power, two-sided).

The first designer is the reference: ``offline``, the design library's random mutation
(:mod:`llm.backends.offline`). Two tasks:

- ``index`` (default): the run's ``loop.score`` (shortfall) on replayed bars, e.g. the
  1,000-day index: ``--data ../shared/data/cn_index_1min data.short_days=drop``;
- ``ac``: the propagator market's Almgren–Chriss configuration (``bench_optimum.py``'s,
  kappa*T = 3 by default) with ``loop.env=dynamic loop.score=mean_variance``, where the
  optimum is known (score: the negated mean-variance objective, bps). The optimal
  schedule's and TWAP's validation scores, in the loop's own validation market, are
  printed as rows and drawn as lines, and each designer's best gets ``captured``, the
  share of TWAP's gap to the optimum that it closes.

Run::

    python benchmarks/bench_search.py --designers offline,hf:qwen2.5-coder-1.5b \\
        --seeds 0,1,2 --budget-candidates 100 --out runs/search-curves \\
        [--task index|ac] [--data PATH] [--config FILE] [--plot FILE.png] [--json]
        [section.key=value ...]

Prints a markdown table (and with ``--json`` one JSON line per designer) and draws the
curves (mean over seeds, each seed thin) to ``--plot``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import platform
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402

from llm.prompts.hints import made_change, read_change  # noqa: E402
from llm.prompts.search import named_change  # noqa: E402
from serl_jax import train  # noqa: E402
from serl_jax.cli import parse_command_line  # noqa: E402
from serl_jax.loop import RunStore  # noqa: E402
from serl_jax.loop.novelty import novelty_labels, probe_outputs  # noqa: E402
from serl_jax.loop.outer import SLOTS  # noqa: E402
from serl_jax.loop.search import SEED_ROUND  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def curve(run_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(n, best)``: after the n-th designed candidate (n = 0: the reference and library
    seeds only), the best full-stage validation score so far (bps; NaN before any)."""
    store = RunStore.open(run_dir)
    try:
        cands = sorted(store.candidates(), key=lambda c: (c.iteration, c.idx))
    finally:
        store.close()
    seeded = [c for c in cands if c.iteration <= SEED_ROUND]
    designed = [c for c in cands if c.iteration > SEED_ROUND]
    best = max((_full(c) for c in seeded), default=-math.inf)
    values = [best]
    for c in designed:
        best = max(best, _full(c))
        values.append(best)
    out = np.array(values, dtype=np.float64)
    out[~np.isfinite(out)] = np.nan
    return np.arange(len(values)), out


def by_change(run_dirs: list[Path], probe=probe_outputs) -> dict[str, dict[str, int | None]]:
    """Novelty by the kind of change each designed candidate's prompt named, over runs.

    Args:
        run_dirs: run stores (one designer's seeds).
        probe: :func:`serl_jax.loop.novelty.novelty_labels`' probe.

    Returns:
        ``{kind: {"designed", "valid", "copy", "duplicate", "as_named"}}`` (counts): kind
        one of :data:`llm.prompts.hints.CHANGES`, ``"none"`` (the prompt named no change)
        or ``"other"`` (a sentence no template writes: an older run's); ``as_named``
        counts valid answers that made the change as named
        (:func:`llm.prompts.hints.made_change`), None for a kind it cannot check.
    """
    table: dict[str, dict[str, int | None]] = {}
    for run_dir in run_dirs:
        store = RunStore.open(run_dir)
        try:
            cands = store.candidates()
            prompts = {row["id"]: row["prompt"] for row in store.prompts()}
        finally:
            store.close()
        by_id = {c.id: c for c in cands}
        labels = {
            c.id: (copy, dup) for c, copy, dup in novelty_labels(cands, prompts, SLOTS, probe)
        }
        for cand in cands:
            if cand.prompt_id is None:
                continue
            change = named_change(prompts[cand.prompt_id])
            kind = "none" if change is None else (read_change(change[1]) or ("other",))[0]
            row = table.setdefault(kind, {
                "designed": 0, "valid": 0, "copy": 0, "duplicate": 0, "as_named": None,
            })  # fmt: skip
            row["designed"] += 1
            if cand.id not in labels:
                continue
            copy, duplicate = labels[cand.id]
            row["valid"] += 1
            row["copy"] += copy
            row["duplicate"] += duplicate
            if change is None or change[0] not in by_id:
                continue
            shown = by_id[change[0]].slot_code(cand.module)
            made = made_change(change[1], cand.slot_code(cand.module), shown)
            if made is not None:
                row["as_named"] = (row["as_named"] or 0) + made
    return table


def _full(cand) -> float:
    """A candidate's full-stage score (-inf without a finite one)."""
    score = cand.stages.get("full", {}).get("score")
    return score if score is not None and math.isfinite(score) else -math.inf


def task_overrides(task: str, args: argparse.Namespace) -> list[str]:
    """The overrides of a task (``index``: none; ``ac``: the Almgren–Chriss market with
    the urgency for ``--kappa-t`` on this dataset, as ``bench_optimum.py`` sets it)."""
    if task == "index":
        return []
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bench_optimum as optimum  # the same configuration as the certificate

    from serl_jax.config import load_config
    from serl_jax.envs.market_data import MarketData
    from serl_jax.envs.propagator import PropagatorEnvParams
    from serl_jax.experiment import load_splits

    base = [*optimum.TASK, *optimum.CONFIGS["ac"], *args.overrides]
    cfg = load_config(args.config, base)
    splits = load_splits(cfg, args.data or cfg.loop.market)
    train_market = PropagatorEnvParams.from_static(
        cfg.env_params(MarketData.from_episodes(splits.split("train"))),
        splits.stats,
        cfg.impact.params(),
    )
    urgency = optimum.urgency_for(args.kappa_t, cfg, train_market)
    return [
        *optimum.TASK, *optimum.CONFIGS["ac"], f"env.urgency={urgency}",
        "loop.env=dynamic", "loop.score=mean_variance",
    ]  # fmt: skip


def ac_references(args: argparse.Namespace, extra: list[str]) -> dict[str, float]:
    """``{"optimal": ..., "twap": ...}``: the validation score (the loop's, bps: the
    negated mean objective over the validation days) of the optimal schedule
    (:func:`~serl_jax.baselines.optimal.propagator_optimum`) and of TWAP in the task's
    validation market, built as the loop builds it
    (:func:`~serl_jax.loop.evaluation.candidate_market`)."""
    import bench_optimum as optimum

    from serl_jax.baselines import twap_policy
    from serl_jax.baselines.optimal import propagator_optimum, schedule_policy
    from serl_jax.config import load_config
    from serl_jax.envs.execution import mean_variance_reward
    from serl_jax.envs.propagator import PropagatorExecutionEnv
    from serl_jax.loop.evaluation import candidate_market

    cfg = load_config(args.config, [*extra, *args.overrides])
    val = candidate_market(cfg, args.data or cfg.loop.market).val
    env = PropagatorExecutionEnv(mean_variance_reward)
    targets = propagator_optimum(cfg.impact, val)
    optimal, _ = optimum.objectives(env, schedule_policy, targets, val)
    twap, _ = optimum.objectives(env, twap_policy, None, val)
    return {"optimal": -float(np.mean(optimal)), "twap": -float(np.mean(twap))}


def run_one(designer: str, seed: int, args: argparse.Namespace, extra: list[str]) -> Path:
    """One search run, resumed if it was started before (finished: its folder
    ``<out>/<task>-<designer>-s<seed>``; under way: the run folder ``train`` made in
    ``<out>/.tmp/<that name>/``); returns its folder."""
    name = designer.replace(":", "-").replace("/", "_")
    root = Path(args.out) / f"{args.task}-{name}-s{seed}"
    staging = Path(args.out) / ".tmp" / root.name
    if (root / "report.json").exists():
        return root
    started = sorted(staging.glob("*/run.sqlite")) if staging.exists() else []
    if (root / "run.sqlite").exists():
        argv = ["--resume", str(root), "--quiet"]
    elif started:
        argv = ["--resume", str(started[-1].parent), "--quiet"]
    else:
        argv = [
            "--llm", designer, "--seed", str(seed), "--budget-candidates",
            str(args.budget_candidates), "--out", str(staging), "--quiet",
            *(["--config", args.config] if args.config else []),
            *(["--data", args.data] if args.data else []),
            *(["--budget-minutes", str(args.budget_minutes)] if args.budget_minutes else []),
            *extra, *args.overrides,
        ]  # fmt: skip
    with contextlib.redirect_stdout(io.StringIO()):  # each run's own table: in its folder
        code = train.main(argv)
    if code != 0:
        raise SystemExit(f"bench_search: {designer} seed {seed} failed with exit code {code}")
    if not root.exists():
        (made,) = sorted(staging.iterdir())
        made.rename(root)
        staging.rmdir()
    return root


def interval(values: np.ndarray, level: float = 0.95) -> dict:
    """Mean, t interval and minimum detectable effect (80% power, two-sided) of
    ``values`` (one per seed)."""
    n = len(values)
    mean = float(np.mean(values))
    if n < 2:
        return {"value": mean, "ci_low": None, "ci_high": None, "mde": None, "n": n}
    se = float(np.std(values, ddof=1)) / math.sqrt(n)
    t = stats.t.ppf(0.5 + level / 2, n - 1)
    mde = (t + stats.t.ppf(0.8, n - 1)) * se
    return {"value": mean, "ci_low": mean - t * se, "ci_high": mean + t * se, "mde": mde, "n": n}


def score_key(run_dir: Path) -> str:
    """The run's ``loop.score`` (the key of its paired differences)."""
    store = RunStore.open(run_dir)
    try:
        return store.meta("config")["loop"]["score"]
    finally:
        store.close()


def summarize(designers: list[str], runs: dict[str, list[Path]]) -> list[dict]:
    """One row per designer: final best score, test pairing, novelty, and the paired
    difference to the first designer over seeds."""
    rows = []
    finals = {}
    for designer in designers:
        reports = [json.loads((r / "report.json").read_text()) for r in runs[designer]]
        finals[designer] = np.array([curve(r)[1][-1] for r in runs[designer]])
        test = [(rep["best_vs_default"] or {}).get("test") or {} for rep in reports]
        key = score_key(runs[designer][0])
        row = {
            "designer": designer,
            "score": key,
            "seeds": len(reports),
            "best_validation": interval(finals[designer]),
            "test_vs_default": [t.get(key) for t in test],
            **pooled_novelty(reports),
            "distinct_valid": float(np.mean([rep["distinct_valid"] for rep in reports])),
            "designer_seconds_per_valid": _ratio(
                [rep["designer"]["seconds"] for rep in reports],
                [rep["designer"]["valid"] for rep in reports],
            ),
            "short_per_hour": float(
                np.mean([rep["stages"]["short"]["candidates_per_hour"] for rep in reports])
            ),
        }
        if designer != designers[0]:
            row["minus_first"] = interval(finals[designer] - finals[designers[0]])
        rows.append(row)
    return rows


def pooled_novelty(reports: list[dict]) -> dict:
    """Copies and functional duplicates over all seeds' designed valid programs (each
    report's rate times its count), with the duplicates' Wilson 95% interval."""
    designed = sum(rep["designed_valid"] for rep in reports)
    copies = sum(round(rep["copy_rate"] * rep["designed_valid"]) for rep in reports)
    duplicates = sum(round(rep["duplicate_rate"] * rep["designed_valid"]) for rep in reports)
    n = max(designed, 1)
    ci = stats.binomtest(duplicates, n).proportion_ci(method="wilson") if designed else None
    return {
        "designed_valid": designed,
        "copy_rate": copies / n,
        "duplicate_rate": duplicates / n,
        "duplicate_ci": None if ci is None else [float(ci.low), float(ci.high)],
    }


def _ratio(seconds: list[float | None], valid: list[int]) -> float | None:
    """Seconds per valid program over all seeds (None where no call was timed)."""
    if any(s is None for s in seconds) or not sum(seconds) or not sum(valid):
        return None
    return sum(seconds) / sum(valid)


def plot(
    designers: list[str], runs: dict[str, list[Path]], path: str, label: str,
    references: dict[str, float] | None = None,
) -> None:  # fmt: skip
    """Best validation score against candidates designed: each seed thin, the mean bold;
    ``references`` (name: score) as black lines, dashed and dotted in turn."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, (name, value) in enumerate((references or {}).items()):
        ax.axhline(value, color="k", ls=("--", ":")[i % 2], lw=1, label=name)
    for i, designer in enumerate(designers):
        color = f"C{i}"
        curves = [curve(r) for r in runs[designer]]
        for n, best in curves:
            ax.plot(n, best, color=color, alpha=0.3, lw=0.8)
        length = min(len(n) for n, _ in curves)
        mean = np.nanmean(np.stack([b[:length] for _, b in curves]), axis=0)
        ax.plot(curves[0][0][:length], mean, color=color, lw=2, label=designer)
    ax.set_xlabel("candidates designed")
    ax.set_ylabel(f"best validation {label} (bps)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _wilson(ci: list[float] | None) -> str:
    return "" if ci is None else f"[{ci[0]:.0%}, {ci[1]:.0%}] "


def _fmt(x, spec: str = "+.3f") -> str:
    return "n/a" if x is None else format(x, spec)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--designers", default="offline", help="comma-separated --llm specs")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    parser.add_argument("--budget-candidates", type=int, default=100)
    parser.add_argument("--budget-minutes", type=float, help="also a time budget per run")
    parser.add_argument("--task", choices=["index", "ac"], default="index")
    parser.add_argument("--kappa-t", type=float, default=3.0, help="ac: kappa*T")
    parser.add_argument("--data", help="the dataset (default: the config's loop.market)")
    parser.add_argument("--config", help="YAML preset")
    parser.add_argument("--out", default="runs/search-curves", help="parent of the run folders")
    parser.add_argument("--plot", help="the curves' figure (PNG)")
    parser.add_argument("--json", action="store_true", help="one JSON line per designer")
    parser.add_argument("overrides", nargs="*", metavar="section.key=value")
    args = parse_command_line(parser, argv)
    designers = args.designers.split(",")
    seeds = [int(s) for s in args.seeds.split(",")]
    extra = task_overrides(args.task, args)
    t0 = time.perf_counter()
    runs = {d: [run_one(d, s, args, extra) for s in seeds] for d in designers}
    rows = summarize(designers, runs)
    references = ac_references(args, extra) if args.task == "ac" else None
    if references:
        gap = references["optimal"] - references["twap"]
        for row in rows:
            row["captured"] = (row["best_validation"]["value"] - references["twap"]) / gap
    label = "mean-variance" if args.task == "ac" else "score"
    if args.plot:
        lines = references and {
            "optimal schedule": references["optimal"], "TWAP": references["twap"]
        }  # fmt: skip
        plot(designers, runs, args.plot, label, lines)
    print(
        f"# search curves, task {args.task}, {args.budget_candidates} candidates, seeds "
        f"{args.seeds}; {time.strftime('%Y-%m-%d')}, {platform.processor() or platform.machine()}"
        f", {time.perf_counter() - t0:.0f} s"
    )
    print()
    print(
        "| designer | best validation (bps, mean [95% CI] over seeds) | minus "
        f"{designers[0]} (MDE) | test vs default, per seed | copy | dup | designed valid | "
        "distinct | designer s/valid | short/h |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        b, d = row["best_validation"], row.get("minus_first")
        diff = "" if d is None else (
            f"{_fmt(d['value'])} [{_fmt(d['ci_low'])}, {_fmt(d['ci_high'])}] "
            f"({_fmt(d['mde'], '.3f')})"
        )  # fmt: skip
        tests = ", ".join(
            "n/a"
            if t is None
            else f"{t['value']:+.2f} [{_fmt(t['ci_low'], '+.2f')}, {_fmt(t['ci_high'], '+.2f')}]"
            for t in row["test_vs_default"]
        )
        print(
            f"| {row['designer']} | {b['value']:.3f} [{_fmt(b['ci_low'], '.3f')}, "
            f"{_fmt(b['ci_high'], '.3f')}] | {diff} | {tests} | {row['copy_rate']:.0%} | "
            f"{row['duplicate_rate']:.0%} {_wilson(row['duplicate_ci'])}| "
            f"{row['designed_valid']} | "
            f"{row['distinct_valid']:.0f} | {_fmt(row['designer_seconds_per_valid'], '.1f')} | "
            f"{row['short_per_hour']:.0f} |"
        )
        if args.json:
            print(json.dumps(row))
    if references:
        print()
        print(
            f"known references (validation): optimal schedule {references['optimal']:.3f}, "
            f"TWAP {references['twap']:.3f} bps; share of TWAP's gap closed by each "
            "designer's mean best: "
            + ", ".join(f"{row['designer']} {row['captured']:.1%}" for row in rows)
        )
        if args.json:
            print(json.dumps({"references": references}))
    print()
    print("| designer | change named | designed | valid | copy | dup | made as named |")
    print("|---|---|---|---|---|---|---|")
    for designer in designers:
        table = by_change(runs[designer])
        for kind, c in sorted(table.items(), key=lambda kv: (-kv[1]["designed"], kv[0])):
            named = "" if c["as_named"] is None else f"{c['as_named']} of {c['valid']}"
            print(
                f"| {designer} | {kind} | {c['designed']} | {c['valid']} | {c['copy']} | "
                f"{c['duplicate']} | {named} |"
            )
        if args.json:
            print(json.dumps({"designer": designer, "by_change": table}))


if __name__ == "__main__":
    main()
