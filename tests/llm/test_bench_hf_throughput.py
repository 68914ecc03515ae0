"""``benchmarks/bench_hf_throughput.py``'s ``--round``: a stored round's design prompts, in
the order asked, and the prefill it times (each distinct prompt alone), on a hand-made
run store and the tiny Qwen2 model of ``tests/llm/tiny_lm.py``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tiny_lm import build_tiny_lm  # noqa: E402

from llm.backends.hf import HFBackend  # noqa: E402
from serl_jax.loop import RunStore  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_hf_throughput  # noqa: E402


def test_a_rounds_design_prompts_in_order_and_their_prefill(tmp_path, capsys):
    store = RunStore.create(tmp_path / "run", {}, "")
    store.add_proposals(1, [("reward", "design", "p1", ["a"], None)], [])
    store.add_proposals(
        2,
        [
            ("reward", "design", "def reward(obs, action):", ["a"], None),
            ("network", "design", "Write a network.", ["b"], None),
            ("reward", "debug", "fix it", ["c"], None),
            ("reward", "design", "def reward(obs, action):", ["d"], None),
        ],
        [],
    )
    store.close()
    prompts = bench_hf_throughput.round_prompts(f"{tmp_path / 'run'}:2")
    assert prompts == ["def reward(obs, action):", "Write a network.", "def reward(obs, action):"]
    with pytest.raises(SystemExit, match="no design prompt at iteration 5"):
        bench_hf_throughput.round_prompts(f"{tmp_path / 'run'}:5")
    with pytest.raises(SystemExit, match="expected RUN_DIR:J"):
        bench_hf_throughput.round_prompts(str(tmp_path / "run"))
    backend = HFBackend(str(build_tiny_lm(tmp_path / "lm", architecture="qwen2")), seed=0)
    # two distinct prompts, each prefilled without its last token, together or apart
    for together in (True, False):
        tokens, seconds = bench_hf_throughput.time_prefill(backend, prompts, 1, together)
        assert tokens == sum(len(backend.prompt_token_ids(p)) - 1 for p in prompts[:2])
        assert seconds > 0
    # the whole command: one call of the round's three prompts, every row 6 tokens long
    argv = [
        "--model", str(tmp_path / "lm"), "--round", f"{tmp_path / 'run'}:2", "--repeats", "1",
        "--max-new-tokens", "6", "--fixed-length", "--dtype", "float32", "--decode",
        "loop,generate",
    ]  # fmt: skip
    assert bench_hf_throughput.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [
        [cell.strip() for cell in line.split("|")] for line in lines if line.startswith("  3 |")
    ]
    # one row per decoding, both 18 tokens (the loop's followed by its steps), then the
    # ratio of their seconds
    assert [row[:4] for row in (rows[0], rows[2])] == [
        ["3", "shared", "loop", "18"],
        ["3", "shared", "generate", "18"],
    ]
    # fixed length: no row ends early, so keeping rows to the end costs nothing more
    assert rows[1][1].startswith("6 decoding steps, 3.0 rows per step of 3; every row kept")
    assert rows[1][1].endswith(" s, 1.00x this call")
    assert rows[3][1].startswith("shared/generate over shared/loop: ")


def test_keeping_every_row_to_the_end_adds_the_full_batch_step_to_each_shrunk_step():
    """On hand-made forward records (a prefill of 10 positions, then one-position steps
    at 4, 4, 4, 2 and 1 rows): the median full step is 0.5 s, so the two shrunk steps
    would have cost (0.5 - 0.3) + (0.5 - 0.2) = 0.5 s more."""
    timer = bench_hf_throughput.StepTimer(torch.nn.Linear(1, 1))
    timer.records = [(4, 10, 1.0), (4, 1, 0.4), (4, 1, 0.6), (4, 1, 0.5), (2, 1, 0.3), (1, 1, 0.2)]
    assert timer.rows_per_step() == [4, 4, 4, 2, 1]
    assert timer.kept_to_the_end() == pytest.approx(0.5)
    timer.records = [(3, 7, 1.0)]
    assert timer.rows_per_step() == [] and timer.kept_to_the_end() == 0.0
