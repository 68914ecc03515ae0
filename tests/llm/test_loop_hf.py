"""The SE-RL loop with a local ``hf:`` model and the low-level DEK on, end to end.

The model is the tiny random Llama of ``tests/llm/tiny_lm.py``: its completions are
noise, so nearly every candidate is rejected by parsing or validation. The loop must keep
going, record it, and take one LoRA step per iteration; a run killed right after its
first LoRA step resumes with that adapter (and its trainer state) restored.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from serl_jax import train
from serl_jax.loop import RunStore
from serl_jax.loop.outer import SERLLoop

pytest.importorskip("peft")

TINY = str(Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml")


@pytest.fixture(scope="module")
def hf_run(tiny_lm_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    args = [
        "--config", TINY, "--out", str(out), "--quiet", "--data", "sample:us_1min",
        "--llm", f"hf:{tiny_lm_dir}", "--dek", "low", "--iterations", "2", "--candidates", "2",
        "loop.max_new_tokens=24", "loop.min_iterations=2", "eval.n_bootstrap=50",
        "dek.lr=0.01", "loop.repair_attempts=0",  # self-debugging: tests/loop/test_loop.py
    ]  # fmt: skip
    real = SERLLoop._low_level_update
    calls = []

    def killed_after_first(self, j):
        real(self, j)
        calls.append(j)
        if len(calls) == 1:
            raise KeyboardInterrupt

    mp = pytest.MonkeyPatch()
    mp.setattr(SERLLoop, "_low_level_update", killed_after_first)
    try:
        with pytest.raises(KeyboardInterrupt):
            train.main(args)
        (run_dir,) = list(out.iterdir())
        assert train.main(["--resume", str(run_dir), "--quiet"]) == 0
    finally:
        mp.undo()
    return run_dir, calls


def test_loop_keeps_going_and_records_rejections(hf_run):
    run_dir, _ = hf_run
    store = RunStore.open(run_dir)
    cands = store.candidates()
    assert [c.id for c in cands] == ["j0-default", "j1-c0", "j1-c1", "j2-c0", "j2-c1"]
    for c in cands[1:]:
        assert c.status in ("rejected", "evaluated", "crashed")
        assert c.completion and c.score is not None
        if c.status == "rejected":
            assert c.error and c.validation["stage"] in ("parse", "static", "runtime")
    assert store.meta("status") == "finished"
    # Level "low" only: no in-context examples, no instruction refinement.
    assert all(p["purpose"] == "design" for p in store.prompts())
    assert all("### Candidate" not in p["prompt"] for p in store.prompts())


def test_one_lora_update_per_iteration_and_resume_restores_the_adapter(hf_run):
    run_dir, calls = hf_run
    assert calls == [1, 2]  # iteration 1 before the kill, iteration 2 after the resume
    updates = RunStore.open(run_dir).dek_updates()
    assert [u["iteration"] for u in updates] == [1, 2]
    # The second update continued the restored trainer (its update counter and EMA).
    assert [u["stats"]["update"] for u in updates] == [1, 2]
    assert updates[1]["stats"]["num_samples"] == 2
    for u in updates:
        folder = u["adapter"]
        assert folder == run_dir / "adapters" / f"j{u['iteration']}"
        assert (folder / "adapter_model.safetensors").is_file()
        assert json.loads((folder / "dek_low_level.json").read_text())
    assert not list((run_dir / "adapters").glob(".*"))  # no half-written adapter left


def test_low_level_needs_an_hf_model(tmp_path, capsys):
    code = train.main(["--out", str(tmp_path), "--llm", "offline", "--dek", "both", "--quiet"])
    assert code == 2
    assert "needs --llm hf:<path>" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())  # refused before a run folder was created
