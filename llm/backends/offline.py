"""The offline designer: a program-library sampler and mutator behind the backend interface.

This is **not a language model**. It is the default ``--llm offline`` backend, so that the
SE-RL loop runs end to end with no model available: it reads the module and the past
candidates from the prompt, samples reward, network and imagination programs from the
curated library of :mod:`llm.designs` (reward, network, imagination and profile programs
and communication modules) and mutates their terms and constants, and answers
in the format a model would: one line saying what it did, then the code in a fenced
``python`` block::

    designer = make_backend("offline", seed=0, explore=0.3)
    [[completion]] = designer.generate([prompt], n=1, temperature=0.8)
    # "Mutated j2-c3 (PA -12.40 bps): CONCENTRATION 100.0 -> 63.2\\n```python\\n...```"

What it reads from a prompt (the contract of :mod:`llm.prompts.builder` and
:mod:`llm.prompts.search`):

- the module: the first line ``MODULE: LLM4Reward`` (reward slot), ``MODULE: LLM4Agent``
  (network slot), ``MODULE: LLM4Imagine`` (imagination slot), ``MODULE: LLM4Profiling``
  (profiling slot), ``MODULE: LLM4Communication`` (communication slot) or
  ``MODULE: InstructionRefinement`` (:data:`MODULES`); a prompt without one is refused
  with :class:`BackendError`.
- past candidates: a line ``### Candidate <id> | <score> <float> bps [| key value ...]``
  (``<score>`` is ``PA``, ``shortfall`` or ``mean-variance``, the run's ``loop.score``;
  higher is better)
  followed (after optional text lines) by a fenced ``python`` block with the candidate's
  code (the block must come before the next markdown heading). Other python blocks (e.g.
  the default implementation) are not candidates. A candidate whose code fails the
  validator's static stage for the module's slot is never a parent, a header whose score
  does not parse as a number is ignored, a non-finite score (``nan``) ranks last, and of
  two entries with the same id the later one counts.
- the search operator: the last line ``SEARCH: <kind>`` outside fenced blocks
  (:data:`SEARCH_KINDS`: ``better``, ``form``, ``parameters``, ``crossover``); none, or
  another word, reads as ``better``.

What it answers, per completion, for ``better`` (and design prompts, which have no
``SEARCH`` line):

- Exploitation, with probability ``1 - explore`` when the prompt has usable candidates:
  a parent is chosen by a size-``tournament`` tournament (draw ``tournament`` candidates
  uniformly with replacement, keep the highest score; with two candidates and the default
  size 2 the better one is the parent 3 times in 4) and mutated.
- Exploration, otherwise: a library program of the slot, drawn uniformly, with each of
  its tunable constants perturbed with probability 1/2 (at least one); a network also
  gets the ``depth``, ``activation`` and ``anchor`` operators below with probability 0.3
  each.

For the other search operators (``explore`` is not used; a prompt without usable
candidates is always answered by exploration):

- ``form``: exploration, a perturbed library program as above.
- ``parameters``: the tournament parent mutated by ``constants`` only, without lifting
  ``params`` fields into constants: only numbers change.
- ``crossover``: for rewards, the better of the first two usable candidates (on a tie the
  first) gets one term of the other's returned dict that it lacks, drawn uniformly among
  those that carry cleanly, with what the term reads in the other program and the better
  one lacks in the same form: helper assignments of ``reward`` (inserted before its
  ``return``), numeric module constants (after its constants), plain helper functions
  (before ``def reward``) and imports (before its first import). Assignments, constants
  and helpers whose name the better program uses already are renamed
  (``<term>_<name>``, ``<NAME>_<TERM>``, ``<name>_<term>``); the description line starts
  with ``Crossed`` and names what was carried. A term that reads a name bound twice, in a
  branch, as a class or a non-numeric module value, or a helper with decorators or nested
  scopes, or an import or builtin the better program binds otherwise, does not carry;
  when no term does (or the two take different arguments,
  or the better one has :data:`MAX_TERMS` terms), the answer is a normal mutation of the
  tournament parent and its description line says ``no crossover (<why>)``. For the other
  slots, crossover is a normal mutation of the tournament parent (their programs have no
  terms to exchange), and the description line says so.

Mutation operators, applied to the code through :mod:`ast` (the tree locates the nodes;
edits are spliced into the source at the nodes' positions, so comments and layout
survive). One operator per mutation, with probability 0.3 a second, different one (never the
inverse of the first):

- ``constants``: multiply one or two tunable constants by ``exp(N(0, sigma))`` (sign
  preserved; floats rounded to 3 significant digits, integers stay integers, widths are
  multiples of 8 in [8, 256]). Tunables are module-level ``UPPER_CASE = <number>``
  assignments (but names read inside a subscript, such as ``obs[..., :PRIVATE]``: the
  observation's layout) and the numeric field defaults of ``class Network`` (but its
  depths and prior anchor, see ``depth`` and ``anchor``) or ``class Communication``; code
  without them falls back to literal floats of the reward (not 0, 1, 1e4, 1e-4, epsilons
  below 1e-5 or exponents) or the integer widths of ``Dense(...)`` calls of a network. A
  reward reading ``params.concentration_penalty`` or ``params.terminal_penalty_bps`` (the
  default reward) may get it lifted into a perturbed module constant.
- rewards: ``add_term`` inserts a term from :func:`llm.designs.reward_terms` into the
  returned dict (with its constants and helper lines, at most 8 terms), ``drop_term``
  removes one (never the last, never ``pa``) and then the helper lines and constants only
  it used.
- imagination programs: ``constants`` only (their module-level constants set the size of
  the scenario: a volatility scale, a trend size, a shock's multiple or length).
- profile programs: ``constants`` only (module-level constants: a window's share of the
  day, an urgency, a buyer's size); a float named ``*SHARE*`` or ``*FRACTION*`` stays in
  (0, 1].
- communication modules: ``constants`` only (module-level constants and the field
  defaults of ``class Communication``): ``message_size`` (M) stays an integer in
  :data:`MESSAGE_RANGE` [1, 16], width-like fields (``width``, ``hidden``, ``units``)
  multiples of 8 in [8, 256], depth-like ones move by one in [1, 4] and other integers
  (a part of the message) stay in :data:`MESSAGE_PART_RANGE` [1, 10].
- networks: ``depth`` moves a depth field (``depth``, ``layers``, ``blocks``) or a literal
  ``range(k)`` loop count by one within [1, 4]; ``activation`` replaces every use of one
  flax activation (``nn.tanh``, ``relu``, ``gelu``, ``silu``, ``elu``) by another;
  ``anchor`` multiplies the ``prior_anchor_steps`` field of ``class Network`` (the time
  constant, in steps, with which the action prior pulls the inventory back to schedule;
  :func:`serl_jax.rl.networks.declared_prior_anchor`) by ``exp(N(0, sigma))``, or
  declares it with a log-uniform draw in [1, 40] when the class has none (``constants``
  leaves that field to it).

Every answer passes :func:`llm.validate.check_static` for its slot: a mutation that fails
it is retried (``max_retries`` times), then the parent is returned unmutated (and the
description line says so).

``temperature`` scales the mutation size: ``sigma = 0.5 * temperature`` (capped at 2).
``temperature = 0`` is greedy, as for a model, whatever the search operator: no sampling
at all, every completion is the highest-scoring usable candidate unchanged, or the first
library program (the framework's default, ``pa_penalty`` / ``separate_mlp`` /
``volatility_scale`` / ``independent_days`` / ``linear_message``) unchanged when there is
none.

Instruction refinement (``MODULE: InstructionRefinement``): the prompt lists past
instructions as ``### Instruction <id> | <score> <float> bps`` each followed by a ``text``
block, and the current instruction in a ``text`` block not under such a header. The
designer takes a base instruction (with probability ``1 - explore`` the tournament winner
among the past instructions, else the current one; at temperature 0 the best past one),
appends one curated execution hint it does not contain yet (two with probability 0.3;
:data:`INSTRUCTION_HINTS`, e.g. "penalize deviation from the TWAP schedule"), dropping a
random earlier hint first when it already holds four, and answers with a description line
and the new instruction in a fenced ``text`` block.

Determinism: all randomness comes from one ``random.Random(seed)``, so the completions
are a function of the seed and the sequence of calls (never the global RNG or hash
order). ``max_new_tokens`` is ignored (programs are short).
"""

