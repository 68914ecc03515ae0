"""Two-stage validation of LLM-generated code for the reward, network, imagination,
profiling and communication slots.

Stage 1 (:mod:`llm.validate.static`) parses the code and checks it against an AST
allow-list and size limits, executing nothing. Stage 2 (:mod:`llm.validate.sandbox`)
defines the code in restricted globals inside a child process with CPU-time, memory,
file-size and wall-time limits, no network namespace where available, and an audit hook
against files, sockets and processes; it traces the entry point with ``jax.eval_shape`` on
the environment's real shapes and runs it jitted on a real batch. Typical use::

    from llm.validate import load_validated, validate

    result = validate(code, "reward")
    if result.ok:
        reward_fn = load_validated(code, "reward")
        env = ExecutionEnv(reward_fn=reward_fn)

Entry points: ``kind="reward"``: ``def reward(prev_state, action, next_state, params)``
returning a float32 scalar (``EnvState`` / ``EnvParams`` of
:mod:`serl_jax.envs.execution`); ``kind="network"``: ``class Network(nn.Module)``,
instantiated as ``Network()``, whose ``apply(params, obs[..., D])`` returns
``(policy_outputs [..., 2], value [...])`` (``[..., K]`` when it declares a discrete
action set of K ``action_multiples``); ``kind="imagination"``:
``def imagine(key, price, volume, params)`` returning ``(price [T], volume [T])``
(:mod:`serl_jax.components.imagination`), tried on real training days and rejected when
an imagined day is malformed or outside
:class:`~serl_jax.components.imagination.ImaginationBounds` (naming the statistic);
``kind="profiling"``: ``def profile(key, agent_index, n_agents, params)`` returning a dict
of :class:`~serl_jax.components.profiling.AgentProfile`'s fields, drawn for 1 and 4
agents on 64 keys and rejected when a draw is unusable
(:func:`~serl_jax.components.profiling.check_profiles`: side, Q > 0, a non-empty window
inside the day ...); ``kind="communication"``: ``class Communication(nn.Module)``,
instantiated as ``Communication()``, whose ``apply(params, obs [..., D])`` returns a
float32 message ``[..., M]`` with ``1 <= M <= MAX_MESSAGE_SIZE``
(:mod:`serl_jax.components.communication`), checked like a network (shapes, parameter
bound, finite on real observations).

Command line: ``python -m llm.validate --kind
reward|network|imagination|profiling|communication FILE [--json]`` (exit 0 accepted, 1
rejected, 2 usage error, 3 sandbox error).

What is enforced, in short (details in each module): stage 1 allows only the listed
imports and no dunder/private attributes, reflection builtins, frame/traceback
attributes, ``str.format``, host callbacks, JAX host I/O or global registries, and no
attribute assignment except ``self.x`` in methods, no ``while_loop`` (a data-dependent
trip count that no trial can bound) and ``fori_loop`` only with integer-literal bounds up
to ``Limits.max_loop_trips``; stage 2 runs in a separate process with ``RLIMIT_CPU``,
``RLIMIT_FSIZE=0``, a peak resident-memory limit watched by the parent (not an
address-space limit, which depends on the host's core count and mapped libraries), a
wall-time kill, a fresh network namespace when ``unshare`` permits
(:func:`llm.validate.sandbox.network_isolation`), an audit hook refusing file access,
sockets, processes and class patching, curated builtins and read-only module views; it
also refuses networks over ``Limits.max_params``, compiled programs over
``Limits.max_program_bytes`` and trial programs slower than ``Limits.max_time_factor``
times the default program's on the same batch. When the sandbox itself fails (an import
error or a crash before the candidate is loaded, thread creation), :func:`validate`
raises :class:`SandboxError` instead of rejecting the candidate.

What is not enforced (honestly):

- :func:`load_validated` runs in the caller's process; restricted globals and read-only
  module views there are defense in depth, not an isolation boundary (CPython has none).
- Stage 2 tries the code on the shipped sample's shapes and a batch of real states; code
  can behave differently on other data (e.g. loop at trace time only for bigger inputs,
  or reduce over a bigger ``params.data``), so training keeps its own wall-clock budget
  (``loop.train_budget_s``, :mod:`serl_jax.loop.workers`).
- Mutation of mutable objects reachable through allowed modules (if any) by method calls
  is not detected; module attributes themselves cannot be reassigned.
- Without ``unshare`` the child shares the host's network namespace; sockets are then
  stopped only by the audit hook and the ``socket`` stub.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from llm.validate.sandbox import SandboxError, run_runtime_stage
from llm.validate.static import Limits, StaticError, check_static

if TYPE_CHECKING:  # the sandbox child imports this package before JAX
    from serl_jax.components.imagination import ImaginationBounds

Stage = Literal["static", "runtime"]

__all__ = [
    "Limits",
    "SandboxError",
    "StaticError",
    "ValidationResult",
    "check_static",
    "load_validated",
    "validate",
]


@dataclass(frozen=True)
class ValidationResult:
    """Outcome of :func:`validate`.

    Attributes:
        ok: the code passed both stages.
        stage: the stage that rejected it (``"static"`` or ``"runtime"``), ``None`` if ok.
        reason: why it was rejected, or a short note on what was accepted.
    """

    ok: bool
    stage: Stage | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable ``{"ok", "stage", "reason"}``."""
        return {"ok": self.ok, "stage": self.stage, "reason": self.reason}


