"""Stage 1 of candidate validation: static checks on the source text (nothing is executed).

The code is parsed with :mod:`ast` and walked against an allow-list. What is enforced:

- Size: at most ``Limits.max_chars`` characters, ``max_lines`` lines and ``max_ast_nodes``
  AST nodes (checked before and after parsing; very deep nesting is a parse error).
- Imports: only ``jax``, ``jax.numpy``, ``jax.nn``, ``jax.lax``, ``flax.linen``, ``math``,
  ``functools`` (``import M [as a]`` or ``from M import n [as a]``, ``from flax import
  linen``); no relative or star imports.
- Identifiers: no name, attribute, argument, keyword or alias containing ``__`` (the one
  exception: a method may be *defined* as ``def __call__`` directly in a class body); no
  attribute starting with ``_``; no attribute of frames, generators, code objects or
  tracebacks (``f_*``, ``gi_*``, ``cr_*``, ``ag_*``, ``tb_*``, ``co_*``); none of
  :data:`DENIED_BUILTINS` or :data:`DENIED_MODULE_NAMES` anywhere: the dangerous builtins
  (``exec``, ``eval``, ``compile``, ``open``, ``getattr``, ``setattr``, ``delattr``,
  ``globals``, ``vars``, ``locals``, ``breakpoint``, ``input``, ``help``, ``exit``,
  ``quit``, ``type``, ``format`` ...) and process modules (``os``, ``sys``, ``subprocess``
  ...); none of :data:`DENIED_JAX` as an attribute, an imported name, an import alias, a
  keyword or a class member: host callbacks and host I/O of JAX (``jax.debug``,
  ``pure_callback``, ``io_callback``, ``host_callback``, ``jax.experimental``,
  ``jax.profiler``, ``jnp.load`` / ``save``, ``jax.config`` ...), whatever changes the
  framework's global state or its objects in place (``tree_util`` / ``register_*``,
  ``set_printoptions``, ``enable_named_call``, ``set_mesh``, ``functools.wraps`` /
  ``update_wrapper`` ...) and flax internals (``nn.summary``, ``nn.module``). As the
  program's own variable, argument or function such a name is allowed (``summary = ...``):
  a bare name reaches only what the program defines or imports, since its globals hold no
  module it did not import (:mod:`llm.validate.restricted`).
- Statements: no ``global`` / ``nonlocal``, ``async`` code, ``await`` or ``yield``.
- Loops with a bounded trip count only: ``while_loop`` (``jax.lax``, ``flax.linen``) and
  the ``while_p`` primitive are refused, since their trip count depends on traced data: a
  trial run cannot bound what they cost in training, where the same code meets other
  data (a reward spinning 2^31 times per call passed a trial in 8 s and then ran for
  every step of every episode). ``fori_loop`` is allowed only as a direct call with
  integer-literal bounds, ``fori_loop(0, 16, body, init)``, at most
  ``Limits.max_loop_trips`` trips (with traced bounds it would be a ``while_loop``).
  ``scan`` / ``lax.map`` run a static trip count (a shape), the same in the trial as in
  training, so stage 2's run-time comparison with the default program bounds them;
  primitives cannot be bound directly (``bind`` is refused). Python loops unroll at trace
  time, inside stage 2's time limits.
- Mutation: an attribute may be assigned or deleted only as ``self.<name>`` inside a method
  whose first parameter is ``self`` (flax ``setup``); ``self`` is a parameter nowhere else
  and is never rebound; a class defined by the candidate may be used only by calling it
  (``Block(...)``) or as a base class, and its class body may not name its own methods, so
  no method can be called unbound with a foreign ``self`` (e.g. a framework class).
  Mutation through methods of reachable objects (``some_list.append``) is not detectable
  statically; the module views of :mod:`llm.validate.restricted` make modules read-only.
- Entry point: ``kind="reward"``: a top-level ``def reward(prev_state, action, next_state,
  params)`` with exactly those four positional parameters. ``kind="network"``: a top-level
  ``class Network`` whose bases include ``nn.Module`` / ``linen.Module`` / ``Module``; it
  is instantiated as ``Network()``, so every field needs a default. ``kind="imagination"``:
  a top-level ``def imagine(key, price, volume, params)`` with exactly those four
  positional parameters. ``kind="profiling"``: a top-level ``def profile(key,
  agent_index, n_agents, params)``, likewise. ``kind="communication"``: a top-level
  ``class Communication`` subclassing ``nn.Module``, instantiated as ``Communication()``.

What is not enforced here: anything about values (shapes, finiteness, run time, memory);
those are stage 2's job (:mod:`llm.validate.sandbox`). A static allow-list over Python is
not a proof of safety: it removes the known escape routes (dunder walks, frame walks,
reflection builtins, ``str.format`` attribute lookups, module-attribute mutation) so that
stage 2's process isolation is a second wall, not the only one.
"""

