"""The SE-RL loop end to end with the scripted backend: two iterations on the US sample
at the tiny preset, killed during iteration 1 and resumed through the CLI.

The script answers each reward prompt with a valid reward and a non-answer, and each
network prompt with a valid network and a hostile one (it uses ``os``); the refinement
prompt (iteration 3 at ``refine_every=2``, so not reached here) is scripted anyway.
Self-debugging (``loop.repair_attempts``, 2 by default) sends the two rejected
candidates back: in round 1 the non-answer comes back as the hostile one (rejected again)
and the hostile network as the valid one; in round 2 the twice-rejected reward comes back
as the valid reward. Both fixed programs equal earlier candidates, so nothing more trains.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from llm.backends import ScriptedBackend
from llm.prompts import DEFAULT_CODE, REJECTED_HEADING
from llm.validate import Limits, SandboxError
from serl_jax import evaluate, train
from serl_jax.config import load_config
from serl_jax.loop import Candidate, IterationSummary, RunStore, SERLLoop, dispatch, evaluation
from serl_jax.loop.outer import paired_with_reference

ROOT = Path(__file__).resolve().parents[2]
PROGRAMS = ROOT / "tests" / "llm" / "programs"
TINY = str(ROOT / "configs" / "tiny.yaml")


def _fence(path: Path) -> str:
    return f"A change:\n```python\n{path.read_text()}```\n"


# An import the validator refuses, used (the repair pass drops an unused one).
HOSTILE = "```python\nimport os\n\nos.getcwd()\n```"


@pytest.fixture(scope="module")
def resumed_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serl")
    script = tmp / "script.json"
    script.write_text(
        json.dumps(
            {
                "completions": {
                    # first key: every debug prompt also holds its module's line
                    REJECTED_HEADING: [
                        HOSTILE,
                        _fence(PROGRAMS / "ok_small_mlp_network.txt"),
                        _fence(PROGRAMS / "ok_reward_terms.txt"),
                    ],
                    "LLM4Reward": [_fence(PROGRAMS / "ok_reward_terms.txt"), "I cannot help."],
                    "LLM4Agent": [
                        _fence(PROGRAMS / "ok_small_mlp_network.txt"),
                        HOSTILE,
                    ],
                    "InstructionRefinement": ["```text\nTrade evenly.\n```"],
                },
                "cycle": True,
            }
        )
    )
    # No training budget: programs train in this process, where the test counts and
    # interrupts evaluate_program calls.
    args = [
        "--config", TINY, "--out", str(tmp / "runs"), "--quiet", "--data", "sample:us_1min",
        "--llm", f"scripted:{script}", "--iterations", "2", "--candidates", "4",
        "loop.min_iterations=2", "eval.n_bootstrap=100", "loop.train_budget_s=0",
        "loop.switch_networks=never",  # a network candidate trains alone, counted here
    ]  # fmt: skip
    calls: list[str] = []
    real = dispatch.evaluate_program

    def counting(config, market, reward_code, network_code, artifact_dir=None, imagination=""):
        calls.append(Path(artifact_dir).name)
        if len(calls) == 3:  # killed before the third program trains
            raise KeyboardInterrupt
        return real(config, market, reward_code, network_code, artifact_dir, imagination)

    mp = pytest.MonkeyPatch()
    mp.setattr(dispatch, "evaluate_program", counting)
    try:
        with pytest.raises(KeyboardInterrupt):
            train.main(args)
        (run_dir,) = list((tmp / "runs").iterdir())
        killed = RunStore.open(run_dir)
        before = {c.id: c.status for c in killed.candidates()}
        killed.close()
        assert train.main(["--resume", str(run_dir), "--quiet"]) == 0
    finally:
        mp.undo()
    return run_dir, calls, before


def test_kill_left_a_resumable_record(resumed_run):
    _, calls, before = resumed_run
    # j0 and one candidate of j1 were trained; the third program was killed.
    assert before["j0-default"] == "evaluated"
    assert sorted(before) == ["j0-default", *(f"j1-c{i}" for i in range(7))]
    assert calls[2] in before and before[calls[2]] == "validated"


def test_resume_finishes_without_duplicating_anything(resumed_run):
    run_dir, calls, _ = resumed_run
    store = RunStore.open(run_dir)
    cands = store.candidates()
    assert len(cands) == 1 + 2 * (4 + 3)  # 4 designs and 3 retries per iteration
    assert len({c.id for c in cands}) == len(cands)
    # Every program trained exactly once (the killed call never started training).
    completed = calls[:2] + calls[3:]
    assert Counter(completed).most_common(1)[0][1] == 1
    trained = {c.id for c in cands if c.status in ("evaluated", "crashed") and not c.duplicate_of}
    assert set(completed) == trained
    # One design prompt per module and one debug prompt per retry in each iteration:
    # nothing was generated twice.
    for j in (1, 2):
        assert [(p["module"], p["purpose"]) for p in store.prompts(j)] == [
            ("reward", "design"), ("network", "design"),
            ("reward", "debug"), ("network", "debug"), ("reward", "debug"),
        ]  # fmt: skip
    assert [s.iteration for s in store.iterations()] == [0, 1, 2]
    assert store.meta("status") == "finished"


def test_statuses_and_errors(resumed_run):
    store = RunStore.open(resumed_run[0])
    by_id = {c.id: c for c in store.candidates()}
    for j in (1, 2):
        assert by_id[f"j{j}-c1"].status == "rejected"
        assert by_id[f"j{j}-c1"].validation["stage"] == "parse"
        assert by_id[f"j{j}-c3"].status == "rejected"
        assert by_id[f"j{j}-c3"].validation["stage"] == "static"
        assert "'os'" in by_id[f"j{j}-c3"].error
        # loop.failure_score (-100) less loop.failure_stage_step (10) per stage not reached
        assert by_id[f"j{j}-c1"].score == -130.0  # parse
        assert by_id[f"j{j}-c3"].score == -120.0  # static
    for j in (1, 2):  # self-debugging: what came back, and what it became
        retries = [(c.retry_of, c.attempt, c.status, c.duplicate_of) for c in
                   (by_id[f"j{j}-c{i}"] for i in (4, 5, 6))]  # fmt: skip
        # a fixed program equals an earlier one: the first candidate that trained it
        first = {i: by_id[f"j{j}-c{i}"].duplicate_of or f"j{j}-c{i}" for i in (0, 2)}
        assert retries == [
            (f"j{j}-c1", 1, "rejected", None),
            (f"j{j}-c3", 1, "evaluated", first[2]),
            (f"j{j}-c4", 2, "evaluated", first[0]),
        ]
        assert by_id[f"j{j}-c4"].validation["stage"] == "static"
        assert by_id[f"j{j}-c4"].score == -120.0
        assert by_id[f"j{j}-c6"].score == by_id[f"j{j}-c0"].score
    assert by_id["j1-c0"].status == "evaluated"
    stats = by_id["j1-c0"].reward_term_stats
    assert set(stats) == {"concentration", "pa", "terminal", "total", "history"}
    assert [h["updates"] for h in stats["history"]] == [2, 4]  # per jitted chunk


def test_errors_and_reflection_are_fed_back(resumed_run):
    store = RunStore.open(resumed_run[0])
    for prompt in store.prompts(2):
        text = prompt["prompt"]
        assert "j1-c3 (network): rejected at the static stage" in text
        assert "import of 'os' is not allowed" in text
        assert "j1-c1 (reward): rejected at the parse stage" in text
        assert "reward terms, mean per episode" in text and "concentration:" in text
        # the reference as an example, ranked by the default score, with its PA
        assert re.search(r"### Candidate j0-default \| shortfall -[\d.]+ bps \| PA -[\d.]+", text)
    first = store.prompts(1)[0]["prompt"]
    assert "## Feedback" in first and "j0-default (default): PA" in first
    # self-debugging: the rejected answer and its one-line error, after its own prompt
    reward, network, debug_parse, debug_static, debug_twice = store.prompts(1)
    assert debug_parse["prompt"].startswith(reward["prompt"].rstrip())
    assert debug_static["prompt"].startswith(network["prompt"].rstrip())
    assert (
        "(no ```python block)\nThe validator rejected it at the parse stage"
        in (debug_parse["prompt"])
    )
    assert f"{HOSTILE}\nThe validator rejected it at the static stage" in (debug_static["prompt"])
    assert "import of 'os' is not allowed" in debug_static["prompt"]
    # round 2 answers the round-1 retry: its own prompt once, then the new error
    assert debug_twice["prompt"].startswith(reward["prompt"].rstrip())
    assert debug_twice["prompt"].count(REJECTED_HEADING) == 1
    assert "rejected it at the static stage" in debug_twice["prompt"]


def test_best_candidate_is_reported_and_checkpointed(resumed_run):
    run_dir = resumed_run[0]
    store = RunStore.open(run_dir)
    evaluated = [c for c in store.candidates() if c.status == "evaluated"]
    best = max(evaluated, key=lambda c: c.score)
    report = json.loads((run_dir / "report.json").read_text())
    assert report["best"]["id"] == best.id
    assert set(report["test"]) == {
        f"SE-RL {best.id}",
        "PPO default",
        "TWAP",
        "TWAP-POV",
        "VWAP",
        "adaptive VWAP",
        "POV",
        "AC",
        "Immediate",
        "oracle (not achievable)",
    }
    meta = json.loads((run_dir / "candidates" / best.id / "checkpoint" / "policy.json").read_text())
    assert (meta["reward_code"], meta["network_code"]) == (best.reward_code, best.network_code)
    assert f"SE-RL {best.id}" in (run_dir / "results.txt").read_text()
    md = (run_dir / "report.md").read_text()
    assert best.id in md and "```python" in md
    assert (run_dir / "loop_progress.png").stat().st_size > 1000
    scores = [s.score for s in store.iterations()]
    assert scores[0] == store.candidates(0)[0].score
    for cand in evaluated:  # loop.score: the mean validation shortfall
        assert cand.score == cand.metrics["shortfall"] < 0
    # j1-c2 (ok_small_mlp_network) declares its prior's anchor; its checkpoint keeps it.
    net = next(c for c in evaluated if c.id == "j1-c2")
    assert net.metrics["prior_anchor_steps"] == 12.0
    meta = json.loads((run_dir / "candidates/j1-c2/checkpoint/policy.json").read_text())
    assert meta["config"]["network"]["prior_anchor_steps"] == 12.0
    assert "prior anchor 12 steps" in net.validation["reason"]
    assert "| j | shortfall_j (bps) | shortfall_ema (bps) | best |" in md
    # every evaluated candidate is paired with j0-default on the same validation orders
    reference = store.candidates(0)[0]
    for cand in evaluated:
        if cand.id == "j0-default":
            assert "vs_default" not in cand.metrics
            continue
        paired = cand.metrics["vs_default"]["pa"]
        diffs = [
            a - b
            for a, b in zip(
                cand.metrics["pa_per_order"], reference.metrics["pa_per_order"], strict=True
            )
        ]  # noqa: E501
        assert paired["value"] == pytest.approx(sum(diffs) / len(diffs))
        if len(set(cand.metrics["days_per_order"])) > 1:
            assert paired["ci_low"] <= paired["value"] <= paired["ci_high"]
        else:  # every validation order on one day: no interval, and no MDE
            assert paired["ci_low"] is None and paired["mde"] is None
    test_pair = report["best_vs_default"]["test"]
    assert set(test_pair) == {"pa", "shortfall"}
    test_pa = report["test"]
    expected = test_pa[f"SE-RL {best.id}"]["PA"]["value"] - test_pa["PPO default"]["PA"]["value"]
    assert test_pair["pa"]["value"] == pytest.approx(expected, abs=1e-9)
    assert "minus the default PPO on the same orders" in md
    assert report["self_debugging"] == {
        "1": {"sent": 4, "repeats": 0, "passed": 2},
        "2": {"sent": 2, "repeats": 0, "passed": 2},
    }
    assert "round 1: 4 sent back, 2 passed validation; round 2: 2 sent back, 2 passed" in md
    assert "| j1-c4 | reward | rejected | j1-c1 (round 1) |  | rejected at the static" in md


def test_a_design_step_and_a_self_debugging_round_are_one_designer_call_each(resumed_run):
    """An iteration's design prompts of every module (each showing its own example: one
    sample per prompt) go to the designer in one generate call, and so do each
    self-debugging round's rejected candidates (batched: a local model decodes one answer
    at a third of its batched rate)."""
    store = RunStore.open(resumed_run[0])
    prompts = store.prompts()
    design = [p for p in prompts if p["purpose"] == "design"]
    refinement = {p["iteration"] for p in prompts if p["purpose"] == "refinement"}
    retries = [c for c in store.candidates() if c.retry_of]
    rounds = {(c.iteration, c.attempt) for c in retries}
    iterations = {p["iteration"] for p in design}
    assert store.meta("designer_usage")["calls"] == len(iterations) + len(refinement) + len(rounds)
    assert all(len({p["module"] for p in design if p["iteration"] == j}) > 1 for j in iterations)
    mixed = [
        r for r in rounds if len({c.module for c in retries if (c.iteration, c.attempt) == r}) > 1
    ]
    assert mixed  # a round that sent back a reward and a network, in that one call


def test_paired_with_reference_by_hand():
    ours = {"pa_per_order": [1.0, 2.0, 3.0], "shortfall_per_order": [-1.0, -2.0, -1.0]}
    ref = {"pa_per_order": [0.0, 3.0, 1.0], "shortfall_per_order": [-2.0, -2.0, -2.0]}
    paired = paired_with_reference(ours, ref)
    assert paired["pa"]["value"] == pytest.approx(2 / 3) and paired["pa"]["win_rate"] == 2 / 3
    assert paired["shortfall"]["value"] == pytest.approx(2 / 3)
    assert paired_with_reference({"pa": 1.0}, ref) is None  # a record without per-order values


def test_resume_refuses_new_options(resumed_run, capsys):
    assert train.main(["--resume", str(resumed_run[0]), "--iterations", "5"]) == 2
    assert "drop the other options" in capsys.readouterr().err
    assert train.main(["--resume", str(resumed_run[0].parent / "nope")]) == 2
    assert "not an SE-RL run folder" in capsys.readouterr().err


def test_best_checkpoint_reloads_with_its_own_code(resumed_run, capsys):
    run_dir = resumed_run[0]
    report = json.loads((run_dir / "report.json").read_text())
    best_id = report["best"]["id"]
    checkpoint = run_dir / "candidates" / best_id / "checkpoint"
    capsys.readouterr()
    assert evaluate.main(["--data", "sample:us_1min", "--policy", str(checkpoint), "--json"]) == 0
    (record,) = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    expected = report["test"][f"SE-RL {best_id}"]["PA"]["value"]
    assert record["PA"]["value"] == pytest.approx(expected, abs=1e-6)


def test_a_sandbox_failure_stops_the_loop_with_its_cause(tmp_path):
    # 64 MiB is less than JAX alone takes in the validation child: the sandbox, not the
    # reference program, fails, so the loop stops instead of scoring it as rejected.
    cfg = load_config(TINY, ["loop.market=sample:us_1min"])
    store = RunStore.create(tmp_path / "run", cfg.to_dict(), "")
    loop = SERLLoop(
        cfg, ScriptedBackend(["never asked at j0"]), store, obs_dim=7, num_features=5,
        limits=Limits(memory_bytes=64 * 2**20), log=None,
    )  # fmt: skip
    with pytest.raises(SandboxError) as caught:
        loop.run()
    assert str(caught.value).startswith(
        "validating j0-default (reward): sandbox error: the validation child used "
    )
    assert "over Limits.memory_bytes (64 MiB) before loading the candidate" in str(caught.value)
    [ref] = store.candidates(0)
    assert (ref.status, ref.score, ref.error) == ("proposed", None, "")  # resumable as is
    assert store.iterations() == []


def test_programs_differing_only_in_docstrings_and_comments_share_one_key():
    """As the 1.5B returned the best example (j3-c0 against j1-c0, 2026-11-26): a new
    docstring, comment and blank lines make no new program; any change of code does."""
    from serl_jax.loop.outer import _program_key

    base = (
        "import jax.numpy as jnp\n\n\n"
        "def reward(prev_state, action, next_state, params):\n"
        "    fill = next_state.last_qty  # shares filled\n"
        '    return {"pa": 2.0 * fill, "flat": jnp.float32(0.0)}\n'
    )
    restated = (
        '"""A module docstring."""\n'
        "import jax.numpy as jnp\n\n"
        "def reward(prev_state, action, next_state, params):\n"
        '    """ Improve the reward: a docstring the model added. """\n\n'
        "    # a comment on its own line\n"
        "    fill = next_state.last_qty\n"
        '    return {"pa": 2.0 * fill, "flat": jnp.float32(0.0)}  # same terms\n'
    )

    def key(code: str) -> str:
        return _program_key(
            Candidate("j1-c0", 1, 0, "reward", code=code, reward_code=code,
                      network_code=DEFAULT_CODE["network"])
        )  # fmt: skip

    assert key(restated) == key(base)
    assert key(base.replace("2.0", "3.0")) != key(base)  # a constant
    assert key(base.replace('"pa"', '"fill"')) != key(base)  # a string that is not a docstring
    assert key("def reward(:\n") != key("def reward(: \n")  # unparsable: compared as text


def _reference_and_reward(store: RunStore) -> list[Candidate]:
    """The reference (two slots) and one reward candidate, proposed in iteration 0."""
    ref = Candidate(
        "j0-default", 0, 0, "default", code=DEFAULT_CODE["reward"],
        reward_code=DEFAULT_CODE["reward"], network_code=DEFAULT_CODE["network"],
    )  # fmt: skip
    other = Candidate(
        "j0-c1", 0, 1, "reward", code="bad", reward_code="bad",
        network_code=DEFAULT_CODE["network"],
    )  # fmt: skip
    store.add_proposals(0, [], [(None, ref), (None, other)])
    return store.candidates(0)


@pytest.mark.parametrize("workers", [1, 2])
def test_validation_runs_a_candidates_slots_at_once_and_keeps_the_first_failure(
    tmp_path, monkeypatch, workers
):
    """No sandbox: a fake ``validate`` in which the reference's reward fails after its
    network has started (two workers) and the other candidate's reward passes."""
    import threading

    from llm.validate import ValidationResult
    from serl_jax.loop import outer

    started: list[tuple[str, str]] = []
    network_started = threading.Event()

    def fake_validate(code, kind, limits=None, bounds=None):
        started.append(("other" if code == "bad" else "ref", kind))
        if kind == "network":
            network_started.set()
            return ValidationResult(True, None, "network ok")
        if code == "bad":
            return ValidationResult(True, None, "reward ok")
        if workers == 2:  # the network slot runs beside this one
            assert network_started.wait(timeout=30)
        return ValidationResult(False, "runtime", "reward failed")

    monkeypatch.setattr(outer, "validate", fake_validate)
    cfg = load_config(TINY, [f"loop.validation_workers={workers}"])
    store = RunStore.create(tmp_path / "run", cfg.to_dict(), "")
    loop = SERLLoop(cfg, ScriptedBackend(["unused"]), store, obs_dim=7, num_features=5, log=None)
    loop._validate(_reference_and_reward(store))
    ref, other = store.candidates(0)
    # the first slot to fail, in slot order, is the reference's verdict
    assert (ref.status, ref.validation["reason"]) == ("rejected", "reward failed")
    assert ref.error == "rejected at the runtime stage: reward failed"
    assert (other.status, other.validation["reason"]) == ("validated", "reward ok")
    if workers == 1:  # one at a time: the reference's network is never started
        assert started == [("ref", "reward"), ("other", "reward")]
    else:
        assert sorted(started) == [("other", "reward"), ("ref", "network"), ("ref", "reward")]


