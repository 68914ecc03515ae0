"""Dynamic-market env throughput against the static env, and the impact that emerges in it.

All runs use the real A-share sample (``cn_1min``, training days: 100 symbol-days of 240
one-minute bars), the default ``EnvParams`` (whole-day window, sell order, force
liquidation at the last slot) and its dynamic twin
``DynamicEnvParams.from_static(params, stats, market)`` with the calibrated A-share
market (``configs/market/cn_1min.yaml``; market child orders). Two tables:

1. Throughput: for each number of parallel markets, one jitted function runs a
   ``lax.scan`` over ``--steps`` one-minute steps (default 60) of ``jax.vmap(env.step)``
   with uniform [0, 1] actions drawn inside the scan, auto-reset included (gymnax
   ``step``, as in training and in ``bench_env.py``), for the dynamic env on each
   order-book engine (``vmap`` and ``batched``, :mod:`serl_jax.lob.engine`; the row says
   which one ``lob.engine=auto`` picks here) and, on the same lanes and steps, the static
   env. Compile time (``jax.jit(f).lower(...).compile()``) is
   reported separately from the run time, which is the best of ``--repeats`` runs after
   one warm-up run. Book messages/s = dynamic steps/s x messages per step, where a step
   sends 2 agent messages (cancel of the resting child order, new child order) and
   ``rounds_per_minute x MarketParams.messages_per_round()`` background messages. Slots
   without an order (no-ops) count as messages: the book processes every slot. Lanes x
   steps per call are capped at ``--max-lane-steps`` (fewer steps for the biggest batches,
   so one call stays in the tens of seconds on 2 CPU cores).
2. Emergent impact: ``--impact-markets`` markets (episode ``i mod 100``, whole-day window,
   ``force_liquidation=False``), each run once without an order and once per size
   ``x`` with a sell market order of ``round(x V)`` shares at the first step (``V`` the
   symbol's mean minute volume, ``MarketData.mean_minute_volume``; the order is the whole
   inventory, action 1), then no further orders. Every run of a market uses the same
   per-minute keys, so the difference of the mids (``state.market.reference``) between
   the order run and the no-order run is the order's impact: right after the minute
   (immediate) and 10 and 30 minutes later (what persists). Impacts are in bps of the
   no-order mid, positive = against the seller; the log-log slope of the immediate impact
   against ``x`` measures concavity (slope < 1: concave).

Timings are wall-clock and depend on whatever else runs on the machine; nothing is
asserted. Run from the repository root::

    python benchmarks/bench_dynamic.py            # full (several minutes on 2 CPU cores)
    python benchmarks/bench_dynamic.py --quick    # smoke run (1, 16, 256 markets, 20 steps)
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

# Run as a script (python benchmarks/bench_dynamic.py): its folder is on sys.path.
from bench_env import compile_and_time, machine_description, make_rollout

from serl_jax.data import load_market, sample_path
from serl_jax.envs.dynamic import DynamicEnvParams, DynamicExecutionEnv
from serl_jax.envs.execution import EnvParams, ExecutionEnv
from serl_jax.envs.market_data import MarketData
from serl_jax.experiment import CALIBRATED_MARKETS
from serl_jax.lob.engine import resolve_engine
from serl_jax.market.params import MarketParams, load_market_params

MARKET_COUNTS = (1, 16, 256, 1024, 4096)
QUICK_MARKET_COUNTS = (1, 16, 256)
QUICK_STEPS = 20
MAX_LANE_STEPS = 4096 * 20
IMPACT_SIZES = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0)
IMPACT_LAGS = (0, 10, 30)  # minutes after the order's minute


def messages_per_step(market: MarketParams) -> int:
    """Book messages per one-minute step: 2 agent messages plus the background rounds."""
    return 2 + market.rounds_per_minute * market.messages_per_round()


def time_env(env, params, n: int, num_steps: int, repeats: int) -> tuple[float, float]:
    """``(steps/s, compile s)`` of ``num_steps`` auto-resetting steps in ``n`` lanes."""
    reset_batch = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))
    obs, state = reset_batch(jax.random.split(jax.random.key(n), n), params)
    args = (obs, state, jax.random.key(0), params)
    _, compile_s, best_s, _ = compile_and_time(make_rollout(env.step, num_steps), args, repeats)
    return n * num_steps / best_s, compile_s


def bench_throughput(
    static_params: EnvParams,
    dynamic_params: DynamicEnvParams,
    counts: tuple[int, ...],
    num_steps: int,
    repeats: int,
    max_lane_steps: int,
) -> None:
    """Table 1: dynamic and static env steps/s per number of parallel markets."""
    market = dynamic_params.market
    per_step = messages_per_step(market)
    print(
        f"\n1. Throughput: lax.scan of vmap(env.step) (auto-reset), random actions; "
        f"{per_step} book messages per dynamic step = 2 agent + {market.rounds_per_minute} "
        f"rounds x {market.messages_per_round()} background (no-op slots count: the book "
        f"processes them)"
    )
    engine = resolve_engine("auto")
    print(
        f"both order-book engines (serl_jax.lob.engine) on the same lanes; lob.engine=auto "
        f"picks {engine} on this backend ({jax.default_backend()})"
    )
    header = (
        f"{'markets':>7} | {'steps':>5} | {'vmap steps/s':>12} | {'compile s':>9} | "
        f"{'batched steps/s':>15} | {'compile s':>9} | {'batched/vmap':>12} | "
        f"{'auto msg/s':>12} | {'static steps/s':>14} | {'static/auto':>11}"
    )
    print(header)
    print("-" * len(header))
    static_env, dynamic_env = ExecutionEnv(), DynamicExecutionEnv()
    for n in counts:
        steps = max(1, min(num_steps, max_lane_steps // n))
        n_repeats = max(1, repeats - 1) if n * steps >= max_lane_steps else repeats
        rates = {}
        for name in ("vmap", "batched"):
            params = dynamic_params.replace(lob_engine=name)
            rates[name] = time_env(dynamic_env, params, n, steps, n_repeats)
        static_rate, _ = time_env(static_env, static_params, n, steps, n_repeats)
        (vmap_rate, vmap_compile), (batched_rate, batched_compile) = rates.values()
        auto_rate = rates[engine][0]
        print(
            f"{n:>7,} | {steps:>5} | {vmap_rate:>12,.0f} | {vmap_compile:>9.2f} | "
            f"{batched_rate:>15,.0f} | {batched_compile:>9.2f} | "
            f"{batched_rate / vmap_rate:>11.2f}x | {auto_rate * per_step:>12,.0f} | "
            f"{static_rate:>14,.0f} | {static_rate / auto_rate:>10.0f}x",
            flush=True,
        )


def impact_mids(
    env: DynamicExecutionEnv,
    params: DynamicEnvParams,
    n_markets: int,
    sizes: tuple[float, ...],
    num_steps: int,
    key: jax.Array,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Mids after every minute of ``n_markets`` markets with and without a first order.

    Lane ``(j, i)``: market ``i`` (episode ``i mod E``, whole day, key ``keys[i]``) with a
    sell of ``round(sizes[j - 1] * V_i)`` shares at step 0 (``j = 0``: no order).

    Returns:
        ``(mids float[num_steps, J + 1, n], start_mid float[n], shares float[J, n],
        filled float[J, n])``: mids in ticks, the order sizes and the shares filled.
    """
    data = params.data
    n_slots = data.num_slots
    episode = jnp.arange(n_markets, dtype=jnp.int32) % data.num_episodes
    volume_unit = data.mean_minute_volume[episode]
    x = jnp.asarray((0.0, *sizes), jnp.float32)
    shares = jnp.round(x[:, None] * volume_unit[None, :])  # [J + 1, n]
    action = (x > 0).astype(jnp.float32)[:, None] * jnp.ones((1, n_markets))
    market_keys = jax.random.split(key, n_markets)

    def init(ep, qty):
        state = env.init_state(params, ep, jnp.int32(0), jnp.int32(n_slots))
        return state.replace(quantity=qty, inventory=qty)

    def lane_run(ep, qty, first_action, market_key):
        state = init(ep, qty)

        def one_step(state, t):
            act = jnp.where(t == 0, first_action, 0.0)
            _, state, _, _, _ = env.step_env(jax.random.fold_in(market_key, t), state, act, params)
            return state, (state.market.reference, state.executed)

        _, (mids, executed) = jax.lax.scan(one_step, state, jnp.arange(num_steps))
        return mids, executed[0], init(ep, qty).market.reference

    per_market = jax.vmap(lane_run, in_axes=(0, 0, 0, 0))
    per_size = jax.vmap(per_market, in_axes=(None, 0, 0, None))
    mids, filled, start_mid = jax.jit(per_size)(episode, shares, action, market_keys)
    mids = np.asarray(mids).transpose(2, 0, 1)  # [steps, J + 1, n]
    return mids, np.asarray(start_mid[0]), np.asarray(shares[1:]), np.asarray(filled[1:])