from __future__ import annotations

import ast
import threading
from dataclasses import dataclass
from typing import Literal

Kind = Literal["reward", "network", "imagination", "profiling", "communication"]
KINDS: tuple[str, ...] = ("reward", "network", "imagination", "profiling", "communication")

#: Class entry points: kind -> the ``flax.linen.Module`` class the code defines.
CLASS_ENTRY_POINTS = {"network": "Network", "communication": "Communication"}

ALLOWED_IMPORTS: frozenset[str] = frozenset(
    {"jax", "jax.numpy", "jax.nn", "jax.lax", "jax.random", "flax.linen", "math", "functools"}
)
"""Modules candidate code may import (``import m`` or ``from m import name``). ``jax.random``
is reachable as ``jax.random`` anyway, and the imagination and profiling contracts tell
the designer to use it, so importing it by name passes too."""

DENIED_BUILTINS: frozenset[str] = frozenset(
    {
        "exec", "eval", "compile", "open", "getattr", "setattr", "delattr", "hasattr",
        "globals", "vars", "locals", "dir", "breakpoint", "input", "help", "exit", "quit",
        "memoryview", "type", "object", "super", "format", "format_map", "classmethod",
        "staticmethod", "property", "copyright", "credits", "license",
        "mro", "builtins",
    }
)  # fmt: skip

DENIED_JAX: frozenset[str] = frozenset(
    {
        # host callbacks / host I/O / process-global state
        "debug", "experimental", "host_callback", "pure_callback", "io_callback",
        "callback", "debug_callback", "debug_print", "profiler", "distributed", "config",
        "lib", "extend", "interpreters", "core", "ffi", "export", "monitoring", "dlpack",
        "from_dlpack", "api_util", "stages", "sharding", "tree_util", "compilation_cache",
        "clear_caches", "live_arrays", "effects_barrier", "custom_batching", "errors",
        "load", "save", "savez", "savez_compressed", "fromfile", "tofile", "frombuffer",
        "fromstring", "memmap", "register_pytree_node", "register_pytree_with_keys",
        "register_dataclass", "register_static", "register_pytree_node_class",
        "register_pytree_with_keys_class", "default_backend", "devices", "device_put",
        # process-global settings and in-place changes of framework objects
        "set_printoptions", "printoptions", "enable_named_call", "disable_named_call",
        "override_named_call", "set_logical_axis_rules", "set_mesh", "enable_x64",
        "enable_checks", "disable_jit", "default_device", "default_prng_impl",
        "enable_custom_prng", "default_matmul_precision", "update_wrapper", "wraps",
        # LAPACK-backed ops: on CPU, jaxlib's LAPACK is scipy's OpenBLAS, whose thread server
        # deadlocked when training vmapped them over seeds (see serl_jax/rl/networks.py)
        "orthogonal", "delta_orthogonal", "linalg",
        # flax.linen internals
        "module", "summary", "kw_only_dataclasses", "meta", "spmd", "tabulate", "linen_module",
        # binding a primitive directly skips every wrapper's checks (e.g. lax.while_p)
        "bind",
    }
)  # fmt: skip

DENIED_MODULE_NAMES: frozenset[str] = frozenset(
    {
        "os", "sys", "subprocess", "socket", "importlib", "ctypes", "shutil", "pathlib",
        "io", "pickle", "marshal", "signal", "threading", "multiprocessing", "inspect",
        "gc", "weakref", "resource", "posix", "nt",
    }
)  # fmt: skip
"""Process and OS modules, refused by name anywhere (also as a variable of the program's
own), as the builtins are."""

