"""Reward programs and the reward-term pool of the offline designer.

Every program returns a dict of named float32 terms whose sum is the reward
(:mod:`serl_jax.components.reward`), in bps times ``params.reward_scale`` like
:func:`serl_jax.envs.execution.default_reward`. Notation in the comments: ``Q`` the parent
order, ``fraction`` the step's fill as a share of ``Q``, ``PA`` a fill's price advantage
``side * (p_exec / benchmark - 1) * 1e4`` (bps; positive = better than the benchmark).
Candidate code cannot import ``serl_jax``, so every program computes from the
``EnvState`` / ``EnvParams`` fields directly, and guards every division so it stays finite
at zero quantity, zero fills and the last step.

The programs are text, never executed here; ``tests/llm/test_offline_designer.py`` runs
each through the full validator.
"""

from __future__ import annotations

from llm.designs import Design, RewardTerm

__all__ = ["REWARDS", "REWARD_TERMS"]

_PA_PENALTY = """\
# pa_penalty: the default reward as named terms (Qlib's PAPenalty): fill PA weighted by the
# fill's share of Q, a quadratic concentration penalty and a terminal-inventory penalty.
import jax.numpy as jnp

CONCENTRATION = 100.0  # bps for trading all of Q in one step (times fraction**2)
TERMINAL_BPS = 100.0  # bps per unit share of Q left unfilled at the end


def reward(prev_state, action, next_state, params):
    scale = params.reward_scale
    q = jnp.maximum(next_state.quantity, 1e-9)
    fraction = next_state.last_qty / q
    bench = jnp.maximum(next_state.benchmark_price, 1e-9)
    pa = params.side * (next_state.last_price / bench - 1.0) * 1e4
    done = next_state.time >= next_state.window_len
    leftover = next_state.inventory / q
    return {
        "pa": scale * pa * fraction,
        "concentration": -scale * CONCENTRATION * fraction**2,
        "terminal": jnp.where(done, -scale * TERMINAL_BPS * leftover, 0.0),
    }
"""

_CLIPPED_PA = """\
# clipped_pa: fill PA clipped to +-CLIP_BPS before weighting (robust to outlier minutes), with
# the default concentration and terminal penalties.
import jax.numpy as jnp

CLIP_BPS = 30.0  # largest PA credited or charged per fill, bps
CONCENTRATION = 100.0  # bps for trading all of Q in one step (times fraction**2)
TERMINAL_BPS = 100.0  # bps per unit share of Q left unfilled at the end


def reward(prev_state, action, next_state, params):
    scale = params.reward_scale
    q = jnp.maximum(next_state.quantity, 1e-9)
    fraction = next_state.last_qty / q
    bench = jnp.maximum(next_state.benchmark_price, 1e-9)
    pa = params.side * (next_state.last_price / bench - 1.0) * 1e4
    clipped = jnp.clip(pa, -CLIP_BPS, CLIP_BPS)
    done = next_state.time >= next_state.window_len
    leftover = next_state.inventory / q
    return {
        "pa": scale * clipped * fraction,
        "concentration": -scale * CONCENTRATION * fraction**2,
        "terminal": jnp.where(done, -scale * TERMINAL_BPS * leftover, 0.0),
    }
"""

_IMPLEMENTATION_SHORTFALL = """\
# implementation_shortfall: each fill against the arrival price (the last price before the
# window), the unfilled rest marked to the last market price at the end, plus concentration and
# terminal penalties.
import jax.numpy as jnp

CONCENTRATION = 100.0  # bps for trading all of Q in one step (times fraction**2)
TERMINAL_BPS = 100.0  # bps per unit share of Q left unfilled at the end


def reward(prev_state, action, next_state, params):
    scale = params.reward_scale
    q = jnp.maximum(next_state.quantity, 1e-9)
    fraction = next_state.last_qty / q
    arrival = jnp.maximum(next_state.arrival_price, 1e-9)
    shortfall = params.side * (next_state.last_price / arrival - 1.0) * 1e4
    mark = params.side * (next_state.last_market_price / arrival - 1.0) * 1e4
    done = next_state.time >= next_state.window_len
    leftover = next_state.inventory / q
    return {
        "shortfall": scale * shortfall * fraction,
        "opportunity": jnp.where(done, scale * mark * leftover, 0.0),
        "concentration": -scale * CONCENTRATION * fraction**2,
        "terminal": jnp.where(done, -scale * TERMINAL_BPS * leftover, 0.0),
    }
"""