from __future__ import annotations

import ast
import copy
import math
import random
import re
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from llm.backends.base import Backend, BackendError
from llm.designs import Design, RewardTerm, library, reward_terms
from llm.validate.static import CLASS_ENTRY_POINTS, StaticError, check_static

__all__ = [
    "INSTRUCTION_HINTS",
    "MODULES",
    "SEARCH_KINDS",
    "Candidate",
    "OfflineDesigner",
    "parse_candidates",
]

#: Prompt module name -> slot kind (``None``: instruction refinement).
MODULES: dict[str, str | None] = {
    "LLM4Reward": "reward",
    "LLM4Agent": "network",
    "LLM4Imagine": "imagination",
    "LLM4Profiling": "profiling",
    "LLM4Communication": "communication",
    "InstructionRefinement": None,
}

#: Curated hints the designer adds to instructions (InstructionRefinement).
INSTRUCTION_HINTS: tuple[str, ...] = (
    "penalize deviation from the TWAP schedule (inventory left vs the linear schedule)",
    "reward fills that beat the interval VWAP (the fill price vs the minute's market price)",
    "make the terminal inventory penalty stronger",
    "penalize participation above about 10% of the minute's market volume",
    "penalize large child orders with a quadratic concentration term",
    "add a risk term on the inventory held times the minute's price move",
    "charge the spread and impact cost of each fill more than the timing gain",
    "weigh fills worse than the benchmark more heavily than fills better than it",
    "keep the price-advantage term as the main signal and return the reward as named terms",
    "keep every reward term on the default's scale (bps times params.reward_scale)",
    "trade faster when the price is favourable relative to the arrival price",
    "use a shared trunk for the policy and the value",
    "let deviations from the TWAP schedule persist longer (a larger prior_anchor_steps)",
    "normalize hidden layers with LayerNorm",
    "use residual blocks in the network",
    "encode the private features (time and inventory left) separately from the market features",
    "keep the policy head near zero at initialization so the untrained policy follows the prior",
    "change one constant at a time and keep the structure of the best past candidate",
)

ACTIVATIONS: tuple[str, ...] = ("tanh", "relu", "gelu", "silu", "elu")
WIDTH_RANGE = (8, 256)
DEPTH_RANGE = (1, 4)
#: A communication module's ``message_size`` (M, numbers per message) stays in this range
#: (``serl_jax.components.communication.MAX_MESSAGE_SIZE`` bounds it; not imported, to
#: keep JAX out of here).
MESSAGE_RANGE = (1, 16)
#: Its other integer fields that are not widths (a part of the message, such as
#: ``inventory_broadcast``'s learned ``market_size`` next to the 6 private features it
#: copies) stay in this range, so the part and the private features fit in a message.
MESSAGE_PART_RANGE = (1, 10)
#: The network field that sets the action prior's anchor (as
#: ``serl_jax.rl.networks.PRIOR_ANCHOR_FIELD``; not imported, to keep JAX out of here).
PRIOR_ANCHOR_FIELD = "prior_anchor_steps"
#: Where ``anchor`` draws a first ``prior_anchor_steps`` (steps, log-uniform).
ANCHOR_RANGE = (1.0, 40.0)
MAX_TERMS = 8
PROTECTED_TERMS = frozenset({"pa"})
#: EnvParams fields a reward may read that the constants operator can lift into a module
#: constant: field -> (constant name, the EnvParams default).
LIFTABLE_PARAMS: dict[str, tuple[str, float]] = {
    "concentration_penalty": ("CONCENTRATION", 100.0),
    "terminal_penalty_bps": ("TERMINAL_BPS", 100.0),
}

#: The search operators a prompt may name on a ``SEARCH: <kind>`` line (as
#: ``llm.prompts.search.SEARCH_PROMPT_KINDS``; not imported, to keep JAX out of here).
SEARCH_KINDS: tuple[str, ...] = ("better", "form", "parameters", "crossover")

_MODULE_LINE = re.compile(r"^MODULE:[ \t]*(\S+)[ \t]*$")
_SEARCH_LINE = re.compile(r"^SEARCH:[ \t]*(\S+)[ \t]*$")
# score labels: serl_jax.config.LOOP_SCORES's values
_HEADER = re.compile(
    r"^###[ \t]+(Candidate|Instruction)[ \t]+([^\s|]+)[ \t]*\|[ \t]*(PA|shortfall|mean-variance)"
    r"[ \t]+(\S+)[ \t]+bps\b(.*)$"
)
_HEADING = re.compile(r"^#{1,6}[ \t]")
_FENCE_OPEN = re.compile(r"^[ \t]*```[ \t]*([^\s`]*)")
_FENCE_CLOSE = re.compile(r"^[ \t]*```[ \t]*$")
_PYTHON_TAGS = frozenset({"python", "py", "python3", ""})
_TEXT_TAGS = frozenset({"text", "markdown", "md", ""})
_UPPER = re.compile(r"^[A-Z][A-Z0-9_]*$")
_DEPTH_NAME = re.compile(r"depth|layers|blocks", re.I)
_WIDTH_NAME = re.compile(r"width|hidden|units", re.I)
_MESSAGE_NAME = re.compile(r"^message_size$", re.I)
_SHARE_NAME = re.compile(r"share|fraction", re.I)


# --------------------------------------------------------------------------- prompt parsing


@dataclass(frozen=True)
class Candidate:
    """A past candidate (or instruction) read from a prompt.

    Attributes:
        id: its id as written in the header (``j2-c3``).
        score: its score in bps (``-inf`` when the prompt gave a non-finite value).
        code: the body of its fenced block (python code, or instruction text).
        label: the score's name in the header (``PA`` or ``shortfall``).
    """

    id: str
    score: float
    code: str
    label: str = "PA"


def _search_kind(prompt: str) -> str:
    """The kind on the last ``SEARCH: <kind>`` line outside fenced blocks (:data:`SEARCH_KINDS`;
    ``better`` when there is none or it names another)."""
    lines = prompt.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    inside = {k for start, end, _ in _fenced_blocks(lines) for k in range(start, end + 1)}
    kind = "better"
    for i, line in enumerate(lines):
        m = _SEARCH_LINE.match(line)
        if m and i not in inside:
            kind = m.group(1) if m.group(1) in SEARCH_KINDS else "better"
    return kind


def _module(prompt: str) -> str:
    for line in prompt.splitlines():
        m = _MODULE_LINE.match(line)
        if m and m.group(1) in MODULES:
            return m.group(1)
    raise BackendError(
        "offline designer: the prompt has no 'MODULE: <name>' line naming one of "
        f"{', '.join(MODULES)}"
    )


