"""Running candidate programs: in this process, in local worker processes or on a Ray
cluster, batched, with a wall-clock budget and a persistent compilation cache.

:class:`ProgramEvaluator` sends each program to its evaluator, the single-agent one
(:func:`serl_jax.loop.evaluation.evaluate_program`, or
:func:`serl_jax.loop.evaluation.evaluate_batch` for programs that train together) or
the multi-agent one (:func:`serl_jax.loop.agents_evaluation.evaluate_agents_program`),
so both evaluators sit below it and neither imports the other's caller.

On a Ray cluster (``loop.executor: ray``, :mod:`serl_jax.loop.ray_pool`) a job may run on
another machine, whose file system need not hold the run folder: the job writes its
programs' checkpoints to a temporary folder and sends them back as tar archives, which
the driver unpacks into the run folder, so the driver alone writes the run store. The
market (``sample:<name>`` or a path) must be readable at the same path on every node (a
shared file system, as under SLURM).
"""

from __future__ import annotations

import importlib.util
import io
import json
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import jax
from jax.experimental.compilation_cache.compilation_cache import reset_cache

from serl_jax.loop.agents_evaluation import evaluate_agents_program
from serl_jax.loop.evaluation import ProgramResult, _failed, evaluate_batch, evaluate_program
from serl_jax.loop.workers import WorkerPool
from serl_jax.rl.networks import action_set_key, network_code_key

__all__ = ["ProgramEvaluator", "compilation_cache", "local_worker_processes", "plan_jobs"]


@contextmanager
def compilation_cache(directory: str | Path | None) -> Iterator[None]:
    """Uses JAX's persistent compilation cache in ``directory`` while active (restoring
    the previous setting after), so a resumed run or a repeated program reloads compiled
    XLA executables instead of compiling again. ``None``: no change.

    JAX opens its cache once per process and keeps writing to that folder whatever the
    setting says later, so the cache is reset on entry and on exit: programs compiled
    after the context neither read nor write ``directory``."""
    if directory is None:
        yield
        return
    previous = jax.config.jax_compilation_cache_dir
    jax.config.update("jax_compilation_cache_dir", str(directory))
    reset_cache()
    try:
        yield
    finally:
        jax.config.update("jax_compilation_cache_dir", previous)
        reset_cache()


def local_worker_processes(workers: int, budget_s: float) -> int:
    """How many worker processes the local executor starts: ``workers`` when candidates
    train apart from the driver (several at once, or under a wall-clock budget, which
    needs a process to stop), else 0 (they train in the driver's process)."""
    return int(workers) if int(workers) > 1 or float(budget_s) > 0 else 0


def _init_worker(cache_dir: str | None) -> None:
    if cache_dir is not None:
        jax.config.update("jax_compilation_cache_dir", cache_dir)


def _is_multi_agent(task: tuple) -> bool:
    """The task is a multi-agent program (``marl.agents > 1`` in its config)."""
    return int((task[0].get("marl") or {}).get("agents", 1)) > 1


def _evaluate_job(job: list[tuple]) -> list[ProgramResult] | None:
    """One unit of work: a single program, or a batch of programs that train together
    (:func:`plan_jobs`; ``None``: the batch failed as a whole)."""
    if _is_multi_agent(job[0]):
        return [evaluate_agents_program(*job[0])]
    if len(job) == 1:
        return [evaluate_program(*job[0])]
    config, market = job[0][:2]
    programs, dirs = [(t[2], t[3]) for t in job], [t[4] for t in job]
    return evaluate_batch(config, market, programs, dirs, _imagination_code(job[0]))


def _evaluate_job_shipped(job: list[tuple]) -> tuple[list[ProgramResult] | None, list]:
    """:func:`_evaluate_job` on a machine that may not see the run folder: each program's
    artifacts (``checkpoint/``) go to a temporary folder and come back as a tar archive
    (``None`` for a program without artifacts), for :func:`_unpack` in the driver."""
    with tempfile.TemporaryDirectory(prefix="serl-job-") as tmp:
        here = [
            (*t[:4], None if t[4] is None else str(Path(tmp) / str(k)), *t[5:])
            for k, t in enumerate(job)
        ]
        results = _evaluate_job(here)
        return results, [_pack(Path(t[4])) if t[4] is not None else None for t in here]


def _pack(folder: Path) -> bytes | None:
    """``folder``'s files as a gzipped tar archive (``None``: no such folder)."""
    if not folder.is_dir():
        return None
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(folder.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(folder)), recursive=False)
    return buffer.getvalue()