def test_non_finite_parameters_fail_the_candidate_before_scoring():
    import types

    import jax.numpy as jnp

    from serl_jax.rl.policy import PPOPolicyParams

    cfg = load_config(TINY)
    params = {"actor": {"w": jnp.ones((3, 2)), "b": jnp.array([0.0, jnp.nan])}}
    trained = types.SimpleNamespace(policy_params=PPOPolicyParams(params=params, obs_stats=None))
    reason = evaluation.validation_metrics(cfg, trained, None, None)  # outcomes not reached
    assert reason == "training diverged: non-finite network parameters"


def test_the_report_rolls_the_reference_out_once_when_it_is_the_best():
    from serl_jax.loop.report import _once_per_candidate

    ref = Candidate("j0-default", 0, 0, "default")
    other = Candidate("j1-c0", 1, 0, "reward")
    asked = []

    def evaluate(names):
        asked.append(list(names))
        return {"TWAP": "twap", **{name: f"rollout of {c.id}" for name, c in names.items()}}

    same = _once_per_candidate({"SE-RL j0-default": ref, "PPO default": ref}, evaluate)
    assert asked == [["SE-RL j0-default"]]
    assert list(same.items()) == [
        ("TWAP", "twap"),
        ("SE-RL j0-default", "rollout of j0-default"),
        ("PPO default", "rollout of j0-default"),
    ]
    both = _once_per_candidate({"SE-RL j1-c0": other, "PPO default": ref}, evaluate)
    assert asked[1] == ["SE-RL j1-c0", "PPO default"]
    assert both == {
        "TWAP": "twap", "SE-RL j1-c0": "rollout of j1-c0", "PPO default": "rollout of j0-default"
    }  # fmt: skip


