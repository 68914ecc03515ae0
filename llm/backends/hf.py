"""A local transformers causal LM as a backend (the ``hf:<path or name>`` spec).

Loads ``AutoTokenizer`` and ``AutoModelForCausalLM`` from a local folder, a GGUF file
(llama.cpp's format, as Ollama and LM Studio store models: dequantized on load by
transformers with the ``gguf`` package) or the local Hugging Face cache; nothing is
downloaded unless ``local_files_only=False``::

    backend = HFBackend("/models/Qwen2.5-Coder-1.5B-Instruct", device="cuda", dtype="bfloat16")
    backend = HFBackend("/models/SmolLM2-135M-Instruct.Q4_1.gguf")  # or its folder
    backend = HFBackend("qwen2.5-coder-1.5b")  # a name of llm.models, once installed
    prompt = "Write a reward function ..."
    [[c0, c1]] = backend.generate([prompt], n=2)

    # for policy-gradient training of the generator (REINFORCE on log p(code | prompt)):
    [[s0, s1]] = backend.generate_with_logprobs([prompt], n=2)
    loss = -(advantage * backend.sequence_logprob(prompt, s0.token_ids))
    loss.backward()

Behaviour:

- Prompt formatting (:meth:`HFBackend.format_prompt`): when the tokenizer has a chat
  template, each prompt becomes one user message (after the ``system_prompt``, if any) and
  the template is applied with the generation prompt; otherwise the prompt is used as is
  (after ``system_prompt`` and a blank line) and the tokenizer adds its usual special
  tokens (e.g. BOS).
- Sampling (``temperature > 0``) draws from the softmax of the model's logits divided by
  ``temperature``, with no top-k/top-p/min-p/typical-p truncation and no repetition penalty
  (such settings in the checkpoint's ``generation_config.json`` are switched off), so that
  the samples come from the policy whose log-probabilities are reported. ``temperature == 0``
  decodes greedily once per prompt and repeats the result ``n`` times.
- Decoding (``drop_finished_rows``, the default): the backend's own loop runs one forward
  per step over the rows still decoding and drops each row (its cache row too) once it has
  ended, so a call's later steps cost what the rows left cost; ``model.generate`` runs
  every row to the last row's end (in the 1.5B designer's search rounds, 31-51% of its
  row-steps came after rows had ended, 2026-11-30). Each row draws its tokens by inverse
  transform with uniforms from a generator of its own, so its sample does not depend on the
  rest of the batch. ``drop_finished_rows=False`` runs ``model.generate`` and its sampler.
- Determinism: each call draws a seed from ``seed`` and the number of earlier calls, and
  each row's generator is seeded from the call's seed and the row's index
  (``model.generate``: torch's RNG is seeded with it inside :func:`torch.random.fork_rng`),
  so the k-th call of a backend built with the same ``seed`` (same weights, prompts, device
  and library versions) returns the same samples, and the global torch RNG state is left
  as it was.
- Completions end at the first end-of-sequence token (the tokenizer's EOS and those of the
  model's generation config), after ``max_new_tokens`` tokens, or (``stop_after_code``,
  the default) with the token that completes the line closing the first Python code block
  (:func:`llm.parsing.code_block_end`): generation stops there for that row, and the
  completion's tokens, text and log-probabilities end with that token (what the model
  would have written after it is never sampled, so it is not scored either). Texts are
  decoded from the new tokens only, without special tokens.
- Batching: all prompts of a call are decoded together, left-padded; the
  tokenizer's ``padding_side`` is set to ``"left"`` and a missing pad token is set to EOS.
  Each sampled token's log-probability is read from its step's logits, so a call holds
  one step's logits, not all of them (6.2 GB for 16 rows of 640
  tokens of a 151,936-token vocabulary).
- Shared prefill (``share_prefill``, the default): each distinct prompt of a call is run
  through the model once, alone (no padding), and its key/value cache is copied,
  left-padded, into a preallocated cache row (``StaticCache``, filled in place) for every
  completion that continues it (``n`` samples of one prompt, or equal prompts), so only
  the decoding steps are paid per completion; a prompt that starts like an earlier
  prompt of the call (a module's search prompts share their task text) continues a copy
  of that prompt's cache from where the two part. Without it the first decoding step runs
  every row's whole padded prompt, which repeats a 2,500-token prompt's prefill for each
  of ``n`` samples (``model.generate`` alone does so too, and its ``DynamicCache``
  copies every layer's cache at each step). The sampling distribution is the same; in
  float32 the samples equal those without the shared prefill, while in bfloat16 the other
  rounding of a one-row prefill makes sequences part after some tokens. Measured on 2-core
  CPUs: 1.31x faster for 8 samples of one prompt of the 1.5B designer
  (``benchmarks/results/2026-11-26-hf-prefill-and-dtype-cpu.md``, with a batched prefill
  and a ``DynamicCache``); a search round's 16 prompts, 1.32x faster again with the
  unpadded prefill and the preallocated cache
  (``benchmarks/results/2026-11-30-hf-static-cache-cpu.md``).

The model is put in eval mode (no dropout) when loaded; code that switches it to train
mode should switch it back before sampling. torch and transformers are imported by this
module only; ``import llm.backends`` does not import them.
"""

