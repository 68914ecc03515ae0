"""A real model as the SE-RL designer: how much of its code is valid, and what it scores.

Runs the SE-RL loop (``python -m serl_jax.train``) once per DEK level with the same
model, preset, market and seed, then reads each run store and prints, per outer
iteration j >= 1 and module: the first samples K, the share that passes stage 1
(parsing and the static AST check) and stage 2 (the sandboxed trial run) three ways --
the sampled code as it is (validated again here, without the repair pass), after the
repair pass (the loop's own verdict) and after repair and self-debugging (the sample or
one of its retries, ``loop.repair_attempts`` rounds, passed), the share that passed with a
program other than those the prompts show (``new``: not the module's default code,
:data:`llm.prompts.DEFAULT_CODE`, nor one of its micro prompt's ``examples``, up to
docstrings, comments and layout; shown one example, the 1.5B returned it unchanged in 9
of its 12 valid imaginations on 2026-11-26), how many distinct programs passed
(``distinct``, compared the same way, examples included), how many trained, and the
validation shortfall and PA of the trained ones (bps); then the designer's tokens/s and
seconds per valid candidate (wall time of the designer calls over the candidates that
passed stage 2). With the low-level DEK it also prints each LoRA update's loss and the
mean change of log p(completion | prompt) it made.

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
import re
import tempfile
import time
from pathlib import Path

import numpy as np

from llm.parsing import ParseError, extract_code, program_text
from llm.prompts import DEFAULT_CODE, MICRO_PROMPTS
from llm.validate import Limits, validate
from serl_jax import train
from serl_jax.loop import RunStore

ROOT = Path(__file__).resolve().parents[1]
STAGE_1 = ("parse", "static")  # a candidate rejected here failed stage 1


def run_level(args: argparse.Namespace, level: str, out: Path) -> tuple[Path, float, str]:
    """Runs the loop at one DEK level; returns its run folder, wall time (s) and log."""
    argv = [
        "--config", str(ROOT / "configs" / "tiny.yaml"), "--out", str(out),
        "--data", args.data, "--llm", args.llm, "--dek", level,
        "--iterations", str(args.iterations), "--candidates", str(args.candidates),
        f"loop.min_iterations={args.iterations}", f"loop.max_new_tokens={args.max_new_tokens}",
        "eval.n_bootstrap=200", *args.set,
    ]  # fmt: skip
    t0 = time.perf_counter()
    log = io.StringIO()  # the loop's log: one line per designer call, with its throughput
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(log):
        code = train.main(argv)
    if code != 0:
        raise SystemExit(f"level {level}: python -m serl_jax.train exited with {code}")
    (run_dir,) = list(out.iterdir())
    return run_dir, time.perf_counter() - t0, log.getvalue()


CALL = re.compile(r"completion\(s\) in ([\d.]+) s \(.*?(?:, (\d+) tokens, [\d.]+ tokens/s)?\)$")


def designer_throughput(log: str) -> tuple[float, int | None]:
    """Seconds in designer calls and tokens generated (None where not counted), summed
    over the loop log's design and self-debugging lines."""
    seconds, tokens, counted = 0.0, 0, True
    for line in log.splitlines():
        if m := CALL.search(line):
            seconds += float(m.group(1))
            counted &= m.group(2) is not None
            tokens += int(m.group(2) or 0)
    return seconds, tokens if counted else None


def raw_verdict(cand, limits) -> tuple[bool, bool]:
    """Whether the sampled code, without the repair pass, passes stage 1 and both stages
    (the loop's own verdict when nothing was repaired; validated again otherwise)."""
    if cand.repairs:
        try:
            result = validate(extract_code(cand.completion), cand.module, limits=limits)
        except ParseError:
            return False, False
        stage, ok = result.stage, result.ok
    else:
        stage, ok = (cand.validation or {}).get("stage"), bool((cand.validation or {}).get("ok"))
    return stage not in STAGE_1, ok


def _mean(values: list[float]) -> str:
    return f"{np.mean(values):+7.2f}" if values else "    n/a"


def _chain_passed(cand, by_retry: dict):
    """The first sample or retry of ``cand``'s chain that passed both stages, or None."""
    while cand is not None:
        if (cand.validation or {}).get("ok"):
            return cand
        cand = by_retry.get(cand.id)
    return None