def test_a_candidate_past_its_training_budget_fails_and_the_loop_goes_on(tmp_path):
    # A tiny-preset program needs several seconds to compile in a fresh worker process, so
    # with a 2 s budget each j1 candidate is stopped mid-way and scored as failed.
    cfg = load_config(
        TINY,
        ["loop.market=sample:us_1min", "loop.iterations=1", "loop.min_iterations=1",
         "loop.candidates=2", "loop.train_budget_s=2", "eval.n_bootstrap=100"],
    )  # fmt: skip
    store = RunStore.create(tmp_path / "run", cfg.to_dict(), "")
    # Iteration 0 recorded as done (as in a resumed run), so that j1 is what trains.
    ref = Candidate(
        "j0-default", 0, 0, "default", code=DEFAULT_CODE["reward"],
        reward_code=DEFAULT_CODE["reward"], network_code=DEFAULT_CODE["network"],
    )  # fmt: skip
    store.add_proposals(0, [], [(None, ref)])
    ref.status, ref.score = "evaluated", -20.0
    ref.metrics = {"pa": -20.0, "wr": 0.0, "glr": 0.0, "afi": 0.0}
    store.update(ref)
    store.finish_iteration(IterationSummary(0, -20.0, -20.0, "j0-default", False))
    # The reward as a small model writes it: a wrong import line, fixed by the repair pass.
    reward = _fence(PROGRAMS / "ok_reward_terms.txt").replace(
        "import jax.numpy as jnp", "import jnp"
    )
    backend = ScriptedBackend(
        {"LLM4Reward": [reward], "LLM4Agent": [_fence(PROGRAMS / "ok_small_mlp_network.txt")]}
    )
    lines: list[str] = []
    outcome = SERLLoop(cfg, backend, store, obs_dim=7, num_features=5, log=lines.append).run()

    assert (outcome.reason, outcome.best.id) == ("max_iterations", "j0-default")
    # The one designer call logs its modules and seconds per candidate (tokens/s where it
    # counts tokens).
    calls = [line for line in lines if re.match(r"\[j=1\] 1 reward, 1 network: 2 completion", line)]
    assert len(calls) == 1 and "s per candidate)" in calls[0]
    j1 = store.candidates(1)
    assert [c.module for c in j1] == ["reward", "network"]
    assert j1[0].repairs == ["line 5: import jnp -> import jax.numpy as jnp"]
    assert j1[1].repairs == [] and "import jnp\n" not in j1[0].code
    assert any(
        line.endswith("repaired: line 5: import jnp -> import jax.numpy as jnp") for line in lines
    )
    for cand in j1:
        assert cand.validation["ok"] is True
        assert cand.status == "crashed" and cand.score == -100.0  # loop.failure_score
        assert cand.error == (
            "training exceeded its wall-clock budget of 2 s (loop.train_budget_s) and was stopped"
        )
        assert 2.0 <= cand.timing["total"] < 10.0
    assert [(s.iteration, s.score, s.best_id) for s in store.iterations()] == [
        (0, -20.0, "j0-default"),
        (1, -100.0, None),
    ]
    store.close()
    # Resumable: the reopened run has nothing left to do and changes nothing.
    again = RunStore.open(tmp_path / "run")
    SERLLoop(cfg, backend, again, obs_dim=7, num_features=5, log=None).run()
    assert [(c.id, c.status) for c in again.candidates()] == [
        ("j0-default", "evaluated"),
        ("j1-c0", "crashed"),
        ("j1-c1", "crashed"),
    ]


