"""A deterministic repair pass for trivial defects of generated code, before validation.

Small code models often write a correct program with a wrong import line: ``import jnp``
for ``import jax.numpy as jnp``, ``import jax.linen as nn`` for ``import flax.linen as
nn``, or no import at all for a name they use. They also rewrite a program shown in their
prompt and keep reading one of its constants (``CONCENTRATION``) or helpers
(``safe_div``) without its definition: 8 of the 1.5B's 23 rejected first answers in the
index search curves of 2026-11-28 (three seeds) were such NameErrors, and self-debugging
answered each with the same error. :func:`repair` fixes only such lines, by rules that
look at nothing but the code and the programs its prompt showed, and names every fix;
anything else is left for validation (:mod:`llm.validate`) to reject with its reason,
which goes back to the model. A completion cut off at the token budget needs no repair here:
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
   left to the validator;
5. a name the code reads but never binds, and not a builtin, that a program shown in the
   prompt defines at module level, gets that definition, copied line for line (its
   comments too) after the imports: a constant (``NAME = <literals and operators>``) or
   a function, with the definitions that function reads in turn. Where several shown
   programs define it, the last one's (best-shot prompts show the best last).

Only module-level imports and definitions are touched. The code never runs here: this is
text and :mod:`ast` only, and the result, borrowed definitions included, is validated as
any other code.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Sequence

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


def _literal(node: ast.expr) -> bool:
    """Whether an expression holds only literals and operators (no name, call or attribute)."""
    allowed = (ast.Constant, ast.UnaryOp, ast.BinOp, ast.Tuple, ast.List)
    syntax = (ast.unaryop, ast.operator, ast.expr_context)
    return all(isinstance(n, allowed + syntax) for n in ast.walk(node))


def _shown_definitions(shown: Sequence[str]) -> dict[str, tuple[list[str], set[str], bool]]:
    """Module-level constants and functions of the shown programs: name -> (source lines,
    names the definition reads, whether it is a function). A later program's definition
    replaces an earlier one's."""
    found: dict[str, tuple[list[str], set[str], bool]] = {}
    for program in shown:
        try:
            tree = ast.parse(program)
        except (SyntaxError, ValueError):
            continue
        lines = program.splitlines()
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                name = node.name
            elif (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and _literal(node.value)
            ):
                name = node.targets[0].id
            else:
                continue
            first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            source = lines[first - 1 : node.end_lineno]
            reads = _names_read(ast.Module([node], []))
            found[name] = (source, reads, isinstance(node, ast.FunctionDef))
    return found


def _borrowed(
    tree: ast.Module, bound: set[str], shown: Sequence[str]
) -> tuple[list[str], list[str], set[str]]:
    """Rule 5: the shown definitions of the names ``tree`` reads but never binds, with
    those they read in turn: ``(source lines, names defined, names they read)``; the
    constants first, then the functions, each group in order of need."""
    if not shown:
        return [], [], set()
    definitions = _shown_definitions(shown)
    known = bound | set(dir(builtins)) | set(STANDARD_IMPORTS)
    wanted = sorted(_names_read(tree) - known)
    names: list[str] = []
    while wanted:
        name = wanted.pop(0)
        if name in names or name not in definitions:
            continue
        names.append(name)
        wanted += sorted(definitions[name][1] - known - set(names))
    functions = [n for n in names if definitions[n][2]]
    names = [n for n in names if n not in functions] + functions
    lines: list[str] = []
    for name in names:
        lines += (["", ""] if name in functions else []) + definitions[name][0]
    reads = set().union(*(definitions[n][1] for n in names))
    return lines, names, reads


def repair(code: str, shown: Sequence[str] = ()) -> tuple[str, list[str]]:
    """Fixes trivial defects of a generated program (see the module docstring).

    Args:
        code: Python source that parses (what :func:`llm.parsing.extract_code` returns).
            Code that does not parse is returned unchanged.
        shown: the programs its prompt showed, in prompt order
            (:func:`serl_jax.loop.novelty.shown_programs`); rule 5 copies definitions
            from them. Empty: rule 5 does not apply.

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
    imported = {_bound_name(a, n) for n in imports for a in n.names}
    borrowed, borrowed_names, borrowed_reads = _borrowed(
        tree, imported | _names_bound_outside_imports(tree), shown
    )
    read = _names_read(tree) | borrowed_reads
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
    fixes += [f"added {name}, defined in a program the prompt showed" for name in borrowed_names]
    if not fixes:
        return code, []
    out: list[str] = []
    for i, line in enumerate(lines):
        if i in replace:
            out.extend(replace[i])
        if i not in dropped:
            out.append(line)
    out = _after_imports(_after_docstring(out, header), borrowed)
    repaired = "\n".join(out).rstrip() + "\n"
    ast.parse(repaired)  # the rules only move whole statements
    return repaired, fixes


def _unparse_one(alias: ast.alias, node: ast.stmt) -> str:
    """One alias of an import statement as its own statement."""
    if isinstance(node, ast.ImportFrom):
        return ast.unparse(ast.ImportFrom(node.module, [alias], node.level))
    return ast.unparse(ast.Import([alias]))


def _docstring_end(lines: list[str]) -> int:
    """The index of the first line after a leading module docstring and comments."""
    tree = ast.parse("\n".join(lines))
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
    return at


def _after_docstring(lines: list[str], header: list[str]) -> list[str]:
    """``lines`` with ``header`` inserted after a leading module docstring and comments."""
    if not header:
        return lines
    at = _docstring_end(lines)
    following = lines[at] if at < len(lines) else ""
    gap = [""] if following.strip() and not following.startswith(("import ", "from ")) else []
    return [*lines[:at], *header, *gap, *lines[at:]]


def _after_imports(lines: list[str], block: list[str]) -> list[str]:
    """``lines`` with ``block`` inserted after the module-level imports that open them
    (after a leading docstring and comments where there are none)."""
    if not block:
        return lines
    at = _docstring_end(lines)
    for node in ast.parse("\n".join(lines)).body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            at = max(at, node.end_lineno)
        elif not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            break
    rest = lines[at:]
    while rest and not rest[0].strip():
        rest = rest[1:]
    return [*lines[:at], *([""] if at else []), *block, *(["", ""] if rest else []), *rest]
