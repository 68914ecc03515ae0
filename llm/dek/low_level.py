"""Low-level DEK: LoRA fine-tuning of a local designer model by policy gradient.

After each outer iteration the designer's candidates ``c_k`` (completion texts or token
ids), the prompts ``x_k`` they were sampled from and their scores ``PA_k`` (the run's
``loop.score`` on validation days: mean shortfall or price advantage, bps, higher is
better; written PA below, as in the seeds) update a LoRA adapter ``phi`` on the frozen
base model, so that the next iteration samples better code::

    from llm.backends.hf import HFBackend
    from llm.dek.low_level import LoRAConfig, LowLevelDEK

    backend = HFBackend("/models/Qwen2.5-Coder-1.5B-Instruct", device="cuda")
    dek = LowLevelDEK(backend, LoRAConfig())      # backend now samples through the adapter
    stats = dek.update([(prompt, code, pa_bps), ...])
    dek.save(run_dir / "lora")                    # adapter + trainer state, no base weights
    ...
    dek = LowLevelDEK(HFBackend(same_model), LoRAConfig()); dek.load(run_dir / "lora")

The estimator. PA is computed by training an RL agent with the candidate code for minutes
and is not a differentiable function of the generated tokens, so the gradient of the
expected score goes through the sampling distribution: the score-function (REINFORCE)
estimator (Williams, 1992, "Simple statistical gradient-following algorithms for
connectionist reinforcement learning", Machine Learning 8)::

    grad E_{c~p_phi(.|x)}[PA(c)] = E[(PA(c) - b) grad log p_phi(c | x)]

for any baseline ``b`` that does not depend on ``c``. The update minimizes

    loss = mean_k [ -A_k * log p_phi(c_k | x_k) ] + kl_coef * mean_k KL_k,

with ``A_k = PA_k - b_k`` (optionally rescaled, see :class:`LoRAConfig`) held constant and
``log p_phi(c | x) = sum_t log p_phi(c_t | x, c_<t)`` summed over the completion tokens
only (the prompt tokens are context, not scored: :meth:`HFBackend.token_logprobs`).
The SE-RL seeds call this gradient path a "straight-through estimator": the
non-differentiable scoring ``c -> PA(c)`` is passed over on the backward pass and the score
only weights the log-likelihood of the sampled code. Both names describe the same
computation, a reward-weighted log-likelihood gradient; it is the score-function form that
makes it an unbiased estimate of the gradient of the expected PA (a true straight-through
estimator would need a differentiable surrogate of PA in the tokens, which does not exist
here).

Baselines (:func:`baseline_and_advantages`): ``"leave_one_out"`` (the default) uses for
candidate k the mean score of the other candidates of the same update, as RLOO does
(Kool, van Hoof and Welling, 2019, "Buy 4 REINFORCE samples, get a baseline for free!",
ICLR workshop DeepRLStructPred; Ahmadian et al., 2024, "Back to Basics: Revisiting
REINFORCE Style Optimization for Learning from Human Feedback in LLMs", ACL, Sec. 3.2).
It is independent of ``c_k`` (the candidates are sampled independently), so the gradient
stays unbiased, and it follows the iteration's own score level: the high-level DEK changes
the prompts and instructions every iteration, so the PA level moves between iterations and
a running average of past iterations lags behind it. ``"ema"`` uses an exponential moving
average of past updates' mean scores (unbiased too; the better choice when an update has
a single candidate); ``"mean"`` the batch mean including the candidate itself, which shrinks
the expected gradient by ``(n - 1) / n`` (biased in scale, not in direction). The EMA is kept
up to date whatever the kind, persists across :meth:`LowLevelDEK.update` calls and is saved
with the adapter.

KL penalty (``kl_coef > 0``): a pull toward the frozen base model, computed with the same
weights by switching the adapter off (PEFT's ``disable_adapter()``; there is no second model
copy). It is estimated on the candidates' own tokens: with ``r_t = p_base(c_t | h_t) /
p_phi(c_t | h_t)``, ``h_t = (x, c_<t)``, the per-sequence value is

    KL_k = sum_t (r_t - 1 - log r_t)          (Schulman's "k3" estimator, per token)

as in GRPO (Shao et al., 2024, "DeepSeekMath", eq. 4; J. Schulman, 2020, "Approximating
KL Divergence", http://joschu.net/blog/kl-approx.html). Each term is >= 0 and zero only
where the adapter leaves the token's probability unchanged; for tokens drawn from
``p_phi`` its mean is ``KL(p_phi(.|h_t) || p_base(.|h_t))`` and its gradient in
expectation that of ``KL(p_base || p_phi)``, so it does pull toward the base model. The
plain log-ratio ``sum_t [log p_phi - log p_base] = log p_phi(c|x) - log p_base(c|x)``
(reported per candidate as ``UpdateStats.log_ratios``) is also an unbiased estimate of the
sequence KL, but it is negative for some samples and its gradient in the loss is
``grad log p_phi(c|x)``, which has expectation zero: it does not regularize. The base
log-probabilities are computed once per update, without gradient. The penalty is in nats
summed over the tokens, against advantages in (normalized) score units: ``kl_coef`` trades
one for the other.

Why not TRL's ``RLOOTrainer`` / ``GRPOTrainer``: they own the generation loop and expect a
reward function they can call online on each batch, with many samples per step. Here the
outer SE-RL loop generates, each candidate's score takes minutes of RL training (offline,
in worker processes), an update sees a handful of candidates, and training must resume
from a run folder; what is needed is the loss above over a given list of
(prompt, completion, score) triples, which this module is. TRL is not a dependency.

Only the adapter is trained: :func:`peft.get_peft_model` freezes the base weights, and the
optimizer sees the LoRA matrices only. Importing this module imports torch, transformers
and peft; ``import llm.dek`` does not.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import peft
import torch
from torch import nn
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.pytorch_utils import Conv1D

from llm.backends.hf import HFBackend

__all__ = [
    "BASELINES",
    "OPTIMIZERS",
    "OPTIMIZER_FILE",
    "STATE_FILE",
    "LoRAConfig",
    "LowLevelDEK",
    "UpdateStats",
    "baseline_and_advantages",
    "default_target_modules",
]

BASELINES = ("leave_one_out", "ema", "mean")
OPTIMIZERS = ("adamw", "sgd")
#: The trainer state written by :meth:`LowLevelDEK.save` next to PEFT's adapter files.
STATE_FILE = "dek_low_level.json"
#: The optimizer's ``state_dict`` (``torch.save``), next to the adapter files.
OPTIMIZER_FILE = "optimizer.pt"
_STATE_FORMAT = 1

_ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
#: LoRA targets by ``config.model_type``: all attention projections of the family (the LoRA
#: paper adapts the attention matrices; adapting all of them rather than only q and v is
#: the usual choice since QLoRA). Checked against the model's modules before use.
TARGETS_BY_MODEL_TYPE: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(
        (
            "llama",
            "mistral",
            "mixtral",
            "qwen2",
            "qwen2_moe",
            "qwen3",
            "qwen3_moe",
            "gemma",
            "gemma2",
            "gemma3",
            "gemma3_text",
            "starcoder2",
            "olmo",
            "olmo2",
            "granite",
            "cohere",
        ),
        _ATTENTION,
    ),
    "gpt2": ("c_attn",),  # fused q/k/v (a Conv1D); c_proj is also the MLP's output name
    "gpt_bigcode": ("c_attn",),
    "gpt_neox": ("query_key_value",),
    "falcon": ("query_key_value",),
    "bloom": ("query_key_value",),
    "phi": ("q_proj", "k_proj", "v_proj", "dense"),
    "phi3": ("qkv_proj", "o_proj"),
    "gptj": ("q_proj", "k_proj", "v_proj", "out_proj"),
    "codegen": ("qkv_proj", "out_proj"),
}


def _one_line(text: object, limit: int = 200) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _linear_leaf_names(model: nn.Module) -> dict[str, type]:
    """Leaf names of the model's ``nn.Linear`` / transformers ``Conv1D`` modules -> type,
    in module order, the output embedding (LM head) left out."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    out: dict[str, type] = {}
    for name, module in model.named_modules():
        if module is head or not isinstance(module, nn.Linear | Conv1D):
            continue
        out.setdefault(name.rsplit(".", 1)[-1], type(module))
    return out


