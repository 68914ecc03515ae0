"""Worker processes whose tasks can be stopped: a wall-clock budget per task.

A jitted training run cannot be interrupted from Python inside one compiled call (a
chunk of PPO updates runs as one XLA program), and the cost of a candidate's chunk is
not bounded by its validation trial: a reward that reduces over ``params.data`` costs in
proportion to the market's size, which the trial does not see. So the SE-RL loop runs
candidates in spawned processes and kills the one whose task passes its budget; the
process is replaced and the remaining tasks go on. :class:`WorkerPool` is that mechanism
(:class:`serl_jax.loop.dispatch.ProgramEvaluator` uses it), written for it instead of
``concurrent.futures.ProcessPoolExecutor``, which cannot stop one running task (killing
one of its processes breaks the whole pool).

Each worker runs ``initializer(*initargs)`` once, then ``fn(*args)`` per task, keeping
its memory (loaded data, JAX's in-memory caches) between tasks. A task's clock starts
when it is handed to a worker that has finished starting up, so the start-up (imports)
is not charged to the first task.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing import get_context
from multiprocessing.connection import wait
from typing import Any

__all__ = ["TaskOutcome", "WorkerPool"]


@dataclass(frozen=True)
class TaskOutcome:
    """How one task ended.

    Attributes:
        value: what ``fn`` returned (``None`` unless ``status == "done"``).
        status: ``"done"``, ``"timeout"`` (killed at its budget), ``"died"`` (its process
            ended without answering, e.g. a crash in native code or a lost node) or
            ``"raised"`` (the task raised; only on a Ray cluster,
            :class:`serl_jax.loop.ray_pool.RayPool`: :class:`WorkerPool` re-raises).
        seconds: wall time from hand-over to the end.
        exitcode: the dead process's exit code (negative: the signal), for ``"died"`` in
            a local worker.
        error: why, in one line, for ``"raised"`` and a Ray ``"died"`` ("" otherwise).
    """

    value: Any
    status: str
    seconds: float
    exitcode: int | None = None
    error: str = ""


def _serve(conn, initializer: Callable[..., None] | None, initargs: tuple) -> None:
    """A worker's main loop: ``("ready",)`` once, then one answer per ``(fn, args)``."""
    if initializer is not None:
        initializer(*initargs)
    conn.send(("ready", None))
    while True:
        task = conn.recv()
        if task is None:
            return
        fn, args = task
        try:
            answer = ("done", fn(*args))
        except Exception as e:  # noqa: BLE001 - re-raised in the parent
            answer = ("raised", e)
        conn.send(answer)


class _Worker:
    def __init__(self, ctx, initializer, initargs):
        self.conn, theirs = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(theirs, initializer, initargs), daemon=True)
        self.process.start()
        theirs.close()
        self.ready = False
        self.task: tuple[int, float, float | None] | None = None  # (index, start, budget)

    def stop(self) -> None:
        """Kills the process (SIGKILL) and waits for it."""
        self.process.kill()
        self.process.join()
        self.conn.close()


class WorkerPool:
    """``workers`` spawned processes that run tasks, each within an optional budget.

    Args:
        workers: number of processes (>= 1).
        initializer: run once in each new process (also in a replacement), or ``None``.
        initargs: its arguments (picklable).

    Use as a context manager; :meth:`close` kills whatever still runs.
    """

    def __init__(
        self,
        workers: int,
        initializer: Callable[..., None] | None = None,
        initargs: tuple = (),
    ):
        if workers < 1:
            raise ValueError(f"WorkerPool: workers must be >= 1, got {workers}")
        self._ctx = get_context("spawn")
        self._start = (initializer, initargs)
        self._workers = [self._spawn() for _ in range(workers)]

    def _spawn(self) -> _Worker:
        return _Worker(self._ctx, *self._start)

    def run(
        self,
        fn: Callable[..., Any],
        tasks: Iterable[tuple],
        budget_s: float | Sequence[float | None] | None = None,
    ) -> Iterator[tuple[int, TaskOutcome]]:
        """Runs ``fn(*args)`` for each task; yields ``(index, outcome)`` as each ends.

        Args:
            fn: a module-level (picklable) function.
            tasks: argument tuples (picklable).
            budget_s: wall-clock seconds per task, after which its process is killed
                (``"timeout"``) and replaced; one per task (a sequence), or one for all;
                ``None``: no limit.

        Raises:
            RuntimeError: a worker process died before it was ready (start-up failure:
                the environment's fault, not a task's).
            Exception: whatever ``fn`` raised, re-raised here (remaining tasks dropped).
        """
        queue = deque(enumerate(tasks))
        budgets = list(budget_s) if isinstance(budget_s, Sequence) else [budget_s] * len(queue)
        while queue or any(w.task is not None for w in self._workers):
            for w in self._workers:
                if w.ready and w.task is None and queue:
                    index, args = queue.popleft()
                    w.conn.send((fn, args))
                    w.task = (index, time.monotonic(), budgets[index])
            deadlines = [
                start + budget
                for w in self._workers
                if w.task is not None
                for _, start, budget in [w.task]
                if budget is not None
            ]
            timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
            handles = [h for w in self._workers for h in (w.conn, w.process.sentinel)]
            wait(handles, timeout)
            for slot, w in enumerate(self._workers):
                yield from self._check(slot, w)

    def _check(self, slot: int, w: _Worker) -> Iterator[tuple[int, TaskOutcome]]:
        """Handles one worker's message, death or overrun (replacing it if needed)."""
        now = time.monotonic()
        if w.conn.poll():
            try:
                kind, value = w.conn.recv()
            except (EOFError, OSError):
                kind, value = "eof", None
            if kind == "ready":
                w.ready = True
                return
            if kind in ("done", "raised"):
                index, start, _ = w.task
                w.task = None
                if kind == "raised":
                    raise value
                yield index, TaskOutcome(value, "done", now - start)
                return
        if not w.process.is_alive():
            w.process.join()
            if not w.ready:
                raise RuntimeError(
                    f"a worker process exited with code {w.process.exitcode} while starting "
                    "(see its output above)"
                )
            self._workers[slot] = self._spawn()
            if w.task is not None:
                index, start, _ = w.task
                yield index, TaskOutcome(None, "died", now - start, w.process.exitcode)
            return
        if w.task is not None and w.task[2] is not None and now - w.task[1] > w.task[2]:
            index, start, _ = w.task
            w.stop()
            self._workers[slot] = self._spawn()
            yield index, TaskOutcome(None, "timeout", now - start)

    def close(self) -> None:
        """Stops every worker: idle ones are asked to exit, busy ones are killed."""
        for w in self._workers:
            if w.task is None and w.process.is_alive():
                try:
                    w.conn.send(None)
                except OSError:
                    pass
                w.process.join(timeout=10)
            w.stop()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