from __future__ import annotations

import inspect
import logging
import random
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    DynamicCache,
    DynamicLayer,
    LogitsProcessor,
    LogitsProcessorList,
    StaticCache,
    StoppingCriteria,
    StoppingCriteriaList,
)

from llm import models
from llm.backends.base import Backend, BackendError, check_generate_args
from llm.parsing import code_block_end

__all__ = ["Completion", "HFBackend"]

#: Overrides that make sampling draw from the plain (tempered) model distribution.
_PLAIN_SAMPLING = {"top_k": 0, "top_p": 1.0, "min_p": None, "typical_p": 1.0}


def _one_line(text: object, limit: int = 200) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _looks_like_path(path_or_name: str) -> bool:
    """True for a filesystem path rather than a Hub id (``name`` or ``org/name``)."""
    return path_or_name.startswith(("/", ".", "~")) or path_or_name.count("/") > 1


def _resolve_source(path_or_name: str) -> tuple[str, str | None, bool]:
    """``(folder or Hub id, GGUF file name or None, is local)`` for a model spec.

    A name of :data:`llm.models.CATALOG` (``qwen2.5-coder-1.5b``, ...) is its installed
    file. A ``.gguf`` file loads from its folder with ``gguf_file``; a folder without
    ``config.json`` holding exactly one ``.gguf`` file loads that file.

    Raises:
        BackendError: a known model not installed or not matching its hash, a missing
            path, a file that is not ``.gguf``, or a folder with several GGUF files and
            no ``config.json``.
    """
    if models.is_known(path_or_name):
        try:
            path_or_name = str(models.resolve(path_or_name))
        except models.ModelError as e:
            raise BackendError(f"hf backend: {e}") from None
    local = Path(path_or_name).expanduser()
    if local.suffix.lower() == ".gguf":
        if not local.is_file():
            raise BackendError(f"hf backend: no GGUF model file at {path_or_name}")
        return str(local.parent), local.name, True
    if local.is_dir():
        ggufs = sorted(p.name for p in local.glob("*.gguf"))
        if (local / "config.json").is_file() or not ggufs:
            return str(local), None, True
        if len(ggufs) > 1:
            raise BackendError(
                f"hf backend: {path_or_name} holds several GGUF files ({', '.join(ggufs)}) "
                "and no config.json; pass one of the files"
            )
        return str(local), ggufs[0], True
    if local.exists():
        raise BackendError(
            f"hf backend: {path_or_name} is a file but not a .gguf model; pass a model "
            "folder or a .gguf file"
        )
    if _looks_like_path(path_or_name):
        raise BackendError(f"hf backend: no model folder at {path_or_name}")
    return path_or_name, None, False


#: PyTorch's (private) probes of the CPU's bfloat16 and int8 instructions.
_BF16_CHECKS = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
_INT8_CHECKS = ("_is_vnni_supported", "_is_amx_tile_supported")


def _cpu_has(checks: tuple[str, ...]) -> bool:
    """Whether any of PyTorch's CPU probes ``checks`` says yes; True where one is missing."""
    probes = [getattr(torch.cpu, name, None) for name in checks]
    if not all(callable(probe) for probe in probes):
        return True
    return any(probe() for probe in probes)


def cpu_has_bfloat16() -> bool:
    """Whether this CPU multiplies in bfloat16 (``avx512_bf16`` or AMX, as PyTorch reports
    them); True where PyTorch cannot tell. Without them every bfloat16 product is
    converted: on a 2-core Intel Xeon the 1.5B designer decoded 2.8 tokens/s in bfloat16
    against 4.2 in float32 (``benchmarks/results/2026-11-30-hf-dtypes-xeon-cpu.md``)."""
    return _cpu_has(_BF16_CHECKS)


def cpu_has_int8() -> bool:
    """Whether this CPU multiplies in int8 (``avx512_vnni`` or AMX, as PyTorch reports
    them); True where PyTorch cannot tell. Without them ``torch._int_mm``, which torchao's
    int8 layers call, falls back to a kernel 20-90x slower than a float32 product: on a
    2-core AMD EPYC with AVX2 only, one search round's call of the int8 1.5B designer had
    not finished its prompts in 20 minutes (``benchmarks/bench_int8_matmul.py``,
    ``benchmarks/results/2026-12-01-int8-matmul-avx2-cpu.md``)."""
    return _cpu_has(_INT8_CHECKS)


#: Weight quantizations of :class:`HFBackend` (``quantize``).
QUANTIZATIONS = ("none", "int8")


def _quantize_int8(model: torch.nn.Module) -> None:
    """Replaces every ``nn.Linear`` weight of ``model`` (in place) by int8 with one scale
    per output channel, its inputs quantized to int8 per token at each call (torchao's
    ``Int8DynamicActivationInt8WeightConfig``), so the products run as int8 matrix
    multiplies. On a 2-core Xeon without bfloat16 instructions a search round's call of
    the 1.5B designer ran 1.75x faster than in float32, decoding 1.87x
    (``benchmarks/results/2026-12-01-hf-int8-cpu.md``).

    Raises:
        BackendError: torchao is not installed.
    """
    # torchao's import logs that its CUDA-only kernels (mxfp8, cutlass) do not load, and
    # torch logs a deprecation of its enum registrations: noise for a CPU user.
    loggers = [logging.getLogger(name) for name in ("torchao", "torch.utils._pytree")]
    levels = [logger.level for logger in loggers]
    try:
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_
    except ImportError:
        raise BackendError(
            "hf backend: quantize='int8' needs torchao (pip install -e '.[llm,int8]')"
        ) from None
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
    quantize_(model, Int8DynamicActivationInt8WeightConfig())


