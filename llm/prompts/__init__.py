"""Prompts of the SE-RL designer: macro (the task) + micro (one module), with the
high-level DEK's in-context examples, feedback and instruction refinement, and the search
prompts of a FunSearch-style search (:mod:`llm.prompts.search`).

Importing this package imports JAX (the field tables come from the environment's
dataclasses) but not torch.
"""

from llm.prompts.builder import (
    COMPACT_INSTRUCTION,
    DEBUG_HINTS,
    DEFAULT_INSTRUCTION,
    INSTRUCTION_MAX_WORDS,
    REFINEMENT_MODULE,
    REFINEMENT_TOKENS,
    REJECTED_HEADING,
    REPEATED_HEADING,
    compact_head,
    compact_prompt,
    debug_hint,
    debug_prompt,
    design_prompt,
    parse_instruction,
    refinement_prompt,
    repeat_prompt,
)
from llm.prompts.defaults import DEFAULT_CODE, default_code
from llm.prompts.macro import field_docs, macro_prompt
from llm.prompts.micro import MICRO_PROMPTS, MicroPrompt
from llm.prompts.search import SEARCH_PROMPT_KINDS, search_prompt

__all__ = [
    "COMPACT_INSTRUCTION",
    "DEBUG_HINTS",
    "DEFAULT_CODE",
    "DEFAULT_INSTRUCTION",
    "INSTRUCTION_MAX_WORDS",
    "MICRO_PROMPTS",
    "REFINEMENT_MODULE",
    "REFINEMENT_TOKENS",
    "REJECTED_HEADING",
    "REPEATED_HEADING",
    "SEARCH_PROMPT_KINDS",
    "MicroPrompt",
    "compact_head",
    "compact_prompt",
    "debug_hint",
    "debug_prompt",
    "default_code",
    "design_prompt",
    "field_docs",
    "macro_prompt",
    "parse_instruction",
    "refinement_prompt",
    "repeat_prompt",
    "search_prompt",
]
