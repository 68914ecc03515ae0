"""Execution-env throughput: the vectorized JAX env vs its per-episode NumPy twin, and PPO.

All runs use the real A-share sample (``cn_1min``, training days: 100 symbol-days of 240
one-minute bars) and the default ``EnvParams`` (whole-day window, sell order, force
liquidation at the last slot). Three tables:

1. Vectorized env: aggregate env steps/s against the number of parallel episodes. One
   jitted function runs a ``lax.scan`` over ``--steps`` steps (default 240, one A-share
   day) of ``jax.vmap(env.step)`` with uniform [0, 1] actions drawn inside the scan; the
   observations, rewards and ``info["order_pa"]`` are carried or summed so XLA cannot
   drop them. Episodes auto-reset (gymnax ``step``), as in training. Compile time
   (``jax.jit(f).lower(...).compile()``) is reported separately from the run time, which
   is the best of ``--repeats`` runs after one warm-up run. A second column runs
   ``env.step_env`` instead (no auto-reset): gymnax's ``step`` computes a whole reset for
   every lane at every step and selects, so the gap shows what that costs.
2. ``NumpyExecutionEnv`` (``serl_jax/envs/reference.py``), the same environment one
   episode at a time in NumPy, with random actions, timed over whole episodes for at least
   ``--numpy-seconds``; and the ratio vectorized/NumPy for each number of episodes,
   with the issue's target (>= 100x at 4,096 episodes) checked.
3. PPO training (``serl_jax.rl.ppo.make_trainer``, default network): env steps/s of one
   jitted update (rollout of ``num_steps`` steps in ``num_envs`` episodes, GAE, and
   ``update_epochs`` x ``num_minibatches`` gradient steps), compile time separate; and the
   same update with imagination on (:mod:`serl_jax.rl.mixed_sampling`, ratio 0.5, the
   library's ``mean_reversion`` program, the slowest of the five in stage 2's timing):
   every update imagines a fresh pool of 100 days inside the jitted update, and the
   ratio of the two rates is what imagination costs.
4. Markets (``--markets``): steps/s of the static, propagator and order-book markets with
   1, 2 and 8 agents at 256 to 16,384 parallel episodes, each against the static
   single-agent market's at the same count, in one run (``--json``: this table alone, as
   JSON lines with ``market``, ``agents``, ``episodes``, ``steps_per_s``).

Timings are wall-clock and depend on whatever else runs on the machine; nothing is
asserted. Run from the repository root::

    python benchmarks/bench_env.py            # full (several minutes on 2 CPU cores)
    python benchmarks/bench_env.py --quick    # smoke run (up to 1,024 episodes)
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from llm.designs import library
from llm.validate import load_validated, validate
from serl_jax.config import load_config
from serl_jax.data import load_market, sample_path
from serl_jax.envs.dynamic import DynamicExecutionEnv
from serl_jax.envs.execution import EnvParams, ExecutionEnv
from serl_jax.envs.imagined_market import FeatureStats
from serl_jax.envs.market_data import MarketData
from serl_jax.envs.multi_agent import MultiAgentExecutionEnv
from serl_jax.envs.propagator import PropagatorExecutionEnv, PropagatorMultiAgentEnv
from serl_jax.envs.reference import NumpyExecutionEnv
from serl_jax.envs.static_multi_agent import StaticMultiAgentEnv
from serl_jax.experiment import calibrated_market, dynamic_env_params
from serl_jax.rl.mixed_sampling import Imagination, mix_imagined
from serl_jax.rl.networks import make_network
from serl_jax.rl.ppo import PPOConfig, make_trainer

EPISODE_COUNTS = (1, 16, 256, 1024, 4096, 16384)
QUICK_MAX_EPISODES = 1024
PPO_NUM_ENVS = (256, 1024, 4096)
QUICK_PPO_NUM_ENVS = (256,)
TARGET_EPISODES = 4096
TARGET_RATIO = 100.0
IMAGINATION_PROGRAM = "mean_reversion"
MARKETS = ("static", "propagator", "lob")
MARKET_EPISODES = (256, 1024, 4096, 16384)
LOB_LANE_STEPS = 81_920
MARKET_ENVS = {
    "propagator": (PropagatorExecutionEnv, PropagatorMultiAgentEnv),
    "lob": (DynamicExecutionEnv, MultiAgentExecutionEnv),
}


def machine_description() -> str:
    """CPU model, core count, jax version and device, one line each."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            models = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        cpu = models[0] if models else cpu
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    device = jax.devices()[0]
    return "\n".join(
        [
            f"date:    {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M UTC}",
            f"machine: {cpu}, {cores} cores usable ({platform.system()} {platform.machine()})",
            f"jax:     {jax.__version__}, device {device.platform} ({device.device_kind})",
        ]
    )