def report(level: str, run_dir: Path, seconds: float | None, log: str | None) -> None:
    """Prints one level's validity and scores per iteration and module; the designer's
    time and throughput only with the run's wall time and loop log (not in the store)."""
    store = RunStore.open(run_dir)
    limits = Limits()
    print(f"--dek {level}  ({'' if seconds is None else f'{seconds:.0f} s, '}{run_dir})")
    print(
        "  j  module         K  stage 1 raw/repaired  stage 2 raw/repaired/+retries  "
        "new  distinct  retries  trained  shortfall(trained)  PA(trained)"
    )
    everything = store.candidates()
    for j in range(1, 1 + max(c.iteration for c in everything)):
        cands = store.candidates(j)
        by_retry = {c.retry_of: c for c in cands if c.retry_of}
        for module in dict.fromkeys(c.module for c in cands):
            first = [c for c in cands if c.module == module and c.attempt == 0]
            k = len(first)
            raw = [raw_verdict(c, limits) for c in first]
            raw_1, raw_2 = sum(r[0] for r in raw), sum(r[1] for r in raw)
            stage_1 = sum((c.validation or {}).get("stage") not in STAGE_1 for c in first)
            stage_2 = sum(bool((c.validation or {}).get("ok")) for c in first)
            passed = [p for c in first if (p := _chain_passed(c, by_retry)) is not None]
            examples = (DEFAULT_CODE[module], *MICRO_PROMPTS[module].examples)
            shown = {program_text(code) for code in examples}
            new = sum(program_text(p.code) not in shown for p in passed)
            distinct = len({program_text(p.code) for p in passed})
            retries = sum(c.module == module and c.attempt > 0 for c in cands)
            trained = [c for c in cands if c.module == module and c.status == "evaluated"]
            print(
                f"  {j}  {module:<13}{k:2d}  {raw_1 / k:9.0%}/{stage_1 / k:<9.0%}"
                f"  {raw_2 / k:9.0%}/{stage_2 / k:.0%}/{len(passed) / k:<11.0%}"
                f"  {new / k:4.0%}  {distinct:8d}  {retries:7d}  {len(trained):7d}"
                f"  {_mean([c.metrics['shortfall'] for c in trained]):>18}"
                f"  {_mean([c.metrics['pa'] for c in trained]):>11}"
            )
    valid = sum(bool((c.validation or {}).get("ok")) for c in everything if c.iteration > 0)
    if log is not None:
        design_s, tokens = designer_throughput(log)
        print(
            f"  designer: {design_s:.0f} s in calls"
            + (f", {tokens} tokens, {tokens / max(design_s, 1e-9):.1f} tokens/s" if tokens else "")
            + f"; {valid} candidate(s) passed stage 2: "
            + (
                f"{design_s / valid:.0f} s of designer time per valid candidate"
                if valid
                else "none"
            )
        )
    rejected = [c for c in store.candidates() if c.status == "rejected"]
    stages = [c.validation.get("stage", "?") for c in rejected]
    counts = ", ".join(f"{s} {stages.count(s)}" for s in ("parse", "static", "runtime"))
    print(f"  rejected: {counts}")
    for c in rejected:  # every reason, verbatim: what the contracts must address next
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
    parser.add_argument(
        "--llm", help="designer spec: hf:<installed name, GGUF path or Hub id>, openai:<model>"
    )
    parser.add_argument(
        "--levels", default="off,high,low,both",
        help="DEK levels, comma-separated; one loop run each (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--iterations", type=int, default=3, help="outer iterations J (default: %(default)s)"
    )
    parser.add_argument(
        "--candidates", type=int, default=4,
        help="first samples per iteration, split over loop.modules (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--max-new-tokens", type=int, default=384,
        help="token budget of each completion (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--data", default="sample:us_1min",
        help="market data: sample:<name> or a folder (default: %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
        help="a config override for every run, e.g. loop.prompt_style=compact (repeatable)",
    )  # fmt: skip
    parser.add_argument("--out", help="keep each level's run folder under OUT (default: temporary)")
    parser.add_argument(
        "--report", nargs="+", type=Path, metavar="RUN_DIR",
        help="only print the tables of these run folders (kept with --out); no runs",
    )  # fmt: skip
    args = parser.parse_args()
    if args.report:
        for run_dir in args.report:
            level = RunStore.open(run_dir).meta("config")["dek"]["level"]
            report(level, run_dir, None, None)
        return
    if not args.llm:
        parser.error("--llm is required (or --report RUN_DIR to print kept runs)")
    print(f"date:    {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"machine: {platform.processor() or platform.machine()}, {platform.system()}")
    print(
        f"designer {args.llm}; tiny preset, {args.data}; J={args.iterations}, "
        f"K={args.candidates}, {args.max_new_tokens} new tokens per completion"
        + "".join(f", {item}" for item in args.set)
    )
    for level in args.levels.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(args.out) / level if args.out else Path(tmp)
            run_dir, seconds, log = run_level(args, level, out)
            report(level, run_dir, seconds, log)


if __name__ == "__main__":
    main()
