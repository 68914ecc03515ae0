"""Extracting Python code from a model's completion.

Rules (:func:`extract_code`), in order:

1. Fenced blocks tagged ``python``, ``py`` or ``python3``, or untagged (a bare fence);
   blocks in other languages (``json``, ``bash``, ...) are skipped. The first such closed
   block that parses is returned. If none parses, :class:`ParseError` reports the first
   one's syntax error (a broken block is reported, not repaired).
2. An opening fence that is never closed (a completion cut off at the token limit): the
   text after it, trimmed from the end line by line until it parses.
3. An untagged fence that is never closed and holds no code, after unfenced code: the
   model closed a block it never opened (Qwen2.5-Coder-1.5B did, 2026-11-26), so the
   program is the code before that fence, read by rule 4.
4. No fence: the text from the first line starting (in column 0) with ``def ``,
   ``class ``, ``import ``, ``from `` or ``@``, trimmed from the end line by line until it
   parses; if nothing from that line parses, the next such line is tried (prose that
   happens to begin with "from ").

Returned code is dedented, has no trailing blank lines, ends with one newline and always
parses with :func:`ast.parse`; whether it is *acceptable* is decided later by
:mod:`llm.validate`.

:func:`code_block_end` tells a generator where it may stop: after the line that closes
the first Python block (what a small model writes after it is prose or more code that
rule 1 reads only when that block does not parse). :func:`program_text` tells whether two
programs are the same one.
"""

from __future__ import annotations

import ast
import re
import textwrap

__all__ = ["ParseError", "code_block_end", "extract_code", "program_text"]

_PYTHON_TAGS = frozenset({"", "python", "py", "python3"})
_FENCE = re.compile(r"^[ \t]*```[ \t]*([^\s`]*)[^`]*$")
_CLOSE = re.compile(r"^[ \t]*```[ \t]*$")
_CODE_START = ("def ", "class ", "import ", "from ", "@")


class ParseError(ValueError):
    """No Python code could be extracted from a completion (one-line message)."""


def _parses(code: str) -> str | None:
    """``None`` when ``code`` parses, else a one-line ``line N: message``."""
    try:
        ast.parse(code)
    except SyntaxError as e:
        return f"line {e.lineno}: {e.msg}"
    except ValueError as e:  # e.g. null bytes
        return str(e)
    return None


def _finish(lines: list[str]) -> str:
    return textwrap.dedent("\n".join(lines)).rstrip() + "\n"


def _trim_until_parses(lines: list[str]) -> str | None:
    """The longest prefix of ``lines`` with some code that parses, or ``None``."""
    for end in range(len(lines), 0, -1):
        code = _finish(lines[:end])
        if code.strip() and _parses(code) is None:
            return code
    return None


def _unfenced_code(lines: list[str]) -> str | None:
    """Rule 4 of the module docstring on ``lines``: the code from the first code-like
    line that parses, or ``None``."""
    for start, line in enumerate(lines):
        if line.startswith(_CODE_START):
            code = _trim_until_parses(lines[start:])
            if code is not None:
                return code
    return None


def _fenced_blocks(lines: list[str]) -> list[tuple[str, list[str], bool, int]]:
    """``(tag, body lines, closed, fence line index)`` for each fenced block, in order."""
    blocks = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        tag = m.group(1).lower()
        j = i + 1
        while j < len(lines) and not _CLOSE.match(lines[j]):
            j += 1
        blocks.append((tag, lines[i + 1 : j], j < len(lines), i))
        i = j + 1
    return blocks


def extract_code(completion: str) -> str:
    """Extracts the Python code from a model's completion.

    Examples:
        >>> extract_code("Here it is:\\n```python\\nx = 1\\n```\\nDone.")
        'x = 1\\n'
        >>> extract_code("Sure.\\ndef f():\\n    return 1\\nThis returns one.")
        'def f():\\n    return 1\\n'
        >>> extract_code("I cannot help with that.")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        llm.parsing.ParseError: no Python code in the completion (no code fence ...)

    Args:
        completion: the model's text.

    Returns:
        The code (see the module docstring for the rules); it parses with ``ast.parse``.

    Raises:
        ParseError: no code block or code line parses.
    """
    lines = completion.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    blocks = [b for b in _fenced_blocks(lines) if b[0] in _PYTHON_TAGS]
    first_error = None
    for tag, body, closed, fence in blocks:
        if closed:
            code = _finish(body)
            error = _parses(code) if code.strip() else "empty block"
            if error is None:
                return code
            first_error = first_error or error
        else:
            code = _trim_until_parses(body)
            if code is None and not tag:
                code = _unfenced_code(lines[:fence])
            if code is not None:
                return code
            first_error = first_error or "cut-off block with no complete statement"
    if first_error is not None:
        raise ParseError(f"the first python code block does not parse ({first_error})")
    code = _unfenced_code(lines)
    if code is not None:
        return code
    starts = [i for i, line in enumerate(lines) if line.startswith(_CODE_START)]
    if starts:
        raise ParseError(
            f"no Python code in the completion parses (tried from line {starts[0] + 1})"
        )
    raise ParseError(
        "no Python code in the completion (no code fence and no line starting with "
        "def/class/import/from)"
    )


def code_block_end(completion: str) -> int | None:
    """Where a completion may stop: the offset just past the line (its newline included)
    that closes the first fenced Python block (tagged ``python``, ``py``, ``python3`` or
    untagged), or ``None`` while no such block is closed. A closing fence without its
    newline yet does not count (the line could still grow, e.g. into a new opening).

    Examples:
        >>> code_block_end("Sure:\\n```python\\nx = 1\\n```\\nDone.")
        26
        >>> code_block_end("```json\\n{}\\n```\\n```python\\nx = 1\\n```") is None
        True

    Args:
        completion: the text generated so far.

    Returns:
        A character offset into ``completion``, or ``None``.
    """
    offset, tag = 0, None
    for line in completion.replace("\r\n", "\n").replace("\r", "\n").splitlines(keepends=True):
        if not line.endswith("\n"):
            return None
        offset += len(line)
        body = line[:-1]
        if tag is None:
            m = _FENCE.match(body)
            tag = m.group(1).lower() if m else None
        elif _CLOSE.match(body):
            if tag in _PYTHON_TAGS:
                return offset
            tag = None
    return None


def program_text(code: str) -> str:
    """``code`` as the interpreter sees it: its syntax tree without docstrings (comments,
    blank lines and formatting are not in it), or the text itself when it does not
    parse. Two programs are the same one when their texts are equal. A small model given
    in-context examples often returns the best one with only a new docstring or comment
    (Qwen2.5-Coder-1.5B, 2026-11-26); that is the same program, and training it again
    would only repeat its score.

    Args:
        code: Python source.

    Returns:
        :func:`ast.dump` of the docstring-free tree, or ``code`` when it does not parse.
    """
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                node.body = node.body[1:] or [ast.Pass()]
    return ast.dump(tree)
