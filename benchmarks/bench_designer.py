"""A real model as the SE-RL designer: how much of its code is valid, and what it scores.

Runs the SE-RL loop (``python -m serl_jax.train``) once per DEK level with the same
model, preset, market and seed, then reads each run store and prints, per outer
iteration j >= 1: the candidates, the share that passed stage 1 (parsing and the static
AST check) and stage 2 (the sandboxed trial run), how many trained, and the validation
shortfall and PA of the trained ones (bps). With the low-level DEK it also prints each
LoRA update's loss and the mean change of log p(completion | prompt) it made.

Run (a model installed by name, :mod:`llm.models`; any ``hf:`` or ``openai:`` spec
works)::

    python -m llm.models install qwen2.5-coder-1.5b
    python benchmarks/bench_designer.py --llm hf:qwen2.5-coder-1.5b --levels off

Defaults: the tiny preset on the US sample, J = 3 iterations of K = 4 candidates, 384
new tokens per completion, levels off, high, low and both. ``--set
loop.prompt_style=compact`` (repeatable) passes a config override to every run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from serl_jax import train
from serl_jax.loop import RunStore

ROOT = Path(__file__).resolve().parents[1]
STAGE_1 = ("parse", "static")  # a candidate rejected here failed stage 1


def run_level(args: argparse.Namespace, level: str, out: Path) -> tuple[Path, float]:
    """Runs the loop at one DEK level; returns its run folder and wall time (s)."""
    argv = [
        "--config", str(ROOT / "configs" / "tiny.yaml"), "--out", str(out), "--quiet",
        "--data", args.data, "--llm", args.llm, "--dek", level,
        "--iterations", str(args.iterations), "--candidates", str(args.candidates),
        f"loop.min_iterations={args.iterations}", f"loop.max_new_tokens={args.max_new_tokens}",
        "eval.n_bootstrap=200", *args.set,
    ]  # fmt: skip
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # the run's own results table
        code = train.main(argv)
    if code != 0:
        raise SystemExit(f"level {level}: python -m serl_jax.train exited with {code}")
    (run_dir,) = list(out.iterdir())
    return run_dir, time.perf_counter() - t0


def _mean(values: list[float]) -> str:
    return f"{np.mean(values):+7.2f}" if values else "    n/a"


def report(level: str, run_dir: Path, seconds: float) -> None:
    """Prints one level's validity and scores per iteration."""
    store = RunStore.open(run_dir)
    print(f"--dek {level}  ({seconds:.0f} s, {run_dir})")
    print("  j  K  stage 1  stage 2  trained  shortfall(trained)  PA(trained)")
    for j in range(1, 1 + max(c.iteration for c in store.candidates())):
        cands = store.candidates(j)
        stages = [(c.validation or {}).get("stage") for c in cands]
        passed_1 = sum(s not in STAGE_1 for s in stages)
        passed_2 = sum(bool((c.validation or {}).get("ok")) for c in cands)
        trained = [c for c in cands if c.status == "evaluated"]
        print(
            f"  {j}  {len(cands)}  {passed_1 / len(cands):7.0%}  {passed_2 / len(cands):7.0%}"
            f"  {len(trained):7d}  {_mean([c.metrics['shortfall'] for c in trained]):>18}"
            f"  {_mean([c.metrics['pa'] for c in trained]):>11}"
        )
    rejected = [c for c in store.candidates() if c.status == "rejected"]
    stages = [c.validation.get("stage", "?") for c in rejected]
    counts = ", ".join(f"{s} {stages.count(s)}" for s in ("parse", "static", "runtime"))
    print(f"  rejected: {counts}")
    for c in rejected[:: max(1, len(rejected) // 3)][:3]:  # a few reasons, verbatim
        print(f"    {c.id}: {c.validation.get('stage')}: {c.validation.get('reason', '')[:110]}")
    for u in store.dek_updates():
        s = u["stats"]
        change = np.mean(np.subtract(s["logprobs_after"], s["logprobs_before"]))
        print(
            f"  LoRA update after j={u['iteration']}: loss {s['loss']:.4g}, scores "
            f"{sorted(set(s['scores']))}, mean change of log p(completion) {change:+.3f} nats"
        )
    store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--llm", required=True, help="designer spec (hf:<path>, openai:...)")
    parser.add_argument("--levels", default="off,high,low,both")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--candidates", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=384)
    parser.add_argument("--data", default="sample:us_1min")
    parser.add_argument(
        "--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
        help="a config override for every run, e.g. loop.prompt_style=compact (repeatable)",
    )  # fmt: skip
    args = parser.parse_args()
    print(f"date:    {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"machine: {platform.processor() or platform.machine()}, {platform.system()}")
    print(
        f"designer {args.llm}; tiny preset, {args.data}; J={args.iterations}, "
        f"K={args.candidates}, {args.max_new_tokens} new tokens per completion"
        + "".join(f", {item}" for item in args.set)
    )
    for level in args.levels.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            run_dir, seconds = run_level(args, level, Path(tmp))
            report(level, run_dir, seconds)


if __name__ == "__main__":
    main()
