"""Change hints: the one concrete change a search prompt asks for.

Asked for "a better program", "a different form" or "other parameters", the 1.5B most
often returns a shown program again, reworded: over its three index searches of
2026-11-30, 14 of 70 valid designed programs computed what an earlier program computes,
half of them answering ``better`` prompts. ELM (Lehman et al. 2022, "Evolution through
Large Models") mutates a program by asking a code model for a diff under a commit message
that names the change. With ``search.hints``, each ``better``, ``form`` and ``parameters``
prompt likewise names one change, drawn at random from the best program it shows
(:func:`draw_hint`):

- a constant, with the value to set: "Change `TERMINAL_BPS` from 100.0 to 50.0." (module
  level ``NAME = number``, or a flax field ``width: int = 64``; half or double the current
  value, or a quarter, four times, a tenth or ten times where the run has tried those
  already: :func:`new_values`);
- a reward term (a string key of the returned dict): drop it, or rework it (its signed
  square root or signed square);
- a network's activation (one it does not use), number of hidden layers, layer
  normalization, a skip connection or one layer's width.

A change named only in words is often not made: over the 1.5B's four float32 index
seeds of 2026-12-01 (128 samples), 11 of the 13 functional duplicates were copies of a
shown program, asked for a change of every kind named in words (an activation, a
reworked term, widths, layer normalization, a crossover), while constants' changes, which
name the value, were made in 39 of 41 valid answers (one answer to "Use `nn.gelu` as the
activation" wrote a ``gelu`` header comment over unchanged ``tanh`` code). So each change
names its edit as a diff would, where the code allows: the text to replace and its
replacement (a term's entry of the returned dict, a hidden-layer line), the line to write
twice or to delete, or every ``nn.tanh`` to replace (:func:`_layer_hints`,
:func:`_term_hints`).

A change of form does not ask for a term on a state field no program reads: asked to
"return one more term computed from" a field (named with its description and unit), the
1.5B wrote 3 valid programs of 21 over its two sets of int8 index runs of 2026-12-01
(in the second, constants 23 of 26, activations 8 of 9, dropped terms 11 of 16); the
rejected ones summed currency or share counts into bps terms. A crossover still carries a
field over, with the first shown program's code to copy it from.

A change the novelty probe cannot see makes a functional duplicate, whatever the model
writes: in the 1.5B's paired round (2026-11-30) all four duplicates of hinted prompts
answered such a hint (a ``TERMINAL_BPS`` change, three times: the env trades what is left
at the last step, so the terminal term is zero; a term on ``pace``, zero at one-minute
steps). So :func:`draw_hint` leaves out the terms the caller names inert (zero on the
probe), the constants that feed only those terms, and the fields it names inert (one value
over the probe: :func:`serl_jax.loop.novelty.probe_constant_fields`). Nor does it drop a
term whose drop would return a program the run has (``known_drops``): in the 1.5B's
float32 index seed 1 of 2026-12-01, 2 of the 3 functional duplicates that were not
copies dropped a term and got back the default reward or a program of round 2.

A change named once does not tell the model what the run has tried: two of the 9
duplicates of the 1.5B's int8 index runs of 2026-12-01 answered a change the run had
asked of the same program before, or set a constant to a value a program had (a layer
normalization added to the default network in two rounds; a ``LOSS_AVERSION`` of 0.7 set
back to the 0.5 of the library program it came from). So the caller may pass the
changes asked of the same program already (``asked``: none is named again) and the values
the run has given each constant (``tried``), which a constant's change does not name.
Told only which values were tried ("to a clearly different value, not 128, 256 (tried
already)"), the 1.5B set a new value in 5 of 11 answers, a listed one in 2 and kept the
current one in 4 (the second set of int8 index runs of 2026-12-01): so the change names
the value.

``parameters`` draws a constant only; ``form`` a change of form only (terms, layers);
``better`` either. ``crossover`` names one part of the first program shown to carry into
the best one: a reward term the best lacks, a state field it does not read, a network's
activation or layer normalization it does not use (asked only to "combine ideas of
both", the 1.5B returned a shown program unchanged in 3 of its 8 valid crossovers over
the three index runs of 2026-11-30, one of them crossing a program with itself). The
kinds without a change to draw name none (a program with no constants for
``parameters``; the imagination, profiling and communication slots for ``form``; a
crossover of two programs alike in those parts).

Every sentence is written from a template of :data:`CHANGES`, so that a stored prompt's
change reads back to its kind and fields (:func:`read_change`): ``bench_search.py`` splits
a run's copies and duplicates by the change asked for.
"""

