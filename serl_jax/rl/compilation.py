"""Compiling a program that runs once: a training run's initialization.

A candidate's training compiles two programs (:func:`serl_jax.experiment.train_candidates`):
the lanes' initialization (network parameters, optimizer state, first observations),
run once, and a chunk of ``run.progress_chunk`` PPO updates, run over and over. In the
search's short stage the initialization's compilation is a large share of a candidate's
time: every parameter is drawn with its own threefry call, a long chain of integer
operations that LLVM optimizes at length for a program that then runs for milliseconds.
At XLA's backend optimization level 0 it compiles in 0.5–0.7x the seconds on the 2-core
CPU (``benchmarks/bench_compile.py``: 1.48 -> 1.05 s for the default network, 5.57 ->
2.69 s for six networks behind a switch, 2026-12-02) and gives the same parameters:
bit-identical for uniform initializers (the default network's), within a few units in
the last place for normal ones (``tests/test_compilation.py``). The
chunk keeps the default optimization: there the training time goes (level 0 compiled it
in 0.86x the seconds and ran it 2.8x slower).
"""

from __future__ import annotations

from typing import Any

import jax

__all__ = ["LIGHT_COMPILE_OPTIONS", "compile_lightly"]

#: XLA options for a program that runs once: no backend (LLVM) optimization.
LIGHT_COMPILE_OPTIONS: dict[str, Any] = {"xla_backend_optimization_level": 0}


def compile_lightly(lowered: jax.stages.Lowered) -> jax.stages.Compiled:
    """``lowered.compile()`` with :data:`LIGHT_COMPILE_OPTIONS`, for a program whose
    compile seconds outweigh its run seconds (a training run's initialization).

    Args:
        lowered: a lowered program (``jax.jit(f).lower(*args)``).

    Returns:
        The compiled program; call it with arguments of the lowered shapes and dtypes.
    """
    return lowered.compile(compiler_options=LIGHT_COMPILE_OPTIONS)
