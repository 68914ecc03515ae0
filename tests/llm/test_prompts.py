"""Prompts (macro + micro), the default code they show, and instruction parsing."""

from __future__ import annotations

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from llm.dek import BufferEntry
from llm.parsing import extract_code
from llm.prompts import (
    COMPACT_INSTRUCTION,
    DEFAULT_CODE,
    MICRO_PROMPTS,
    REFINEMENT_MODULE,
    compact_prompt,
    default_code,
    design_prompt,
    field_docs,
    macro_prompt,
    parse_instruction,
    refinement_prompt,
)
from llm.prompts.micro import CODE_RULES
from llm.validate import load_validated
from llm.validate.static import ALLOWED_IMPORTS
from serl_jax.components import reward_term_values, total_reward
from serl_jax.components.imagination import ImagineParams
from serl_jax.config import ImagineConfig, MarlConfig
from serl_jax.envs import EnvParams, EnvState, ExecutionEnv, default_reward
from serl_jax.envs.execution import mean_variance_reward
from serl_jax.envs.market_data import MarketData
from serl_jax.rl.networks import ActorCritic

MACRO = macro_prompt(obs_dim=54, num_features=5, lookback=10)


def test_macro_names_every_state_and_param_field():
    for cls in (EnvState, EnvParams):
        for f in dataclasses.fields(cls):
            if f.name != "data":
                assert f"`{f.name}`" in MACRO, f.name
    assert "float32 [54]" in MACRO and "10 past slots x 5" in MACRO


def test_field_docs_splits_shared_lines_and_refuses_undocumented():
    docs = field_docs(EnvParams)
    assert docs["quantity_low"] == docs["quantity_high"]
    assert "bps" in docs["half_spread_bps"]

    @dataclasses.dataclass
    class Undocumented:
        """A dataclass with one undocumented field.

        Attributes:
            a: documented.
        """

        a: int = 0
        b: int = 0

    with pytest.raises(ValueError, match=r"fields without documentation: \['b'\]"):
        field_docs(Undocumented)


def _transitions(cn_market, n=256):
    """Real transitions of the env under random actions (prev, action, next)."""
    data = MarketData.from_episodes(cn_market.train)
    params = EnvParams(data=data)
    env = ExecutionEnv()
    keys = jax.random.split(jax.random.PRNGKey(3), n)
    _, state = jax.vmap(env.reset_env, in_axes=(0, None))(keys, params)

    def walk(state, key):
        k1, k2 = jax.random.split(key)
        action = jax.random.uniform(k1, (n,))
        _, nxt, _, _, _ = jax.vmap(env.step_env, in_axes=(0, 0, 0, None))(
            jax.random.split(k2, n), state, action, params
        )
        return nxt, (state, action, nxt)

    _, (prev, action, nxt) = jax.lax.scan(walk, state, jax.random.split(jax.random.PRNGKey(4), 30))
    flat = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), (prev, action, nxt))
    return (*flat, params)


def test_default_reward_code_equals_the_framework_default(cn_market):
    prev, action, nxt, params = _transitions(cn_market)
    code_reward = load_validated(DEFAULT_CODE["reward"], "reward")
    terms = jax.vmap(lambda p, a, n: reward_term_values(code_reward(p, a, n, params)))(
        prev, action, nxt
    )
    expected = jax.vmap(default_reward, in_axes=(0, 0, 0, None))(prev, action, nxt, params)
    assert set(terms) == {"pa", "concentration", "terminal", "total"}
    np.testing.assert_allclose(terms["total"], expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        terms["pa"] + terms["concentration"] + terms["terminal"], terms["total"], rtol=1e-6
    )
    assert float(jnp.abs(terms["terminal"]).max()) > 0 or float(nxt.time.max()) < 240


