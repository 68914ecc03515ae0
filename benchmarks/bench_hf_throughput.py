"""Designer throughput: tokens/s of the ``hf`` backend on one device, at the loop's batch sizes.

The loop asks the designer for K completions of one module's prompt in one ``generate``
call (:meth:`serl_jax.loop.SERLLoop._ask`; the search asks for a round's K distinct
prompts in one call), so what a run waits for is the wall time of that call at K = 1, 4,
8 or 16. This script times exactly that call (the backend the loop uses,
its sampling settings, the real design prompt of ``--module``) and prints, per batch size,
the tokens generated, seconds, tokens/s over all completions, tokens/s per completion and
the peak memory. ``--prefill shared,generate`` times each batch size both ways with the
same seed (the backend reseeded; in bfloat16 the samples part after some tokens, so
compare tokens/s): the backend's shared prefill (each distinct prompt run
through the model once, its cache copied to the K completions) against ``model.generate``
alone (which prefills the prompt once per completion), and prints the ratio;
``--decode loop,generate`` likewise times the backend's decode loop, which drops each row
from the batch once it has ended, against ``model.generate``, which runs every row to the
last one's end (``HFBackend(drop_finished_rows=...)``; the two draw different samples, so
one call's ratio carries the spread of the longest completion). A call of the decode loop
also times each decoding forward (:class:`StepTimer`) and prints what the same samples
would have cost with every row kept to the longest one's end: the call's seconds plus, for
each step run with fewer rows, the median step at the full batch less that step. Before the
table it times the prompt processing alone (:func:`time_prefill`: the one-row forwards the
shared prefill runs per distinct prompt, tokens a prompt shares with an earlier one run
once) in prompt tokens/s, and with several distinct prompts the same with every prompt's
tokens run, and their ratio; the table's ``decode tok/s``
is then, for a shared-prefill call, its new tokens over its seconds less that prefill. With
``--lora-samples N`` it then times one low-level DEK update
(:meth:`llm.dek.low_level.LowLevelDEK.update`, the default LoRA settings) on N of the
completions it generated: what a ``--dek low`` run adds per outer iteration, one
forward and backward pass per candidate. ``--round RUN_DIR:J`` times instead the call a
search round made: the design prompts a run store recorded for iteration J, one sample
each, in one call (``--fixed-length`` decodes ``--max-new-tokens`` in every row, so that
two commits do the same work).

Two ways to name the model:

* ``--model SPEC``: any ``hf:`` spec without the prefix (a catalog name once installed,
  a folder, a ``.gguf`` file), the model the loop would run::

      python benchmarks/bench_hf_throughput.py --model qwen2.5-coder-1.5b --threads 2

* ``--architecture DIR``: a folder holding only ``config.json`` and the tokenizer files
  (written here by ``--export-architecture DIR --model SPEC``): the same architecture is
  built with random weights in ``--dtype``. Decoding cost depends on the architecture,
  dtype and sequence lengths, not on the weights' values, so this measures a model's
  throughput on a machine the weights cannot reach (an accelerator host without network
  whose transfer limit is under the model's size). Random weights rarely emit an EOS or a
  closed code block, so completions run to ``--max-new-tokens``; a trained model stops
  earlier (the tokens column says how many were generated).

Usage::

    python benchmarks/bench_hf_throughput.py --model qwen2.5-coder-1.5b \\
        --export-architecture /tmp/qwen1.5b-arch
    python benchmarks/bench_hf_throughput.py --architecture /tmp/qwen1.5b-arch \\
        --device cuda --dtype bfloat16 --batch 1,4,8
    python benchmarks/bench_hf_throughput.py --model qwen2.5-coder-1.5b --threads 2 \\
        --batch 4 --repeats 1 --lora-samples 4
    python benchmarks/bench_hf_throughput.py --model qwen2.5-coder-1.5b --threads 2 \\
        --dtype float32 --round runs/search-ac/ac-hf-qwen2.5-coder-1.5b-s2:2 --repeats 1 \\
        --max-new-tokens 160 --fixed-length

``--quantize int8`` loads the model with int8 linear layers (``HFBackend(quantize=)``);
run the same command without it for the float32 reference.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

# The prompt is built with the package's own code, which touches JAX; on an accelerator
# host JAX must not take the GPU memory the language model needs.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from llm.backends.hf import HFBackend  # noqa: E402
from llm.dek.low_level import LowLevelDEK  # noqa: E402
from llm.prompts.builder import DEFAULT_INSTRUCTION, design_prompt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def real_prompt(module: str) -> str:
    """The loop's first design prompt for ``module`` at the default config on the shipped
    cn sample (no examples, no feedback)."""
    from serl_jax.config import load_config
    from serl_jax.envs import ExecutionEnv, MarketData
    from serl_jax.experiment import load_splits
    from serl_jax.loop.outer import run_macro_prompt

    cfg = load_config(None)
    splits = load_splits(cfg, "sample:cn_1min")
    data = MarketData.from_episodes(splits.train)
    obs_dim = ExecutionEnv().observation_size(cfg.env_params(data))
    macro = run_macro_prompt(cfg, obs_dim, data.num_features)
    return design_prompt(module, macro, DEFAULT_INSTRUCTION, imagine=cfg.imagine, marl=cfg.marl)


def export_architecture(spec: str, out: Path) -> None:
    """Writes ``spec``'s config and tokenizer (no weights) to ``out``, without the config's
    ``quantization_config``: a model loaded from a ``.gguf`` file records its GGUF
    quantization there, and a model built from that config would run transformers' packed
    GGUF kernels instead of the plain ``--dtype`` layers a checkpoint folder loads into."""
    backend = HFBackend(spec, device="cpu", dtype="bfloat16")
    out.mkdir(parents=True, exist_ok=True)
    config = backend.model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.save_pretrained(out)
    backend.model.generation_config.save_pretrained(out)
    backend.tokenizer.save_pretrained(out)
    print(f"wrote {sorted(p.name for p in out.iterdir())} to {out}")


def random_model_folder(arch: Path, dtype: str, out: Path, device: str = "cpu") -> Path:
    """A model folder with ``arch``'s config and tokenizer and random weights, drawn on
    ``device`` (on a GPU this takes seconds where the CPU takes about a minute for 1.5 B
    parameters)."""
    config = AutoConfig.from_pretrained(arch, local_files_only=True)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(arch, local_files_only=True).save_pretrained(out)
    gen = arch / "generation_config.json"
    if gen.exists():
        (out / "generation_config.json").write_text(gen.read_text())
    return out


def peak_memory_gb(device: torch.device) -> float:
    """Peak device memory (CUDA) or peak process RSS (CPU), GB."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 1e9
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="an hf spec: catalog name, folder or .gguf file")
    p.add_argument("--architecture", type=Path, help="config + tokenizer folder: random weights")
    p.add_argument("--export-architecture", type=Path, help="write --model's config + tokenizer")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--quantize", default="none", help="none or int8 (HFBackend(quantize=))")
    p.add_argument("--threads", type=int, default=0, help="PyTorch CPU threads (0: default)")
    p.add_argument("--batch", default="1,4,8", help="completions per generate call")
    p.add_argument("--max-new-tokens", type=int, default=640)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--repeats", type=int, default=2, help="timed calls per batch size")
    p.add_argument("--module", default="reward", help="whose design prompt to use")
    p.add_argument(
        "--round", metavar="RUN_DIR:J",
        help="instead: one call of the design prompts a run store recorded for iteration J",
    )  # fmt: skip
    p.add_argument(
        "--fixed-length", action="store_true",
        help="no stop after the code block: every completion decodes --max-new-tokens",
    )  # fmt: skip
    p.add_argument("--lora-samples", type=int, default=0, help="time a LoRA update on N")
    p.add_argument(
        "--prefill", default="shared",
        help="shared, generate or both (shared,generate): who runs the prompt's prefill",
    )  # fmt: skip
    p.add_argument(
        "--decode", default="loop",
        help="loop, generate or both (loop,generate): the decode loop that drops ended rows, "
        "or model.generate",
    )  # fmt: skip
    args = p.parse_args(argv)
    prefills = [m.strip() for m in args.prefill.split(",")]
    if not prefills or set(prefills) - {"shared", "generate"}:
        p.error(f"--prefill: expected shared, generate or shared,generate, got {args.prefill!r}")
    decodes = [m.strip() for m in args.decode.split(",")]
    if not decodes or set(decodes) - {"loop", "generate"}:
        p.error(f"--decode: expected loop, generate or loop,generate, got {args.decode!r}")
    modes = [(prefill, decode) for decode in decodes for prefill in prefills]
    if (args.model is None) == (args.architecture is None):
        p.error("give exactly one of --model and --architecture")
    if args.export_architecture:
        if not args.model:
            p.error("--export-architecture needs --model")
        export_architecture(args.model, args.export_architecture)
        return 0

    prompts = round_prompts(args.round) if args.round else [real_prompt(args.module)]
    prompt = prompts[0]
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        source = args.model
        if args.architecture:
            init = "cuda" if args.device != "cpu" and torch.cuda.is_available() else "cpu"
            source = str(random_model_folder(args.architecture, args.dtype, Path(tmp), init))
        backend = HFBackend(
            source, device=args.device, dtype=args.dtype, quantize=args.quantize,
            threads=args.threads,
        )  # fmt: skip
        load_s = time.perf_counter() - t0
        params = sum(p.numel() for p in backend.model.parameters())
        device = backend.device
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
        weights = "random weights" if args.architecture else "trained weights"
        print(f"date:    {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
        print(f"machine: {name or platform.machine()}, {os.cpu_count()} CPU cores")
        print(f"torch:   {torch.__version__}, device {device}, threads {torch.get_num_threads()}")
        print(f"model:   {args.model or args.architecture} ({weights}), {params / 1e9:.2f} B "
              f"parameters, {args.dtype}, quantize {args.quantize}; "
              f"loaded in {load_s:.1f} s")  # fmt: skip
        backend.stop_after_code = not args.fixed_length
        lengths = [len(backend.prompt_token_ids(x)) for x in dict.fromkeys(prompts)]
        what = f"round {args.round}'s {len(prompts)}" if args.round else f"the {args.module}"
        print(f"prompt:  {what} design prompt(s), {sum(lengths):,} tokens in {len(lengths)} "
              f"distinct; temperature {args.temperature}, max_new_tokens {args.max_new_tokens}"
              f"{', fixed length' if args.fixed_length else ''}")  # fmt: skip
        backend.generate([prompt], n=1, temperature=args.temperature, max_new_tokens=8)  # warm-up
        prompt_tokens, prefill_s = time_prefill(backend, prompts, args.repeats)
        print(f"prefill: {prompt_tokens:,} prompt tokens in {prefill_s:.2f} s (each distinct "
              f"prompt alone, shared leading tokens once, best of {args.repeats}): "
              f"{prompt_tokens / prefill_s:.1f} prompt tokens/s")  # fmt: skip
        if len(lengths) > 1:
            _, apart_s = time_prefill(backend, prompts, args.repeats, together=False)
            print(f"prefill: every prompt's tokens run: {apart_s:.2f} s, "
                  f"{apart_s / prefill_s:.2f}x")  # fmt: skip
        print(f"{'K':>3} | {'prefill':>8} | {'decode':>8} | {'tokens':>7} | {'s':>7} | "
              f"{'tokens/s':>9} | {'decode tok/s':>12} | {'per completion':>14} | "
              f"{'s per completion':>16} | peak GB")  # fmt: skip
        completions = []
        calls = (
            [(len(prompts), prompts, 1)]
            if args.round
            else [(k, [prompt], k) for k in (int(b) for b in args.batch.split(","))]
        )
        for k, asked, n in calls:
            for repeat in range(args.repeats):
                seconds = {}
                for mode in modes:
                    prefill, decode = mode
                    backend.share_prefill = prefill == "shared"
                    backend.drop_finished_rows = decode == "loop"
                    backend.reseed(1000 * k + repeat)  # both modes start from the same seed
                    if device.type == "cuda":
                        torch.cuda.synchronize(device)
                    t = time.perf_counter()
                    with StepTimer(backend.model) as steps:
                        rows = [c for row in backend.generate_with_logprobs(
                            asked, n=n, temperature=args.temperature,
                            max_new_tokens=args.max_new_tokens,
                        ) for c in row]  # fmt: skip
                    if device.type == "cuda":
                        torch.cuda.synchronize(device)
                    s = seconds[mode] = time.perf_counter() - t
                    completions += rows
                    tokens = sum(len(c.token_ids) for c in rows)
                    rate = f"{tokens / (s - prefill_s):.1f}" if prefill == "shared" else "-"
                    print(f"{k:>3} | {prefill:>8} | {decode:>8} | {tokens:>7,} | {s:>7.1f} | "
                          f"{tokens / s:>9.1f} | {rate:>12} | {tokens / k / s:>14.1f} | "
                          f"{s / k:>16.2f} | {peak_memory_gb(device):.2f}", flush=True)  # fmt: skip
                    if decode == "loop":
                        kept = s + steps.kept_to_the_end()
                        rows_per_step = steps.rows_per_step()
                        print(f"{k:>3} | {len(rows_per_step)} decoding steps, "
                              f"{sum(rows_per_step) / len(rows_per_step):.1f} rows per step of "
                              f"{rows_per_step[0]}; every row kept to the longest end: "
                              f"{kept:.1f} s, {kept / s:.2f}x this call", flush=True)  # fmt: skip
                if len(seconds) == 2:
                    (a, first), (b, second) = seconds.items()
                    print(f"{k:>3} | {'/'.join(b)} over {'/'.join(a)}: {second / first:.2f}x")
        if args.lora_samples:
            time_lora_update(backend, prompt, completions[-args.lora_samples :])
    return 0


class StepTimer:
    """Times each forward of ``model`` inside a ``with`` block (forward hooks; on CUDA
    synchronized before and after): ``records`` holds ``(rows, positions, seconds)`` per
    forward, the decoding steps being those of one position."""

    def __init__(self, model: torch.nn.Module):
        self.model, self.records, self._start = model, [], 0.0
        self._cuda = next(model.parameters()).device.type == "cuda"

    def _before(self, module, args, kwargs) -> None:
        if self._cuda:
            torch.cuda.synchronize()
        self._start = time.perf_counter()

    def _after(self, module, args, kwargs, output) -> None:
        if self._cuda:
            torch.cuda.synchronize()
        ids = kwargs["input_ids"] if "input_ids" in kwargs else args[0]
        self.records.append((ids.shape[0], ids.shape[1], time.perf_counter() - self._start))

    def __enter__(self) -> StepTimer:
        self._hooks = [
            self.model.register_forward_pre_hook(self._before, with_kwargs=True),
            self.model.register_forward_hook(self._after, with_kwargs=True),
        ]
        return self

    def __exit__(self, *exc) -> None:
        for hook in self._hooks:
            hook.remove()

    def rows_per_step(self) -> list[int]:
        """The rows of each decoding step (forwards of one position), in order."""
        return [rows for rows, positions, _ in self.records if positions == 1]

    def kept_to_the_end(self) -> float:
        """Seconds the decoding steps run with fewer rows than the first would have taken
        more at the first step's row count (the median of the steps at that count), as
        when every row is decoded to the longest one's end."""
        steps = [(rows, seconds) for rows, positions, seconds in self.records if positions == 1]
        if not steps:
            return 0.0
        full = steps[0][0]
        median = float(np.median([seconds for rows, seconds in steps if rows == full]))
        return sum(median - seconds for rows, seconds in steps if rows < full)


def time_prefill(
    backend: HFBackend, prompts: list[str], repeats: int, together: bool = True
) -> tuple[int, float]:
    """``(prompt tokens, seconds)`` of the shared prefill of ``prompts``' distinct prompts
    (all their tokens but the last, through :meth:`HFBackend._prefill`), the fastest of
    ``repeats`` (at least one) timed runs. ``together``: one call, as a designer call
    prefills them (the tokens a prompt shares with an earlier one run once); else one call
    per prompt (every prompt's tokens run)."""
    distinct = [backend.format_prompt(x) for x in dict.fromkeys(prompts)]
    batches = [distinct] if together else [[x] for x in distinct]
    batches = [
        backend.tokenizer(
            texts, add_special_tokens=not backend.uses_chat_template, padding=True,
            return_tensors="pt",
        ).to(backend.device)
        for texts in batches
    ]  # fmt: skip
    best = float("inf")
    for _ in range(max(repeats, 1)):
        if backend.device.type == "cuda":
            torch.cuda.synchronize(backend.device)
        t = time.perf_counter()
        for batch in batches:
            rows = torch.arange(len(batch["input_ids"]), device=backend.device)
            backend._prefill(batch["input_ids"], batch["attention_mask"], rows, 1)
        if backend.device.type == "cuda":
            torch.cuda.synchronize(backend.device)
        best = min(best, time.perf_counter() - t)
    return sum(int(b["attention_mask"].sum()) - len(b["input_ids"]) for b in batches), best


def design_rows(spec: str) -> list[dict]:
    """The design prompt rows (:meth:`serl_jax.loop.RunStore.prompts`, purpose design, in
    the order asked) that the run store at ``RUN_DIR`` recorded for iteration ``J``
    (``spec``: ``RUN_DIR:J``).

    Raises:
        SystemExit: ``spec`` is not ``RUN_DIR:J`` or the run has no design prompt at J.
    """
    from serl_jax.loop import RunStore

    folder, _, j = spec.rpartition(":")
    if not folder or not j.isdigit():
        raise SystemExit(f"--round: expected RUN_DIR:J (J an iteration), got {spec!r}")
    store = RunStore.open(Path(folder))
    try:
        rows = [r for r in store.prompts(int(j)) if r["purpose"] == "design"]
    finally:
        store.close()
    if not rows:
        raise SystemExit(f"--round: {folder} has no design prompt at iteration {j}")
    return rows


def round_prompts(spec: str) -> list[str]:
    """The prompts of :func:`design_rows`."""
    return [r["prompt"] for r in design_rows(spec)]


def time_lora_update(backend: HFBackend, prompt: str, completions: list) -> None:
    """Wraps ``backend`` in a fresh LoRA adapter and prints the wall time and peak memory of
    one update on ``completions`` (their scores 0, 1, ... bps: the cost does not depend on
    them)."""
    device = backend.device
    t = time.perf_counter()
    dek = LowLevelDEK(backend)
    wrap_s = time.perf_counter() - t
    trainable = sum(p.numel() for p in dek.model.parameters() if p.requires_grad)
    samples = [(prompt, c.token_ids, float(i)) for i, c in enumerate(completions)]
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t = time.perf_counter()
    stats = dek.update(samples)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    s = time.perf_counter() - t
    n = stats.num_samples
    print(f"LoRA:    rank {dek.config.rank} on {', '.join(dek.target_modules)}, "
          f"{trainable / 1e6:.1f} M trainable parameters (wrapped in {wrap_s:.1f} s)")  # fmt: skip
    print(f"update:  {n} completions ({sum(stats.num_tokens):,} tokens after a "
          f"{len(backend.prompt_token_ids(prompt)):,}-token prompt each): {s:.1f} s, "
          f"{s / max(n, 1):.1f} s per completion, grad norm {stats.grad_norm:.3g}, "
          f"peak GB {peak_memory_gb(device):.2f}")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