def _unpack(archive: bytes, folder: str) -> None:
    """Writes an archive of :func:`_pack` into ``folder`` (the ``data`` filter refuses
    absolute paths, links out of the folder and special files)."""
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        tar.extractall(folder, filter="data")


def _imagination_code(task: tuple) -> str:
    """A task's imagination code (its optional sixth argument)."""
    return task[5] if len(task) > 5 else ""


def plan_jobs(
    tasks: list[tuple], batch: int, switch_networks: bool = False, workers: int = 1
) -> list[list[int]]:
    """Groups programs that can train in one compiled program: the same config, market
    and imagination code, and network code equal up to the declared prior anchor
    (:func:`serl_jax.rl.networks.network_code_key`; so they differ in the reward and the
    anchor only) or, with ``switch_networks``, any networks that declare the same action
    set (:func:`serl_jax.rl.networks.action_set_key`; they train behind a
    :class:`~serl_jax.rl.network_switch.NetworkSwitch`), at most ``batch`` per group, in
    the order the groups first appear. A multi-agent program trains alone.

    With fewer groups than ``workers``, groups are split into consecutive parts of
    near-equal size, one more part at a time for the group whose largest part is the
    largest (the first of equals), until there are ``workers`` groups or every group is
    one program, so no worker waits while another compiles a whole batch: a
    short-stage batch's time is mostly compiling on a GPU (89% on an H200, 2026-11-28),
    and K programs compile in less time than 2K.

    Args:
        tasks: the arguments of :func:`evaluate_program` per program (of
            :func:`serl_jax.loop.agents_evaluation.evaluate_agents_program` for a
            multi-agent one).
        batch: the most programs per group (1: every program alone).
        switch_networks: group programs with different networks too.
        workers: groups trained at once (``loop.workers``).

    Returns:
        Lists of task indices covering every task once.
    """
    groups: dict[str, list[list[int]]] = {}
    order: list[list[int]] = []
    for i, task in enumerate(tasks):
        if _is_multi_agent(task):
            order.append([i])
            continue
        config, market, _, network_code = task[:4]
        network = (action_set_key if switch_networks else network_code_key)(network_code)
        key = json.dumps([config, market, network, _imagination_code(task)], sort_keys=True)
        chunks = groups.setdefault(key, [])
        if not chunks or len(chunks[-1]) >= batch:
            chunks.append([])
            order.append(chunks[-1])
        chunks[-1].append(i)
    parts = [1] * len(order)
    while sum(parts) < workers and order:
        j = max(range(len(order)), key=lambda j: -(-len(order[j]) // parts[j]))
        if len(order[j]) <= parts[j]:
            break  # every job is one program a part
        parts[j] += 1
    return [chunk for job, p in zip(order, parts, strict=True) for chunk in _split(job, p)]


def _split(job: list[int], parts: int) -> list[list[int]]:
    """``job`` in ``parts`` consecutive pieces whose sizes differ by at most one, the
    larger first."""
    size, extra = divmod(len(job), parts)
    bounds = [k * size + min(k, extra) for k in range(parts + 1)]
    return [job[bounds[k] : bounds[k + 1]] for k in range(parts)]


class ProgramEvaluator:
    """Runs :func:`evaluate_program` on a batch of programs, in this process
    (``workers=1`` without a budget), in spawned worker processes, or on Ray actors
    (``executor="ray"``), so several candidates are in flight at once and each can be
    stopped at its budget; compiled programs go to a persistent cache when ``cache_dir``
    is set (local processes only: a Ray actor's node may not see the run folder).

    Programs that differ only in their reward and prior anchor (with
    ``switch_networks``, also in their network) train together, up to ``batch`` in one
    compiled program (:func:`evaluate_batch`; one compilation instead of K).
    A batch that fails as a whole (a candidate's code raised, the batch overran its
    budget or its worker died) is trained again one program at a time, so that each
    candidate is scored for its own fault only.

    :meth:`evaluate` yields each result as soon as it is ready (in-process: lazily, one
    unit at a time), so the caller can record it before the next one finishes and a
    kill loses at most the programs in flight. Each worker process keeps its loaded
    market and JAX's in-memory caches between programs. Use as a context manager.

    Args:
        workers: units (programs or batches) trained at once (each in its own process when
            > 1).
        cache_dir: JAX's persistent compilation cache, or ``None``.
        budget_s: wall-clock seconds per program (compile, training and scoring) after
            which its worker process is killed and the program scored as failed with the
            reason (a batch of K gets K times the budget); 0: no budget.
        batch: the most programs trained in one compiled program (1: one at a time).
        switch_networks: programs with different networks train together too
            (:func:`plan_jobs`; ``loop.switch_networks``).
        executor: ``"local"`` (this machine's processes) or ``"ray"`` (``workers`` Ray
            actors, :class:`serl_jax.loop.ray_pool.RayPool`; a job that raises or whose
            actor dies fails alone, with the reason).
        ray_address, ray_num_cpus, ray_num_gpus: the cluster and each actor's resources
            (``executor="ray"``).

    Raises:
        ImportError: ``executor="ray"`` without Ray installed (one line, naming the extra).
        ConnectionError: no Ray cluster at ``ray_address``.
    """

    def __init__(
        self,
        workers: int = 1,
        cache_dir: str | Path | None = None,
        budget_s: float = 0.0,
        batch: int = 1,
        *,
        switch_networks: bool = False,
        executor: str = "local",
        ray_address: str = "auto",
        ray_num_cpus: float = 1.0,
        ray_num_gpus: float = 0.0,
    ):
        self.workers = int(workers)
        self.budget_s = float(budget_s)
        self.batch = int(batch)
        self.switch_networks = switch_networks
        self.remote = executor == "ray"
        if self.remote:
            if importlib.util.find_spec("ray") is None:
                raise ImportError('loop.executor=ray needs Ray: pip install -e ".[distributed]"')
            from serl_jax.loop.ray_pool import RayPool  # only this executor needs Ray

            self._pool = RayPool(
                self.workers, _init_worker, (None,), address=ray_address,
                num_cpus=ray_num_cpus, num_gpus=ray_num_gpus,
            )  # fmt: skip
            cache_dir = None  # an actor's node may not see the run folder
        else:
            cache = None if cache_dir is None else str(cache_dir)
            self._pool = (
                WorkerPool(self.workers, _init_worker, (cache,))
                if local_worker_processes(self.workers, self.budget_s)
                else None
            )
        self._cache = compilation_cache(cache_dir)
        self._cache.__enter__()

    def evaluate(self, tasks: list[tuple]) -> Iterator[tuple[int, ProgramResult]]:
        """Yields ``(index, result)`` for each task (the arguments of
        :func:`evaluate_program`), in completion order. A program stopped at its budget,
        or whose worker died, gives a failed result saying so.

        Raises:
            Exception: what :func:`evaluate_program` raises (bad data or config).
            RuntimeError: a worker process could not start.
        """
        jobs = plan_jobs(tasks, self.batch, self.switch_networks, self.workers)
        retry: list[int] = []
        for job, results, failure in self._run(tasks, jobs):
            if results is not None:
                yield from zip(job, results, strict=True)
            elif len(job) > 1:
                retry.extend(job)
            else:
                yield job[0], failure
        for job, results, failure in self._run(tasks, [[i] for i in retry]):
            yield job[0], failure if results is None else results[0]

    def _run(self, tasks: list[tuple], jobs: list[list[int]]):
        """Yields ``(job, results, failure)`` per job as each ends: ``results`` is
        ``None`` when the job failed as a whole, ``failure`` then says why (a failed
        :class:`ProgramResult`; ``None`` for a batch that raised in place)."""
        if self._pool is None:
            for job in jobs:
                results = _evaluate_job([tasks[i] for i in job])
                yield job, results, None
            return
        budgets = [self.budget_s * len(job) or None for job in jobs]
        args = [([tasks[i] for i in job],) for job in jobs]
        fn = _evaluate_job_shipped if self.remote else _evaluate_job
        for j, outcome in self._pool.run(fn, args, budgets):
            if outcome.status == "done":
                results = outcome.value
                if self.remote:
                    results, archives = results
                    for i, archive in zip(jobs[j], archives, strict=True):
                        if results is not None and archive is not None:
                            _unpack(archive, tasks[i][4])
                yield jobs[j], results, None
                continue
            if outcome.status == "timeout":
                reason = (
                    f"training exceeded its wall-clock budget of {self.budget_s:g} s "
                    "(loop.train_budget_s) and was stopped"
                )
            elif outcome.status == "raised":
                reason = f"the training job raised {outcome.error}"
            elif outcome.error:
                reason = f"the training worker died: {outcome.error}"
            else:
                reason = f"the training worker process died (exit code {outcome.exitcode})"
            yield jobs[j], None, _failed(reason, time.perf_counter() - outcome.seconds)

    def close(self) -> None:
        """Stops the worker processes (killing programs still running) and restores the
        compilation-cache setting."""
        if self._pool is not None:
            self._pool.close()
        self._cache.__exit__(None, None, None)

    def __enter__(self) -> ProgramEvaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
