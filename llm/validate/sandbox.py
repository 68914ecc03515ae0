"""Stage 2 of candidate validation: a trial run in a resource-limited child process.

The parent starts ``python -I -c "...llm.validate._child.main(...)"`` (see that module for
what the child checks). ``-I`` (isolated mode) ignores ``PYTHONPATH``, the user site and
the working directory, so the parent's import path (``sys.path``, which holds what
``PYTHONPATH`` added) is passed to the child explicitly: the child imports the same
packages as the parent and nothing else. Enforced on the child:

- memory: the child's peak resident set (RSS: the pages it actually uses) must stay under
  ``Limits.memory_bytes``. The parent reads ``VmHWM`` (the kernel's high-water mark of the
  resident set) from ``/proc/<pid>/status`` every :data:`POLL_S` seconds and kills the
  child's process group when it passes the limit; when the child finishes, its own final
  ``VmHWM`` (read through a descriptor opened before the candidate is loaded) is checked
  once more, so a spike after the last read rejects the candidate too. Before running
  anything, every compiled trial program must also fit XLA's own buffer estimate
  (``Limits.max_program_bytes``), so most oversized programs are refused before they
  allocate. Not ``RLIMIT_AS``: address space counts every thread's stack reservation
  (``RLIMIT_STACK`` each, 8 MiB by default) and every mapped library, neither of which the
  candidate controls. XLA's CPU client starts threads per core, so on a 16-core GPU host a
  6 GiB address-space limit killed every child (``LLVM ERROR: pthread_create failed``)
  while the same child passed on 2 cores; ``ulimit -s 1048576`` (1 GiB stacks) reproduces
  it on 2 cores. ``RLIMIT_DATA`` counts writable thread stacks as well. A memory cgroup
  would enforce without polling, but needs a writable, delegated cgroup hierarchy that
  containers and unprivileged users rarely have (and v1 and v2 differ), so it is not used.
  The cost of polling: a child can overshoot the limit by what it touches in one interval
  before it is killed (measured: a reward filling a 2.4 GB Python list was killed at
  1026 MiB under a 1024 MiB limit).
  Without ``/proc`` (not Linux) only XLA's estimate applies.
- CPU time: ``RLIMIT_CPU = Limits.cpu_time_s`` (SIGXCPU, then SIGKILL at +1 s);
- file writes: ``RLIMIT_FSIZE = 0`` (no regular file can grow) and ``RLIMIT_CORE = 0``;
- wall time: ``Limits.wall_time_s``, after which the parent kills the child's whole
  process group (SIGKILL);
- network: when ``unshare --net`` works here (root, or unprivileged user namespaces with
  ``unshare -r``), the child runs in a fresh network namespace with no interfaces but an
  unconfigured loopback; otherwise only the in-child guards below apply
  (:func:`network_isolation` says which);
- in-child guards: restricted globals and read-only module views
  (:mod:`llm.validate.restricted`), an audit hook refusing file access outside the
  packages the child imported, file-system changes, sockets, process creation, ``ctypes``
  and class patching, and a ``socket.socket`` stub (see :mod:`llm.validate._child`);
- environment: a minimal environment (``PATH``, ``JAX_PLATFORMS=cpu``, one BLAS
  thread), isolated mode (``-I``), a fresh empty working directory.

A failure of the sandbox itself is not the candidate's: when the child dies, is killed or
reports an error before it loads the candidate (an import error, JAX's start-up, the trial
inputs, a limit too small for JAX alone), or when thread creation fails at any point
(``pthread_create``: the host's limits, not the candidate, which cannot start threads),
:func:`run_runtime_stage` raises :class:`SandboxError` naming the cause instead of
rejecting the candidate.

Not enforced: the number of threads or processes (``RLIMIT_NPROC`` does not bind root and
XLA needs threads; process creation is refused by the audit hook instead), the child's
read access to files through native code (a candidate has no route to native code short of
a CPython or XLA vulnerability), and GPU use (the child is pinned to the CPU).
"""

from __future__ import annotations

import functools
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from llm.validate._child import READY_MARKER, RESULT_MARKER
from llm.validate.static import Limits

if TYPE_CHECKING:  # the child imports this module before JAX: no JAX import here
    from serl_jax.components.imagination import ImaginationBounds

