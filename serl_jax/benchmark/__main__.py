"""``python -m serl_jax.benchmark``: the seed's results table, every policy on every
dataset and seed, with intervals clustered by day.

Usage::

    python -m serl_jax.benchmark [--suite paper|samples] [--data PATH ...] [--data-root DIR]
                                 [--config FILE] [--seeds N] [--rows KEY,KEY,...]
                                 [--llm SPEC] [--ablations] [--out DIR] [--verbose]
                                 [--wide] [section.key=value ...]
    python -m serl_jax.benchmark --resume RUN_DIR [--verbose] [--wide]

Overrides may stand anywhere among the flags (:func:`serl_jax.cli.parse_command_line`).
At the end it prints the results page (:func:`serl_jax.benchmark.tables.results_text`):
``results.md`` with each split's table as text that fits 120 columns, or with every
column (``--wide``); ``results.md`` keeps every column.

Rows (``--rows`` keys): ``baselines`` (TWAP, TWAP-POV, VWAP, adaptive VWAP, POV, AC and
the hindsight oracle; always run), ``ppo`` (the default PPO, static market),
``ppo-discrete`` (the discrete action set), ``ppo-hybrid`` (hybrid static + dynamic
training on a market calibrated to the dataset's training days), ``serl-offline`` (the
SE-RL loop with the offline designer; its best candidate, chosen on validation days) and,
with ``--llm SPEC``, ``serl-llm`` (the loop with that designer). ``--ablations`` adds the
DEK off (and low, with an ``hf:`` model), ``loop.score=pa``, propagator-preset
(``ppo-propagator``: ``configs/propagator.yaml``'s PPO, trained in the propagator market
alone) and imagined-days rows, and one against two IPPO agents in the dynamic market
(``agents-1``, ``agents-2``, their own table); the static-vs-hybrid comparison is the
``ppo`` and ``ppo-hybrid`` rows paired.

``--suite paper`` runs ``cn_index_1min``, ``cn_xsec_1min`` and ``us_2022_1min`` from
``--data-root`` (default ``$SERL_DATA_ROOT`` or ``../shared/data``) with the splits
:mod:`serl_jax.benchmark.suites` documents; ``--data PATH`` (repeatable) runs any dataset
with the config's splits instead. The run folder (:mod:`serl_jax.benchmark.run`) stores
each cell when done; ``--resume`` continues a killed run without redoing stored cells.

Exit codes: 0 done (``results.md`` written); 1 done, but some cells failed (listed in
``results.md``); 2 bad input (one ``error:`` line).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from serl_jax.benchmark.run import PLAN_FILE, Plan, run_plan
from serl_jax.benchmark.suites import (
    ABLATION_ROWS,
    AGENT_ROWS,
    MAIN_ROWS,
    custom_dataset,
    default_data_root,
    llm_row,
    suite_datasets,
)
from serl_jax.benchmark.tables import results_text
from serl_jax.cli import add_wide_flag, parse_command_line
from serl_jax.config import ConfigError
from serl_jax.data import DataError


def _plan(args: argparse.Namespace) -> Plan:
    if args.seeds < 1:
        raise ValueError(f"--seeds: need at least 1, got {args.seeds}")
    if args.data:
        if args.suite:
            raise ValueError("--data and --suite: give one")
        datasets = tuple(custom_dataset(p) for p in args.data)
        suite = "custom"
    else:
        suite = args.suite or "paper"
        root = Path(args.data_root) if args.data_root else default_data_root()
        datasets = suite_datasets(suite, root)
    rows = list(MAIN_ROWS)
    if args.llm:
        rows.append(llm_row(args.llm))
    if args.ablations:
        rows += [*ABLATION_ROWS, *AGENT_ROWS]
        if args.llm:
            rows.append(llm_row(args.llm, "off"))
            if args.llm.startswith("hf:"):
                rows.append(llm_row(args.llm, "low"))
    if args.rows:
        wanted = [k.strip() for k in args.rows.split(",") if k.strip()]
        known = {r.key for r in rows}
        unknown = [k for k in wanted if k not in known]
        if unknown:
            raise ValueError(f"--rows: unknown {', '.join(unknown)}; known: {', '.join(known)}")
        rows = [r for r in rows if r.key in wanted or r.kind == "baselines"]
    return Plan(
        suite=suite,
        datasets=datasets,
        rows=tuple(rows),
        seeds=tuple(range(args.seeds)),
        config=args.config,
        overrides=tuple(args.overrides),
        command="python -m serl_jax.benchmark "
        + shlex.join(sys.argv[1:] if args.argv is None else args.argv),
    )


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit code (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m serl_jax.benchmark", description=__doc__.split("\n\n")[0].strip('"`')
    )
    parser.add_argument("--suite", choices=("paper", "samples"), help="default: paper")
    parser.add_argument("--data", action="append", help="a dataset (repeatable) instead of a suite")
    parser.add_argument("--data-root", help="folder of the paper suite's sets")
    parser.add_argument("--config", help="YAML preset (default: built-in defaults)")
    parser.add_argument("--seeds", type=int, default=3, help="run seeds 0..N-1 (default 3)")
    parser.add_argument("--rows", help="comma-separated row keys (default: all)")
    parser.add_argument("--llm", help="also run the SE-RL loop with this designer")
    parser.add_argument("--ablations", action="store_true", help="add the ablation rows")
    parser.add_argument("--out", help="the run folder (default runs/<time>-benchmark-<suite>)")
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue a benchmark run folder")
    parser.add_argument("--verbose", action="store_true", help="per-symbol loads, cell output")
    add_wide_flag(parser)
    parser.add_argument("overrides", nargs="*", metavar="section.key=value")
    args = parse_command_line(parser, argv)
    args.argv = argv
    try:
        if args.resume:
            given = [a for a in (argv if argv is not None else sys.argv[1:])]
            if set(given) - {"--resume", args.resume, "--verbose", "--wide"}:
                raise ValueError(
                    "--resume continues a run with its own plan; drop the other options"
                )
            root = Path(args.resume)
            if not (root / PLAN_FILE).is_file():
                raise ValueError(f"{root}: not a benchmark run folder (no {PLAN_FILE})")
            plan = Plan.from_dict(json.loads((root / PLAN_FILE).read_text()))
        else:
            plan = _plan(args)
            root = Path(args.out or f"runs/{time.strftime('%Y%m%d-%H%M%S')}-benchmark-{plan.suite}")
            if (root / PLAN_FILE).is_file():
                raise ValueError(f"{root}: a benchmark run is there already; use --resume {root}")
        results = run_plan(plan, root, verbose=args.verbose)
    except (ConfigError, DataError, ValueError) as err:
        print(f"error: {' '.join(str(err).splitlines())}", file=sys.stderr)
        return 2
    print(results_text(results, wide=args.wide))
    return 1 if results["meta"]["failed_cells"] else 0


if __name__ == "__main__":
    sys.exit(main())
