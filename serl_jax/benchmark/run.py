"""Runs a benchmark plan cell by cell into a resumable run folder, then writes its table.

The run folder::

    runs/<time>-benchmark-<suite>/
        benchmark.json                  the plan (datasets, rows, seeds, config, command)
        cells/<dataset>/<row>/<seed>/   one cell each: checkpoint, orders.npz, cell.json, log.txt
        cells/<dataset>/market.yaml     the calibrated dynamic market (hybrid rows)
        xla_cache/                      compiled programs the cells share (loop.compilation_cache)
        results.md  results.json  results.png

Each cell is stored when done (:mod:`serl_jax.benchmark.cells`); running the plan again
(``--resume``) skips stored cells and resumes an SE-RL loop from its own store. A cell
that fails is recorded with its reason and the others go on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import itertools
import json
import resource
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax

from serl_jax.benchmark import rows as row_fns
from serl_jax.benchmark.cells import CellStore
from serl_jax.benchmark.suites import Dataset, Row
from serl_jax.benchmark.tables import (
    agents_results,
    dataset_results,
    machine_description,
    plot_results,
    results_markdown,
    today,
)
from serl_jax.config import Config, load_config
from serl_jax.experiment import SAMPLE_PREFIX, load_splits
from serl_jax.loop.dispatch import compilation_cache
from serl_jax.training.serl import share_accelerator

__all__ = ["Plan", "run_plan"]

PLAN_FILE = "benchmark.json"
ELAPSED_FILE = "elapsed.json"


@dataclasses.dataclass(frozen=True)
class Plan:
    """What a benchmark run computes.

    Attributes:
        suite: ``paper``, ``samples`` or ``custom`` (``--data``).
        datasets: the datasets, in order.
        rows: the rows: the baselines, then learned rows (one cell per seed).
        seeds: the run seeds (``run.seed`` of every learned row's training).
        config: the preset file (None: the built-in defaults).
        overrides: ``section.key=value`` settings over every cell.
        command: the command line that made the plan.
    """

    suite: str
    datasets: tuple[Dataset, ...]
    rows: tuple[Row, ...]
    seeds: tuple[int, ...]
    config: str | None = None
    overrides: tuple[str, ...] = ()
    command: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON-ready data (``benchmark.json``)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Plan:
        """The inverse of :meth:`to_dict`."""
        return cls(
            suite=raw["suite"],
            datasets=tuple(
                Dataset(**{**d, "overrides": tuple(d["overrides"])}) for d in raw["datasets"]
            ),
            rows=tuple(Row(**{**r, "overrides": tuple(r["overrides"])}) for r in raw["rows"]),
            seeds=tuple(raw["seeds"]),
            config=raw["config"],
            overrides=tuple(raw["overrides"]),
            command=raw["command"],
        )

    def cfg(self, dataset: Dataset, *extra: str) -> Config:
        """The config of one cell: the preset, the dataset's data settings, the plan's
        overrides, then ``extra`` (the row's and the cell's).

        Raises:
            ConfigError: a bad key or value.
        """
        path = json.dumps(dataset.path)
        return load_config(
            self.config,
            [
                *dataset.overrides,
                *self.overrides,
                f"data.markets=[{path}]",
                f"loop.market={path}",
                *extra,
            ],
        )


def _needs_market(row: Row, cfg) -> bool:
    """Whether a row trains in a calibrated order-book market (hybrid or dynamic PPO, or
    agents, with ``market.simulator=lob``; the propagator needs no calibration run)."""
    dynamic = row.kind == "agents" or any(
        mode in row.overrides for mode in ("market.mode=hybrid", "market.mode=dynamic")
    )
    simulator = cfg.market.simulator
    for override in row.overrides:
        if override.startswith("market.simulator="):
            simulator = override.split("=", 1)[1]
    return dynamic and simulator == "lob"


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextlib.contextmanager
def _captured(path: Path):
    """Sends this process's printing (progress bars, a loop's log) to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        yield


def _elapsed(root: Path, add: float = 0.0) -> float:
    path = root / ELAPSED_FILE
    total = (json.loads(path.read_text())["seconds"] if path.is_file() else 0.0) + add
    path.write_text(json.dumps({"seconds": total}))
    return total