def test_compact_prompts_show_the_best_program_and_one_edit(tmp_path):
    """No training: ``loop.prompt_style=compact`` asks each module with its best past
    candidate (or the default, for a module without one) and the compact instruction."""
    from llm.prompts import COMPACT_INSTRUCTION

    cfg = load_config(TINY, ["loop.prompt_style=compact", "loop.candidates=2"])
    store = RunStore.create(tmp_path / "run", cfg.to_dict(), "")
    better = (PROGRAMS / "ok_reward_terms.txt").read_text()
    reference = Candidate(
        id="j0-default", iteration=0, idx=0, module="default", status="evaluated",
        reward_code=DEFAULT_CODE["reward"], network_code=DEFAULT_CODE["network"],
        score=-20.0, metrics={},
    )  # fmt: skip
    improved = Candidate(
        id="j1-c0", iteration=1, idx=0, module="reward", status="evaluated", code=better,
        reward_code=better, network_code=DEFAULT_CODE["network"], score=-10.0, metrics={},
    )  # fmt: skip
    store.add_proposals(0, [], [(None, reference)])
    store.add_proposals(1, [], [(None, improved)])
    backend = ScriptedBackend([_fence(PROGRAMS / "ok_reward_terms.txt")], cycle=True)
    loop = SERLLoop(cfg, backend, store, obs_dim=10, num_features=5, log=None)
    for cand in store.candidates():
        loop._add_to_buffer(cand)
    loop._propose(2)
    reward_prompt, network_prompt = backend.prompts
    assert reward_prompt.startswith("MODULE: LLM4Reward\n")
    assert f"```python\n{better.rstrip()}\n```" in reward_prompt  # the best reward so far
    assert f"```python\n{DEFAULT_CODE['network'].rstrip()}\n```" in network_prompt
    for prompt in backend.prompts:
        assert f"Task: {COMPACT_INSTRUCTION}" in prompt
        assert "## Feedback" not in prompt and "# Task: optimal execution" not in prompt