_BLENDED_BENCHMARK = """\
# blended_benchmark: fill PA against the order benchmark plus ARRIVAL_WEIGHT times the fill's
# advantage over the arrival price, with concentration and terminal penalties.
import jax.numpy as jnp

ARRIVAL_WEIGHT = 0.3  # weight of the arrival-price advantage next to the benchmark PA
CONCENTRATION = 100.0  # bps for trading all of Q in one step (times fraction**2)
TERMINAL_BPS = 100.0  # bps per unit share of Q left unfilled at the end


def reward(prev_state, action, next_state, params):
    scale = params.reward_scale
    q = jnp.maximum(next_state.quantity, 1e-9)
    fraction = next_state.last_qty / q
    bench = jnp.maximum(next_state.benchmark_price, 1e-9)
    arrival_price = jnp.maximum(next_state.arrival_price, 1e-9)
    pa = params.side * (next_state.last_price / bench - 1.0) * 1e4
    vs_arrival = params.side * (next_state.last_price / arrival_price - 1.0) * 1e4
    done = next_state.time >= next_state.window_len
    leftover = next_state.inventory / q
    return {
        "pa": scale * pa * fraction,
        "arrival": scale * ARRIVAL_WEIGHT * vs_arrival * fraction,
        "concentration": -scale * CONCENTRATION * fraction**2,
        "terminal": jnp.where(done, -scale * TERMINAL_BPS * leftover, 0.0),
    }
"""

_SCHEDULE_TRACKING = """\
# schedule_tracking: fill PA plus a penalty on the squared gap between the inventory left and
# the linear (TWAP) schedule, averaged over the window, and the terminal penalty.
import jax.numpy as jnp

SCHEDULE_BPS = 50.0  # bps for a window spent 100% of Q off the linear schedule (squared gap)
TERMINAL_BPS = 100.0  # bps per unit share of Q left unfilled at the end


def reward(prev_state, action, next_state, params):
    scale = params.reward_scale
    q = jnp.maximum(next_state.quantity, 1e-9)
    fraction = next_state.last_qty / q
    bench = jnp.maximum(next_state.benchmark_price, 1e-9)
    pa = params.side * (next_state.last_price / bench - 1.0) * 1e4
    length = jnp.maximum(next_state.window_len, 1)
    leftover = next_state.inventory / q
    target = 1.0 - next_state.time / length  # share of Q the TWAP schedule still holds
    done = next_state.time >= next_state.window_len
    return {
        "pa": scale * pa * fraction,
        "schedule": -scale * SCHEDULE_BPS * (leftover - target) ** 2 / length,
        "terminal": jnp.where(done, -scale * TERMINAL_BPS * leftover, 0.0),
    }
"""

_PARTICIPATION_PENALTY = """\
# participation_penalty: fill PA plus a penalty on the participation rate (fill / the minute's
# market volume) above TARGET_RATE, and the terminal penalty.
import jax.numpy as jnp

TARGET_RATE = 0.1  # participation in the minute's volume that costs nothing extra
PARTICIPATION_BPS = 50.0  # bps per unit of excess participation, per share of Q traded
TERMINAL_BPS = 100.0  # bps per unit share of Q left unfilled at the end


def reward(prev_state, action, next_state, params):
    scale = params.reward_scale
    q = jnp.maximum(next_state.quantity, 1e-9)
    fraction = next_state.last_qty / q
    bench = jnp.maximum(next_state.benchmark_price, 1e-9)
    pa = params.side * (next_state.last_price / bench - 1.0) * 1e4
    last_slot = params.data.volume.shape[1] - 1
    slot = jnp.clip(next_state.start + next_state.time - 1, 0, last_slot)
    volume = params.data.volume[next_state.episode, slot]
    rate = jnp.minimum(next_state.last_qty / jnp.maximum(volume, 1e-9), 1.0)
    excess = jnp.maximum(rate - TARGET_RATE, 0.0)
    done = next_state.time >= next_state.window_len
    leftover = next_state.inventory / q
    return {
        "pa": scale * pa * fraction,
        "participation": -scale * PARTICIPATION_BPS * excess * fraction,
        "terminal": jnp.where(done, -scale * TERMINAL_BPS * leftover, 0.0),
    }
"""

