"""The macro prompt: the task, the environment's state fields and the metric.

After the seeds' macro-micro prompt structure: one macro prompt describes the problem
every module shares; a micro prompt per module (:mod:`llm.prompts.micro`) asks for one
piece of code. The field tables are read from the docstrings of
:class:`serl_jax.envs.execution.EnvState` and ``EnvParams``, so the prompt always names
the fields the code will actually receive.
"""

from __future__ import annotations

import dataclasses
import inspect
import re

from serl_jax.envs.execution import NUM_PRIVATE_FEATURES, EnvParams, EnvState

__all__ = ["field_docs", "macro_prompt"]


def field_docs(cls: type) -> dict[str, str]:
    """``{field: description}`` from the ``Attributes:`` section of a dataclass docstring.

    A line ``a, b: text`` documents both ``a`` and ``b``; continuation lines are joined.

    Raises:
        ValueError: a field of ``cls`` is not documented (so the prompt cannot go stale).
    """
    doc = inspect.getdoc(cls) or ""
    section = doc.split("Attributes:", 1)[-1]
    docs: dict[str, str] = {}
    current: list[str] = []
    for line in section.splitlines():
        match = re.match(r"^\s{4}([a-z_][a-z0-9_, ]*):\s*(.*)$", line)
        if match:
            current = [n.strip() for n in match.group(1).split(",")]
            for name in current:
                docs[name] = match.group(2).strip()
        elif line.strip() and current:
            for name in current:
                docs[name] += " " + line.strip()
    missing = [f.name for f in dataclasses.fields(cls) if f.name not in docs]
    if missing:
        raise ValueError(f"{cls.__name__}: fields without documentation: {missing}")
    return docs


def _table(cls: type, skip: tuple[str, ...] = ()) -> str:
    docs = field_docs(cls)
    return "\n".join(
        f"- `{f.name}`: {docs[f.name]}" for f in dataclasses.fields(cls) if f.name not in skip
    )


_SCORES = {
    "pa": "Candidates are ranked by their mean PA over the validation orders.",
    "shortfall": """\
Candidates are ranked by their mean shortfall over the validation orders: the part of
PA paid in spread and impact, side * (P_exec / P_replayed - 1) * 1e4 bps, P_replayed the
prices the market printed without the agent (negative; higher is better). PA minus
shortfall is timing, which follows the day's price path and which no design controls
on a martingale price.""",
    "mean_variance": """\
Candidates are ranked by Almgren & Chriss's mean-variance objective over the validation
orders, negated (higher is better): the spread and impact paid against the prices the
market printed without the agent, plus params.urgency * sigma_day / T * (share of Q still
held)**2 per minute (the risk of holding inventory), plus the penalty on what is left at
the end, in bps of the order.""",
}

_MARKET_NOTES = {
    "static": "",
    "propagator": """
The agent's own trades also move the prices it trades at: their impact builds up with
the participation rate and decays over the following minutes (a propagator), so fast
trading costs more than the same shares spread out.""",
    "lob": """
The agent trades in a simulated limit-order book whose background traders react to
it, so its own orders move the prices it trades at.""",
}

_CHILD_ORDERS = {
    "fixed": "Each child order is a_t * I_t shares.",
    "participation": """\
Each child order is a participation (POV) order: it trades the rate a_t * I_t / V_hat of
the minute's volume as it prints, V_hat a forecast of that volume from earlier bars, so
it fills a_t * I_t shares when the minute is as busy as forecast, more in a busier one
and fewer in a quieter one.""",
}


#: What each MARL algorithm (``marl.algorithm``) does with the critic.
_CRITICS = {
    "ippo": "IPPO: each agent's critic is the network's value head on its own input.",
    "mappo": "MAPPO: a centralized critic reads all agents' observations; the actor (the\n"
    "network's policy) stays decentralized.",
}

#: The rewards and the score of each scenario (``marl.scenario``).
_SCENARIOS = {
    "independent": """\
Independent scenario: each agent works its own parent order and trains on its own
reward. The score is the mean over every agent's validation orders.""",
    "team": """\
Team scenario: the agents share one parent order (the same side and window, each
agent's Q its share) and every agent trains on the team reward, the agents' rewards
weighted by their shares Q_i / sum Q. The score is the mean over the team's validation
orders, team PA pooling every agent's fills.""",
}