def default_target_modules(model: nn.Module) -> tuple[str, ...]:
    """The LoRA target module names (leaf names, as PEFT matches them) for ``model``.

    Resolution: :data:`TARGETS_BY_MODEL_TYPE` by ``model.config.model_type`` (Llama, Qwen2,
    Mistral, Gemma -> ``q_proj, k_proj, v_proj, o_proj``; GPT-2 -> ``c_attn``; GPT-NeoX ->
    ``query_key_value``; Phi -> ``q_proj, k_proj, v_proj, dense``; ...); then PEFT's own
    default for the type (``TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING``); then,
    with a ``UserWarning``, the leaf names of all linear layers but the LM head. A table
    entry is used only if all its names exist among the model's linear layers.

    Args:
        model: a transformers causal LM (not yet wrapped by PEFT).

    Returns:
        The names, a non-empty tuple of strings.

    Raises:
        ValueError: the model has no linear layer to adapt (the message names its type).
    """
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    linear = _linear_leaf_names(model)
    candidates = [TARGETS_BY_MODEL_TYPE.get(model_type)]
    try:
        from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING
    except ImportError:  # pragma: no cover - a peft without the table
        TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING = {}
    candidates.append(TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING.get(model_type))
    for names in candidates:
        if names and all(n in linear for n in names):
            return tuple(names)
    if not linear:
        raise ValueError(
            f"no LoRA target modules for model type {model_type!r}: it has no linear layers; "
            "set LoRAConfig.target_modules"
        )
    warnings.warn(
        f"LoRA: no target table entry fits model type {model_type!r}; adapting all linear "
        f"layers but the LM head: {', '.join(linear)} (set LoRAConfig.target_modules to choose)",
        UserWarning,
        stacklevel=2,
    )
    return tuple(linear)


