"""The hf backend (llm/backends/hf.py) on a tiny random Llama built in a temporary folder.

Nothing is downloaded: the tokenizer is a character-level WordLevel tokenizer over a small
alphabet (so texts re-tokenize to the same ids), the model a 2-layer Llama with hidden size
32. Two folders share the weights: ``plain`` (no chat template, a separate pad token) and
``chat`` (a chat template, no pad token, so the backend pads with EOS).
"""

from __future__ import annotations

import os
import random
import shutil
import string
import subprocess
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: E402

from llm.backends import BackendError, make_backend  # noqa: E402
from llm.backends import hf as hf_module  # noqa: E402
from llm.backends.hf import Completion, HFBackend  # noqa: E402

SPECIAL = ["<s>", "</s>", "<pad>", "<unk>"]
BOS, EOS, PAD = 0, 1, 2
# A small alphabet keeps P(EOS) per step near 1/45, so sampled completions do end early.
CHARS = sorted(set(string.ascii_lowercase + " \n<|>:.,_()="))
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
PROMPTS = ["def reward(x):", "a longer prompt, so the batch is left padded"]


def _tokenizer(pad: bool) -> PreTrainedTokenizerFast:
    vocab = {t: i for i, t in enumerate(SPECIAL + CHARS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", BOS)]
    )
    tok.add_special_tokens(SPECIAL)
    tokens = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, **tokens, **({"pad_token": "<pad>"} if pad else {})
    )


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread():
    """Runs torch on one thread: the model is tiny, and intra-op threads on a busy machine
    make each step orders of magnitude slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory):
    """``{"plain": folder, "chat": folder}`` holding the same tiny model."""
    root = tmp_path_factory.mktemp("hf")
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(SPECIAL) + len(CHARS),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        initializer_range=0.2,
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
    )
    LlamaForCausalLM(config).save_pretrained(root / "plain")
    _tokenizer(pad=True).save_pretrained(root / "plain")
    shutil.copytree(root / "plain", root / "chat")
    chat = _tokenizer(pad=False)
    chat.chat_template = CHAT_TEMPLATE
    chat.save_pretrained(root / "chat")
    return {"plain": root / "plain", "chat": root / "chat"}


@pytest.fixture(scope="session")
def plain(model_dirs):
    return make_backend(f"hf:{model_dirs['plain']}")


@pytest.fixture(scope="session")
def chat(model_dirs):
    return HFBackend(str(model_dirs["chat"]), system_prompt="be brief")


def recomputed_logprobs(backend: HFBackend, prompt: str, ids) -> torch.Tensor:
    """log p(ids[i] | prompt, ids[:i]) from one plain forward pass, shape (len(ids),)."""
    context = backend.prompt_token_ids(prompt)
    tokens = torch.tensor([context + list(ids)])
    with torch.no_grad():
        logits = backend.model(input_ids=tokens).logits[0]
    logp = torch.log_softmax(logits.float(), dim=-1)[len(context) - 1 : -1]
    return logp.gather(1, torch.tensor(ids)[:, None])[:, 0]


def test_make_backend_shapes_and_seeding(model_dirs, plain):
    assert isinstance(plain, HFBackend) and plain.name == "hf"
    out = plain.generate(PROMPTS, n=3, temperature=1.0, max_new_tokens=8)
    assert len(out) == 2 and all(
        len(row) == 3 and all(isinstance(c, str) for c in row) for row in out
    )
    rng = torch.get_rng_state()
    first = HFBackend(str(model_dirs["plain"]), seed=5).generate(PROMPTS, n=3, max_new_tokens=12)
    again = HFBackend(str(model_dirs["plain"]), seed=5)
    assert torch.equal(torch.get_rng_state(), rng)  # the global RNG is left alone
    assert again.generate(PROMPTS, n=3, max_new_tokens=12) == first
    assert again.generate(PROMPTS, n=3, max_new_tokens=12) != first  # the next call differs
    other = HFBackend(str(model_dirs["plain"]), seed=6).generate(PROMPTS, n=3, max_new_tokens=12)
    assert other != first


def test_greedy_is_deterministic_argmax(model_dirs, plain):
    [row] = plain.generate_with_logprobs(PROMPTS[:1], n=3, temperature=0, max_new_tokens=6)
    assert row[0] == row[1] == row[2]
    other = HFBackend(str(model_dirs["plain"]), seed=99)
    assert other.generate(PROMPTS[:1], n=2, temperature=0, max_new_tokens=6) == [[row[0].text] * 2]
    tokens = torch.tensor([plain.prompt_token_ids(PROMPTS[0])])
    with torch.no_grad():
        assert int(plain.model(input_ids=tokens).logits[0, -1].argmax()) == row[0].token_ids[0]


def test_prompt_formatting(plain, chat):
    assert not plain.uses_chat_template and plain.format_prompt("hi") == "hi"
    assert plain.prompt_token_ids("hi")[0] == BOS  # the tokenizer's special tokens are added
    assert chat.uses_chat_template
    assert chat.format_prompt("hi") == "<s><|system|>be brief\n<|user|>hi\n<|assistant|>"
    ids = chat.prompt_token_ids("hi")
    assert ids[0] == BOS and ids.count(BOS) == 1  # the template's BOS only
    assert chat.tokenizer.pad_token_id == EOS and chat.tokenizer.padding_side == "left"


@pytest.mark.parametrize("variant", ["plain", "chat"])
def test_logprobs_match_a_forward_pass(variant, request):
    backend = request.getfixturevalue(variant)
    max_new = 40
    rows = backend.generate_with_logprobs(PROMPTS, n=4, temperature=1.0, max_new_tokens=max_new)
    assert [len(r) for r in rows] == [4, 4]
    ended = 0
    for prompt, row in zip(PROMPTS, rows, strict=True):
        for c in row:
            assert isinstance(c, Completion) and len(c.token_ids) == len(c.token_logprobs) >= 1
            assert EOS not in c.token_ids[:-1]  # cut at the first EOS, padding dropped
            if len(c.token_ids) < max_new:
                assert c.token_ids[-1] == EOS
            ended += c.token_ids[-1] == EOS
            assert c.text == backend.tokenizer.decode(c.token_ids, skip_special_tokens=True)
            expected = recomputed_logprobs(backend, prompt, c.token_ids)
            torch.testing.assert_close(torch.tensor(c.token_logprobs), expected, atol=1e-4, rtol=0)
    assert ended > 0  # the EOS path is exercised


def test_tempered_samples_are_transformers_own_and_logprobs_untempered(model_dirs):
    """With ``drop_finished_rows=False`` the backend runs ``model.generate`` and applies the
    temperature itself (after reading the raw logits): its samples are those of
    ``model.generate``'s own temperature sampling under the same seed, and the recorded
    log-probabilities are the untempered model's."""
    backend = HFBackend(
        str(model_dirs["plain"]), seed=5, share_prefill=False, drop_finished_rows=False
    )
    seed = random.Random(5).getrandbits(63)  # the backend's first call's torch seed
    [row] = backend.generate_with_logprobs(PROMPTS[:1], n=3, temperature=0.7, max_new_tokens=25)
    ids = torch.tensor([backend.prompt_token_ids(PROMPTS[0])] * 3)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        want = backend.model.generate(
            input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True,
            temperature=0.7, top_k=0, top_p=1.0, max_new_tokens=25,
            eos_token_id=EOS, pad_token_id=EOS,
        )[:, ids.shape[1] :].tolist()  # fmt: skip
    assert len({c.token_ids for c in row}) > 1  # three different samples
    for c, reference in zip(row, want, strict=True):
        assert list(c.token_ids) == reference[: len(c.token_ids)]
        expected = recomputed_logprobs(backend, PROMPTS[0], c.token_ids)
        torch.testing.assert_close(torch.tensor(c.token_logprobs), expected, atol=1e-4, rtol=0)