from __future__ import annotations

import ast
import functools
import random
import re
import string
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence

__all__ = [
    "ACTIVATIONS",
    "CHANGES",
    "EARLIER_CHANGES",
    "constants_by_term",
    "draw_hint",
    "made_change",
    "new_values",
    "program_constants",
    "read_change",
    "state_fields_read",
    "term_names",
    "values_tried",
]

#: The flax activations a network hint may name (``nn.<name>``).
ACTIVATIONS = ("relu", "tanh", "elu", "gelu", "swish", "leaky_relu", "softplus")

CHANGES: dict[str, tuple[str, ...]] = {
    "constant": ("Change `{name}` from {value} to {new}.",),
    "drop a term": (
        "Drop the term '{term}': delete `{old}` from the returned dict.",
        "Drop the term '{term}' and keep the others.",
    ),
    "rework a term": (
        "Rework the term '{term}' (its signed square root): replace `{old}` with `{new}`.",
        "Rework the term '{term}' (its signed square): replace `{old}` with `{new}`.",
        "Compute the term '{term}' another way (other formula or inputs).",
    ),
    "activation": (
        "Replace every `nn.{old}` with `nn.{name}`.",
        "Use `nn.{name}` as the activation of the hidden layers.",
    ),
    "layers": (
        "Add a hidden layer: write the line `{line}` twice, one after the other.",
        "Remove a hidden layer: delete the line `{line}`.",
    ),
    "layer normalization": (
        "Add layer normalization: replace `{old}` with `{new}`.",
        "Remove layer normalization: replace `{old}` with `{new}`.",
        "Remove layer normalization: delete the line `{line}`.",
    ),
    "skip or widths": (
        "Add a skip connection: add a hidden layer's input to its output.",
        "Change one layer's width: replace `{old}` with `{new}`.",
    ),
    "crossover: a term": (
        "Add the term '{term}' of the first program above (computed as there) and keep the others.",
    ),
    "crossover: a field": (
        "Return one more term computed from `next_state.{name}` or `prev_state.{name}`, as "
        "the first program above reads it.",
    ),
    "crossover: an activation": (
        "Replace every `nn.{old}` with `nn.{name}`, the activation of the first program above.",
        "Use `nn.{name}`, the activation of the first program above, in the hidden layers.",
    ),
    "crossover: layer normalization": (
        "Add the layer normalization of the first program above (`nn.LayerNorm`).",
    ),
}
"""The changes a hint names, by kind: the sentences' ``str.format`` templates (a kind
is one of :func:`draw_hint`'s groups, except that a network's layer count and layer
normalization are two). Where the program's code allows, the sentence names the edit
(the text to replace, the line to write twice or delete); the general sentences stay for
code it cannot quote (an entry over several lines, a network with no activation)."""

EARLIER_CHANGES: dict[str, tuple[str, ...]] = {
    "layers": ("Add one more hidden layer.", "Use one hidden layer fewer (keep at least one)."),
    "layer normalization": (
        "Add `nn.LayerNorm()` before an activation.",
        "Remove the layer normalization.",
    ),
    "skip or widths": ("Give successive hidden layers different widths.",),
}
"""Sentences of runs stored before 2026-12-02, which named these changes without the
edit: :func:`read_change` reads them back to their kinds (the results pages compare runs
of both)."""


@functools.cache
def _pattern(template: str) -> re.Pattern:
    """A template's sentences: each ``{field}`` a named group (a repeat must be equal)."""
    out, named = [], set()
    for text, field, _, _ in string.Formatter().parse(template):
        out.append(re.escape(text))
        if field:
            out.append(f"(?P={field})" if field in named else f"(?P<{field}>.+?)")
            named.add(field)
    return re.compile("".join(out))