@dataclass(frozen=True)
class LoRAConfig:
    """The adapter and its policy-gradient training.

    Attributes:
        rank: LoRA rank ``r`` (>= 1).
        alpha: LoRA ``alpha``; the update is scaled by ``alpha / rank`` (2 by default, the
            common choice; Hu et al., 2021, Sec. 4.1).
        dropout: dropout on the adapter's input, active during :meth:`LowLevelDEK.update`
            only (the base model's own dropouts stay off, so the log-probabilities are the
            sampling policy's).
        target_modules: module leaf names to adapt; ``()`` = :func:`default_target_modules`.
        lr: learning rate. ``1e-5``: LoRA's best learning rate is about 10x that of full
            fine-tuning (Schulman et al., 2025, "LoRA Without Regret", Thinking Machines
            blog), and policy-gradient full fine-tuning of 1-7B code models runs at about
            ``1e-6`` (e.g. DeepSeekMath's GRPO). With few updates per run a larger rate
            (``1e-4``) moves the designer faster, at the risk of collapsing its diversity.
        optimizer: ``"adamw"`` (torch ``AdamW``, default betas) or ``"sgd"`` (plain).
        weight_decay: decoupled weight decay of AdamW / L2 of SGD on the adapter weights.
        max_grad_norm: clip the adapter's total gradient norm to this (``None``: no clip).
        baseline: ``"leave_one_out"`` (default), ``"ema"`` or ``"mean"``; see the module
            docstring and :func:`baseline_and_advantages`.
        baseline_decay: EMA decay per update, in ``[0, 1)``: ``ema <- decay * ema + (1 -
            decay) * mean(scores)``.
        kl_coef: weight of the KL penalty to the base model (>= 0; 0 skips its forward pass).
        normalize_advantages: divide the advantages by their root mean square over the
            update (when it is > 0), so that each update weighs the same whatever the PA
            spread of the market and iteration (bps spreads differ by orders of magnitude),
            and the learning rate and ``kl_coef`` do not depend on the PA unit. The relative
            weights and signs within an update are unchanged; with two candidates the
            advantages become ``+-1``. Default ``True``.
        steps: optimizer steps per update on the same batch (>= 1); steps after the first
            are off-policy (no importance correction), keep it small.
        seed: seed of the adapter's random initialization (``A``; ``B`` starts at zero),
            drawn in a forked torch RNG so the global RNG state is left alone.
        gradient_checkpointing: recompute each decoder layer's forward pass during the
            backward pass instead of keeping its activations (Chen et al., 2016, "Training
            deep nets with sublinear memory cost"; transformers'
            ``activation_checkpointing_enable``), so an update holds one layer's
            activations at a time rather than all of them, for one more forward pass per
            sample; the gradient is the same. Default ``True``: without it one update of
            Qwen2.5-Coder-1.5B (bfloat16, CPU) on sequences of 3,300 tokens peaked at
            20.9 GB, and one on self-debugging retries (longer) was killed at 23.2 GB
            (2026-11-26).

    Raises:
        ValueError: a value out of range or an unknown ``baseline`` / ``optimizer``.
    """

    rank: int = 16
    alpha: float = 32.0
    dropout: float = 0.0
    target_modules: tuple[str, ...] = ()
    lr: float = 1e-5
    optimizer: str = "adamw"
    weight_decay: float = 0.0
    max_grad_norm: float | None = 1.0
    baseline: str = "leave_one_out"
    baseline_decay: float = 0.9
    kl_coef: float = 0.0
    normalize_advantages: bool = True
    steps: int = 1
    seed: int = 0
    gradient_checkpointing: bool = True

    def __post_init__(self) -> None:
        targets = self.target_modules
        if isinstance(targets, str):
            targets = (targets,)
        object.__setattr__(self, "target_modules", tuple(str(t) for t in targets))
        checks = [
            (int(self.rank) == self.rank and self.rank >= 1, "rank must be an integer >= 1"),
            (self.alpha > 0, "alpha must be > 0"),
            (0 <= self.dropout < 1, "dropout must be in [0, 1)"),
            (self.lr > 0, "lr must be > 0"),
            (self.optimizer in OPTIMIZERS, f"optimizer must be one of {OPTIMIZERS}"),
            (self.weight_decay >= 0, "weight_decay must be >= 0"),
            (
                self.max_grad_norm is None or self.max_grad_norm > 0,
                "max_grad_norm must be > 0 or None",
            ),
            (self.baseline in BASELINES, f"baseline must be one of {BASELINES}"),
            (0 <= self.baseline_decay < 1, "baseline_decay must be in [0, 1)"),
            (self.kl_coef >= 0 and math.isfinite(self.kl_coef), "kl_coef must be >= 0"),
            (int(self.steps) == self.steps and self.steps >= 1, "steps must be an integer >= 1"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(f"LoRAConfig: {message}, got {self!r}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable form (``target_modules`` as a list)."""
        out = asdict(self)
        out["target_modules"] = list(self.target_modules)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoRAConfig:
        """Inverse of :meth:`to_dict`; unknown keys are ignored."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def baseline_and_advantages(
    scores: Sequence[float], kind: str, ema: float | None, decay: float
) -> tuple[tuple[float, ...], tuple[float, ...], float]:
    """Per-candidate baselines ``b_k`` and advantages ``A_k = s_k - b_k`` of one update.

    Args:
        scores: the candidates' scores ``s_k`` (bps), at least one, finite.
        kind: ``"leave_one_out"``: ``b_k = (sum(s) - s_k) / (n - 1)``; with ``n == 1``,
            ``b = ema`` (advantage 0 when there is no EMA yet). ``"ema"``: ``b_k = ema`` of
            the earlier updates; on the first update (``ema is None``), the batch mean.
            ``"mean"``: ``b_k = mean(s)``.
        ema: the EMA of earlier updates' mean scores, ``None`` before the first update.
        decay: EMA decay in ``[0, 1)``.

    Returns:
        ``(baselines, advantages, new_ema)``: two tuples of ``n`` floats (score units) and
        ``new_ema = mean(s)`` if ``ema is None`` else ``decay * ema + (1 - decay) *
        mean(s)`` (one EMA step per update, whatever ``kind``).

    Raises:
        ValueError: no scores, a non-finite score, or an unknown ``kind``.
    """
    s = [float(x) for x in scores]
    n = len(s)
    if n == 0:
        raise ValueError("baseline_and_advantages needs at least one score")
    if not all(math.isfinite(x) for x in s):
        raise ValueError(f"scores must be finite, got {s}")
    total = math.fsum(s)
    mean = total / n
    if kind == "mean":
        baselines = [mean] * n
    elif kind == "ema":
        baselines = [mean if ema is None else float(ema)] * n
    elif kind == "leave_one_out":
        if n > 1:
            baselines = [(total - x) / (n - 1) for x in s]
        else:
            baselines = [s[0] if ema is None else float(ema)]
    else:
        raise ValueError(f"unknown baseline {kind!r} (use one of {BASELINES})")
    new_ema = mean if ema is None else decay * float(ema) + (1.0 - decay) * mean
    advantages = tuple(x - b for x, b in zip(s, baselines, strict=True))
    return tuple(baselines), advantages, new_ema


def _rms_normalized(values: Sequence[float]) -> tuple[float, ...]:
    """``values / sqrt(mean(values**2))``; unchanged when that is 0."""
    rms = math.sqrt(math.fsum(v * v for v in values) / len(values))
    return tuple(values) if rms == 0 else tuple(v / rms for v in values)


def _finite_or_none(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


@dataclass(frozen=True)
class UpdateStats:
    """What one :meth:`LowLevelDEK.update` did. Per-candidate tuples are in the order of
    the used (non-skipped) samples.

    Attributes:
        update: the trainer's update count after this call (0 if nothing was used yet).
        num_samples: candidates used.
        num_skipped: samples skipped for an empty completion (no tokens).
        scores: the used candidates' scores (bps).
        baselines: their baselines ``b_k`` (bps).
        advantages: the weights ``A_k`` of ``-A_k log p`` in the loss: ``s_k - b_k``, RMS
            normalized when ``normalize_advantages``.
        ema: the baseline EMA after this update (bps; ``None`` before any update).
        num_tokens: completion tokens per candidate.
        logprobs_before: ``log p_phi(c_k | x_k)`` before the update (nats, sum over tokens).
        logprobs_after: the same after the update.
        log_ratios: ``log p_phi(c_k|x_k) - log p_base(c_k|x_k)`` before the update (nats);
            empty when ``kl_coef == 0``.
        loss: the loss of the first step (the on-policy one).
        kl: ``mean_k KL_k`` (k3, nats) at the first step; 0.0 when ``kl_coef == 0``.
        grad_norm: the adapter's total gradient norm at the first step, before clipping.
        steps: optimizer steps taken (steps with a non-finite gradient are skipped).
    """

    update: int
    num_samples: int
    num_skipped: int
    scores: tuple[float, ...] = ()
    baselines: tuple[float, ...] = ()
    advantages: tuple[float, ...] = ()
    ema: float | None = None
    num_tokens: tuple[int, ...] = ()
    logprobs_before: tuple[float, ...] = ()
    logprobs_after: tuple[float, ...] = ()
    log_ratios: tuple[float, ...] = ()
    loss: float = 0.0
    kl: float = 0.0
    grad_norm: float = 0.0
    steps: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable form: lists of floats; a non-finite float becomes ``None``."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, tuple):
                value = [_finite_or_none(v) if isinstance(v, float) else v for v in value]
            elif isinstance(value, float):
                value = _finite_or_none(value)
            out[f.name] = value
        return out


class LowLevelDEK:
    """A LoRA adapter on an :class:`HFBackend`'s model, trained by policy gradient.

    Construction wraps ``backend.model`` with :func:`peft.get_peft_model` (which injects
    the LoRA layers into the model in place and freezes its weights) and sets
    ``backend.model`` to the PEFT model, so everything the backend does from then on --
    sampling, :meth:`HFBackend.token_logprobs` -- goes through the adapter. A fresh adapter
    (``B = 0``) leaves the model's outputs unchanged. The model stays in eval mode.

    Args:
        backend: a loaded hf backend whose model has no adapter yet.
        config: the adapter and training settings.

    Attributes:
        backend: the backend.
        model: the ``peft.PeftModel`` (also ``backend.model``).
        config: the settings.
        target_modules: the adapted module names (``config.target_modules`` or the default).
        optimizer: the torch optimizer over the adapter's parameters.
        ema: the baseline EMA (bps), ``None`` before the first update.
        num_updates: updates done (restored by :meth:`load`).

    Raises:
        ValueError: the backend's model already has an adapter or is quantized, or no
            target modules fit (:func:`default_target_modules`), or a target module name
            matches nothing.
    """

    def __init__(self, backend: HFBackend, config: LoRAConfig | None = None) -> None:
        config = LoRAConfig() if config is None else config
        if isinstance(backend.model, peft.PeftModel):
            raise ValueError("the backend's model already has a LoRA adapter")
        if backend.quantize != "none":
            raise ValueError(
                f"LoRA trains float weights; the backend's model is quantized "
                f"({backend.quantize}); load it with quantize='none' (loop.hf_quantize=none)"
            )
        targets = config.target_modules or default_target_modules(backend.model)
        linear = _linear_leaf_names(backend.model)
        lora = peft.LoraConfig(
            r=int(config.rank),
            lora_alpha=config.alpha,
            lora_dropout=config.dropout,
            target_modules=list(targets),
            # transformers' Conv1D (GPT-2) stores its weight transposed
            fan_in_fan_out=any(linear.get(t) is Conv1D for t in targets),
            bias="none",
            task_type="CAUSAL_LM",
        )
        with warnings.catch_warnings():
            # peft reads the deprecated ``is_gradient_checkpointing`` of transformers 5
            warnings.filterwarnings(
                "ignore",
                message="`is_gradient_checkpointing` is deprecated",
                category=FutureWarning,
            )
            if config.gradient_checkpointing:
                try:
                    backend.model.activation_checkpointing_enable()
                except ValueError as e:
                    raise ValueError(
                        f"LoRA: {_one_line(e)}; set gradient_checkpointing=False "
                        "(dek.gradient_checkpointing)"
                    ) from None
            device = backend.device
            devices = []
            if device.type == "cuda":
                devices = [
                    device.index if device.index is not None else torch.cuda.current_device()
                ]
            with torch.random.fork_rng(devices=devices, device_type=device.type):
                torch.manual_seed(int(config.seed))
                try:
                    model = peft.get_peft_model(backend.model, lora)
                except ValueError as e:
                    raise ValueError(f"LoRA: cannot adapt {targets}: {_one_line(e)}") from None
        model.eval()  # the new LoRA submodules start in train mode
        backend.model = model
        self.backend = backend
        self.model = model
        self.config = config
        self.target_modules = tuple(targets)
        self._params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = self._make_optimizer()
        self.ema: float | None = None
        self.num_updates = 0

    def _make_optimizer(self) -> torch.optim.Optimizer:
        c = self.config
        if c.optimizer == "adamw":
            return torch.optim.AdamW(self._params, lr=c.lr, weight_decay=c.weight_decay)
        return torch.optim.SGD(self._params, lr=c.lr, weight_decay=c.weight_decay)

    @contextmanager
    def _adapter_dropout(self) -> Iterator[None]:
        """Puts the LoRA dropout modules (only) in train mode."""
        modules = [m for n, m in self.model.named_modules() if n.endswith("lora_dropout")]
        for m in modules:
            m.train()
        try:
            yield
        finally:
            for m in modules:
                m.eval()

    @contextmanager
    def _checkpointed_layers(self) -> Iterator[None]:
        """Puts the checkpointed decoder layers themselves (not their submodules) in train
        mode: transformers recomputes a layer in the backward pass only when the layer is
        training, and its dropouts, in the submodules, stay off."""
        layers = [
            m
            for m in self.model.modules()
            if isinstance(m, GradientCheckpointingLayer) and m.gradient_checkpointing
        ]
        for m in layers:
            m.training = True
        try:
            yield
        finally:
            for m in layers:
                m.training = False

    def _completion_ids(self, completion: str | Sequence[int]) -> list[int]:
        if isinstance(completion, str):
            return self.backend.completion_token_ids(completion)
        return [int(t) for t in completion]

    @torch.no_grad()
    def logprob(self, prompt: str, completion: str | Sequence[int], *, base: bool = False) -> float:
        """``log p(completion | prompt)`` (nats) under the adapted model, or the base model
        with ``base=True`` (adapter switched off); no gradient.

        Raises:
            ValueError: the completion has no tokens.
        """
        if base:
            with self.model.disable_adapter():
                return float(self.backend.sequence_logprob(prompt, completion))
        return float(self.backend.sequence_logprob(prompt, completion))

    def update(self, samples: Sequence[tuple[str, str | Sequence[int], float]]) -> UpdateStats:
        """One policy-gradient update of the adapter on an iteration's candidates.

        Steps: drop samples whose completion has no tokens; baselines and advantages
        (:func:`baseline_and_advantages`, then RMS normalization if configured);
        ``log p_base`` per token if ``kl_coef > 0`` (no gradient); then ``config.steps``
        times: the loss of the module docstring, accumulated one candidate at a time (one
        forward/backward each, so memory holds a single sequence's graph), gradient
        clipping, optimizer step (skipped if the gradient is not finite); then ``log
        p_phi`` after, no gradient. ``log p_phi`` before is read off the first step's
        forward passes, which run the adapter as it was before the update; only with
        ``config.dropout > 0`` (those passes then drop adapter inputs) does it take a
        pass of its own, without dropout and gradient. The EMA and update count advance
        once per call with at least one used sample; with none, nothing changes.

        Args:
            samples: ``(prompt, completion, score)`` triples: the prompt (user message) the
                candidate was sampled from, its completion text (or exact token ids, e.g.
                :attr:`Completion.token_ids`, which avoids re-tokenization drift), and its
                score in bps (finite; map failed candidates to a finite score first).

        Returns:
            :class:`UpdateStats`.

        Raises:
            ValueError: a malformed sample or a non-finite score.
        """
        rows: list[tuple[str, list[int], float]] = []
        skipped = 0
        for i, sample in enumerate(samples):
            try:
                prompt, completion, score = sample
            except (TypeError, ValueError):
                raise ValueError(
                    f"sample {i} must be a (prompt, completion, score) triple"
                ) from None
            if not isinstance(prompt, str):
                raise ValueError(f"sample {i}: the prompt must be a string")
            score = float(score)
            if not math.isfinite(score):
                raise ValueError(f"sample {i}: the score must be finite, got {score}")
            ids = self._completion_ids(completion)
            if not ids:
                skipped += 1
                continue
            rows.append((prompt, ids, score))
        if not rows:
            return UpdateStats(update=self.num_updates, num_samples=0, num_skipped=skipped)

        c = self.config
        scores = [r[2] for r in rows]
        baselines, raw, new_ema = baseline_and_advantages(
            scores, c.baseline, self.ema, c.baseline_decay
        )
        advantages = _rms_normalized(raw) if c.normalize_advantages else raw
        n = len(rows)
        # Without adapter dropout the first step's forward passes compute log p_phi before
        # the update (the adapter is not stepped until all of them are done).
        reuse_first = c.dropout == 0
        with torch.no_grad():
            before = (
                []
                if reuse_first
                else [float(self.backend.sequence_logprob(p, ids)) for p, ids, _ in rows]
            )
            base_tokens: list[torch.Tensor] = []
            if c.kl_coef > 0:
                with self.model.disable_adapter():
                    base_tokens = [self.backend.token_logprobs(p, ids) for p, ids, _ in rows]

        first: dict[str, float] = {}
        taken = 0
        max_norm = c.max_grad_norm if c.max_grad_norm is not None else math.inf
        for step in range(int(c.steps)):
            self.optimizer.zero_grad(set_to_none=True)
            loss_sum = kl_sum = 0.0
            with torch.enable_grad(), self._adapter_dropout(), self._checkpointed_layers():
                for k, (prompt, ids, _) in enumerate(rows):
                    tokens = self.backend.token_logprobs(prompt, ids)  # (C,) float32
                    if step == 0 and reuse_first:
                        before.append(float(tokens.detach().sum()))
                    loss = -advantages[k] * tokens.sum()
                    if base_tokens:
                        log_r = base_tokens[k] - tokens  # log p_base - log p_phi, (C,)
                        kl = (torch.exp(log_r) - 1.0 - log_r).sum()
                        loss = loss + c.kl_coef * kl
                        kl_sum += float(kl.detach())
                    (loss / n).backward()
                    loss_sum += float(loss.detach())
            norm = float(torch.nn.utils.clip_grad_norm_(self._params, max_norm))
            if step == 0:
                first = {"loss": loss_sum / n, "kl": kl_sum / n, "grad_norm": norm}
            if math.isfinite(norm):
                self.optimizer.step()
                taken += 1
        self.optimizer.zero_grad(set_to_none=True)
        log_ratios = (
            tuple(b - float(t.sum()) for b, t in zip(before, base_tokens, strict=True))
            if base_tokens
            else ()
        )
        with torch.no_grad():
            after = tuple(float(self.backend.sequence_logprob(p, ids)) for p, ids, _ in rows)
        self.ema = new_ema
        self.num_updates += 1
        return UpdateStats(
            update=self.num_updates,
            num_samples=n,
            num_skipped=skipped,
            scores=tuple(scores),
            baselines=baselines,
            advantages=tuple(advantages),
            ema=self.ema,
            num_tokens=tuple(len(ids) for _, ids, _ in rows),
            logprobs_before=tuple(before),
            logprobs_after=after,
            log_ratios=log_ratios,
            loss=first["loss"],
            kl=first["kl"],
            grad_norm=first["grad_norm"],
            steps=taken,
        )

    # ------------------------------------------------------------------ persistence

    def state_dict(self) -> dict[str, Any]:
        """The trainer state written to :data:`STATE_FILE` (JSON-serializable)."""
        return {
            "format": _STATE_FORMAT,
            "num_updates": self.num_updates,
            "ema": self.ema,
            "target_modules": list(self.target_modules),
            "base_model": self.backend.path_or_name,
            "config": self.config.to_dict(),
        }

    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Writes the adapter and the trainer state to ``directory`` (created if missing).

        Files: ``adapter_config.json`` and ``adapter_model.safetensors`` (PEFT's
        ``save_pretrained``: the LoRA matrices only, no base weights; PEFT's boilerplate
        ``README.md`` model card is not kept unless one was there), :data:`STATE_FILE`
        (:meth:`state_dict`) and :data:`OPTIMIZER_FILE` (the optimizer's ``state_dict``,
        so that AdamW's moments survive a resume). The state file is written last, through
        a temporary file and an atomic rename, so its presence marks a complete save.

        Returns:
            The directory as a ``Path``.
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        readme = directory / "README.md"
        had_readme = readme.exists()
        (directory / STATE_FILE).unlink(missing_ok=True)
        self.model.save_pretrained(str(directory))
        if not had_readme:
            readme.unlink(missing_ok=True)
        torch.save(self.optimizer.state_dict(), directory / OPTIMIZER_FILE)
        tmp = directory / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(self.state_dict(), indent=2) + "\n", encoding="utf-8")
        tmp.replace(directory / STATE_FILE)
        return directory

    def load(self, directory: str | os.PathLike[str]) -> None:
        """Restores a :meth:`save` into this trainer (built on the same base model).

        The adapter weights, the EMA and the update count are restored, and the optimizer
        state when :data:`OPTIMIZER_FILE` is there and the saved optimizer kind equals this
        one's. This trainer's config stays in force otherwise (e.g. a new ``lr`` applies,
        also to the restored optimizer), except that the adapter's shape must match.

        Raises:
            FileNotFoundError: ``directory`` holds no :data:`STATE_FILE`.
            ValueError: an unknown state format, or the saved rank, alpha or target modules
                differ from this trainer's, or the adapter weights do not fit the model.
        """
        directory = Path(directory)
        path = directory / STATE_FILE
        if not path.is_file():
            raise FileNotFoundError(f"no low-level DEK state at {path}")
        state = json.loads(path.read_text(encoding="utf-8"))
        if state.get("format") != _STATE_FORMAT:
            raise ValueError(f"{path}: unknown state format {state.get('format')!r}")
        saved = LoRAConfig.from_dict(state["config"])
        mine = (self.config.rank, float(self.config.alpha), self.target_modules)
        theirs = (saved.rank, float(saved.alpha), tuple(state["target_modules"]))
        if mine != theirs:
            raise ValueError(
                f"{directory}: saved adapter (rank, alpha, targets) {theirs} != this trainer's "
                f"{mine}"
            )
        weights = peft.utils.load_peft_weights(str(directory), device=str(self.backend.device))
        result = peft.utils.set_peft_model_state_dict(self.model, weights)
        missing = [k for k in result.missing_keys if "lora_" in k]
        if result.unexpected_keys or missing:
            raise ValueError(
                f"{directory}: adapter weights do not fit the model (unexpected "
                f"{result.unexpected_keys[:3]}, missing {missing[:3]})"
            )
        optimizer_file = directory / OPTIMIZER_FILE
        if optimizer_file.is_file() and saved.optimizer == self.config.optimizer:
            self.optimizer.load_state_dict(
                torch.load(optimizer_file, map_location=self.backend.device, weights_only=True)
            )
            for group in self.optimizer.param_groups:
                group["lr"] = self.config.lr
                group["weight_decay"] = self.config.weight_decay
        else:
            self.optimizer = self._make_optimizer()
        self.ema = None if state["ema"] is None else float(state["ema"])
        self.num_updates = int(state["num_updates"])
