"""Assembles the prompts of one outer iteration.

Layout of a design prompt (the offline designer and tests rely on the marked lines)::

    <macro prompt>
    MODULE: LLM4Reward
    <contract and the default implementation in a python block>
    ## Past candidates (ascending shortfall, best last)
    ### Candidate j1-c0 | shortfall -13.52 bps | PA -18.20 | WR 0.40 | GLR 0.9 | AFI 0.000
    <its instruction>
    ```python
    <its code>
    ```
    ## Feedback on the previous iteration
    <per candidate: validation errors, crashes, metrics and reward-term statistics>
    ## Instructions
    <the current instruction>
    <answer format>

The refinement prompt (macro-micro refinement of the high-level DEK) starts with
``MODULE: InstructionRefinement`` and lists past instructions as
``### Instruction <n> | shortfall <x> bps`` followed by a ``text`` block; the answer is
the new instruction in a ``text`` block (:func:`parse_instruction`).

The debug prompt (self-debugging, ``loop.repair_attempts``, :func:`debug_prompt`) is the
rejected candidate's own prompt followed by its code and the validator's one-line
error::

    <the prompt the rejected candidate answered>
    ## Your answer was rejected
    ```python
    <its code, after the repair pass>
    ```
    The validator rejected it at the <stage> stage: <reason>
    <fix instruction and answer format>

The score in the headers is the run's ``loop.score``, labelled ``shortfall`` or ``PA``
(:data:`serl_jax.config.LOOP_SCORES`).

The compact prompt (``loop.prompt_style = "compact"``, :func:`compact_prompt`) is for
small models, which lose their way in the full prompt's ~2,300 tokens: the module line,
the entry point's signature in one line, its inputs, the rules every program follows
(:data:`llm.prompts.micro.CODE_RULES`: allowed imports, no Python control flow on traced
values, no invented inputs), one program to edit (the best past candidate of the module,
else the default) and one edit instruction::

    MODULE: LLM4Reward
    <one-line task, the signature>
    Inputs: <the inputs, their shapes, the fields it may read>
    <the rules>
    ```python
    <the code to edit>
    ```
    Task: <the instruction>
    <answer format>

The search prompts of a FunSearch-style search (:mod:`llm.prompts.search`) reuse the
contract, the compact prompt's head (:func:`compact_head`) and the answer formats, show
their programs under the same ``### Candidate`` headers and add a ``SEARCH: <kind>`` line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from llm.dek.high_level import BufferEntry
from llm.prompts.micro import (
    CODE_RULES,
    MICRO_PROMPTS,
    communication_contract,
    imagination_contract,
    profiling_contract,
)
from serl_jax.config import ImagineConfig, MarlConfig

__all__ = [
    "COMPACT_INSTRUCTION",
    "DEBUG_HINTS",
    "DEFAULT_INSTRUCTION",
    "INSTRUCTION_MAX_WORDS",
    "REFINEMENT_MODULE",
    "REFINEMENT_TOKENS",
    "REJECTED_HEADING",
    "REPEATED_HEADING",
    "compact_head",
    "compact_prompt",
    "debug_hint",
    "debug_prompt",
    "design_prompt",
    "parse_instruction",
    "refinement_prompt",
    "repeat_prompt",
]

REFINEMENT_MODULE = "InstructionRefinement"
#: Token budget of a refinement completion: an instruction of at most 120 words (about
#: 160-200 tokens) and a description line.
REFINEMENT_TOKENS = 320

DEFAULT_INSTRUCTION = (
    "Improve on the best past candidates: keep what made them score well, change one idea "
    "at a time, and explain the change in one sentence before the code."
)

#: The compact prompt's instruction until a refinement replaces it: one small, concrete
#: edit a small model can make without breaking the code.
COMPACT_INSTRUCTION = (
    "Copy the code and change one number in it (a constant, a weight or a layer width); "
    "keep everything else exactly as it is."
)

_ANSWER_FORMAT = {
    "reward": "Answer with one ```python block holding the complete code "
    "(imports and `def reward`).",
    "network": "Answer with one ```python block holding the complete code "
    "(imports and `class Network`).",
    "imagination": "Answer with one ```python block holding the complete code "
    "(imports and `def imagine`).",
    "profiling": "Answer with one ```python block holding the complete code "
    "(imports and `def profile`).",
    "communication": "Answer with one ```python block holding the complete code "
    "(imports and `class Communication`).",
}


def _format_metrics(metrics) -> str:
    parts = []
    shown = (
        ("pa", "PA", ".2f"), ("shortfall", "shortfall", ".2f"),
        ("wr", "WR", ".2f"), ("glr", "GLR", ".2f"), ("afi", "AFI", ".3f"),
    )  # fmt: skip
    for key, label, fmt in shown:
        value = metrics.get(key)
        if value is not None:
            parts.append(f"{label} {value:{fmt}}")
    return "".join(f" | {p}" for p in parts)


def _contract(kind: str, imagine: ImagineConfig | None, marl: MarlConfig | None) -> str:
    """A module's contract, for a run's ``imagine`` or ``marl`` section where it depends
    on one (:func:`design_prompt`)."""
    if kind == "imagination" and imagine is not None:
        return imagination_contract(imagine)
    if kind == "profiling" and marl is not None:
        return profiling_contract(marl)
    if kind == "communication" and marl is not None:
        return communication_contract(marl)
    return MICRO_PROMPTS[kind].contract


def design_prompt(
    kind: str,
    macro: str,
    instruction: str,
    examples: Sequence[BufferEntry] = (),
    feedback: str = "",
    score_label: str = "PA",
    imagine: ImagineConfig | None = None,
    marl: MarlConfig | None = None,
    example: str | None = None,
) -> str:
    """The prompt asking for one module's code.

    Args:
        kind: the slot (a key of :data:`llm.prompts.micro.MICRO_PROMPTS`).
        macro: the macro prompt (:func:`llm.prompts.macro.macro_prompt`).
        instruction: the current instruction for this module.
        examples: in-context examples in the order to show (ascending score).
        feedback: reflection text on the previous iteration (may be empty).
        score_label: the name of the examples' score (``PA`` or ``shortfall``).
        imagine: the run's ``imagine`` section, whose ratio and bounds the LLM4Imagine
            contract states (default: the built-in defaults).
        marl: the run's ``marl`` section, whose agents, algorithm, scenario and
            evaluation profiles the LLM4Profiling and LLM4Communication contracts state
            (default: the contracts for two agents).
        example: the program shown after the contract (default: the module's
            ``default_code``; the loop passes one of the micro prompt's ``examples`` per
            sample).

    Returns:
        The prompt text.

    Raises:
        KeyError: unknown ``kind``.
    """
    micro = MICRO_PROMPTS[kind]
    shown = micro.default_code if example is None else example
    parts = [
        macro.rstrip(),
        f"MODULE: {micro.module}",
        _contract(kind, imagine, marl),
        CODE_RULES,
        f"{micro.default_label}:\n```python\n{shown.rstrip()}\n```",
    ]
    if examples:
        shown = [f"## Past candidates (ascending {score_label}, best last)"]
        for e in examples:
            shown.append(
                f"### Candidate {e.candidate_id} | {score_label} {e.score:.2f} bps"
                f"{_format_metrics(e.metrics)}\n"
                f"Instruction: {e.instruction}\n```python\n{e.code.rstrip()}\n```"
            )
        parts.append("\n".join(shown))
    if feedback.strip():
        parts.append(f"## Feedback on the previous iteration\n{feedback.rstrip()}")
    parts.append(f"## Instructions\n{instruction.strip()}\n{_ANSWER_FORMAT[kind]}")
    return "\n\n".join(parts) + "\n"


def compact_prompt(kind: str, code: str, instruction: str) -> str:
    """The compact design prompt (module docstring): one program and one edit.

    Args:
        kind: the slot (a key of :data:`llm.prompts.micro.MICRO_PROMPTS`).
        code: the program to edit (the module's best past candidate, or the default).
        instruction: the edit to make.

    Returns:
        The prompt text.

    Raises:
        KeyError: unknown ``kind``.
    """
    return (
        f"{compact_head(kind)}\n\n"
        f"```python\n{code.rstrip()}\n```\n\n"
        f"Task: {instruction.strip()}\n{_ANSWER_FORMAT[kind]}\n"
    )


def compact_head(kind: str) -> str:
    """The compact prompt's first part: the module line, the one-line task with the entry
    point's signature, its inputs and :data:`~llm.prompts.micro.CODE_RULES` (no trailing
    newline; the search prompt's compact style starts with it too).

    Args:
        kind: the slot (a key of :data:`llm.prompts.micro.MICRO_PROMPTS`).

    Returns:
        The text.

    Raises:
        KeyError: unknown ``kind``.
    """
    micro = MICRO_PROMPTS[kind]
    return (
        f"MODULE: {micro.module}\n\n"
        "You write Python code with JAX for an agent that sells or buys a large order in "
        f"small pieces over a trading day. {micro.signature}\nInputs: {micro.inputs}\n\n"
        f"{CODE_RULES}"
    )


REJECTED_HEADING = "## Your answer was rejected"
"""The heading that starts the self-debugging part of a debug prompt."""

REPEATED_HEADING = "## Your answer repeats a program"
"""The heading that starts the part of a repeat prompt (:func:`repeat_prompt`) that shows
the repeated program."""


DEBUG_HINTS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), hint)
    for pattern, hint in (
        (
            r"import (?:of|from) '(?:typing|numpy)",
            "Delete that import and every use of it, type hints included: write the code "
            "with `jax.numpy as jnp` only, with no type hints.",
        ),
        (
            r"import (?:of|from) '",
            "Delete that import and every use of it; use only the allowed modules.",
        ),
        (
            r"star imports",
            "Replace `from ... import *` with `import jax.numpy as jnp` (and `import jax` "
            "if needed), and write `jnp.name(...)`.",
        ),
        (
            r"contains '__'",
            "Remove every name with two underscores, such as `__init__`: write plain "
            "functions, or a flax module with `@nn.compact def __call__` and no "
            "`__init__`.",
        ),
        (
            r"no top-level (?:function|'class)|is not a function|is not a flax",
            "Write the entry point exactly as the signature above says, at the top level "
            "of the program (not inside a class or another function).",
        ),
        (
            r"TracerBoolConversion|truth value of an array|ConcretizationTypeError|"
            r"Only scalar arrays can be converted|TracerIntegerConversion",
            "A Python `if`, `and`, `or`, `bool()`, `int()` or `float()` touched a JAX "
            "array: compute both values and choose with `jnp.where(cond, a, b)`, or use "
            "`jnp.minimum`, `jnp.maximum`, `jnp.clip`.",
        ),
        (
            r"NameError: name 'params' is not defined",
            "`params` exists only inside your function, as its argument: read it there, "
            "never at module level or in a helper that does not receive it.",
        ),
        (
            r"NameError: name '",
            "Define that name in your program (a constant at module level or a helper "
            "function) or do not use it: only imports are predefined.",
        ),
        (
            r"AttributeError: module '[\w.]+' has no attribute 'Module'|"
            r"cannot import name 'nn'",
            "Modules come from flax: write `import flax.linen as nn` and "
            "`class Network(nn.Module)`.",
        ),
        (
            r"AttributeError: module '[\w.]+' has no attribute '(?:variance_scaling|"
            r"glorot_\w+|lecun_\w+|he_\w+|orthogonal|constant|initializers)'",
            "Initializers live in `nn.initializers`: `nn.initializers.variance_scaling(...)`"
            ", `nn.initializers.constant(value)`, `nn.initializers.zeros`.",
        ),
        (
            r"AttributeError: module '[\w.]+' has no attribute",
            "That module has no such name: use the functions it has (randomness is "
            "`jax.random`, never `jnp.random`), or define your own.",
        ),
        (
            r"attributes may only be assigned as self",
            "Declare each setting as a class field with a default in the class body, such "
            "as `action_multiples: tuple = (0.5, 1.0, 2.0)`, and delete every "
            "`name.attribute = ...` outside a method.",
        ),
        (
            r"Incompatible types for broadcasting: input type=float32\[2\]",
            "The bias (0, log 0.5) has 2 entries, so the policy head must be "
            "`nn.Dense(2, ...)`; only with a class field `action_multiples` of K numbers "
            "does it output K logits, then with `bias_init=nn.initializers.zeros`.",
        ),
        (
            r"network has \d+ parameters, limit",
            "Use fewer or narrower hidden layers so the network has at most 1,000,000 parameters.",
        ),
        (
            r"(?:zeros|ones)\(\) missing [12] required positional arguments?: (?:'key' and )?"
            r"'shape'",
            "`nn.initializers.zeros` and `nn.initializers.ones` are initializers already: "
            "pass them without parentheses, as `bias_init=nn.initializers.zeros` "
            "(`jnp.zeros(shape)` is an array, and needs its shape).",
        ),
        (
            r"AttributeError: \"Network\" object has no attribute",
            "A flax module has only the fields declared in its class body: declare it there "
            "with a default, such as `action_multiples: tuple = (0.5, 1.0, 2.0)`, or do not "
            "read `self.` that name.",
        ),
        (
            r"AttributeError: '(?:tuple|list)' object has no attribute",
            "A tuple or list has no array attributes such as `.size` or `.shape`: use "
            "`len(x)` for its length, or `jnp.asarray(x)` for an array.",
        ),
        (
            r"AttributeError: '\w+' object has no attribute",
            "That field does not exist: read only the fields the prompt lists for that "
            "object, and compute anything else from them.",
        ),
        (
            r"reward must be an array scalar, got NoneType",
            "Your `reward` function returned nothing: end it with `return` and the dict of "
            "named terms, as the example does.",
        ),
        (
            r"'Dense' object is not subscriptable",
            "`nn.Dense(n, ...)` only builds a layer: call it on the features, as "
            "`policy = nn.Dense(2, ...)(actor)`, and index what it returns.",
        ),
        (
            r"UnboundLocalError: cannot access local variable",
            "That variable is read on a path where it was never assigned: assign it once, "
            "before any loop or branch, and choose between values with `jnp.where`.",
        ),
        (
            r"reward term name 'total' is reserved",
            'Delete the `"total"` entry from the returned dict, and the variable that '
            "computes it: return only the separate terms, and the framework adds them up.",
        ),
        (
            r"reward term '\w+' must be float32",
            "Make every term a float32 array: write float constants (`1.0`, not `1`) and "
            "convert integer fields such as `time` with `.astype(jnp.float32)` before "
            "using them.",
        ),
        (
            r"ImportError: cannot import name",
            "Import modules only (`import flax.linen as nn`, `import jax.numpy as jnp`) and "
            "define every helper in your program: names such as the example's "
            "`linear_message` cannot be imported.",
        ),
        (
            r"Too many indices: array is 0-dimensional",
            "That value is a scalar: use it without an index.",
        ),
        (
            r"Too many indices: array is \d+-dimensional|axis -?\d+ is out of bounds for "
            r"array of dimension",
            "Index the feature axis with an ellipsis, as `obs[..., :6]` or `obs[..., 3]`, "
            "never `obs[:, 3]`, and reduce with `axis=-1`: the code runs on one observation "
            "[D] as well as on batches [..., D].",
        ),
        (
            r"Indexer must have integer or boolean type",
            "Index with integers: Python int constants, or a computed index converted with "
            "`.astype(jnp.int32)`.",
        ),
        (
            r"attribute '_\w*' is not allowed",
            "Rename every attribute or method that starts with an underscore (write "
            "`self.helper`, not `self._helper`), and use only the public names of jax and "
            "flax.",
        ),
        (
            r"name '\w+' is not allowed(?!:)",
            "Do not use that name: if it is your own variable or function, rename it.",
        ),
        (
            r'AttributeError: "Communication" object has no attribute',
            "A flax module has only the fields declared in its class body, and `obs` is its "
            "only input: compute what you need from `obs` (its first 6 features are the "
            "agent's own), or declare a field with a default.",
        ),
        (
            r"__call__\(\) missing \d+ required positional argument",
            "Give `__call__` exactly the arguments the signature above shows: the framework "
            "passes nothing else (it averages the other agents' messages itself).",
        ),
        (
            r"clip\(\) got an unexpected keyword argument",
            "Call `jnp.clip(x, low, high)` with the bounds by position.",
        ),
        (
            r"profile dict: missing keys",
            "Return a dict with exactly the five keys `side`, `quantity`, `start`, "
            "`window_len` and `urgency`, and no others.",
        ),
        (
            r"reward reaches \S+ in one step",
            "Write every term in bps of the order: a price difference as "
            "`(price / benchmark - 1.0) * 1e4`, a share count as a fraction of the order "
            "(`shares / next_state.quantity`), then times `params.reward_scale`.",
        ),
        (
            r"out of bounds on day",
            "The imagined day moved too far from the real day: keep the day's own log "
            "returns and volumes and change them by moderate factors (0.5 to 2).",
        ),
        (
            r"Cannot concatenate arrays with",
            "Concatenate arrays of the same number of axes along `axis=-1`: keep the feature "
            "axis when you slice (`obs[..., 2:3]`, not `obs[..., 2]`), and return arrays of "
            "exactly the shape the signature above states.",
        ),
        (
            r"has shape .*expected",
            "Return arrays of exactly the shape the signature above states.",
        ),
    )
)
"""How to fix the validator's commonest rejections, by a pattern of its one-line reason;
the first match is added after the reason (:func:`debug_hint`). Qwen2.5-Coder-1.5B's
self-debugging retries repeated their error when told only the reason (2026-11-26: of
14 imaginations rejected after repair, 2 were fixed in two rounds; ``typing`` imports,
star imports, ``__init__`` and a missing ``def imagine`` came back in both rounds; of 10
networks, 4 changed the policy head's size but not its 2-entry bias)."""


def debug_hint(reason: str) -> str:
    """The fix hint for a validator reason (:data:`DEBUG_HINTS`), or "" when none fits.

    Args:
        reason: the validator's one-line reason.

    Returns:
        One sentence or two, or "".
    """
    for pattern, hint in DEBUG_HINTS:
        if pattern.search(reason):
            return hint
    return ""


def debug_prompt(kind: str, prompt: str, code: str, stage: str, reason: str) -> str:
    """The prompt that sends a rejected candidate back to the model with its validation
    error, and a hint on how to fix that kind of error where :data:`DEBUG_HINTS` has one,
    for it to fix (self-debugging, as in Eureka, Ma et al. 2023, and Reflexion, Shinn et
    al. 2023).

    Args:
        kind: the slot (a key of :data:`llm.prompts.micro.MICRO_PROMPTS`).
        prompt: the prompt the rejected candidate answered (the design prompt, or the
            previous debug prompt's first part); it keeps the module line and contract.
        code: the candidate's code after the repair pass ("" when no code block was
            found).
        stage: where it was rejected: ``parse`` (no code), ``static`` (stage 1) or
            ``runtime`` (stage 2).
        reason: the validator's one-line reason.

    Returns:
        The prompt text.

    Raises:
        KeyError: unknown ``kind``.
    """
    head = _first_part(prompt)
    shown = f"```python\n{code.rstrip()}\n```\n" if code.strip() else "(no ```python block)\n"
    hint = debug_hint(reason)
    hint = f"{hint}\n" if hint else ""
    return (
        f"{head}\n\n{REJECTED_HEADING}\n{shown}"
        f"The validator rejected it at the {stage} stage: {' '.join(reason.split())}\n"
        f"{hint}Fix that error and keep the rest of the design. "
        f"{_ANSWER_FORMAT[kind]}\n"
    )


def repeat_prompt(kind: str, prompt: str, code: str, duplicate_of: str | None) -> str:
    """The prompt that sends a valid candidate back because it repeats a program: a copy
    of a program its prompt showed (:func:`serl_jax.loop.novelty.is_copy`), or a program
    that computes the same outputs as an earlier candidate
    (:func:`serl_jax.loop.novelty.same_outputs`). The search scores a repeat with the
    first program's score and never trains it, so its answer adds nothing unless the
    designer tries again (FunSearch discards such samples; Romera-Paredes et al. 2024).

    Args:
        kind: the slot (a key of :data:`llm.prompts.micro.MICRO_PROMPTS`).
        prompt: the prompt the candidate answered; as in :func:`debug_prompt`, only its
            part before a rejected or repeated answer is kept.
        code: the candidate's code.
        duplicate_of: the id of the earlier candidate with the same outputs, or None for
            a copy of a program the prompt showed.

    Returns:
        The prompt text.

    Raises:
        KeyError: unknown ``kind``.
    """
    same = (
        "It is a program shown above with only its names changed."
        if duplicate_of is None
        else f"It computes the same outputs as candidate {duplicate_of}, which the search "
        "has already scored."
    )
    return (
        f"{_first_part(prompt)}\n\n{REPEATED_HEADING}\n```python\n{code.rstrip()}\n```\n"
        f"{same} Write a program that computes something different: other terms, inputs, "
        f"structure or parameters. {_ANSWER_FORMAT[kind]}\n"
    )


def _first_part(prompt: str) -> str:
    """A prompt without the rejected or repeated answer a debug or repeat prompt added."""
    for heading in (REJECTED_HEADING, REPEATED_HEADING):
        prompt = prompt.split(f"\n{heading}\n", 1)[0]
    return prompt.rstrip()


def refinement_prompt(
    macro: str,
    current: str,
    scored: Sequence[tuple[str, float]],
    feedback: str = "",
    score_label: str = "PA",
) -> str:
    """The prompt asking the model to rewrite the design instruction (macro-micro
    refinement).

    Args:
        macro: the macro prompt.
        current: the instruction in use.
        scored: past instructions with the best score obtained under each, in the order
            to show (ascending, best last).
        feedback: a summary of the last iteration.
        score_label: the score's name (``PA`` or ``shortfall``).

    Returns:
        The prompt text.
    """
    shown = "\n".join(
        f"### Instruction {i} | {score_label} {score:.2f} bps\n```text\n{text.strip()}\n```"
        for i, (text, score) in enumerate(scored)
    )
    parts = [
        macro.rstrip(),
        f"MODULE: {REFINEMENT_MODULE}",
        "You write the instructions that guide the design of reward functions, networks, "
        "imagined training days, agent profiles and messages for the task above. Past "
        "instructions and the best "
        f"{score_label} reached under each (ascending, best last):",
        shown or "(none yet)",
    ]
    if feedback.strip():
        parts.append(f"## Feedback on the last iteration\n{feedback.rstrip()}")
    parts.append(
        f"## Current instruction\n```text\n{current.strip()}\n```\n"
        "Write an improved instruction (at most 120 words) that is likely to lead to "
        f"a higher {score_label}. Answer with one ```text block."
    )
    return "\n\n".join(parts) + "\n"


_TEXT_BLOCK = re.compile(r"```(?:text|markdown|md)?[ \t]*\n(.*?)```", re.S)


#: Words a refined instruction may have: the prompt asks for at most 120; the rest is
#: slack for a model that counts loosely.
INSTRUCTION_MAX_WORDS = 160


def parse_instruction(completion: str, max_words: int = INSTRUCTION_MAX_WORDS) -> str:
    """The new instruction from a refinement completion: the first ``text`` (or
    untagged) fenced block, else the whole text, stripped.

    An instruction longer than ``max_words`` is refused, not cut: Qwen2.5-Coder-1.5B
    answered with 320 tokens of Markdown essay ending mid-sentence (2026-11-26), and as
    the instruction of every design prompt it told the next designs to "replace the
    current default reward" (one came back as a flax module with a ``total`` term).

    Args:
        completion: the model's text.
        max_words: the most whitespace-separated words accepted.

    Returns:
        The instruction text.

    Raises:
        ValueError: the completion holds no text, or more than ``max_words`` words (one
            line; the loop then keeps its current instruction).
    """
    match = _TEXT_BLOCK.search(completion)
    text = (match.group(1) if match else completion).strip()
    if not text:
        raise ValueError("the refinement completion holds no instruction text")
    words = len(text.split())
    if words > max_words:
        raise ValueError(
            f"the refined instruction has {words} words, over the limit of {max_words} "
            "(the prompt asks for at most 120)"
        )
    return text