def _torch_dtype(dtype: str | None) -> str | torch.dtype:
    """``None`` -> ``"auto"`` (the checkpoint's dtype); a torch floating dtype name -> it."""
    if dtype is None or dtype == "auto":
        return "auto"
    resolved = getattr(torch, str(dtype), None)
    if not isinstance(resolved, torch.dtype) or not resolved.is_floating_point:
        raise BackendError(
            f"hf backend: unknown dtype {dtype!r} (use 'auto', 'float32', 'bfloat16' or 'float16')"
        )
    return resolved


@dataclass(frozen=True)
class Completion:
    """One sampled completion with its tokens and their log-probabilities.

    Attributes:
        text: the decoded new tokens, special tokens skipped.
        token_ids: the new token ids, up to and including the first end-of-sequence token
            (which is kept: its probability is the model's decision to stop) or the token
            that closed the first code block; no padding.
        token_logprobs: ``log p(token_ids[i] | prompt, token_ids[:i])`` in nats under the
            model's untempered (temperature-1) softmax, one float per token, whatever the
            sampling temperature was.
    """

    text: str
    token_ids: tuple[int, ...]
    token_logprobs: tuple[float, ...]

    @property
    def logprob(self) -> float:
        """``sum(token_logprobs)``: log p(completion | prompt) in nats."""
        return float(sum(self.token_logprobs))