# Loops whose trip count depends on traced data: no trial run can bound their cost.
UNBOUNDED_LOOP_NAMES: frozenset[str] = frozenset({"while_loop", "while_p"})
# Loops allowed only as direct calls with integer-literal bounds (Limits.max_loop_trips).
COUNTED_LOOP_NAMES: frozenset[str] = frozenset({"fori_loop"})

DENIED_NAMES: frozenset[str] = (
    DENIED_BUILTINS | DENIED_MODULE_NAMES | DENIED_JAX | UNBOUNDED_LOOP_NAMES
)
# Dunder names a candidate may *define* (as a method directly in a class body) but never use.
ALLOWED_METHOD_DUNDERS: frozenset[str] = frozenset({"__call__"})
DENIED_ATTRIBUTE_PREFIXES: tuple[str, ...] = ("_", "f_", "gi_", "cr_", "ag_", "tb_", "co_")
# Converting a parse tree to Python objects keeps its recursion depth in interpreter-wide
# state, which threads parsing at once corrupt on CPython < 3.11.8 / 3.12.1 ("SystemError:
# AST constructor recursion depth mismatch", gh-106905); the loop validates in threads.
_PARSE_LOCK = threading.Lock()


@dataclass(frozen=True)
class Limits:
    """Limits of both stages.

    Attributes:
        max_chars: longest accepted source, characters.
        max_lines: most source lines.
        max_ast_nodes: most AST nodes.
        wall_time_s: wall-clock time of the stage-2 child process (import, trace, compile
            and run included), enforced by the parent with SIGKILL.
        cpu_time_s: ``RLIMIT_CPU`` of the child, seconds (all threads together).
        memory_bytes: peak resident memory (RSS) of the child, watched by the parent
            (:mod:`llm.validate.sandbox`); JAX and the trial inputs alone take about
            0.45 GiB, so the default leaves room for ``max_program_bytes`` and more.
        max_params: most network parameters (counted from shapes before allocating).
        max_program_bytes: most buffer bytes (temporaries + outputs) of any compiled
            trial program, from XLA's memory analysis before it runs.
        batch_size: states / observations in the trial batch.
        max_loop_trips: most trips of one ``fori_loop`` (its bounds must be literals).
        max_time_factor: most run time of the candidate's compiled trial program (reward:
            the reward vmapped over the batch together with a vmapped ``step_env`` using
            it; network: ``apply`` on the batch's observations) over the default
            program's (``llm.prompts.DEFAULT_CODE``) on the same batch, fastest of
            alternating calls in the same child.
        max_reward_abs: largest absolute reward of one step on the trial's real
            transitions, the sum of the terms, in the reward's units (bps times
            ``params.reward_scale``). The design library's rewards stay within 26 on
            those transitions (the default's within 20); 1e4 leaves room for rewards in
            plain bps or with heavier penalties, and refuses unit errors, such as shares
            or prices where bps are expected, which give 1e7-1e9 and swamp PPO's
            clipped gradient with the critic's loss (measured 2026-11-27).
    """

    max_chars: int = 20_000
    max_lines: int = 500
    max_ast_nodes: int = 5_000
    wall_time_s: float = 60.0
    cpu_time_s: int = 60
    memory_bytes: int = 3 * 1024**3
    max_params: int = 1_000_000
    max_program_bytes: int = 2**30
    batch_size: int = 64
    max_loop_trips: int = 1024
    max_time_factor: float = 20.0
    max_reward_abs: float = 1e4


class StaticError(ValueError):
    """Stage-1 rejection; the message is the reason."""


def _reject(node: ast.AST | None, message: str) -> StaticError:
    line = getattr(node, "lineno", None)
    return StaticError(f"line {line}: {message}" if line else message)