def read_change(sentence: str) -> tuple[str, dict[str, str]] | None:
    """The kind and fields of a change :func:`draw_hint` named (:data:`CHANGES`).

    Args:
        sentence: a hint, e.g. read back from a prompt by
            :func:`llm.prompts.search.named_change`; an earlier run's too
            (:data:`EARLIER_CHANGES`).

    Returns:
        ``(kind, fields)``, e.g. ``("constant", {"name": "width", "value": "64",
        "new": "32"})``; None for a sentence no template writes.
    """
    for kind in CHANGES:
        for template in CHANGES[kind] + EARLIER_CHANGES.get(kind, ()):
            found = _pattern(template).fullmatch(sentence)
            if found:
                return kind, found.groupdict()
    return None


@functools.lru_cache(maxsize=256)  # a search draws many hints from each shown program
def _parse(code: str) -> ast.Module | None:
    """The program's syntax tree (shared between calls: read, never changed), else None."""
    try:
        return ast.parse(code)
    except SyntaxError:
        return None


def _number(node: ast.expr | None) -> str | None:
    """The source of a numeric literal (a sign allowed), else None."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _number(node.operand)
        return None if inner is None else f"-{inner}"
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return repr(node.value)
    return None


def program_constants(code: str) -> list[tuple[str, str]]:
    """The named numeric constants of a program, in source order.

    Args:
        code: Python source.

    Returns:
        ``(name, value)`` pairs: module-level ``NAME = <number>`` assignments and
        class-body fields ``name: type = <number>`` (flax module attributes); the value as
        written (``"100.0"``, ``"-0.5"``). Empty for code that does not parse.
    """
    tree = _parse(code)
    if tree is None:
        return []
    found = []
    bodies = [tree.body] + [n.body for n in tree.body if isinstance(n, ast.ClassDef)]
    for body in bodies:
        for node in body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target, value = node.targets[0], node.value
            elif isinstance(node, ast.AnnAssign):
                target, value = node.target, node.value
            else:
                continue
            number = _number(value)
            if isinstance(target, ast.Name) and number is not None:
                found.append((target.id, number))
    return found


def term_names(code: str) -> list[str]:
    """The term names of a reward program: the string keys of the dict literals its
    ``return`` statements return, in source order, each once."""
    return list(_term_entries(code))


def _term_entries(code: str) -> dict[str, list[tuple[ast.expr, ast.expr]]]:
    """Each term's ``(key, value)`` nodes in the dicts the program returns, terms in
    source order."""
    tree = _parse(code)
    entries: dict[str, list[tuple[ast.expr, ast.expr]]] = {}
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Dict):
            for key, value in zip(node.value.keys, node.value.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    entries.setdefault(key.value, []).append((key, value))
    return entries


def state_fields_read(code: str) -> set[str]:
    """The attributes a program reads from ``prev_state`` and ``next_state``."""
    tree = _parse(code)
    if tree is None:
        return set()
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id in ("prev_state", "next_state")
    }


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def constants_by_term(code: str) -> dict[str, set[str]]:
    """For each term of a reward program, the named constants its value depends on.

    Follows the ``reward`` function's assignments in order (a local name depends on the
    constants and locals its value reads) and reads the module-level functions a term
    calls whole (every constant they name).

    Args:
        code: Python source of a reward program.

    Returns:
        ``{term: {constant, ...}}`` over :func:`term_names`' names (the constants of
        :func:`program_constants`); empty when the code does not parse or has no
        top-level ``reward``.
    """
    tree = _parse(code)
    if tree is None:
        return {}
    constants = {name for name, _ in program_constants(code)}
    helpers = {
        n.name: _names_in(n) & constants for n in tree.body if isinstance(n, ast.FunctionDef)
    }
    entry = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "reward"),
                 None)  # fmt: skip
    if entry is None:
        return {}
    deps: dict[str, set[str]] = {}

    def reads(node: ast.AST) -> set[str]:
        names = _names_in(node)
        out = names & constants
        for name in names:
            out |= deps.get(name, set()) | helpers.get(name, set())
        return out

    terms: dict[str, set[str]] = {}
    statements = [n for n in ast.walk(entry) if isinstance(n, ast.stmt) and n is not entry]
    for node in sorted(statements, key=lambda n: (n.lineno, n.col_offset)):  # source order
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = reads(node.value)
            for target in targets:
                for name in _names_in(target):
                    deps[name] = value | (
                        deps.get(name, set()) if isinstance(node, ast.AugAssign) else set()
                    )
        elif isinstance(node, ast.Return) and isinstance(node.value, ast.Dict):
            for key, value in zip(node.value.keys, node.value.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    terms.setdefault(key.value, set()).update(reads(value))
    return terms


def _flax_names(code: str) -> set[str]:
    """The ``nn.<name>`` attributes a network program uses (activations, layers)."""
    return set(re.findall(r"\bnn\.(\w+)", code))


@functools.lru_cache(maxsize=256)
def _source_lines(code: str) -> tuple[bytes, ...]:
    """The program's lines as UTF-8 bytes (ast's column offsets count bytes)."""
    return tuple(line.encode() for line in code.splitlines())


def _segment(code: str, node: ast.AST) -> str | None:
    """A node's source on one line (None over several lines)."""
    if node.lineno != node.end_lineno:
        return None
    return _source_lines(code)[node.lineno - 1][node.col_offset : node.end_col_offset].decode()


