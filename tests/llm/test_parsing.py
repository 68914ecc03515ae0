"""Code extraction from completions (llm/parsing.py)."""

from __future__ import annotations

import ast
import doctest

import pytest

import llm.parsing
from llm.parsing import ParseError, code_block_end, extract_code, program_text

REWARD = "def reward(prev_state, action, next_state, params):\n    return 0.0\n"


def test_docstring_examples():
    assert doctest.testmod(llm.parsing).failed == 0


@pytest.mark.parametrize("tag", ["python", "py", "Python3", ""])
def test_fenced_block_with_prose_around(tag):
    text = f"Here is the reward:\n\n```{tag}\n{REWARD}```\n\nIt returns zero. def nope("
    assert extract_code(text) == REWARD


def test_first_of_several_blocks():
    second = "def reward(prev_state, action, next_state, params):\n    return 1.0\n"
    text = f"```python\n{REWARD}```\nOr alternatively:\n```python\n{second}```\n"
    assert extract_code(text) == REWARD


def test_other_languages_and_unparsable_bare_blocks_are_skipped():
    text = (
        'Install:\n```bash\npip install jax\n```\nConfig:\n```json\n{"a": 1}\n```\n'
        f"Output looks like:\n```\n>>> reward(...)\n0.0\n```\nCode:\n```py\n{REWARD}```\n"
    )
    assert extract_code(text) == REWARD


def test_broken_fenced_block_is_reported_not_repaired():
    text = "```python\ndef reward(a, b, c, d):\n    x = (1 +\n    return x\n```\n"
    with pytest.raises(ParseError, match=r"^the first python code block does not parse \(line"):
        extract_code(text)


def test_unclosed_fence_is_trimmed():
    text = f"```python\n{REWARD}def helper(x):\n    return x +"  # cut off at the token limit
    assert extract_code(text) == REWARD


def test_indented_fenced_block_is_dedented():
    text = "1. The function:\n   ```python\n   x = 1\n   y = x\n   ```\n"
    assert extract_code(text) == "x = 1\ny = x\n"


def test_unfenced_with_prose_before_and_after():
    text = (
        "Sure! I improved the penalty.\n\n"
        "import jax.numpy as jnp\n\n"
        f"{REWARD}\n"
        "This reward is zero everywhere; tune it later.\nHope that helps!"
    )
    assert extract_code(text) == "import jax.numpy as jnp\n\n" + REWARD


def test_unfenced_trailing_garbage_is_trimmed_line_by_line():
    text = f"class Network:\n    size = 3\n{REWARD}}}}} <|im_end|>\n\n"
    code = extract_code(text)
    assert code == "class Network:\n    size = 3\n" + REWARD
    ast.parse(code)


def test_unfenced_code_closed_by_a_bare_fence_is_the_program():
    """Qwen2.5-Coder-1.5B's retry (2026-11-26, shortened): code with no opening fence,
    then a closing fence and prose that never ends; the program is the code."""
    text = (
        "# separate_mlp: the default\nimport flax.linen as nn\n\n\n"
        "class Network(nn.Module):\n    depth: int = 4\n\n"
        "# optimization: use self.action_multiples\n```\n"
        "The validator rejected it at the runtime stage: line 22: TypeError: zeros()\n"
        "Fix that error by using `self.action_multiples.size`. Answer with one"
    )
    assert extract_code(text) == (
        "import flax.linen as nn\n\n\nclass Network(nn.Module):\n    depth: int = 4\n\n"
        "# optimization: use self.action_multiples\n"
    )


def test_a_bare_fence_left_open_after_prose_is_still_a_cut_off_block():
    with pytest.raises(ParseError, match="cut-off block"):
        extract_code("Here is my plan, in words.\n```\nfirst we (")


def test_prose_line_starting_with_from_is_passed_over():
    text = f"from the results above, a smaller penalty works:\n{REWARD}"
    assert extract_code(text) == REWARD


def test_crlf_line_endings():
    assert extract_code("```python\r\nx = 1\r\n```\r\n") == "x = 1\n"


@pytest.mark.parametrize(
    "text, match",
    [
        ("I cannot help with that.", "no code fence and no line starting with def"),
        ("", "no code fence"),
        ("def (broken\nclass :\n", "no Python code in the completion parses"),
        ("```python\n```\n", "empty block"),
        ("```python\n)))", "cut-off block"),
    ],
)
def test_no_code_raises_one_line_parse_error(text, match):
    with pytest.raises(ParseError, match=match) as info:
        extract_code(text)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("text", "end"),
    [
        ("Sure:\n```python\nx = 1\n```\nDone.", len("Sure:\n```python\nx = 1\n```\n")),
        ("```\nx = 1\n```  \nmore", len("```\nx = 1\n```  \n")),  # untagged block
        ("```py\nx = 1\n```", None),  # the closing line is not finished yet
        ("```python\nx = 1\n", None),  # still open
        ("no code at all\n", None),
        # a json block is skipped; the python block after it counts
        (
            "```json\n{}\n```\n```python\ny = 2\n```\n",
            len("```json\n{}\n```\n```python\ny = 2\n```\n"),
        ),
    ],
)
def test_code_block_end(text, end):
    assert code_block_end(text) == end
    if end is not None:
        assert extract_code(text[:end]) == extract_code(text)


def test_program_text_ignores_docstrings_comments_and_layout_but_not_code():
    example = (
        "VOL_SCALE = 1.5\n\n\ndef imagine(key, price, volume, params):\n    return price, volume\n"
    )
    copy = (
        '"""Scales the returns."""\nVOL_SCALE = 1.5  # the scale\n'
        'def imagine(key, price, volume, params):\n    """Imagines."""\n\n'
        "    return (price, volume)\n"
    )
    assert program_text(copy) == program_text(example)
    assert program_text(example.replace("1.5", "2.0")) != program_text(example)
    assert program_text("def f(:\n") == "def f(:\n"  # does not parse: the text itself
    # a function whose body is only a docstring keeps a body
    assert program_text('def f():\n    """Doc."""\n') == program_text("def f():\n    pass\n")