_TERMINAL_URGENCY = """\
# terminal_urgency: fill PA, a running penalty on inventory held late in the window and a
# linear-plus-quadratic terminal-inventory penalty, with the concentration penalty.
import jax.numpy as jnp

URGENCY_BPS = 20.0  # bps for holding all of Q until the end (window average of held x elapsed)
TERMINAL_BPS = 100.0  # bps per unit share of Q left unfilled at the end
TERMINAL_QUAD_BPS = 200.0  # extra bps times (share of Q left)**2 at the end
CONCENTRATION = 100.0  # bps for trading all of Q in one step (times fraction**2)


def reward(prev_state, action, next_state, params):
    scale = params.reward_scale
    q = jnp.maximum(next_state.quantity, 1e-9)
    fraction = next_state.last_qty / q
    bench = jnp.maximum(next_state.benchmark_price, 1e-9)
    pa = params.side * (next_state.last_price / bench - 1.0) * 1e4
    length = jnp.maximum(next_state.window_len, 1)
    elapsed = next_state.time / length
    leftover = next_state.inventory / q
    done = next_state.time >= next_state.window_len
    penalty = TERMINAL_BPS * leftover + TERMINAL_QUAD_BPS * leftover**2
    return {
        "pa": scale * pa * fraction,
        "urgency": -scale * URGENCY_BPS * leftover * elapsed / length,
        "terminal": jnp.where(done, -scale * penalty, 0.0),
        "concentration": -scale * CONCENTRATION * fraction**2,
    }
"""

_INVENTORY_RISK = """\
# inventory_risk: fill PA plus a risk penalty on (share of Q held during the step x the minute's
# price move in bps)**2, with concentration and terminal penalties.
import jax.numpy as jnp

RISK_PER_BPS = 0.0005  # bps charged per squared bps of move at full inventory
CONCENTRATION = 100.0  # bps for trading all of Q in one step (times fraction**2)
TERMINAL_BPS = 100.0  # bps per unit share of Q left unfilled at the end


def reward(prev_state, action, next_state, params):
    scale = params.reward_scale
    q = jnp.maximum(next_state.quantity, 1e-9)
    fraction = next_state.last_qty / q
    bench = jnp.maximum(next_state.benchmark_price, 1e-9)
    pa = params.side * (next_state.last_price / bench - 1.0) * 1e4
    held = prev_state.inventory / jnp.maximum(prev_state.quantity, 1e-9)
    before = jnp.maximum(prev_state.last_market_price, 1e-9)
    move = (next_state.last_market_price / before - 1.0) * 1e4
    done = next_state.time >= next_state.window_len
    leftover = next_state.inventory / q
    return {
        "pa": scale * pa * fraction,
        "risk": -scale * RISK_PER_BPS * (held * move) ** 2,
        "concentration": -scale * CONCENTRATION * fraction**2,
        "terminal": jnp.where(done, -scale * TERMINAL_BPS * leftover, 0.0),
    }
"""

