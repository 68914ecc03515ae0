"""Search prompts (llm.prompts.search): layout, the offline designer's parser, errors."""

from __future__ import annotations

import re

import pytest

from llm.backends.offline import SEARCH_KINDS, parse_candidates
from llm.dek.high_level import BufferEntry
from llm.designs import library
from llm.prompts import (
    MICRO_PROMPTS,
    SEARCH_PROMPT_KINDS,
    compact_prompt,
    design_prompt,
    macro_prompt,
    search_prompt,
)
from llm.prompts.builder import _ANSWER_FORMAT
from llm.prompts.micro import CODE_RULES, imagination_contract, profiling_contract
from llm.prompts.search import named_change
from serl_jax.config import ImagineConfig, MarlConfig
from serl_jax.loop.islands import Program

MACRO = "You design components for optimal execution."
INSTRUCTIONS = {
    "better": "scores a higher",
    "form": "program of a different form",
    "parameters": "change only its parameters",
    "crossover": "combines ideas of both",
}


def shots(module: str = "reward", scores=(-1.5, -12.25, 3.0)) -> list[Program]:
    """Library programs of ``module`` with ``scores``, in the given (unsorted) order."""
    designs = library(module)
    return [Program(f"j{i}-c{i}", module, designs[i].code, score) for i, score in enumerate(scores)]


def test_programs_are_shown_in_ascending_score_with_their_scores():
    prompt = search_prompt("better", "reward", shots(), macro=MACRO)
    headers = re.findall(r"^### Candidate (\S+) \| shortfall (\S+) bps$", prompt, re.M)
    assert headers == [("j1-c1", "-12.25"), ("j0-c0", "-1.50"), ("j2-c2", "3.00")]
    assert "## Programs so far (ascending shortfall, best last)" in prompt
    # the score label is written verbatim
    prompt = search_prompt("better", "reward", shots(), score_label="mean-variance")
    assert "(ascending mean-variance, best last)" in prompt
    assert "### Candidate j2-c2 | mean-variance 3.00 bps" in prompt
    assert "a higher mean-variance than every program above" in prompt


def test_the_offline_parser_recovers_ids_scores_and_code():
    shown = shots("network", scores=(0.5, -2.0))
    for style in ("full", "compact"):
        for label in ("shortfall", "PA", "mean-variance"):
            prompt = search_prompt("form", "network", shown, score_label=label, style=style)
            parsed = parse_candidates(prompt)
            assert [(c.id, c.score, c.label) for c in parsed] == [
                ("j1-c1", -2.0, label),
                ("j0-c0", 0.5, label),
            ]
            assert [c.code for c in parsed] == [shown[1].code, shown[0].code]


def test_full_layout():
    marl = MarlConfig(agents=3)
    macro = macro_prompt(54, 5, 10, agents=3, communication=True)
    prompt = search_prompt("parameters", "profiling", shots("profiling"), macro=macro, marl=marl)
    contract = profiling_contract(marl)  # the run's, not the registry's two-agent one
    assert contract != MICRO_PROMPTS["profiling"].contract
    assert prompt.startswith(
        f"{macro.rstrip()}\n\nMODULE: LLM4Profiling\n\n{contract}\n\n{CODE_RULES}\n\n"
        "## Programs so far (ascending shortfall, best last)\n### Candidate "
    )
    tail = prompt.split("```\n\nSEARCH: parameters\n\n## Task\n", 1)[1]
    assert INSTRUCTIONS["parameters"] in tail
    assert tail.endswith(f"{_ANSWER_FORMAT['profiling']}\n")
    # the imagination contract follows the run's imagine section, as in design prompts
    imagine = ImagineConfig(ratio=0.25)
    assert imagination_contract(imagine) != MICRO_PROMPTS["imagination"].contract
    prompt = search_prompt("better", "imagination", shots("imagination"), imagine=imagine)
    assert f"MODULE: LLM4Imagine\n\n{imagination_contract(imagine)}\n\n{CODE_RULES}" in prompt
    assert f"\n\n{imagination_contract(imagine)}\n\n" in design_prompt(
        "imagination", "", "x", imagine=imagine
    )


@pytest.mark.parametrize("kind", SEARCH_PROMPT_KINDS)
def test_each_kind_states_its_instruction(kind):
    for style in ("full", "compact"):
        prompt = search_prompt(kind, "reward", shots(), macro=MACRO, style=style)
        assert f"\n\nSEARCH: {kind}\n\n## Task\n" in prompt
        task = prompt.split("## Task\n", 1)[1]
        assert INSTRUCTIONS[kind] in task
        assert all(INSTRUCTIONS[k] not in task for k in INSTRUCTIONS if k != kind)
        assert task.endswith(f"{_ANSWER_FORMAT['reward']}\n")


def test_compact_style_has_no_macro():
    shown = shots()
    prompt = search_prompt("better", "reward", shown, macro=MACRO, style="compact")
    assert MACRO not in prompt
    assert MICRO_PROMPTS["reward"].contract not in prompt
    head = compact_prompt("reward", "CODE", "TASK").split("\n\n```python\nCODE")[0]
    assert prompt.startswith(
        f"{head}\n\n## Programs so far (ascending shortfall, best last)\n### Candidate j1-c1 "
    )
    assert prompt.startswith("MODULE: LLM4Reward\n") and CODE_RULES in prompt
    # the full style starts with the macro prompt
    assert search_prompt("better", "reward", shown, macro=MACRO).startswith(f"{MACRO}\n\n")


def test_buffer_entries_are_shots_too():
    entries = [
        BufferEntry("a", "reward", "", "x = 1\n", 2.0),
        BufferEntry("b", "reward", "", "x = 2\n", 1.0),
    ]
    parsed = parse_candidates(search_prompt("crossover", "reward", entries))
    assert [(c.id, c.code) for c in parsed] == [("b", "x = 2\n"), ("a", "x = 1\n")]


def test_the_designer_and_the_prompts_share_the_kinds():
    assert SEARCH_KINDS == SEARCH_PROMPT_KINDS


@pytest.mark.parametrize(
    "args,kwargs,name",
    [
        (("mutate", "reward", shots()), {}, "kind"),
        (("better", "LLM4Reward", shots()), {}, "module"),
        (("better", "reward", shots()), {"style": "tiny"}, "style"),
        (("better", "reward", []), {}, "shots"),
        (("crossover", "reward", shots()[:1]), {}, "shots"),
    ],
)
def test_bad_arguments_raise_one_line_naming_the_argument(args, kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name}: ") as err:
        search_prompt(*args, **kwargs)
    assert "\n" not in str(err.value)


def test_the_named_change_reads_back_from_the_prompt():
    """The best shown program (score 3.0: j2-c2) and the hint, from either style; None
    from a prompt without one."""
    hint = "Change `depth` from 2 to 4."
    for style in ("full", "compact"):
        text = search_prompt("better", "reward", shots(), macro=MACRO, style=style, hint=hint)
        assert named_change(text) == ("j2-c2", hint)
        assert named_change(search_prompt("better", "reward", shots(), macro=MACRO)) is None
