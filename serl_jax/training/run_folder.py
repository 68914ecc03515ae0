"""The run folder of plain PPO and multi-agent runs (``--llm none``), assembled under
``.<name>.incomplete`` and renamed when whole, so that a killed run never leaves a folder
that looks complete."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from serl_jax.config import Config
from serl_jax.data import MarketSplits
from serl_jax.market.params import MarketParams
from serl_jax.metrics import format_table

__all__ = ["write_run"]


def write_run(
    cfg: Config,
    name: str,
    markets: list[tuple[MarketParams | None, MarketSplits]],
    run_one: Callable,
    quiet: bool,
    verbose: bool = False,
    wide: bool = False,
) -> int:
    """Runs every market into a run folder ``<run.out>/<name>`` assembled under
    ``.<name>.incomplete`` and renamed when whole: ``config.yaml``, ``metrics.json``
    (``{"run", "markets": {<market>: entry}}``) and ``results.txt`` (the table with
    every column; printed as the compact table unless ``wide``,
    :func:`serl_jax.metrics.format_table`).

    Args:
        run_one: ``run_one(market_params, splits, out_dir) -> (entry, rows)``: the
            market's ``metrics.json`` entry and its table rows ``{(row, policy):
            ExecutionMetrics}``; it writes its artifacts into ``out_dir``.
        verbose: the load report per symbol (default: one summary line).
        wide: print every column of the table.

    Returns:
        0 (the exit code).
    """
    out_root = Path(cfg.run.out)
    staging = out_root / f".{name}.incomplete"
    staging.mkdir(parents=True, exist_ok=False)
    (staging / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    report: dict[str, Any] = {"run": name, "markets": {}}
    table_rows = {}
    for market_params, splits in markets:
        if not quiet:
            print(f"[{splits.name}] {splits.report.summary(verbose)}", file=sys.stderr)
        entry, rows = run_one(market_params, splits, staging / splits.name)
        report["markets"][splits.name] = entry
        table_rows.update(rows)
    (staging / "metrics.json").write_text(json.dumps(report, indent=2, allow_nan=False))
    (staging / "results.txt").write_text(format_table(table_rows, wide=True) + "\n")
    final = out_root / name
    staging.rename(final)
    print(format_table(table_rows, wide=wide))
    print(f"run folder: {final}")
    return 0