def _fenced_blocks(lines: list[str]) -> list[tuple[int, int, str]]:
    """``(open line, close line, tag)`` of every closed fenced block."""
    blocks, i = [], 0
    while i < len(lines):
        m = _FENCE_OPEN.match(lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not _FENCE_CLOSE.match(lines[j]):
            j += 1
        if j < len(lines):
            blocks.append((i, j, m.group(1).lower()))
        i = j + 1
    return blocks


def _parse_headers(prompt: str, what: str, tags: frozenset[str]) -> tuple[list[Candidate], set]:
    """Headers ``### <what> <id> | <PA|shortfall> <x> bps`` with the first block of
    ``tags`` after them (before the next heading); also returns the open lines of the
    blocks used."""
    lines = prompt.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    blocks = _fenced_blocks(lines)
    inside = {k for start, end, _ in blocks for k in range(start, end + 1)}
    found: dict[str, Candidate] = {}
    used: set[int] = set()
    for i, line in enumerate(lines):
        m = _HEADER.match(line)
        if i in inside or not m or m.group(1) != what:
            continue
        try:
            score = float(m.group(4))
        except ValueError:
            continue
        if not math.isfinite(score):
            score = -math.inf
        body = None
        for start, end, tag in blocks:
            if start <= i:
                continue
            between = [k for k in range(i + 1, start) if k not in inside]
            if any(_HEADING.match(lines[k]) for k in between):
                break
            if tag in tags:
                body = textwrap.dedent("\n".join(lines[start + 1 : end])).strip("\n") + "\n"
                used.add(start)
                break
        if body is not None and body.strip():
            found.pop(m.group(2), None)  # a repeated id: the later entry wins
            found[m.group(2)] = Candidate(m.group(2), score, body, m.group(3))
    return list(found.values()), used


def parse_candidates(prompt: str) -> list[Candidate]:
    """The past candidates of a design prompt, in prompt order (code unchecked).

    Example:
        >>> p = "### Candidate j1-c0 | PA -3.50 bps | WR 0.4\\n```python\\nx = 1\\n```\\n"
        >>> parse_candidates(p)
        [Candidate(id='j1-c0', score=-3.5, code='x = 1\\n', label='PA')]
    """
    return _parse_headers(prompt, "Candidate", _PYTHON_TAGS)[0]


def _parse_instructions(prompt: str) -> tuple[list[Candidate], str]:
    """Past instructions and the current instruction (the last text block not under an
    instruction header; ``""`` if none)."""
    entries, used = _parse_headers(prompt, "Instruction", _TEXT_TAGS - {""})
    lines = prompt.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    current = ""
    for start, end, tag in _fenced_blocks(lines):
        if tag in _TEXT_TAGS - {""} and start not in used:
            current = "\n".join(lines[start + 1 : end]).strip()
    return entries, current


# --------------------------------------------------------------------------- source edits


class _Source:
    """Source text with AST positions (UTF-8 byte columns) mapped to byte offsets."""

    def __init__(self, code: str):
        self.data = code.encode("utf-8")
        self.starts = [0, *(m.end() for m in re.finditer(b"\n", self.data))]

    def at(self, lineno: int, col: int) -> int:
        return self.starts[lineno - 1] + col

    def start(self, node: ast.AST) -> int:
        return self.at(node.lineno, node.col_offset)

    def end(self, node: ast.AST) -> int:
        return self.at(node.end_lineno, node.end_col_offset)

    def line_start(self, lineno: int) -> int:
        return self.starts[lineno - 1] if lineno - 1 < len(self.starts) else len(self.data)

    def line_text(self, lineno: int) -> str:
        end = self.starts[lineno] if lineno < len(self.starts) else len(self.data)
        return self.data[self.starts[lineno - 1] : end].decode("utf-8")

    def apply(self, edits: list[tuple[int, int, str]]) -> str:
        data = self.data
        last = len(data) + 1
        for start, end, text in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
            if end > last:
                raise ValueError("overlapping edits")
            data = data[:start] + text.encode("utf-8") + data[end:]
            last = start
        return data.decode("utf-8")


def _number(node: ast.AST | None) -> ast.Constant | None:
    """The numeric literal of ``node`` (through a unary minus/plus), else ``None``."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        node = node.operand
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node
    return None


@dataclass
class _Site:
    label: str
    node: ast.Constant
    role: str  # "float", "int", "width" or "depth"


def _target_name(stmt: ast.stmt) -> tuple[str, ast.AST] | None:
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        if isinstance(stmt.targets[0], ast.Name):
            return stmt.targets[0].id, stmt.value
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value:
        return stmt.target.id, stmt.value
    return None


def _role(name: str, value: int | float, kind: str) -> str:
    """How a tunable moves (:func:`_perturb`): ``float``, ``share`` (a profile's share of
    the day or of Q, in (0, 1]), ``depth``, ``width``, ``message`` (a communication
    module's M), ``part`` (another integer of one) or ``int``."""
    if isinstance(value, float):
        return "share" if kind == "profiling" and _SHARE_NAME.search(name) else "float"
    if _DEPTH_NAME.search(name):
        return "depth"
    if kind == "network":
        return "width"
    if kind == "communication":
        if _MESSAGE_NAME.match(name):
            return "message"
        return "width" if _WIDTH_NAME.search(name) else "part"
    return "int"


def _entry_class(tree: ast.Module, kind: str) -> ast.ClassDef | None:
    """The last top-level class the slot instantiates (``Network``, ``Communication``)."""
    name = CLASS_ENTRY_POINTS.get(kind)
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    return classes[-1] if classes else None


def _reward_function(tree: ast.Module) -> ast.FunctionDef | None:
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "reward"]
    return defs[-1] if defs else None


def _layout_names(tree: ast.Module) -> set[str]:
    """Names read inside subscripts (``obs[..., :PRIVATE]``): the observation's layout,
    which a mutation must not move."""
    return {
        n.id
        for sub in ast.walk(tree)
        if isinstance(sub, ast.Subscript)
        for n in ast.walk(sub.slice)
        if isinstance(n, ast.Name)
    }


def _named_sites(tree: ast.Module, kind: str) -> list[_Site]:
    sites = []
    layout = _layout_names(tree)
    for stmt in tree.body:
        named = _target_name(stmt)
        if named and _UPPER.match(named[0]) and named[0] not in layout:
            node = _number(named[1])
            if node is not None and node.value != 0:
                sites.append(_Site(named[0], node, _role(named[0], node.value, kind)))
    cls = _entry_class(tree, kind)
    if cls is not None:
        for stmt in cls.body:
            named = _target_name(stmt)
            node = _number(named[1]) if named else None
            if named and node is not None and node.value != 0:
                label = f"{cls.name}.{named[0]}"
                sites.append(_Site(label, node, _role(named[0], node.value, kind)))
    return sites


def _inline_sites(tree: ast.Module, kind: str) -> list[_Site]:
    """Literal constants a mutation may change in code without named tunables."""
    sites = []
    exponents = {
        id(n.right)
        for n in ast.walk(tree)
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Pow)
    }
    for node in ast.walk(tree):
        if kind == "reward":
            if (
                isinstance(node, ast.Constant)
                and type(node.value) is float
                and id(node) not in exponents
                and abs(node.value) >= 1e-5
                and abs(node.value) not in (0.0, 1.0, 1e4, 1e-4)
            ):
                sites.append(_Site(f"the constant on line {node.lineno}", node, "float"))
        elif kind == "network" and isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name == "Dense":
                args = [*node.args[:1], *(k.value for k in node.keywords if k.arg == "features")]
                for arg in args:
                    if isinstance(arg, ast.Constant) and type(arg.value) is int and arg.value >= 8:
                        sites.append(_Site(f"Dense width on line {arg.lineno}", arg, "width"))
    return sites


