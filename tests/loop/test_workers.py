"""Worker processes with a wall-clock budget per task (serl_jax.loop.workers)."""

from __future__ import annotations

import os
import time

import pytest

from serl_jax.loop.workers import WorkerPool


def task(action: str, value: float) -> float:
    """What the test workers run (module level, so a spawned process can import it)."""
    if action == "sleep":
        time.sleep(value)
    elif action == "exit":
        os._exit(int(value))
    elif action == "raise":
        raise ValueError(f"bad value {value}")
    return 2 * value


def test_a_task_past_its_budget_is_killed_and_the_others_go_on():
    tasks = [("sleep", 600.0), ("double", 21.0), ("double", 4.0)]
    with WorkerPool(2) as pool:
        t0 = time.monotonic()
        outcomes = list(pool.run(task, tasks, budget_s=3.0))
        waited = time.monotonic() - t0
        by_index = dict(outcomes)
        assert sorted(by_index) == [0, 1, 2]
        assert [(by_index[i].status, by_index[i].value) for i in (1, 2)] == [
            ("done", 42.0),
            ("done", 8.0),
        ]
        assert outcomes[-1][0] == 0  # the overrun ends last, at its budget
        assert by_index[0].status == "timeout" and by_index[0].value is None
        assert 3.0 <= by_index[0].seconds < 6.0
        assert waited < 60.0  # not the 600 s the task asked for
        # The killed worker was replaced: the pool still runs tasks on both processes.
        again = dict(pool.run(task, [("double", 1.0), ("double", 2.0)], budget_s=30.0))
        assert [again[i].value for i in (0, 1)] == [2.0, 4.0]


def test_a_worker_that_dies_is_reported_and_replaced():
    with WorkerPool(1) as pool:
        outcomes = dict(pool.run(task, [("exit", 3.0), ("double", 5.0)]))
    assert (outcomes[0].status, outcomes[0].exitcode, outcomes[0].value) == ("died", 3, None)
    assert (outcomes[1].status, outcomes[1].value) == ("done", 10.0)


def test_an_exception_in_a_task_is_raised_in_the_parent():
    with WorkerPool(1) as pool, pytest.raises(ValueError, match="bad value 7"):
        list(pool.run(task, [("raise", 7.0)]))


def test_a_worker_that_cannot_start_is_an_error_not_a_task_outcome():
    with WorkerPool(1, os._exit, (4,)) as pool:
        with pytest.raises(RuntimeError, match="exited with code 4 while starting"):
            list(pool.run(task, [("double", 1.0)]))


def test_workers_must_be_positive():
    with pytest.raises(ValueError, match="workers must be >= 1, got 0"):
        WorkerPool(0)


def test_each_task_can_have_its_own_budget():
    with WorkerPool(2) as pool:
        outcomes = dict(pool.run(task, [("sleep", 600.0), ("sleep", 4.0)], budget_s=[2.0, None]))
    assert outcomes[0].status == "timeout" and 2.0 <= outcomes[0].seconds < 5.0
    assert outcomes[1].status == "done" and outcomes[1].value == 8.0  # no budget: finishes