def _market_params(plan: Plan, store: CellStore, dataset: Dataset) -> str:
    """The calibrated market file of a dataset (``auto`` for a shipped sample), calibrated
    once per run and kept in the run folder."""
    if dataset.path.startswith(SAMPLE_PREFIX):
        return "auto"
    out = store.root / "cells" / dataset.name / "market.yaml"
    if not out.is_file():
        t0 = time.perf_counter()
        _log(f"[{dataset.name}] calibrating the dynamic market on the training days")
        with _captured(out.with_name("market.log")):
            row_fns.calibrate_market(plan.cfg(dataset), dataset.path, out)
        _elapsed(store.root, time.perf_counter() - t0)
        _log(f"[{dataset.name}] calibrated in {time.perf_counter() - t0:.0f} s")
    return str(out)


def run_plan(plan: Plan, root: Path, *, verbose: bool = False) -> dict[str, Any]:
    """Runs every cell of ``plan`` not yet stored in ``root``, then writes the results.

    Args:
        plan: what to run (written to ``root/benchmark.json`` when new).
        root: the run folder (created if needed).
        verbose: load reports per symbol and each cell's own output on the terminal.

    Returns:
        The results (also written as ``results.json``, ``results.md``, ``results.png``).

    Raises:
        ConfigError, DataError, ValueError: bad settings or data, found before training.
    """
    t_start = time.perf_counter()
    learned = [r for r in plan.rows if r.kind != "baselines"]
    for row in learned:  # the loop's workers, and an hf: designer, share the GPU with this
        if row.kind == "serl":  # process (the first hf: row sets the memory share)
            share_accelerator(plan.cfg(plan.datasets[0], *row.overrides).loop)
    loaded = {}
    for dataset in plan.datasets:  # bad settings or data fail here, before any folder
        for row in learned:
            plan.cfg(dataset, *row.overrides)
        loaded[dataset.name] = load_splits(plan.cfg(dataset), dataset.path)
    root.mkdir(parents=True, exist_ok=True)
    plan_path = root / PLAN_FILE
    if not plan_path.is_file():
        plan_path.write_text(json.dumps(plan.to_dict(), indent=2))
    store = CellStore(root)
    todo = [
        (d, r, s)
        for d in plan.datasets
        for r in learned
        for s in plan.seeds
        if not store.done(d.name, r.key, s)
    ]
    _log(
        f"benchmark {plan.suite}: {len(plan.datasets)} dataset(s) x {len(learned)} learned "
        f"row(s) x {len(plan.seeds)} seed(s); {len(todo)} cell(s) to run -> {root}"
    )
    for dataset in plan.datasets:
        splits = loaded[dataset.name]
        _log(f"[{dataset.name}] {splits.report.summary(verbose=verbose)}")
        _log(f"[{dataset.name}] {splits.summary()}")
    failures: list[dict[str, Any]] = []
    labels = (f"[{i}/{len(todo)}]" for i in itertools.count(1))
    # one persistent XLA cache for the run: the seeds of a row compile the same programs
    cache = root / "xla_cache" if plan.cfg(plan.datasets[0]).loop.compilation_cache else None
    with compilation_cache(cache):
        for dataset in plan.datasets:
            failures += _run_dataset(plan, dataset, loaded[dataset.name], store, labels, verbose)
    elapsed = _elapsed(root, 0.0)
    results = _results(plan, store, failures, elapsed)
    (root / "results.json").write_text(json.dumps(results, indent=2, allow_nan=False))
    (root / "results.md").write_text(results_markdown(results))
    plot_results(results, root / "results.png")
    _log(
        f"benchmark done: {time.perf_counter() - t_start:.0f} s this call, {elapsed / 60:.1f} "
        f"min of cells in all -> {root / 'results.md'}"
    )
    return results


