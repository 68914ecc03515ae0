"""Micro prompts: one per module the designer writes.

Each :class:`MicroPrompt` names the module as the seeds do (LLM4Reward, LLM4Agent), gives
the exact signature and shapes to return and shows the current default implementation.
The registry :data:`MICRO_PROMPTS` is keyed by the slot kind (reward: LLM4Reward,
network: LLM4Agent, imagination: LLM4Imagine); the later modules (LLM4Profiling,
LLM4Communication) are added here when their slots exist.
"""

from __future__ import annotations

from dataclasses import dataclass

from llm.prompts.defaults import DEFAULT_CODE
from serl_jax.config import ImagineConfig, NetworkConfig

__all__ = ["MICRO_PROMPTS", "MicroPrompt", "imagination_contract"]


@dataclass(frozen=True)
class MicroPrompt:
    """The module-specific part of a prompt.

    Attributes:
        module: the seeds' module name (``LLM4Reward``), written as ``MODULE: <module>``.
        kind: the slot it fills (``reward``, ``network``); the validator's ``kind``.
        contract: what to write: signature, shapes, dtypes, units (LLM4Imagine's with
            the default ``imagine`` settings; :func:`design_prompt` states a run's own).
        default_code: the current default implementation (or an example of one).
        max_new_tokens: the token budget of one completion (the loop uses the smaller of
            it and ``loop.max_new_tokens``): the longest library program of the slot in
            SmolLM2's tokenizer plus about 40% for a description line and edits
            (reward 451 tokens, network 412, imagination 343; measured 2026-11-23), so a
            small model that does not stop wastes little time.
        default_label: how the prompt introduces ``default_code``.
        signature: the entry point and what it returns, one line (the compact prompt's
            whole contract, :func:`llm.prompts.compact_prompt`).
    """

    module: str
    kind: str
    contract: str
    default_code: str
    max_new_tokens: int
    signature: str
    default_label: str = "Current default implementation"


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
  action's logit z (action = sigmoid(z)), as a residual around the TWAP schedule's logit:
  initialize the policy head near zero with bias (0, log 0.5) so the untrained policy is
  TWAP with some exploration. `value` estimates the return in reward units.
- Optional field `prior_anchor_steps: float` (steps, in [0, 1000]; the framework's
  default is {NetworkConfig().prior_anchor_steps:g}): the time constant with which the
  TWAP prior pulls the inventory back to the linear schedule, a = exp(-d/k) / (T - t)
  with d the TWAP slices the order is ahead (0: catch up in one step). Participation
  child orders fill more in busy minutes and less in quiet ones; a larger k lets those
  deviations persist instead of being undone.
- Observations are normalized with running statistics before the network sees them.
- At most 1,000,000 parameters; use glorot/lecun/variance_scaling initializers
  (no orthogonal init or jnp.linalg).""",
    default_code=DEFAULT_CODE["network"],
    max_new_tokens=640,
    signature="`class Network(nn.Module)` (flax.linen): `__call__(self, obs)` with obs float32 "
    "[..., D] returns (policy_outputs float32 [..., 2], value float32 [...]).",
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
- `params`: `params.realized_volatility` (std of the day's T - 1 one-minute log
  returns, a fraction: 1e-3 = 10 bps), `params.volume_profile` (float32 [T], the
  day's share of volume per minute, sums to 1), `params.day_volume` (volume units),
  `params.mean_minute_volume` (the symbol's mean volume per minute on training days),
  `params.tick_size` (currency per share, 0 when unknown), `params.n_slots` (T, a
  Python int).
- Pure JAX (jax, jax.numpy, jax.lax); it is jitted and vmapped over days. Work on log
  prices so prices stay positive; scale volumes by positive factors.
- Every imagined day must stay near its source day, or it is replaced by the real day:
  daily log return within {imagine.return_multiple:g}x max(|the source's|, one daily
  std), one-minute volatility and total volume within {imagine.volatility_multiple:g}x
  and {imagine.volume_multiple:g}x (either way), volume profile within total-variation
  distance {imagine.profile_distance:g}. The project derives the observation features
  from the returned price and volume itself.
- Aim for days that teach the execution policy something the real days show too rarely
  (turbulent or calm sessions, trends, volume bursts, dips and recoveries)."""


LLM4IMAGINE = MicroPrompt(
    module="LLM4Imagine",
    kind="imagination",
    contract=imagination_contract(ImagineConfig()),
    default_code=DEFAULT_CODE["imagination"],
    max_new_tokens=512,
    signature="`def imagine(key, price, volume, params)` turns a real day (price, volume: "
    "float32 [T]) into a new one: returns (price [T], volume [T]), float32.",
    default_label="An example (by default training uses real days only)",
)

MICRO_PROMPTS: dict[str, MicroPrompt] = {p.kind: p for p in (LLM4REWARD, LLM4AGENT, LLM4IMAGINE)}