def _range_depth_sites(tree: ast.Module) -> list[_Site]:
    sites = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "range"
            and len(node.args) == 1
            and isinstance(node.args[0], ast.Constant)
            and type(node.args[0].value) is int
            and 1 <= node.args[0].value <= 8
        ):
            sites.append(_Site(f"range() on line {node.lineno}", node.args[0], "depth"))
    return sites


def _fmt_float(x: float) -> float:
    return float(f"{x:.3g}")


def _perturb(value: int | float, role: str, sigma: float, rng: random.Random) -> int | float:
    """A new value for a tunable (may equal the old one at small ``sigma``)."""
    if role == "depth":
        step = rng.choice((-1, 1))
        lo, hi = DEPTH_RANGE
        new = min(max(value + step, lo), hi)
        return new if new != value else min(max(value - step, lo), hi)
    factor = math.exp(rng.gauss(0.0, sigma))
    if role == "float":
        return _fmt_float(value * factor)
    if role == "share":
        return min(_fmt_float(value * factor), 1.0)
    if role == "width":
        lo, hi = WIDTH_RANGE
        return int(min(max(round(value * factor / 8) * 8, lo), hi))
    if role in ("message", "part"):
        lo, hi = MESSAGE_RANGE if role == "message" else MESSAGE_PART_RANGE
        return int(min(max(round(value * factor), lo), hi))
    return max(1, round(value * factor))


def _literal(value: int | float) -> str:
    return repr(value) if isinstance(value, float) else str(int(value))


# --------------------------------------------------------------------------- operators

_Edit = tuple[str, str]  # (new source, description)


def _op_constants(
    code: str,
    tree: ast.Module,
    kind: str,
    sigma: float,
    rng: random.Random,
    *,
    fresh: bool = False,
    lift: bool = True,
) -> _Edit | None:
    """Perturbs tunable constants (one or two; in ``fresh`` mode each with probability 1/2,
    at least one), possibly (with ``lift``) lifting a reward's ``params.<field>`` into a
    constant."""
    # A network's depths and prior anchor are the ``depth`` and ``anchor`` operators' (one
    # mutation never moves them twice).
    anchor = f"Network.{PRIOR_ANCHOR_FIELD}"
    sites = [
        s
        for s in _named_sites(tree, kind)
        if not (kind == "network" and s.role == "depth") and s.label != anchor
    ]
    if not sites:
        sites = _inline_sites(tree, kind)
    lifts = _lift_sites(tree) if kind == "reward" and lift else []
    pool: list[_Site | str] = [*sites, *lifts]
    if not pool:
        return None
    if fresh:
        chosen = [s for s in pool if rng.random() < 0.5] or [rng.choice(pool)]
    else:
        chosen = rng.sample(pool, min(len(pool), 2 if rng.random() < 0.3 else 1))
    src = _Source(code)
    edits, notes = [], []
    for site in chosen:
        if isinstance(site, str):
            lifted = _lift(code, tree, src, site, sigma, rng)
            if lifted:
                edits += lifted[0]
                notes.append(lifted[1])
            continue
        new = _perturb(site.node.value, site.role, sigma, rng)
        if new == site.node.value:
            continue
        edits.append((src.start(site.node), src.end(site.node), _literal(new)))
        notes.append(f"{site.label} {_literal(site.node.value)} -> {_literal(new)}")
    if not edits:
        return None
    return src.apply(edits), ", ".join(notes)


def _lift_sites(tree: ast.Module) -> list[str]:
    defined = {n[0] for s in tree.body if (n := _target_name(s))}
    used = {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "params"
        and node.attr in LIFTABLE_PARAMS
    }
    return [f for f in sorted(used) if LIFTABLE_PARAMS[f][0] not in defined]


def _constants_anchor(tree: ast.Module, src: _Source) -> tuple[int, str]:
    """Where module-level constants go: after the last constant, else after the imports."""
    anchor, prefix = None, "\n"
    for stmt in tree.body:
        named = _target_name(stmt)
        if named and _UPPER.match(named[0]):
            anchor, prefix = stmt, ""
        elif isinstance(stmt, ast.Import | ast.ImportFrom) and prefix:
            anchor = stmt
    if anchor is None:
        return 0, ""
    return src.line_start(anchor.end_lineno + 1), prefix


def _lift(code, tree, src, field, sigma, rng) -> tuple[list, str] | None:
    name, default = LIFTABLE_PARAMS[field]
    value = _perturb(default, "float", sigma, rng)
    edits = [
        (src.start(node), src.end(node), name)
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "params"
        and node.attr == field
    ]
    at, prefix = _constants_anchor(tree, src)
    edits.append((at, at, f"{prefix}{name} = {_literal(value)}  # was params.{field}\n"))
    return edits, f"params.{field} ({_literal(default)}) -> {name} = {_literal(value)}"


def _dict_return(tree: ast.Module) -> tuple[ast.FunctionDef, ast.Return] | None:
    """The reward function and its single top-level ``return {...}`` with string keys."""
    func = _reward_function(tree)
    if func is None:
        return None
    returns = [n for n in ast.walk(func) if isinstance(n, ast.Return)]
    if len(returns) != 1 or returns[0] not in func.body:
        return None
    value = returns[0].value
    if not isinstance(value, ast.Dict) or not value.keys:
        return None
    if any(not (isinstance(k, ast.Constant) and isinstance(k.value, str)) for k in value.keys):
        return None
    return func, returns[0]


def _jnp_bound(tree: ast.Module) -> bool:
    for stmt in tree.body:
        if isinstance(stmt, ast.Import):
            if any(a.name == "jax.numpy" and a.asname == "jnp" for a in stmt.names):
                return True
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "jax":
            if any(a.name == "numpy" and a.asname == "jnp" for a in stmt.names):
                return True
    return False


def _assigned_names(node: ast.AST) -> set[str]:
    return {
        n.id for n in ast.walk(node) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)
    }


def _op_add_term(
    code: str, tree: ast.Module, kind: str, sigma: float, rng: random.Random
) -> _Edit | None:
    found = _dict_return(tree)
    if kind != "reward" or found is None or not _jnp_bound(tree):
        return None
    func, ret = found
    if [a.arg for a in func.args.args] != ["prev_state", "action", "next_state", "params"]:
        return None
    keys = [k.value for k in ret.value.keys]
    if len(keys) >= MAX_TERMS:
        return None
    local = _assigned_names(func)
    defined = {n[0] for s in tree.body if (n := _target_name(s))}
    options = [
        t
        for t in reward_terms()
        if t.key not in keys and not any(s.split("=", 1)[0].strip() in local for s in t.statements)
    ]
    if not options:
        return None
    term: RewardTerm = rng.choice(options)
    src = _Source(code)
    constants = [
        f"{name} = {value}  # {comment}"
        for name, value, comment in term.constants
        if name not in defined
    ]
    edits = _term_edits(src, tree, ret, term.key, term.value, term.statements, constants)
    return src.apply(edits), f"added term '{term.key}' ({term.summary})"