__all__ = ["POLL_S", "SandboxError", "network_isolation", "run_runtime_stage"]

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
#: Seconds between two reads of the child's resident memory.
POLL_S = 0.02
# Signs in the child's stderr that the host, not the candidate, broke the child.
_HOST_FAILURES = ("pthread_create",)


class SandboxError(RuntimeError):
    """The stage-2 sandbox itself failed, so the candidate could not be judged.

    Raised for failures before the candidate is loaded (imports, JAX start-up, the trial
    inputs, limits too small for JAX alone) and for thread-creation failures; the message
    names the cause (e.g. the child's last stderr lines).
    """


@functools.cache
def network_isolation() -> tuple[str, ...]:
    """The command prefix that puts the child in a new network namespace, or ``()``.

    Probed once per process: ``unshare --net`` (root) or ``unshare -r --net`` (user
    namespaces); an empty tuple when neither works (then no network namespace).
    """
    exe = shutil.which("unshare")
    if exe is None or not sys.platform.startswith("linux"):
        return ()
    for prefix in ((exe, "--net"), (exe, "-r", "--net")):
        try:
            done = subprocess.run([*prefix, "true"], capture_output=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            continue
        if done.returncode == 0:
            return prefix
    return ()


def _child_env() -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "JAX_PLATFORMS": "cpu",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "PYTHONDONTWRITEBYTECODE": "1",
        "LANG": "C.UTF-8",
    }


def _import_path() -> list[str]:
    """The package root, then this process's ``sys.path`` (relative entries made absolute
    against the current directory, as this process resolves them), without duplicates."""
    entries = [_PACKAGE_ROOT]
    for entry in sys.path:
        path = os.path.abspath(entry)  # "" is the current directory
        entry = path if os.path.exists(path) else entry  # e.g. a path hook's key, as is
        if entry not in entries:
            entries.append(entry)
    return entries


