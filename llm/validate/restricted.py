"""Restricted globals in which candidate code is defined (in the stage-2 child and in
:func:`llm.validate.load_validated`).

What the candidate sees:

- ``__builtins__``: a curated dict (:data:`SAFE_BUILTIN_NAMES`): numbers, containers,
  iteration helpers, a few exception types, ``print`` (discarded), the class-statement hook
  and an ``__import__`` that only hands out the allowed modules. No ``open``, ``exec``,
  ``eval``, ``compile``, ``getattr``, ``setattr``, ``type``, ``object``, ``globals`` ...
- Modules as read-only views (:func:`module_view`): attribute reads are forwarded to the
  real module, except private names, :data:`llm.validate.static.DENIED_NAMES` and
  submodules outside :data:`VIEWABLE_MODULES`; attribute writes and deletes raise. So
  ``jnp.sum = f`` cannot patch ``jax.numpy`` for the framework. Plain values reached
  through a view (classes, functions) are the real objects.

Not enforced here: this is defense in depth inside one interpreter, not an isolation
boundary (Python has no in-process sandbox). The isolation of untrusted code is the
stage-2 child process; code is loaded into the main process only after both stages.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import itertools
import sys
import types
from typing import Any

from llm.validate.static import ALLOWED_IMPORTS, DENIED_NAMES, check_static

CANDIDATE_MODULE = "serl_candidate"
CANDIDATE_FILENAME = "<candidate>"

SAFE_BUILTIN_NAMES: tuple[str, ...] = (
    "abs", "all", "any", "bool", "complex", "dict", "divmod", "enumerate", "filter",
    "float", "frozenset", "int", "isinstance", "issubclass", "iter", "len", "list", "map",
    "max", "min", "next", "pow", "range", "repr", "reversed", "round", "set", "slice",
    "sorted", "str", "sum", "tuple", "zip", "True", "False", "None", "NotImplemented",
    "Ellipsis", "Exception", "ArithmeticError", "AssertionError", "IndexError", "KeyError",
    "LookupError", "NotImplementedError", "OverflowError", "RuntimeError", "StopIteration",
    "TypeError", "ValueError", "ZeroDivisionError",
)  # fmt: skip

IMPORTABLE_MODULES: frozenset[str] = ALLOWED_IMPORTS
# Submodules reachable as attributes of a view (imports are limited to IMPORTABLE_MODULES).
VIEWABLE_MODULES: frozenset[str] = IMPORTABLE_MODULES | frozenset(
    {
        "flax",
        "jax.random",
        "jax.tree",
        "jax.numpy.linalg",
        "jax.numpy.fft",
        "jax.nn.initializers",
        "jax.lax.linalg",
        "jax.scipy",
        "jax.scipy.special",
        "flax.linen.initializers",
        "flax.linen.activation",
    }
)


def module_view(name: str) -> Any:
    """A read-only view of the module ``name`` (must be in :data:`VIEWABLE_MODULES`)."""
    if name not in VIEWABLE_MODULES:
        raise ImportError(f"module {name!r} is not available to candidate code")
    module = importlib.import_module(name)

    class ModuleView:
        __slots__ = ()

        def __getattr__(self, attr: str) -> Any:
            if attr.startswith("_") or attr in DENIED_NAMES:
                raise AttributeError(f"{name}.{attr} is not available to candidate code")
            if name == "flax" and attr != "linen":
                raise AttributeError(f"flax.{attr} is not available to candidate code")
            value = getattr(module, attr)
            if isinstance(value, types.ModuleType):
                return module_view(value.__name__ if value.__name__ in VIEWABLE_MODULES
                                   else f"{name}.{attr}")  # fmt: skip
            return value

        def __setattr__(self, attr: str, value: Any) -> None:
            raise AttributeError(f"module {name} is read-only for candidate code")

        def __delattr__(self, attr: str) -> None:
            raise AttributeError(f"module {name} is read-only for candidate code")

        def __repr__(self) -> str:
            return f"<read-only module {name}>"

    return ModuleView()


def _safe_import(name, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002
    """``__import__`` for candidates: allowed modules only, returned as read-only views."""
    if level != 0:
        raise ImportError("relative imports are not allowed")
    if name not in IMPORTABLE_MODULES and not (name == "flax" and fromlist):
        raise ImportError(f"import of {name!r} is not allowed")
    if fromlist:
        if name == "flax" and tuple(fromlist) != ("linen",):
            raise ImportError("only 'from flax import linen' is allowed")
        return module_view(name)
    return module_view(name.split(".")[0])


def _discard_print(*args: Any, **kwargs: Any) -> None:
    """``print`` for candidates: output is dropped (stdout is the child's result channel)."""
    del args, kwargs


def safe_builtins() -> dict[str, Any]:
    """A fresh curated builtins dict (see the module docstring)."""
    table = {name: getattr(builtins, name) for name in SAFE_BUILTIN_NAMES}
    table["__build_class__"] = builtins.__build_class__
    table["__import__"] = _safe_import
    table["print"] = _discard_print
    return table


_counter = itertools.count()


def restricted_globals() -> dict[str, Any]:
    """Fresh globals for one candidate: curated builtins, no pre-bound modules.

    The dict is the ``__dict__`` of a new module ``serl_candidate_<n>`` registered in
    ``sys.modules`` (``dataclasses``, and so ``flax.linen``, look a class's module up there
    when it has string annotations); the candidate itself cannot reach ``sys.modules``.
    """
    module = types.ModuleType(f"{CANDIDATE_MODULE}_{next(_counter)}")
    module.__dict__["__builtins__"] = safe_builtins()
    sys.modules[module.__name__] = module
    return module.__dict__


def define(code: str, kind: str) -> Any:
    """Executes ``code`` in :func:`restricted_globals` and returns its entry point.

    Runs stage 1 first (raises :class:`llm.validate.static.StaticError`). Executing the
    module body runs the candidate's top-level statements, so call this only in the
    stage-2 child or for code that already passed stage 2.

    Args:
        code: candidate source.
        kind: ``"reward"`` (returns the ``reward`` function), ``"imagination"`` (the
            ``imagine`` function), ``"profiling"`` (the ``profile`` function),
            ``"network"`` (the ``Network`` class) or ``"communication"`` (the
            ``Communication`` class).

    Returns:
        The entry point object.

    Raises:
        StaticError: stage 1 rejects the code.
        TypeError: the entry point is not a function / not a ``flax.linen.Module`` class.
        Exception: whatever the module body raises.
    """
    return exec_entry_point(check_static(code, kind), kind)


def exec_entry_point(source: str | ast.Module, kind: str) -> Any:
    """Executes already-checked code in :func:`restricted_globals`; returns its entry point.

    The shared second half of :func:`define` (stage 1 is the caller's business: the stage-2
    child can be told to skip it, to test the sandbox on its own).

    Raises:
        TypeError: the entry point is not a function / not a ``flax.linen.Module`` class.
        Exception: whatever the module body raises.
    """
    namespace = restricted_globals()
    exec(compile(source, CANDIDATE_FILENAME, "exec"), namespace)  # noqa: S102
    functions = {"reward": "reward", "imagination": "imagine", "profiling": "profile"}
    if kind in functions:
        name = functions[kind]
        entry = namespace.get(name)
        if not isinstance(entry, types.FunctionType):
            raise TypeError(f"'{name}' is not a function")
        return entry
    import flax.linen as nn

    from llm.validate.static import CLASS_ENTRY_POINTS

    name = CLASS_ENTRY_POINTS[kind]
    entry = namespace.get(name)
    if not (isinstance(entry, type) and issubclass(entry, nn.Module)):
        raise TypeError(f"'{name}' is not a flax.linen.Module subclass")
    return entry