_VWAP_SLIPPAGE = """\
# vwap_slippage: PA split into timing (the minute's price vs the order VWAP) and execution cost
# (the fill vs the minute's price: spread and impact) weighted by COST_WEIGHT.
import jax.numpy as jnp

COST_WEIGHT = 1.5  # weight of the spread-and-impact cost relative to the timing gain
CONCENTRATION = 100.0  # bps for trading all of Q in one step (times fraction**2)
TERMINAL_BPS = 100.0  # bps per unit share of Q left unfilled at the end


def reward(prev_state, action, next_state, params):
    scale = params.reward_scale
    q = jnp.maximum(next_state.quantity, 1e-9)
    fraction = next_state.last_qty / q
    bench = jnp.maximum(next_state.benchmark_price, 1e-9)
    market = jnp.maximum(next_state.last_market_price, 1e-9)
    timing = params.side * (next_state.last_market_price / bench - 1.0) * 1e4
    cost = params.side * (next_state.last_price / market - 1.0) * 1e4
    done = next_state.time >= next_state.window_len
    leftover = next_state.inventory / q
    return {
        "timing": scale * timing * fraction,
        "cost": scale * COST_WEIGHT * cost * fraction,
        "concentration": -scale * CONCENTRATION * fraction**2,
        "terminal": jnp.where(done, -scale * TERMINAL_BPS * leftover, 0.0),
    }
"""

_LOSS_AVERSE_PA = """\
# loss_averse_pa: fill PA with fills worse than the benchmark charged LOSS_AVERSION times extra,
# plus concentration and terminal penalties.
import jax.numpy as jnp

LOSS_AVERSION = 0.5  # extra weight on negative PA
CONCENTRATION = 100.0  # bps for trading all of Q in one step (times fraction**2)
TERMINAL_BPS = 100.0  # bps per unit share of Q left unfilled at the end


def reward(prev_state, action, next_state, params):
    scale = params.reward_scale
    q = jnp.maximum(next_state.quantity, 1e-9)
    fraction = next_state.last_qty / q
    bench = jnp.maximum(next_state.benchmark_price, 1e-9)
    pa = params.side * (next_state.last_price / bench - 1.0) * 1e4
    done = next_state.time >= next_state.window_len
    leftover = next_state.inventory / q
    return {
        "pa": scale * pa * fraction,
        "loss": scale * LOSS_AVERSION * jnp.minimum(pa, 0.0) * fraction,
        "concentration": -scale * CONCENTRATION * fraction**2,
        "terminal": jnp.where(done, -scale * TERMINAL_BPS * leftover, 0.0),
    }
"""

_SPARSE_ORDER_PA = """\
# sparse_order_pa: the order's PA (average fill vs the benchmark, times the share of Q executed)
# paid once at the end, a small dense fill PA for shaping and the terminal penalty.
import jax.numpy as jnp

DENSE_WEIGHT = 0.2  # weight of the per-fill PA shaping term
TERMINAL_BPS = 100.0  # bps per unit share of Q left unfilled at the end


def reward(prev_state, action, next_state, params):
    scale = params.reward_scale
    q = jnp.maximum(next_state.quantity, 1e-9)
    fraction = next_state.last_qty / q
    bench = jnp.maximum(next_state.benchmark_price, 1e-9)
    pa = params.side * (next_state.last_price / bench - 1.0) * 1e4
    # side * (avg_price / bench - 1) * executed / Q, without dividing by `executed`
    order_pa = params.side * (next_state.notional / bench - next_state.executed) / q * 1e4
    done = next_state.time >= next_state.window_len
    leftover = next_state.inventory / q
    return {
        "order": jnp.where(done, scale * order_pa, 0.0),
        "shaping": scale * DENSE_WEIGHT * pa * fraction,
        "terminal": jnp.where(done, -scale * TERMINAL_BPS * leftover, 0.0),
    }
"""

_REPLAYED_SHORTFALL = """\
# replayed_shortfall: spread and impact only: each fill against the replayed price of its
# minute (the market without the agent), leaving out PA's timing term, which no policy moves
# in expectation when prices are a martingale but which carries most of the reward's
# variance; concentration and terminal penalties.
import jax.numpy as jnp

CONCENTRATION = 100.0  # bps for trading all of Q in one step (times fraction**2)
TERMINAL_BPS = 100.0  # bps per unit share of Q left unfilled at the end


def reward(prev_state, action, next_state, params):
    scale = params.reward_scale
    q = jnp.maximum(next_state.quantity, 1e-9)
    fraction = next_state.last_qty / q
    bench = jnp.maximum(next_state.benchmark_price, 1e-9)
    gap = next_state.last_price - next_state.last_replayed_price
    shortfall = params.side * gap / bench * 1e4
    done = next_state.time >= next_state.window_len
    leftover = next_state.inventory / q
    return {
        "shortfall": scale * shortfall * fraction,
        "concentration": -scale * CONCENTRATION * fraction**2,
        "terminal": jnp.where(done, -scale * TERMINAL_BPS * leftover, 0.0),
    }
"""