def bench_impact(
    dynamic_params: DynamicEnvParams, n_markets: int, sizes: tuple[float, ...], seed: int = 0
) -> None:
    """Table 2: mean mid impact (bps) of one sell market order, immediate and later."""
    env = DynamicExecutionEnv()
    params = dynamic_params.replace(force_liquidation=False)
    num_steps = max(IMPACT_LAGS) + 1
    t0 = time.perf_counter()
    mids, start_mid, shares, filled = impact_mids(
        env, params, n_markets, sizes, num_steps, jax.random.key(seed)
    )
    seconds = time.perf_counter() - t0
    side = float(params.side)
    # impact[lag, j, i]: the order run's mid below the no-order run's (for a sell), bps
    impact = side * (mids[:, :1] - mids[:, 1:]) / mids[:, :1] * 1e4
    print(
        f"\n2. Emergent impact: {n_markets} markets (episode i mod "
        f"{params.data.num_episodes}, same keys with and without the order), one sell market "
        f"order of x V shares at the first minute, then none; mid difference vs the "
        f"no-order run, bps (+ = against the seller), mean +- standard error over markets "
        f"({seconds:.1f} s incl. compile)"
    )
    header = (
        f"{'x (of V)':>8} | {'shares':>8} | {'filled':>6} | {'immediate bps':>16} | "
        f"{'+10 min bps':>16} | {'+30 min bps':>16} | {'+30/immediate':>13}"
    )
    print(header)
    print("-" * len(header))
    immediate = []
    for j, x in enumerate(sizes):
        cells = []
        for lag in IMPACT_LAGS:
            values = impact[lag, j]
            mean = values.mean()
            sem = values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else 0.0
            cells.append((mean, sem))
        immediate.append(cells[0][0])
        fill = filled[j].sum() / max(shares[j].sum(), 1.0)
        ratio = cells[-1][0] / cells[0][0] if cells[0][0] != 0 else float("nan")
        print(
            f"{x:>8g} | {shares[j].mean():>8,.0f} | {fill:>6.0%} | "
            + " | ".join(f"{m:>7.2f} +- {s:>5.2f}" for m, s in cells)
            + f" | {ratio:>13.2f}"
        )
    immediate = np.asarray(immediate)
    episode = np.arange(n_markets) % params.data.num_episodes
    volume_unit = float(np.asarray(params.data.mean_minute_volume)[episode].mean())
    fill = filled.sum(1) / np.maximum(shares.sum(1), 1.0)
    log_x = np.log(np.asarray(sizes))
    fits = []
    for name, keep in (
        ("all sizes", immediate > 0),
        ("sizes filled in full", (immediate > 0) & (fill >= 0.999)),
    ):
        if keep.sum() >= 2:
            slope = np.polyfit(log_x[keep], np.log(immediate[keep]), 1)[0]
            fits.append(f"{slope:.2f} over {name} ({'concave' if slope < 1 else 'not concave'})")
    print(
        "log-log slope of the immediate impact vs size: "
        + ("; ".join(fits) if fits else "fewer than two positive impacts, not fitted")
        + f"; square-root law 0.5, linear 1. Mean start mid {start_mid.mean():,.0f} ticks "
        f"(1 tick = {1e4 / start_mid.mean():.1f} bps), mean V {volume_unit:,.0f} "
        "shares"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fast smoke run")
    parser.add_argument(
        "--markets",
        type=str,
        default=None,
        help="comma-separated numbers of parallel markets (default "
        f"{','.join(map(str, MARKET_COUNTS))}; --quick {','.join(map(str, QUICK_MARKET_COUNTS))})",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help=f"env steps per call (default 60; --quick {QUICK_STEPS})",
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per measurement")
    parser.add_argument(
        "--max-lane-steps",
        type=int,
        default=MAX_LANE_STEPS,
        help=f"most markets x steps per call; bigger batches run fewer steps (default "
        f"{MAX_LANE_STEPS:,})",
    )
    parser.add_argument(
        "--impact-markets",
        type=int,
        default=None,
        help="markets of the impact table (default 256; --quick 64)",
    )
    parser.add_argument("--no-impact", action="store_true", help="skip the impact table")
    args = parser.parse_args()
    if args.markets:
        counts = tuple(int(n) for n in args.markets.split(","))
    else:
        counts = QUICK_MARKET_COUNTS if args.quick else MARKET_COUNTS
    num_steps = args.steps or (QUICK_STEPS if args.quick else 60)
    impact_markets = args.impact_markets or (64 if args.quick else 256)

    splits = load_market(sample_path("cn_1min"))
    episodes = splits.train
    static_params = EnvParams(data=MarketData.from_episodes(episodes))
    market = load_market_params(CALIBRATED_MARKETS / "cn_1min.yaml")
    dynamic_params = DynamicEnvParams.from_static(static_params, splits.stats, market)
    print(machine_description())
    print(f"load average {os.getloadavg()[0]:.2f}")
    print(
        f"data:    cn_1min training days, {episodes.price.shape[0]} symbol-days x "
        f"{episodes.price.shape[1]} slots; default EnvParams, calibrated cn_1min market "
        f"({dynamic_params.market.rounds_per_minute} rounds/minute, book capacity "
        f"{dynamic_params.market.capacity()}/side)"
    )
    t0 = time.perf_counter()
    bench_throughput(
        static_params, dynamic_params, counts, num_steps, args.repeats, args.max_lane_steps
    )
    if not args.no_impact:
        bench_impact(dynamic_params, impact_markets, IMPACT_SIZES)
    print(f"\ntotal {time.perf_counter() - t0:.0f} s; load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
