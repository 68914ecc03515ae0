"""Novelty of a run's programs: copies of what the prompt showed, functional duplicates,
distinct programs.

Definitions (over a run's *valid* candidates: those that passed validation, status
``validated``, ``screened``, ``evaluated`` or ``crashed``, in run order):

- **Canonical program** (:func:`canonical_program`): the syntax tree after renaming every
  name the program binds (module-level names, function names and arguments, local
  variables, import aliases) to ``_1``, ``_2``, ... in order of first appearance, one name
  per scope, then :func:`llm.parsing.program_text` (docstrings dropped; comments and
  formatting are not in the tree). Kept as written: constants, attribute and keyword
  names, names bound in class bodies (flax fields and methods are attributes) and names
  the program does not bind (builtins, ``import jax`` without an alias).
- **Copy** (:func:`is_copy`): a designed candidate whose program (its module's slot) has
  the canonical program of one of the ``python`` code blocks of its own prompt (in-context
  examples, the default or library example it was shown). A renamed variable is a copy;
  a changed constant is not.
- **Functional duplicate** (:func:`same_outputs`): a candidate whose every slot computes
  the same outputs as an earlier valid candidate's on a fixed probe: a reward slot its
  terms (:func:`serl_jax.components.reward.reward_term_values`, names and values) on the
  validator's batch of real transitions, a network slot its policy outputs and values at
  initialization (``PRNGKey(0)``) on the validator's observations; outputs agree when
  every element differs by at most ``1e-6`` times the largest magnitude of that output
  (:data:`RTOL`). Other slots (imagination, profiling, communication) agree when their
  canonical programs are equal.
- **Rates** (:func:`novelty`), over the designer's valid programs (those answering one of
  its prompts, ``prompt_id`` set; the reference and the search's library seeds are not
  the designer's, but an earlier one can be what a designed program duplicates):
  ``copy_rate`` = copies / designed valid, ``duplicate_rate`` = functional duplicates of
  an earlier valid candidate / designed valid (both 0.0 when there is none),
  ``designed_valid`` (a count); and ``distinct_valid`` = valid candidates, the seeds
  included, that are neither (a count).

The probe runs candidate code in this process: call :func:`probe_outputs` only on code
that passed :func:`llm.validate.validate` (it defines it with
:func:`llm.validate.load_validated`), on the inputs that validation tried it on.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable, Iterable, Mapping

import numpy as np

from llm.parsing import program_text
from serl_jax.loop.store import Candidate

__all__ = [
    "PROBED",
    "RTOL",
    "VALID",
    "canonical_program",
    "is_copy",
    "novelty",
    "novelty_labels",
    "probe_constant_fields",
    "probe_outputs",
    "same_outputs",
    "shown_programs",
    "without_term",
]

RTOL = 1e-6
"""Two outputs agree when no element differs by more than this times the output's largest
magnitude (relative, unitless)."""

VALID = ("validated", "screened", "evaluated", "crashed")
"""The statuses of candidates that passed validation."""

PROBED = ("reward", "network")
"""Slots whose outputs :func:`probe_outputs` computes."""

_PYTHON_BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _bound(node: ast.AST) -> set[str]:
    """Names a function, lambda or module binds in its own scope (not in nested ones):
    its arguments, assignment / loop / ``with`` / comprehension targets, nested function
    and class names, import aliases and exception names."""
    names: set[str] = set()
    if isinstance(node, _SCOPES):
        a = node.args
        names.update(x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs))
        names.update(x.arg for x in (a.vararg, a.kwarg) if x is not None)
    todo = list(node.body) if isinstance(node.body, list) else [node.body]
    while todo:
        child = todo.pop()
        if isinstance(child, (*_SCOPES, ast.ClassDef)):
            if not isinstance(child, ast.Lambda):
                names.add(child.name)
            continue
        if isinstance(child, ast.Name) and isinstance(child.ctx, (ast.Store, ast.Del)):
            names.add(child.id)
        elif isinstance(child, ast.alias) and child.asname:
            names.add(child.asname)
        elif isinstance(child, ast.ExceptHandler) and child.name:
            names.add(child.name)
        todo.extend(ast.iter_child_nodes(child))
    return names


class _Renamer(ast.NodeTransformer):
    """Renames bound names (see the module docstring) to ``_<n>`` by first appearance."""

    def __init__(self) -> None:
        self.scopes: list[tuple[set[str], dict[str, str]] | None] = []  # None: a class body
        self.count = 0

    def _name(self, name: str) -> str:
        """The canonical name of ``name`` where it is used, or ``name`` itself."""
        for scope in reversed(self.scopes):
            if scope is not None and name in scope[0]:
                if name not in scope[1]:
                    self.count += 1
                    scope[1][name] = f"_{self.count}"
                return scope[1][name]
        return name

    def _binding(self, name: str) -> str:
        """The canonical name of a name bound here (kept in a class body)."""
        return name if self.scopes[-1] is None else self._name(name)

    def _scoped(self, node: ast.AST) -> ast.AST:
        self.scopes.append((_bound(node), {}))
        self.generic_visit(node)
        self.scopes.pop()
        return node

    def visit_Module(self, node: ast.Module) -> ast.AST:
        return self._scoped(node)

    def visit_Lambda(self, node: ast.Lambda) -> ast.AST:
        return self._scoped(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.name = self._binding(node.name)
        outside = (*node.decorator_list, *node.args.defaults, *node.args.kw_defaults, node.returns)
        for outer in outside:
            if outer is not None:
                self.visit(outer)
        self.scopes.append((_bound(node), {}))
        self.visit(node.args)
        node.body = [self.visit(stmt) for stmt in node.body]
        self.scopes.pop()
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_arguments(self, node: ast.arguments) -> ast.AST:
        for a in (*node.posonlyargs, *node.args, *node.kwonlyargs, node.vararg, node.kwarg):
            if a is not None:
                a.arg = self._name(a.arg)
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        node.name = self._binding(node.name)
        for outer in (*node.decorator_list, *node.bases, *node.keywords):
            self.visit(outer)
        self.scopes.append(None)
        node.body = [self.visit(stmt) for stmt in node.body]
        self.scopes.pop()
        return node

    def visit_Name(self, node: ast.Name) -> ast.AST:
        store = isinstance(node.ctx, (ast.Store, ast.Del))
        node.id = self._binding(node.id) if store else self._name(node.id)
        return node

    def visit_alias(self, node: ast.alias) -> ast.AST:
        if node.asname:
            node.asname = self._binding(node.asname)
        return node

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> ast.AST:
        if node.name:
            node.name = self._binding(node.name)
        self.generic_visit(node)
        return node


def canonical_program(code: str) -> str:
    """The canonical program of ``code`` (module docstring): equal for two programs that
    differ only in the names they bind, docstrings, comments and formatting.

    Args:
        code: Python source.

    Returns:
        :func:`llm.parsing.program_text` of the renamed program, or ``code`` itself when
        it does not parse.
    """
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code
    return program_text(ast.unparse(_Renamer().visit(tree)))


def shown_programs(prompt: str) -> list[str]:
    """The programs a prompt showed: the bodies of its fenced ``python`` blocks (in-context
    examples, the default or library example, a rejected answer in a debug prompt)."""
    return _PYTHON_BLOCK.findall(prompt)


def is_copy(code: str, prompt: str) -> bool:
    """Whether ``code`` has the canonical program of one of ``prompt``'s shown programs."""
    mine = canonical_program(code)
    return any(canonical_program(shown) == mine for shown in shown_programs(prompt))


