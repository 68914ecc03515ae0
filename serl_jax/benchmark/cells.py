"""The benchmark's cells: one (dataset, row, seed) each, stored when done.

A cell folder ``cells/<dataset>/<row>/<seed>/`` holds what the cell produced: its
checkpoint (and, for the SE-RL rows, the loop's own resumable run folder), ``orders.npz``
(every evaluated order's outcome on each split) and, written last, ``cell.json``. A cell
is done exactly when its ``cell.json`` exists, and both files are written to a temporary
name and renamed, so a killed run leaves either a whole cell or one that is redone (an
SE-RL loop then resumes from its own store instead of starting over).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from serl_jax.metrics import OrderOutcomes

PROPAGATOR_TEST = "test@propagator"
"""The split name of the test days rolled out in the propagator market (the agent's own
impact moves the replayed bars; :func:`serl_jax.benchmark.rows.split_orders`)."""

__all__ = ["CellStore", "SplitOrders"]

CELL_FILE = "cell.json"
ORDERS_FILE = "orders.npz"
_FIELDS = ("side", "quantity", "executed", "notional", "benchmark", "replayed_notional")


class SplitOrders:
    """One policy's orders on one split: the outcomes with each order's symbol and day.

    Attributes:
        outcomes: the :class:`~serl_jax.metrics.OrderOutcomes` (``[n]`` float64).
        symbols: ``[n]`` str, each order's symbol.
        days: ``[n]`` str, each order's day (ISO date).
    """

    def __init__(self, outcomes: OrderOutcomes, symbols, days) -> None:
        self.outcomes = outcomes
        self.symbols = np.asarray([str(s) for s in symbols])
        self.days = np.asarray([str(d) for d in days])
        if not (len(self.symbols) == len(self.days) == outcomes.n_orders):
            raise ValueError(
                f"SplitOrders: {outcomes.n_orders} orders, {len(self.symbols)} symbols, "
                f"{len(self.days)} days"
            )


class CellStore:
    """The cells of one benchmark run folder.

    Args:
        root: the run folder.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def path(self, dataset: str, row: str, seed: int | None) -> Path:
        """A cell's folder (``seed`` None for the seed-independent baselines)."""
        return self.root / "cells" / dataset / row / ("all" if seed is None else f"seed{seed}")

    def done(self, dataset: str, row: str, seed: int | None) -> bool:
        """Whether the cell was stored whole."""
        return (self.path(dataset, row, seed) / CELL_FILE).is_file()

    def write(
        self,
        dataset: str,
        row: str,
        seed: int | None,
        orders: dict[str, dict[str, SplitOrders]],
        meta: dict[str, Any],
    ) -> None:
        """Stores a finished cell.

        Args:
            orders: ``{split: {policy name: SplitOrders}}``.
            meta: JSON-serializable facts about the cell (seconds, checkpoint, ...).
        """
        folder = self.path(dataset, row, seed)
        folder.mkdir(parents=True, exist_ok=True)
        arrays: dict[str, np.ndarray] = {}
        index = []
        for split, by_policy in orders.items():
            for k, (policy, o) in enumerate(by_policy.items()):
                prefix = f"{split}/{k}"
                index.append({"split": split, "policy": policy, "prefix": prefix})
                arrays[f"{prefix}/symbols"] = o.symbols
                arrays[f"{prefix}/days"] = o.days
                for field in _FIELDS:
                    value = getattr(o.outcomes, field)
                    if value is not None:
                        arrays[f"{prefix}/{field}"] = np.asarray(value)
        _atomic_npz(folder / ORDERS_FILE, arrays)
        record = {"dataset": dataset, "row": row, "seed": seed, "orders": index, **meta}
        _atomic_text(folder / CELL_FILE, json.dumps(record, indent=2, allow_nan=False))

    def read(
        self, dataset: str, row: str, seed: int | None
    ) -> tuple[dict[str, dict[str, SplitOrders]], dict[str, Any]]:
        """A stored cell: ``({split: {policy: SplitOrders}}, cell.json's record)``."""
        folder = self.path(dataset, row, seed)
        record = json.loads((folder / CELL_FILE).read_text())
        out: dict[str, dict[str, SplitOrders]] = {}
        with np.load(folder / ORDERS_FILE) as data:
            for entry in record["orders"]:
                prefix = entry["prefix"]
                fields = {
                    f: data[f"{prefix}/{f}"] for f in _FIELDS if f"{prefix}/{f}" in data.files
                }
                outcomes = OrderOutcomes(
                    **{**fields, "replayed_notional": fields.get("replayed_notional")}
                )
                out.setdefault(entry["split"], {})[entry["policy"]] = SplitOrders(
                    outcomes, data[f"{prefix}/symbols"], data[f"{prefix}/days"]
                )
        return out, record


def _atomic_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.savez_compressed(f, **arrays)
    os.replace(tmp, path)


def _atomic_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
