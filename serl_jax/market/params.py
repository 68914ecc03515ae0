"""Parameters of the dynamic market's background agent populations.

Every size is a fraction of the symbol's training mean volume per minute ``V`` (the
:class:`serl_jax.data.TrainStats` ``mean_minute_volume``, in the data's volume unit), and
every price distance is in ticks, so one parameter set serves all symbols of a market.
Probabilities are per trading round; a minute has ``rounds_per_minute`` rounds.

The structure follows ABIDES's reference market (Byrd et al. 2020, "ABIDES: Towards
High-Fidelity Multi-Agent Market Simulation"): market makers quoting a ladder around the
mid, noise traders, informed ("value") traders who see a fundamental price first, and
optional momentum traders. Here the fundamental is the replayed real price path of the
episode's day, so the simulated mid follows the real day unless orders push it away.

Order flow carries information. The informed traders cannot tell who sends a market
order, so, as market makers in Kyle (1985) and Glosten-Milgrom (1985), they read net
aggressive flow as news: their value is the real price times ``exp(I)``, with
``I = flow_impact_bps * sign(E) |E| ** flow_impact_exponent`` (bps) and ``E`` their memory
of net market buying by the other traders (noise, momentum, execution agents) in ``V``,
which decays with half-life ``flow_impact_halflife_minutes`` (the resilience of
Obizhaeva and Wang (2013)). Exponent 1 is Kyle's linear response; 0.5 gives the
square-root law of metaorder impact. Without
it the informed traders would pull the mid back to the real price within a round, so a
sold parent order would leave no lasting mark; with it, the response of the mid to order
flow is calibrated to the real one (``flow_impact_per_sigma`` in
:mod:`serl_jax.market.statistics`, measured on the LOBSTER day).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np
import yaml
from flax import struct

from serl_jax.market.propagator import power_law_exponentials

UNKNOWN_OWNER = 0
MARKET_MAKER = 1
NOISE_TRADER = 2
INFORMED_TRADER = 3
MOMENTUM_TRADER = 4
FIRST_AGENT_OWNER = 5
"""Owner ids: background populations 1-4; the learning agents are 5, 6, ... (the
execution agent of :class:`~serl_jax.envs.dynamic.DynamicExecutionEnv` is 5)."""

OWNER_NAMES = ("unknown", "market_maker", "noise", "informed", "momentum")

AGENT_KERNEL_EXPONENTIALS = 10
"""K, the exponentials of the agents' power-law flow memory (``agent_flow_beta`` > 0):
the propagator market's count, a relative error below 1e-3 for beta in [0.2, 0.7]."""

AGENT_ORDER_ID = 1 << 30
"""Order id of agent ``i``'s passive child order is ``AGENT_ORDER_ID + i`` (above every
id the background populations use)."""


