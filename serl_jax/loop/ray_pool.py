"""Training jobs on a Ray cluster (``loop.executor: ray``): :class:`RayPool`.

The pool has the interface of the local :class:`serl_jax.loop.workers.WorkerPool`, so
:class:`serl_jax.loop.dispatch.ProgramEvaluator` runs the same jobs on either. Each of
its ``workers`` slots is a Ray actor that declares its resources (``num_cpus``,
``num_gpus``: Ray places it on a node that has them and sets ``CUDA_VISIBLE_DEVICES``
for it): a long-lived worker process that keeps its loaded market and JAX's in-memory
caches between jobs, as a local worker does. Each job is one task on an idle actor.
Actors rather than plain Ray tasks, because a job's wall-clock budget must start when
it starts running, not while it waits in the cluster's queue, and only the driver knows
when it handed a job to a started actor.

Failure isolation, per job: a job past its budget has its actor killed (``ray.kill``)
and replaced (``"timeout"``); a job whose actor dies, or whose node is lost, ends
``"died"``; a job that raises ends ``"raised"`` (on a cluster a node's broken software
must not stop the run); each with its reason, and the other jobs go on. An actor that
cannot start is an error of the cluster, not of a job (:class:`RuntimeError`).

Ray is an optional dependency (``pip install -e ".[distributed]"``); this is the only
module that imports it.
"""

from __future__ import annotations

import logging
import socket
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import RayActorError, RayError, RayTaskError

from serl_jax.loop.workers import TaskOutcome

__all__ = ["RayPool", "connect"]


def connect(address: str) -> bool:
    """Connects this process to a Ray cluster, unless it is connected already.

    Args:
        address: ``"auto"`` (the cluster in ``RAY_ADDRESS``, or the one ``ray start``
            runs on this machine), ``"local"`` (start a one-machine cluster in this
            process), or a cluster address (``host:port``, ``ray://host:port``).

    Returns:
        True when this call connected (the caller then disconnects with
        ``ray.shutdown()``), False when the process was connected already.

    Raises:
        ConnectionError: no Ray cluster answers at ``address`` (one line, naming it).
    """
    if ray.is_initialized():
        return False
    if address not in ("auto", "local"):
        _probe(address)
    try:
        with warnings.catch_warnings():
            # Ray starts its processes with fork + exec, which JAX warns about in any
            # process that has imported it; exec follows at once, so nothing is at risk.
            warnings.filterwarnings("ignore", "os.fork", RuntimeWarning)
            ray.init(
                address=None if address == "local" else address,
                include_dashboard=False,
                logging_level=logging.WARNING,
            )
    except ConnectionError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConnectionError(
            f"loop.ray_address: no Ray cluster reachable at {address!r} ({first}); start "
            "one with `ray start --head` or set loop.ray_address to its address"
        ) from None
    return True


def _probe(address: str, timeout_s: float = 10.0) -> None:
    """Opens and closes a TCP connection to ``host:port`` first: ``ray.init`` waits
    without end for some unreachable addresses (a closed port on this machine).

    Raises:
        ConnectionError: ``address`` is not ``host:port``, or nothing listens there.
    """
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ConnectionError(
            f"loop.ray_address: expected auto, local, host:port or ray://host:port, got {address!r}"
        )
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise ConnectionError(
            f"loop.ray_address: no Ray cluster reachable at {address!r} ({e}); start one "
            "with `ray start --head` or set loop.ray_address to its address (host:port)"
        ) from None


class _Server:
    """The actor: runs the initializer once, then one job per :meth:`run` call."""

    def __init__(self, initializer: Callable[..., None] | None, initargs: tuple):
        if initializer is not None:
            initializer(*initargs)

    def ready(self) -> None:
        """Answers once the actor has started (the initializer has run)."""

    def run(self, fn: Callable[..., Any], args: tuple) -> Any:
        """One job: ``fn(*args)``."""
        return fn(*args)


@dataclass
class _Slot:
    actor: Any
    ready_ref: Any  # ObjectRef of actor.ready(), None once it answered
    task: tuple[int, float, float | None, Any] | None = None  # (index, start, budget, ref)


def _one_line(error: BaseException) -> str:
    """A Ray error as one line: the original exception's type and message when a job
    raised, Ray's own first line otherwise."""
    if isinstance(error, RayTaskError):
        cause = error.cause if isinstance(error.cause, BaseException) else error
        text = str(cause).strip().splitlines()
        return f"{type(cause).__name__}: {text[0] if text else ''}".rstrip(": ")
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


