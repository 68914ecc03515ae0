"""SE-RL candidates on a Ray cluster (``loop.executor: ray``, serl_jax.loop.ray_pool).

The tests start their own one-machine cluster (``ray.init(num_cpus=2)``) and shut it
down. The pool's failure paths run plain functions; the loop's kill-and-resume trains
the tiny preset on Ray actors. The same scores as the local executor:
tests/loop/test_evaluation.py.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from llm.backends import ScriptedBackend  # noqa: E402
from serl_jax.config import load_config  # noqa: E402
from serl_jax.loop import ProgramEvaluator, RunStore, SERLLoop, outer, ray_pool  # noqa: E402
from serl_jax.loop.ray_pool import RayPool, connect  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "tiny.yaml"
PROGRAMS = ROOT / "tests" / "llm" / "programs"


def task(action: str, value: float) -> float:
    """What the test actors run (sent by value: the actors cannot import this module)."""
    if action == "sleep":
        time.sleep(value)
    elif action == "exit":
        os._exit(int(value))
    elif action == "raise":
        raise ValueError(f"bad value {value}")
    return 2 * value


def test_an_unreachable_address_is_a_one_line_error():
    assert not ray.is_initialized()
    for address, says in [
        ("127.0.0.1:1", "Connection refused"),  # ray.init alone would wait without end
        ("nohost", "expected auto, local, host:port or ray://host:port, got 'nohost'"),
    ]:
        with pytest.raises(ConnectionError) as caught:
            connect(address)
        message = str(caught.value)
        assert message.startswith("loop.ray_address: ") and says in message, message
        assert "\n" not in message
    assert not ray.is_initialized()


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    ray.shutdown()


def test_jobs_give_their_values_and_a_failure_ends_that_job_alone(cluster):
    tasks = [("double", 21.0), ("raise", 7.0), ("exit", 3.0), ("sleep", 600.0), ("double", 4.0)]
    with RayPool(2, address="auto", num_cpus=0.5) as pool:
        t0 = time.monotonic()
        outcomes = dict(pool.run(task, tasks, budget_s=[None, None, None, 4.0, None]))
        waited = time.monotonic() - t0
        assert sorted(outcomes) == [0, 1, 2, 3, 4]
        assert [(outcomes[i].status, outcomes[i].value) for i in (0, 4)] == [
            ("done", 42.0),
            ("done", 8.0),
        ]
        # the job that raised: its exception as one line; the pool went on
        assert (outcomes[1].status, outcomes[1].error) == ("raised", "ValueError: bad value 7.0")
        # the actor that died mid-job: reported and replaced
        assert outcomes[2].status == "died" and outcomes[2].error
        # past its budget: the actor killed at 4 s, not the 600 s the job asked for
        assert outcomes[3].status == "timeout" and 4.0 <= outcomes[3].seconds < 30.0
        assert waited < 300.0  # not the 600 s job (about 20 s idle, 118 s on a loaded CPU)
        # both slots still run jobs (the dead and the killed actors were replaced)
        again = dict(pool.run(task, [("double", 1.0), ("double", 2.0)]))
        assert [again[i].value for i in (0, 1)] == [2.0, 4.0]
    assert ray.is_initialized()  # the pool did not connect, so it does not disconnect


def test_an_actor_that_cannot_start_is_an_error_not_a_job_outcome(cluster):
    with RayPool(1, task, ("raise", 5.0), num_cpus=0.5) as pool:
        with pytest.raises(RuntimeError, match="could not start: .*bad value 5.0"):
            list(pool.run(task, [("double", 1.0)]))


def test_a_job_that_raises_fails_its_program_alone(cluster, tmp_path):
    config = load_config(TINY).to_dict()
    program = ("reward", "network")
    tasks = [(config, "/nonexistent/market", *program, str(tmp_path / "a"))]
    with ProgramEvaluator(executor="ray", ray_num_cpus=0.5) as evaluator:
        [(index, result)] = list(evaluator.evaluate(tasks))
    assert index == 0 and not result.ok
    assert result.error.startswith("the training job raised ") and "/nonexistent" in result.error
    assert not (tmp_path / "a").exists()  # the driver writes nothing for it


def test_a_killed_driver_resumes_without_losing_or_repeating_a_job(cluster, tmp_path, monkeypatch):
    cfg = load_config(
        TINY,
        ["loop.market=sample:us_1min", "loop.iterations=1", "loop.min_iterations=1",
         "loop.candidates=2", "loop.executor=ray", "loop.workers=2", "loop.ray_num_cpus=1",
         "loop.train_budget_s=0", "loop.repair_attempts=0", "eval.n_bootstrap=50",
         "run.num_seeds=1", "ppo.total_timesteps=1024",  # 2 updates, 1 seed: CI time
         "loop.switch_networks=never"],  # two jobs in j1: the reward and the network alone
    )  # fmt: skip
    fence = "A change:\n```python\n{}```\n"
    backend = ScriptedBackend(
        {
            "LLM4Reward": [fence.format((PROGRAMS / "ok_reward_terms.txt").read_text())],
            "LLM4Agent": [fence.format((PROGRAMS / "ok_small_mlp_network.txt").read_text())],
        }
    )
    submitted: list[int] = []
    real_run = RayPool.run

    def counting(self, fn, tasks, budget_s=None):
        tasks = list(tasks)
        submitted.extend(len(args[0]) for args in tasks)  # programs per job
        return real_run(self, fn, tasks, budget_s)

    monkeypatch.setattr(ray_pool.RayPool, "run", counting)
    reported: list[str] = []
    real_report = SERLLoop._report_candidate

    def killed_after_the_first_j1_result(self, cand):
        real_report(self, cand)
        if cand.iteration == 1 and cand.status in ("evaluated", "crashed"):
            reported.append(cand.id)
            raise KeyboardInterrupt  # the driver dies with the other job in flight

    monkeypatch.setattr(outer.SERLLoop, "_report_candidate", killed_after_the_first_j1_result)
    store = RunStore.create(tmp_path / "run", cfg.to_dict(), "")
    with pytest.raises(KeyboardInterrupt):
        SERLLoop(cfg, backend, store, obs_dim=7, num_features=5, log=None).run()
    store.close()
    assert submitted == [1, 1, 1]  # the reference, then the two j1 programs at once
    [first] = reported
    killed = RunStore.open(tmp_path / "run")
    before = {c.id: (c.status, c.score, c.timing) for c in killed.candidates()}
    killed.close()
    assert sum(status in ("evaluated", "crashed") for status, _, _ in before.values()) == 2

    monkeypatch.setattr(outer.SERLLoop, "_report_candidate", real_report)
    submitted.clear()
    again = RunStore.open(tmp_path / "run")
    SERLLoop(cfg, backend, again, obs_dim=7, num_features=5, log=None).run()
    assert submitted == [1]  # only the program that was in flight trains again
    after = {c.id: (c.status, c.score, c.timing) for c in again.candidates()}
    assert sorted(after) == ["j0-default", "j1-c0", "j1-c1"]
    assert all(after[i] == before[i] for i in ("j0-default", first))  # recorded: untouched
    assert all(status == "evaluated" for status, _, _ in after.values()), after
    for cand in again.candidates():  # the driver unpacked every checkpoint it was sent
        assert (again.candidate_dir(cand.id) / "checkpoint" / "policy.msgpack").is_file()
    again.close()