@functools.cache
def _probe_inputs():
    """The validator's trial inputs (64 real transitions and their observations from the
    shipped US sample, a fixed seed): ``(env, params, prev, action, next, obs)``."""
    from llm.validate._child import trial_inputs

    return trial_inputs(64)


@functools.cache
def probe_constant_fields() -> frozenset[str]:
    """The ``EnvState`` fields with one value over the probe's transitions, before and
    after the step (``pace``: 0 at one-minute steps): a reward term that reads only these
    computes the same on every probe transition.

    Returns:
        The field names.
    """
    _, _, prev, _, nxt, _ = _probe_inputs()
    constant = set()
    for name in type(prev).__dataclass_fields__:
        values = np.concatenate([np.ravel(getattr(prev, name)), np.ravel(getattr(nxt, name))])
        if np.all(values == values[0]):
            constant.add(name)
    return frozenset(constant)


def probe_outputs(code: str, kind: str) -> dict[str, np.ndarray]:
    """A validated program's outputs on the fixed probe (module docstring).

    Args:
        code: a ``reward`` or ``network`` program that passed validation.
        kind: ``"reward"`` or ``"network"``.

    Returns:
        Reward: each term of :func:`~serl_jax.components.reward.reward_term_values`
        (``"total"`` included), float32 ``[64]``; network: ``"policy"`` ``[64, K]`` and
        ``"value"`` ``[64]``.

    Raises:
        ValueError: ``kind`` is not one of :data:`PROBED`.
        llm.validate.StaticError: the code fails validation's first stage.
    """
    import jax

    from llm.validate import load_validated
    from serl_jax.components.reward import reward_term_values

    if kind not in PROBED:
        raise ValueError(f"no probe for slot {kind!r}; probed slots: {', '.join(PROBED)}")
    _, params, prev, action, nxt, obs = _probe_inputs()
    entry = load_validated(code, kind)
    if kind == "reward":
        out = jax.jit(jax.vmap(entry, in_axes=(0, 0, 0, None)))(prev, action, nxt, params)
        outputs = reward_term_values(out)
    else:
        variables = entry.init(jax.random.PRNGKey(0), obs)
        policy, value = jax.jit(entry.apply)(variables, obs)
        outputs = {"policy": policy, "value": value}
    return {name: np.asarray(x) for name, x in outputs.items()}