_VARIANCE_AVERSION = """\
# variance_aversion: Almgren-Chriss-style risk aversion: fill PA plus a penalty on the variance
# of the held inventory's value over the step (the symbol's per-minute volatility), and the
# terminal penalty.
import jax.numpy as jnp

VARIANCE_WEIGHT = 0.0005  # bps charged per squared bps of volatility at full inventory
TERMINAL_BPS = 100.0  # bps per unit share of Q left unfilled at the end


def reward(prev_state, action, next_state, params):
    scale = params.reward_scale
    q = jnp.maximum(next_state.quantity, 1e-9)
    fraction = next_state.last_qty / q
    bench = jnp.maximum(next_state.benchmark_price, 1e-9)
    pa = params.side * (next_state.last_price / bench - 1.0) * 1e4
    held = prev_state.inventory / jnp.maximum(prev_state.quantity, 1e-9)
    sigma_bps = params.data.sigma[next_state.episode] * 1e4
    done = next_state.time >= next_state.window_len
    leftover = next_state.inventory / q
    return {
        "pa": scale * pa * fraction,
        "variance": -scale * VARIANCE_WEIGHT * (held * sigma_bps) ** 2,
        "terminal": jnp.where(done, -scale * TERMINAL_BPS * leftover, 0.0),
    }
"""

REWARDS: tuple[Design, ...] = tuple(
    Design(code.split(":", 1)[0].lstrip("# "), "reward", code)
    for code in (
        _PA_PENALTY,
        _CLIPPED_PA,
        _IMPLEMENTATION_SHORTFALL,
        _BLENDED_BENCHMARK,
        _SCHEDULE_TRACKING,
        _PARTICIPATION_PENALTY,
        _TERMINAL_URGENCY,
        _INVENTORY_RISK,
        _VWAP_SLIPPAGE,
        _LOSS_AVERSE_PA,
        _SPARSE_ORDER_PA,
        _VARIANCE_AVERSION,
        _REPLAYED_SHORTFALL,
    )
)

_FRACTION = "next_state.last_qty / jnp.maximum(next_state.quantity, 1e-9)"
_LEFT = "next_state.inventory / jnp.maximum(next_state.quantity, 1e-9)"
_HELD = "prev_state.inventory / jnp.maximum(prev_state.quantity, 1e-9)"
_TERMINAL = ("TERMINAL_BPS", "100.0", "bps per unit share of Q left unfilled at the end")