class HFBackend(Backend):
    """Completions from a local transformers causal language model.

    Args:
        path_or_name: a model folder (``config.json``, weights and tokenizer files, as
            written by ``save_pretrained``), a ``.gguf`` file (tokenizer, chat template and
            weights from the one file, dequantized to ``dtype`` or float32; architectures
            transformers supports for GGUF: Llama, Mistral, Qwen2, Phi-3, Gemma, ...), a
            folder holding exactly one ``.gguf`` file and no ``config.json``, or a Hub id
            (``org/name``) already in the local Hugging Face cache, or a name of
            :data:`llm.models.CATALOG` once installed (``qwen2.5-coder-1.5b``, ...).
        device: torch device for the model (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ...), or
            ``"auto"``: ``cuda`` when PyTorch sees a GPU, else ``cpu``.
        dtype: parameter dtype: ``None`` or ``"auto"`` (the checkpoint's dtype),
            ``"float32"``, ``"bfloat16"``, ``"float16"``. ``bfloat16`` on a CPU without
            bfloat16 instructions warns (:func:`cpu_has_bfloat16`).
        quantize: ``"none"`` (the default) or ``"int8"``: every linear layer's weights
            in int8 and its inputs quantized per token at each call (the layers' outputs
            stay in ``dtype``; torchao, :func:`_quantize_int8`): a search round of the 1.5B
            1.75x faster than float32 on a 2-core Xeon with ``avx512_vnni``, its
            log-probabilities those of the quantized model; on a CPU without int8
            instructions it warns (:func:`cpu_has_int8`). Sampling only: LoRA (the
            low-level DEK) trains unquantized weights.
        local_files_only: never download (the default); ``False`` lets transformers fetch
            a Hub id that is not cached.
        trust_remote_code: allow model/tokenizer code shipped with the checkpoint.
        seed: seed of the sampling calls (see the module docstring).
        system_prompt: an optional system message put before each prompt.
        stop_after_code: end a completion after the line that closes its first Python
            code block (see the module docstring).
        threads: PyTorch's CPU threads (``torch.set_num_threads``, for the whole
            process); 0 leaves PyTorch's default.
        share_prefill: compute each distinct prompt's key/value cache once per call and
            copy it to its completions (see the module docstring); ``False`` leaves the
            prefill to the first decoding step (one per completion).
        drop_finished_rows: decode with the backend's own loop, which drops each row from
            the batch once it has ended (see the module docstring); ``False`` runs
            ``model.generate`` (transformers' sampler) on every row to the last one's end.

    Attributes:
        model: the ``PreTrainedModel`` (on ``device``, eval mode); may be replaced by a
            wrapper with the same interface (e.g. a peft LoRA model).
        tokenizer: the tokenizer (left padding; pad token set).
        device: the ``torch.device`` of the model.
        uses_chat_template: whether prompts are formatted with the tokenizer's chat template.
        quantize: the ``quantize`` argument.

    Raises:
        BackendError: the folder, GGUF file or cached model is missing or cannot be loaded
            (truncated, unsupported architecture, the ``gguf`` package missing), an unknown
            or unavailable ``device`` (or the model does not fit on it), an unknown
            ``dtype`` or ``quantize`` (or torchao missing for ``int8``), or a tokenizer
            with neither a pad nor an EOS token.
    """

    name = "hf"

    def __init__(
        self,
        path_or_name: str,
        *,
        device: str = "cpu",
        dtype: str | None = None,
        quantize: str = "none",
        local_files_only: bool = True,
        trust_remote_code: bool = False,
        seed: int = 0,
        system_prompt: str | None = None,
        stop_after_code: bool = True,
        threads: int = 0,
        share_prefill: bool = True,
        drop_finished_rows: bool = True,
    ) -> None:
        path_or_name = str(path_or_name).strip()
        source, gguf_file, is_local = _resolve_source(path_or_name)
        if threads < 0:
            raise BackendError(f"hf backend: threads must be >= 0, got {threads}")
        if threads:
            torch.set_num_threads(int(threads))
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        try:
            self.device = torch.device(device)
        except RuntimeError as e:
            raise BackendError(f"hf backend: bad device {device!r} ({_one_line(e)})") from None
        torch_dtype = _torch_dtype(dtype)
        if quantize not in QUANTIZATIONS:
            raise BackendError(
                f"hf backend: unknown quantize {quantize!r} (use one of {list(QUANTIZATIONS)})"
            )
        if self.device.type == "cpu" and torch_dtype == torch.bfloat16 and not cpu_has_bfloat16():
            warnings.warn(
                "hf backend: this CPU has no bfloat16 instructions, so bfloat16 converts every "
                "product; float32 (loop.hf_dtype=float32) decoded 1.5x faster on such a CPU, "
                "in 1.5x the memory",
                stacklevel=2,
            )
        if self.device.type == "cpu" and quantize == "int8" and not cpu_has_int8():
            warnings.warn(
                "hf backend: this CPU has no int8 instructions (avx512_vnni or AMX), so int8 "
                "products run 20-90x slower than float32; use loop.hf_quantize=none",
                stacklevel=2,
            )
        options = {"local_files_only": local_files_only, "trust_remote_code": trust_remote_code}
        if gguf_file is not None:
            options["gguf_file"] = gguf_file
        where = "GGUF model" if gguf_file else "model folder" if is_local else "model"
        cache = "" if is_local or not local_files_only else " (local cache only)"
        try:
            tokenizer = AutoTokenizer.from_pretrained(source, **options)
            model = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype, **options)
        except ImportError as e:  # for a GGUF file: the gguf package is missing
            raise BackendError(
                f"hf backend: cannot load {where} {path_or_name}: {_one_line(e)}"
            ) from None
        # A truncated or corrupt GGUF file fails inside the gguf reader with any of these.
        except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
            raise BackendError(
                f"hf backend: cannot load {where} {path_or_name}{cache}: {_one_line(e)}"
            ) from None
        if tokenizer.pad_token is None:
            if tokenizer.eos_token is None:
                raise BackendError(
                    f"hf backend: the tokenizer of {path_or_name} has no pad and no EOS token"
                )
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "left"
        try:
            model = model.to(self.device)
        except (RuntimeError, AssertionError) as e:  # no such device, out of memory
            raise BackendError(
                f"hf backend: cannot put {path_or_name} on {self.device}: {_one_line(e)}"
            ) from None
        if quantize == "int8":
            _quantize_int8(model)
        self.path_or_name = path_or_name
        self.quantize = quantize
        self.tokenizer = tokenizer
        self.model = model.eval()
        self.uses_chat_template = bool(getattr(tokenizer, "chat_template", None))
        self.system_prompt = system_prompt
        self.stop_after_code = stop_after_code
        self.share_prefill = share_prefill
        self.drop_finished_rows = drop_finished_rows
        eos = model.generation_config.eos_token_id
        eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
        if tokenizer.eos_token_id is not None:
            eos.append(tokenizer.eos_token_id)
        #: The token ids that end a completion.
        self.eos_token_ids: frozenset[int] = frozenset(eos)
        self._call_seeds = random.Random(seed)

    def reseed(self, seed: int) -> None:
        """Restarts the sequence of sampling calls as if the backend were built with
        ``seed`` (for paired timings of the same samples)."""
        self._call_seeds = random.Random(seed)

    # ------------------------------------------------------------------ prompt formatting

    def format_prompt(self, prompt: str) -> str:
        """The text the model is conditioned on for ``prompt``.

        Args:
            prompt: the user message.

        Returns:
            With a chat template: the template applied to ``[system?, user]`` messages with
            the generation prompt (assistant header) appended. Without: ``prompt``, after
            ``system_prompt + "\\n\\n"`` when there is a system prompt.
        """
        if not self.uses_chat_template:
            return f"{self.system_prompt}\n\n{prompt}" if self.system_prompt else prompt
        messages = [{"role": "user", "content": prompt}]
        if self.system_prompt:
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )

    def prompt_token_ids(self, prompt: str) -> list[int]:
        """Token ids of :meth:`format_prompt` ``(prompt)``, as generation sees them.

        Without a chat template the tokenizer's special tokens (e.g. BOS) are added; with
        one they are not (templates write their own).
        """
        return self.tokenizer(
            self.format_prompt(prompt), add_special_tokens=not self.uses_chat_template
        )["input_ids"]

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` (no special tokens), for the run log's tokens/s."""
        return len(self.completion_token_ids(text))

    def completion_token_ids(self, completion: str) -> list[int]:
        """Token ids of a completion text, without special tokens.

        A decoded completion need not re-tokenize to the ids that were sampled (tokenizers
        are not always invertible, and the EOS token is not part of the text); pass
        :attr:`Completion.token_ids` to :meth:`sequence_logprob` for the exact sample.
        """
        return self.tokenizer(completion, add_special_tokens=False)["input_ids"]

    # ------------------------------------------------------------------ generation

    def _finish(self, ids: list[int]) -> list[int]:
        """``ids`` up to and including the first end-of-sequence token, or (with
        ``stop_after_code``) the token that closes the first code block, if earlier."""
        for i, token in enumerate(ids):
            if token in self.eos_token_ids or self._closes_code(ids[: i + 1]):
                return ids[: i + 1]
        return ids

    def _closes_code(self, ids: list[int]) -> bool:
        """Whether ``ids`` (new tokens) end exactly with the token that completes the line
        closing the first Python code block (checked only at tokens holding a newline)."""
        if not self.stop_after_code or "\n" not in self.tokenizer.decode(ids[-1:]):
            return False
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        end = code_block_end(text)
        if end is None:
            return False
        before = self.tokenizer.decode(ids[:-1], skip_special_tokens=True)
        return code_block_end(before) is None

    def _prefill(
        self, prompt_ids: torch.Tensor, mask: torch.Tensor, source: torch.Tensor, steps: int
    ) -> StaticCache | None:
        """The key/value cache of every prompt token but the last, for each generation row,
        with room for ``steps`` more positions (the first decoding step then runs the last
        prompt token); None for one-token prompts.

        Each distinct prompt runs through the model alone, without its padding (a padded
        batch computes the padding too: 195 against 151 s for a search round's 11 prompts
        of up to 1,584 tokens, the 1.5B in float32 on 2 cores), and its keys and values are
        copied, left-padded, to the rows that continue it. A prompt that starts with tokens
        an earlier prompt of the call starts with (a module's search prompts share their
        task text) continues a copy of that prompt's cache from where the two part, so
        the shared tokens run once per call. The cache is preallocated
        (``StaticCache``, written in place): a ``DynamicCache`` concatenates every layer's
        whole cache at each step, 27% of a decoding step's time at 16 rows of 1,600
        positions (2026-11-30).

        Args:
            prompt_ids: int64 [P, L] token ids, left-padded.
            mask: int64 [P, L] attention mask (0 at padding).
            source: int64 [R] the distinct prompt each generation row continues.
            steps: the most new tokens.

        Returns:
            A ``StaticCache`` of R rows and L - 1 + 1 + ``steps`` positions, its first
            L - 1 filled.
        """
        width = prompt_ids.shape[1] - 1
        if width < 1:
            return None
        keep = {"logits_to_keep": 1} if "logits_to_keep" in self._forward_args else {}
        caches: list[DynamicCache] = []
        prefixes = [ids[real][:-1] for ids, real in zip(prompt_ids, mask.bool(), strict=True)]
        with torch.no_grad():  # logits_to_keep: skip the vocabulary matmul of every position
            for i, tokens in enumerate(prefixes):
                cache = DynamicCache(config=self.model.config)
                start, earlier = _longest_shared_start(tokens, prefixes[:i])
                if start and all(type(x) is DynamicLayer for x in caches[earlier].layers):
                    for layer, filled in enumerate(caches[earlier].layers):
                        cache.update(filled.keys[:, :, :start], filled.values[:, :, :start], layer)
                else:
                    start = 0
                if start < len(tokens):  # positions follow the cache's length
                    self.model(
                        input_ids=tokens[None, start:],
                        use_cache=True,
                        **{self._cache_arg: cache},
                        **keep,
                    )
                caches.append(cache)
        static = StaticCache(config=self.model.config, max_cache_len=width + 1 + steps)
        for layer in range(len(caches[0].layers)):
            filled = [c.layers[layer] for c in caches]
            padded = []
            for name in ("keys", "values"):
                states = [getattr(f, name) for f in filled]
                like = next(x for x in states if x is not None)
                padded.append(torch.stack([_left_pad(x, width, like) for x in states])[source])
            static.update(*padded, layer)
        return static

    @property
    def _forward_args(self) -> set[str]:
        """The argument names of the causal LM's forward (under a LoRA wrapper, which
        passes them on)."""
        model = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        return set(inspect.signature(model.forward).parameters)

    @property
    def _cache_arg(self) -> str:
        """``cache`` (transformers >= 5.24), else ``past_key_values``, the name of the
        key/value cache argument of forward and generate."""
        return "cache" if "cache" in self._forward_args else "past_key_values"

    def _sample(
        self, prompts: list[str], n: int, temperature: float, max_new_tokens: int
    ) -> list[list[Completion]]:
        """Decodes all prompts' completions in one batch; see :meth:`generate_with_logprobs`."""
        texts = [self.format_prompt(p) for p in prompts]
        distinct = list(dict.fromkeys(texts))
        batch = self.tokenizer(
            distinct,
            add_special_tokens=not self.uses_chat_template,
            padding=True,
            return_tensors="pt",
        ).to(self.device)
        copies = 1 if temperature == 0 else n
        # generation row r continues distinct prompt source[r]: prompt i's copies in turn
        row_of = {t: i for i, t in enumerate(distinct)}
        source = torch.tensor([row_of[t] for t in texts for _ in range(copies)], device=self.device)
        prompt_ids, mask = batch["input_ids"], batch["attention_mask"]
        cache = (
            self._prefill(prompt_ids, mask, source, max_new_tokens) if self.share_prefill else None
        )
        call_seed = self._call_seeds.getrandbits(63)
        if self.drop_finished_rows:
            decode = self._decode
        else:
            decode = self._generate_rows
        decoded = decode(prompt_ids, mask, source, cache, temperature, max_new_tokens, call_seed)
        rows = [
            Completion(self.tokenizer.decode(ids, skip_special_tokens=True), tuple(ids), tuple(lps))
            for ids, lps in decoded
        ]
        return [rows[i * copies : (i + 1) * copies] * (n // copies) for i in range(len(prompts))]

    def _generate_rows(
        self,
        prompt_ids: torch.Tensor,
        mask: torch.Tensor,
        source: torch.Tensor,
        cache: StaticCache | None,
        temperature: float,
        steps: int,
        call_seed: int,
    ) -> list[tuple[list[int], list[float]]]:
        """``model.generate`` on every row to the last row's end (``drop_finished_rows=False``):
        transformers' own sampler, from the global torch RNG seeded with ``call_seed`` inside
        :func:`torch.random.fork_rng`. Arguments and result as :meth:`_decode`."""
        greedy = temperature == 0
        # the temperature is the recorder's to apply, after it has read the raw logits
        mode = {"do_sample": False} if greedy else {"do_sample": True, "temperature": 1.0}
        recorder = _TokenLogprobs(temperature)
        devices = []
        if self.device.type == "cuda":
            index = self.device.index
            devices = [index if index is not None else torch.cuda.current_device()]
        with torch.random.fork_rng(devices=devices, device_type=self.device.type):
            torch.manual_seed(call_seed)
            out = self.model.generate(
                input_ids=prompt_ids[source],
                attention_mask=mask[source],
                **{self._cache_arg: cache},
                **mode,
                **({} if greedy else _PLAIN_SAMPLING),
                repetition_penalty=1.0,
                max_new_tokens=steps,
                eos_token_id=sorted(self.eos_token_ids),
                pad_token_id=self.tokenizer.pad_token_id,
                logits_processor=LogitsProcessorList([recorder]),
                stopping_criteria=StoppingCriteriaList(
                    [_CodeBlockClosed(self, prompt_ids.shape[1])]
                ),
                return_dict_in_generate=True,
            )
        new = out.sequences[:, prompt_ids.shape[1] :]  # (rows, T)
        logprobs = recorder.finish(new)  # (rows, T) float32
        decoded = []
        for ids, lps in zip(new.tolist(), logprobs.tolist(), strict=True):
            ids = self._finish(ids)
            decoded.append((ids, lps[: len(ids)]))
        return decoded

    def _decode(
        self,
        prompt_ids: torch.Tensor,
        mask: torch.Tensor,
        source: torch.Tensor,
        cache: StaticCache | None,
        temperature: float,
        steps: int,
        call_seed: int,
    ) -> list[tuple[list[int], list[float]]]:
        """Decodes every generation row, dropping each from the batch once it has ended.

        One forward per step over the rows still decoding; a row ends at an end-of-sequence
        token, at the token that closes its first code block (``stop_after_code``) or after
        ``steps`` tokens, and its cache row is then dropped (``Cache.reorder_cache``), so
        the later steps cost what the rows left cost. ``model.generate`` runs every row to
        the last row's end: in a search round's call, half of the row-steps decoded
        padding after rows had ended (2026-11-30).

        Sampling (``temperature > 0``) draws each row's token by inverse transform from
        ``softmax(logits / temperature)`` (float64), with one uniform from a generator of
        its own per row (seeded from ``call_seed`` and the row's index), so a row's sample
        does not depend on which other rows are still in the batch; ``temperature == 0``
        takes the argmax.

        Args:
            prompt_ids: int64 [P, L] distinct prompts' token ids, left-padded.
            mask: int64 [P, L] attention mask (0 at padding).
            source: int64 [R] the distinct prompt each generation row continues.
            cache: :meth:`_prefill`'s cache (every prompt token but the last of each row),
                or None: the first step then runs the whole padded prompts.
            temperature: sampling temperature (0: greedy).
            steps: the most new tokens per row (>= 1).
            call_seed: the call's seed (0 <= seed < 2**63).

        Returns:
            R ``(token ids, log-probabilities)`` pairs: each row's new tokens up to and
            including the one that ended it, and their float32 log-probabilities (nats)
            under the untempered softmax of the model's logits.
        """
        rows, width = len(source), prompt_ids.shape[1]
        attention = mask.new_zeros(rows, width + steps)  # 1 at each position fed so far
        attention[:, :width] = mask[source]
        positions = attention[:, :width].cumsum(-1) - 1  # padding-aware, as generate does
        if cache is None:  # the first step runs the whole prompt
            cache = StaticCache(config=self.model.config, max_cache_len=width + steps)
            step_ids, step_positions = prompt_ids[source], positions.clamp(min=0)
        else:  # the prefill holds all but the last prompt token
            step_ids, step_positions = prompt_ids[source][:, -1:], positions[:, -1:]
        draws = random.Random(call_seed)
        generators = [torch.Generator().manual_seed(draws.getrandbits(63)) for _ in range(rows)]
        keep = {"logits_to_keep": 1} if "logits_to_keep" in self._forward_args else {}
        tokens: list[list[int]] = [[] for _ in range(rows)]
        logprobs: list[list[float]] = [[] for _ in range(rows)]
        active = list(range(rows))  # original indices of the batch's rows, in batch order
        with torch.no_grad():
            for step in range(steps):
                logits = self.model(
                    input_ids=step_ids,
                    attention_mask=attention,
                    position_ids=step_positions,
                    use_cache=True,
                    **{self._cache_arg: cache},
                    **keep,
                ).logits[:, -1]
                log_p = torch.log_softmax(logits.float(), dim=-1)  # (A, vocabulary)
                if temperature == 0:
                    picked = log_p.argmax(dim=-1)
                else:
                    cdf = torch.softmax(logits.double() / temperature, dim=-1).cumsum(dim=-1)
                    u = torch.cat([torch.rand(1, generator=generators[r], dtype=torch.float64)
                                   for r in active]).to(cdf.device)  # fmt: skip
                    picked = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True)[:, 0]
                    picked = picked.clamp(max=cdf.shape[1] - 1)
                picked_log_p = log_p.gather(1, picked[:, None])[:, 0].tolist()
                still = []
                for i, (r, token) in enumerate(zip(active, picked.tolist(), strict=True)):
                    tokens[r].append(token)
                    logprobs[r].append(picked_log_p[i])
                    ended = token in self.eos_token_ids or self._closes_code(tokens[r])
                    if not ended and step + 1 < steps:
                        still.append(i)
                if not still:
                    break
                if len(still) < len(active):
                    index = torch.tensor(still, device=picked.device)
                    cache.reorder_cache(index)
                    attention, picked = attention[index], picked[index]
                    step_positions = step_positions[index]
                    active = [active[i] for i in still]
                attention[:, width + step] = 1
                step_ids = picked[:, None]
                step_positions = step_positions[:, -1:] + 1
        return list(zip(tokens, logprobs, strict=True))

    def generate_with_logprobs(
        self,
        prompts: Sequence[str],
        n: int = 1,
        temperature: float = 0.8,
        max_new_tokens: int = 1024,
    ) -> list[list[Completion]]:
        """Like :meth:`generate`, with the sampled token ids and their log-probabilities.

        Args:
            prompts: the prompts (user messages); a single string is refused.
            n: completions per prompt (>= 1).
            temperature: sampling temperature (>= 0; 0 is greedy and repeats one result).
            max_new_tokens: the most new tokens per completion (>= 1).

        Returns:
            ``len(prompts)`` lists of ``n`` :class:`Completion`, in prompt order; the
            log-probabilities are under the untempered model (temperature 1), float32
            arithmetic, in nats.

        Raises:
            TypeError: ``prompts`` is a string or holds a non-string.
            ValueError: ``n``, ``temperature`` or ``max_new_tokens`` out of range.

        The call keeps one float32 ``len(prompts) * n x vocab`` log-softmax (the last
        step's) besides the model's key/value cache, not every step's logits.
        """
        prompts, n, temperature, max_new_tokens = check_generate_args(
            prompts, n, temperature, max_new_tokens
        )
        if not prompts:
            return []
        return self._sample(prompts, n, temperature, max_new_tokens)

    def _generate(
        self, prompts: list[str], n: int, temperature: float, max_new_tokens: int
    ) -> list[list[str]]:
        return [
            [c.text for c in row] for row in self._sample(prompts, n, temperature, max_new_tokens)
        ]

    # ------------------------------------------------------------------ training

    def token_logprobs(self, prompt: str, completion: str | Sequence[int]) -> torch.Tensor:
        """``log p(c_t | prompt, c_<t)`` for each completion token, differentiable.

        One forward pass over ``prompt_token_ids(prompt) + completion ids`` (the same
        formatting as generation) in the model's current mode, with gradients; the prompt
        positions are not scored, and a model whose ``forward`` takes ``logits_to_keep``
        (transformers' causal LMs) computes the LM head's logits at the completion's
        positions only (a prompt of P tokens would otherwise cost P x vocab logits, and
        their matrix products forward and backward).

        Args:
            prompt: the user message, as passed to :meth:`generate`.
            completion: a completion text (tokenized with :meth:`completion_token_ids`) or
                the exact token ids, e.g. :attr:`Completion.token_ids`.

        Returns:
            A float32 tensor of shape ``(C,)`` on the model's device, ``C`` the number of
            completion tokens: their log-probabilities (nats, temperature-1 softmax).

        Raises:
            ValueError: the completion has no tokens.
        """
        ids = (
            self.completion_token_ids(completion)
            if isinstance(completion, str)
            else [int(t) for t in completion]
        )
        if not ids:
            raise ValueError("the completion must have at least one token")
        context = self.prompt_token_ids(prompt)
        tokens = torch.tensor([context + ids], device=self.device)  # (1, P + C)
        if _takes_logits_to_keep(self.model):  # the last C + 1 positions' logits only
            # no KV cache: nothing reads it
            out = self.model(input_ids=tokens, logits_to_keep=len(ids) + 1, use_cache=False)
            logits = out.logits[0, :-1]
        else:
            logits = self.model(input_ids=tokens).logits[0, len(context) - 1 : -1]
        targets = tokens[0, len(context) :, None]  # (C, 1); logits: (C, vocab)
        return torch.log_softmax(logits.float(), dim=-1).gather(1, targets)[:, 0]

    def sequence_logprob(self, prompt: str, completion: str | Sequence[int]) -> torch.Tensor:
        """``log p(completion | prompt)`` under the model, differentiable w.r.t. its parameters.

        The sum of :meth:`token_logprobs` (one forward pass, the model's current mode, with
        gradients).

        Args:
            prompt: the user message, as passed to :meth:`generate`.
            completion: a completion text (tokenized with :meth:`completion_token_ids`) or
                the exact token ids, e.g. :attr:`Completion.token_ids`.

        Returns:
            A scalar float32 tensor on the model's device: the sum over the completion's
            tokens of their log-probabilities (nats, temperature-1 softmax).

        Raises:
            ValueError: the completion has no tokens.
        """
        return self.token_logprobs(prompt, completion).sum()


def _longest_shared_start(tokens: torch.Tensor, earlier: list[torch.Tensor]) -> tuple[int, int]:
    """``(n, j)``: the most leading tokens ``tokens`` (int64 [T]) shares with any of
    ``earlier`` (int64 1-D tensors), at most T, and the first such ``earlier[j]``;
    ``(0, -1)`` when it shares none."""
    best, which = 0, -1
    for j, other in enumerate(earlier):
        m = min(len(tokens), len(other))
        differ = (tokens[:m] != other[:m]).nonzero()
        n = int(differ[0, 0]) if len(differ) else m
        if n > best:
            best, which = n, j
    return best, which


def _left_pad(states: torch.Tensor | None, width: int, like: torch.Tensor) -> torch.Tensor:
    """One row's cached keys or values, ``[1, heads, n, head_dim]`` (None: n = 0), as
    ``[heads, width, head_dim]`` after ``width - n`` zero positions (left padding, which
    the attention mask hides); ``like``: a cached tensor of the same layer, for the shape,
    dtype and device."""
    out = like.new_zeros(like.shape[1], width, like.shape[3])
    if states is not None and states.shape[2]:
        out[:, width - states.shape[2] :] = states[0]
    return out


def _takes_logits_to_keep(model: torch.nn.Module) -> bool:
    """Whether ``model``'s forward (that of the model under a PEFT wrapper) accepts
    ``logits_to_keep``, the number of last positions to compute logits for."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    try:
        return "logits_to_keep" in inspect.signature(base.forward).parameters
    except (TypeError, ValueError):  # no retrievable signature
        return False


class _CodeBlockClosed(StoppingCriteria):
    """Stops each row whose new tokens have just closed the first Python code block
    (:meth:`HFBackend._closes_code`); rows stopped earlier stay stopped."""

    def __init__(self, backend: HFBackend, prompt_length: int):
        self.backend, self.prompt_length = backend, prompt_length

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        new = input_ids[:, self.prompt_length :].tolist()
        done = [self.backend._closes_code(row) for row in new]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)


class _TokenLogprobs(LogitsProcessor):
    """Records log p of each sampled token under the model's raw logits, then divides
    the logits by ``temperature`` (0: greedy, left as they are) for ``generate``'s sampler.

    It must be the call's only logits processor, so that it reads the raw logits: the
    backend passes ``temperature=1.0`` and no truncation to ``generate``. Step t's
    log-softmax is kept until step t + 1 shows the token sampled from it, so a call holds
    one float32 (rows, vocabulary) array, where ``output_logits=True`` held one per step
    (6.2 GB for 16 rows of 640 tokens of Qwen2.5's 151,936-token vocabulary).
    """

    def __init__(self, temperature: float):
        self.temperature = temperature
        self._previous: torch.Tensor | None = None  # (rows, vocabulary) float32 log-softmax
        self._picked: list[torch.Tensor] = []  # one (rows,) float32 per finished step

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.Tensor:
        if self._previous is not None:  # the last column is the token sampled a step ago
            self._picked.append(self._previous.gather(1, input_ids[:, -1:])[:, 0])
        self._previous = torch.log_softmax(scores.float(), dim=-1)
        return scores / self.temperature if self.temperature else scores

    def finish(self, new: torch.Tensor) -> torch.Tensor:
        """float32 (rows, T): log p of each of ``new``'s tokens (int64 (rows, T), the
        call's new tokens, at least one), the last one's read from the last step's logits."""
        last = self._previous.gather(1, new[:, -1:])[:, 0]
        return torch.stack([*self._picked, last], dim=1)
