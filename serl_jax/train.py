"""``python -m serl_jax.train``: the SE-RL loop, or plain PPO training, on real minute bars.

By default it runs the SE-RL outer loop (:mod:`serl_jax.loop`) with the ``offline``
designer on the config's ``loop.market``: the designer proposes reward and network code
(``--modules`` adds ``imagination``, LLM4Imagine's imagined training days), each
candidate is validated in the sandbox, trained and scored on validation days, and the
scores feed the next prompts until the PA moving average converges. The run folder
is written as it happens and can be resumed after a crash or kill::

    runs/<time>-serl/
        run.sqlite  config.yaml            every prompt, completion, validation, metric
        candidates/<id>/                   checkpoint (policy + code), curves.npz
        report.md  report.json  results.txt  loop_progress.png   (at the end)

With ``--llm none`` it trains plain PPO on each market of ``data.markets`` (the default
reward and network) in the market ``--env`` names (``market.mode``): ``static``
(replayed bars), ``dynamic`` (the simulated market of ``market.simulator``: the order
book, :mod:`serl_jax.market`, or the propagator's impact on replayed bars,
:mod:`serl_jax.market.propagator`; ``--env propagator`` is ``dynamic`` with the
propagator) or ``hybrid`` (both at once, ``L = alpha L_static + beta L_dynamic``, the
default; a static-only ``PPO-static`` is trained beside it), and compares it with TWAP, VWAP,
Almgren–Chriss and the immediate sale on test days in both markets. (The SE-RL loop
scores one agent's candidates in the static market, or where ``--env`` says:
``loop.env``.) With ``--env static ppo.distill_coef=λ``
(λ > 0) it trains by policy distillation: a teacher first, on observations holding the
current minute's true volume (``ppo.distill_teacher=oracle``, oracle policy
distillation) or on the student's own (``honest``), then PPO with a supervision term
toward it (:mod:`serl_jax.rl.distillation`; ``metrics.json`` records the teacher under
``distillation``)::

    runs/<time>-<preset>/
        config.yaml  metrics.json  results.txt
        <market>/checkpoint/{policy.msgpack, policy.json}
        <market>/{training_curve, trajectories, pa_distribution}.png

That folder is assembled under ``runs/.<name>.incomplete`` and renamed when complete.
With ``--agents N`` (N > 1) it trains N agents with IPPO or MAPPO in the dynamic market
(with ``--env hybrid`` in the static and dynamic markets at once) instead
(:mod:`serl_jax.agents_experiment`; ``marl.profile`` and ``--comm`` /
``marl.communication`` name validated profile and communication programs) and reports
each agent and the team against TWAP and TWAP-POV. Without ``--llm none``, ``--agents N``
runs the SE-RL loop on N agents: candidates train with IPPO or MAPPO in the dynamic
market (or both, ``--env hybrid``) and are scored over every agent's validation orders,
and ``--modules`` may add ``profiling`` (LLM4Profiling) and ``communication``
(LLM4Communication) (:mod:`serl_jax.loop.agents_evaluation`).

Usage::

    python -m serl_jax.train [--config FILE] [--llm offline|hf:<model>|openai:<base_url>|none]
                             [--model NAME] [--iterations J] [--candidates K]
                             [--workers N] [--dek off|high|low|both]
                             [--modules reward,network,imagination]
                             [--agents N [--modules reward,network,profiling,communication]]
                             [--env static|dynamic|hybrid|propagator]
                             [--data PATH] [--out DIR] [--seed N] [--quiet] [--verbose]
                             [--wide] [section.key=value ...]
    python -m serl_jax.train --budget-minutes M [--budget-candidates N] [...]
    python -m serl_jax.train --llm none --agents N [--marl ippo|mappo]
                             [--scenario independent|team] [--comm] [...]
    python -m serl_jax.train --resume RUN_DIR [--quiet] [--verbose] [--wide]

``--budget-minutes M`` or ``--budget-candidates N`` runs the loop as a search
(:mod:`serl_jax.loop.search`, ``search.enabled``): rounds of best-shot prompts over islands
of scored programs, each candidate through the cascade validation -> sandbox trial ->
short training -> full training for the best share, until M minutes or N designed
candidates are spent; ``report.json`` counts the candidates of each stage.

Overrides may stand anywhere among the flags (:func:`serl_jax.cli.parse_command_line`).
The results table printed at the end fits 120 columns (:func:`serl_jax.metrics.format_table`:
columns the same on every row are named under it instead); ``--wide`` prints every
column, as ``results.txt`` always has them.

Exit codes: 0 done; 2 bad input (config, data, backend spec, run folder); 3 the designer
failed mid-run (the run folder is resumable).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from llm.designs import library
from serl_jax.cli import add_wide_flag, parse_command_line
from serl_jax.config import ConfigError, load_config, saved_run_config
from serl_jax.loop import RunStore, StoreError
from serl_jax.training.agents import train_agents_markets
from serl_jax.training.ppo import train_ppo
from serl_jax.training.serl import run_serl, share_accelerator


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the process exit code (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m serl_jax.train", description=__doc__.split("\n\n")[0].strip('"`')
    )
    parser.add_argument("--config", help="YAML preset (default: built-in defaults)")
    parser.add_argument(
        "--llm",
        help="designer backend: offline (default), hf:<path or model name>, "
        "openai:<base_url>, scripted:<file.json>, or none for plain PPO",
    )
    parser.add_argument("--model", help="model name for an openai:<base_url> server")
    parser.add_argument("--iterations", type=int, help="J_max, the most outer iterations")
    parser.add_argument("--candidates", type=int, help="K, candidates per outer iteration")
    parser.add_argument("--workers", type=int, help="candidates trained at once (processes)")
    parser.add_argument(
        "--modules",
        help="comma-separated slots the designer writes: reward, network, imagination; "
        "with --agents N > 1 also profiling, communication (default: loop.modules, "
        "reward,network; with --agents N > 1 reward,network,profiling,communication)",
    )
    parser.add_argument(
        "--dek",
        choices=["off", "high", "low", "both"],
        help="DEK levels: high = in-context examples + instruction refinement, "
        "low = LoRA fine-tuning of an hf: model (default: dek.level)",
    )
    parser.add_argument(
        "--env",
        choices=["static", "dynamic", "hybrid", "propagator"],
        help="market PPO trains in with --llm none (default: market.mode, hybrid), and one "
        "agent's SE-RL candidates (loop.env, default static); "
        "propagator: the dynamic market with market.simulator=propagator",
    )
    parser.add_argument(
        "--agents",
        type=int,
        help="N execution agents (default: marl.agents, 1); with N > 1 they train in the "
        "dynamic market (no --env) or with --env hybrid in both markets",
    )
    parser.add_argument(
        "--marl", choices=["ippo", "mappo"], help="multi-agent PPO (default: marl.algorithm)"
    )
    parser.add_argument(
        "--scenario",
        choices=["independent", "team"],
        help="agents with their own parent orders, or one shared (default: marl.scenario)",
    )
    parser.add_argument(
        "--comm",
        action="store_true",
        help="the agents send messages (marl.communication; default program linear_message)",
    )
    parser.add_argument(
        "--budget-minutes",
        type=float,
        metavar="M",
        help="run the SE-RL loop as a search (search.enabled) for about M minutes "
        "(search.budget_minutes)",
    )
    parser.add_argument(
        "--budget-candidates",
        type=int,
        metavar="N",
        help="run the SE-RL loop as a search of at most N designed candidates "
        "(search.budget_candidates)",
    )
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue an SE-RL run folder")
    parser.add_argument("--data", help="one dataset (folder or file) instead of the samples")
    parser.add_argument("--out", help="parent folder of run folders (default: run.out)")
    parser.add_argument("--seed", type=int, help="master seed (default: run.seed)")
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    parser.add_argument("--verbose", action="store_true", help="the load report per symbol")
    add_wide_flag(parser)
    parser.add_argument("overrides", nargs="*", metavar="section.key=value")
    args = parse_command_line(parser, argv)

    flags = {
        "loop.llm": args.llm, "loop.model": args.model, "loop.iterations": args.iterations,
        "loop.candidates": args.candidates, "loop.workers": args.workers,
        "loop.modules": None if args.modules is None else args.modules.split(","),
        "dek.level": args.dek, "market.mode": args.env,
        "run.seed": args.seed, "run.out": args.out,
        "marl.agents": args.agents, "marl.algorithm": args.marl, "marl.scenario": args.scenario,
        "search.budget_minutes": args.budget_minutes,
        "search.budget_candidates": args.budget_candidates,
    }  # fmt: skip
    if args.budget_minutes is not None or args.budget_candidates is not None:
        flags["search.enabled"] = True
    if args.agents is not None and args.agents > 1 and args.env is None:
        flags["market.mode"] = "dynamic"  # the agents' default market (--env hybrid: both)
    if args.env == "propagator":
        flags.update({"market.mode": "dynamic", "market.simulator": "propagator"})
    if args.env is not None:  # one agent's SE-RL candidates train where --env says
        flags["loop.env"] = flags["market.mode"]
    overrides = [f"{k}={json.dumps(v)}" for k, v in flags.items() if v is not None]
    if args.data is not None:
        overrides += [
            f"data.markets=[{json.dumps(args.data)}]",
            f"loop.market={json.dumps(args.data)}",
        ]
    overrides += args.overrides
    if args.resume is not None:
        if overrides or args.config:
            print("error: --resume continues a run with its own config; "
                  "drop the other options", file=sys.stderr)  # fmt: skip
            return 2
        try:
            store = RunStore.open(args.resume)
            cfg = saved_run_config(store.meta("config"))
            store.close()
        except (StoreError, ConfigError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        share_accelerator(cfg.loop)
        return run_serl(
            cfg, "", Path(args.resume), args.quiet, verbose=args.verbose, wide=args.wide
        )
    try:
        cfg = load_config(args.config, overrides)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.comm and not cfg.marl.communication:
        cfg = dataclasses.replace(
            cfg, marl=dataclasses.replace(cfg.marl, communication=library("communication")[0].name)
        )
    config_name = Path(args.config).stem if args.config else "default"
    no_designer = cfg.loop.llm.strip().lower() == "none"
    if cfg.run.distributed and not (no_designer and cfg.marl.agents == 1):
        print("error: run.distributed: only plain PPO (--llm none, one agent) trains across "
              "processes; SE-RL candidates reach other machines with loop.executor=ray",
              file=sys.stderr)  # fmt: skip
        return 2
    if no_designer:
        if cfg.marl.agents > 1:
            return train_agents_markets(cfg, config_name, args.quiet, args.verbose, args.wide)
        return train_ppo(cfg, config_name, args.quiet, args.verbose, args.wide)
    share_accelerator(cfg.loop)
    return run_serl(
        cfg, f"{config_name}-serl", None, args.quiet, verbose=args.verbose, wide=args.wide
    )


if __name__ == "__main__":
    sys.exit(main())