def reference_sample(backend: HFBackend, prompt: str, seed: int, temperature: float, steps: int):
    """One completion decoded alone, without a cache: a full forward pass over the prompt
    and the tokens so far at each step, the token drawn by inverse transform from
    ``softmax(logits / temperature)`` with one uniform per step from a generator seeded
    ``seed`` (the decode loop's per-row scheme); stops at EOS or after ``steps`` tokens."""
    context, ids = backend.prompt_token_ids(prompt), []
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        with torch.no_grad():
            logits = backend.model(input_ids=torch.tensor([context + ids])).logits[0, -1]
        probabilities = torch.softmax(logits.double() / temperature, dim=-1).tolist()
        u = torch.rand(1, generator=generator, dtype=torch.float64).item() * sum(probabilities)
        total, token = 0.0, len(probabilities) - 1
        for k, p in enumerate(probabilities):
            total += p
            if total > u:
                token = k
                break
        ids.append(token)
        if token == EOS:
            break
    return ids


@pytest.mark.parametrize("share_prefill", [True, False])
def test_the_decode_loop_samples_each_row_alone(model_dirs, share_prefill):
    """The decode loop's samples (rows of two left-padded prompts, ``n`` each, leaving the
    batch as they end) are each row's own: what :func:`reference_sample` draws decoding that
    row alone, with no cache, from the row's seed (the call seed's ``random.Random``
    sequence, rows prompt by prompt); the log-probabilities are the untempered model's."""
    backend = HFBackend(str(model_dirs["plain"]), seed=11, share_prefill=share_prefill)
    got = backend.generate_with_logprobs(PROMPTS, n=3, temperature=0.8, max_new_tokens=40)
    draws = random.Random(random.Random(11).getrandbits(63))
    seeds = [draws.getrandbits(63) for _ in range(6)]
    completions = [c for row in got for c in row]
    assert any(len(c.token_ids) < 40 for c in completions)  # some rows ended early
    for i, c in enumerate(completions):
        prompt = PROMPTS[i // 3]
        assert list(c.token_ids) == reference_sample(backend, prompt, seeds[i], 0.8, 40)
        expected = recomputed_logprobs(backend, prompt, c.token_ids)
        torch.testing.assert_close(torch.tensor(c.token_logprobs), expected, atol=1e-4, rtol=0)


def test_rows_leave_the_batch_when_they_end(model_dirs):
    """Each decoding step runs only the rows that have not ended: after the prefills, step
    k's forward has as many rows as completions longer than k tokens."""
    plain = HFBackend(str(model_dirs["plain"]), seed=11)
    shapes = []

    def record(module, args, kwargs):
        shapes.append(tuple(kwargs["input_ids"].shape))

    hook = plain.model.register_forward_pre_hook(record, with_kwargs=True)
    try:
        got = plain.generate_with_logprobs(PROMPTS, n=4, temperature=1.0, max_new_tokens=40)
    finally:
        hook.remove()
    lengths = [len(c.token_ids) for row in got for c in row]
    steps = shapes[len(PROMPTS) :]  # after one prefill forward per distinct prompt
    assert len(steps) == max(lengths)
    assert [rows for rows, _ in steps] == [sum(n > k for n in lengths) for k in range(len(steps))]
    assert steps[-1][0] < steps[0][0] == 8  # the batch shrank


def test_the_decode_loop_draws_from_the_tempered_softmax(plain):
    """One-token samples of one prompt (3,000 rows at temperature 0.5) have the frequencies
    of ``softmax(logits / 0.5)`` of a plain forward pass: each token's count within five
    binomial standard deviations of its expectation."""
    rows, temperature = 3000, 0.5
    [row] = plain.generate_with_logprobs(
        PROMPTS[:1], n=rows, temperature=temperature, max_new_tokens=1
    )
    counts = torch.bincount(torch.tensor([c.token_ids[0] for c in row]), minlength=len(CHARS) + 4)
    with torch.no_grad():
        logits = plain.model(input_ids=torch.tensor([plain.prompt_token_ids(PROMPTS[0])]))
    p = torch.softmax(logits.logits[0, -1].double() / temperature, dim=-1)
    assert p.max() < 0.5  # a spread distribution, so the test sees many tokens
    expected, spread = rows * p, (rows * p * (1 - p)).sqrt()
    assert torch.all((counts - expected).abs() <= 5 * spread + 1)
    assert (counts > 0).sum() >= 10


@pytest.mark.parametrize("variant", ["plain", "chat"])
def test_greedy_decoding_equals_generates(variant, model_dirs):
    """Greedy completions of the decode loop (cache shared or not) are ``model.generate``'s
    (``drop_finished_rows=False``), tokens and log-probabilities."""
    options = {"system_prompt": "be brief"} if variant == "chat" else {}
    folder = str(model_dirs[variant])
    want = HFBackend(folder, drop_finished_rows=False, **options).generate_with_logprobs(
        PROMPTS, n=2, temperature=0, max_new_tokens=30
    )
    for share_prefill in (True, False):
        backend = HFBackend(folder, share_prefill=share_prefill, **options)
        got = backend.generate_with_logprobs(PROMPTS, n=2, temperature=0, max_new_tokens=30)
        assert [[c.token_ids for c in row] for row in got] == [
            [c.token_ids for c in row] for row in want
        ]
        for row, reference in zip(got, want, strict=True):
            for c, r in zip(row, reference, strict=True):
                assert c.token_logprobs == pytest.approx(r.token_logprobs, abs=1e-5)


@pytest.mark.parametrize("variant", ["plain", "chat"])
def test_a_shared_prefill_samples_what_generate_alone_samples(variant, model_dirs):
    """Each distinct prompt of a call is run through the model once (its tokens but the
    last, alone) and its cache copied to its completions; they are the completions of
    the decode loop running every row's whole prompt itself, same seed."""
    options = {"system_prompt": "be brief"} if variant == "chat" else {}
    shared = HFBackend(str(model_dirs[variant]), seed=3, **options)
    alone = HFBackend(str(model_dirs[variant]), seed=3, share_prefill=False, **options)
    prompts = [PROMPTS[0], PROMPTS[1], PROMPTS[0]]  # equal prompts share one prefill too
    shapes = []

    def record(module, args, kwargs):
        shapes.append(tuple(kwargs["input_ids"].shape))

    hook = shared.model.register_forward_pre_hook(record, with_kwargs=True)
    try:
        got = shared.generate_with_logprobs(prompts, n=3, temperature=1.0, max_new_tokens=20)
    finally:
        hook.remove()
    want = alone.generate_with_logprobs(prompts, n=3, temperature=1.0, max_new_tokens=20)
    assert [[c.token_ids for c in row] for row in got] == [
        [c.token_ids for c in row] for row in want
    ]
    for row, reference in zip(got, want, strict=True):
        for c, r in zip(row, reference, strict=True):
            assert c.token_logprobs == pytest.approx(r.token_logprobs, abs=1e-5)
    first, second = (shared.prompt_token_ids(p) for p in PROMPTS)
    start = len(os.path.commonprefix([first, second]))  # e.g. BOS, or the system message
    # the prefill, one forward per distinct prompt (the second from where it parts from
    # the first), then the first decoding step
    assert shapes[:3] == [(1, len(first) - 1), (1, len(second) - 1 - start), (9, 1)]
    assert shared.generate(prompts, n=2, temperature=0, max_new_tokens=12) == alone.generate(
        prompts, n=2, temperature=0, max_new_tokens=12
    )


def test_sequence_logprob_is_differentiable(plain):
    [[c]] = plain.generate_with_logprobs(PROMPTS[:1], n=1, temperature=1.0, max_new_tokens=10)
    plain.model.zero_grad()
    value = plain.sequence_logprob(PROMPTS[0], c.token_ids)
    assert value.shape == () and value.dtype == torch.float32 and value.requires_grad
    assert value.item() == pytest.approx(c.logprob, abs=1e-4)
    value.backward()
    grads = [p.grad for p in plain.model.parameters() if p.grad is not None]
    assert grads and any(float(g.abs().sum()) > 0 for g in grads)
    plain.model.zero_grad()
    # a text completion: the character tokenizer maps it to one id per character
    text = "def f(x):"
    assert plain.completion_token_ids(text) == [
        plain.tokenizer.convert_tokens_to_ids(ch) for ch in text
    ]
    expected = recomputed_logprobs(plain, PROMPTS[0], plain.completion_token_ids(text)).sum()
    assert plain.sequence_logprob(PROMPTS[0], text).item() == pytest.approx(
        expected.item(), abs=1e-4
    )
    with pytest.raises(ValueError):
        plain.sequence_logprob(PROMPTS[0], "")


def test_token_logprobs_compute_logits_at_the_completion_only(plain, monkeypatch):
    # The LM head runs on the last C + 1 positions (logits_to_keep), not on the prompt's;
    # the values are those of a full forward pass, which a model whose forward does not
    # take logits_to_keep gets.
    assert hf_module._takes_logits_to_keep(plain.model)
    prompt, ids = PROMPTS[1], plain.completion_token_ids("def f(x):")
    rows = []
    hook = plain.model.lm_head.register_forward_hook(lambda m, i, out: rows.append(out.shape[1]))
    try:
        with torch.no_grad():
            kept = plain.token_logprobs(prompt, ids)
            monkeypatch.setattr(hf_module, "_takes_logits_to_keep", lambda model: False)
            full = plain.token_logprobs(prompt, ids)
    finally:
        hook.remove()
    assert rows == [len(ids) + 1, len(plain.prompt_token_ids(prompt)) + len(ids)]
    assert kept.shape == full.shape == (len(ids),)
    torch.testing.assert_close(kept, full, atol=1e-6, rtol=0)
    torch.testing.assert_close(kept, recomputed_logprobs(plain, prompt, ids), atol=1e-6, rtol=0)
    monkeypatch.undo()

    class NoKeep(torch.nn.Module):
        def forward(self, input_ids):
            return input_ids

    assert not hf_module._takes_logits_to_keep(NoKeep())


@pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")
def test_a_lora_wrapped_model_gets_gradients(model_dirs):
    peft = pytest.importorskip("peft")
    backend = HFBackend(str(model_dirs["plain"]))  # get_peft_model edits the model in place
    lora = peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"])
    backend.model = peft.get_peft_model(backend.model, lora)
    [[c]] = backend.generate_with_logprobs(PROMPTS[:1], temperature=1.0, max_new_tokens=6)
    assert hf_module._takes_logits_to_keep(backend.model)  # the wrapped model's forward
    value = backend.sequence_logprob(PROMPTS[0], c.token_ids)
    assert value.item() == pytest.approx(c.logprob, abs=1e-4)
    value.backward()
    grads = [p.grad for name, p in backend.model.named_parameters() if "lora_B" in name]
    assert grads and all(float(g.abs().sum()) > 0 for g in grads)  # B starts at 0, A's grad is 0


def next_token_logprobs(backend: HFBackend, prompt: str, ids) -> torch.Tensor:
    """log-softmax of the next-token logits at each of ``ids`` after ``prompt``, one plain
    forward pass, shape (len(ids), vocabulary)."""
    context = backend.prompt_token_ids(prompt)
    with torch.no_grad():
        logits = backend.model(input_ids=torch.tensor([context + list(ids)])).logits[0]
    return torch.log_softmax(logits.float(), dim=-1)[len(context) - 1 : -1]


def test_int8_quantization_is_the_float_model_within_rounding(model_dirs):
    """``quantize="int8"``: every linear weight becomes int8 (one scale per output
    channel); teacher-forced on float32's greedy tokens, the next-token log-probabilities
    stay within the rounding of float32's and the top token is float32's wherever
    float32's lead exceeds twice that position's rounding; the reported log-probabilities are those
    of the quantized model's own forward pass."""
    pytest.importorskip("torchao")
    folder = str(model_dirs["plain"])
    exact = HFBackend(folder, dtype="float32")
    int8 = HFBackend(folder, dtype="float32", quantize="int8")
    assert exact.quantize == "none" and int8.quantize == "int8"
    linear = [m for m in int8.model.modules() if isinstance(m, torch.nn.Linear)]
    assert len(linear) == 2 * 7 + 1  # q, k, v, o, gate, up, down per layer; the LM head
    assert all(m.weight.qdata.dtype == torch.int8 for m in linear)
    assert not any(hasattr(m.weight, "qdata") for m in exact.model.modules()
                   if isinstance(m, torch.nn.Linear))  # fmt: skip
    for prompt in PROMPTS:
        [[greedy]] = exact.generate_with_logprobs([prompt], temperature=0, max_new_tokens=20)
        want = next_token_logprobs(exact, prompt, greedy.token_ids)
        got = next_token_logprobs(int8, prompt, greedy.token_ids)
        rounding = (got - want).abs().max(dim=-1).values  # per position, over the vocabulary
        assert 1e-4 < rounding.max() < 0.25  # quantized, not the same numbers; close (nats)
        # Where every log-probability moved by at most r and float32's lead exceeds 2r, the
        # quantized top token is float32's (a bound per position: int8 kernels round
        # differently on AVX2 and AVX-512 CPUs, so one worst case would mask every position).
        top2 = want.topk(2, dim=-1).values
        clear = top2[:, 0] - top2[:, 1] > 2 * rounding
        assert clear.sum() >= len(clear) // 4  # the comparison below is not vacuous
        assert torch.equal(got.argmax(-1)[clear], want.argmax(-1)[clear])
        [[sampled]] = int8.generate_with_logprobs([prompt], temperature=0, max_new_tokens=20)
        # The reported log-probabilities are the quantized model's: nearer its forward pass
        # than float32's (a one-row decoding step and a whole-sequence forward may round
        # an activation to a neighbouring int8 level, so they need not be equal).
        reported = torch.tensor(sampled.token_logprobs)
        own = (recomputed_logprobs(int8, prompt, sampled.token_ids) - reported).abs().mean()
        other = (recomputed_logprobs(exact, prompt, sampled.token_ids) - reported).abs().mean()
        assert own < other / 2


def test_int8_without_torchao_is_a_one_line_error(model_dirs, monkeypatch):
    monkeypatch.setitem(sys.modules, "torchao.quantization", None)  # import fails
    with pytest.raises(BackendError, match="needs torchao") as info:
        HFBackend(str(model_dirs["plain"]), quantize="int8")
    assert "\n" not in str(info.value)


def test_argument_checks(plain):
    with pytest.raises(TypeError):
        plain.generate_with_logprobs("one prompt")
    with pytest.raises(ValueError):
        plain.generate_with_logprobs(PROMPTS, n=0)
    assert plain.generate_with_logprobs([], n=2) == []


@pytest.mark.parametrize(
    "spec, options, needle",
    [
        ("hf:/no/such/model/folder", {}, "/no/such/model/folder"),
        ("hf:no-such-org/no-such-model", {}, "no-such-org/no-such-model"),
        ("hf:{plain}", {"dtype": "int8"}, "int8"),
        ("hf:{plain}", {"quantize": "int4"}, "int4"),
        ("hf:{plain}", {"temperature": 1.0}, "temperature"),
        ("hf:{plain}", {"device": "nosuchdevice"}, "nosuchdevice"),
    ],
)
def test_errors_are_one_line(model_dirs, spec, options, needle):
    with pytest.raises(BackendError) as info:
        make_backend(spec.format(plain=model_dirs["plain"]), **options)
    message = str(info.value)
    assert "\n" not in message and needle in message


@pytest.mark.parametrize(
    "kind, probe, options, setting",
    [
        ("bfloat16", "_is_avx512_bf16_supported", {"dtype": "bfloat16"}, "loop.hf_dtype=float32"),
        ("int8", "_is_vnni_supported", {"dtype": "float32", "quantize": "int8"},
         "loop.hf_quantize=none"),
    ],
)  # fmt: skip
def test_a_cpu_without_the_instructions_a_setting_needs_warns(
    model_dirs, monkeypatch, kind, probe, options, setting
):
    """bfloat16 without avx512_bf16 or AMX converts every product; int8 without
    avx512_vnni or AMX falls back to a kernel 20-90x slower than float32 (an AVX2-only AMD
    EPYC): the backend says so and names the setting; not for float32, nor where AMX
    computes it, nor where PyTorch cannot tell."""
    folder = str(model_dirs["plain"])
    has = {"bfloat16": hf_module.cpu_has_bfloat16, "int8": hf_module.cpu_has_int8}[kind]

    def ours(record) -> list[str]:
        return [str(w.message) for w in record if f"no {kind} instructions" in str(w.message)]

    monkeypatch.setattr(torch.cpu, probe, lambda: False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    assert not has()
    with pytest.warns(UserWarning, match=setting):
        HFBackend(folder, device="cpu", **options)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        HFBackend(folder, dtype="float32", device="cpu")
    assert ours(record) == []
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)  # AMX computes it
    assert has()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        HFBackend(folder, device="cpu", **options)
    assert ours(record) == []
    monkeypatch.delattr(torch.cpu, probe)  # a PyTorch that cannot tell
    assert has()


def test_auto_device_threads_and_token_counts(model_dirs):
    before = torch.get_num_threads()
    try:
        backend = HFBackend(str(model_dirs["plain"]), device="auto", threads=2)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert backend.device.type == expected
    text = "def reward(): return 1"
    assert backend.count_tokens(text) == len(backend.completion_token_ids(text)) > 0
    with pytest.raises(BackendError, match="threads must be >= 0"):
        HFBackend(str(model_dirs["plain"]), threads=-1)


def test_the_run_config_sets_the_hf_designers_device_dtype_quantization_and_threads():
    from serl_jax.config import ConfigError, load_config
    from serl_jax.training.serl import backend_options

    cfg = load_config(None, ["loop.llm=hf:qwen2.5-coder-1.5b", "loop.hf_threads=1"])
    want = {"device": "auto", "dtype": "bfloat16", "quantize": "none", "threads": 1}
    assert backend_options(cfg, 0) == want
    cfg = load_config(None, ["loop.llm=hf:qwen2.5-coder-1.5b", "loop.hf_quantize=int8"])
    assert backend_options(cfg, 0)["quantize"] == "int8"
    for bad, needle in (
        ("loop.hf_dtype=int8", "loop.hf_dtype"),
        ("loop.hf_quantize=int4", "loop.hf_quantize"),
        ("loop.hf_device=tpu", "loop.hf_device"),
        ("loop.hf_threads=-1", "loop.hf_threads"),
        ("loop.hf_quantize=int8 dek.level=low", "dek.level=low"),  # LoRA trains floats
    ):
        with pytest.raises(ConfigError, match=needle):
            load_config(None, bad.split())


def test_importing_backends_does_not_import_torch():
    code = (
        "import sys, llm.backends; "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.fixture(scope="session")
def scripted_dir(tmp_path_factory):
    """A model that writes a fixed script: whole-line tokens and a Llama with no layers,
    so each next token depends on the current one only (embedding one-hot, ``lm_head``
    the successor map): ``a`` -> ``Sure:\\n`` -> opening fence -> ``x = 1\\n`` -> closing
    fence -> ``Done.`` -> ``Done.`` ..."""
    pieces = ["Sure:\n", "```python\n", "x = 1\n", "```\n", "Done.", "a"]
    vocab = {t: i for i, t in enumerate(SPECIAL + pieces)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    alternatives = "|".join(p.replace(".", r"\.").replace("\n", r"\n") for p in pieces)
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(alternatives + r"|[\s\S]"), "isolated")
    tok.decoder = decoders.Fuse()
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", BOS)]
    )
    tok.add_special_tokens(SPECIAL)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
        pad_token="<pad>",
    )  # fmt: skip
    config = LlamaConfig(
        vocab_size=len(vocab), hidden_size=16, intermediate_size=16, num_hidden_layers=0,
        num_attention_heads=1, num_key_value_heads=1, max_position_embeddings=64,
        bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD,
    )  # fmt: skip
    model = LlamaForCausalLM(config)
    script = ["a", *pieces[:5], "Done."]
    with torch.no_grad():
        model.model.embed_tokens.weight.zero_()
        model.lm_head.weight.zero_()
        for i in range(len(vocab)):
            model.model.embed_tokens.weight[i, i] = 1.0
        for token, successor in zip(script, script[1:], strict=False):
            model.lm_head.weight[vocab[successor], vocab[token]] = 20.0
    folder = tmp_path_factory.mktemp("scripted")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def test_generation_stops_after_the_first_code_block(scripted_dir):
    closed = "Sure:\n```python\nx = 1\n```\n"
    stopping = HFBackend(str(scripted_dir))
    # greedy, and sampled in one batch with a prompt that never opens a block
    [[greedy]] = stopping.generate_with_logprobs(["a"], n=1, temperature=0.0, max_new_tokens=8)
    assert greedy.text == closed and len(greedy.token_ids) == 4
    sampled, endless = stopping.generate_with_logprobs(
        ["a", "Done."], n=2, temperature=1.0, max_new_tokens=8
    )
    for c in sampled:
        assert c.text == closed and len(c.token_logprobs) == 4
        expected = recomputed_logprobs(stopping, "a", c.token_ids)
        assert torch.allclose(torch.tensor(c.token_logprobs), expected, atol=1e-4)
    assert all(c.text == "Done." * 8 for c in endless)  # the other row ran to its budget
    [[full]] = HFBackend(str(scripted_dir), stop_after_code=False).generate_with_logprobs(
        ["a"], n=1, temperature=0.0, max_new_tokens=8
    )
    assert full.text == closed + "Done." * 4 and full.token_ids[:4] == greedy.token_ids
