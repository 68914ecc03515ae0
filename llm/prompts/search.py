"""Search prompts: best-shot prompting with evolutionary operators.

FunSearch (Romera-Paredes et al. 2024, Nature) shows a model a few programs of one island
in ascending score and asks for a better one ("best-shot prompting");
Evolution of Heuristics (EoH, Liu et al. 2024) asks for offspring through distinct
operators. :func:`search_prompt` writes one prompt per operator
(:data:`SEARCH_PROMPT_KINDS`):

- ``better``: the programs with their scores; write one that scores higher than all.
- ``form``: write a program of a different form (other terms or structure, not the same
  code with changed numbers).
- ``parameters``: keep the best program's structure and change its parameters
  (constants, weights, widths).
- ``crossover``: two programs from two islands; write one that combines ideas of both.

Layout of the full style (the offline designer reads the marked lines, as in
:mod:`llm.prompts.builder`)::

    <macro prompt>
    MODULE: LLM4Reward
    <contract>
    <CODE_RULES>
    ## Programs so far (ascending shortfall, best last)
    ### Candidate j1-c0 | shortfall -13.52 bps
    ```python
    <its code>
    ```
    ### Candidate ...
    SEARCH: better
    ## Task
    <the kind's instruction>
    <answer format>
    Make this change to candidate <best id> (the last program above): <hint>
                                  (with search.hints: llm.prompts.hints)

The compact style (``loop.prompt_style = "compact"``, for small models) replaces the
macro prompt, contract and rules by :func:`llm.prompts.builder.compact_head` (the module
line, the one-line task, the signature, the inputs and the rules) and keeps the rest.
The score label is written verbatim (``shortfall``, ``PA`` or ``mean-variance``,
:data:`serl_jax.config.LOOP_SCORES`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Protocol

from llm.prompts.builder import _ANSWER_FORMAT, _contract, compact_head
from llm.prompts.micro import CODE_RULES, MICRO_PROMPTS
from serl_jax.config import PROMPT_STYLES, SEARCH_PROMPT_KINDS, ImagineConfig, MarlConfig

__all__ = ["SEARCH_PROMPT_KINDS", "Shot", "in_prompt_order", "named_change", "search_prompt"]

_CHANGE = "Make this change to candidate {best} (the last program above): {hint}"
_CHANGE_LINE = re.compile(
    "^" + re.escape(_CHANGE).replace(r"\{best\}", r"(\S+)").replace(r"\{hint\}", "(.+)") + "$",
    re.M,
)  # read back by named_change: the same sentence as the builder writes


class Shot(Protocol):
    """A program shown in a search prompt (:class:`serl_jax.loop.islands.Program`,
    :class:`llm.dek.high_level.BufferEntry`)."""

    @property
    def candidate_id(self) -> str:
        """The candidate's id (``j2-c1``)."""

    @property
    def code(self) -> str:
        """Its source."""

    @property
    def score(self) -> float:
        """Its score in bps, higher is better."""


def _instruction(kind: str, label: str) -> str:
    """The task of one search kind."""
    goal = f"a higher {label} than every program above (higher is better)"
    return {
        "better": f"Write a new program that scores {goal}. Keep what the better programs "
        "do well, change what separates them from the worse ones, and say in one sentence "
        "before the code what you changed.",
        "form": "Write a program of a different form from the programs above: use different "
        "terms, inputs or structure, not the same code with changed numbers. Aim for "
        f"{goal}, and say in one sentence before the code what the new form is.",
        "parameters": "Keep the structure of the best program (the last one above) exactly "
        "and change only its parameters: constants, weights, widths. Aim for "
        f"{goal}, and say in one sentence before the code which parameters you changed.",
        "crossover": "The programs above come from separate lines of search. Write one "
        "program that combines ideas of both (for example a term, an input or a layer of "
        f"one added to the other). Aim for {goal}, and say in one sentence before the code "
        "what you took from each.",
    }[kind]


def _rank(score: float) -> float:
    """A score as a sort key: non-finite scores rank lowest."""
    return score if math.isfinite(score) else -math.inf


