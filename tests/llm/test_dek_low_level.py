"""The low-level DEK (llm/dek/low_level.py) on the tiny offline model of tests/llm/tiny_lm.py.

Each test that trains builds its own backend (``get_peft_model`` edits the model in place);
loading the tiny model takes a fraction of a second.
"""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from safetensors import safe_open  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM  # noqa: E402

from llm.backends import make_backend  # noqa: E402
from llm.backends.hf import HFBackend  # noqa: E402
from llm.dek.low_level import (  # noqa: E402
    OPTIMIZER_FILE,
    STATE_FILE,
    LoRAConfig,
    LowLevelDEK,
    UpdateStats,
    baseline_and_advantages,
    default_target_modules,
)

PROMPT = "def reward(prev_state, action, next_state, params):"
GOOD = "    return jnp.zeros(())"
BAD = "    x = safe_div(a, b)\n    return x"
#: A +-10 bps pair: with the batch-mean baseline the advantages are +1 and -1 (normalized).
PAIR = [(PROMPT, GOOD, 10.0), (PROMPT, BAD, -10.0)]
SGD = LoRAConfig(rank=4, alpha=8, lr=0.05, optimizer="sgd", baseline="mean", max_grad_norm=None)


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """Runs torch on one thread (tiny model, busy machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def backend(tiny_lm_dir) -> HFBackend:
    """A fresh backend on the tiny Llama (no adapter)."""
    return make_backend(f"hf:{tiny_lm_dir}")


def _base_weights(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}


def test_baselines_on_hand_made_scores():
    scores = [1.0, 2.0, 6.0]
    b, a, ema = baseline_and_advantages(scores, "mean", None, 0.9)
    assert b == (3.0, 3.0, 3.0) and a == (-2.0, -1.0, 3.0) and ema == 3.0
    b, a, ema = baseline_and_advantages(scores, "leave_one_out", 5.0, 0.9)
    assert b == (4.0, 3.5, 1.5) and a == (-3.0, -1.5, 4.5)
    assert ema == pytest.approx(0.9 * 5.0 + 0.1 * 3.0)
    b, a, ema = baseline_and_advantages(scores, "ema", None, 0.9)  # first update: batch mean
    assert b == (3.0, 3.0, 3.0) and ema == 3.0
    b, a, ema = baseline_and_advantages(scores, "ema", 1.0, 0.9)
    assert b == (1.0, 1.0, 1.0) and a == (0.0, 1.0, 5.0) and ema == pytest.approx(1.2)
    # a single candidate: leave-one-out falls back to the EMA, or no signal without one
    assert baseline_and_advantages([4.0], "leave_one_out", None, 0.5) == ((4.0,), (0.0,), 4.0)
    assert baseline_and_advantages([4.0], "leave_one_out", 2.0, 0.5) == ((2.0,), (2.0,), 3.0)
    # leave-one-out advantages are n/(n-1) times the mean-baseline ones (RLOO)
    _, mean_adv, _ = baseline_and_advantages(scores, "mean", None, 0.9)
    _, loo_adv, _ = baseline_and_advantages(scores, "leave_one_out", None, 0.9)
    assert loo_adv == pytest.approx([1.5 * x for x in mean_adv])
    for bad in ([], [1.0, math.nan]):
        with pytest.raises(ValueError):
            baseline_and_advantages(bad, "mean", None, 0.9)
    with pytest.raises(ValueError):
        baseline_and_advantages(scores, "median", None, 0.9)


def test_config_checks():
    assert LoRAConfig().to_dict()["target_modules"] == []
    assert LoRAConfig(target_modules=["q_proj"]).target_modules == ("q_proj",)
    assert LoRAConfig.from_dict(SGD.to_dict()) == SGD
    for bad in (
        {"optimizer": "adam"},
        {"baseline": "median"},
        {"rank": 0},
        {"steps": 0},
        {"baseline_decay": 1.0},
        {"kl_coef": -1.0},
        {"max_grad_norm": 0.0},
    ):
        with pytest.raises(ValueError):
            LoRAConfig(**bad)


def test_update_moves_logprobs_by_the_sign_of_the_advantage(backend):
    dek = LowLevelDEK(backend, SGD)
    before = [dek.logprob(PROMPT, GOOD), dek.logprob(PROMPT, BAD)]
    stats = dek.update(PAIR)
    after = [dek.logprob(PROMPT, GOOD), dek.logprob(PROMPT, BAD)]
    assert isinstance(stats, UpdateStats) and stats.update == 1 and stats.steps == 1
    assert stats.baselines == (0.0, 0.0) and stats.advantages == (1.0, -1.0)
    assert stats.logprobs_before == pytest.approx(before, abs=1e-5)
    assert stats.logprobs_after == pytest.approx(after, abs=1e-5)
    assert after[0] > before[0] + 0.1 and after[1] < before[1] - 0.1
    # the loss is mean_k -A_k log p_k at the first step
    assert stats.loss == pytest.approx(-(before[0] - before[1]) / 2, rel=1e-5)
    assert stats.grad_norm > 0 and stats.kl == 0.0 and stats.log_ratios == ()
    assert json.loads(json.dumps(stats.to_dict()))["advantages"] == [1.0, -1.0]
    # the same with AdamW and the default leave-one-out baseline
    other = LowLevelDEK(make_backend(f"hf:{backend.path_or_name}"), LoRAConfig(rank=4, lr=1e-2))
    stats = other.update(PAIR)
    assert stats.advantages == (1.0, -1.0)
    assert stats.logprobs_after[0] > stats.logprobs_before[0]
    assert stats.logprobs_after[1] < stats.logprobs_before[1]


def test_a_bfloat16_model_trains_its_adapter(tiny_lm_dir):
    """The loop's default ``loop.hf_dtype`` (the real-model test in test_gguf.py runs
    float32, which CPUs without bfloat16 instructions train 15x faster)."""
    backend = make_backend(f"hf:{tiny_lm_dir}", dtype="bfloat16")
    assert backend.model.dtype == torch.bfloat16
    dek = LowLevelDEK(backend, SGD)
    stats = dek.update(PAIR)
    assert stats.advantages == (1.0, -1.0) and math.isfinite(stats.grad_norm)
    assert stats.logprobs_after[0] > stats.logprobs_before[0] + 0.1
    assert stats.logprobs_after[1] < stats.logprobs_before[1] - 0.1


def test_only_lora_parameters_change(backend):
    dek = LowLevelDEK(backend, SGD)
    base = _base_weights(dek.model)
    lora = {n: p.detach().clone() for n, p in dek.model.named_parameters() if "lora_" in n}
    assert lora and {n for n, p in dek.model.named_parameters() if p.requires_grad} == set(lora)
    dek.update(PAIR)
    for name, tensor in _base_weights(dek.model).items():
        assert torch.equal(tensor, base[name]), name
    changed = [
        n
        for n, p in dek.model.named_parameters()
        if "lora_" in n and not torch.equal(p.detach(), lora[n])
    ]
    assert any("lora_B" in n for n in changed)
    assert all(p.grad is None for p in dek.model.parameters())  # gradients are released


def _count_passes(backend, monkeypatch) -> list[bool]:
    """Records each forward pass of ``backend.token_logprobs`` (``sequence_logprob`` goes
    through it) as whether it had gradients."""
    passes: list[bool] = []
    real = backend.token_logprobs

    def counted(prompt, completion):
        passes.append(torch.is_grad_enabled())
        return real(prompt, completion)

    monkeypatch.setattr(backend, "token_logprobs", counted)
    return passes


@pytest.mark.parametrize("steps", [1, 2])
def test_log_p_before_comes_from_the_first_steps_passes(backend, monkeypatch, steps):
    # Without adapter dropout an update takes steps + 1 passes per sample (the training
    # passes, then log p after), not steps + 2: log p before is the first step's.
    dek = LowLevelDEK(backend, dataclasses.replace(SGD, steps=steps))
    before = [dek.logprob(PROMPT, GOOD), dek.logprob(PROMPT, BAD)]
    passes = _count_passes(backend, monkeypatch)
    stats = dek.update(PAIR)
    assert passes == [True, True] * steps + [False, False]
    assert stats.logprobs_before == pytest.approx(before, abs=1e-6)
    assert stats.logprobs_after == pytest.approx(
        [dek.logprob(PROMPT, GOOD), dek.logprob(PROMPT, BAD)], abs=1e-6
    )
    assert stats.loss == pytest.approx(-(before[0] - before[1]) / 2, rel=1e-5)


def test_with_adapter_dropout_log_p_before_has_its_own_pass(backend, monkeypatch):
    # The training passes drop adapter inputs, so log p before takes a pass without dropout
    # (and without gradient); a first update is needed for dropout to change anything (B = 0).
    dek = LowLevelDEK(backend, dataclasses.replace(SGD, dropout=0.5))
    dek.update(PAIR)
    before = [dek.logprob(PROMPT, GOOD), dek.logprob(PROMPT, BAD)]
    passes = _count_passes(backend, monkeypatch)
    stats = dek.update(PAIR)
    assert passes == [False, False, True, True, False, False]
    assert stats.logprobs_before == pytest.approx(before, abs=1e-6)


def _attention_calls(model) -> list[tuple[bool, bool]]:
    """Records each call of the first decoder layer's attention (which holds the adapter)
    as (the attention's training flag, its layer's training flag)."""
    layer = next(m for n, m in model.named_modules() if n.endswith("layers.0"))
    calls: list[tuple[bool, bool]] = []
    layer.self_attn.register_forward_hook(
        lambda module, args, out: calls.append((module.training, layer.training))
    )
    return calls


def test_gradient_checkpointing_recomputes_each_layer_for_the_same_update(tiny_lm_dir):
    deks, calls, stats = {}, {}, {}
    for on in (True, False):
        config = dataclasses.replace(SGD, gradient_checkpointing=on)
        deks[on] = LowLevelDEK(make_backend(f"hf:{tiny_lm_dir}"), config)
        calls[on] = _attention_calls(deks[on].model)
        stats[on] = deks[on].update(PAIR)
    # 2 training passes and 2 passes for log p after; checkpointed, the backward pass of
    # each training pass runs the layer again (up to its last saved tensor: torch's
    # checkpoint stops early, so the MLP, which holds no adapter, may not rerun)
    assert len(calls[False]) == 4 and len(calls[True]) == 6
    # the recompute happens because the layer itself is training; its submodules (and so
    # the base model's dropouts) are not, and nothing is training after the update
    assert {flags[0] for flags in calls[True]} == {False}
    assert sorted({flags[1] for flags in calls[True]}) == [False, True]
    assert {flags[1] for flags in calls[False]} == {False}
    assert not any(m.training for m in deks[True].model.modules())
    # the same gradient, so the same update
    assert stats[True].grad_norm == pytest.approx(stats[False].grad_norm, rel=1e-5)
    assert stats[True].logprobs_after == pytest.approx(stats[False].logprobs_after, abs=1e-5)
    lora = {n: p for n, p in deks[False].model.named_parameters() if "lora_" in n}
    for name, param in deks[True].model.named_parameters():
        if "lora_" in name:
            assert torch.allclose(param, lora[name], atol=1e-6), name


def test_a_model_that_cannot_checkpoint_is_a_one_line_error(backend):
    backend.model.supports_gradient_checkpointing = False
    with pytest.raises(ValueError, match="gradient_checkpointing=False") as info:
        LowLevelDEK(backend, SGD)
    assert "\n" not in str(info.value)
    dek = LowLevelDEK(backend, dataclasses.replace(SGD, gradient_checkpointing=False))
    assert dek.update(PAIR).steps == 1


def test_a_quantized_model_is_a_one_line_error(tiny_lm_dir):
    pytest.importorskip("torchao")
    quantized = make_backend(f"hf:{tiny_lm_dir}", dtype="float32", quantize="int8")
    with pytest.raises(ValueError, match="quantize='none'") as info:
        LowLevelDEK(quantized, SGD)
    assert "\n" not in str(info.value)


def test_save_load_roundtrip(backend, tmp_path):
    config = LoRAConfig(rank=4, lr=1e-2, baseline="ema")
    dek = LowLevelDEK(backend, config)
    dek.update(PAIR)
    dek.update([(PROMPT, GOOD, 3.0), (PROMPT, BAD, 1.0), (PROMPT, "", 7.0)])
    assert dek.num_updates == 2 and dek.ema == pytest.approx(0.9 * 0.0 + 0.1 * 2.0)
    folder = dek.save(tmp_path / "lora")
    names = {p.name for p in folder.iterdir()}
    assert names == {"adapter_config.json", "adapter_model.safetensors", STATE_FILE, OPTIMIZER_FILE}
    with safe_open(folder / "adapter_model.safetensors", "pt") as f:
        keys = list(f.keys())
    assert keys and all("lora_A" in k or "lora_B" in k for k in keys)  # no base weights
    state = json.loads((folder / STATE_FILE).read_text())
    assert state["num_updates"] == 2 and state["config"]["baseline"] == "ema"

    fresh = LowLevelDEK(make_backend(f"hf:{backend.path_or_name}"), config)
    assert fresh.logprob(PROMPT, GOOD) != pytest.approx(dek.logprob(PROMPT, GOOD), abs=1e-3)
    fresh.load(folder)
    for completion in (GOOD, BAD, "    return 1.0"):
        assert fresh.logprob(PROMPT, completion) == pytest.approx(
            dek.logprob(PROMPT, completion), abs=1e-6
        )
    assert fresh.ema == dek.ema and fresh.num_updates == 2
    saved, loaded = dek.optimizer.state_dict(), fresh.optimizer.state_dict()
    for key, value in saved["state"].items():
        assert torch.equal(value["exp_avg"], loaded["state"][key]["exp_avg"])
    # the two continue identically
    a, b = dek.update(PAIR), fresh.update(PAIR)
    assert a.logprobs_after == pytest.approx(b.logprobs_after, abs=1e-6) and a.ema == b.ema

    with pytest.raises(ValueError, match="rank"):
        LowLevelDEK(make_backend(f"hf:{backend.path_or_name}"), LoRAConfig(rank=8)).load(folder)
    with pytest.raises(FileNotFoundError):
        fresh.load(tmp_path / "nothing")


def test_kl_is_zero_before_any_update_and_positive_after(backend):
    dek = LowLevelDEK(backend, LoRAConfig(rank=4, lr=1e-2, kl_coef=0.5))
    first = dek.update(PAIR)
    assert first.kl == 0.0 and first.log_ratios == (0.0, 0.0)  # B = 0: the base model exactly
    second = dek.update(PAIR)
    assert math.isfinite(second.kl) and second.kl > 0
    # the log-ratios are log p_phi - log p_base, the adapter moved them apart in both directions
    base = [dek.logprob(PROMPT, c, base=True) for c in (GOOD, BAD)]
    assert second.log_ratios == pytest.approx(
        [b - a for b, a in zip(second.logprobs_before, base, strict=True)], abs=1e-5
    )
    assert second.log_ratios[0] > 0 > second.log_ratios[1]


def test_generation_goes_through_the_adapter(backend):
    dek = LowLevelDEK(backend, LoRAConfig(rank=4, lr=5e-2))
    assert backend.model is dek.model and isinstance(backend.model, peft.PeftModel)
    [[fresh]] = backend.generate_with_logprobs([PROMPT], temperature=0, max_new_tokens=8)
    with dek.model.disable_adapter():
        [[plain]] = backend.generate_with_logprobs([PROMPT], temperature=0, max_new_tokens=8)
    assert fresh == plain  # a fresh adapter (B = 0) changes nothing
    for _ in range(3):
        dek.update([(PROMPT, plain.token_ids, -5.0), (PROMPT, GOOD, 5.0)])
    [[adapted]] = backend.generate_with_logprobs([PROMPT], temperature=0, max_new_tokens=8)
    with dek.model.disable_adapter():
        [[again]] = backend.generate_with_logprobs([PROMPT], temperature=0, max_new_tokens=8)
    assert again == plain  # the base model is untouched
    assert adapted.token_ids != plain.token_ids
    assert adapted.logprob == pytest.approx(dek.logprob(PROMPT, adapted.token_ids), abs=1e-4)
    assert not dek.model.training


def test_skips_empty_completions_and_checks_samples(backend):
    dek = LowLevelDEK(backend, SGD)
    stats = dek.update([(PROMPT, "", 1.0), (PROMPT, [], 2.0)])
    assert stats.num_samples == 0 and stats.num_skipped == 2 and dek.num_updates == 0
    assert dek.ema is None
    stats = dek.update([(PROMPT, "", 100.0), *PAIR])
    assert stats.num_skipped == 1 and stats.scores == (10.0, -10.0) and stats.ema == 0.0
    with pytest.raises(ValueError, match="finite"):
        dek.update([(PROMPT, GOOD, math.inf)])
    with pytest.raises(ValueError, match="triple"):
        dek.update([(PROMPT, GOOD)])
    with pytest.raises(ValueError, match="already"):
        LowLevelDEK(backend, SGD)


def test_default_target_modules():
    llama = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=64,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
        )
    )
    assert default_target_modules(llama) == ("q_proj", "k_proj", "v_proj", "o_proj")
    gpt2 = GPT2LMHeadModel(
        GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2, n_positions=32)
    )
    assert default_target_modules(gpt2) == ("c_attn",)

    class Odd(torch.nn.Module):
        def __init__(self, layers):
            super().__init__()
            self.config = type("Config", (), {"model_type": "oddity"})()
            self.body = torch.nn.Sequential(*layers)

    with pytest.warns(UserWarning, match="oddity"):
        names = default_target_modules(Odd([torch.nn.Linear(2, 2), torch.nn.ReLU()]))
    assert names == ("0",)
    with pytest.raises(ValueError, match="oddity") as info:
        default_target_modules(Odd([torch.nn.ReLU()]))
    assert "\n" not in str(info.value)


def test_gpt2_adapter_trains(tmp_path):
    from tiny_lm import build_tiny_lm

    folder = build_tiny_lm(tmp_path / "gpt2", architecture="gpt2")
    backend = make_backend(f"hf:{folder}")
    dek = LowLevelDEK(backend, LoRAConfig(rank=2, lr=0.05, optimizer="sgd"))
    assert dek.target_modules == ("c_attn",)
    stats = dek.update(PAIR)
    assert stats.logprobs_after[0] > stats.logprobs_before[0]
    assert stats.logprobs_after[1] < stats.logprobs_before[1]


def test_tiny_lm_tokenizer_round_trips(backend, tiny_chat_lm_dir):
    text = "def f(x):\n    return jnp.where(x > 0, 1.0, 0.0)  # é → ∞"
    ids = backend.completion_token_ids(text)
    assert backend.tokenizer.decode(ids) == text and len(ids) < len(text.encode())
    assert backend.prompt_token_ids("x")[0] == backend.tokenizer.bos_token_id == 0
    assert 300 <= len(backend.tokenizer) <= 400
    chat = HFBackend(str(tiny_chat_lm_dir))
    assert chat.uses_chat_template and chat.format_prompt("hi").endswith("<|assistant|>")


def test_importing_dek_does_not_import_torch():
    code = (
        "import sys, llm.dek; assert 'torch' not in sys.modules and 'peft' not in sys.modules; "
        "from llm.dek import LowLevelDEK; assert LowLevelDEK.__module__ == 'llm.dek.low_level'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