@struct.dataclass
class MarketParams:
    """Background-agent parameters (float leaves; the ``int`` fields are static shapes).

    Attributes:
        tick_size: currency per tick (0.01 for the shipped CN and US markets).
        rounds_per_minute: trading rounds per one-minute step (static).
        mm_levels: rungs per side of the market makers' ladder (static).
        mm_refresh_rungs: outer rungs (all but the best) the market makers refresh every
            round, in rotation (static; in ``[1, max(1, mm_levels - 1)]``): 1 (default)
            brings a walked-through outer rung back once every ``mm_levels - 1`` rounds,
            ``mm_levels - 1`` re-posts the whole ladder around the mid every round, so a
            book that a child order walked through is as deep again one round later.
        mm_half_spread_ticks: distance from the market makers' reference price to their
            best quotes, ticks (0.5 quotes a one-tick spread around a half-tick mid).
        mm_level_spacing_ticks: distance between rungs, ticks.
        mm_size: size of the best rung, fraction of ``V``.
        mm_size_growth: rung ``k`` (0 = best) holds ``mm_size * (1 + k) ** growth``; with
            growth 1 the depth within ``d`` ticks grows as ``d**2``, so the price move of a
            market order of size ``q`` grows as ``sqrt(q)`` (a concave impact curve).
        mm_skew_ticks: shift of the market makers' reference price per ``V`` of their
            inventory, ticks (long inventory lowers their quotes).
        noise_slots: noise-trader order slots per round (static).
        noise_orders: most resting noise limit orders (static): the oldest is cancelled
            when a new one arrives, so the book never overflows.
        noise_market_prob: probability that a slot sends a market order, scaled by the
            symbol's intraday volume profile (``profile[slot] * T``, mean 1).
        noise_limit_prob: probability that a slot sends a limit order (same scaling).
        noise_cancel_prob: probability that a slot without a new order cancels the
            oldest resting noise order.
        noise_size: scale of noise order sizes, fraction of ``V``; sizes are
            ``noise_size * U ** (-1 / noise_tail)`` (Pareto), capped at ``noise_max_size``.
        noise_tail: Pareto tail exponent of noise sizes (smaller = heavier tail).
        noise_max_size: cap of noise order sizes, fraction of ``V``.
        noise_offset_ticks: mean distance of noise limit orders behind the best quote of
            their side, ticks (geometric; 0 joins or improves the best quote).
        informed_slots: informed-trader slots per round (static).
        informed_prob: probability per round that an informed slot trades.
        informed_threshold_ticks: smallest gap between fundamental and mid that they act on.
        informed_size: size of an informed limit order at the fundamental, fraction of ``V``.
        flow_impact_bps: shift of the informed traders' value when their memory of the
            other traders' net aggressive buying (selling: negative) is ``V`` shares, bps.
        flow_impact_exponent: ``delta`` of that response, ``sign(E) |E| ** delta`` of the
            remembered flow ``E`` in ``V`` (in (0, 1]: 1 linear, Kyle 1985; 0.5 the
            square-root law, :func:`serl_jax.market.simulator.flow_response`). The default
            0.5: with 1 the calibrated book's metaorder impact grew as ``(Q/V)^0.73`` on
            the cn sample, with 0.5 as ``(Q/V)^0.51`` (``benchmarks/bench_impact.py``).
        flow_impact_halflife_minutes: half-life of the remembered flow, minutes (> 0).
        agent_flow_memory: static; 0 (default): the informed traders remember the
            execution agents' net aggressive flow together with the background's, one
            memory ``E``; 1: in a second memory ``E_a`` of the agents' flow alone (same
            half-life), their value shifting by ``flow_response(E) +
            agent_flow_impact_bps * 1e-4 * sign(E_a) |E_a| ** delta``. With one memory
            the response is concave in the *total* flow, so a small metaorder's
            increment on top of the background's own flow is nearly linear; with two it
            is concave in the metaorder's own flow whatever the background does, the
            square-root law of Tóth et al. (2011) as a state-dependent response to the
            metaorder's decaying volume, as in Alfonsi, Fruth & Schied (2010, "Optimal
            execution strategies in limit order books with general shape functions",
            Quant. Finance 10), whose model admits no price manipulation.
        agent_flow_impact_bps: the agents' memory's response at ``E_a`` = ``V`` shares,
            bps (``agent_flow_memory`` 1 only).
        agent_flow_beta: static; the agents' memory's kernel (``agent_flow_memory`` 1
            only). 0 (default): one exponential with the background's half-life. ``> 0``:
            the power law ``G(tau) = (1 + tau / agent_flow_tau0_minutes) ** -beta`` as a
            sum of :data:`AGENT_KERNEL_EXPONENTIALS` exponentials
            (:func:`~serl_jax.market.propagator.power_law_exponentials`), the slow decay
            of impact measured by Bouchaud, Gefen, Potters & Wyart (2004): most of a
            metaorder's response fades within ``tau0``, the rest over hours, so a
            day-long order's impact keeps growing while a finished one relaxes towards
            about 2/3 of its peak, as the propagator market's kernel does. In ``(0, 2]``.
        agent_flow_tau0_minutes: static; the power law's ``tau0``, minutes (> 0).
        trailing_volume_unit: static; 0 (default): the volume unit ``V`` that every
            population's sizes are fractions of is the symbol's training mean volume per
            minute (``MarketData.mean_minute_volume``); 1: its mean over the trading days
            before the episode's (``MarketData.trailing_minute_volume``), so the book is
            as deep as the symbol's recent volume, known before the day: on days that
            trade half the training volume it is half as deep.
        momentum_slots: momentum-trader slots per round (static; 0 disables them).
        momentum_prob: probability per round that a momentum slot trades when signalled.
        momentum_fast, momentum_slow: per-round EMA weights of the fast and slow mid
            averages (in (0, 1]; weight 1 = last mid only).
        momentum_threshold_bps: gap between the averages that triggers a trade, bps.
        momentum_size: momentum order size, fraction of ``V``.
    """

    tick_size: float = 0.01
    rounds_per_minute: int = struct.field(pytree_node=False, default=6)
    mm_levels: int = struct.field(pytree_node=False, default=6)
    mm_refresh_rungs: int = struct.field(pytree_node=False, default=1)
    mm_half_spread_ticks: float = 0.5
    mm_level_spacing_ticks: float = 1.0
    mm_size: float = 0.05
    mm_size_growth: float = 1.0
    mm_skew_ticks: float = 0.2
    noise_slots: int = struct.field(pytree_node=False, default=3)
    noise_orders: int = struct.field(pytree_node=False, default=24)
    noise_market_prob: float = 0.2
    noise_limit_prob: float = 0.5
    noise_cancel_prob: float = 0.2
    noise_size: float = 0.02
    noise_tail: float = 1.5
    noise_max_size: float = 1.0
    noise_offset_ticks: float = 1.0
    informed_slots: int = struct.field(pytree_node=False, default=1)
    informed_prob: float = 0.5
    informed_threshold_ticks: float = 0.5
    informed_size: float = 0.2
    flow_impact_bps: float = 5.0
    flow_impact_exponent: float = 0.5
    flow_impact_halflife_minutes: float = 30.0
    agent_flow_memory: int = struct.field(pytree_node=False, default=0)
    agent_flow_impact_bps: float = 5.0
    agent_flow_beta: float = struct.field(pytree_node=False, default=0.0)
    agent_flow_tau0_minutes: float = struct.field(pytree_node=False, default=5.0)
    trailing_volume_unit: int = struct.field(pytree_node=False, default=0)
    momentum_slots: int = struct.field(pytree_node=False, default=1)
    momentum_prob: float = 0.3
    momentum_fast: float = 0.3
    momentum_slow: float = 0.05
    momentum_threshold_bps: float = 5.0
    momentum_size: float = 0.02

    def __post_init__(self):
        # Leaves may be tracers under jit/vmap; only the static shapes are checked here.
        for name in ("rounds_per_minute", "mm_levels", "noise_orders"):
            if getattr(self, name) < 1:
                raise ValueError(f"market.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("noise_slots", "informed_slots", "momentum_slots"):
            if getattr(self, name) < 0:
                raise ValueError(f"market.{name} must be >= 0, got {getattr(self, name)}")
        if not 1 <= self.mm_refresh_rungs <= max(1, self.mm_levels - 1):
            raise ValueError(
                "market.mm_refresh_rungs must be in [1, max(1, mm_levels - 1)] = "
                f"[1, {max(1, self.mm_levels - 1)}], got {self.mm_refresh_rungs}"
            )
        if self.agent_flow_memory not in (0, 1):
            raise ValueError(
                f"market.agent_flow_memory must be 0 (one memory) or 1 (the agents' own), "
                f"got {self.agent_flow_memory}"
            )
        if self.trailing_volume_unit not in (0, 1):
            raise ValueError(
                "market.trailing_volume_unit must be 0 (the training mean) or 1 (the days "
                f"before the episode's), got {self.trailing_volume_unit}"
            )
        if not 0.0 <= self.agent_flow_beta <= 2.0 or not self.agent_flow_tau0_minutes > 0:
            raise ValueError(
                "market.agent_flow_beta must be in [0, 2] and market.agent_flow_tau0_minutes "
                f"> 0, got {self.agent_flow_beta} and {self.agent_flow_tau0_minutes}"
            )

    def volume_unit(self, data, episode) -> jax.Array:
        """``float32`` ``V`` of ``episode`` (int32 index into ``data``, a
        :class:`~serl_jax.envs.market_data.MarketData`), shares per minute:
        ``trailing_minute_volume`` with ``trailing_volume_unit`` 1, else
        ``mean_minute_volume``."""
        if self.trailing_volume_unit:
            return data.trailing_minute_volume[episode]
        return data.mean_minute_volume[episode]

    def agent_kernel(self) -> tuple[np.ndarray, np.ndarray]:
        """The agents' power-law memory (``agent_flow_beta`` > 0) as ``(weights
        float32[K], decay float32[K])``: each exponential's weight in ``E_a = sum_k w_k
        E_k`` and its decay factor per trading round, ``K`` =
        :data:`AGENT_KERNEL_EXPONENTIALS`. Static: NumPy on the static fields.

        Raises:
            ValueError: with ``agent_flow_beta`` 0 (one exponential, no kernel).
        """
        if self.agent_flow_beta == 0.0:
            raise ValueError("market.agent_flow_beta is 0: the agents' memory is one exponential")
        return _agent_kernel(
            self.agent_flow_beta, self.agent_flow_tau0_minutes, self.rounds_per_minute
        )

    def capacity(self, num_agents: int = 1) -> int:
        """Book slots per side that can never overflow: the market makers' rungs, the
        noise ring, one order per informed slot and one passive child order per agent
        (momentum orders never rest)."""
        return self.mm_levels + self.noise_orders + self.informed_slots + num_agents

    def outer_rungs_per_round(self) -> int:
        """Outer rungs per side the market makers refresh every round: ``mm_refresh_rungs``,
        0 for a one-rung ladder."""
        return min(self.mm_refresh_rungs, self.mm_levels - 1)

    def messages_per_round(self) -> int:
        """Order-flow messages every round sends to the book (no-ops included)."""
        market_maker = 4 * (1 + self.outer_rungs_per_round())
        return 2 * self.informed_slots + self.momentum_slots + 2 * self.noise_slots + market_maker

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], where: str = "market") -> MarketParams:
        """Builds parameters from a mapping (e.g. a YAML section), checking every key.

        Raises:
            ValueError: an unknown key, a value of the wrong type, or
                ``flow_impact_exponent`` outside (0, 1], naming ``where.key``.
        """
        fields = {f.name: f for f in dataclasses.fields(cls)}
        kwargs = {}
        for key, value in values.items():
            if key not in fields:
                raise ValueError(f"{where}.{key}: unknown market parameter")
            default = fields[key].default
            if isinstance(default, bool) or not isinstance(value, int | float):
                raise ValueError(f"{where}.{key}: expected a number, got {value!r}")
            if isinstance(default, int) and not isinstance(default, bool):
                if not isinstance(value, int):
                    raise ValueError(f"{where}.{key}: expected an integer, got {value!r}")
            kwargs[key] = type(default)(value)
        exponent = kwargs.get("flow_impact_exponent", fields["flow_impact_exponent"].default)
        if not 0.0 < exponent <= 1.0:
            raise ValueError(f"{where}.flow_impact_exponent: must be in (0, 1], got {exponent}")
        return cls(**kwargs)

    def to_mapping(self) -> dict[str, float | int]:
        """The parameters as plain Python numbers (for YAML)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


@functools.lru_cache(maxsize=16)
def _agent_kernel(beta: float, tau0: float, rounds: int) -> tuple[np.ndarray, np.ndarray]:
    """:meth:`MarketParams.agent_kernel`'s fit, once per kernel (every trace reads it)."""
    weights, rates = power_law_exponentials(beta, tau0, AGENT_KERNEL_EXPONENTIALS)
    decay = np.exp(-rates / rounds)
    return weights.astype(np.float32), decay.astype(np.float32)


def load_market_params(path: str | Path) -> MarketParams:
    """Reads :class:`MarketParams` from a YAML file (a ``market:`` mapping).

    Raises:
        ValueError: unreadable file, no ``market`` mapping, or a bad key (named).
    """
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ValueError(f"{path}: cannot read market parameters ({err})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("market"), dict):
        raise ValueError(f"{path}: expected a 'market:' mapping of MarketParams fields")
    return MarketParams.from_mapping(raw["market"], where=f"{path}: market")
