"""The imagination slot in the SE-RL loop (LLM4Imagine): prompts, validation with the
imagined-day bounds, training with the incumbent reward and network, reflection, and the
incumbent's imagination carried into the other slots' candidates.

One scripted loop iteration on the US sample at the tiny preset: the script answers the
LLM4Imagine prompt with the library's volatility_scale (VOL_SCALE = 1.5, inside the
default bounds) and with a program that zeroes the volume (rejected at run time).
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest

from llm.backends import ScriptedBackend
from llm.designs import library
from llm.prompts import DEFAULT_CODE
from serl_jax import train
from serl_jax.config import load_config
from serl_jax.loop import Candidate, RunStore, SERLLoop
from serl_jax.loop.dispatch import plan_jobs
from serl_jax.loop.outer import candidate_feedback

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "configs" / "tiny.yaml")
VOL_SCALE = next(d.code for d in library("imagination") if d.name == "volatility_scale")
ZERO_VOLUME = """\
import jax.numpy as jnp


def imagine(key, price, volume, params):
    return price, jnp.zeros_like(volume)
"""


def _fence(code: str) -> str:
    return f"A scenario:\n```python\n{code}```\n"


@pytest.fixture(scope="module")
def imagination_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serl_imagine")
    script = tmp / "script.json"
    script.write_text(
        json.dumps({"completions": {"LLM4Imagine": [_fence(VOL_SCALE), _fence(ZERO_VOLUME)]}})
    )
    args = [
        "--config", TINY, "--out", str(tmp / "runs"), "--quiet", "--data", "sample:us_1min",
        "--llm", f"scripted:{script}", "--iterations", "1", "--candidates", "2",
        "--modules", "imagination", "loop.min_iterations=1", "eval.n_bootstrap=100",
        # the rejected program is not sent back (self-debugging: tests/loop/test_loop.py)
        "loop.train_budget_s=0", "loop.repair_attempts=0",
    ]  # fmt: skip
    assert train.main(args) == 0
    (run_dir,) = list((tmp / "runs").iterdir())
    return run_dir


def test_the_imagination_prompt_states_the_contract(imagination_run):
    store = RunStore.open(imagination_run)
    rows = store.prompts(1)
    assert len(rows) == 2  # one prompt per sample, each with its own example
    row = rows[0]
    assert row["module"] == "imagination"
    text = row["prompt"]
    assert "MODULE: LLM4Imagine" in text
    assert "def imagine(key, price, volume, params):" in text
    assert "float32 [T]" in text and "params.realized_volatility" in text
    assert "An example (by default training uses real days only)" in text
    assert "(imports and `def imagine`)" in text


def test_candidates_train_with_the_incumbent_reward_and_network(imagination_run):
    store = RunStore.open(imagination_run)
    by_id = {c.id: c for c in store.candidates()}
    reference, ok, bad = by_id["j0-default"], by_id["j1-c0"], by_id["j1-c1"]
    assert reference.imagination_code == ""  # imagine.program is empty
    assert ok.module == "imagination" and ok.status == "evaluated"
    assert ok.imagination_code == VOL_SCALE
    assert (ok.reward_code, ok.network_code) == (reference.reward_code, reference.network_code)
    assert ok.reward_code == DEFAULT_CODE["reward"]
    # Rejected by stage 2 with the statistic named (the bounds of imagine.*).
    assert (bad.status, bad.validation["stage"]) == ("rejected", "runtime")
    assert "imagined total_volume out of bounds" in bad.validation["reason"]
    # The imagined days were mixed into training: the curve exists for the candidate only.
    curves = np.load(imagination_run / "candidates" / ok.id / "curves.npz")
    reference_curves = np.load(imagination_run / "candidates" / reference.id / "curves.npz")
    assert "imagined_out_of_bounds" in curves.files
    assert "imagined_out_of_bounds" not in reference_curves.files
    assert np.all(curves["imagined_out_of_bounds"] == 0.0)  # a 1.5x scale stays in bounds
    meta = json.loads(
        (imagination_run / "candidates" / ok.id / "checkpoint/policy.json").read_text()
    )
    assert meta["imagination_code"] == VOL_SCALE


def test_reflection_compares_imagined_with_real_days(imagination_run):
    store = RunStore.open(imagination_run)
    ok = next(c for c in store.candidates() if c.id == "j1-c0")
    stats = ok.metrics["imagination"]
    real, imagined = stats["real"], stats["imagined"]
    assert stats["out_of_bounds"] == 0.0
    # volatility_scale multiplies every one-minute log return by 1.5 and keeps volumes.
    assert imagined["volatility_bps"] == pytest.approx(1.5 * real["volatility_bps"], rel=1e-3)
    assert imagined["abs_daily_return_bps"] == pytest.approx(
        1.5 * real["abs_daily_return_bps"], rel=1e-3
    )
    assert imagined["day_volume"] == pytest.approx(real["day_volume"], rel=1e-6)
    assert imagined["return_autocorrelation"] == pytest.approx(
        real["return_autocorrelation"], abs=1e-3
    )
    # The selected seed's share of training lanes on imagined days, from its curves.
    curves = np.load(imagination_run / "candidates" / ok.id / "curves.npz")
    assert stats["lane_share"] == pytest.approx(curves["imagined_lane_share"].mean())
    text = candidate_feedback(ok)
    assert "imagined vs real training days" in text
    assert f"; {stats['lane_share']:.0%} of training lanes on imagined days)" in text
    assert f"1-minute volatility (bps) {imagined['volatility_bps']:.2f} vs" in text
    assert "lag-1 return autocorrelation" in text
    md = (imagination_run / "report.md").read_text()
    if json.loads((imagination_run / "report.json").read_text())["best"]["id"] == ok.id:
        assert "Imagination:\n```python" in md


def test_the_incumbent_imagination_goes_into_other_slots_candidates(tmp_path):
    """No training: a store where an imagination candidate is the best so far; the
    reward candidates of the next iteration are built with its imagination."""
    cfg = load_config(TINY, ['loop.modules=["reward", "imagination"]', "loop.candidates=2"])
    store = RunStore.create(tmp_path / "run", cfg.to_dict(), "")
    reference = Candidate(
        id="j0-default", iteration=0, idx=0, module="default", status="evaluated",
        reward_code=DEFAULT_CODE["reward"], network_code=DEFAULT_CODE["network"], score=-20.0,
    )  # fmt: skip
    imagined = Candidate(
        id="j1-c1", iteration=1, idx=1, module="imagination", status="evaluated",
        code=VOL_SCALE, reward_code=DEFAULT_CODE["reward"],
        network_code=DEFAULT_CODE["network"], imagination_code=VOL_SCALE, score=-10.0,
    )  # fmt: skip
    store.add_proposals(0, [], [(None, reference)])
    store.add_proposals(1, [], [(None, imagined)])
    reward = (ROOT / "tests/llm/programs/ok_reward_terms.txt").read_text()
    backend = ScriptedBackend(
        {
            "LLM4Reward": _fence(reward),
            "LLM4Imagine": _fence(ZERO_VOLUME),
            "InstructionRefinement": "```text\nTrade evenly.\n```",
        },
        cycle=True,
    )
    loop = SERLLoop(cfg, backend, store, obs_dim=10, num_features=5, log=None)
    loop._propose(2)
    by_module = {c.module: c for c in store.candidates(2)}
    assert by_module["reward"].imagination_code == VOL_SCALE
    assert by_module["reward"].parent_ids == ["j1-c1"]
    assert by_module["imagination"].imagination_code == ZERO_VOLUME
    assert by_module["imagination"].reward_code == DEFAULT_CODE["reward"]
    # one call (one sample per prompt each), within the larger of the modules' token
    # budgets (reward 640, imagination 512), capped by loop.max_new_tokens (1024)
    module = re.compile(r"^MODULE: (\w+)$", re.M)
    [call] = backend.calls
    assert [module.search(p)[1] for p in call["prompts"]] == ["LLM4Reward", "LLM4Imagine"]
    assert call["max_new_tokens"] == 640
    capped = dataclasses.replace(cfg, loop=dataclasses.replace(cfg.loop, max_new_tokens=100))
    loop = SERLLoop(capped, backend, store, obs_dim=10, num_features=5, log=None)
    loop._propose(3)  # refines the instruction first (loop.refine_every = 2)
    calls = backend.calls[1:]
    assert [[module.search(p)[1] for p in c["prompts"]] for c in calls] == [
        ["InstructionRefinement"], ["LLM4Reward", "LLM4Imagine"],
    ]  # fmt: skip
    assert [c["max_new_tokens"] for c in calls] == [100, 100]


def test_programs_with_different_imaginations_train_apart():
    reward, network = DEFAULT_CODE["reward"], DEFAULT_CODE["network"]
    tasks = [
        ({}, "m", reward, network, None),
        ({}, "m", reward + "\n", network, None, ""),
        ({}, "m", reward, network, None, VOL_SCALE),
        ({}, "m", reward + "\n\n", network, None, VOL_SCALE),
        ({}, "m", reward, network, None, ZERO_VOLUME),
    ]
    assert plan_jobs(tasks, 8) == [[0, 1], [2, 3], [4]]


def test_the_reference_imagination_is_validated_with_the_bounds(tmp_path):
    cfg = load_config(TINY, ["imagine.return_multiple=10"])  # the volatility fails first
    too_wild = VOL_SCALE.replace("VOL_SCALE = 1.5", "VOL_SCALE = 5.0")
    store = RunStore.create(tmp_path / "run", cfg.to_dict(), "")
    loop = SERLLoop(
        cfg, ScriptedBackend(["unused"]), store, obs_dim=10, num_features=5,
        imagination_code=too_wild, log=None,
    )  # fmt: skip
    loop._propose_reference()
    loop._validate(store.candidates(0))
    [reference] = store.candidates(0)
    assert reference.imagination_code == too_wild
    assert (reference.status, reference.validation["stage"]) == ("rejected", "runtime")
    assert "imagined volatility out of bounds" in reference.validation["reason"]


def test_a_bad_reference_imagination_stops_the_loop_before_its_run_folder(tmp_path, capsys):
    args = [
        "--config", TINY, "--out", str(tmp_path / "runs"), "--quiet",
        "imagine.program=no_such_program",
    ]  # fmt: skip
    assert train.main(args) == 2
    assert "imagine.program: 'no_such_program' is neither a library program" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "runs").exists()
