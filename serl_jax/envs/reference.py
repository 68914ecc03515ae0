"""Plain-NumPy twin of :class:`serl_jax.envs.execution.ExecutionEnv`, one episode at a time.

The test oracle (tests compare the JAX env with it step by step, as gymnax compares its
environments with their Gymnasium twins) and the per-episode loop the benchmark measures
the vectorized env against. Written independently in float64 Python scalars, from the
semantics stated in ``serl_jax/envs/execution.py``; it shares no code with it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class ReferenceState:
    """Mutable per-episode state, float64 (field meanings as in ``EnvState``)."""

    time: int
    episode: int
    start: int
    window_len: int
    quantity: float
    inventory: float
    executed: float
    notional: float
    benchmark_price: float
    arrival_price: float
    pace: float = 0.0  # shares a minute in the current decision interval


class NumpyExecutionEnv:
    """The execution environment for one episode, in NumPy and Python floats.

    Args:
        data: any object with numpy-convertible ``price``, ``volume``, ``features``,
            ``volume_profile``, ``expected_day_volume``, ``mean_minute_volume`` arrays
            (an ``EpisodeSet`` or a ``MarketData``), shapes as in ``MarketData``.
        params: an ``EnvParams`` (its ``data`` field is ignored) or any object with the
            same scalar attributes.
    """

    def __init__(self, data, params):
        self.price = np.asarray(data.price, np.float64)
        self.volume = np.asarray(data.volume, np.float64)
        self.features = np.asarray(data.features, np.float64)
        self.profile = np.asarray(data.volume_profile, np.float64)
        self.day_volume = np.asarray(data.expected_day_volume, np.float64)
        self.minute_volume = np.asarray(data.mean_minute_volume, np.float64)
        self.p = params
        self.state: ReferenceState | None = None

    def reset(
        self, episode: int, start: int, window_len: int, multiplier: float = 1.0
    ) -> np.ndarray:
        """Starts an order; returns the first observation ``[6 + lookback * F]``."""
        p = self.p
        end = start + window_len
        prices = self.price[episode, start:end]
        volumes = self.volume[episode, start:end]
        twap = prices.mean()
        if p.benchmark == "twap" or volumes.sum() <= 0:
            benchmark = twap
        else:
            benchmark = float((prices * volumes).sum() / volumes.sum())
        expected = self.day_volume[episode] * self.profile[episode, start:end].sum()
        quantity = float(p.order_fraction) * multiplier * expected
        arrival = self.price[episode, max(start - 1, 0)]
        self.state = ReferenceState(
            0, episode, start, window_len, quantity, quantity, 0.0, 0.0, float(benchmark), arrival
        )
        return self.observation()

    def step(self, action: float) -> tuple[np.ndarray, float, bool, dict]:
        """Trades ``action`` (fraction of remaining inventory); returns obs, reward, done, info.

        With ``params.step_minutes`` = n > 1 the action is read at minutes 0, n, 2n, ... of
        the window only; it sets the interval's child orders to ``action * I_t`` shares a
        minute, which the other minutes of the interval repeat (at most the inventory)."""
        p, s = self.p, self.state
        slot = s.start + s.time
        price = self.price[s.episode, slot]
        volume = self.volume[s.episode, slot]
        fraction = min(max(float(action), 0.0), 1.0)
        last = s.time + 1 >= s.window_len
        forced = bool(p.force_liquidation) and last
        if forced:
            qty = s.inventory
            liquidity = max(volume, self.minute_volume[s.episode])
        else:
            interval = int(getattr(p, "step_minutes", 1))
            if interval == 1:
                desired = fraction * s.inventory
            else:
                if s.time % interval == 0:
                    s.pace = fraction * s.inventory
                desired = min(s.pace, s.inventory)
            if p.child_quantity == "participation":
                forecast = self.volume_forecast(s.episode, slot)
                if forecast > 0:
                    desired = min(desired / forecast * volume, s.inventory)
            qty = min(desired, float(p.participation_cap) * volume)
            liquidity = volume
        participation = qty / liquidity if liquidity > 0 else 0.0
        cost = float(p.half_spread_bps) + float(p.impact_eta_bps) * participation ** float(
            p.impact_exponent
        )
        if forced:
            cost += float(p.force_penalty_bps)
        cost = min(cost, float(p.max_cost_bps))
        side = float(p.side)
        exec_price = price * (1.0 - side * cost * 1e-4)
        s.inventory = 0.0 if forced else s.inventory - qty
        s.executed += qty
        s.notional += qty * exec_price
        s.time += 1
        done = s.time >= s.window_len

        frac = qty / s.quantity if s.quantity > 0 else 0.0
        fill_price = exec_price if qty > 0 else price
        pa_step = side * (fill_price / s.benchmark_price - 1.0) * 1e4
        reward = pa_step * frac - float(p.concentration_penalty) * frac**2
        if done:
            leftover = s.inventory / s.quantity if s.quantity > 0 else 0.0
            reward -= float(p.terminal_penalty_bps) * leftover
        info = {"exec_qty": qty, "exec_price": exec_price, "order_pa": self.order_pa()}
        return self.observation(), float(p.reward_scale) * reward, done, info

    def volume_forecast(self, episode: int, slot: int, lookback: int = 60) -> float:
        """Participation child orders' forecast of minute ``slot``'s volume: the training
        profile times the expected day volume, scaled by the day's observed over expected
        volume in the ``lookback`` minutes before (clipped to [0.2, 5]; 1 before any bar)."""
        seen = due = 0.0
        for past in range(max(slot - lookback, 0), slot):
            seen += self.volume[episode, past]
            due += self.day_volume[episode] * self.profile[episode, past]
        surprise = min(max(seen / due, 0.2), 5.0) if due > 0 else 1.0
        return self.day_volume[episode] * self.profile[episode, slot] * surprise

    def order_pa(self) -> float:
        """Order PA so far in bps; 0 when nothing executed."""
        s = self.state
        if s.executed <= 0:
            return 0.0
        return float(self.p.side) * (s.notional / s.executed / s.benchmark_price - 1.0) * 1e4

    def observation(self) -> np.ndarray:
        """``[(T-t)/T, log(T-t), I_t/Q, move since arrival %, expected volume share left,
        this minute's share of it, lookback-slot features]``."""
        s, lookback = self.state, int(self.p.lookback)
        slot = s.start + s.time
        n_slots = self.price.shape[1]
        time_left = (s.window_len - s.time) / s.window_len
        inventory_left = s.inventory / s.quantity if s.quantity > 0 else 0.0
        if slot > 0:
            last_seen = self.price[s.episode, min(slot - 1, n_slots - 1)]
            move = (last_seen / s.arrival_price - 1.0) * 100.0
        else:
            move = 0.0
        rows = []
        for past in range(slot - lookback, slot):
            if past < 0:
                rows.append(np.zeros(self.features.shape[2]))
            else:
                rows.append(self.features[s.episode, min(past, n_slots - 1)])
        steps_left = max(s.window_len - s.time, 1)
        profile = self.profile[s.episode]
        end = min(s.start + s.window_len, n_slots)
        total = profile[s.start : end].sum()
        left = profile[min(slot, end) : end].sum()
        profile_left = left / total if total > 0 else time_left
        current = profile[min(slot, n_slots - 1)]
        profile_pace = min(current / left, 1.0) if left > 0 else 1.0 / steps_left
        private = [time_left, np.log(steps_left), inventory_left, move, profile_left, profile_pace]
        return np.concatenate([private, np.concatenate(rows)])