def _term_edits(
    src: _Source,
    tree: ast.Module,
    ret: ast.Return,
    key: str,
    value: str,
    statements: Sequence[str],
    constants: Sequence[str] = (),
    module_lines: Sequence[tuple[int, str]] = (),
) -> list[tuple[int, int, str]]:
    """The edits that add a term to a reward's returned dict: its module constants (lines,
    after the program's constants), its helper statements (unindented lines, before the
    ``return``) and ``"key": value`` after the dict's last entry. ``module_lines`` are more
    ``(offset, text)`` insertions (imports, functions); text for one offset is joined in
    the order given, after the constants when it is their offset."""
    inserts: dict[int, list[str]] = {}
    if constants:
        at, prefix = _constants_anchor(tree, src)
        inserts.setdefault(at, []).append(prefix + "".join(f"{c}\n" for c in constants))
    for at, text in module_lines:
        inserts.setdefault(at, []).append(text)
    # one edit per offset: _Source.apply leaves the order of equal offsets unspecified
    edits = [(at, at, "".join(parts)) for at, parts in inserts.items()]
    indent = " " * ret.col_offset
    at = src.line_start(ret.lineno)
    edits.append((at, at, "".join(f"{indent}{s}\n" for s in statements)))
    last_key, last_value = ret.value.keys[-1], ret.value.values[-1]
    multiline = last_key.lineno != ret.value.lineno
    sep = ",\n" + " " * last_key.col_offset if multiline else ", "
    end = src.end(last_value)
    edits.append((end, end, f'{sep}"{key}": {value}'))
    return edits


def _op_drop_term(
    code: str, tree: ast.Module, kind: str, sigma: float, rng: random.Random
) -> _Edit | None:
    found = _dict_return(tree)
    if kind != "reward" or found is None:
        return None
    _, ret = found
    keys = [k.value for k in ret.value.keys]
    droppable = [i for i, k in enumerate(keys) if k not in PROTECTED_TERMS]
    if len(keys) < 2 or not droppable:
        return None
    i = rng.choice(droppable)
    src = _Source(code)
    d = ret.value
    if i == 0:
        span = (src.start(d.keys[0]), src.start(d.keys[1]))
    else:
        span = (src.end(d.values[i - 1]), src.end(d.values[i]))
    return _remove_dead_code(src.apply([(*span, "")])), f"dropped term '{keys[i]}'"


def _whole_lines(src: _Source, stmt: ast.stmt) -> bool:
    before = src.line_text(stmt.lineno).encode("utf-8")[: stmt.col_offset]
    after = src.line_text(stmt.end_lineno).encode("utf-8")[stmt.end_col_offset :].decode()
    return not before.strip() and (not after.strip() or after.strip().startswith("#"))


def _remove_dead_code(code: str) -> str:
    """Removes helper assignments of ``reward`` and module constants nothing reads."""
    for _ in range(50):
        tree = ast.parse(code)
        loaded = {
            n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
        }
        func = _reward_function(tree)
        body = [*(func.body if func else []), *tree.body]
        src = _Source(code)
        for stmt in body:
            named = _target_name(stmt)
            if not named or named[0] in loaded or not _whole_lines(src, stmt):
                continue
            if stmt in tree.body and not _UPPER.match(named[0]):
                continue
            lines = (src.line_start(stmt.lineno), src.line_start(stmt.end_lineno + 1))
            code = src.apply([(*lines, "")])
            break
        else:
            break
    # collapse the blank lines left behind (unless that would touch a string's contents)
    collapsed = re.sub(r"\n{4,}", "\n\n\n", code)
    if ast.dump(ast.parse(collapsed)) == ast.dump(ast.parse(code)):
        return collapsed
    return code


def _activation_sites(tree: ast.Module) -> list[ast.Attribute]:
    flax_aliases, jax_aliases = set(), set()
    for stmt in ast.walk(tree):
        if isinstance(stmt, ast.Import):
            for a in stmt.names:
                if a.name in ("flax.linen", "jax.nn") and a.asname:
                    flax_aliases.add(a.asname)
                elif a.name == "jax":
                    jax_aliases.add(a.asname or "jax")
        elif isinstance(stmt, ast.ImportFrom):
            for a in stmt.names:
                if (stmt.module, a.name) in (("flax", "linen"), ("jax", "nn")):
                    flax_aliases.add(a.asname or a.name)
    sites = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or node.attr not in ACTIVATIONS:
            continue
        base = node.value
        if (isinstance(base, ast.Name) and base.id in flax_aliases) or (
            isinstance(base, ast.Attribute)
            and base.attr == "nn"
            and isinstance(base.value, ast.Name)
            and base.value.id in jax_aliases
        ):
            sites.append(node)
    return sites


def _op_activation(
    code: str, tree: ast.Module, kind: str, sigma: float, rng: random.Random
) -> _Edit | None:
    sites = _activation_sites(tree) if kind == "network" else []
    present = sorted({s.attr for s in sites})
    if not present:
        return None
    old = rng.choice(present)
    new = rng.choice([a for a in ACTIVATIONS if a != old])
    src = _Source(code)
    edits = [(src.end(s) - len(old), src.end(s), new) for s in sites if s.attr == old]
    return src.apply(edits), f"activation {old} -> {new}"


def _op_depth(
    code: str, tree: ast.Module, kind: str, sigma: float, rng: random.Random
) -> _Edit | None:
    if kind != "network":
        return None
    sites = [s for s in _named_sites(tree, kind) if s.role == "depth"] or _range_depth_sites(tree)
    if not sites:
        return None
    site = rng.choice(sites)
    new = _perturb(site.node.value, "depth", sigma, rng)
    if new == site.node.value:
        return None
    src = _Source(code)
    edit = (src.start(site.node), src.end(site.node), _literal(new))
    return src.apply([edit]), f"{site.label} {site.node.value} -> {new}"


def _anchor_field(network: ast.ClassDef) -> ast.Constant | None:
    for stmt in network.body:
        named = _target_name(stmt)
        if named and named[0] == PRIOR_ANCHOR_FIELD:
            return _number(named[1])
    return None


def _op_anchor(
    code: str, tree: ast.Module, kind: str, sigma: float, rng: random.Random
) -> _Edit | None:
    """Moves the ``prior_anchor_steps`` field of ``class Network`` (like ``constants``), or
    declares it with a log-uniform draw in :data:`ANCHOR_RANGE` when absent."""
    network = _entry_class(tree, kind) if kind == "network" else None
    if network is None or not network.body:
        return None
    src = _Source(code)
    node = _anchor_field(network)
    if node is not None:
        if node.value <= 0:  # k = 0 (one-step catch-up) cannot be scaled
            return None
        new = _perturb(float(node.value), "float", sigma, rng)
        if new == node.value:
            return None
        edit = (src.start(node), src.end(node), _literal(new))
        return src.apply([edit]), f"Network.{PRIOR_ANCHOR_FIELD} {node.value!r} -> {new!r}"
    lo, hi = ANCHOR_RANGE
    value = _fmt_float(math.exp(rng.uniform(math.log(lo), math.log(hi))))
    # After the last field, else after the docstring, else first in the class body.
    body = network.body
    fields = [s for s in body if isinstance(s, ast.AnnAssign)]
    docstring = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
    if fields:
        at = src.line_start(fields[-1].end_lineno + 1)
    elif docstring:
        at = src.line_start(body[0].end_lineno + 1)
    else:
        at = src.line_start(body[0].lineno)
    indent = src.line_text(body[0].lineno)[: body[0].col_offset]
    line = (
        f"{indent}{PRIOR_ANCHOR_FIELD}: float = {value!r}  # the prior's pull-back time, minutes\n"
    )
    return src.apply([(at, at, line)]), f"declared Network.{PRIOR_ANCHOR_FIELD} = {value!r}"


_Operator = Callable[..., "_Edit | None"]
OPERATORS: dict[str, tuple[tuple[_Operator, float], ...]] = {
    "reward": ((_op_constants, 0.55), (_op_add_term, 0.25), (_op_drop_term, 0.2)),
    "network": ((_op_constants, 0.4), (_op_depth, 0.3), (_op_activation, 0.3), (_op_anchor, 0.3)),
    "imagination": ((_op_constants, 1.0),),
    "profiling": ((_op_constants, 1.0),),
    "communication": ((_op_constants, 1.0),),
}