def _replaced(code: str, outer: ast.AST, inner: ast.AST, new: str) -> str:
    """``outer``'s source (one line) with ``inner``'s source (a part of it) replaced by
    ``new``."""
    line = _source_lines(code)[outer.lineno - 1]
    before = line[outer.col_offset : inner.col_offset].decode()
    return before + new + line[inner.end_col_offset : outer.end_col_offset].decode()


def _is_flax(node: ast.AST, names: Collection[str]) -> bool:
    """Whether ``node`` is ``nn.<name>`` (or ``jax.nn.<name>``) for one of ``names``."""
    return isinstance(node, ast.Attribute) and node.attr in names and (
        (isinstance(node.value, ast.Name) and node.value.id == "nn")
        or (isinstance(node.value, ast.Attribute) and node.value.attr == "nn")
    )  # fmt: skip


def _calls(node: ast.AST, names: Collection[str]) -> list[ast.Call]:
    """The calls of ``nn.<name>`` within ``node``, outermost first."""
    return [n for n in ast.walk(node) if isinstance(n, ast.Call) and _is_flax(n.func, names)]


def _hidden_layers(code: str) -> list[ast.Assign]:
    """A network's hidden-layer lines: one-line assignments to a name of an activation of
    an ``nn.Dense`` output (``h = nn.tanh(nn.Dense(64)(h))``), in source order."""
    tree = _parse(code)
    if tree is None:
        return []
    found = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and _segment(code, node) is not None
        and _calls(node.value, ACTIVATIONS)
        and any(_is_flax(n, ("Dense",)) for n in ast.walk(node.value))
    ]
    return sorted(found, key=lambda n: (n.lineno, n.col_offset))


def _activation_counts(code: str) -> dict[str, int]:
    """How often a program calls each activation of :data:`ACTIVATIONS` (``nn.<name>(``),
    most used first (ties in :data:`ACTIVATIONS`' order)."""
    counts = {a: len(re.findall(rf"\bnn\.{a}\(", code)) for a in ACTIVATIONS}
    return dict(sorted(((a, n) for a, n in counts.items() if n), key=lambda x: -x[1]))


def _activation_hints(code: str, names: Iterable[str], kind: str = "activation") -> list[str]:
    """Changes to each activation of ``names`` (``kind``: ``activation`` or ``crossover:
    an activation``): replace the program's most used one, or, when it calls none, the
    general sentence."""
    used = _activation_counts(code)
    if not used:
        return [CHANGES[kind][1].format(name=name) for name in names]
    old = next(iter(used))
    return [CHANGES[kind][0].format(old=old, name=name) for name in names]