def _check_identifier(node: ast.AST, name: str, what: str, own: bool = False) -> None:
    """Refuses a denied ``name``. ``own``: the name is the program's own variable,
    argument or function (not an attribute, import, keyword or class member), which may
    share a name with :data:`DENIED_JAX` (the 1.5B's communication modules named a
    variable ``summary``)."""
    if name in UNBOUNDED_LOOP_NAMES:
        raise _reject(
            node,
            f"{what} {name!r} is not allowed: a while loop runs a data-dependent number of "
            "times, so its cost cannot be bounded before training (use lax.fori_loop with "
            "integer-literal bounds, or lax.scan)",
        )
    if "__" in name:
        raise _reject(node, f"{what} {name!r} contains '__' (dunder names are not allowed)")
    if name in DENIED_NAMES and not (own and name in DENIED_JAX):
        raise _reject(node, f"{what} {name!r} is not allowed")


def _check_import(node: ast.Import | ast.ImportFrom) -> None:
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name not in ALLOWED_IMPORTS:
                raise _reject(node, f"import of {alias.name!r} is not allowed "
                              f"(allowed: {', '.join(sorted(ALLOWED_IMPORTS))})")  # fmt: skip
            if alias.asname:
                _check_identifier(node, alias.asname, "import alias")
            if (alias.asname or alias.name) == "self":
                raise _reject(node, "'self' may not be assigned or deleted")
        return
    if node.level:
        raise _reject(node, "relative imports are not allowed")
    module = node.module or ""
    for alias in node.names:
        if alias.name == "*":
            raise _reject(node, "star imports are not allowed")
        full = f"{module}.{alias.name}"
        if not (module in ALLOWED_IMPORTS or full in ALLOWED_IMPORTS):
            raise _reject(node, f"import from {module!r} is not allowed "
                          f"(allowed: {', '.join(sorted(ALLOWED_IMPORTS))})")  # fmt: skip
        if alias.name.startswith("_"):
            raise _reject(node, f"import of private name {alias.name!r} is not allowed")
        _check_identifier(node, alias.name, "imported name")
        if alias.asname:
            _check_identifier(node, alias.asname, "import alias")
            if alias.name in COUNTED_LOOP_NAMES:
                raise _reject(node, f"{alias.name!r} may not be imported under another name")
        if (alias.asname or alias.name) == "self":
            raise _reject(node, "'self' may not be assigned or deleted")


def _int_literal(node: ast.expr | None) -> int | None:
    """The value of an integer literal (``7``, ``-7``), else ``None``."""
    sign = 1
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        sign, node = (-1 if isinstance(node.op, ast.USub) else 1), node.operand
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return sign * node.value
    return None


def _check_counted_loop(node: ast.AST, parent: ast.AST | None, name: str, max_trips: int):
    """``fori_loop`` only as a direct call with literal bounds and at most ``max_trips``
    trips (with traced bounds JAX runs it as a ``while_loop``)."""
    if not (isinstance(parent, ast.Call) and parent.func is node):
        raise _reject(node, f"{name!r} may only be called directly, {name}(0, 16, body, init)")
    keywords = {k.arg: k.value for k in parent.keywords}
    lower = parent.args[0] if len(parent.args) > 0 else keywords.get("lower")
    upper = parent.args[1] if len(parent.args) > 1 else keywords.get("upper")
    low, high = _int_literal(lower), _int_literal(upper)
    if low is None or high is None:
        raise _reject(
            node,
            f"{name} needs integer-literal bounds, e.g. {name}(0, 16, body, init), so that its "
            "trip count is known before it runs",
        )
    if high - low > max_trips:
        raise _reject(
            node, f"{name} runs {high - low} trips, limit {max_trips} (Limits.max_loop_trips)"
        )


_FORBIDDEN_NODES: dict[type, str] = {
    ast.Global: "'global' is not allowed",
    ast.Nonlocal: "'nonlocal' is not allowed",
    ast.AsyncFunctionDef: "async functions are not allowed",
    ast.AsyncFor: "async for is not allowed",
    ast.AsyncWith: "async with is not allowed",
    ast.Await: "await is not allowed",
    ast.Yield: "yield is not allowed",
    ast.YieldFrom: "yield from is not allowed",
}