def validate(
    code: str,
    kind: Literal["reward", "network", "imagination", "profiling", "communication"],
    *,
    limits: Limits | None = None,
    runtime: bool = True,
    bounds: ImaginationBounds | None = None,
) -> ValidationResult:
    """Validates candidate code in two stages.

    Args:
        code: the candidate's Python source.
        kind: ``"reward"``, ``"network"``, ``"imagination"``, ``"profiling"`` or
            ``"communication"`` (the slot it is meant for).
        limits: size and resource limits (:class:`Limits` defaults when ``None``).
        runtime: run stage 2 (``False``: stage 1 only, e.g. for a quick pre-filter; a
            result with ``ok=True`` then means only "passed the static checks").
        bounds: the imagined-day bounds of ``kind="imagination"`` (defaults when ``None``).

    Returns:
        A :class:`ValidationResult`; never raises for bad code.

    Raises:
        SandboxError: stage 2's sandbox failed before it could judge the code (e.g. the
            child cannot import JAX or cannot start threads); the message names the cause.
    """
    limits = limits or Limits()
    try:
        check_static(code, kind, limits)
    except StaticError as e:
        return ValidationResult(False, "static", str(e))
    if not runtime:
        return ValidationResult(True, None, "passed the static checks (runtime not run)")
    ok, reason = run_runtime_stage(code, kind, limits, bounds=bounds)
    return ValidationResult(ok, None if ok else "runtime", reason)


def load_validated(
    code: str, kind: Literal["reward", "network", "imagination", "profiling", "communication"]
) -> Any:
    """Defines already-validated code in this process, in the same restricted globals.

    Runs stage 1 again (cheap) and refuses code that fails it; does not re-run stage 2,
    which the caller must have passed (:func:`validate`), since defining the module body
    executes its top-level statements here, outside the sandbox.

    Args:
        code: the candidate's source, as validated.
        kind: ``"reward"``, ``"network"``, ``"imagination"``, ``"profiling"`` or
            ``"communication"``.

    Returns:
        The ``reward``, ``imagine`` or ``profile`` function, or a ``Network()`` or
        ``Communication()`` instance (a ``flax.linen.Module``).

    Raises:
        StaticError: the code fails stage 1.
        TypeError: the entry point is missing or of the wrong type.
    """
    from llm.validate.restricted import define

    entry = define(code, kind)
    return entry() if kind in ("network", "communication") else entry