def _agents_section(agents: int, scenario: str, algorithm: str, communication: bool) -> str:
    """The macro prompt's paragraph on N > 1 agents (:func:`macro_prompt`)."""
    messages = (
        ", plus the mean of the other agents' last messages (M numbers, the\n"
        "communication module's output; zeros at an episode's first step)"
        if communication
        else ""
    )
    width = f"D + {agents}" + (" + M" if communication else "")
    return f"""
## Several agents (N = {agents}, {algorithm.upper()}, {scenario} scenario)
{agents} execution agents trade in one dynamic market, a simulated limit-order book on
the day's bars: each agent's child orders move the price the others trade at. One policy
network is shared by all agents; its input is an agent's observation plus its one-hot
agent index ({agents} numbers){messages}: {width} numbers.
{_CRITICS[algorithm]}
{_SCENARIOS[scenario]}
"""


def macro_prompt(
    obs_dim: int,
    num_features: int,
    lookback: int,
    score: str = "shortfall",
    child_quantity: str = "participation",
    agents: int = 1,
    scenario: str = "independent",
    algorithm: str = "ippo",
    communication: bool = False,
    market: str = "static",
) -> str:
    """The task description shared by every module's prompt.

    Args:
        obs_dim: observation size D the network receives.
        num_features: market features per past slot F.
        lookback: past slots in the observation.
        score: what ranks candidates (``loop.score``: ``shortfall``, the run default, or
            ``pa``).
        child_quantity: the env's child-order type (``env.child_quantity``:
            ``participation``, the run default, or ``fixed``).
        agents: N, the execution agents (``marl.agents``); with N > 1 a section on the
            multi-agent setting follows the observation (one shared market, the shared
            policy's input, the rewards and the score).
        scenario: ``marl.scenario``, ``independent`` or ``team`` (read when N > 1).
        algorithm: ``marl.algorithm``, ``ippo`` or ``mappo`` (read when N > 1).
        communication: whether the agents send messages (``marl.communication`` set):
            the policy's input then ends with the mean of the others' messages.
        market: where one agent's candidates train (``loop.env`` and
            ``market.simulator``): ``static`` (the default), ``propagator`` or ``lob``; a
            dynamic market adds a sentence on how the agent's own trades move prices.

    Raises:
        KeyError: unknown ``score``, ``child_quantity`` or ``market``, or with N > 1 an unknown
            ``scenario`` or ``algorithm``.
        ValueError: ``agents < 1``.

    Returns:
        Markdown text (with N = 1 exactly the single-agent prompt).
    """
    if agents < 1:
        raise ValueError(f"macro_prompt: agents must be >= 1, got {agents}")
    several = _agents_section(agents, scenario, algorithm, communication) if agents > 1 else ""
    return f"""\
# Task: optimal execution of a parent order

You are an RL researcher designing components of a PPO agent that executes a parent
order: sell (side = +1) or buy (side = -1) Q shares within a window of T one-minute
slots of a real trading day. At each step t the agent chooses an action a_t in [0, 1],
the fraction of its remaining inventory I_t to send as a child order.
{_CHILD_ORDERS[child_quantity]}
The fill pays half the spread plus a temporary impact eta * (q/v)^k in bps, at most a
participation cap of the minute's volume v; whatever is left at the last step is
liquidated with a penalty.{_MARKET_NOTES[market]}

Metric (higher is better): the price advantage of each parent order against the
window's VWAP, PA = side * (P_exec / P_vwap - 1) * 1e4 bps, averaged over validation
days; also WR (share of orders with PA > 0), GLR (mean gain / mean loss) and AFI (share
of Q left unfilled). Execution costs make PA negative for a policy that just follows the
market; TWAP (equal child orders) is the reference to beat.
{_SCORES[score]}

The code runs inside `jax.jit` and `jax.vmap`: use `jax.numpy` only, no Python `if` on
array values (use `jnp.where`), no loops over time, float32 outputs, no I/O. Allowed
imports: jax, jax.numpy, jax.nn, jax.lax, flax.linen, math, functools.

## Episode state (`EnvState`, one scalar per field per episode)
{_table(EnvState)}

## Environment parameters (`EnvParams`)
{_table(EnvParams, skip=("data",))}
(`params.data` holds the replayed market arrays; components should not need it.)

## Observation (float32 [{obs_dim}])
{NUM_PRIVATE_FEATURES} private features: (T - t)/T, log(T - t), I_t/Q, the price move
since arrival in percent, the share of the window's expected volume still ahead (training
volume profile) and the current minute's share of it;
then {lookback} past slots x {num_features} normalized market features (log return,
rolling volatility, volume share, time of day, high-low range).
{several}"""
