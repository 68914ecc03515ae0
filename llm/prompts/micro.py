"""Micro prompts: one per module the designer writes.

Each :class:`MicroPrompt` names the module as the seeds do (LLM4Reward, LLM4Agent), gives
the exact signature and shapes to return and shows the current default implementation.
The registry :data:`MICRO_PROMPTS` is keyed by the slot kind (reward: LLM4Reward,
network: LLM4Agent, imagination: LLM4Imagine, profiling: LLM4Profiling, communication:
LLM4Communication). The contracts that depend on a run's settings are functions of its
config section (:func:`imagination_contract`, :func:`profiling_contract`,
:func:`communication_contract`); the registry's entries hold them for the defaults
(two agents for the multi-agent modules).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from llm.designs import library
from llm.prompts.defaults import DEFAULT_CODE
from llm.prompts.macro import field_docs
from llm.validate.static import ALLOWED_IMPORTS
from serl_jax.components.communication import MAX_MESSAGE_SIZE
from serl_jax.components.imagination import ImagineParams
from serl_jax.components.profiling import PROFILE_PARAM_FIELDS
from serl_jax.config import ImagineConfig, MarlConfig, NetworkConfig
from serl_jax.envs.execution import NUM_PRIVATE_FEATURES, EnvState

__all__ = [
    "CODE_RULES",
    "MICRO_PROMPTS",
    "MicroPrompt",
    "communication_contract",
    "imagination_contract",
    "profiling_contract",
]


CODE_RULES = f"""\
Rules (the validator enforces each):
- Imports: only {", ".join(sorted(ALLOWED_IMPORTS))}; write `import jax.numpy as jnp`,
  never `import jnp`; no `typing`.
- The inputs are traced JAX values: no Python `if`, `while`, `and`, `or`, `bool()` or
  `float()` on them; use `jnp.where(cond, a, b)`, `jnp.minimum`, `jnp.maximum`,
  `jnp.clip`.
- Read only the inputs and fields named here, in your function. `params` holds none of
  your own settings (no `params["weight"]`, no new attribute): write your constants as
  numbers in the code.