class RayPool:
    """``workers`` Ray actors that run jobs, each within an optional budget.

    Args:
        workers: actors, so jobs in flight at once (>= 1).
        initializer: run once in each new actor (also in a replacement), or ``None``.
        initargs: its arguments (picklable).
        address: the cluster (:func:`connect`).
        num_cpus, num_gpus: the resources each actor declares (a GPU fraction shares a
            GPU between actors).

    Raises:
        ValueError: ``workers`` < 1 or a negative resource.
        ConnectionError: no cluster at ``address``.

    Use as a context manager; :meth:`close` kills the actors and disconnects when the
    pool connected.
    """

    def __init__(
        self,
        workers: int,
        initializer: Callable[..., None] | None = None,
        initargs: tuple = (),
        *,
        address: str = "auto",
        num_cpus: float = 1.0,
        num_gpus: float = 0.0,
    ):
        if workers < 1:
            raise ValueError(f"RayPool: workers must be >= 1, got {workers}")
        if num_cpus < 0 or num_gpus < 0:
            raise ValueError(
                f"RayPool: resources must be >= 0, got num_cpus={num_cpus}, num_gpus={num_gpus}"
            )
        self._owns_connection = connect(address)
        # max_restarts=0, max_task_retries=0: a job runs at most once; a dead actor is
        # replaced by the pool, which records why the job failed.
        self._actor_class = ray.remote(_Server).options(
            num_cpus=num_cpus, num_gpus=num_gpus, max_restarts=0, max_task_retries=0
        )
        self._start = (initializer, initargs)
        self._slots = [self._spawn() for _ in range(workers)]

    def _spawn(self) -> _Slot:
        actor = self._actor_class.remote(*self._start)
        return _Slot(actor, actor.ready.remote())

    def run(
        self,
        fn: Callable[..., Any],
        tasks: Iterable[tuple],
        budget_s: float | Sequence[float | None] | None = None,
    ) -> Iterator[tuple[int, TaskOutcome]]:
        """Runs ``fn(*args)`` for each task on the actors; yields ``(index, outcome)`` as
        each ends (:class:`~serl_jax.loop.workers.TaskOutcome`: ``"done"``, ``"timeout"``,
        ``"died"`` or ``"raised"``, the last two with ``error`` saying why).

        Args:
            fn: a picklable function (module level).
            tasks: argument tuples (picklable).
            budget_s: wall-clock seconds per task from its hand-over to a started actor,
                after which the actor is killed and replaced; one per task (a sequence)
                or one for all; ``None``: no limit.

        Raises:
            RuntimeError: an actor could not start (the cluster's fault, not a task's).
        """
        queue = list(enumerate(tasks))[::-1]
        budgets = list(budget_s) if isinstance(budget_s, Sequence) else [budget_s] * len(queue)
        while queue or any(s.task is not None for s in self._slots):
            for slot in self._slots:
                if slot.ready_ref is None and slot.task is None and queue:
                    index, args = queue.pop()
                    ref = slot.actor.run.remote(fn, args)
                    slot.task = (index, time.monotonic(), budgets[index], ref)
            deadlines = [
                s.task[1] + s.task[2]
                for s in self._slots
                if s.task is not None and s.task[2] is not None
            ]
            timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
            refs = [
                s.ready_ref if s.ready_ref is not None else s.task[3]
                for s in self._slots
                if s.ready_ref is not None or s.task is not None
            ]
            ray.wait(refs, num_returns=1, timeout=timeout)
            for i in range(len(self._slots)):
                yield from self._check(i)

    def _check(self, i: int) -> Iterator[tuple[int, TaskOutcome]]:
        """Handles one slot's start-up, finished job or overrun (replacing its actor if
        needed)."""
        slot = self._slots[i]
        if slot.ready_ref is not None:
            if ray.wait([slot.ready_ref], timeout=0)[0]:
                try:
                    ray.get(slot.ready_ref)
                except RayError as e:  # the message ends with the initializer's exception
                    lines = [line for line in str(e).strip().splitlines() if line.strip()]
                    raise RuntimeError(
                        f"a Ray worker (actor) could not start: {lines[-1] if lines else e!r}"
                    ) from None
                slot.ready_ref = None
            return
        if slot.task is None:
            return
        index, start, budget, ref = slot.task
        now = time.monotonic()
        if ray.wait([ref], timeout=0)[0]:
            slot.task = None
            try:
                outcome = TaskOutcome(ray.get(ref), "done", now - start)
            except RayTaskError as e:
                outcome = TaskOutcome(None, "raised", now - start, error=_one_line(e))
            except RayActorError as e:  # the actor's process or node died
                self._slots[i] = self._spawn()
                outcome = TaskOutcome(None, "died", now - start, error=_one_line(e))
            yield index, outcome
            return
        if budget is not None and now - start > budget:
            ray.kill(slot.actor)
            self._slots[i] = self._spawn()
            yield index, TaskOutcome(None, "timeout", now - start)

    def close(self) -> None:
        """Kills every actor (jobs still running end with them) and disconnects from the
        cluster when this pool connected."""
        for slot in self._slots:
            ray.kill(slot.actor)
        self._slots = []
        if self._owns_connection:
            ray.shutdown()

    def __enter__(self) -> RayPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