# A mutation's second operator is never the first one again nor its inverse.
_INVERSE = {_op_add_term: _op_drop_term, _op_drop_term: _op_add_term}


def _static_ok(code: str, kind: str) -> bool:
    try:
        check_static(code, kind)
    except StaticError:
        return False
    return True


def _op_parameters(
    code: str, tree: ast.Module, kind: str, sigma: float, rng: random.Random
) -> _Edit | None:
    """``constants`` without lifting ``params`` fields into constants: only numbers change
    (``SEARCH: parameters``)."""
    return _op_constants(code, tree, kind, sigma, rng, lift=False)


# --------------------------------------------------------------------------- crossover


class _NoCrossover(Exception):
    """Why no term of one reward can be carried into another (one line)."""


# Nodes that open a scope or bind by expression: code holding one is not carried (its
# names would need scope analysis the renaming below does not do).
_NESTED = (
    ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.NamedExpr,
    ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Global, ast.Nonlocal,
)  # fmt: skip


def _flat(node: ast.AST) -> bool:
    return not any(isinstance(n, _NESTED) for n in ast.walk(node))


def _flat_function(node: ast.FunctionDef) -> bool:
    """A plain helper function: no decorators, no nested scopes in its defaults or body."""
    args = node.args
    parts = [*node.body, *args.defaults, *(d for d in args.kw_defaults if d is not None)]
    return not node.decorator_list and all(_flat(p) for p in parts)


def _loaded(node: ast.AST) -> list[str]:
    """The names ``node`` reads, sorted (never hash order)."""
    names = {
        n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
    }
    return sorted(names)