def in_prompt_order(shots: Sequence[Shot]) -> list[Shot]:
    """``shots`` in the order a search prompt shows them: ascending score, best last,
    non-finite scores first, ties in the given order."""
    return sorted(shots, key=lambda s: _rank(s.score))


def search_prompt(
    kind: str,
    module: str,
    shots: Sequence[Shot],
    *,
    score_label: str = "shortfall",
    macro: str = "",
    style: str = "full",
    imagine: ImagineConfig | None = None,
    marl: MarlConfig | None = None,
    hint: str | None = None,
) -> str:
    """The prompt asking for one module's program by one search operator (module
    docstring).

    Args:
        kind: the operator, one of :data:`SEARCH_PROMPT_KINDS`.
        module: the slot (a key of :data:`llm.prompts.micro.MICRO_PROMPTS`: ``reward``,
            ``network``, ...).
        shots: the programs to show (objects with ``candidate_id``, ``code`` and
            ``score`` in bps, higher is better; :class:`Shot`); shown in ascending score
            (best last; non-finite scores first), ties in the given order. ``crossover``
            needs two (the offline designer combines the first two shown).
        score_label: the score's name, written verbatim in the headers and the task.
        macro: the macro prompt (:func:`llm.prompts.macro.macro_prompt`); the full style
            only.
        style: ``full`` or ``compact`` (:data:`PROMPT_STYLES`).
        imagine: the run's ``imagine`` section, for the LLM4Imagine contract (full style;
            as :func:`llm.prompts.design_prompt`).
        marl: the run's ``marl`` section, for the LLM4Profiling and LLM4Communication
            contracts (full style).
        hint: one concrete change to make (:func:`llm.prompts.hints.draw_hint`), written
            as the last line: ``Make this change to candidate <id> (the last program
            above): <hint>``, with the best shown program's id; None writes none.

    Returns:
        The prompt text.

    Raises:
        ValueError: unknown ``kind``, ``module`` or ``style``, no ``shots``, or
            ``crossover`` with fewer than two (one line naming the argument).
    """
    if kind not in SEARCH_PROMPT_KINDS:
        raise ValueError(f"kind: expected one of {list(SEARCH_PROMPT_KINDS)}, got {kind!r}")
    if module not in MICRO_PROMPTS:
        raise ValueError(f"module: expected one of {list(MICRO_PROMPTS)}, got {module!r}")
    if style not in PROMPT_STYLES:
        raise ValueError(f"style: expected one of {list(PROMPT_STYLES)}, got {style!r}")
    if not shots:
        raise ValueError("shots: a search prompt needs at least one program to show")
    if kind == "crossover" and len(shots) < 2:
        raise ValueError(f"shots: crossover needs two programs, got {len(shots)}")
    if style == "full":
        parts = [
            macro.rstrip(),
            f"MODULE: {MICRO_PROMPTS[module].module}",
            _contract(module, imagine, marl),
            CODE_RULES,
        ]
    else:
        parts = [compact_head(module)]
    shown = [f"## Programs so far (ascending {score_label}, best last)"]
    for shot in in_prompt_order(shots):
        shown.append(
            f"### Candidate {shot.candidate_id} | {score_label} {shot.score:.2f} bps\n"
            f"```python\n{shot.code.rstrip()}\n```"
        )
    task = f"{_instruction(kind, score_label)}\n{_ANSWER_FORMAT[module]}"
    if hint:  # last, naming the program it changes: the 1.5B copied the first one shown
        best = in_prompt_order(shots)[-1].candidate_id
        task += "\n" + _CHANGE.format(best=best, hint=hint)
    parts += ["\n".join(shown), f"SEARCH: {kind}", f"## Task\n{task}"]
    return "\n\n".join(p for p in parts if p) + "\n"


def named_change(prompt: str) -> tuple[str, str] | None:
    """The change a search prompt names, read back from its text (:func:`search_prompt`'s
    last line with a ``hint``).

    Args:
        prompt: a prompt's text.

    Returns:
        ``(candidate id, hint)``: the program it changes and the sentence; None when the
        prompt names no change.
    """
    found = _CHANGE_LINE.search(prompt)
    return None if found is None else (found.group(1), found.group(2))