def test_mean_variance_reward_code_equals_the_framework_objective(cn_market):
    prev, action, nxt, params = _transitions(cn_market)
    params = params.replace(urgency=2.0)  # a risk term that counts
    code_reward = load_validated(default_code("reward", "mean_variance"), "reward")
    terms = jax.vmap(lambda p, a, n: reward_term_values(code_reward(p, a, n, params)))(
        prev, action, nxt
    )
    expected = jax.vmap(mean_variance_reward, in_axes=(0, 0, 0, None))(prev, action, nxt, params)
    assert set(terms) == {"cost", "risk", "terminal", "total"}
    np.testing.assert_allclose(terms["total"], expected, rtol=1e-5, atol=1e-6)
    assert float(jnp.abs(terms["risk"]).min()) > 0 and float(jnp.abs(terms["cost"]).max()) > 0
    # every other score and module keeps the framework's default
    assert default_code("reward", "shortfall") == DEFAULT_CODE["reward"]
    assert default_code("network", "mean_variance") == DEFAULT_CODE["network"]


def test_total_reward_sums_terms_and_passes_scalars():
    assert float(total_reward(jnp.float32(2.5))) == 2.5
    assert float(total_reward({"a": jnp.float32(1.0), "b": jnp.float32(-3.0)})) == -2.0


