"""Designer fidelity: how far a cheaper ``hf`` designer (bfloat16, int8) is from float32.

Speed alone does not say whether a cheaper designer is the same model. This script
teacher-forces stored designer answers through the model in float32 and in each variant
of ``--variants`` and compares, at every answer token, the variant's next-token
distribution with float32's: the KL divergence ``KL(p_float32 || p_variant)`` in nats and
whether the most likely token is the same. The pairs are the design prompts a run store
recorded for iteration J (``--round RUN_DIR:J``) with their first answer, every
``--every``-th one; each prompt is cut to its last ``--context`` tokens (the distribution
of the answer's tokens depends mostly on the nearby text, and a shorter context keeps the
forward pass small). One forward pass per pair and model; the logits of the answer's
positions only (``logits_to_keep``).

Usage::

    python benchmarks/bench_hf_fidelity.py --model qwen2.5-coder-1.5b --threads 2 \\
        --round runs/search-index-h2/index-hf-qwen2.5-coder-1.5b-s2:2 --every 5 \\
        --variants bfloat16,int8

A variant is a dtype (``bfloat16``, ``float16``) or ``int8`` (float32 weights quantized
by :class:`llm.backends.hf.HFBackend` with ``quantize="int8"``).
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import time

# The run store is read with the package's own code, which touches JAX; on an
# accelerator host JAX must not take the GPU memory the language model needs.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import torch  # noqa: E402
from bench_hf_throughput import design_rows  # noqa: E402

from llm.backends.hf import HFBackend  # noqa: E402


def round_pairs(spec: str, every: int) -> list[tuple[str, str]]:
    """``(prompt, first answer)`` of every ``every``-th answered design prompt of
    :func:`bench_hf_throughput.design_rows` (``spec``: ``RUN_DIR:J``).

    Raises:
        SystemExit: ``spec`` is not ``RUN_DIR:J`` or the run has no answered design prompt
            at J.
    """
    rows = [r for r in design_rows(spec) if r["completions"]]
    if not rows:
        raise SystemExit(f"--round: {spec} has no answered design prompt")
    return [(r["prompt"], r["completions"][0]) for r in rows[::every]]


def answer_logprobs(
    backend: HFBackend, pairs: list[tuple[str, str]], context: int
) -> list[torch.Tensor]:
    """Per pair, the log-softmax of the next-token logits at each answer token, float32,
    shape ``(answer tokens, vocabulary)``, the prompt cut to its last ``context`` tokens."""
    out = []
    for prompt, answer in pairs:
        ctx = backend.prompt_token_ids(prompt)[-context:]
        ids = backend.completion_token_ids(answer)
        tokens = torch.tensor([ctx + ids], device=backend.device)
        with torch.no_grad():
            logits = backend.model(input_ids=tokens, logits_to_keep=len(ids) + 1).logits
        out.append(torch.log_softmax(logits[0, :-1].float(), dim=-1).cpu())
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="an hf spec: catalog name, folder or .gguf")
    p.add_argument("--round", required=True, metavar="RUN_DIR:J", help="stored design prompts")
    p.add_argument("--every", type=int, default=1, help="use every N-th design prompt")
    p.add_argument("--context", type=int, default=512, help="prompt tokens kept (the last)")
    p.add_argument("--variants", default="bfloat16,int8", help="dtypes and/or int8")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=0, help="PyTorch CPU threads (0: default)")
    args = p.parse_args(argv)
    if args.every < 1 or args.context < 1:
        p.error("--every and --context must be >= 1")
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    pairs = round_pairs(args.round, args.every)

    def load(dtype: str, quantize: str = "none") -> HFBackend:
        return HFBackend(
            args.model, device=args.device, dtype=dtype, quantize=quantize, threads=args.threads
        )

    t = time.perf_counter()
    reference = answer_logprobs(load("float32"), pairs, args.context)
    gc.collect()
    tokens = sum(len(r) for r in reference)
    print(f"date:    {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores")
    print(f"torch:   {torch.__version__}, threads {torch.get_num_threads()}")
    print(f"pairs:   {len(pairs)} of {args.round} (every {args.every}), {tokens:,} answer "
          f"tokens, the last {args.context} prompt tokens; float32 in "
          f"{time.perf_counter() - t:.0f} s")  # fmt: skip
    print(f"{'variant':>9} | {'KL mean':>8} | {'KL p90':>8} | {'KL max':>7} | same top token")
    for variant in variants:
        backend = load("float32", "int8") if variant == "int8" else load(variant)
        kls, same = [], []
        for ref, logp in zip(reference, answer_logprobs(backend, pairs, args.context), strict=True):
            kls.append((ref.exp() * (ref - logp)).sum(-1))
            same.append(ref.argmax(-1) == logp.argmax(-1))
        del backend
        gc.collect()
        kl, top = torch.cat(kls), torch.cat(same).float()
        print(f"{variant:>9} | {kl.mean():>8.4f} | {kl.quantile(0.9):>8.4f} | {kl.max():>7.3f} | "
              f"{100 * top.mean():.1f}%", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
