"""PPO training across several devices: seeds or parallel episodes sharded with
``jax.sharding`` (a one-axis :class:`~jax.sharding.Mesh` and
:class:`~jax.sharding.NamedSharding`).

:func:`plan_devices` chooses what to split. Seeds first: every seed is an independent
training run, so ``S`` seeds on ``D`` devices (``D`` dividing ``S``) is ``S / D`` runs per
device and no communication. Otherwise the parallel episodes of every seed (``D``
dividing ``ppo.num_envs``; the static trainer only): each device steps its share of the
episodes and XLA inserts the cross-device reductions of the update (advantage
statistics, minibatch gathers, gradient means), so the result equals the one-device
run up to floating-point summation order. The train state itself is replicated.

:func:`shard_runner` places a trainer's state on the plan's mesh; the jitted update
keeps that placement (:func:`constrain_runner` inside the update). One process drives
all local devices; several hosts (a TPU slice, a multi-node GPU cluster) each call
``jax.distributed.initialize()`` first, after which ``jax.devices()`` lists every host's
devices and the same code shards over all of them: :func:`start_processes`
(``run.distributed``) does that, and :func:`to_host` brings a result sharded over
several processes back whole to every process, which then goes on alone (seed
selection, evaluation and writing run on each process's own copy).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.extend.backend
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from serl_jax.rl.ppo import RunnerState

AXIS = "devices"


@dataclass(frozen=True)
class DevicePlan:
    """Where a training run goes.

    Attributes:
        n_devices: devices used (1: no mesh).
        split: ``"none"``, ``"seeds"`` or ``"episodes"`` (the axis spread over them).
        mesh: the one-axis mesh (axis :data:`AXIS`), or None for one device.
    """

    n_devices: int
    split: str
    mesh: Mesh | None


def plan_devices(
    num_seeds: int, num_episodes: int | None, requested: int = 0, devices: Any = None
) -> DevicePlan:
    """Chooses the devices and the axis to split for ``num_seeds`` seeds of
    ``num_episodes`` parallel episodes each.

    Args:
        num_seeds: seeds trained at once (``run.num_seeds``).
        num_episodes: parallel episodes per seed, or None when the trainer's episodes
            cannot be split (the hybrid trainer: seeds only).
        requested: ``run.devices``; 0 uses as many of the visible devices as divide the
            seeds or the episodes (the largest such count).
        devices: the devices to use (default ``jax.devices()``).

    Returns:
        A :class:`DevicePlan`; seeds are split when the device count divides them, else
        episodes.

    Raises:
        ValueError: ``requested`` is negative, larger than the visible devices, or divides
            neither the seeds nor the episodes.
    """
    visible = list(jax.devices() if devices is None else devices)
    if requested < 0 or requested > len(visible):
        raise ValueError(
            f"run.devices={requested}: expected 0 (all) to {len(visible)} (the visible devices)"
        )

    def divides(n: int) -> bool:
        return num_seeds % n == 0 or (num_episodes is not None and num_episodes % n == 0)

    if requested:
        if not divides(requested):
            episodes = "" if num_episodes is None else f" nor the {num_episodes} episodes"
            raise ValueError(
                f"run.devices={requested}: divides neither run.num_seeds={num_seeds}{episodes}"
            )
        n = requested
    else:
        n = max(k for k in range(1, len(visible) + 1) if divides(k))
    if n == 1:
        return DevicePlan(1, "none", None)
    split = "seeds" if num_seeds % n == 0 else "episodes"
    return DevicePlan(n, split, Mesh(np.array(visible[:n]), (AXIS,)))


def _runner_specs(runner: Any, split: str) -> Any:
    """A :class:`~jax.sharding.PartitionSpec` per leaf of a vmapped (``[S, ...]``) runner."""
    if split == "seeds":
        return jax.tree.map(lambda _: PartitionSpec(AXIS), runner)
    if not isinstance(runner, RunnerState):
        raise ValueError(
            f"episode sharding needs the static trainer's RunnerState, got {type(runner).__name__}"
        )
    episodes = PartitionSpec(None, AXIS)  # [S, N, ...]: the episodes of every seed
    replicated = PartitionSpec()
    return RunnerState(
        train_state=jax.tree.map(lambda _: replicated, runner.train_state),
        env_state=jax.tree.map(lambda _: episodes, runner.env_state),
        obs=episodes,
        obs_stats=jax.tree.map(lambda _: replicated, runner.obs_stats),
        episode_return=episodes,
        key=replicated,
    )


def _shardings(runner: Any, plan: DevicePlan) -> Any:
    """A :class:`~jax.sharding.NamedSharding` per leaf of ``runner`` on the plan's mesh."""
    specs = _runner_specs(runner, plan.split)
    return jax.tree.map(lambda spec: NamedSharding(plan.mesh, spec), specs)


def shard_runner(runner: Any, plan: DevicePlan) -> Any:
    """``runner`` (a trainer's state with a leading ``[num_seeds]`` axis) placed on the
    plan's devices; unchanged for one device. With several processes every process
    holds the same state (same seeds), and each places its own devices' share.

    Raises:
        ValueError: episode sharding of a state that is not a :class:`RunnerState`.
    """
    if plan.mesh is None:
        return runner
    if jax.process_count() > 1:  # from host memory, which every process holds whole
        runner = jax.device_get(runner)
    return jax.device_put(runner, _shardings(runner, plan))


def to_host(tree: Any) -> Any:
    """``tree``'s arrays as whole NumPy arrays on the host, also those sharded over
    several processes' devices (gathered from every process: every process must call
    this together)."""

    def whole(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return np.asarray(multihost_utils.process_allgather(x, tiled=True))
        return np.asarray(x)

    return jax.tree.map(whole, tree)


def start_processes(coordinator_address: str = "", num_processes: int = 0, process_id: int = -1):
    """Joins this process to a multi-process JAX run (``jax.distributed.initialize``),
    after which ``jax.devices()`` lists every process's devices and training shards
    over all of them. Call it before anything touches a device. A no-op when already
    joined.

    Args:
        coordinator_address: ``host:port`` of process 0's coordinator; "" reads
            ``JAX_COORDINATOR_ADDRESS`` or the cluster's own variables (SLURM, Open MPI,
            Cloud TPU), as JAX does.
        num_processes: processes in the run; 0: from the cluster's variables.
        process_id: this process's index in ``[0, num_processes)``; -1: from the
            cluster's variables.

    Raises:
        ValueError, RuntimeError: what ``jax.distributed.initialize`` raises (no cluster
            found, a coordinator that does not answer).
    """
    if jax.distributed.is_initialized():
        return
    # Importing gymnax builds arrays at module level (FrozenLake's moves), which starts
    # a one-process backend that JAX refuses to extend; nothing of ours holds an array
    # yet, so the backend is dropped and rebuilt with every process's devices.
    jax.extend.backend.clear_backends()
    # CPU devices of several processes reduce through gloo; GPUs and TPUs use their own.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address or None,
        num_processes or None,
        process_id if process_id >= 0 else None,
    )


def constrain_runner(runner: Any, plan: DevicePlan) -> Any:
    """Inside a jitted update: keeps the runner on the plan's placement (a no-op for one
    device), so that every chunk of updates starts and ends with the same sharding."""
    if plan.mesh is None:
        return runner
    return jax.lax.with_sharding_constraint(runner, _shardings(runner, plan))