def _first_proposals(tmp_path: Path, cfg) -> tuple[RunStore, ScriptedBackend]:
    """No training: a run store holding the evaluated reference (-20 bps) after which
    ``cfg``'s loop proposes iteration 1, answered by a scripted backend with one valid
    reward; returns the store and the backend (its ``calls``)."""
    store = RunStore.create(tmp_path / "run", cfg.to_dict(), "")
    reference = Candidate(
        id="j0-default", iteration=0, idx=0, module="default", status="evaluated",
        reward_code=DEFAULT_CODE["reward"], network_code=DEFAULT_CODE["network"],
        score=-20.0, metrics={},
    )  # fmt: skip
    store.add_proposals(0, [], [(None, reference)])
    backend = ScriptedBackend([_fence(PROGRAMS / "ok_reward_terms.txt")], cycle=True)
    SERLLoop(cfg, backend, store, obs_dim=10, num_features=5, log=None)._propose(1)
    return store, backend


@pytest.mark.parametrize("vary", [True, False])
def test_imagination_samples_each_see_another_library_example(tmp_path, vary):
    """No training: with ``loop.vary_examples`` each imagination sample of an iteration
    is asked with its own prompt, showing the design library's imaginations in turn
    (sample i: design i mod 5), and answers that prompt; off, one prompt shows the
    default example and is sampled ``candidates`` times."""
    from llm.designs import library

    cfg = load_config(
        TINY,
        ["loop.modules=[imagination]", "loop.candidates=6", f"loop.vary_examples={vary}"],
    )
    store, backend = _first_proposals(tmp_path, cfg)
    designs = [d.code for d in library("imagination")]
    asked = {row["id"]: row["prompt"] for row in store.prompts(1)}
    cands = store.candidates(1)
    assert [c.id for c in cands] == [f"j1-c{i}" for i in range(6)]
    if vary:
        assert [call["n"] for call in backend.calls] == [1]
        assert len(backend.prompts) == 6 and len(asked) == 6
        for i, cand in enumerate(cands):
            shown = [d for d in designs if f"```python\n{d.rstrip()}\n```" in asked[cand.prompt_id]]
            assert shown == [designs[i % 5]]
    else:
        assert [call["n"] for call in backend.calls] == [6]
        [prompt] = backend.prompts
        assert f"```python\n{DEFAULT_CODE['imagination'].rstrip()}\n```" in prompt
        assert {c.prompt_id for c in cands} == set(asked)


