"""Int8 against float32 matrix products on this CPU, at the 1.5B designer's layer shapes.

``loop.hf_quantize=int8`` (:func:`llm.backends.hf._quantize_int8`) runs every linear layer
through torchao's ``int_scaled_matmul``, which calls ``torch._int_mm``. On a CPU with
``avx512_vnni`` or AMX that product is fast (a search round of the 1.5B ran 1.75x faster
than float32 on a 2-core Xeon); without them PyTorch falls back to a slow kernel. This
script times, per shape, the float32 product (the reference) and torchao's int8 product
of the same sizes (``torch._int_mm`` where torchao is not installed), and prints GFLOP/s
of each and their ratio, with what PyTorch reports of the CPU's instructions
(:func:`llm.backends.hf.cpu_has_int8`).

Shapes: Qwen2.5-Coder-1.5B's attention projection (1536 x 1536) and MLP (1536 x 8960)
at M rows: M = 16 is one decoding step of a 16-prompt search round, M = 512 a part of its
prefill.

Usage::

    python benchmarks/bench_int8_matmul.py --threads 2
"""

from __future__ import annotations

import argparse
import time

import torch

from llm.backends.hf import cpu_has_bfloat16, cpu_has_int8

SHAPES = ((16, 1536, 1536), (16, 1536, 8960), (512, 1536, 1536), (512, 1536, 8960))


def int8_product():
    """torchao's int8 product ``(a, b, scales) -> a @ b * scales`` or, without torchao,
    ``torch._int_mm`` with the scaling applied the same way."""
    try:
        from torchao.kernel.intmm import int_scaled_matmul
    except ImportError:
        return lambda a, b, scales: torch._int_mm(a, b).to(scales.dtype) * scales
    return int_scaled_matmul


def seconds(fn, repeats: int) -> float:
    """The median wall time of ``repeats`` calls of ``fn`` after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=0, help="PyTorch CPU threads (0: default)")
    p.add_argument("--repeats", type=int, default=3, help="timed calls per shape and dtype")
    args = p.parse_args(argv)
    if args.threads < 0 or args.repeats < 1:
        p.error("--threads must be >= 0 and --repeats >= 1")
    if args.threads:
        torch.set_num_threads(args.threads)
    product = int8_product()
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; int8 instructions "
        f"(avx512_vnni or AMX): {cpu_has_int8()}; bfloat16 instructions: {cpu_has_bfloat16()}"
    )
    print("| M x K x N | float32 GFLOP/s | int8 GFLOP/s | int8 / float32 |")
    print("|---|---:|---:|---:|")
    gen = torch.Generator().manual_seed(0)
    for m, k, n in SHAPES:
        a8 = torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=gen)
        b8 = torch.randint(-128, 128, (k, n), dtype=torch.int8, generator=gen)
        scales = torch.rand((m, 1), generator=gen)
        af, bf = a8.float(), b8.float()
        flops = 2.0 * m * k * n
        f32 = flops / seconds(lambda af=af, bf=bf: af @ bf, args.repeats) / 1e9
        i8 = flops / seconds(lambda a=a8, b=b8, s=scales: product(a, b, s), args.repeats) / 1e9
        print(f"| {m} x {k} x {n} | {f32:.1f} | {i8:.1f} | {i8 / f32:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
