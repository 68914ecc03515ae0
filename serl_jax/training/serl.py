"""The SE-RL loop as ``python -m serl_jax.train`` runs it (a new run or ``--resume``):
the designer backend and the low-level DEK built from the config, the run folder, the
loop, and its report."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from llm.backends import BackendError, make_backend
from llm.validate import SandboxError
from serl_jax.config import LOOP_SCORES, Config, LoopConfig
from serl_jax.data import DataError
from serl_jax.envs.execution import ExecutionEnv
from serl_jax.envs.market_data import MarketData
from serl_jax.experiment import load_splits
from serl_jax.loop import RunStore, SERLLoop, SERLSearch, StoreError
from serl_jax.loop.dispatch import local_worker_processes
from serl_jax.loop.report import write_report
from serl_jax.loop.search import seed_designs
from serl_jax.training.programs import imagination_program, validated_program

__all__ = [
    "JAX_SHARE_BESIDE_HF",
    "backend_options",
    "make_low_level",
    "run_serl",
    "share_accelerator",
]


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
        return {
            "device": loop.hf_device, "dtype": loop.hf_dtype,
            "quantize": loop.hf_quantize, "threads": loop.hf_threads,
        }  # fmt: skip
    return {}


JAX_SHARE_BESIDE_HF = 0.8
"""Share of a GPU's memory that an SE-RL run's JAX processes split among them when an
``hf:`` designer runs on the same GPU; the rest is left to the PyTorch model."""

_MEM_FRACTION_VARS = ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION")


def share_accelerator(loop: LoopConfig) -> None:
    """Let the processes of an SE-RL run share one GPU: set XLA's allocator variables
    before JAX's first computation (spawned workers inherit them; an explicit setting
    wins).

    - ``XLA_PYTHON_CLIENT_PREALLOCATE=false``: the loop's own process, the spawned workers
      that train candidates (:mod:`serl_jax.loop.workers`) and an ``hf:`` model share
      the device. With preallocation the first takes 75% and the next cannot start
      (measured on an H100, 2026-11-23: j0 failed with CUDA_ERROR_OUT_OF_MEMORY while XLA
      autotuned the worker's first update).
    - With an ``hf:`` designer not on the CPU, also ``XLA_CLIENT_MEM_FRACTION`` =
      :data:`JAX_SHARE_BESIDE_HF` / (JAX processes): without preallocation XLA's pool
      still grows to most of the device and keeps it, and the PyTorch model found none
      (measured on an H100, 2026-11-26, ``configs/gpu.yaml`` with the 1.5B: the first
      generate call after j0 failed with CUDA out of memory; at 0.4 for each of the two
      JAX processes the run finished). The JAX processes are this one and, when the loop
      trains candidates in local worker processes, ``loop.workers`` more.

    Plain PPO (``--llm none``) runs in one process and calls none of this.

    Args:
        loop: the run's loop settings (``llm``, ``hf_device``, ``workers``,
            ``train_budget_s``, ``executor``).
    """
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    hf_on_gpu = loop.llm.strip().lower().startswith("hf:") and loop.hf_device != "cpu"
    if not hf_on_gpu or any(os.environ.get(v) for v in _MEM_FRACTION_VARS):
        return
    local = loop.executor == "local"
    processes = 1 + (local_worker_processes(loop.workers, loop.train_budget_s) if local else 0)
    os.environ["XLA_CLIENT_MEM_FRACTION"] = f"{JAX_SHARE_BESIDE_HF / processes:.3f}"


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
        gradient_checkpointing=d.gradient_checkpointing,
    )  # fmt: skip
    return LowLevelDEK(backend, lora)


def run_serl(
    cfg: Config,
    config_name: str,
    resume: Path | None,
    quiet: bool,
    root: Path | None = None,
    verbose: bool = False,
    wide: bool = False,
) -> int:
    """The SE-RL loop (new run or ``--resume``); returns the exit code.

    Args:
        cfg: the run configuration.
        config_name: names a new run folder ``<run.out>/<time>-<config_name>``.
        resume: an existing run folder to continue, or None.
        quiet: no progress output.
        root: the new run folder itself (instead of a timestamped one under ``run.out``).
        verbose: the load report per symbol (default: one summary line).
        wide: print every column of the test days' table (``results.txt`` has them all).
    """
    log = None if quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    try:
        splits = load_splits(cfg, cfg.loop.market)
        # The designer is built before a new run folder exists, so a bad spec leaves none.
        store = RunStore.open(resume) if resume is not None else None
        done = len(store.candidates()) if store is not None else 0
        backend = make_backend(cfg.loop.llm, **backend_options(cfg, done))
        low_level = make_low_level(cfg, backend)
        if cfg.search.enabled:
            seed_designs(cfg.loop.modules, cfg.search.library)  # a bad name: no run folder
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
        log(f"[{splits.name}] {splits.report.summary(verbose)}")
        log(f"run folder: {store.root} (designer: {cfg.loop.llm})")
    data = MarketData.from_episodes(splits.train)
    driver = SERLSearch if cfg.search.enabled else SERLLoop
    loop = driver(
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
    print(write_report(cfg, store, outcome, splits, wide=wide))
    label = LOOP_SCORES[cfg.loop.score]
    print(f"best candidate: {outcome.best.id} (validation {label} {outcome.best.score:.2f} bps)")
    print(f"run folder: {store.root}")
    return 0
