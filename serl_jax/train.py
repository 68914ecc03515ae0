"""``python -m serl_jax.train``: the SE-RL loop, or plain PPO training, on real minute bars.

By default it runs the SE-RL outer loop (:mod:`serl_jax.loop`) with the ``offline``
designer on the config's ``loop.market``: the designer proposes reward and network code
(``--modules`` adds ``imagination``, LLM4Imagine's imagined training days), each
candidate is validated in the sandbox, trained and scored on validation days, and the
scores feed the next prompts until the PA moving average converges. The run folder
is written as it happens and can be resumed after a crash or kill::

    runs/<time>-serl/
        run.sqlite  config.yaml            every prompt, completion, validation, metric
        candidates/<id>/                   checkpoint (policy + code), curves.npz
        report.md  report.json  results.txt  loop_progress.png   (at the end)

With ``--llm none`` it trains plain PPO on each market of ``data.markets`` (the default
reward and network) in the market ``--env`` names (``market.mode``): ``static``
(replayed bars), ``dynamic`` (the simulated order-book market, :mod:`serl_jax.market`)
or ``hybrid`` (both at once, ``L = alpha L_static + beta L_dynamic``, the default; a
static-only ``PPO-static`` is trained beside it), and compares it with TWAP, VWAP,
Almgren–Chriss and the immediate sale on test days in both markets. (The SE-RL loop
scores its candidates in the static market.) With ``--env static ppo.distill_coef=λ``
(λ > 0) it trains by policy distillation: a teacher first, on observations holding the
current minute's true volume (``ppo.distill_teacher=oracle``, oracle policy
distillation) or on the student's own (``honest``), then PPO with a supervision term
toward it (:mod:`serl_jax.rl.distillation`; ``metrics.json`` records the teacher under
``distillation``)::

    runs/<time>-<preset>/
        config.yaml  metrics.json  results.txt
        <market>/checkpoint/{policy.msgpack, policy.json}
        <market>/{training_curve, trajectories, pa_distribution}.png

That folder is assembled under ``runs/.<name>.incomplete`` and renamed when complete.
With ``--agents N`` (N > 1) it trains N agents with IPPO or MAPPO in the dynamic market
(with ``--env hybrid`` in the static and dynamic markets at once) instead
(:mod:`serl_jax.agents_experiment`; ``marl.profile`` and ``--comm`` /
``marl.communication`` name validated profile and communication programs) and reports
each agent and the team against TWAP and TWAP-POV. Without ``--llm none``, ``--agents N``
runs the SE-RL loop on N agents: candidates train with IPPO or MAPPO in the dynamic
market (or both, ``--env hybrid``) and are scored over every agent's validation orders,
and ``--modules`` may add ``profiling`` (LLM4Profiling) and ``communication``
(LLM4Communication) (:mod:`serl_jax.loop.agents_evaluation`).

Usage::

    python -m serl_jax.train [--config FILE] [--llm offline|hf:<model>|openai:<base_url>|none]
                             [--model NAME] [--iterations J] [--candidates K]
                             [--workers N] [--dek off|high|low|both]
                             [--modules reward,network,imagination]
                             [--agents N [--modules reward,network,profiling,communication]]
                             [--env static|dynamic|hybrid]
                             [--data PATH] [--out DIR] [--seed N] [--quiet]
                             [section.key=value ...]
    python -m serl_jax.train --llm none --agents N [--marl ippo|mappo]
                             [--scenario independent|team] [--comm] [...]
    python -m serl_jax.train --resume RUN_DIR [--quiet]

Exit codes: 0 done; 2 bad input (config, data, backend spec, run folder); 3 the designer
failed mid-run (the run folder is resumable).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from llm.backends import BackendError, make_backend
from llm.designs import library, program_source
from llm.validate import SandboxError, load_validated, validate
from serl_jax.agents_experiment import (
    agents_entry,
    evaluate_agents,
    make_agents_env,
    save_agents_checkpoint,
    train_agents,
)
from serl_jax.config import LOOP_SCORES, Config, ConfigError, load_config, saved_run_config
from serl_jax.data import DataError, MarketSplits
from serl_jax.envs.dynamic import DynamicExecutionEnv
from serl_jax.envs.execution import ExecutionEnv
from serl_jax.envs.market_data import MarketData
from serl_jax.experiment import (
    ORACLE,
    baseline_policies,
    calibrated_market,
    dynamic_env_params,
    evaluate_policies,
    load_splits,
    make_env,
    make_imagination,
    selection_entry,
    train_policy,
    train_teacher,
)
from serl_jax.loop import RunStore, SERLLoop, StoreError
from serl_jax.loop.report import write_report
from serl_jax.market.params import MarketParams
from serl_jax.metrics import ExecutionMetrics, format_table, price_advantage
from serl_jax.plots import plot_pa_distribution, plot_training_curve, plot_trajectories
from serl_jax.rl.checkpoint import save_policy
from serl_jax.rl.marl import make_marl_policy
from serl_jax.rl.mixed_sampling import Imagination, imagined_share
from serl_jax.rl.policy import make_ppo_policy


def _finite_or_none(x) -> float | None:
    return float(x) if np.isfinite(x) else None


def _ppo_policy(cfg: Config, trained) -> tuple[Any, Any]:
    policy = make_ppo_policy(
        trained.network, cfg.ppo.normalize_obs, action_prior=cfg.network.prior()
    )
    return policy, trained.policy_params


def run_market(
    cfg: Config,
    market: MarketParams | None,
    splits: MarketSplits,
    out_dir: Path,
    progress: bool,
    imagination: Imagination | None = None,
) -> tuple[dict[str, Any], dict[str, dict[str, ExecutionMetrics]]]:
    """Trains, selects and evaluates on one market; writes its artifacts into ``out_dir``.

    ``market.mode`` picks where the policy ``PPO`` trains: the static market, the
    dynamic one, or both at once (hybrid, :func:`serl_jax.rl.hybrid.make_hybrid_trainer`).
    Outside the static mode a ``PPO-static`` policy is trained too, and every policy is
    scored in both markets, so the cost of ignoring impact is visible.

    Args:
        market: the calibrated background parameters of the dynamic market; None (only
            in the static mode, for data without calibrated parameters) scores the
            policies in the static market only.
        imagination: mixed sampling of imagined training days for every PPO policy
            trained here (:func:`serl_jax.experiment.make_imagination`); ``None``: real
            days only.

    Returns:
        The market's entry of ``metrics.json`` and the test metrics per market
        (``static``, ``dynamic``) and policy.
    """
    mode = cfg.market.mode
    static_env = ExecutionEnv()
    params = {
        split: cfg.env_params(MarketData.from_episodes(splits.split(split)))
        for split in ("train", "val", "test")
    }
    dynamic = (
        {}
        if market is None
        else {
            split: dynamic_env_params(cfg, market, p, splits.stats) for split, p in params.items()
        }
    )
    label = f"PPO {splits.name}"
    trained_static = None
    distillation = None  # the metrics.json entry of a distillation teacher
    if mode != "static":
        trained_static = train_policy(
            cfg,
            static_env,
            params["train"],
            params["val"],
            progress=progress,
            description=f"{label} static",
            imagination=imagination,
        )
    if mode == "hybrid":
        trained = train_policy(
            cfg,
            static_env,
            params["train"],
            params["val"],
            progress=progress,
            description=f"{label} hybrid",
            dynamic=(DynamicExecutionEnv(), dynamic["train"]),
            hybrid=cfg.market.hybrid_config(),
            imagination=imagination,
        )
    elif mode == "dynamic":
        trained = train_policy(
            cfg,
            DynamicExecutionEnv(),
            dynamic["train"],
            dynamic["val"],
            progress=progress,
            description=f"{label} dynamic",
            imagination=imagination,
        )
    else:
        teacher = None
        if cfg.ppo.distill_coef > 0:  # policy distillation: the teacher first
            teacher, trained_teacher = train_teacher(
                cfg, static_env, params["train"], params["val"],
                oracle=cfg.ppo.distill_teacher == "oracle", progress=progress,
            )  # fmt: skip
            distillation = {
                "distill_coef": cfg.ppo.distill_coef,
                "distill_teacher": cfg.ppo.distill_teacher,
                "teacher": selection_entry(cfg, trained_teacher),
                "teacher_env_steps": trained_teacher.env_steps,
            }
        trained = train_policy(
            cfg, static_env, params["train"], params["val"], progress=progress,
            description=label, imagination=imagination, teacher=teacher,
        )  # fmt: skip
    policies = {"PPO": _ppo_policy(cfg, trained)}
    if trained_static is not None:
        policies["PPO-static"] = _ppo_policy(cfg, trained_static)
    policies.update(baseline_policies(cfg))
    days = splits.test.dates
    evaluated = {"static": evaluate_policies(cfg, static_env, params["test"], policies, days)}
    if dynamic:
        # the oracle knows the replayed day's volumes, which do not drive the simulated market
        in_dynamic = {k: v for k, v in policies.items() if k != ORACLE}
        evaluated["dynamic"] = evaluate_policies(
            cfg, make_env(dynamic["test"]), dynamic["test"], in_dynamic, days
        )
    results = evaluated["static"]

    out_dir.mkdir(parents=True, exist_ok=True)
    obs_size = static_env.observation_size(params["train"])
    save_policy(
        out_dir / "checkpoint",
        trained.policy_params,
        {
            "config": cfg.to_dict(),
            "obs_size": obs_size,
            "market": splits.name,
            "market_mode": mode,
            "selected_seed": trained.selected_seed,
            "validation_pa": trained.validation_pa.tolist(),
            "validation_shortfall": trained.validation_shortfall.tolist(),
            "feature_names": list(splits.train.feature_names),
        },
    )
    plot_training_curve(trained.curves, trained.selected_seed, out_dir / "training_curve.png")
    n_plot = min(cfg.eval.plot_days, splits.test.n_episodes)
    plot_days = np.linspace(0, splits.test.n_episodes - 1, n_plot).astype(int)
    plot_trajectories(
        {name: np.asarray(r.remaining)[plot_days] for name, (_, r) in results.items()},
        [f"{splits.test.symbols[i]} {splits.test.dates[i]}" for i in plot_days],
        out_dir / "trajectories.png",
    )
    side = float(params["test"].side)
    plot_pa_distribution(
        {name: price_advantage(r.outcomes(side)) for name, (_, r) in results.items()},
        out_dir / "pa_distribution.png",
    )
    steps_per_second = trained.env_steps / max(trained.train_seconds, 1e-9)
    entry = {
        "data": {
            "symbols": sorted(set(splits.train.symbols)),
            "slots_per_day": splits.train.n_slots,
            "episodes": {
                "train": splits.train.n_episodes,
                "val": splits.val.n_episodes,
                "test": splits.test.n_episodes,
            },
            "test_days": sorted({str(d) for d in splits.test.dates}),
            "load_report": splits.report.summary(),
        },
        "selection": selection_entry(cfg, trained),
        **({} if distillation is None else {"distillation": distillation}),
        "timing": {
            "compile_seconds": trained.compile_seconds,
            "train_seconds": trained.train_seconds,
            "env_steps": trained.env_steps,
            "env_steps_per_second": steps_per_second,
        },
        "market_mode": mode,
        "devices": trained.devices,
        "device_split": trained.device_split,
        # last update of the selected seed; null where no episode finished in it
        "curves_last": {
            k: _finite_or_none(np.asarray(v)[trained.selected_seed, -1])
            for k, v in trained.curves.items()
            if k in ("alpha", "beta", "order_pa_static", "order_pa_dynamic")
        },
        "policies": {name: m.to_dict() for name, (m, _) in results.items()},
    }
    if imagination is not None:
        out_of_bounds = np.asarray(trained.curves["imagined_out_of_bounds"])
        entry["imagination"] = {
            "program": cfg.imagine.program,
            "ratio": cfg.imagine.ratio,
            "imagined_share": imagined_share(splits.train.n_episodes, cfg.imagine.ratio),
            "out_of_bounds": float(out_of_bounds[trained.selected_seed].mean()),
        }
    if "dynamic" in evaluated:
        entry["policies_dynamic"] = {n: m.to_dict() for n, (m, _) in evaluated["dynamic"].items()}
    return entry, {market: {n: m for n, (m, _) in r.items()} for market, r in evaluated.items()}


def validated_program(
    spec: str, kind: str, setting: str, **checks: Any
) -> tuple[str, Callable | None]:
    """The validated program a config key names: ``(source code, entry point)``, or
    ``("", None)`` when ``spec`` is empty.

    The program is a name of the offline designer's library for ``kind``
    (:func:`llm.designs.library`) or a path to a ``.py`` file; it runs through both
    validation stages (in the sandbox) before it is defined in this process.

    Args:
        spec: the key's value.
        kind: the slot (``"imagination"``, ``"profiling"``).
        setting: the key's name, for messages (``imagine.program``).
        checks: passed to :func:`llm.validate.validate` (e.g. ``bounds``).

    Raises:
        ValueError: unknown name or unreadable file, or a program that validation rejects
            (naming the stage and the reason).
        SandboxError: the sandbox itself failed.
    """
    code = program_source(spec, kind, setting)
    if not code:
        return "", None
    verdict = validate(code, kind, **checks)
    if not verdict.ok:
        raise ValueError(f"{setting} {spec}: rejected at stage {verdict.stage}: {verdict.reason}")
    return code, load_validated(code, kind)


def imagination_program(cfg: Config) -> tuple[str, Callable | None]:
    """The validated program of ``cfg.imagine.program`` (:func:`validated_program`,
    checked with ``cfg.imagine``'s bounds)."""
    return validated_program(
        cfg.imagine.program, "imagination", "imagine.program", bounds=cfg.imagine.bounds()
    )


def train_ppo(cfg: Config, config_name: str, quiet: bool) -> int:
    """Plain PPO training on every market of ``cfg.data.markets`` (``--llm none``)."""
    try:
        _, imagine_fn = imagination_program(cfg)
    except (ValueError, SandboxError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        # every input is read before training starts, so bad input fails in seconds
        # the static market needs no calibrated background populations
        markets = [
            (
                calibrated_market(cfg, spec) if cfg.market.mode != "static" else None,
                load_splits(cfg, spec),
            )
            for spec in cfg.data.markets
        ]
    except (DataError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2

    def run_one(market_params, splits, out_dir):
        entry, test_metrics = run_market(
            cfg, market_params, splits, out_dir, progress=not quiet,
            imagination=make_imagination(cfg, imagine_fn, splits.stats),
        )  # fmt: skip
        rows = {
            (f"{splits.name} {kind}", policy): metrics
            for kind, by_policy in test_metrics.items()
            for policy, metrics in by_policy.items()
        }
        return entry, rows

    return write_run(
        cfg, f"{time.strftime('%Y%m%d-%H%M%S')}-{config_name}", markets, run_one, quiet
    )


def write_run(
    cfg: Config,
    name: str,
    markets: list[tuple[MarketParams | None, MarketSplits]],
    run_one: Callable,
    quiet: bool,
) -> int:
    """Runs every market into a run folder ``<run.out>/<name>`` assembled under
    ``.<name>.incomplete`` and renamed when whole: ``config.yaml``, ``metrics.json``
    (``{"run", "markets": {<market>: entry}}``) and ``results.txt`` (the table, also
    printed).

    Args:
        run_one: ``run_one(market_params, splits, out_dir) -> (entry, rows)``: the
            market's ``metrics.json`` entry and its table rows ``{(row, policy):
            ExecutionMetrics}``; it writes its artifacts into ``out_dir``.

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
            print(f"[{splits.name}] {splits.report.summary()}", file=sys.stderr)
        entry, rows = run_one(market_params, splits, staging / splits.name)
        report["markets"][splits.name] = entry
        table_rows.update(rows)
    table = format_table(table_rows)
    (staging / "metrics.json").write_text(json.dumps(report, indent=2, allow_nan=False))
    (staging / "results.txt").write_text(table + "\n")
    final = out_root / name
    staging.rename(final)
    print(table)
    print(f"run folder: {final}")
    return 0


def run_agents_market(
    cfg: Config,
    market: MarketParams,
    splits: MarketSplits,
    out_dir: Path,
    progress: bool,
    profile_fn: Callable | None = None,
    communication: Any = None,
) -> tuple[dict[str, Any], dict[tuple[str, str], ExecutionMetrics]]:
    """Trains ``cfg.marl.agents`` agents on one market (in the dynamic market, or with
    ``market.mode`` ``hybrid`` in the static and dynamic markets at once), scores them on
    test days of the dynamic market against every agent running TWAP, and writes the
    checkpoint into ``out_dir``.

    Returns:
        The market's entry of ``metrics.json`` (:func:`serl_jax.agents_experiment.agents_entry`)
        and the table rows (per agent, and the team's in the team scenario).
    """
    env = make_agents_env(cfg, profile_fn)
    static = {
        split: cfg.env_params(MarketData.from_episodes(splits.split(split)))
        for split in ("train", "val", "test")
    }
    params = {
        split: dynamic_env_params(cfg, market, p, splits.stats) for split, p in static.items()
    }
    label = f"{cfg.marl.algorithm.upper()} {splits.name} {cfg.market.mode}"
    trained = train_agents(
        cfg, env, params["train"], params["val"], progress, label, communication,
        static_train_params=static["train"] if cfg.market.mode == "hybrid" else None,
    )  # fmt: skip
    name = f"PPO-{cfg.marl.algorithm}" + ("-comm" if communication is not None else "")
    policy = make_marl_policy(
        trained.network, cfg.ppo.normalize_obs, cfg.network.prior(), communication
    )
    evaluated = evaluate_agents(
        cfg, env, params["test"], {name: (policy, trained.policy_params)}, splits.test.dates
    )
    save_agents_checkpoint(
        out_dir / "checkpoint", cfg, env, params["train"], splits, trained,
        cfg.marl.communication,
    )  # fmt: skip
    rows = {}
    for i in range(cfg.marl.agents):
        for policy_name, result in evaluated.items():
            rows[(f"{splits.name} agent {i}", policy_name)] = result.agents[i]
    if cfg.marl.scenario == "team":
        for policy_name, result in evaluated.items():
            rows[(f"{splits.name} team", policy_name)] = result.team
    return agents_entry(cfg, trained, evaluated, splits.test.n_episodes), rows


def train_agents_markets(cfg: Config, config_name: str, quiet: bool) -> int:
    """N agents (IPPO or MAPPO) on every market of ``cfg.data.markets`` (``--llm none
    --agents N``), in the dynamic or hybrid market (``market.mode``); the run folder as
    :func:`train_ppo`'s."""
    try:
        _, profile_fn = validated_program(cfg.marl.profile, "profiling", "marl.profile")
        _, communication = validated_program(
            cfg.marl.communication, "communication", "marl.communication"
        )
    except (ValueError, SandboxError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        markets = [
            (calibrated_market(cfg, spec), load_splits(cfg, spec)) for spec in cfg.data.markets
        ]
    except (DataError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2

    def run_one(market_params, splits, out_dir):
        return run_agents_market(
            cfg, market_params, splits, out_dir, not quiet, profile_fn, communication
        )

    name = f"{time.strftime('%Y%m%d-%H%M%S')}-{config_name}-agents"
    return write_run(cfg, name, markets, run_one, quiet)


def backend_options(cfg: Config, n_candidates: int) -> dict[str, Any]:
    """Constructor options of the ``loop.llm`` backend.

    The offline designer is seeded with ``run.seed`` plus the number of candidates
    already recorded, so a resumed run continues with fresh proposals instead of
    replaying the first ones.
    """
    kind = cfg.loop.llm.partition(":")[0].lower()
    if kind == "offline":
        return {"seed": cfg.run.seed + n_candidates}
    if kind == "openai" and cfg.loop.model:
        return {"model": cfg.loop.model}
    if kind == "hf":
        loop = cfg.loop
        return {"device": loop.hf_device, "dtype": loop.hf_dtype, "threads": loop.hf_threads}
    return {}


def share_accelerator(cfg: Config) -> None:
    """Stop XLA from preallocating 75% of GPU memory at its first computation in an SE-RL
    run (an explicit ``XLA_PYTHON_CLIENT_PREALLOCATE`` or ``XLA_PYTHON_CLIENT_MEM_FRACTION``
    wins). Several processes share the accelerator there: the loop's own process, the
    spawned workers that train candidates (:mod:`serl_jax.loop.workers`) and, with an
    ``hf:`` designer, a PyTorch model. With preallocation the first takes 75% and the next
    cannot start (measured on an H100, 2026-11-23: j0 failed with CUDA_ERROR_OUT_OF_MEMORY
    while XLA autotuned the worker's first update). Plain PPO (``--llm none``) runs in one
    process and keeps preallocation. Must run before JAX's first computation in the
    process; spawned workers inherit the setting."""
    if cfg.loop.llm.strip().lower() != "none":
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def make_low_level(cfg: Config, backend: Any) -> Any:
    """The low-level DEK trainer for ``dek.level`` low/both (None otherwise).

    Raises:
        BackendError: the designer is not a local ``hf:`` model (LoRA needs its weights).
    """
    if cfg.dek.level not in ("low", "both"):
        return None
    if backend.name != "hf":
        raise BackendError(
            f"dek.level={cfg.dek.level} fine-tunes a local model with LoRA: it needs "
            f"--llm hf:<path>, not {cfg.loop.llm}"
        )
    from llm.dek.low_level import LoRAConfig, LowLevelDEK

    d = cfg.dek
    lora = LoRAConfig(
        rank=d.lora_rank, alpha=d.lora_alpha, dropout=d.lora_dropout,
        target_modules=d.target_modules, lr=d.lr, optimizer=d.optimizer,
        weight_decay=d.weight_decay, max_grad_norm=d.max_grad_norm, baseline=d.baseline,
        baseline_decay=d.baseline_decay, kl_coef=d.kl_coef,
        normalize_advantages=d.normalize_advantages, steps=d.steps, seed=cfg.run.seed,
    )  # fmt: skip
    return LowLevelDEK(backend, lora)


def run_serl(
    cfg: Config, config_name: str, resume: Path | None, quiet: bool, root: Path | None = None
) -> int:
    """The SE-RL loop (new run or ``--resume``); returns the exit code.

    Args:
        cfg: the run configuration.
        config_name: names a new run folder ``<run.out>/<time>-<config_name>``.
        resume: an existing run folder to continue, or None.
        quiet: no progress output.
        root: the new run folder itself (instead of a timestamped one under ``run.out``).
    """
    log = None if quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    try:
        splits = load_splits(cfg, cfg.loop.market)
        # The designer is built before a new run folder exists, so a bad spec leaves none.
        store = RunStore.open(resume) if resume is not None else None
        done = len(store.candidates()) if store is not None else 0
        backend = make_backend(cfg.loop.llm, **backend_options(cfg, done))
        low_level = make_low_level(cfg, backend)
        # The reference candidate's programs (validated), needed before it is proposed.
        reference = {"imagination_code": "", "profiling_code": "", "communication_code": ""}
        if done == 0:
            reference["imagination_code"] = imagination_program(cfg)[0]
            reference["profiling_code"] = validated_program(
                cfg.marl.profile, "profiling", "marl.profile"
            )[0]
            reference["communication_code"] = validated_program(
                cfg.marl.communication, "communication", "marl.communication"
            )[0]
        if store is None:
            if root is None:
                root = Path(cfg.run.out) / f"{time.strftime('%Y%m%d-%H%M%S')}-{config_name}"
            yaml_text = yaml.safe_dump(cfg.to_dict(), sort_keys=False)
            store = RunStore.create(root, cfg.to_dict(), yaml_text)
    except (DataError, StoreError, BackendError, SandboxError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if log:
        log(f"[{splits.name}] {splits.report.summary()}")
        log(f"run folder: {store.root} (designer: {cfg.loop.llm})")
    data = MarketData.from_episodes(splits.train)
    loop = SERLLoop(
        cfg,
        backend,
        store,
        obs_dim=ExecutionEnv().observation_size(cfg.env_params(data)),
        num_features=data.num_features,
        **reference,
        low_level=low_level,
        log=log,
    )
    try:
        with backend:
            outcome = loop.run()
    except (BackendError, SandboxError) as err:
        # the designer or the validation sandbox failed, not a candidate: stop, resumable
        print(f"error: {err}", file=sys.stderr)
        print(f"the run can be resumed: python -m serl_jax.train --resume {store.root}",
              file=sys.stderr)  # fmt: skip
        return 3
    table = write_report(cfg, store, outcome, splits)
    print(table)
    label = LOOP_SCORES[cfg.loop.score]
    print(f"best candidate: {outcome.best.id} (validation {label} {outcome.best.score:.2f} bps)")
    print(f"run folder: {store.root}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the process exit code (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m serl_jax.train", description=__doc__.split("\n\n")[0].strip('"`')
    )
    parser.add_argument("--config", help="YAML preset (default: built-in defaults)")
    parser.add_argument(
        "--llm",
        help="designer backend: offline (default), hf:<path or model name>, "
        "openai:<base_url>, scripted:<file.json>, or none for plain PPO",
    )
    parser.add_argument("--model", help="model name for an openai:<base_url> server")
    parser.add_argument("--iterations", type=int, help="J_max, the most outer iterations")
    parser.add_argument("--candidates", type=int, help="K, candidates per outer iteration")
    parser.add_argument("--workers", type=int, help="candidates trained at once (processes)")
    parser.add_argument(
        "--modules",
        help="comma-separated slots the designer writes: reward, network, imagination; "
        "with --agents N > 1 also profiling, communication (default: loop.modules, "
        "reward,network; with --agents N > 1 reward,network,profiling,communication)",
    )
    parser.add_argument(
        "--dek",
        choices=["off", "high", "low", "both"],
        help="DEK levels: high = in-context examples + instruction refinement, "
        "low = LoRA fine-tuning of an hf: model (default: dek.level)",
    )
    parser.add_argument(
        "--env",
        choices=["static", "dynamic", "hybrid"],
        help="market PPO trains in with --llm none (default: market.mode, hybrid)",
    )
    parser.add_argument(
        "--agents",
        type=int,
        help="N execution agents (default: marl.agents, 1); with N > 1 they train in the "
        "dynamic market (no --env) or with --env hybrid in both markets",
    )
    parser.add_argument(
        "--marl", choices=["ippo", "mappo"], help="multi-agent PPO (default: marl.algorithm)"
    )
    parser.add_argument(
        "--scenario",
        choices=["independent", "team"],
        help="agents with their own parent orders, or one shared (default: marl.scenario)",
    )
    parser.add_argument(
        "--comm",
        action="store_true",
        help="the agents send messages (marl.communication; default program linear_message)",
    )
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue an SE-RL run folder")
    parser.add_argument("--data", help="one dataset (folder or file) instead of the samples")
    parser.add_argument("--out", help="parent folder of run folders (default: run.out)")
    parser.add_argument("--seed", type=int, help="master seed (default: run.seed)")
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    parser.add_argument("overrides", nargs="*", metavar="section.key=value")
    args = parser.parse_args(argv)

    flags = {
        "loop.llm": args.llm, "loop.model": args.model, "loop.iterations": args.iterations,
        "loop.candidates": args.candidates, "loop.workers": args.workers,
        "loop.modules": None if args.modules is None else args.modules.split(","),
        "dek.level": args.dek, "market.mode": args.env,
        "run.seed": args.seed, "run.out": args.out,
        "marl.agents": args.agents, "marl.algorithm": args.marl, "marl.scenario": args.scenario,
    }  # fmt: skip
    if args.agents is not None and args.agents > 1 and args.env is None:
        flags["market.mode"] = "dynamic"  # the agents' default market (--env hybrid: both)
    overrides = [f"{k}={json.dumps(v)}" for k, v in flags.items() if v is not None]
    if args.data is not None:
        overrides += [
            f"data.markets=[{json.dumps(args.data)}]",
            f"loop.market={json.dumps(args.data)}",
        ]
    overrides += args.overrides
    if args.resume is not None:
        if overrides or args.config:
            print("error: --resume continues a run with its own config; "
                  "drop the other options", file=sys.stderr)  # fmt: skip
            return 2
        try:
            store = RunStore.open(args.resume)
            cfg = saved_run_config(store.meta("config"))
            store.close()
        except (StoreError, ConfigError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        share_accelerator(cfg)
        return run_serl(cfg, "", Path(args.resume), args.quiet)
    try:
        cfg = load_config(args.config, overrides)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.comm and not cfg.marl.communication:
        cfg = dataclasses.replace(
            cfg, marl=dataclasses.replace(cfg.marl, communication=library("communication")[0].name)
        )
    config_name = Path(args.config).stem if args.config else "default"
    share_accelerator(cfg)
    if cfg.loop.llm.strip().lower() == "none":
        if cfg.marl.agents > 1:
            return train_agents_markets(cfg, config_name, args.quiet)
        return train_ppo(cfg, config_name, args.quiet)
    return run_serl(cfg, f"{config_name}-serl", None, args.quiet)


if __name__ == "__main__":
    sys.exit(main())