def compile_and_time(fn: Callable, args: tuple, repeats: int) -> tuple[Any, float, float, float]:
    """AOT-compiles ``jax.jit(fn)`` for ``args``, then times it.

    Returns:
        ``(output, compile_s, best_s, median_s)``: the run time over ``repeats`` calls
        after one untimed warm-up call.
    """
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    compile_s = time.perf_counter() - t0
    out = jax.block_until_ready(compiled(*args))  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - t0)
    return out, compile_s, min(times), statistics.median(times)


def step_without_reset(env: ExecutionEnv) -> Callable:
    """``env.step_env`` with ``env.step``'s signature: no auto-reset (an upper bound)."""

    def step(key, state, action, params):
        obs, state, reward, terminated, info = env.step_env(key, state, action, params)
        return obs, state, reward, terminated, env.is_truncated(state, params), info

    return step


def make_rollout(step: Callable, num_steps: int, agents: int = 0) -> Callable:
    """``rollout(obs, state, key, params)``: ``num_steps`` vmapped ``step``s, random actions.

    Returns the final observations and states and the per-episode sums of rewards and
    order PAs, so that every output of the step the training loop uses stays live.
    ``agents`` > 0: a multi-agent step (actions, rewards and PAs ``[num_envs, agents]``).
    """
    step_batch = jax.vmap(step, in_axes=(0, 0, 0, None))
    per_lane = (agents,) if agents else ()

    def rollout(obs, state, key, params):
        num_envs = obs.shape[0]

        def one_step(carry, _):
            obs, state, key, reward_sum, pa_sum = carry
            key, key_act, key_step = jax.random.split(key, 3)
            action = jax.random.uniform(key_act, (num_envs, *per_lane))
            step_keys = jax.random.split(key_step, num_envs)
            obs, state, reward, _, _, info = step_batch(step_keys, state, action, params)
            return (obs, state, key, reward_sum + reward, pa_sum + info["order_pa"]), None

        zeros = jnp.zeros((num_envs, *per_lane), jnp.float32)
        carry = (obs, state, key, zeros, zeros)
        carry, _ = jax.lax.scan(one_step, carry, None, num_steps)
        return carry

    return rollout


def bench_vectorized(
    env: ExecutionEnv, params: EnvParams, counts: tuple[int, ...], num_steps: int, repeats: int
) -> tuple[dict[int, float], dict[int, float]]:
    """Table 1. Returns steps/s per number of episodes, with and without auto-reset."""
    reset_batch = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))
    rollout = make_rollout(env.step, num_steps)
    rollout_no_reset = make_rollout(step_without_reset(env), num_steps)
    print(f"\n1. Vectorized ExecutionEnv: lax.scan of {num_steps} steps of vmap(env.step)")
    header = (
        f"{'episodes':>8} | {'steps/run':>10} | {'compile s':>9} | {'best s':>8} "
        f"{'median s':>8} | {'steps/s':>12} | {'no-reset steps/s':>16}"
    )
    print(header)
    print("-" * len(header))
    rates, rates_no_reset = {}, {}
    for n in counts:
        obs, state = reset_batch(jax.random.split(jax.random.key(n), n), params)
        args = (obs, state, jax.random.key(0), params)
        n_repeats = max(2, repeats - 1) if n >= 4096 else repeats
        _, compile_s, best_s, median_s = compile_and_time(rollout, args, n_repeats)
        rates[n] = n * num_steps / best_s
        _, _, best_no_reset_s, _ = compile_and_time(rollout_no_reset, args, n_repeats)
        rates_no_reset[n] = n * num_steps / best_no_reset_s
        print(
            f"{n:>8,} | {n * num_steps:>10,} | {compile_s:>9.2f} | {best_s:>8.3f} "
            f"{median_s:>8.3f} | {rates[n]:>12,.0f} | {rates_no_reset[n]:>16,.0f}",
            flush=True,
        )
    print(
        "(no-reset: env.step_env without gymnax's auto-reset, which computes a full reset "
        "for every lane at every step; an upper bound for the env.step column)"
    )
    return rates, rates_no_reset


