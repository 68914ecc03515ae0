"""Compile seconds of a candidate's training programs, per program and XLA setting.

A short-stage candidate compiles two training programs (``serl_jax.experiment``'s
``_train_lanes``): the lanes' initialization (network parameters, optimizer state, first
observations; run once) and one chunk of ``run.progress_chunk`` PPO updates (run every
chunk). This benchmark builds both as the search does, for one network alone
(``--networks 1``, the default network) or K library networks behind a
:class:`serl_jax.rl.network_switch.NetworkSwitch` taking turns (``--networks K``), and
compiles each under several settings in this process (JAX's caches cleared before every
compile), the default first, as the reference:

* ``default``: XLA's default options;
* ``light``: :data:`serl_jax.rl.compilation.LIGHT_COMPILE_OPTIONS` (what the
  initialization is compiled with);
* on a GPU also ``autotune0`` (``xla_gpu_autotune_level=0``: no GEMM autotuning) and
  ``threefry kernel`` (``jax_threefry_gpu_kernel_lowering``: each threefry draw one
  kernel instead of a chain of integer operations for XLA to compile).

Prints per program and setting the median compile seconds over ``--repeats``, the ratio
to the default's, the largest difference of the program's outputs from the default's
(0 = bit-identical) and, for the chunk, its median run seconds (a setting that compiles
faster may run slower).

Run: ``python benchmarks/bench_compile.py`` (default preset, cn sample, one network);
``--networks 6`` for six networks behind a switch.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from llm.designs import library
from llm.validate import load_validated
from serl_jax.config import load_config
from serl_jax.experiment import make_env
from serl_jax.loop.evaluation import candidate_market
from serl_jax.rl.compilation import LIGHT_COMPILE_OPTIONS
from serl_jax.rl.network_switch import candidate_networks, map_candidates
from serl_jax.rl.networks import action_set_key
from serl_jax.rl.ppo import make_trainer

ROOT = Path(__file__).resolve().parents[1]


def settings() -> dict[str, tuple[dict, bool]]:
    """``{name: (compiler options, threefry GPU kernel lowering)}``, the default first."""
    out = {"default": ({}, False), "light": (LIGHT_COMPILE_OPTIONS, False)}
    if jax.default_backend() == "gpu":
        out["autotune0"] = ({"xla_gpu_autotune_level": 0}, False)
        out["threefry kernel"] = ({}, True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="default", help="configs/<preset>.yaml")
    parser.add_argument("--market", default="sample:cn_1min")
    parser.add_argument("--networks", type=int, default=1, help="K networks (1: the default)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    cfg = load_config(ROOT / "configs" / f"{args.preset}.yaml")
    if args.networks == 1:
        networks = [cfg.network.build()]
    else:
        codes = [d.code for d in library("network") if not action_set_key(d.code)]
        if not 2 <= args.networks <= len(codes):
            parser.error(f"--networks must be 1 or in [2, {len(codes)}]")
        networks = [load_validated(c, "network") for c in codes[: args.networks]]
    market = candidate_market(cfg, args.market)
    env, params, prior = make_env(market.train), market.train, cfg.network.prior()
    network_for, member_of = candidate_networks(networks)
    n_seeds, k = cfg.run.num_seeds, len(networks)
    lane_index = jnp.asarray(np.repeat(np.arange(k, dtype=np.int32), n_seeds))
    keys = jnp.tile(jax.random.split(jax.random.PRNGKey(cfg.run.seed), n_seeds), (k, 1))
    groups = k if max(member_of) > 0 else 1
    length = min(cfg.run.progress_chunk, cfg.ppo.num_updates)

    def trainer(index):
        return make_trainer(cfg.ppo, env, params, network_for(index), prior)

    def init_lanes(index, key):
        return trainer(index).init(key)

    def chunk(runners):
        def lane(index, runner):
            return jax.lax.scan(lambda r, _: trainer(index).update(r), runner, None, length)

        return map_candidates(lane, groups, lane_index, runners)

    init, step = jax.jit(jax.vmap(init_lanes)), jax.jit(chunk)
    runner = init(lane_index, keys)
    programs = {"init": (init, (lane_index, keys)), "chunk": (step, (runner,))}
    print(
        f"{k} network(s) x {n_seeds} seeds, preset {args.preset}, market {args.market}, "
        f"chunk of {length} updates, backend {jax.default_backend()}, jax {jax.__version__}"
    )
    print(
        f"{'program':>8} {'setting':>16} {'compile s':>10} {'ratio':>6} {'max |diff|':>11} "
        f"{'run s':>7}"
    )
    for name, (fn, fn_args) in programs.items():
        reference, reference_s = None, None
        for setting, (options, kernel) in settings().items():
            seconds, run_seconds = [], []
            for _ in range(args.repeats):
                jax.clear_caches()
                jax.config.update("jax_threefry_gpu_kernel_lowering", kernel)
                t0 = time.perf_counter()
                compiled = fn.lower(*fn_args).compile(compiler_options=options)
                seconds.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                out = jax.block_until_ready(compiled(*fn_args))
                run_seconds.append(time.perf_counter() - t0)
                jax.config.update("jax_threefry_gpu_kernel_lowering", False)
            median = statistics.median(seconds)
            if reference is None:
                reference, reference_s = out, median
            diff = max(
                float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
                for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(reference), strict=True)
                if np.asarray(a).size
            )
            run = f"{statistics.median(run_seconds):>7.2f}" if name == "chunk" else f"{'':>7}"
            print(
                f"{name:>8} {setting:>16} {median:>10.2f} {median / reference_s:>5.2f}x "
                f"{diff:>11.3g} {run}"
            )


if __name__ == "__main__":
    main()