class _Checker(ast.NodeVisitor):
    """Walks the tree; raises :class:`StaticError` at the first violation."""

    def __init__(self, class_names: set[str], max_loop_trips: int):
        self.class_names = class_names
        self.max_loop_trips = max_loop_trips
        self.method_stack: list[bool] = []  # per function: is it a method with a `self`
        self.class_depth: list[bool] = []  # per scope: is the direct parent a class body
        self.parents: dict[ast.AST, ast.AST] = {}

    def generic_visit(self, node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            self.parents[child] = node
        for kind, message in _FORBIDDEN_NODES.items():
            if isinstance(node, kind):
                raise _reject(node, message)
        super().generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        _check_import(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        _check_import(node)

    def _in_class_body(self) -> bool:
        return bool(self.class_depth) and self.class_depth[-1]

    def visit_Name(self, node: ast.Name) -> None:
        _check_identifier(node, node.id, "name", own=not self._in_class_body())
        if node.id == "self" and not isinstance(node.ctx, ast.Load):
            raise _reject(node, "'self' may not be assigned or deleted")
        if node.id in COUNTED_LOOP_NAMES:
            _check_counted_loop(node, self.parents.get(node), node.id, self.max_loop_trips)
        if node.id in self.class_names and isinstance(node.ctx, ast.Load):
            parent = self.parents.get(node)
            is_call = isinstance(parent, ast.Call) and parent.func is node
            is_base = isinstance(parent, ast.ClassDef) and node in parent.bases
            if not (is_call or is_base):
                raise _reject(
                    node, f"class {node.id!r} may only be called ({node.id}(...)) or subclassed"
                )
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        name = node.attr
        _check_identifier(node, name, "attribute")
        if name.startswith(DENIED_ATTRIBUTE_PREFIXES):
            raise _reject(node, f"attribute {name!r} is not allowed (private or introspection)")
        if name in COUNTED_LOOP_NAMES:
            _check_counted_loop(node, self.parents.get(node), name, self.max_loop_trips)
        if not isinstance(node.ctx, ast.Load):
            in_method = bool(self.method_stack) and any(self.method_stack)
            on_self = isinstance(node.value, ast.Name) and node.value.id == "self"
            if not (on_self and in_method):
                raise _reject(
                    node, "attributes may only be assigned as self.<name> inside a method"
                )
        self.generic_visit(node)

    def visit_arg(self, node: ast.arg) -> None:
        _check_identifier(node, node.arg, "argument", own=True)
        self.generic_visit(node)

    def visit_keyword(self, node: ast.keyword) -> None:
        if node.arg is not None:
            _check_identifier(node, node.arg, "keyword")
        self.generic_visit(node)

    def visit_alias(self, node: ast.alias) -> None:  # checked by _check_import
        self.generic_visit(node)

    def _visit_function(self, node: ast.FunctionDef | ast.Lambda) -> None:
        direct_in_class = self._in_class_body()
        if isinstance(node, ast.FunctionDef):
            if not (direct_in_class and node.name in ALLOWED_METHOD_DUNDERS):
                _check_identifier(node, node.name, "function", own=not direct_in_class)
            if node.name == "self":
                raise _reject(node, "'self' may not be used as a function name")
        params = node.args.posonlyargs + node.args.args
        is_method = direct_in_class and bool(params) and params[0].arg == "self"
        all_params = [*params, *node.args.kwonlyargs, node.args.vararg, node.args.kwarg]
        for i, param in enumerate(p for p in all_params if p is not None):
            if param.arg == "self" and not (is_method and i == 0):
                raise _reject(
                    node, "'self' may only be the first parameter of a method in a class body"
                )
        self.method_stack.append(is_method)
        self.class_depth.append(False)
        self.generic_visit(node)
        self.class_depth.pop()
        self.method_stack.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._visit_function(node)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._visit_function(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        _check_identifier(node, node.name, "class")
        if node.keywords:
            raise _reject(node, "class keywords (metaclass=...) are not allowed")
        if node.name == "self":
            raise _reject(node, "'self' may not be used as a class name")
        _check_class_body(node)
        self.class_depth.append(True)
        self.method_stack.append(False)
        self.generic_visit(node)
        self.method_stack.pop()
        self.class_depth.pop()

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            _check_identifier(node, node.name, "name", own=True)
            if node.name == "self":
                raise _reject(node, "'self' may not be assigned or deleted")
        self.generic_visit(node)


def _check_class_body(node: ast.ClassDef) -> None:
    """Methods may not be called from the class body itself (there they are plain functions
    that would accept any object as ``self``): the code evaluated while the class is
    defined (statements, decorators, default values) must not name them."""
    methods = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
    evaluated: list[ast.AST] = []
    for stmt in node.body:
        if isinstance(stmt, ast.FunctionDef):
            evaluated += [*stmt.decorator_list, *stmt.args.defaults]
            evaluated += [d for d in stmt.args.kw_defaults if d is not None]
        else:
            evaluated.append(stmt)
    for part in evaluated:
        for sub in ast.walk(part):
            if isinstance(sub, ast.Name) and sub.id in methods:
                raise _reject(sub, f"method {sub.id!r} may not be used in the class body")


def _is_module_base(base: ast.expr) -> bool:
    if isinstance(base, ast.Attribute):
        return base.attr == "Module" and isinstance(base.value, ast.Name)
    return isinstance(base, ast.Name) and base.id == "Module"


# Function entry points: kind -> (name, its four positional parameters).
_FUNCTION_ENTRY_POINTS = {
    "reward": ("reward", "prev_state, action, next_state, params"),
    "imagination": ("imagine", "key, price, volume, params"),
    "profiling": ("profile", "key, agent_index, n_agents, params"),
}


def _check_entry_point(tree: ast.Module, kind: str) -> None:
    top = tree.body
    if kind in _FUNCTION_ENTRY_POINTS:
        name, params = _FUNCTION_ENTRY_POINTS[kind]
        defs = [n for n in top if isinstance(n, ast.FunctionDef) and n.name == name]
        if not defs:
            raise StaticError(f"no top-level function 'def {name}({params})'")
        args = defs[-1].args
        if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
            raise _reject(defs[-1], f"{name} must take exactly four positional parameters")
        if len(args.args) != 4:
            raise _reject(defs[-1], f"{name} takes {len(args.args)} parameters, expected 4 "
                          f"({params})")  # fmt: skip
    elif kind in CLASS_ENTRY_POINTS:
        name = CLASS_ENTRY_POINTS[kind]
        classes = [n for n in top if isinstance(n, ast.ClassDef) and n.name == name]
        if not classes:
            raise StaticError(f"no top-level 'class {name}(nn.Module)'")
        if not any(_is_module_base(b) for b in classes[-1].bases):
            raise _reject(classes[-1], f"class {name} must subclass flax.linen.Module "
                          "(nn.Module)")  # fmt: skip
    else:
        raise StaticError(f"unknown kind {kind!r}; use one of {KINDS}")


def check_static(code: str, kind: str, limits: Limits | None = None) -> ast.Module:
    """Stage 1: parses and checks ``code`` without executing it.

    Args:
        code: the candidate's source.
        kind: one of :data:`KINDS`.
        limits: size limits (:class:`Limits` defaults when ``None``).

    Returns:
        The parsed module.

    Raises:
        StaticError: the first violation found (the message says which and where).
    """
    limits = limits or Limits()
    if kind not in KINDS:
        raise StaticError(f"unknown kind {kind!r}; use one of {KINDS}")
    if not isinstance(code, str):
        raise StaticError("code must be a string")
    if len(code) > limits.max_chars:
        raise StaticError(f"code has {len(code)} characters, limit {limits.max_chars}")
    n_lines = code.count("\n") + 1
    if n_lines > limits.max_lines:
        raise StaticError(f"code has {n_lines} lines, limit {limits.max_lines}")
    try:
        with _PARSE_LOCK:
            tree = ast.parse(code, filename="<candidate>", mode="exec")
    except SyntaxError as e:
        raise StaticError(f"line {e.lineno}: syntax error: {e.msg}") from None
    except (ValueError, RecursionError, MemoryError) as e:
        raise StaticError(f"does not parse: {type(e).__name__}: {e}") from None
    n_nodes = sum(1 for _ in ast.walk(tree))
    if n_nodes > limits.max_ast_nodes:
        raise StaticError(f"code has {n_nodes} AST nodes, limit {limits.max_ast_nodes}")
    class_names = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    try:
        _Checker(class_names, limits.max_loop_trips).visit(tree)
    except RecursionError:
        raise StaticError("code is nested too deeply") from None
    _check_entry_point(tree, kind)
    return tree
