"""Multi-agent env throughput against the number of agents N and of parallel markets.

Data and market as ``bench_dynamic.py``: the real A-share sample (``cn_1min``, training
days, 240 one-minute bars per day), the default ``EnvParams`` (whole-day windows, sell
orders, force liquidation) turned dynamic with the calibrated A-share market
(``configs/market/cn_1min.yaml``; market child orders, ``lob.engine=auto``).

For each number of parallel markets M and of agents N, one jitted function runs a
``lax.scan`` over ``--steps`` one-minute steps (default 20) of
``jax.vmap(MultiAgentExecutionEnv(N).step)`` over the M markets, with uniform [0, 1]
actions ``[M, N]`` drawn inside the scan, auto-reset included. Env steps/s counts market
minutes (M per scan step), agent steps/s counts agents' decisions (M x N per scan step).
The reference, measured in the same run on the same M and steps, is the single-agent
``DynamicExecutionEnv``: ``N=1 / single`` is the cost of the agent axis, and
``vs N=1`` the env steps/s of N agents relative to one. Every agent adds 2 messages per
minute to the book's ``2 + rounds x background`` and one resting-order slot to its
capacity, so a market with N agents costs a little more than one with a single agent.
Compile time (``jax.jit(f).lower(...).compile()``) is reported apart; the run time is the
best of ``--repeats`` runs after one warm-up. M x steps per call is capped at
``--max-lane-steps``.

Timings are wall-clock and depend on whatever else runs on the machine; nothing is
asserted. Run from the repository root::

    python benchmarks/bench_marl.py            # full (M = 1, 16, 256, 1024; N = 1, 2, 4, 8)
    python benchmarks/bench_marl.py --quick    # smoke run (M = 1, 16; N = 1, 2)
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp

# Run as a script (python benchmarks/bench_marl.py): its folder is on sys.path.
from bench_env import compile_and_time, machine_description

from serl_jax.data import load_market, sample_path
from serl_jax.envs.dynamic import DynamicEnvParams, DynamicExecutionEnv
from serl_jax.envs.execution import EnvParams
from serl_jax.envs.market_data import MarketData
from serl_jax.envs.multi_agent import MultiAgentExecutionEnv
from serl_jax.experiment import CALIBRATED_MARKETS
from serl_jax.lob.engine import resolve_engine
from serl_jax.market.params import load_market_params

MARKET_COUNTS = (1, 16, 256, 1024)
AGENT_COUNTS = (1, 2, 4, 8)
QUICK_MARKET_COUNTS, QUICK_AGENT_COUNTS = (1, 16), (1, 2)
MAX_LANE_STEPS = 1024 * 20


def make_rollout(env, num_steps: int, n_agents: int | None):
    """``rollout(state, key, params)``: ``num_steps`` vmapped steps with uniform actions
    (``[M]`` for the single-agent env, ``n_agents is None``; ``[M, N]`` otherwise),
    returning the states and the summed rewards so every output stays live."""
    step_batch = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def rollout(state, key, params):
        n_markets = jax.tree.leaves(state)[0].shape[0]
        shape = (n_markets,) if n_agents is None else (n_markets, n_agents)

        def one_step(carry, _):
            state, key, reward_sum = carry
            key, key_act, key_step = jax.random.split(key, 3)
            actions = jax.random.uniform(key_act, shape)
            step_keys = jax.random.split(key_step, n_markets)
            _, state, reward, _, _, _ = step_batch(step_keys, state, actions, params)
            return (state, key, reward_sum + reward), None

        carry = (state, key, jnp.zeros(shape, jnp.float32))
        carry, _ = jax.lax.scan(one_step, carry, None, num_steps)
        return carry

    return rollout


def time_env(env, params, n_markets: int, n_agents, num_steps: int, repeats: int):
    """``(market minutes/s, compile s)`` of ``num_steps`` steps in ``n_markets`` markets."""
    reset_batch = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))
    _, state = reset_batch(jax.random.split(jax.random.key(n_markets), n_markets), params)
    rollout = make_rollout(env, num_steps, n_agents)
    args = (state, jax.random.key(0), params)
    _, compile_s, best_s, _ = compile_and_time(rollout, args, repeats)
    return n_markets * num_steps / best_s, compile_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run")
    parser.add_argument("--steps", type=int, default=20, help="steps per timed call")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per cell")
    parser.add_argument("--max-lane-steps", type=int, default=MAX_LANE_STEPS)
    args = parser.parse_args()
    markets = QUICK_MARKET_COUNTS if args.quick else MARKET_COUNTS
    agents = QUICK_AGENT_COUNTS if args.quick else AGENT_COUNTS

    print(machine_description())
    split = load_market(sample_path("cn_1min"))
    static = EnvParams(data=MarketData.from_episodes(split.train))
    market = load_market_params(CALIBRATED_MARKETS / "cn_1min.yaml")
    engine = resolve_engine("auto")
    params = DynamicEnvParams.from_static(static, split.stats, market, lob_engine=engine)
    print(
        f"cn_1min training days ({static.data.num_episodes} symbol-days), calibrated CN "
        f"market, market child orders, order-book engine {engine}; best of {args.repeats} "
        f"runs; env steps = market minutes, agent steps = minutes x N"
    )
    header = (
        f"{'markets':>7} | {'steps':>5} | {'agents':>6} | {'env steps/s':>11} | "
        f"{'agent steps/s':>13} | {'compile s':>9} | {'N=1 / single':>12} | {'vs N=1':>6}"
    )
    print(header)
    print("-" * len(header))
    for n_markets in markets:
        steps = max(1, min(args.steps, args.max_lane_steps // n_markets))
        single, single_compile = time_env(
            DynamicExecutionEnv(), params, n_markets, None, steps, args.repeats
        )
        print(
            f"{n_markets:>7,} | {steps:>5} | {'single':>6} | {single:>11,.0f} | "
            f"{single:>13,.0f} | {single_compile:>9.2f} | {'':>12} | {'':>6}",
            flush=True,
        )
        one_agent = None
        for n_agents in agents:
            env = MultiAgentExecutionEnv(n_agents)
            rate, compile_s = time_env(env, params, n_markets, n_agents, steps, args.repeats)
            one_agent = rate if n_agents == 1 else one_agent
            ratio = f"{rate / single:>11.2f}x" if n_agents == 1 else f"{'':>12}"
            vs_one = f"{rate / one_agent:>5.2f}x" if one_agent else f"{'':>6}"
            print(
                f"{n_markets:>7,} | {steps:>5} | {n_agents:>6} | {rate:>11,.0f} | "
                f"{rate * n_agents:>13,.0f} | {compile_s:>9.2f} | {ratio} | {vs_one}",
                flush=True,
            )


if __name__ == "__main__":
    main()