def same_outputs(a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray]) -> bool:
    """Whether two probes agree: the same output names and shapes, and every element within
    :data:`RTOL` times the output's largest magnitude (equal zeros agree)."""
    if a.keys() != b.keys():
        return False
    for name, x in a.items():
        y = b[name]
        if x.shape != y.shape:
            return False
        scale = max(float(np.abs(x).max(initial=0.0)), float(np.abs(y).max(initial=0.0)))
        if float(np.abs(x - y).max(initial=0.0)) > RTOL * scale:
            return False
    return True


def without_term(outputs: Mapping[str, np.ndarray], term: str) -> dict[str, np.ndarray]:
    """A reward's probe outputs with one term dropped and the others computed as before:
    what the probe would see of the program asked to "drop the term".

    Args:
        outputs: a reward's :func:`probe_outputs` (its terms and ``"total"``), float32
            ``[64]`` each.
        term: one of its terms (not ``"total"``).

    Returns:
        The other terms, and ``"total"`` their sum (zeros with no term left). The sum
        runs in the outputs' key order, which may not be the program's: the two differ by
        float32 rounding, far inside :data:`RTOL`.

    Raises:
        KeyError: ``term`` is not a term of ``outputs``.
    """
    if term == "total" or term not in outputs:
        raise KeyError(f"{term!r} is not a term of the outputs ({', '.join(outputs)})")
    kept = {name: x for name, x in outputs.items() if name not in (term, "total")}
    return {**kept, "total": sum(kept.values(), np.zeros_like(outputs["total"]))}


Signature = tuple[str | Mapping[str, np.ndarray], ...]


def _signature(cand: Candidate, slots: Iterable[str], probe: Callable) -> Signature:
    """Per slot: its probe outputs (a probed slot with code) or its canonical program."""
    return tuple(
        probe(cand.slot_code(kind), kind)
        if kind in PROBED and cand.slot_code(kind).strip()
        else canonical_program(cand.slot_code(kind))
        for kind in slots
    )


def _same(a: Signature, b: Signature) -> bool:
    return all(
        x == y if isinstance(x, str) or isinstance(y, str) else same_outputs(x, y)
        for x, y in zip(a, b, strict=True)
    )


def novelty_labels(
    candidates: Iterable[Candidate],
    prompts: Mapping[int, str],
    slots: Iterable[str],
    probe: Callable[[str, str], Mapping[str, np.ndarray]] = probe_outputs,
) -> list[tuple[Candidate, bool, bool]]:
    """Each valid candidate's novelty labels (module docstring), in run order.

    Args:
        candidates: the run's candidates in run order (invalid ones are skipped).
        prompts: prompt text by prompt id (``RunStore.prompts``' ``id`` and ``prompt``).
        slots: the slots a candidate trains with (``serl_jax.loop.outer.SLOTS``).
        probe: ``(code, kind) -> outputs`` of a validated program (default
            :func:`probe_outputs`).

    Returns:
        ``(candidate, copy, duplicate)`` per valid candidate: ``copy`` whether its module's
        program is a copy of one its prompt showed (False without a prompt),
        ``duplicate`` whether it computes what an earlier valid candidate computes.
    """
    slots, probe = tuple(slots), functools.cache(probe)  # a program is probed once
    seen: list[Signature] = []
    labels = []
    for cand in candidates:
        if cand.status not in VALID:
            continue
        prompt = prompts.get(cand.prompt_id) if cand.prompt_id is not None else None
        copy = prompt is not None and is_copy(cand.slot_code(cand.module), prompt)
        mine = _signature(cand, slots, probe)
        duplicate = any(_same(mine, other) for other in seen)
        if not duplicate:
            seen.append(mine)
        labels.append((cand, copy, duplicate))
    return labels


def novelty(
    candidates: Iterable[Candidate],
    prompts: Mapping[int, str],
    slots: Iterable[str],
    probe: Callable[[str, str], Mapping[str, np.ndarray]] = probe_outputs,
) -> dict[str, float | int]:
    """The run's novelty figures (module docstring) from :func:`novelty_labels`, whose
    arguments it takes.

    Returns:
        ``{"copy_rate", "duplicate_rate", "designed_valid", "distinct_valid"}``: two
        fractions in [0, 1] and two counts.
    """
    labels = novelty_labels(candidates, prompts, slots, probe)
    designed = [(copy, dup) for cand, copy, dup in labels if cand.prompt_id is not None]
    n = max(len(designed), 1)
    return {
        "copy_rate": sum(copy for copy, _ in designed) / n,
        "duplicate_rate": sum(dup for _, dup in designed) / n,
        "designed_valid": len(designed),
        "distinct_valid": sum(not (copy or dup) for _, copy, dup in labels),
    }