- Define every helper and constant you use: only imports are predefined.
- Answer with the complete program, imports included, in one ```python block."""
"""What every generated program must respect, stated in every design prompt (full and
compact): the validator's import allow-list, no Python control flow on traced values,
no invented inputs, no undefined helpers. They name the failures recorded for
Qwen2.5-Coder-1.5B as a designer (``import jnp``, an invented ``params`` key, a Python
``if`` on a traced value; on 2026-11-26, 2 of its 4 first reward samples called the
default program's ``safe_div`` without defining it; its imaginations imported ``typing``
for type hints and called ``jax.nn.safe_div``; later, 2 of 12 first imagination samples
used the example's ``VOL_SCALE`` without defining it and 2 read ``params`` at module
level)."""


#: The ``EnvState`` fields a reward program is told it may read (the episode index, the
#: window's first slot and the replayed price are the env's bookkeeping).
REWARD_STATE_FIELDS: tuple[str, ...] = tuple(
    name for name in field_docs(EnvState) if name not in ("episode", "start", "last_replayed_price")
)


@dataclass(frozen=True)
class MicroPrompt:
    """The module-specific part of a prompt.

    Attributes:
        module: the seeds' module name (``LLM4Reward``), written as ``MODULE: <module>``.
        kind: the slot it fills (``reward``, ``network``); the validator's ``kind``.
        contract: what to write: signature, shapes, dtypes, units (LLM4Imagine's with
            the default ``imagine`` settings, LLM4Profiling's and LLM4Communication's for
            two agents; :func:`~llm.prompts.design_prompt` states a run's own).
        default_code: the current default implementation (or an example of one).
        max_new_tokens: the token budget of one completion (the loop uses the smaller of
            it and ``loop.max_new_tokens``): the longest library program of the slot in
            SmolLM2's tokenizer plus about 40% for a description line and edits
            (reward 451 tokens, network 412, imagination 343, profiling 372,
            communication 177; measured 2026-11-24), rounded up to a multiple of 64, so a
            small model that does not stop wastes little time.
        default_label: how the prompt introduces ``default_code``.
        examples: programs the loop shows in turn in place of ``default_code``, one per
            sample of an iteration (``loop.vary_examples``), for a module whose program
            there is an example rather than an incumbent to improve (LLM4Imagine: the
            design library's imaginations); empty: every sample sees ``default_code``.
        signature: the entry point and what it returns, one line (the compact prompt's
            contract with ``inputs`` and :data:`CODE_RULES`,
            :func:`llm.prompts.compact_prompt`).
        inputs: the entry point's inputs, their shapes and the fields it may read, in a
            few lines (the full prompt states them in its contract and macro prompt).
    """

    module: str
    kind: str
    contract: str
    default_code: str
    max_new_tokens: int
    signature: str
    inputs: str
    default_label: str = "Current default implementation"
    examples: tuple[str, ...] = ()


LLM4REWARD = MicroPrompt(
    module="LLM4Reward",
    kind="reward",
    contract="""\
Write a reward function for the reward slot:

    def reward(prev_state, action, next_state, params):

- `prev_state`, `next_state`: `EnvState` before and after the step (one episode, scalar
  fields); `action`: float32 scalar in [0, 1] (the fraction of inventory sent);
  `params`: `EnvParams`.
- Return either a float32 scalar or a dict of at most 16 named float32 scalar terms
  (identifier names, not `total`) whose sum is the reward. Prefer the dict form: the
  statistics of each term during training are reported back to you.
- PPO maximizes the undiscounted sum over the episode (gamma = 1). Rewards are in bps
  times `params.reward_scale`; keep their scale comparable to the default's.
- Must be finite for every state, including zero quantity, zero fills and the last step.""",
    default_code=DEFAULT_CODE["reward"],
    max_new_tokens=640,
    signature="`def reward(prev_state, action, next_state, params)` returns the reward of one "
    "step of a parent order: a float32 scalar, or a dict of named float32 scalars.",
    inputs="`prev_state`, `next_state`: the episode's state before and after the step, "
    f"scalar fields {', '.join(REWARD_STATE_FIELDS)}; "
    "`action`: float32 scalar in [0, 1], the fraction of the inventory sent; `params`: "
    "fields side (+1 sell, -1 buy), reward_scale, urgency, half_spread_bps, "
    "impact_eta_bps, concentration_penalty, terminal_penalty_bps.",
)

LLM4AGENT = MicroPrompt(
    module="LLM4Agent",
    kind="network",
    contract=f"""\
Write the policy/value network for the network slot, a flax.linen module:

    class Network(nn.Module):
        @nn.compact
        def __call__(self, obs):  # obs float32 [..., D]
            return policy_outputs, value  # float32 [..., 2] and [...]

- Instantiated as `Network()`: every field needs a default.
- `policy_outputs[..., 0]` is the mean and `[..., 1]` the log standard deviation of the
  action's logit z (action = sigmoid(z)), as a residual around the action prior's logit
  (the VWAP schedule of the training volume profile by default, or TWAP's): initialize
  the policy head near zero with bias (0, log 0.5) so the untrained policy is the prior
  with some exploration. `value` estimates the return in reward units.
- Optional field `prior_anchor_steps: float` (in the class body, with a default; steps,
  in [0, 1000]; the framework's default is {NetworkConfig().prior_anchor_steps:g}): the
  time constant with which the prior pulls the inventory back to its schedule,
  a = pace * exp(-d/k) with d the average remaining slices the order is ahead (0: catch
  up in one step). Participation child orders fill more in busy minutes and less in
  quiet ones; a larger k lets those deviations persist instead of being undone.
- Optional field `action_multiples: tuple` (2 to 64 distinct numbers in [0, 100]), a
  discrete action set: `policy_outputs` is then `[..., K]`, the logits of a categorical
  over those multiples of the prior's child order (1: the prior's own order). Declare
  it in the class body, `action_multiples: tuple = (0.5, 1.0, 2.0)`, and end with
  `nn.Dense(len(self.action_multiples), bias_init=nn.initializers.zeros)`.
- Observations are normalized with running statistics before the network sees them.
- At most 1,000,000 parameters; use glorot/lecun/variance_scaling initializers
  (no orthogonal init or jnp.linalg).""",
    default_code=DEFAULT_CODE["network"],
    max_new_tokens=640,
    signature="`class Network(nn.Module)` (flax.linen): `__call__(self, obs)` with obs float32 "
    "[..., D] returns (policy_outputs float32 [..., 2], value float32 [...]).",
    inputs="`obs`: float32 [..., D], the normalized observation (any leading axes): "
    f"{NUM_PRIVATE_FEATURES} private features, then the market features over the lookback.",
)


def imagination_contract(imagine: ImagineConfig) -> str:
    """LLM4Imagine's contract for a run's ``imagine`` section (its ratio and bounds)."""
    return f"""\
Write an imagination program: it turns one real training day into a new, plausible day,
and training draws {imagine.ratio:.0%} of its episodes from such imagined days
(validation and test days stay real):

    def imagine(key, price, volume, params):
        return new_price, new_volume  # float32 [T] and [T]

- `key`: a JAX PRNG key (use `jax.random`, never Python or NumPy randomness);
  `price`: float32 [T] minute closes of the real day (currency per share, > 0);
  `volume`: float32 [T] minute volumes (the data's units, >= 0); T minutes a day.
- `params` has these {len(fields(ImagineParams))} fields and no others:
  `params.realized_volatility` (a scalar: the std of the day's T - 1 one-minute log
  returns, a fraction: 1e-3 = 10 bps), `params.volume_profile` (float32 [T], the day's share of
  volume per minute, sums to 1), `params.day_volume` (volume units),
  `params.mean_minute_volume` (the symbol's mean volume per minute on training days, a
  scalar), `params.tick_size` (currency per share, 0 when unknown), `params.n_slots`
  (T, a Python int).
- Pure JAX (jax, jax.numpy, jax.lax; there is no `jax.nn.safe_div`: define your
  own); it is jitted and vmapped over days. Work on log prices so prices stay
  positive; scale volumes by positive factors.
- Every imagined day must stay near its source day, or it is replaced by the real day:
  daily log return within {imagine.return_multiple:g}x max(|the source's|, one daily
  std), one-minute volatility and total volume within {imagine.volatility_multiple:g}x
  and {imagine.volume_multiple:g}x (either way), volume profile within total-variation
  distance {imagine.profile_distance:g}. So scale the day's own log returns and volumes
  by moderate factors (say 0.5 to 2) rather than generating a new day from nothing.
  The project derives the observation features from the returned price and volume
  itself.
- Aim for days that teach the execution policy something the real days show too rarely
  (turbulent or calm sessions, trends, volume bursts, dips and recoveries). The example
  shows one such idea: write another one, a different change to the day's dynamics,
  not the example again with other numbers."""


LLM4IMAGINE = MicroPrompt(
    module="LLM4Imagine",
    kind="imagination",
    contract=imagination_contract(ImagineConfig()),
    default_code=DEFAULT_CODE["imagination"],
    max_new_tokens=512,
    signature="`def imagine(key, price, volume, params)` turns a real day (price, volume: "
    "float32 [T]) into a new one: returns (price [T], volume [T]), float32.",
    inputs="`key`: a JAX PRNG key (use `jax.random`); `price`: float32 [T] minute closes "
    "(> 0); `volume`: float32 [T] minute volumes (>= 0); `params`: only the fields "
    "realized_volatility, volume_profile (float32 [T]), day_volume, mean_minute_volume, "
    "tick_size, n_slots (T, a Python int).",
    default_label="An example (by default training uses real days only)",
    examples=tuple(design.code for design in library("imagination")),
)


def _agents(marl: MarlConfig) -> str:
    """The run's agents, two lines: ``The run: 3 execution agents trained by IPPO, in the
    independent scenario`` and what the scenario means."""
    scenario = {
        "independent": "(each agent works its own parent order)",
        "team": "(the agents share one parent order, scored by team PA)",
    }[marl.scenario]
    return (
        f"The run: {marl.agents} execution agents trained by {marl.algorithm.upper()}, in the "
        f"{marl.scenario} scenario\n{scenario}."
    )


def profiling_contract(marl: MarlConfig) -> str:
    """LLM4Profiling's contract for a run's ``marl`` section (its agents, scenario and
    evaluation profiles).

    Raises:
        KeyError: unknown ``marl.scenario``.
    """
    evaluation = f"`{marl.profile}`" if marl.profile else "the single-agent draw for every agent"
    team = (
        "\n- Team scenario: agent 0's side and window apply to every agent, and each agent's\n"
        "  quantity is its share of the team's one parent order (Q_i / sum Q weighs its\n"
        "  reward in the team reward)."
        if marl.scenario == "team"
        else ""
    )
    return f"""\
Write a profile program: it gives each agent the parent order it trains on in an
episode.
{_agents(marl)}

    def profile(key, agent_index, n_agents, params):
        return {{"side": side, "quantity": quantity, "start": start,
                "window_len": window_len, "urgency": urgency}}  # scalars

- `key`: the episode's JAX PRNG key, the same for every agent (use
  `jax.random.fold_in(key, agent_index)` for an agent's own draw, never Python or NumPy
  randomness); `agent_index`: int32 scalar in [0, n_agents), traced (no Python `if` on
  it); `n_agents`: N, a Python int ({marl.agents} in this run; validation also draws
  1 and 4 agents, so guard divisions by n_agents - 1).
- `params`: the environment parameters: `params.side` (the run's side, +1 sell, -1
  buy), `params.quantity_low` and `params.quantity_high` (the run's range of the Q
  multiplier), `params.min_window_len` (minutes), `params.data.num_slots` (T, minutes in
  the day).
- Return a dict with exactly these five keys: `side` float32, +1 (sell) or -1 (buy);
  `quantity` float32 > 0 and finite, the multiplier on order_fraction times the window's
  expected volume that sizes the agent's Q (1 = the run's typical order); `start` int32,
  the window's first minute in [0, T); `window_len` int32 minutes, >= 1 with
  start + window_len <= T (a non-empty window inside the day); `urgency` float32 >= 0
  and finite, a risk aversion a reward may read as `params.urgency` (the default reward
  ignores it).
- Pure JAX (jax, jax.numpy, jax.lax); it is jitted and vmapped over the agents.
  Validation draws it for 1 and 4 agents on 64 keys and rejects it when any draw breaks
  a rule above (naming the field).{team}
- What it is for: the profiles are the training curriculum, the population of parent
  orders (sizes, sides, windows, urgencies, co-traders on the same or the opposite side)
  the shared policy learns from. Candidates are scored on the validation days with the
  run's fixed evaluation profiles, so every candidate is compared on the same orders:
  design the training orders that teach the policy to execute those well.
  Evaluation profiles: {evaluation}."""


def communication_contract(marl: MarlConfig) -> str:
    """LLM4Communication's contract for a run's ``marl`` section (its agents and
    scenario).

    Raises:
        KeyError: unknown ``marl.scenario``.
    """
    return f"""\
Write a communication module, what each agent tells the others (a flax.linen module).
{_agents(marl)}

    class Communication(nn.Module):
        @nn.compact
        def __call__(self, obs):  # obs float32 [..., D]
            return message  # float32 [..., M], 1 <= M <= {MAX_MESSAGE_SIZE}

- Instantiated as `Communication()`: every field needs a default. M is fixed (not
  data-dependent) and any leading axes pass through: [..., D] -> [..., M].
- `obs` may be a single observation [D]: select features on the last axis with an
  ellipsis, `obs[..., :{NUM_PRIVATE_FEATURES}]` or `obs[..., 2]`, never `obs[:, i]`, and
  reduce or concatenate over `axis=-1`.
- `obs` is the sending agent's normalized observation (the layout above:
  {NUM_PRIVATE_FEATURES} private features first, time and inventory left, the price move and
  the volume profile's clock, then the market features).
- Each agent sends the message of its observation; at the next step every agent's policy
  input gets the mean of the other agents' messages appended (M numbers; zeros at an
  episode's first step). The module is trained with the policy through the receivers'
  PPO loss (one step of DIAL), so the message must be differentiable in the parameters:
  keep it bounded (e.g. tanh) and on the scale of normalized features.
- Validation: float32 [..., M] with 1 <= M <= {MAX_MESSAGE_SIZE} on batches of real observations,
  finite, only `params` variables (no batch statistics or other state), at most
  1,000,000 parameters; glorot/lecun/variance_scaling initializers.
- What it is for: tell the others what they cannot see (where this agent is in its
  order, which way it trades, its read of the market), so the shared policy can avoid
  trading into the same minutes as its co-traders or coordinate one team order."""


LLM4PROFILING = MicroPrompt(
    module="LLM4Profiling",
    kind="profiling",
    contract=profiling_contract(MarlConfig(agents=2)),
    default_code=DEFAULT_CODE["profiling"],
    max_new_tokens=576,
    signature="`def profile(key, agent_index, n_agents, params)` returns one agent's parent "
    "order: a dict of float32 side (+1 sell, -1 buy), float32 quantity (> 0, Q multiplier), "
    "int32 start and window_len (minutes, inside the day) and float32 urgency (>= 0).",
    inputs="`key`: the episode's JAX PRNG key; `agent_index`: int32 scalar, traced; "
    f"`n_agents`: a Python int; `params`: fields {', '.join(PROFILE_PARAM_FIELDS)} "
    "(data.num_slots is T, the minutes in the day).",
)

LLM4COMMUNICATION = MicroPrompt(
    module="LLM4Communication",
    kind="communication",
    contract=communication_contract(MarlConfig(agents=2)),
    default_code=DEFAULT_CODE["communication"],
    max_new_tokens=256,
    default_label="The default module (the one `--comm` uses when none is named)",
    signature="`class Communication(nn.Module)` (flax.linen): `__call__(self, obs)` with obs "
    f"float32 [..., D] returns the agent's message, float32 [..., M], 1 <= M <= "
    f"{MAX_MESSAGE_SIZE}.",
    inputs="`obs`: float32 [..., D], the sending agent's normalized observation (any "
    f"leading axes): {NUM_PRIVATE_FEATURES} private features, then the market features.",
)

MICRO_PROMPTS: dict[str, MicroPrompt] = {
    p.kind: p for p in (LLM4REWARD, LLM4AGENT, LLM4IMAGINE, LLM4PROFILING, LLM4COMMUNICATION)
}