def _peak_memory_of(pid: int) -> int:
    """The peak resident memory (``VmHWM``) of ``pid`` so far, bytes; 0 when unreadable
    (the process is gone, or there is no ``/proc``)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return 0
    kib = [int(line.split()[1]) for line in text.splitlines() if line.startswith("VmHWM:")]
    return max(kib, default=0) * 1024


@dataclass
class _ChildRun:
    returncode: int
    stdout: str
    stderr: str
    peak_bytes: int  # the largest resident memory the parent saw
    killed: str | None  # "memory", "wall" or None


def _read_all(stream, sink: list[bytes]) -> None:
    sink.append(stream.read())
    stream.close()


def _write_all(stream, data: bytes) -> None:
    try:
        stream.write(data)
        stream.close()
    except OSError:  # the child died before reading its request
        pass


def _run_child(command: list[str], request: bytes, workdir: str, limits: Limits) -> _ChildRun:
    """Runs the child, watching its wall time and resident memory; kills its process
    group (SIGKILL) at the first limit passed."""
    proc = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=workdir,
        env=_child_env(),
        start_new_session=True,
        close_fds=True,
    )
    out: list[bytes] = []
    err: list[bytes] = []
    pumps = [
        threading.Thread(target=_write_all, args=(proc.stdin, request), daemon=True),
        threading.Thread(target=_read_all, args=(proc.stdout, out), daemon=True),
        threading.Thread(target=_read_all, args=(proc.stderr, err), daemon=True),
    ]
    for pump in pumps:
        pump.start()
    deadline = time.monotonic() + limits.wall_time_s
    peak, killed = 0, None
    try:
        while proc.poll() is None:
            peak = max(peak, _peak_memory_of(proc.pid))
            if killed is None and peak > limits.memory_bytes:
                killed = "memory"
            elif killed is None and time.monotonic() > deadline:
                killed = "wall"
            if killed is not None:
                _kill_group(proc)
            time.sleep(POLL_S)
    except BaseException:
        _kill_group(proc)
        proc.wait()
        raise
    for pump in pumps:
        pump.join(timeout=10)
    return _ChildRun(
        proc.returncode,
        b"".join(out).decode(errors="replace"),
        b"".join(err).decode(errors="replace"),
        peak,
        killed,
    )


def _signal_reason(returncode: int, limits: Limits) -> str:
    sig = -returncode
    if sig == signal.SIGXCPU or sig == signal.SIGKILL:
        return f"CPU-time limit of {limits.cpu_time_s} s exceeded (killed by signal {sig})"
    if sig == signal.SIGXFSZ:
        return "tried to write a file (killed by SIGXFSZ)"
    return f"child crashed with signal {sig}"


def _memory_reason(peak: int, limits: Limits) -> str:
    # Rounded up: a peak just past the limit must not read as equal to it.
    return (
        f"MemoryError: resident memory reached {math.ceil(peak / 2**20)} MiB, "
        f"limit {limits.memory_bytes / 2**20:.0f} MiB"
    )


def _tail(text: str, lines: int = 3) -> str:
    return " ".join(text.strip().splitlines()[-lines:])[-400:]


def run_runtime_stage(
    code: str,
    kind: str,
    limits: Limits | None = None,
    *,
    skip_static: bool = False,
    bounds: ImaginationBounds | None = None,
) -> tuple[bool, str]:
    """Runs stage 2 for ``code`` in a child process.

    Args:
        code: candidate source.
        kind: one of :data:`llm.validate.static.KINDS`.
        limits: resource limits (:class:`Limits` defaults when ``None``).
        bounds: the imagined-day bounds (``kind="imagination"``; defaults when ``None``).
        skip_static: do not re-run stage 1 inside the child. For tests that show the
            sandbox holds on its own; :func:`llm.validate.validate` never sets it.

    Returns:
        ``(ok, reason)``: the verdict on the candidate; an accepted candidate's reason
        ends with its peak resident memory.

    Raises:
        SandboxError: the sandbox failed before it could judge the candidate (see the
            module docstring); the message names the cause.
    """
    limits = limits or Limits()
    request = json.dumps(
        {
            "code": code,
            "kind": kind,
            "limits": asdict(limits),
            "skip_static": skip_static,
            "bounds": {} if bounds is None else asdict(bounds),
        }
    )
    # Limits are set by the child itself before it imports JAX (no preexec_fn: forking a
    # JAX process with a Python callback is unsafe; the candidate runs long after).
    bootstrap = (
        f"import sys; sys.path[:] = {_import_path()!r}; "
        "from llm.validate._child import main; "
        f"main({int(limits.cpu_time_s)})"
    )
    command = [*network_isolation(), sys.executable, "-I", "-c", bootstrap]
    workdir = tempfile.mkdtemp(prefix="serl-validate-")
    try:
        run = _run_child(command, request.encode(), workdir, limits)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    lines = run.stdout.splitlines()
    loaded = READY_MARKER in lines  # the child got as far as loading the candidate
    result = None
    for line in reversed(lines):
        if line.startswith(RESULT_MARKER):
            result = json.loads(line[len(RESULT_MARKER) :])
            break
    if result is not None and result.get("setup"):
        raise SandboxError(
            f"sandbox error: the validation child failed before loading the candidate: "
            f"{result['reason']}"
        )
    host_failure = next((s for s in _HOST_FAILURES if s in run.stderr), None)
    if not loaded or (run.killed is None and result is None and host_failure):
        if run.killed == "memory":
            cause = (
                f"used {run.peak_bytes / 2**20:.0f} MiB, over Limits.memory_bytes "
                f"({limits.memory_bytes / 2**20:.0f} MiB)"
            )
        elif run.killed == "wall":
            cause = f"ran past Limits.wall_time_s ({limits.wall_time_s:g} s)"
        elif run.returncode < 0:
            cause = f"died of signal {-run.returncode}"
        else:
            cause = f"exited with status {run.returncode}"
        where = "while trying the candidate" if loaded else "before loading the candidate"
        raise SandboxError(
            f"sandbox error: the validation child {cause} {where}: "
            f"{_tail(run.stderr) or 'no output'}"
        )
    if run.killed == "memory":
        return False, _memory_reason(run.peak_bytes, limits)
    if run.killed == "wall":
        return False, f"wall-time limit of {limits.wall_time_s:g} s exceeded"
    if result is not None:
        peak = max(run.peak_bytes, int(result.get("peak_bytes", 0)))
        if peak > limits.memory_bytes:
            return False, _memory_reason(peak, limits)
        reason = str(result["reason"])
        if result["ok"]:
            reason += f"; peak resident memory {peak / 2**20:.0f} MiB"
        return bool(result["ok"]), reason
    if run.returncode < 0:
        return False, _signal_reason(run.returncode, limits)
    return False, f"child exited with status {run.returncode} without a result: {_tail(run.stderr)}"


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILLs the child's process group (its own session) while the child is alive."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