def _run_dataset(
    plan: Plan,
    dataset: Dataset,
    splits,
    store: CellStore,
    labels: Iterator[str],
    verbose: bool,
) -> list[dict[str, Any]]:
    """Runs one dataset's cells not yet stored (baselines, then each learned row and
    seed); returns the failed cells, each ``{dataset, row, seed, error}``."""
    learned = [r for r in plan.rows if r.kind != "baselines"]
    failures: list[dict[str, Any]] = []
    cfg = plan.cfg(dataset)
    if not store.done(dataset.name, "baselines", None):
        t0 = time.perf_counter()
        orders = row_fns.baseline_orders(cfg, splits)
        seconds = time.perf_counter() - t0
        store.write(dataset.name, "baselines", None, orders, {"seconds": seconds})
        _elapsed(store.root, seconds)
    market = None
    if any(_needs_market(r, cfg) for r in learned):
        market = _market_params(plan, store, dataset)
    for row in learned:
        for seed in plan.seeds:
            if store.done(dataset.name, row.key, seed):
                continue
            folder = store.path(dataset.name, row.key, seed)
            extra = [*row.overrides, f"run.seed={seed}", f"run.out={json.dumps(str(folder))}"]
            if market is not None and _needs_market(row, cfg):
                extra.append(f"market.params={json.dumps(market)}")
            label = f"{next(labels)} {dataset.name} {row.name} seed {seed}"
            _log(f"{label} ...")
            t0 = time.perf_counter()
            try:
                orders, meta = _run_cell(plan, dataset, row, splits, folder, extra, verbose)
            except Exception as err:  # a failed cell is recorded; the others go on
                reason = " ".join(str(err).splitlines()) or type(err).__name__
                failures.append(
                    {"dataset": dataset.name, "row": row.key, "seed": seed, "error": reason}
                )
                _log(f"{label} failed: {reason} (see {folder / 'log.txt'})")
                continue
            finally:
                _release_compiled_programs()
            seconds = time.perf_counter() - t0
            store.write(dataset.name, row.key, seed, orders, {**meta, "seconds": seconds})
            _elapsed(store.root, seconds)
            _log(f"{label} done in {seconds:.0f} s")
    return failures


def _release_compiled_programs() -> None:
    """Drops the cell's compiled XLA programs (the run's persistent cache keeps them on
    disk): each live CPU executable holds memory mappings, and a long run in one process
    would otherwise reach Linux's ``vm.max_map_count`` (65,530), where XLA aborts."""
    jax.clear_caches()
    gc.collect()


def _run_cell(
    plan: Plan,
    dataset: Dataset,
    row: Row,
    splits,
    folder: Path,
    extra: list[str],
    verbose: bool,
) -> tuple[dict, dict]:
    cfg = plan.cfg(dataset, *extra)
    context: Callable = contextlib.nullcontext if verbose else _captured
    args = () if verbose else (folder / "log.txt",)
    with context(*args):
        if row.kind == "ppo":
            imagine_fn = None
            if cfg.imagine.program:
                from serl_jax.training.programs import imagination_program

                imagine_fn = imagination_program(cfg)[1]
            return row_fns.ppo_orders(
                cfg, row.name, splits, folder, progress=verbose, imagine_fn=imagine_fn
            )
        if row.kind == "agents":
            return row_fns.agents_orders(cfg, row.name, splits, folder, progress=verbose)
        # the loop's own log (candidates, scores) goes to the cell's log.txt
        return row_fns.serl_orders(cfg, row.name, splits, folder, quiet=False)


def _results(plan: Plan, store: CellStore, failures: list, elapsed: float) -> dict[str, Any]:
    """The results of every stored cell (``results.json``'s content)."""
    settings = plan.cfg(plan.datasets[0]).eval
    boot = {"confidence": settings.confidence, "n_bootstrap": settings.n_bootstrap, "seed": 0}
    learned = [(r.key, r.name) for r in plan.rows if r.kind in ("ppo", "serl")]
    agents = [(r.key, r.name) for r in plan.rows if r.kind == "agents"]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    datasets = {}
    for d in plan.datasets:
        seconds: dict[str, list[float]] = {}
        for key, name in learned + agents:
            for s in plan.seeds:
                if store.done(d.name, key, s):
                    _, record = store.read(d.name, key, s)
                    seconds.setdefault(name, []).append(record["seconds"])
        datasets[d.name] = {
            "path": d.path,
            "why": d.why,
            "overrides": list(d.overrides),
            "splits": dataset_results(store, d.name, learned, plan.seeds, boot),
            "agents": agents_results(store, d.name, agents, plan.seeds, boot),
            "seconds_per_cell": {name: sum(v) / len(v) for name, v in seconds.items()},
        }
    return {
        "meta": {
            "suite": plan.suite,
            "date": today(),
            "machine": machine_description(),
            "seeds": list(plan.seeds),
            "run_seconds": elapsed,
            "peak_rss_gb": max(rss, children) / 2**20,
            "command": plan.command,
            "config": plan.config,
            "overrides": list(plan.overrides),
            "failed_cells": failures,
        },
        "datasets": datasets,
    }