REWARD_TERMS: tuple[RewardTerm, ...] = (
    RewardTerm(
        "concentration",
        "quadratic penalty on the fill's share of Q",
        (("CONCENTRATION", "100.0", "bps for trading all of Q in one step (times fraction**2)"),),
        (f"concentration_frac = {_FRACTION}",),
        "-params.reward_scale * CONCENTRATION * concentration_frac**2",
    ),
    RewardTerm(
        "terminal",
        "penalty on the share of Q left at the end",
        (_TERMINAL,),
        ("terminal_done = next_state.time >= next_state.window_len", f"terminal_left = {_LEFT}"),
        "jnp.where(terminal_done, -params.reward_scale * TERMINAL_BPS * terminal_left, 0.0)",
    ),
    RewardTerm(
        "schedule",
        "squared gap between the inventory left and the linear (TWAP) schedule",
        (("SCHEDULE_BPS", "50.0", "bps for a window spent 100% of Q off the linear schedule"),),
        (
            "schedule_len = jnp.maximum(next_state.window_len, 1)",
            f"schedule_left = {_LEFT}",
            "schedule_gap = schedule_left - (1.0 - next_state.time / schedule_len)",
        ),
        "-params.reward_scale * SCHEDULE_BPS * schedule_gap**2 / schedule_len",
    ),
    RewardTerm(
        "urgency",
        "running penalty on inventory held late in the window",
        (("URGENCY_BPS", "20.0", "bps for holding all of Q until the end"),),
        (
            "urgency_len = jnp.maximum(next_state.window_len, 1)",
            f"urgency_left = {_LEFT}",
        ),
        "-params.reward_scale * URGENCY_BPS * urgency_left * next_state.time / urgency_len**2",
    ),
    RewardTerm(
        "participation",
        "penalty on participation in the minute's volume above TARGET_RATE",
        (
            ("TARGET_RATE", "0.1", "participation in the minute's volume that costs nothing"),
            ("PARTICIPATION_BPS", "50.0", "bps per unit of excess participation, per share of Q"),
        ),
        (
            "participation_last = params.data.volume.shape[1] - 1",
            "participation_slot = jnp.clip(next_state.start + next_state.time - 1, 0, "
            "participation_last)",
            "participation_volume = params.data.volume[next_state.episode, participation_slot]",
            "participation_rate = jnp.minimum(next_state.last_qty / "
            "jnp.maximum(participation_volume, 1e-9), 1.0)",
            f"participation_frac = {_FRACTION}",
        ),
        "-params.reward_scale * PARTICIPATION_BPS * participation_frac * "
        "jnp.maximum(participation_rate - TARGET_RATE, 0.0)",
    ),
    RewardTerm(
        "risk",
        "penalty on (share of Q held x the minute's price move)**2",
        (("RISK_PER_BPS", "0.0005", "bps per squared bps of move at full inventory"),),
        (
            f"risk_held = {_HELD}",
            "risk_before = jnp.maximum(prev_state.last_market_price, 1e-9)",
            "risk_move = (next_state.last_market_price / risk_before - 1.0) * 1e4",
        ),
        "-params.reward_scale * RISK_PER_BPS * (risk_held * risk_move) ** 2",
    ),
    RewardTerm(
        "variance",
        "penalty on the held inventory's variance from the symbol's volatility",
        (("VARIANCE_WEIGHT", "0.0005", "bps per squared bps of volatility at full inventory"),),
        (
            f"variance_held = {_HELD}",
            "variance_sigma = params.data.sigma[next_state.episode] * 1e4",
        ),
        "-params.reward_scale * VARIANCE_WEIGHT * (variance_held * variance_sigma) ** 2",
    ),
    RewardTerm(
        "arrival",
        "the fill's advantage over the arrival price",
        (("ARRIVAL_WEIGHT", "0.3", "weight of the arrival-price advantage"),),
        (
            f"arrival_frac = {_FRACTION}",
            "arrival_ref = jnp.maximum(next_state.arrival_price, 1e-9)",
            "arrival_pa = params.side * (next_state.last_price / arrival_ref - 1.0) * 1e4",
        ),
        "params.reward_scale * ARRIVAL_WEIGHT * arrival_pa * arrival_frac",
    ),
    RewardTerm(
        "cost",
        "extra charge for the fill's spread and impact (fill vs the minute's price)",
        (("COST_WEIGHT", "0.5", "extra weight on the spread-and-impact cost"),),
        (
            f"cost_frac = {_FRACTION}",
            "cost_market = jnp.maximum(next_state.last_market_price, 1e-9)",
            "cost_bps = params.side * (next_state.last_price / cost_market - 1.0) * 1e4",
        ),
        "params.reward_scale * COST_WEIGHT * cost_bps * cost_frac",
    ),
    RewardTerm(
        "loss",
        "extra charge for fills worse than the benchmark",
        (("LOSS_AVERSION", "0.5", "extra weight on negative PA"),),
        (
            f"loss_frac = {_FRACTION}",
            "loss_bench = jnp.maximum(next_state.benchmark_price, 1e-9)",
            "loss_pa = params.side * (next_state.last_price / loss_bench - 1.0) * 1e4",
        ),
        "params.reward_scale * LOSS_AVERSION * jnp.minimum(loss_pa, 0.0) * loss_frac",
    ),
)
