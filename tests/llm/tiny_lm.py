"""A tiny random causal LM with a byte-level BPE tokenizer, built offline for tests.

:func:`build_tiny_lm` writes a model folder that ``make_backend(f"hf:{folder}")`` (or
``HFBackend(str(folder))``) loads like a user's checkpoint: ``config.json``,
``model.safetensors``, ``generation_config.json``, ``tokenizer.json`` and
``tokenizer_config.json``. Nothing is downloaded:

- the tokenizer is a byte-level BPE (GPT-2 style: ``ByteLevel`` pre-tokenizer and decoder,
  so any text, including non-ASCII, round-trips through ``encode``/``decode``) trained by the
  ``tokenizers`` library on a few of the project's own source files (the default slot
  programs and ``tests/llm/programs/ok_*.txt``), with the special tokens ``<s>`` (BOS, id 0),
  ``</s>`` (EOS, id 1) and ``<pad>`` (id 2); the tokenizer adds BOS in front of each text;
- the model is a 2-layer Llama (hidden size 32, 4 heads, 2 KV heads, RoPE, so there is no
  learned position table to outgrow) or, with ``architecture="gpt2"``, a 2-layer GPT-2,
  with random weights from ``torch.manual_seed(seed)``, float32.

A random model picks EOS about once per vocabulary size (~400) tokens, so sampled
completions usually run to ``max_new_tokens``: keep that small in tests.

Use from a test file under ``tests/llm/``: either the session fixtures ``tiny_lm_dir`` and
``tiny_chat_lm_dir`` of ``tests/llm/conftest.py``, or ``from tiny_lm import build_tiny_lm``
(pytest puts ``tests/llm`` on ``sys.path`` for its test files). From elsewhere, with
``python -m pytest`` run from the repository root: ``from tests.llm.tiny_lm import
build_tiny_lm``. Importing this module imports torch, transformers and tokenizers.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

__all__ = ["BOS_ID", "CHAT_TEMPLATE", "EOS_ID", "PAD_ID", "build_tiny_lm", "tiny_tokenizer"]

REPO = Path(__file__).resolve().parents[2]
#: The training corpus of the tokenizer, relative to the repository root.
CORPUS = ("llm/prompts/defaults.py", "tests/llm/programs")
SPECIAL = ("<s>", "</s>", "<pad>")
BOS_ID, EOS_ID, PAD_ID = 0, 1, 2
#: A minimal chat template (writes its own BOS; ``<|role|>`` headers).
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def _corpus() -> list[str]:
    texts = [(REPO / CORPUS[0]).read_text(encoding="utf-8")]
    texts += [p.read_text(encoding="utf-8") for p in sorted((REPO / CORPUS[1]).glob("ok_*.txt"))]
    return texts


def tiny_tokenizer(vocab_size: int = 400) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on the project's corpus (see the module docstring).

    Args:
        vocab_size: the target vocabulary size, special tokens and the 256 byte symbols
            included (> 259); the result may be smaller if the corpus runs out of merges.

    Returns:
        A ``PreTrainedTokenizerFast`` with ``bos_token="<s>"``, ``eos_token="</s>"`` and
        ``pad_token="<pad>"`` (ids 0, 1, 2) that prepends BOS when ``add_special_tokens``.
    """
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", BOS_ID)]
    )
    assert [tok.token_to_id(t) for t in SPECIAL] == [BOS_ID, EOS_ID, PAD_ID]
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )


def build_tiny_lm(
    directory: Path,
    chat_template: bool = False,
    *,
    architecture: str = "llama",
    seed: int = 0,
    vocab_size: int = 400,
) -> Path:
    """Writes a tiny random causal LM and its tokenizer to ``directory``.

    Args:
        directory: the model folder (created if missing; existing files are overwritten).
        chat_template: give the tokenizer :data:`CHAT_TEMPLATE`, so the hf backend formats
            prompts as chat messages.
        architecture: ``"llama"`` (``LlamaForCausalLM``), ``"qwen2"``
            (``Qwen2ForCausalLM``) or ``"gpt2"`` (``GPT2LMHeadModel``).
        seed: torch seed of the random weights (the global RNG state is restored after).
        vocab_size: see :func:`tiny_tokenizer`.

    Returns:
        ``directory``, for ``make_backend(f"hf:{directory}")``.

    Raises:
        ValueError: an unknown ``architecture``.
    """
    directory = Path(directory)
    tokenizer = tiny_tokenizer(vocab_size)
    ids = {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "pad_token_id": PAD_ID}
    decoder = {  # llama and qwen2: the same 2-layer decoder (grouped-query attention)
        "llama": (LlamaConfig, LlamaForCausalLM),
        "qwen2": (Qwen2Config, Qwen2ForCausalLM),
    }
    if architecture in decoder:
        config_class, model_class = decoder[architecture]
        config = config_class(
            vocab_size=len(tokenizer),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=4096,
            initializer_range=0.2,
            **ids,
        )
    elif architecture == "gpt2":
        config = GPT2Config(
            vocab_size=len(tokenizer),
            n_embd=32,
            n_layer=2,
            n_head=4,
            n_positions=1024,
            initializer_range=0.2,
            **ids,
        )
        model_class = GPT2LMHeadModel
    else:
        raise ValueError(f"unknown architecture {architecture!r} (use 'llama', 'qwen2' or 'gpt2')")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_class(config).eval()
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    if chat_template:
        tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(directory)
    return directory
