"""Memory and time of one low-level DEK (LoRA) update, with and without gradient
checkpointing, against the sequence length.

A ``--dek low`` run updates the designer's adapter after every outer iteration, one
forward and backward pass per candidate (:meth:`llm.dek.low_level.LowLevelDEK.update`).
What it costs grows with the sequence: the design prompt, a self-debugging prompt's
rejected code and error, and the completion. This script times that update on sequences
of given lengths and prints each one's wall time and the process's peak memory, with
``gradient_checkpointing`` off (the reference) and on, and their ratios.

Each (setting, length) runs in its own process, so that each peak is that update's
alone (peak RSS never falls within a process). A sequence is the real design prompt of
``--module`` followed by a completion of library program text repeated to the length
(the cost depends on the lengths, not on the tokens). A run killed by the kernel for
lack of memory is reported as such; choose lengths for ``off`` that fit the machine.

Usage::

    python benchmarks/bench_lora_memory.py --model qwen2.5-coder-1.5b --threads 2 \\
        --runs off:3300,on:3300,on:5000
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

# The prompt is built with the package's own code, which touches JAX; on an accelerator
# host JAX must not take the GPU memory the language model needs.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

sys.path.insert(0, str(Path(__file__).resolve().parent))

_MARK = "@@LORA@@ "


def one_update(args: argparse.Namespace, checkpointing: bool, tokens: int) -> dict:
    """Loads the model, wraps it in a fresh adapter and times one update on
    ``--samples`` sequences of ``tokens`` tokens; returns the figures."""
    import torch
    from bench_hf_throughput import peak_memory_gb, real_prompt

    from llm.backends.hf import HFBackend
    from llm.dek.low_level import LoRAConfig, LowLevelDEK
    from llm.designs import library

    prompt = real_prompt(args.module)
    t = time.perf_counter()
    backend = HFBackend(args.model, device=args.device, dtype=args.dtype, threads=args.threads)
    load_s = time.perf_counter() - t
    prompt_tokens = len(backend.prompt_token_ids(prompt))
    if tokens <= prompt_tokens:
        raise SystemExit(f"--runs: {tokens} tokens is not above the prompt's {prompt_tokens}")
    program = backend.completion_token_ids(library(args.module)[0].code)
    n = tokens - prompt_tokens
    text = program * (2 + (n + args.samples) // len(program))
    # sample k starts k tokens into the text: distinct completions, so the advantages
    # (+-1 for two) do not cancel in the gradient
    samples = [(prompt, text[k : k + n], float(k)) for k in range(args.samples)]
    dek = LowLevelDEK(backend, LoRAConfig(gradient_checkpointing=checkpointing))
    device = backend.device
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    t = time.perf_counter()
    stats = dek.update(samples)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return {
        "checkpointing": checkpointing,
        "tokens": tokens,
        "prompt_tokens": prompt_tokens,
        "samples": stats.num_samples,
        "load_s": load_s,
        "update_s": time.perf_counter() - t,
        "peak_gb": peak_memory_gb(device),
        "grad_norm": stats.grad_norm,
        "device": str(device),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="an hf spec: catalog name, folder or .gguf")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--threads", type=int, default=0, help="PyTorch CPU threads (0: default)")
    p.add_argument("--module", default="reward", help="whose design prompt starts a sequence")
    p.add_argument("--samples", type=int, default=2, help="sequences per update (>= 2)")
    p.add_argument(
        "--runs",
        default="off:3300,on:3300",
        help="comma-separated setting:tokens pairs, setting on|off (gradient checkpointing)",
    )
    p.add_argument("--one", help=argparse.SUPPRESS)  # internal: a child's setting:tokens
    args = p.parse_args(argv)
    if args.samples < 2:
        p.error("--samples: at least 2 (one sample has advantage 0, so no gradient)")
    runs = []
    for item in (args.one or args.runs).split(","):
        setting, _, tokens = item.partition(":")
        if setting not in ("on", "off") or not tokens.isdigit():
            p.error(f"--runs: expected on:<tokens> or off:<tokens>, got {item!r}")
        runs.append((setting == "on", int(tokens)))
    if args.one:
        print(_MARK + json.dumps(one_update(args, *runs[0])), flush=True)
        return 0

    print(f"date:    {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores")
    print(f"model:   {args.model}, {args.dtype}; the {args.module} design prompt; "
          f"{args.samples} sequence(s) per update; default LoRA settings")  # fmt: skip
    print(f"{'checkpointing':>13} | {'tokens':>6} | {'update s':>8} | {'s/sequence':>10} | "
          f"{'peak GB':>7} | {'grad norm':>9}")  # fmt: skip
    results = {}
    for checkpointing, tokens in runs:
        child = [sys.executable, __file__, "--model", args.model, "--device", args.device,
                 "--dtype", args.dtype, "--threads", str(args.threads), "--module",
                 args.module, "--samples", str(args.samples),
                 "--one", f"{'on' if checkpointing else 'off'}:{tokens}"]  # fmt: skip
        proc = subprocess.run(child, capture_output=True, text=True)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(_MARK)]
        setting = "on" if checkpointing else "off"
        if proc.returncode != 0 or not lines:
            why = (
                "killed (signal 9: out of memory?)"
                if proc.returncode == -9
                else (proc.stderr.strip().splitlines() or ["no output"])[-1]
            )
            print(f"{setting:>13} | {tokens:>6,} | {why}", flush=True)
            continue
        r = results[(checkpointing, tokens)] = json.loads(lines[-1][len(_MARK) :])
        print(f"{setting:>13} | {tokens:>6,} | {r['update_s']:>8.1f} | "
              f"{r['update_s'] / r['samples']:>10.1f} | {r['peak_gb']:>7.2f} | "
              f"{r['grad_norm']:>9.4g}", flush=True)  # fmt: skip
    first = next(iter(results.values()), None)
    if first:
        print(f"device {first['device']}, torch {first['torch']}, {first['threads']} threads; "
              f"prompt {first['prompt_tokens']:,} tokens, the rest completion")  # fmt: skip
    for tokens in sorted({t for _, t in results}):
        on, off = results.get((True, tokens)), results.get((False, tokens))
        if on and off:
            print(f"{tokens:,} tokens: checkpointing on / off: peak memory "
                  f"{on['peak_gb'] / off['peak_gb']:.2f}x, update time "
                  f"{on['update_s'] / off['update_s']:.2f}x, same gradient norm within "
                  f"{abs(on['grad_norm'] - off['grad_norm']) / off['grad_norm']:.1e}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