def market_envs(market: str, agents: int, cfg, splits, static_params: EnvParams):
    """The environment and parameters of one market (``static``, ``propagator``, ``lob``)
    with ``agents`` agents (1: the single-agent environment)."""
    if market == "static":
        env = ExecutionEnv() if agents == 1 else StaticMultiAgentEnv(agents)
        return env, static_params
    lob_cfg = dataclasses.replace(cfg, market=dataclasses.replace(cfg.market, simulator=market))
    params = dynamic_env_params(
        lob_cfg, calibrated_market(lob_cfg, "sample:cn_1min"), static_params, splits.stats
    )
    single, multi = MARKET_ENVS[market]
    return (single() if agents == 1 else multi(agents)), params


def bench_markets(
    markets: list[str],
    agents_list: list[int],
    counts: tuple[int, ...],
    num_steps: int,
    repeats: int,
    as_json: bool,
) -> None:
    """Table 4: steps/s of each market (``lax.scan`` of ``vmap(env.step)``, uniform random
    actions, auto-reset) per number of agents and parallel episodes, and the ratio to the
    static single-agent market's steps/s at the same number of episodes (a step is one
    minute of one market: N agents' child orders). The order book runs at most
    :data:`LOB_LANE_STEPS` lane-steps per call (its minutes are 50-1,000x dearer)."""
    cfg = load_config(None, [])
    splits = load_market(sample_path("cn_1min"))
    static_params = cfg.env_params(MarketData.from_episodes(splits.train))
    if not as_json:
        print(
            f"\n4. Markets: lax.scan of vmap(env.step), {num_steps} steps per lane "
            f"(lob: at most {LOB_LANE_STEPS:,} lane-steps per call); cn_1min training days"
        )
        header = (
            f"{'market':>10} | {'agents':>6} | {'episodes':>8} | {'steps':>5} | "
            f"{'compile s':>9} | {'steps/s':>12} | {'agent steps/s':>13} | {'static/x':>8}"
        )
        print(header + "\n" + "-" * len(header))
    reference: dict[int, float] = {}
    for market in ["static", *[m for m in markets if m != "static"]]:
        for agents in agents_list if market in markets else [1]:
            env, params = market_envs(market, agents, cfg, splits, static_params)
            for n in counts:
                steps = num_steps
                if market == "lob":
                    steps = max(1, min(num_steps, LOB_LANE_STEPS // n))
                keys = jax.random.split(jax.random.key(n), n)
                obs, state = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(keys, params)
                rollout = make_rollout(env.step, steps, agents if agents > 1 else 0)
                args = (obs, state, jax.random.key(0), params)
                _, compile_s, best_s, _ = compile_and_time(rollout, args, repeats)
                rate = n * steps / best_s
                if market == "static" and agents == 1:
                    reference[n] = rate
                row = {
                    "market": market, "agents": agents, "episodes": n, "steps": steps,
                    "compile_s": round(compile_s, 2), "steps_per_s": round(rate),
                    "agent_steps_per_s": round(rate * agents),
                    "static_over_market": round(reference[n] / rate, 2),
                }  # fmt: skip
                if as_json:
                    print(json.dumps(row), flush=True)
                else:
                    print(
                        f"{market:>10} | {agents:>6} | {n:>8,} | {steps:>5} | "
                        f"{compile_s:>9.2f} | {rate:>12,.0f} | {rate * agents:>13,.0f} | "
                        f"{reference[n] / rate:>7.1f}x",
                        flush=True,
                    )


def bench_numpy(episodes, params: EnvParams, min_seconds: float, seed: int = 0) -> float:
    """Table 2 (first part): steps/s of the per-episode NumPy loop over whole episodes."""
    env = NumpyExecutionEnv(episodes, params)
    rng = np.random.default_rng(seed)
    n_episodes, n_slots = env.price.shape
    steps = played = 0
    t0 = time.perf_counter()
    while played == 0 or time.perf_counter() - t0 < min_seconds:
        env.reset(played % n_episodes, 0, n_slots)
        done = False
        while not done:
            _, _, done, _ = env.step(rng.uniform())
            steps += 1
        played += 1
    seconds = time.perf_counter() - t0
    rate = steps / seconds
    print(
        f"\n2. NumpyExecutionEnv, one episode at a time: {played} episodes, {steps:,} steps "
        f"in {seconds:.2f} s = {rate:,.0f} steps/s"
    )
    return rate


def print_ratios(
    rates: dict[int, float], rates_no_reset: dict[int, float], numpy_rate: float
) -> None:
    """Table 2 (second part): vectorized/NumPy per number of episodes, and the target."""
    header = (
        f"{'episodes':>8} | {'env.step steps/s':>16} | {'NumPy steps/s':>13} | {'ratio':>8} | "
        f"{'no-reset ratio':>14}"
    )
    print(header)
    print("-" * len(header))
    for n, rate in rates.items():
        print(
            f"{n:>8,} | {rate:>16,.0f} | {numpy_rate:>13,.0f} | {rate / numpy_rate:>7.1f}x | "
            f"{rates_no_reset[n] / numpy_rate:>13.1f}x"
        )
    if TARGET_EPISODES in rates:
        ratio = rates[TARGET_EPISODES] / numpy_rate
        verdict = "met" if ratio >= TARGET_RATIO else "NOT met"
        print(
            f"target >= {TARGET_RATIO:.0f}x the NumPy loop at {TARGET_EPISODES:,} episodes "
            f"(env.step): {ratio:.1f}x, {verdict}"
        )
    else:
        print(f"target ({TARGET_RATIO:.0f}x at {TARGET_EPISODES:,} episodes): not measured")


def imagination_for(market) -> Imagination:
    """Mixed sampling with the library's ``mean_reversion`` program (validated first)."""
    code = next(d.code for d in library("imagination") if d.name == IMAGINATION_PROGRAM)
    verdict = validate(code, "imagination")
    if not verdict.ok:
        raise SystemExit(f"{IMAGINATION_PROGRAM} rejected: {verdict.reason}")
    return Imagination(
        imagine_fn=load_validated(code, "imagination"),
        ratio=0.5,
        stats=FeatureStats.from_train_stats(market.stats),
    )


def bench_ppo(
    env: ExecutionEnv,
    params: EnvParams,
    num_envs_list: tuple[int, ...],
    num_steps: int,
    imagination: Imagination,
) -> None:
    """Table 3: env steps/s of one jitted PPO update (rollout + GAE + gradient steps),
    without and with imagined days."""
    network = make_network()
    first = PPOConfig(num_envs=num_envs_list[0], num_steps=num_steps)
    print(
        f"\n3. PPO training (make_trainer, default network): one update = rollout of "
        f"{num_steps} steps + GAE + {first.update_epochs} epochs x "
        f"{first.num_minibatches} minibatches"
    )
    header = (
        f"{'num_envs':>8} | {'steps/update':>12} | {'compile s':>9} | {'update s':>8} | "
        f"{'env steps/s':>12} | {'imagined: update s':>18} | {'env steps/s':>12} | "
        f"{'ratio':>6}"
    )
    print(header)
    print("-" * len(header))
    for num_envs in num_envs_list:
        config = PPOConfig(
            num_envs=num_envs, num_steps=num_steps, total_timesteps=num_envs * num_steps
        )

        def trainer_for(data, config=config):
            return make_trainer(config, env, params.replace(data=data), network)

        plain = trainer_for(params.data)
        mixed = mix_imagined(trainer_for, params.data, imagination, config.num_updates)
        seconds = {}
        for name, trainer in (("plain", plain), ("mixed", mixed)):
            runner = jax.block_until_ready(jax.jit(trainer.init)(jax.random.key(0)))
            _, compile_s, update_s, _ = compile_and_time(trainer.update, (runner,), repeats=2)
            seconds[name] = (compile_s, update_s)
        steps = num_envs * num_steps
        compile_s, update_s = seconds["plain"]
        mixed_s = seconds["mixed"][1]
        print(
            f"{num_envs:>8,} | {steps:>12,} | {compile_s:>9.2f} | {update_s:>8.3f} | "
            f"{steps / update_s:>12,.0f} | {mixed_s:>18.3f} | {steps / mixed_s:>12,.0f} | "
            f"{update_s / mixed_s:>5.2f}x",
            flush=True,
        )
    print(
        f"(imagined: ratio {imagination.ratio}, program {IMAGINATION_PROGRAM}; ratio = "
        "imagined over plain env steps/s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fast smoke run")
    parser.add_argument(
        "--max-episodes",
        type=int,
        default=None,
        help=f"largest number of parallel episodes (default {EPISODE_COUNTS[-1]}, "
        f"--quick {QUICK_MAX_EPISODES})",
    )
    parser.add_argument("--steps", type=int, default=240, help="env steps per episode lane")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per measurement")
    parser.add_argument(
        "--numpy-seconds", type=float, default=None, help="minimum NumPy loop time (default 2)"
    )
    parser.add_argument("--no-ppo", action="store_true", help="skip the PPO table")
    parser.add_argument(
        "--markets",
        default=",".join(MARKETS),
        help="markets of table 4 (static, propagator, lob; '' skips it)",
    )
    parser.add_argument("--agents", default="1,2,8", help="agents per market in table 4")
    parser.add_argument(
        "--json",
        action="store_true",
        help="table 4 only, as JSON lines (market, agents, episodes, steps_per_s, ...)",
    )
    args = parser.parse_args()
    markets = [m for m in args.markets.split(",") if m]
    agents_list = [int(a) for a in args.agents.split(",")]
    market_counts = tuple(
        n for n in MARKET_EPISODES if n <= (args.max_episodes or MARKET_EPISODES[-1])
    )
    if args.json:
        bench_markets(markets, agents_list, market_counts, args.steps, args.repeats, True)
        return
    max_episodes = args.max_episodes or (QUICK_MAX_EPISODES if args.quick else EPISODE_COUNTS[-1])
    counts = tuple(n for n in EPISODE_COUNTS if n <= max_episodes)
    numpy_seconds = args.numpy_seconds or (1.0 if args.quick else 2.0)
    ppo_envs = QUICK_PPO_NUM_ENVS if args.quick else PPO_NUM_ENVS
    ppo_envs = tuple(n for n in ppo_envs if n <= max_episodes) or (min(ppo_envs),)

    market = load_market(sample_path("cn_1min"))
    episodes = market.train
    params = EnvParams(data=MarketData.from_episodes(episodes))
    env = ExecutionEnv()
    print(machine_description())
    print(
        f"data:    cn_1min training days, {episodes.price.shape[0]} symbol-days x "
        f"{episodes.price.shape[1]} slots; default EnvParams (lookback {params.lookback}, "
        f"observation size {env.observation_size(params)})"
    )

    rates, rates_no_reset = bench_vectorized(env, params, counts, args.steps, args.repeats)
    numpy_rate = bench_numpy(episodes, params, numpy_seconds)
    print_ratios(rates, rates_no_reset, numpy_rate)
    if not args.no_ppo:
        bench_ppo(env, params, ppo_envs, args.steps, imagination_for(market))
    if markets:
        bench_markets(markets, agents_list, market_counts, args.steps, args.repeats, False)


if __name__ == "__main__":
    main()
