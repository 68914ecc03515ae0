"""The hf backend's shared prompt prefix (``HFBackend(share_prefill=True)``, the default).

Each distinct prompt of a call is run through the model once, alone (all its tokens but the
last), and its keys and values are copied, left-padded, into a preallocated ``StaticCache``
row for each completion that continues it, which ``model.generate`` then fills in place;
``share_prefill=False`` leaves the prefill to ``model.generate``, which repeats the prompt
once per completion.
Checked on two tiny random float32 models built offline by ``tests/llm/tiny_lm.py``: a
Qwen2 (the architecture of the Qwen2.5-Coder designers) and a Llama, both 2 layers, hidden
size 32, with the byte-level BPE tokenizer of ``tiny_lm.tiny_tokenizer``.
"""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tiny_lm import EOS_ID, build_tiny_lm  # noqa: E402

from llm.backends.hf import HFBackend  # noqa: E402

#: Two prompts of different token lengths, so the batch is left-padded.
PROMPTS = ["def reward(obs, action):", "Write a network that maps the observation to a value."]
MAX_NEW = 12


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """One torch thread: the models are tiny, and intra-op threads on a busy machine make
    each step much slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def model_dir(request, tmp_path_factory):
    """A tiny model folder of each architecture."""
    return build_tiny_lm(tmp_path_factory.mktemp(request.param), architecture=request.param)


def _backends(model_dir, seed: int = 0) -> tuple[HFBackend, HFBackend]:
    """``(cached prefix, uncached)`` backends on the same weights and seed."""
    return (
        HFBackend(str(model_dir), seed=seed),
        HFBackend(str(model_dir), seed=seed, share_prefill=False),
    )


def _token_ids(rows) -> list[list[tuple[int, ...]]]:
    return [[c.token_ids for c in row] for row in rows]


@pytest.mark.parametrize("n", [1, 3])
def test_greedy_tokens_with_a_cached_prefix_equal_the_uncached_ones(model_dir, n):
    """Greedy decoding from the cached prefix gives the uncached tokens and
    log-probabilities, for two left-padded prompts and for one prompt repeated ``n`` times
    (one prefill row expanded to ``n`` cache rows)."""
    cached, uncached = _backends(model_dir)
    for prompts in (PROMPTS, [PROMPTS[0]] * n):
        got = cached.generate_with_logprobs(prompts, n=n, temperature=0, max_new_tokens=MAX_NEW)
        want = uncached.generate_with_logprobs(prompts, n=n, temperature=0, max_new_tokens=MAX_NEW)
        assert [len(row) for row in got] == [n] * len(prompts)
        assert _token_ids(got) == _token_ids(want)
        for row, reference in zip(got, want, strict=True):
            for c, r in zip(row, reference, strict=True):
                assert len(c.token_ids) == MAX_NEW or c.token_ids[-1] == EOS_ID
                assert c.token_logprobs == pytest.approx(r.token_logprobs, abs=1e-5)
    # every completion of the repeated prompt is the same greedy sequence
    assert len({c.token_ids for row in got for c in row}) == 1


@pytest.mark.parametrize("n", [1, 3])
def test_sampled_calls_return_n_completions_reproducibly(model_dir, n):
    """With a fixed seed, a sampled call returns ``n`` completions per prompt, the same
    ones on a second backend with that seed, and (float32) those of the uncached path."""
    cached, uncached = _backends(model_dir, seed=7)
    again = HFBackend(str(model_dir), seed=7)
    got = cached.generate_with_logprobs(PROMPTS, n=n, temperature=1.0, max_new_tokens=MAX_NEW)
    assert [len(row) for row in got] == [n] * len(PROMPTS)
    for row in got:
        for c in row:
            assert 1 <= len(c.token_ids) == len(c.token_logprobs) <= MAX_NEW
    repeat = again.generate_with_logprobs(PROMPTS, n=n, temperature=1.0, max_new_tokens=MAX_NEW)
    want = uncached.generate_with_logprobs(PROMPTS, n=n, temperature=1.0, max_new_tokens=MAX_NEW)
    assert _token_ids(got) == _token_ids(repeat) == _token_ids(want)
    texts = cached.generate(PROMPTS, n=n, temperature=1.0, max_new_tokens=MAX_NEW)
    assert [len(row) for row in texts] == [n] * len(PROMPTS)


def _forward_lengths(backend: HFBackend, prompts: list[str], n: int) -> list[tuple[int, int]]:
    """``(rows, positions)`` of each model forward of one sampled call."""
    shapes = []

    def record(module, args, kwargs):
        ids = kwargs["input_ids"] if "input_ids" in kwargs else args[0]
        shapes.append(tuple(ids.shape))

    hook = backend.model.register_forward_pre_hook(record, with_kwargs=True)
    try:
        backend.generate(prompts, n=n, temperature=1.0, max_new_tokens=MAX_NEW)
    finally:
        hook.remove()
    return shapes


def test_the_prefill_runs_once_per_distinct_prompt(model_dir):
    """With the cached prefix, one forward per distinct prompt covers its tokens but the
    last (those after the tokens it shares with an earlier prompt), without padding, and
    every later forward is one position per row; uncached, the first decoding step runs
    ``len(prompts) * n`` full-length rows."""
    cached, uncached = _backends(model_dir)
    prompts, n = [PROMPTS[0], PROMPTS[1], PROMPTS[0]], 4
    first, second = (cached.prompt_token_ids(p) for p in PROMPTS)
    longest = max(len(first), len(second))
    start = len(os.path.commonprefix([first, second]))  # BOS: the second continues it
    shapes = _forward_lengths(cached, prompts, n)
    assert shapes[:2] == [(1, len(first) - 1), (1, len(second) - 1 - start)]
    assert all(shape == (len(prompts) * n, 1) for shape in shapes[2:])
    assert len(shapes) <= MAX_NEW + 2  # the prefills, then at most one forward per new token
    plain = _forward_lengths(uncached, prompts, n)
    assert plain[0] == (len(prompts) * n, longest)
    assert all(shape == (len(prompts) * n, 1) for shape in plain[1:])


def test_prompts_that_start_alike_share_those_tokens_prefill(model_dir):
    """Three prompts that share their first sentence (as a module's search prompts share
    their task text): the first is prefilled whole, the others from where they part from
    an earlier one (the third from the second, with which it shares more), and greedy
    tokens and log-probabilities equal those of a call without the shared prefill."""
    head = "Write a network that maps the observation to a value. "
    prompts = [
        head + "Use two layers.",
        head + "Use three layers of width 64.",
        head + "Use three layers of width 32.",
    ]
    cached, uncached = _backends(model_dir)
    ids = [cached.prompt_token_ids(p) for p in prompts]
    shapes = []

    def record(module, args, kwargs):
        shapes.append(tuple(kwargs["input_ids"].shape))

    hook = cached.model.register_forward_pre_hook(record, with_kwargs=True)
    try:
        got = cached.generate_with_logprobs(prompts, n=2, temperature=0, max_new_tokens=MAX_NEW)
    finally:
        hook.remove()
    one_two = len(os.path.commonprefix(ids[:2]))
    two_three = len(os.path.commonprefix(ids[1:]))
    assert len(ids[0]) > one_two > len(cached.prompt_token_ids(head)) - 3
    assert two_three > one_two
    assert shapes[:3] == [
        (1, len(ids[0]) - 1),
        (1, len(ids[1]) - 1 - one_two),
        (1, len(ids[2]) - 1 - two_three),
    ]
    want = uncached.generate_with_logprobs(prompts, n=2, temperature=0, max_new_tokens=MAX_NEW)
    assert _token_ids(got) == _token_ids(want)
    for row, reference in zip(got, want, strict=True):
        for c, r in zip(row, reference, strict=True):
            assert c.token_logprobs == pytest.approx(r.token_logprobs, abs=1e-5)