def _binds(stmt: ast.stmt) -> list[str]:
    """The names a statement binds in its own scope (not inside nested definitions)."""
    out, todo = [], [stmt]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.append(node.name)
            continue
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            out.append(node.id)
        elif isinstance(node, ast.alias):
            out.append(node.asname or node.name.split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            out.append(node.name)
        todo.extend(ast.iter_child_nodes(node))
    return out


def _arg_names(args: ast.arguments) -> set[str]:
    every = (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg)
    return {x.arg for x in every if x is not None}


def _own_names(func: ast.FunctionDef) -> set[str]:
    """The names local to a function: its arguments and what its body binds."""
    return _arg_names(func.args) | {name for stmt in func.body for name in _binds(stmt)}


def _free(func: ast.FunctionDef) -> list[str]:
    """The names a helper function reads from the module, sorted."""
    own = _own_names(func)
    return [n for n in _loaded(func) if n not in own]


def _import_text(stmt: ast.Import | ast.ImportFrom, name: str) -> str:
    """The one-name import statement that binds ``name`` as ``stmt`` does."""
    alias = next(a for a in stmt.names if (a.asname or a.name.split(".")[0]) == name)
    if isinstance(stmt, ast.Import):
        return ast.unparse(ast.Import(names=[alias]))
    return ast.unparse(ast.ImportFrom(module=stmt.module, names=[alias], level=stmt.level))


class _Reward:
    """A dict-form reward program, parsed for crossover.

    Raises:
        _NoCrossover: it has no ``reward`` returning a dict of named terms.
    """

    def __init__(self, code: str, label: str):
        self.code, self.label = code, label
        self.tree = ast.parse(code)
        found = _dict_return(self.tree)
        if found is None:
            raise _NoCrossover(f"{label} does not return a dict of named terms")
        self.func, self.ret = found
        self.keys = [k.value for k in self.ret.value.keys]
        self.args = _arg_names(self.func.args)
        self.module: dict[str, list[ast.stmt]] = {}
        for stmt in self.tree.body:
            for name in _binds(stmt):
                self.module.setdefault(name, []).append(stmt)
        self.locals: dict[str, int] = {}  # name -> how many bindings in the reward
        for stmt in self.func.body:
            for name in _binds(stmt):
                self.locals[name] = self.locals.get(name, 0) + 1
        self.assigns: dict[str, ast.Assign] = {}  # one-name assignments before the return
        for stmt in self.func.body[: self.func.body.index(self.ret)]:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                if isinstance(stmt.targets[0], ast.Name):
                    self.assigns.setdefault(stmt.targets[0].id, stmt)
        self.names = {n.id for n in ast.walk(self.tree) if isinstance(n, ast.Name)}
        self.names |= {x.arg for x in ast.walk(self.tree) if isinstance(x, ast.arg)}
        self.names |= set(self.module) | set(self.locals)

    def binding(self, name: str, in_reward: bool) -> tuple[str, ast.AST | str | None]:
        """What ``name`` is where it is read (in the reward, or at module level):
        ``("arg", None)``, ``("local", assignment)``, ``("constant", assignment)``,
        ``("function", def)``, ``("import", its one-name import)``, ``("free", None)`` (a
        builtin, or undefined) or ``("unclear", None)`` (bound twice, in a branch, or as
        something else)."""
        if in_reward and name in self.args:
            return ("arg", None) if name not in self.locals else ("unclear", None)
        if in_reward and name in self.locals:
            stmt = self.assigns.get(name)
            if self.locals[name] == 1 and stmt is not None and _flat(stmt):
                return "local", stmt
            return "unclear", None
        stmts = self.module.get(name, [])
        if not stmts:
            return "free", None
        stmt = stmts[0]
        if len(stmts) > 1 or name == self.func.name:
            return "unclear", None
        if isinstance(stmt, ast.Import | ast.ImportFrom):
            return "import", _import_text(stmt, name)
        if isinstance(stmt, ast.FunctionDef) and stmt.name == name:
            return "function", stmt
        named = _target_name(stmt)
        if named and named[0] == name and _number(named[1]) is not None:
            return "constant", stmt
        return "unclear", None


class _Rename(ast.NodeTransformer):
    """Renames the names of carried code: those local to its scope by ``local``, the
    others (and function names) by ``module``."""

    def __init__(self, scope: set[str], local: dict[str, str], module: dict[str, str]):
        self.scope, self.local, self.module = scope, local, module

    def visit_Name(self, node: ast.Name) -> ast.Name:
        names = self.local if node.id in self.scope else self.module
        node.id = names.get(node.id, node.id)
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        node.name = self.module.get(node.name, node.name)
        self.generic_visit(node)
        return node


class _Transfer:
    """What one of the donor's terms needs in the base program: the donor's helper
    assignments, module constants, helper functions and imports it reads, directly or
    through each other, that the base does not already have in the same form."""

    def __init__(self, base: _Reward, donor: _Reward, key: str):
        self.base, self.donor, self.key = base, donor, key
        self.memo: dict[tuple[bool, str], bool] = {}
        self.seen: set[tuple[bool, str]] = set()
        self.carried: dict[tuple[bool, str], ast.stmt] = {}  # (local?, name) -> definition
        self.imports: list[str] = []

    def _local(self, name: str, in_reward: bool) -> bool:
        return in_reward and (name in self.donor.locals or name in self.donor.args)

    def same(self, name: str, in_reward: bool) -> bool:
        """Whether ``name`` means the same in both programs (the same definition, all the
        way down)."""
        key = (in_reward, name)
        if key not in self.memo:
            self.memo[key] = False  # a recursive helper counts as different: carried
            kind, mine = self.base.binding(name, in_reward)
            theirs_kind, theirs = self.donor.binding(name, in_reward)
            same = kind == theirs_kind and kind in ("arg", "free")
            if kind == theirs_kind == "import":
                same = mine == theirs
            elif kind == theirs_kind == "constant":
                same = ast.dump(mine.value) == ast.dump(theirs.value)
            elif kind == theirs_kind == "local":
                same = ast.dump(mine.value) == ast.dump(theirs.value) and all(
                    self.same(n, True) for n in _loaded(theirs.value)
                )
            elif kind == theirs_kind == "function":
                same = ast.dump(mine) == ast.dump(theirs) and all(
                    self.same(n, False) for n in _free(theirs)
                )
            self.memo[key] = same
        return self.memo[key]

    def need(self, name: str, in_reward: bool) -> None:
        """Plans carrying what ``name`` refers to in the donor.

        Raises:
            _NoCrossover: it cannot be carried cleanly.
        """
        key = (self._local(name, in_reward), name)
        if key in self.seen or self.same(name, in_reward):
            return
        self.seen.add(key)
        kind, node = self.donor.binding(name, in_reward)
        if kind == "local":
            for n in _loaded(node.value):
                self.need(n, True)
            self.carried[key] = node
        elif kind == "constant":
            self.carried[key] = node
        elif kind == "function" and _flat_function(node):
            for n in _free(node):
                self.need(n, False)
            self.carried[key] = node
        elif kind == "import" and name not in self.base.names:
            self.imports.append(node)
        elif kind == "function":
            raise _NoCrossover(
                f"term '{self.key}' reads the helper '{name}', which has decorators or "
                "nested scopes"
            )
        elif kind in ("import", "free"):
            raise _NoCrossover(
                f"term '{self.key}' reads '{name}', which {self.base.label} defines otherwise"
            )
        else:
            raise _NoCrossover(
                f"term '{self.key}' reads '{name}', which {self.donor.label} binds more than "
                "once, in a branch or as something other than a constant, helper or import"
            )

    def edits(self, src: _Source) -> tuple[list[tuple[int, int, str]], list[str]]:
        """The edits to the base program's source, and the names carried (as written in
        it)."""
        base, donor, key = self.base, self.donor, self.key
        taken = base.names | donor.names
        local_names: dict[str, str] = {}
        module_names: dict[str, str] = {}
        body, top = donor.func.body, donor.tree.body

        def position(item):
            (local, _), stmt = item
            return (0, body.index(stmt)) if local else (1, top.index(stmt))

        items = sorted(self.carried.items(), key=position)
        for (local, name), _ in items:
            if name not in base.names:
                continue
            stem = (
                f"{key}_{name}" if local else f"{name}_{key.upper() if _UPPER.match(name) else key}"
            )
            new, i = stem, 2
            while new in taken:
                new, i = f"{stem}_{i}", i + 1
            taken.add(new)
            (local_names if local else module_names)[name] = new
        in_reward = _Rename(donor.locals.keys() | donor.args, local_names, module_names)

        def carried(node: ast.AST, rename: _Rename) -> str:
            """The donor's text of ``node`` (comments and literals as written), or the
            renamed code when a name in it changes."""
            renamed = ast.unparse(rename.visit(copy.deepcopy(node)))
            if renamed != ast.unparse(node):
                return renamed
            return ast.get_source_segment(donor.code, node) or renamed

        statements, constants, functions = [], [], []
        donor_src = _Source(donor.code)
        for (local, name), stmt in items:
            if local:
                statements.append(carried(stmt, in_reward))
            elif isinstance(stmt, ast.FunctionDef):
                rename = _Rename(_own_names(stmt), {}, module_names)
                functions.append(carried(stmt, rename) + "\n\n\n")
            else:
                after = donor_src.line_text(stmt.end_lineno).encode("utf-8")[stmt.end_col_offset :]
                comment = after.decode().strip()
                comment = f"  {comment}" if comment.startswith("#") else ""
                node = _target_name(stmt)[1]
                value = ast.get_source_segment(donor.code, node) or ast.unparse(node)
                constants.append(f"{module_names.get(name, name)} = {value}{comment}")
        value = carried(donor.ret.value.values[donor.keys.index(key)], in_reward)
        module_lines = []
        if self.imports:
            first = next(
                (s for s in base.tree.body if isinstance(s, ast.Import | ast.ImportFrom)), None
            )
            at = src.line_start(first.lineno) if first else 0
            module_lines.append((at, "".join(f"{line}\n" for line in self.imports)))
        if functions:
            func = base.func
            at = src.line_start(min([func.lineno, *(d.lineno for d in func.decorator_list)]))
            module_lines.append((at, "".join(functions)))
        edits = _term_edits(
            src, base.tree, base.ret, key, value, statements, constants, module_lines
        )
        names = [*self.imports]
        for (local, name), _ in items:
            names.append((local_names if local else module_names).get(name, name))
        return edits, names


def _cross_rewards(base_code: str, donor_code: str, donor_id: str, rng: random.Random) -> _Edit:
    """Adds one term of the donor reward that the base reward lacks, with what it needs
    (:class:`_Transfer`); the term is drawn uniformly among those that carry cleanly.

    Raises:
        _NoCrossover: no term can be carried (the first reason found).
    """
    base = _Reward(base_code, "the better program")
    donor = _Reward(donor_code, donor_id)
    if ast.dump(base.func.args) != ast.dump(donor.func.args):
        raise _NoCrossover("the two reward functions take different arguments")
    if len(base.keys) >= MAX_TERMS:
        raise _NoCrossover(f"the better program has {MAX_TERMS} terms, the most")
    missing = [k for k in donor.keys if k not in base.keys]
    if not missing:
        raise _NoCrossover(f"{donor_id} has no term the better program lacks")
    reason = None
    for key in rng.sample(missing, len(missing)):
        transfer = _Transfer(base, donor, key)
        try:
            value = donor.ret.value.values[donor.keys.index(key)]
            if not _flat(value):
                raise _NoCrossover(f"term '{key}' holds a lambda or comprehension")
            for name in _loaded(value):
                transfer.need(name, True)
            src = _Source(base_code)
            edits, names = transfer.edits(src)
            code = src.apply(edits)
        except _NoCrossover as err:
            reason = reason or str(err)
            continue
        except (SyntaxError, ValueError):  # overlapping edits: never seen, but not fatal
            reason = reason or f"term '{key}' could not be spliced into the better program"
            continue
        if _static_ok(code, "reward"):
            carried = f" with {', '.join(names)}" if names else ""
            return code, f"added term '{key}' of {donor_id}{carried}"
        reason = reason or f"term '{key}' fails the static check once added"
    raise _NoCrossover(reason)


# --------------------------------------------------------------------------- the designer


class OfflineDesigner(Backend):
    """The offline designer backend: samples and mutates library programs (not a model).

    See the module docstring for the prompt contract, the selection rule and the
    mutation operators.

    Args:
        seed: seed of the designer's own ``random.Random``.
        explore: probability of answering with a fresh library program (or, for
            instruction refinement, of refining the current instruction) even when the
            prompt has past candidates, in [0, 1].
        tournament: tournament size of parent selection (>= 1; 1 = uniform).
        max_retries: mutation attempts before the parent is returned unmutated (>= 1).

    Raises:
        BackendError: an option out of range.
    """

    name = "offline"

    def __init__(
        self, seed: int = 0, explore: float = 0.3, tournament: int = 2, max_retries: int = 5
    ):
        if not 0.0 <= explore <= 1.0:
            raise BackendError(f"offline designer: explore must be in [0, 1], got {explore!r}")
        if int(tournament) != tournament or tournament < 1:
            raise BackendError(f"offline designer: tournament must be >= 1, got {tournament!r}")
        if int(max_retries) != max_retries or max_retries < 1:
            raise BackendError(f"offline designer: max_retries must be >= 1, got {max_retries!r}")
        self.seed = seed
        self.explore = float(explore)
        self.tournament = int(tournament)
        self.max_retries = int(max_retries)
        self._rng = random.Random(seed)

    def _generate(
        self, prompts: list[str], n: int, temperature: float, max_new_tokens: int
    ) -> list[list[str]]:
        return [[self._complete(p, temperature) for _ in range(n)] for p in prompts]

    # ------------------------------------------------------------------ one completion

    def _complete(self, prompt: str, temperature: float) -> str:
        module = _module(prompt)
        kind = MODULES[module]
        if kind is None:
            return self._refine(prompt, temperature)
        candidates = [c for c in parse_candidates(prompt) if _static_ok(c.code, kind)]
        designs = library(kind)
        if temperature == 0:
            if candidates:
                best = max(candidates, key=lambda c: c.score)
                note = f"Kept {best.id} ({_score(best)}) unchanged (temperature 0)."
                return _answer(note, best.code)
            d = designs[0]
            note = f"Library {kind} '{d.name}' unchanged (temperature 0): {d.summary}"
            return _answer(note, d.code)
        sigma = 0.5 * min(temperature, 4.0)
        search = _search_kind(prompt) if candidates else "form"
        if search == "parameters":
            parent = self._select(candidates)
            code, note = self._mutate(parent.code, kind, sigma, ((_op_parameters, 1.0),))
            return _answer(f"Mutated {parent.id} ({_score(parent)}): {note}.", code)
        if search == "crossover":
            return self._crossover(candidates, kind, sigma)
        if search != "form" and self._rng.random() >= self.explore:
            parent = self._select(candidates)
            code, note = self._mutate(parent.code, kind, sigma)
            return _answer(f"Mutated {parent.id} ({_score(parent)}): {note}.", code)
        design: Design = self._rng.choice(designs)
        code, note = self._fresh(design, kind, sigma)
        return _answer(f"Library {kind} '{design.name}' with {note}: {design.summary}", code)

    def _select(self, candidates: list[Candidate]) -> Candidate:
        drawn = [self._rng.randrange(len(candidates)) for _ in range(self.tournament)]
        return candidates[max(drawn, key=lambda i: (candidates[i].score, -i))]

    def _mutate(
        self,
        code: str,
        kind: str,
        sigma: float,
        operators: tuple[tuple[_Operator, float], ...] | None = None,
    ) -> tuple[str, str]:
        """Mutates ``code`` with the slot's operators (or ``operators``, with weights)."""
        for _ in range(self.max_retries):
            n_ops = 2 if self._rng.random() < 0.3 else 1
            current, notes, used = code, [], set()
            for _ in range(n_ops):
                result = self._apply_one(current, kind, sigma, used, operators)
                if result is not None:
                    current, note = result
                    notes.append(note)
            if notes and current != code and _static_ok(current, kind):
                return current, "; ".join(notes)
        return code, "no valid mutation found, parent returned unchanged"

    def _apply_one(
        self,
        code: str,
        kind: str,
        sigma: float,
        used: set,
        operators: tuple[tuple[_Operator, float], ...] | None = None,
    ) -> _Edit | None:
        """One operator, drawn by weight among those that apply to ``code`` and are not in
        ``used`` (the slot's operators, or ``operators``); adds it and its inverse to
        ``used``."""
        ops = [(op, w) for op, w in operators or OPERATORS[kind] if op not in used]
        while ops:
            k = self._rng.choices(range(len(ops)), weights=[w for _, w in ops])[0]
            op = ops[k][0]
            try:
                result = op(code, ast.parse(code), kind, sigma, self._rng)
            except (SyntaxError, ValueError, RecursionError):
                result = None
            if result is not None and result[0] != code:
                used.update({op, _INVERSE.get(op)})
                return result
            ops.pop(k)
        return None

    def _crossover(self, candidates: list[Candidate], kind: str, sigma: float) -> str:
        """``SEARCH: crossover``: the better of the first two candidates with one term of the
        other (rewards), else a mutation of the tournament parent saying why."""
        if kind != "reward":
            why = f"crossover combines reward programs, not {kind} programs"
        elif len(candidates) < 2:
            why = "the prompt shows one usable candidate"
        else:
            first, second = candidates[:2]
            base, donor = (first, second) if first.score >= second.score else (second, first)
            try:
                code, note = _cross_rewards(base.code, donor.code, donor.id, self._rng)
            except _NoCrossover as err:
                why = str(err)
            else:
                pair = f"{base.id} ({_score(base)}) with {donor.id} ({_score(donor)})"
                return _answer(f"Crossed {pair}: {note}.", code)
        parent = self._select(candidates)
        code, note = self._mutate(parent.code, kind, sigma)
        return _answer(
            f"Mutated {parent.id} ({_score(parent)}), no crossover ({why}): {note}.", code
        )

    def _fresh(self, design: Design, kind: str, sigma: float) -> tuple[str, str]:
        """A library program with randomized constants (and, for a network, maybe another
        depth and activation)."""
        for _ in range(self.max_retries):
            code, notes = design.code, []
            steps = [partial(_op_constants, fresh=True)]
            if kind == "network":
                steps += [
                    op for op in (_op_depth, _op_activation, _op_anchor) if self._rng.random() < 0.3
                ]
            for step in steps:
                result = step(code, ast.parse(code), kind, sigma, self._rng)
                if result is not None:
                    code = result[0]
                    notes.append(result[1])
            if _static_ok(code, kind):
                return code, "; ".join(notes) if notes else "its default constants"
        return design.code, "its default constants"

    # ------------------------------------------------------------------ instructions

    def _refine(self, prompt: str, temperature: float) -> str:
        entries, current = _parse_instructions(prompt)
        if temperature == 0:
            base = max(entries, key=lambda e: e.score) if entries else None
        elif entries and self._rng.random() >= self.explore:
            base = self._select(entries)
        else:
            base = None
        text = (base.code if base else current).strip()
        source = f"instruction {base.id} ({_score(base)})" if base else "the current instruction"
        lines = [line for line in text.split("\n") if line.strip()] if text else []
        held = [i for i, line in enumerate(lines) if _hint_of(line) is not None]
        dropped = None
        if len(held) >= 4:
            i = held[0] if temperature == 0 else self._rng.choice(held)
            dropped = _hint_of(lines.pop(i))
        lowered = "\n".join(lines).lower()
        unused = [h for h in INSTRUCTION_HINTS if h.lower() not in lowered and h != dropped]
        if temperature == 0:
            added = unused[:1]
        else:
            k = 2 if self._rng.random() < 0.3 else 1
            added = self._rng.sample(unused, min(k, len(unused)))
        lines += [f"- {h[0].upper()}{h[1:]}." for h in added]
        note = f"Refined {source}: added " + "; ".join(f"'{h}'" for h in added)
        if dropped:
            note += f"; removed '{dropped}'"
        return f"{note}.\n```text\n" + "\n".join(lines).strip() + "\n```\n"


def _hint_of(line: str) -> str | None:
    lowered = line.lower()
    for hint in INSTRUCTION_HINTS:
        if hint.lower() in lowered:
            return hint
    return None


def _score(c: Candidate) -> str:
    return f"{c.label} {c.score:.2f} bps"


def _answer(description: str, code: str) -> str:
    line = " ".join(description.split())
    return f"{line}\n```python\n{code.rstrip()}\n```\n"
