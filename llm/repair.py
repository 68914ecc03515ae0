"""A deterministic repair pass for trivial defects of generated code, before validation.

Small code models often write a correct program with a wrong import line: ``import jnp``
for ``import jax.numpy as jnp``, ``import jax.linen as nn`` for ``import flax.linen as
nn``, or no import at all for a name they use. :func:`repair` fixes only such import
lines, by rules that look at nothing but the code, and names every fix; anything else is
left for validation (:mod:`llm.validate`) to reject with its reason, which goes back to
the model. A completion cut off at the token budget needs no repair here:
:func:`llm.parsing.extract_code` already keeps the part of an unclosed code block that
parses.

The rules, in order:

1. an import that binds one of the framework's conventional names (``jnp``, ``jax``,
   ``lax``, ``nn``) to a module the validator does not allow becomes that name's
   standard import (``import jnp`` -> ``import jax.numpy as jnp``);
2. a conventional name the code reads but never binds gets its standard import, at the
   top;
3. an import statement repeated verbatim is dropped;
4. an import whose name the code never reads is dropped, whatever its module (the 1.5B's
   imaginations imported ``typing`` or ``numpy`` and used neither: 5 of 21 rejections in
   a run of 2026-11-26). A name nothing reads gives the program no capability, so
   dropping it never lets through what the validator refuses: every import that stays
   is checked as before. Star imports (``from m import *``) bind unknown names and are
   left to the validator.

Only module-level imports are touched. The code never runs here: this is text and
:mod:`ast` only, and the result is validated as any other code.
"""

from __future__ import annotations

import ast

from llm.validate.static import ALLOWED_IMPORTS

__all__ = ["STANDARD_IMPORTS", "repair"]

STANDARD_IMPORTS: dict[str, str] = {
    "jnp": "import jax.numpy as jnp",
    "jax": "import jax",
    "lax": "from jax import lax",
    "nn": "import flax.linen as nn",
}
"""The conventional names of the framework's modules and the import that binds each."""


def _bound_name(alias: ast.alias, node: ast.stmt) -> str:
    """The name an import alias binds (``import a.b`` binds ``a``)."""
    if alias.asname:
        return alias.asname
    return alias.name if isinstance(node, ast.ImportFrom) else alias.name.split(".")[0]


def _allowed(alias: ast.alias, node: ast.stmt) -> bool:
    if isinstance(node, ast.ImportFrom):
        module = node.module or ""
        full = f"{module}.{alias.name}"
        return node.level == 0 and (module in ALLOWED_IMPORTS or full in ALLOWED_IMPORTS)
    return alias.name in ALLOWED_IMPORTS


def _names_read(tree: ast.Module) -> set[str]:
    """Names read anywhere (``x`` in ``x.y`` included), imports excluded."""
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _names_bound_outside_imports(tree: ast.Module) -> set[str]:
    bound: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store | ast.Del):
            bound.add(n.id)
        elif isinstance(n, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef):
            bound.add(n.name)
        elif isinstance(n, ast.arg):
            bound.add(n.arg)
    return bound


def repair(code: str) -> tuple[str, list[str]]:
    """Fixes trivial import defects of a generated program (see the module docstring).

    Args:
        code: Python source that parses (what :func:`llm.parsing.extract_code` returns).
            Code that does not parse is returned unchanged.

    Returns:
        ``(code, fixes)``: the repaired code (it parses; unchanged when nothing applied)
        and one line per fix, in the order applied (empty when none).
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return code, []
    lines = code.splitlines()
    replace: dict[int, list[str]] = {}  # first line (0-based) -> new lines; others dropped
    dropped: set[int] = set()
    fixes: list[str] = []
    imports = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    read = _names_read(tree)
    seen: set[str] = set()
    bound_by_imports: set[str] = set()

    def drop(node: ast.stmt) -> None:
        dropped.update(range(node.lineno - 1, node.end_lineno))

    for node in imports:
        text = ast.unparse(node)
        if text in seen:
            fixes.append(f"dropped the repeated import on line {node.lineno}: {text}")
            drop(node)
            continue
        seen.add(text)
        kept: list[str] = []
        changed = False
        for alias in node.names:
            name = _bound_name(alias, node)
            if not _allowed(alias, node) and name in STANDARD_IMPORTS:
                standard = STANDARD_IMPORTS[name]
                fixes.append(f"line {node.lineno}: {text} -> {standard}")
                kept.append(standard)
                bound_by_imports.add(name)
                changed = True
            elif name not in read and alias.name != "*":
                fixes.append(f"dropped the unused import of {alias.name} on line {node.lineno}")
                changed = True
            else:
                kept.append(_unparse_one(alias, node))
                bound_by_imports.add(name)
        if changed:
            drop(node)
            replace[node.lineno - 1] = kept
    bound = bound_by_imports | _names_bound_outside_imports(tree)
    missing = [name for name in STANDARD_IMPORTS if name in read and name not in bound]
    header = [STANDARD_IMPORTS[name] for name in missing]
    fixes += [f"added the missing {STANDARD_IMPORTS[name]}" for name in missing]
    if not fixes:
        return code, []
    out: list[str] = []
    for i, line in enumerate(lines):
        if i in replace:
            out.extend(replace[i])
        if i not in dropped:
            out.append(line)
    repaired = "\n".join(_after_docstring(out, header)).rstrip() + "\n"
    ast.parse(repaired)  # the rules only move whole import lines
    return repaired, fixes


def _unparse_one(alias: ast.alias, node: ast.stmt) -> str:
    """One alias of an import statement as its own statement."""
    if isinstance(node, ast.ImportFrom):
        return ast.unparse(ast.ImportFrom(node.module, [alias], node.level))
    return ast.unparse(ast.Import([alias]))


def _after_docstring(lines: list[str], header: list[str]) -> list[str]:
    """``lines`` with ``header`` inserted after a leading module docstring and comments."""
    if not header:
        return lines
    source = "\n".join(lines)
    tree = ast.parse(source)
    at = 0
    first = tree.body[0] if tree.body else None
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        at = first.end_lineno
    while at < len(lines) and lines[at].lstrip().startswith("#"):
        at += 1
    following = lines[at] if at < len(lines) else ""
    gap = [""] if following.strip() and not following.startswith(("import ", "from ")) else []
    return [*lines[:at], *header, *gap, *lines[at:]]