def test_default_network_code_equals_actor_critic():
    obs = jax.random.normal(jax.random.PRNGKey(0), (7, 54))
    code_net = load_validated(DEFAULT_CODE["network"], "network")
    ref = ActorCritic((64, 64), "tanh")
    params = ref.init(jax.random.PRNGKey(1), obs)
    code_params = code_net.init(jax.random.PRNGKey(1), obs)
    shapes = jax.tree.map(jnp.shape, params)
    assert jax.tree.map(jnp.shape, code_params) == shapes
    # Same initializers: same parameters from the same key, hence the same outputs.
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(code_params), strict=True):
        np.testing.assert_allclose(a, b)
    for a, b in zip(ref.apply(params, obs), code_net.apply(params, obs), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_design_prompt_layout():
    examples = [
        BufferEntry("j1-c0", "reward", "instr A", "def reward(a, b, c, d):\n    return 0\n", -20.5),
        BufferEntry("j0-default", "reward", "instr B", DEFAULT_CODE["reward"], -18.25, {"wr": 0.4}),
    ]
    prompt = design_prompt("reward", MACRO, "Do X.", examples, feedback="- j1-c1: crashed")
    assert prompt.startswith(MACRO.rstrip())
    assert re.findall(r"^MODULE: (\w+)$", prompt, flags=re.M) == ["LLM4Reward"]
    headers = re.findall(r"^### Candidate (\S+) \| PA ([-\d.]+) bps", prompt, flags=re.M)
    assert headers == [("j1-c0", "-20.50"), ("j0-default", "-18.25")]
    assert "| WR 0.40" in prompt and "- j1-c1: crashed" in prompt
    assert prompt.index("## Feedback") < prompt.index("## Instructions\nDo X.")
    # The default implementation is shown and parses as the module's code.
    assert DEFAULT_CODE["reward"].strip() in prompt
    assert "MODULE: LLM4Agent" in design_prompt("network", MACRO, "Do Y.")
    assert set(MICRO_PROMPTS) == {"reward", "network", "imagination", "profiling", "communication"}


def test_imagination_prompt_states_the_slot_and_the_configured_bounds():
    prompt = design_prompt("imagination", MACRO, "Do Z.")
    assert re.findall(r"^MODULE: (\w+)$", prompt, flags=re.M) == ["LLM4Imagine"]
    assert "    def imagine(key, price, volume, params):" in prompt
    # ImagineConfig's defaults: ratio 0.5, bounds 3x / 4x / 4x / 0.5
    assert "training draws 50% of its episodes from such imagined days" in prompt
    assert "within 3x max(|the source's|, one daily" in prompt
    assert "within 4x\n  and 4x (either way)" in prompt and "distance 0.5" in prompt
    # the example is the library's first program, shown as an example, not a default
    assert "An example (by default training uses real days only):\n```python\n" in prompt
    assert DEFAULT_CODE["imagination"].strip() in prompt
    assert "(imports and `def imagine`)" in prompt
    # a run's own ratio and bounds
    own = ImagineConfig(ratio=0.25, volume_multiple=2.0, profile_distance=0.3)
    prompt = design_prompt("imagination", MACRO, "Do Z.", imagine=own)
    assert "training draws 25% of its episodes" in prompt
    assert "within 4x\n  and 2x (either way)" in prompt and "distance 0.3" in prompt


def test_imagination_contract_names_exactly_the_fields_of_imagine_params():
    # "has these six fields and no others": the 1.5B invented fields (volatility_scale,
    # start); the claim must stay true when ImagineParams changes
    contract = MICRO_PROMPTS["imagination"].contract
    named = set(re.findall(r"`params\.(\w+)`", contract))
    fields = {f.name for f in dataclasses.fields(ImagineParams)}
    assert named == fields
    assert f"has these {len(fields)} fields and no others" in " ".join(contract.split())
    assert all(name in MICRO_PROMPTS["imagination"].inputs for name in fields)
    # the rules every prompt states: no typing import, helpers defined by the program
    assert "no `typing`" in CODE_RULES and "typing" not in ALLOWED_IMPORTS


def test_refinement_prompt_and_parse_instruction():
    prompt = refinement_prompt(MACRO, "current one", [("old", -21.0), ("better", -19.0)])
    assert f"MODULE: {REFINEMENT_MODULE}" in prompt
    assert re.findall(r"^### Instruction (\d+) \| PA ([-\d.]+) bps", prompt, flags=re.M) == [
        ("0", "-21.00"),
        ("1", "-19.00"),
    ]
    assert parse_instruction("Sure:\n```text\n  Trade less early.\n```\nthanks") == (
        "Trade less early."
    )
    assert parse_instruction("Just do it better.") == "Just do it better."
    with pytest.raises(ValueError, match="no instruction text"):
        parse_instruction("```text\n\n```")
    within = " ".join(["word"] * 160)
    assert parse_instruction(f"```text\n{within}\n```") == within
    with pytest.raises(ValueError, match=r"^the refined instruction has 161 words, over"):
        parse_instruction(within + " more")


def test_default_code_is_what_extract_code_returns():
    for code in DEFAULT_CODE.values():
        assert extract_code(f"Here:\n```python\n{code}```") == code


def test_prompts_name_the_score_that_ranks_candidates():
    assert "ranked by their mean shortfall over the validation orders" in MACRO
    assert "participation (POV) order" in MACRO
    by_pa = macro_prompt(54, 5, 10, score="pa", child_quantity="fixed")
    assert "ranked by their mean PA over the validation orders" in by_pa
    assert "Each child order is a_t * I_t shares." in by_pa and "POV" not in by_pa
    entry = BufferEntry("j1-c0", "reward", "i", "x = 1\n", -17.4, {"pa": -19.8, "wr": 0.4})
    prompt = design_prompt("reward", MACRO, "Do X.", [entry], score_label="shortfall")
    assert "## Past candidates (ascending shortfall, best last)" in prompt
    assert "### Candidate j1-c0 | shortfall -17.40 bps | PA -19.80 | WR 0.40" in prompt
    refine = refinement_prompt(MACRO, "now", [("old", -17.5)], score_label="shortfall")
    assert "### Instruction 0 | shortfall -17.50 bps" in refine and "a higher shortfall" in refine
    assert "prior_anchor_steps" in MICRO_PROMPTS["network"].contract


def test_compact_prompt_holds_one_program_and_one_edit():
    for kind, module, entry in (
        ("reward", "LLM4Reward", "def reward(prev_state, action, next_state, params)"),
        ("network", "LLM4Agent", "class Network(nn.Module)"),
        ("imagination", "LLM4Imagine", "def imagine(key, price, volume, params)"),
        ("profiling", "LLM4Profiling", "def profile(key, agent_index, n_agents, params)"),
        ("communication", "LLM4Communication", "class Communication(nn.Module)"),
    ):
        code = DEFAULT_CODE[kind]
        prompt = compact_prompt(kind, code, COMPACT_INSTRUCTION)
        assert prompt.startswith(f"MODULE: {module}\n")
        assert entry in prompt
        # the contract a small model can follow: inputs, allowed imports, no Python
        # control flow on traced values, no invented params keys
        assert f"\nInputs: {MICRO_PROMPTS[kind].inputs}\n" in prompt
        assert CODE_RULES in prompt
        assert extract_code(prompt) == code  # the one code block is the program to edit
        assert f"Task: {COMPACT_INSTRUCTION}\n" in prompt
        assert prompt.rstrip().endswith(
            "block holding the complete code "
            + {
                "reward": "(imports and `def reward`).",
                "network": "(imports and `class Network`).",
                "imagination": "(imports and `def imagine`).",
                "profiling": "(imports and `def profile`).",
                "communication": "(imports and `class Communication`).",
            }[kind]
        )
        full = design_prompt(kind, MACRO, COMPACT_INSTRUCTION)
        # the frame shrinks to a fifth (the inputs and the rules are most of it)
        assert len(prompt) - len(code) < 0.2 * (len(full) - len(code))


def test_profiling_prompt_states_the_runs_agents_and_the_evaluation_profiles():
    assert (MICRO_PROMPTS["profiling"].module, MICRO_PROMPTS["profiling"].kind) == (
        "LLM4Profiling",
        "profiling",
    )
    default = design_prompt("profiling", MACRO, "Do P.")
    assert re.findall(r"^MODULE: (\w+)$", default, flags=re.M) == ["LLM4Profiling"]
    assert "    def profile(key, agent_index, n_agents, params):" in default
    assert "The run: 2 execution agents trained by IPPO, in the independent scenario" in default
    assert "Evaluation profiles: the single-agent draw for every agent." in default
    assert "Team scenario" not in default
    assert f"```python\n{DEFAULT_CODE['profiling'].rstrip()}\n```" in default
    assert default.rstrip().endswith("(imports and `def profile`).")
    # the run's own agents, algorithm, scenario and evaluation profiles
    marl = MarlConfig(agents=3, algorithm="mappo", scenario="team", profile="staggered_windows")
    prompt = design_prompt("profiling", MACRO, "Do P.", marl=marl)
    assert "The run: 3 execution agents trained by MAPPO, in the team scenario" in prompt
    assert "(3 in this run; validation also draws\n  1 and 4 agents" in prompt
    assert "Team scenario: agent 0's side and window apply to every agent" in prompt
    assert "Evaluation profiles: `staggered_windows`." in prompt
    assert "the profiles are the training curriculum" in prompt
    # marl only changes the multi-agent contracts
    assert design_prompt("reward", MACRO, "Do P.", marl=marl) == design_prompt(
        "reward", MACRO, "Do P."
    )


def test_communication_prompt_states_the_message_contract_and_the_runs_agents():
    prompt = design_prompt("communication", MACRO, "Do C.", marl=MarlConfig(agents=4))
    assert re.findall(r"^MODULE: (\w+)$", prompt, flags=re.M) == ["LLM4Communication"]
    assert "The run: 4 execution agents trained by IPPO, in the independent scenario" in prompt
    assert "return message  # float32 [..., M], 1 <= M <= 16" in prompt
    assert "mean of the other agents' messages appended" in prompt and "DIAL" in prompt
    assert "only `params` variables" in prompt
    assert "The default module (the one `--comm` uses when none is named):" in prompt
    assert DEFAULT_CODE["communication"].strip() in prompt
    assert "The run: 2 execution agents" in design_prompt("communication", MACRO, "Do C.")
    compact = compact_prompt("communication", DEFAULT_CODE["communication"], "Do C.")
    assert compact.startswith("MODULE: LLM4Communication\n")
    assert "returns the agent's message, float32 [..., M], 1 <= M <= 16." in compact


def test_multi_agent_token_budgets_are_multiples_of_64():
    budgets = {k: p.max_new_tokens for k, p in MICRO_PROMPTS.items()}
    assert budgets == {
        "reward": 640,
        "network": 640,
        "imagination": 512,
        "profiling": 576,  # urgent_and_patient: 372 SmolLM2 tokens, x 1.4 = 521
        "communication": 256,  # inventory_broadcast: 177 tokens, x 1.4 = 248
    }


def test_macro_prompt_describes_several_agents_only_when_there_are():
    single = macro_prompt(54, 5, 10, agents=1, scenario="team", algorithm="mappo",
                          communication=True)  # fmt: skip
    assert single == MACRO and "Several agents" not in MACRO and "one-hot" not in MACRO
    three = macro_prompt(54, 5, 10, agents=3, communication=True)
    assert three.startswith(MACRO.rstrip() + "\n\n## Several agents (N = 3, IPPO, independent")
    assert "its input is an agent's observation plus its one-hot\nagent index (3 numbers)" in three
    assert "plus the mean of the other agents' last messages (M numbers" in three
    assert "D + 3 + M numbers" in three
    assert "The score is the mean over every agent's validation orders." in three
    quiet = macro_prompt(54, 5, 10, agents=2, scenario="team", algorithm="mappo")
    assert "agent index (2 numbers): D + 2 numbers." in quiet and "messages" not in quiet
    assert (
        "MAPPO: a centralized critic" in quiet and "every agent trains on the team reward" in quiet
    )
    with pytest.raises(ValueError, match="agents must be >= 1, got 0"):
        macro_prompt(54, 5, 10, agents=0)


def test_the_debug_prompt_returns_the_error_after_the_original_prompt():
    """Self-debugging: the answered prompt, the rejected code, the one-line error and the
    answer format; a second round keeps the original prompt once, not the first round's
    rejected code."""
    from llm.prompts import REJECTED_HEADING, debug_prompt

    original = "MODULE: LLM4Reward\n\nWrite a reward.\nAnswer with code.\n"
    first = debug_prompt("reward", original, "import os\n", "static", "import of 'os'\n  no")
    assert first == (
        "MODULE: LLM4Reward\n\nWrite a reward.\nAnswer with code.\n\n"
        f"{REJECTED_HEADING}\n```python\nimport os\n```\n"
        "The validator rejected it at the static stage: import of 'os' no\n"
        "Delete that import and every use of it; use only the allowed modules.\n"
        "Fix that error and keep the rest of the design. Answer with one ```python block "
        "holding the complete code (imports and `def reward`).\n"
    )
    second = debug_prompt("reward", first, "", "parse", "no ```python block found")
    assert second.count(REJECTED_HEADING) == 1 and "import os" not in second
    assert second.startswith(original.rstrip() + "\n\n" + REJECTED_HEADING + "\n(no ```python")
    with pytest.raises(KeyError):
        debug_prompt("nope", original, "", "parse", "x")


def test_the_repeat_prompt_shows_the_repeated_program_and_what_it_repeats():
    """A repeat goes back after the answered prompt with its code, what it repeats (a
    shown program, or an earlier candidate's outputs) and the answer format; a repeat or
    debug prompt built on it keeps the original prompt once."""
    from llm.prompts import REJECTED_HEADING, REPEATED_HEADING, debug_prompt, repeat_prompt

    original = "MODULE: LLM4Agent\n\nWrite a network.\n"
    copy = repeat_prompt("network", original, "class Network: pass\n", None)
    assert copy == (
        "MODULE: LLM4Agent\n\nWrite a network.\n\n"
        f"{REPEATED_HEADING}\n```python\nclass Network: pass\n```\n"
        "It is a program shown above with only its names changed. Write a program that "
        "computes something different: other terms, inputs, structure or parameters. "
        "Answer with one ```python block holding the complete code (imports and "
        "`class Network`).\n"
    )
    again = repeat_prompt("network", copy, "class Network: x = 1\n", "j2-c3")
    assert again.count(REPEATED_HEADING) == 1 and "pass" not in again
    assert "It computes the same outputs as candidate j2-c3, which the search has already " \
        "scored. Write a program" in again  # fmt: skip
    debug = debug_prompt("network", again, "", "parse", "no ```python block found")
    assert REPEATED_HEADING not in debug and "x = 1" not in debug
    assert debug.startswith(original.rstrip() + "\n\n" + REJECTED_HEADING)
    with pytest.raises(KeyError):
        repeat_prompt("nope", original, "", None)


# Reasons the validator gave Qwen2.5-Coder-1.5B's imaginations, rewards and networks on
# 2026-11-26, each with the start of the hint it gets.
RECORDED_REASONS = [
    ("line 2: import from 'typing' is not allowed (allowed: flax.linen, functools, jax, "
     "jax.lax, jax.nn, jax.numpy, jax.random, math)", "Delete that import and every use of "
     "it, type hints included"),
    ("line 2: import of 'jax.numpy.linalg' is not allowed (allowed: flax.linen, functools, "
     "jax, jax.lax, jax.nn, jax.numpy, jax.random, math)", "Delete that import and every use "
     "of it; use only"),
    ("line 3: star imports are not allowed", "Replace `from ... import *`"),
    ("line 5: function '__init__' contains '__' (dunder names are not allowed)",
     "Remove every name with two underscores"),
    ("no top-level function 'def imagine(key, price, volume, params)'",
     "Write the entry point exactly"),
    ("TypeError: 'imagine' is not a function", "Write the entry point exactly"),
    ("line 8: TracerBoolConversionError: Attempted boolean conversion of traced array with "
     "shape bool[]. This BatchTracer with object id 140082097115328 was", "A Python `if`"),
    ("line 9: ValueError: The truth value of an array with more than one element is "
     "ambiguous. Use a.any() or a.all()", "A Python `if`"),
    ("line 9: TypeError: Only scalar arrays can be converted to Python scalars; got "
     "arr.ndim=1", "A Python `if`"),
    ("line 10: NameError: name 'params' is not defined", "`params` exists only inside"),
    ("line 6: NameError: name 'VOL_SCALE' is not defined", "Define that name"),
    ("line 12: AttributeError: module 'jax.numpy' has no attribute 'random'",
     "That module has no such name"),
    ("line 18: AttributeError: 'EnvParams' object has no attribute 'benchmark_price'",
     "That field does not exist"),
    ("ValueError: imagined volatility out of bounds on day 0 of 12: 0x the source's, "
     "allowed [1/4, 4]", "The imagined day moved too far"),
    ("ValueError: imagined volume has shape (12, 389), expected (12, 390) (the source "
     "day's)", "Return arrays of exactly the shape"),
    ("line 5: AttributeError: module 'jax.nn' has no attribute 'Module'",
     "Modules come from flax"),
    ("line 2: ImportError: cannot import name 'nn' from '<unknown module name>' (unknown "
     "location)", "Modules come from flax"),
    ("line 27: attributes may only be assigned as self.<name> inside a method",
     "Declare each setting as a class field"),
    ("line 22: ValueError: Incompatible types for broadcasting: input type=float32[2] and "
     "requested type=float32[3]", "The bias (0, log 0.5) has 2 entries"),
    ("ValueError: network has 1635843 parameters, limit 1000000", "Use fewer or narrower"),
    ("line 26: TypeError: Cannot concatenate arrays with different numbers of dimensions: "
     "got (64, 2), (1,).", "Concatenate arrays of the same number of axes"),
    ("line 18: TypeError: zeros() missing 2 required positional arguments: 'key' and "
     "'shape'", "`nn.initializers.zeros` and `nn.initializers.ones` are initializers"),
    ("line 21: TypeError: zeros() missing 1 required positional argument: 'shape'",
     "`nn.initializers.zeros` and `nn.initializers.ones` are initializers"),
    ("line 18: AttributeError: module 'jax.numpy' has no attribute 'variance_scaling'",
     "Initializers live in `nn.initializers`"),
    ('line 22: AttributeError: "Network" object has no attribute "action_multiples".',
     "A flax module has only the fields declared in its class body"),
    ("ValueError: reward must be an array scalar, got NoneType",
     "Your `reward` function returned nothing"),
    ("line 21: TypeError: 'Dense' object is not subscriptable", "`nn.Dense(n, ...)` only builds"),
    ("line 21: UnboundLocalError: cannot access local variable 'policy' where it is not "
     "associated with a value", "That variable is read on a path"),
    ("rejected at the runtime stage: ValueError: reward term name 'total' is reserved for "
     "the sum of the terms, which the framework computes: return only the terms",
     "Delete the `\"total\"` entry"),
    ("rejected at the runtime stage: ValueError: reward term 'volume_share' must be "
     "float32, got int32", "Make every term a float32 array"),
    # Profiles and communication modules, 2026-11-27.
    ("line 3: ImportError: cannot import name 'linear_message' from '<unknown module name>' "
     "(unknown location)", "Import modules only"),
    ("line 10: IndexError: Too many indices: array is 0-dimensional, but 1 were indexed",
     "That value is a scalar"),
    ("line 10: IndexError: Too many indices: array is 2-dimensional, but 3 were indexed",
     "Index the feature axis with an ellipsis"),
    ("line 13: ValueError: axis 1 is out of bounds for array of dimension 1",
     "Index the feature axis with an ellipsis"),
    ("line 11: TypeError: Cannot concatenate arrays with different numbers of dimensions: "
     "got (64,), (64, 2).", "Concatenate arrays of the same number of axes"),
    ("line 12: TypeError: Cannot concatenate arrays with shapes that differ in dimensions "
     "other than the one being concatenated: concatenating along dimension 0 for shapes "
     "(64, 4), (4, 1).", "Concatenate arrays of the same number of axes"),
    ("line 12: TypeError: Indexer must have integer or boolean type, got indexer with type "
     "float32", "Index with integers"),
    ("line 10: attribute '_args' is not allowed (private or introspection)",
     "Rename every attribute or method that starts with an underscore"),
    ("line 21: name 'summary' is not allowed", "Do not use that name"),
    ('line 15: AttributeError: "Communication" object has no attribute "window_len".',
     "A flax module has only the fields declared in its class body, and `obs`"),
    ("TypeError: Communication.__call__() missing 1 required positional argument: 'others'",
     "Give `__call__` exactly the arguments"),
    ("line 11: TypeError: clip() got an unexpected keyword argument 'a_max'",
     "Call `jnp.clip(x, low, high)`"),
    ("ValueError: profile dict: missing keys [], unknown keys ['participation_cap']",
     "Return a dict with exactly the five keys"),
    # Not rejected then: the validator's reason (since 2026-11-27) for the unit error
    # behind the 1.5B's best index rewards (tests/llm/programs/runtime_reward_in_shares).
    ("rejected at the runtime stage: ValueError: reward reaches 7.97e+08 in one step on "
     "real transitions, limit 10000: rewards are bps times params.reward_scale (the "
     "default's stay within 20), so a term is in the wrong units (shares or prices where "
     "bps are expected)", "Write every term in bps of the order"),
]  # fmt: skip


@pytest.mark.parametrize(("reason", "start"), RECORDED_REASONS)
def test_recorded_rejections_get_the_hint_for_their_kind_of_error(reason, start):
    """Self-debugging: each recorded reason of the 1.5B gets the fix hint for its kind
    of error in the debug prompt, on the line after the reason."""
    from llm.prompts import debug_hint, debug_prompt

    assert debug_hint(reason).startswith(start)
    text = debug_prompt("imagination", "MODULE: LLM4Imagine\n", "x = 1\n", "static", reason)
    assert f"{' '.join(reason.split())}\n{debug_hint(reason)}\nFix that error" in text


def test_a_tuple_field_read_as_an_array_gets_the_tuple_hint_not_the_field_hint():
    """``self.action_multiples.size`` (the 1.5B wrote it in a retry, where an earlier
    error hid it) fails on a tuple; the hint names ``len``, not missing fields."""
    from llm.prompts import debug_hint

    hint = debug_hint("line 20: AttributeError: 'tuple' object has no attribute 'size'")
    assert hint.startswith("A tuple or list has no array attributes")
    assert "len(x)" in hint
    assert debug_hint("AttributeError: 'EnvState' object has no attribute 'pa'").startswith(
        "That field does not exist"
    )


def test_an_error_without_a_hint_gets_the_plain_debug_prompt():
    from llm.prompts import debug_hint, debug_prompt

    reason = "line 3: class keywords (metaclass=...) are not allowed"
    assert debug_hint(reason) == ""
    text = debug_prompt("network", "MODULE: LLM4Agent\n", "x = 1\n", "static", reason)
    assert f"{reason}\nFix that error and keep the rest of the design." in text


def test_every_design_prompt_states_the_rules_the_validator_checks():
    """The rules name the validator's own allow-list, and every prompt states them."""
    assert ", ".join(sorted(ALLOWED_IMPORTS)) in CODE_RULES
    assert "jnp.where(cond, a, b)" in CODE_RULES and "no `params[" in CODE_RULES
    for kind in MICRO_PROMPTS:
        assert CODE_RULES in design_prompt(kind, MACRO, "Do X.")
    reward_inputs = MICRO_PROMPTS["reward"].inputs
    state, params = reward_inputs.split("`params`")
    for name in ("inventory", "quantity", "last_qty", "last_price", "benchmark_price", "pace"):
        assert name in state and name in field_docs(EnvState)
    for name in ("reward_scale", "urgency", "side", "terminal_penalty_bps"):
        assert name in params and name in field_docs(EnvParams)


def test_profile_contract_validation_and_the_shared_field_list_agree():
    from llm.validate._child import _profile_param_types
    from serl_jax.components.profiling import PROFILE_PARAM_FIELDS

    profile_params, profile_data = _profile_param_types()
    handed = [f.name for f in dataclasses.fields(profile_params) if f.name != "data"]
    handed += [f"data.{f.name}" for f in dataclasses.fields(profile_data)]
    assert tuple(handed) == PROFILE_PARAM_FIELDS
    contract = MICRO_PROMPTS["profiling"].contract
    assert [f for f in PROFILE_PARAM_FIELDS if f"`params.{f}`" not in contract] == []
    assert (
        "`params`: fields side, quantity_low, quantity_high, min_window_len, data.num_slots "
        "(data.num_slots is T, the minutes in the day)." in MICRO_PROMPTS["profiling"].inputs
    )


def test_macro_names_the_market_and_the_mean_variance_score():
    static = macro_prompt(obs_dim=54, num_features=5, lookback=10)
    impact = macro_prompt(
        obs_dim=54, num_features=5, lookback=10, score="mean_variance", market="propagator"
    )
    assert "propagator" not in static and "mean-variance" not in static
    assert "propagator" in impact and "mean-variance objective" in impact
    assert static == MACRO  # the static market's prompt is unchanged
    with pytest.raises(KeyError):
        macro_prompt(obs_dim=54, num_features=5, lookback=10, market="no_such_market")