@pytest.mark.parametrize(
    ("modules", "candidates", "expected", "order"),
    [
        ("reward,network", 4, [(2, 2)], "rrnn"),
        ("reward,network", 3, [(2, 1), (1, 1)], "rrn"),
        ("reward,network,imagination", 6, [(2, 2), (1, 2)], "rrnnii"),
    ],
)
def test_an_iterations_modules_share_a_designer_call(
    tmp_path, modules, candidates, expected, order
):
    """No training: an iteration's prompts go to the designer in one generate call per
    number of samples asked of each prompt (``expected``: each call's ``n`` and number of
    prompts): a reward and a network prompt sampled twice each share a call, an
    imagination asked once per sample (``loop.vary_examples``, one prompt per library
    example) or an uneven split (3 candidates: the reward's prompt sampled twice, the
    network's once) are asked apart. The candidates keep the modules' order (``order``:
    their initials)."""
    cfg = load_config(TINY, [f"loop.modules=[{modules}]", f"loop.candidates={candidates}"])
    store, backend = _first_proposals(tmp_path, cfg)
    assert [(call["n"], len(call["prompts"])) for call in backend.calls] == expected
    cands = store.candidates(1)
    assert "".join(c.module[0] for c in cands) == order
    asked = {row["id"]: row["module"] for row in store.prompts(1)}
    assert all(asked[c.prompt_id] == c.module for c in cands)