def _layer_hints(code: str) -> list[list[str]]:
    """The network's edits of hidden-layer lines, in three groups: add or remove a layer,
    add or remove layer normalization, change a layer's width (one-line edits only).

    A layer is added by writing a line that maps a name to itself twice
    (``h = nn.tanh(nn.Dense(64)(h))``), removed by deleting one where its name has
    another; layer normalization goes between ``nn.Dense`` and the activation of a
    network without one, or is taken out of each line that applies it; a width
    (``nn.Dense``'s first argument) is doubled or halved.
    """
    tree = _parse(code)
    if tree is None:
        return [[], [], []]
    layers = _hidden_layers(code)
    has_norm = "LayerNorm" in _flax_names(code)
    per_name = Counter(node.targets[0].id for node in layers)
    depth, norm, widths = [], [], []
    for node in layers:
        line, name = _segment(code, node), node.targets[0].id
        if name in _names_in(node.value):
            depth.append(CHANGES["layers"][0].format(line=line))
            if per_name[name] > 1:
                depth.append(CHANGES["layers"][1].format(line=line))
        activation = _calls(node.value, ACTIVATIONS)[0]
        if activation.args and not has_norm:
            inner = activation.args[0]
            new = _replaced(code, node, inner, f"nn.LayerNorm()({_segment(code, inner)})")
            norm.append(CHANGES["layer normalization"][0].format(old=line, new=new))
        for dense in _calls(node.value, ("Dense",))[:1]:
            if not dense.args:
                continue
            width = dense.args[0]
            text = _segment(code, width)
            number = _number(width)
            if number is not None and re.fullmatch(r"\d+", number):
                news = [str(2 * int(number))] + ([str(int(number) // 2)] if int(number) > 1 else [])
            else:
                news = [f"2 * {text}", f"max({text} // 2, 1)"]
            for value in news:
                new = _replaced(code, node, width, value)
                widths.append(CHANGES["skip or widths"][1].format(old=line, new=new))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign) or _segment(code, node) is None:
            continue
        for call in _calls(node.value, ("LayerNorm",))[:1]:
            applied = next(
                (n for n in ast.walk(node.value) if isinstance(n, ast.Call) and n.func is call),
                None,
            )
            if applied is None or len(applied.args) != 1:
                continue
            line, argument = _segment(code, node), _segment(code, applied.args[0])
            if argument == _segment(code, node.targets[0]):  # h = nn.LayerNorm()(h)
                norm.append(CHANGES["layer normalization"][2].format(line=line))
            else:
                new = _replaced(code, node, applied, argument)
                norm.append(CHANGES["layer normalization"][1].format(old=line, new=new))
    return [list(dict.fromkeys(g)) for g in (depth, norm, widths)]


def _entry(code: str, key: ast.expr, value: ast.expr) -> str | None:
    """A dict entry's one-line source (``"pa": 0.3 * pa``), else None."""
    if key.lineno != value.end_lineno:
        return None
    return _source_lines(code)[key.lineno - 1][key.col_offset : value.end_col_offset].decode()


def _term_hints(code: str, terms: Sequence[str], drops: Collection[str]) -> list[list[str]]:
    """A reward's changes of terms, in two groups: drop one (but those of ``drops``),
    rework one (its signed square root or signed square, where ``jnp`` is imported);
    each names the dict entry to edit when the term has one entry on one line."""
    entries = _term_entries(code)
    has_jnp = re.search(r"^import jax\.numpy as jnp$", code, re.M) is not None
    drop, rework = [], []
    for term in terms:
        found = entries.get(term, [])
        entry = _entry(code, *found[0]) if len(found) == 1 else None
        if term not in drops:
            drop.append(
                CHANGES["drop a term"][0].format(term=term, old=entry)
                if entry
                else CHANGES["drop a term"][1].format(term=term)
            )
        if entry is None or not has_jnp:
            rework.append(CHANGES["rework a term"][2].format(term=term))
            continue
        key, value = found[0]
        head, text = entry[: len(entry) - len(_segment(code, value))], _segment(code, value)
        inner = text if isinstance(value, ast.Name | ast.Call | ast.Attribute) else f"({text})"
        rework += [
            CHANGES["rework a term"][0].format(
                term=term, old=entry, new=f"{head}jnp.sign({text}) * jnp.sqrt(jnp.abs({text}))"
            ),
            CHANGES["rework a term"][1].format(
                term=term, old=entry, new=f"{head}{inner} * jnp.abs({text})"
            ),
        ]
    return [drop, rework]


SCALES = ((0.5, 0.25, 0.1), (2.0, 4.0, 10.0))
"""The factors a constant's change scales the current value by: the first below and the
first above that give a value the run has not tried (:func:`new_values`)."""


def new_values(value: str, tried: Collection[str] = ()) -> list[str]:
    """The values a constant's change may set: the current value scaled down and up.

    Args:
        value: the constant's value as written (``"64"``, ``"100.0"``, ``"-2"``).
        tried: values the run's programs have given the constant, as written.

    Returns:
        At most two values, as Python literals: for each side of :data:`SCALES`, the
        first scaled value that differs from ``value`` and from every value of ``tried``
        (numerically: ``64.0`` is ``64``), rounded to an int for an int (never to 0),
        else to 6 significant digits. Empty for 0 and where every scale was tried.
    """
    now = float(value)
    is_int = re.fullmatch(r"-?\d+", value) is not None
    taken = {now} | {float(v) for v in tried}
    found = []
    for factors in SCALES:
        for factor in factors:
            new = round(now * factor) if is_int else float(f"{now * factor:.6g}")
            if new != 0 and float(new) not in taken:
                found.append(repr(new))
                break
    return found


def _constant_hints(
    module: str, code: str, inert_terms: frozenset[str], tried: Mapping[str, Collection[str]]
) -> list[str]:
    """The changes of the constants to values the run has not tried (:func:`new_values`),
    but (reward) of a constant that feeds only inert terms."""
    skip: set[str] = set()
    if module == "reward" and inert_terms:
        by_term = constants_by_term(code)
        live = set().union(*(c for t, c in by_term.items() if t not in inert_terms))
        skip = set().union(*by_term.values()) - live
    return [
        CHANGES["constant"][0].format(name=name, value=value, new=new)
        for name, value in program_constants(code)
        if name not in skip
        for new in new_values(value, tried.get(name, ()))
    ]


def values_tried(codes: Iterable[str]) -> dict[str, set[str]]:
    """The values programs give their named constants (:func:`program_constants`).

    Args:
        codes: Python sources (the run's programs of one module).

    Returns:
        ``{name: {value as written, ...}}``; a program that does not parse adds nothing.
    """
    tried: dict[str, set[str]] = {}
    for code in codes:
        for name, value in program_constants(code):
            tried.setdefault(name, set()).add(value)
    return tried


def _form_hints(
    module: str, code: str, inert_terms: frozenset[str], known_drops: frozenset[str]
) -> list[list[str]]:
    """The changes of form one program allows, in groups drawn with equal weight."""
    if module == "reward":
        terms = [t for t in term_names(code) if t not in inert_terms]
        return _term_hints(code, terms, known_drops)
    if module == "network":
        used = _flax_names(code)
        depth, norm, widths = _layer_hints(code)
        return [
            _activation_hints(code, [a for a in ACTIVATIONS if a not in used]),
            depth,
            norm,
            [CHANGES["skip or widths"][0], *widths],
        ]
    return []


def _crossover_hints(
    module: str,
    donor: str,
    best: str,
    inert_terms: frozenset[str],
    inert_fields: frozenset[str],
) -> list[list[str]]:
    """The parts of ``donor`` (the first program shown) that ``best`` lacks, in groups
    drawn with equal weight; ``inert_terms`` are the donor's terms zero on the probe."""
    if module == "reward":
        own = set(term_names(best))
        read = state_fields_read(best)
        return [
            [
                CHANGES["crossover: a term"][0].format(term=term)
                for term in term_names(donor)
                if term not in own and term not in inert_terms
            ],
            [
                CHANGES["crossover: a field"][0].format(name=name)
                for name in sorted(state_fields_read(donor) - read - inert_fields)
            ],
        ]
    if module == "network":
        used = _flax_names(best)
        theirs = _flax_names(donor)
        return [
            _activation_hints(
                best,
                [a for a in ACTIVATIONS if a in theirs and a not in used],
                kind="crossover: an activation",
            ),
            list(CHANGES["crossover: layer normalization"])
            if "LayerNorm" in theirs and "LayerNorm" not in used
            else [],
        ]
    return []


def draw_hint(
    kind: str,
    module: str,
    shots: Sequence[str],
    rng: random.Random,
    *,
    inert_terms: frozenset[str] = frozenset(),
    inert_fields: frozenset[str] = frozenset(),
    donor_inert_terms: frozenset[str] = frozenset(),
    known_drops: frozenset[str] = frozenset(),
    asked: Collection[str] = frozenset(),
    tried: Mapping[str, Collection[str]] | None = None,
) -> str | None:
    """The change a search prompt names, drawn at random (module docstring).

    A group is drawn first, each with equal weight (the constants; for a reward: dropping
    a term, reworking one; for a network: the activation, the number of layers, layer
    normalization, skip connections or widths; for a crossover, the first shown
    program's terms or fields, or its activation or layer normalization), then a change
    within it, so that a network is not asked for another activation (six to choose
    from) most of the time.

    Args:
        kind: the prompt's kind (:data:`serl_jax.config.SEARCH_PROMPT_KINDS`).
        module: the slot (``reward``, ``network``, ...).
        shots: the shown programs' code, in the prompt's order (ascending score, best
            last): the changes are drawn from the last.
        rng: the draw's random source (two ``rng.choice`` calls when a change is drawn).
        inert_terms: (reward) the best program's terms that are zero on the novelty
            probe: no change names them, nor a constant that feeds only them.
        inert_fields: (reward, ``crossover``) state fields with one value over the
            probe: none is carried into the best.
        donor_inert_terms: (reward, ``crossover``) the first shown program's terms that
            are zero on the probe: none is carried into the best.
        known_drops: (reward) the best program's terms whose drop would return a program
            the run has (the same outputs on the probe:
            :func:`serl_jax.loop.novelty.without_term`): none is dropped.
        asked: changes named already to a program equal to the best (sentences as
            returned): none is drawn again.
        tried: values the run's programs of the module give each named constant
            (:func:`values_tried`): a constant's change sets none of them
            (:func:`new_values`).

    Returns:
        One sentence, or None when the kind names no change or the program allows none.
    """
    if not shots or (kind == "crossover" and len(shots) < 2):
        return None
    best = shots[-1]
    groups = []
    if kind == "crossover":
        groups += _crossover_hints(module, shots[0], best, donor_inert_terms, inert_fields)
    if kind in ("better", "parameters"):
        groups.append(_constant_hints(module, best, inert_terms, tried or {}))
    if kind in ("better", "form"):
        groups += _form_hints(module, best, inert_terms, known_drops)
    groups = [[h for h in g if h not in asked] for g in groups]
    groups = [g for g in groups if g]
    return rng.choice(rng.choice(groups)) if groups else None


def _squashed(code: str) -> str:
    """Code without whitespace and with one quote character, to find an edit however the
    answer formats it."""
    return re.sub(r"\s+", "", code).replace("'", '"')


def made_change(sentence: str, code: str, shown: str) -> bool | None:
    """Whether an answer made the change a hint named, where the sentence says what to
    write (:data:`CHANGES`).

    Args:
        sentence: the hint (:func:`read_change` reads it).
        code: the answer's program.
        shown: the program the change was asked of (the best one the prompt showed).

    Returns:
        True or False for the changes an edit can be checked for: a constant has the new
        value; an activation named to replace is gone and the new one called; a dropped
        term is not returned; the replacement text occurs more often than in ``shown``
        (whitespace and quote style aside), a line to write twice more often, a line to
        delete less often. None for a change named in words only (a skip connection, a
        term reworked another way, a crossover's term or field) and for a sentence no
        template writes.
    """
    read = read_change(sentence)
    if read is None:
        return None
    kind, fields = read
    if kind == "constant":
        value = dict(program_constants(code)).get(fields["name"])
        return value is not None and float(value) == float(fields["new"])
    if kind in ("activation", "crossover: an activation"):
        gone = "old" not in fields or re.search(rf"\bnn\.{fields['old']}\(", code) is None
        return gone and re.search(rf"\bnn\.{fields['name']}\(", code) is not None
    if kind == "drop a term":
        return fields["term"] not in term_names(code)
    squashed, before = _squashed(code), _squashed(shown)
    if "new" in fields:
        new = _squashed(fields["new"])
        return squashed.count(new) > before.count(new)
    if "line" in fields:
        line = _squashed(fields["line"])
        if sentence.startswith("Add"):
            return squashed.count(line) > before.count(line)
        return squashed.count(line) < before.count(line)
    return None
