"""Stage 2 of candidate validation: a trial run in a resource-limited child process.

The parent starts ``python -I -c "...llm.validate._child.main(...)"`` (see that module for
what the child checks); the child sets its own resource limits first thing, before
importing JAX or reading the candidate. Enforced on the child:

- CPU time: ``RLIMIT_CPU = Limits.cpu_time_s`` (SIGXCPU, then SIGKILL at +1 s);
- memory: ``RLIMIT_AS = Limits.memory_bytes`` of virtual address space (JAX maps about
  3 GiB after import; the default 6 GiB leaves ~3 GiB for the candidate);
- file writes: ``RLIMIT_FSIZE = 0`` (no regular file can grow) and ``RLIMIT_CORE = 0``;
- wall time: ``Limits.wall_time_s``, after which the parent kills the child's whole
  process group (SIGKILL);
- network: when ``unshare --net`` works here (root, or unprivileged user namespaces with
  ``unshare -r``), the child runs in a fresh network namespace with no interfaces but an
  unconfigured loopback; otherwise only the in-child guards below apply
  (:func:`network_isolation` says which);
- in-child guards: restricted globals and read-only module views
  (:mod:`llm.validate.restricted`), an audit hook refusing file access outside the Python
  installation, file-system changes, sockets, process creation, ``ctypes`` and class
  patching, and a ``socket.socket`` stub (see :mod:`llm.validate._child`);
- environment: a minimal environment (``PATH``, ``JAX_PLATFORMS=cpu``, one BLAS
  thread), isolated mode (``-I``), a fresh empty working directory.

Not enforced: the number of threads or processes (``RLIMIT_NPROC`` does not bind root and
XLA needs threads; process creation is refused by the audit hook instead), the child's
read access to files through native code (a candidate has no route to native code short of
a CPython or XLA vulnerability), and GPU use (the child is pinned to the CPU).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

from llm.validate._child import RESULT_MARKER
from llm.validate.static import Limits

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


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


def _signal_reason(returncode: int, limits: Limits) -> str:
    sig = -returncode
    if sig == signal.SIGXCPU or sig == signal.SIGKILL:
        return f"CPU-time limit of {limits.cpu_time_s} s exceeded (killed by signal {sig})"
    if sig == signal.SIGXFSZ:
        return "tried to write a file (killed by SIGXFSZ)"
    if sig in (signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS):
        return f"child crashed with signal {sig} (likely the memory limit)"
    return f"child killed by signal {sig}"


def run_runtime_stage(
    code: str, kind: str, limits: Limits | None = None, *, skip_static: bool = False
) -> tuple[bool, str]:
    """Runs stage 2 for ``code`` in a child process.

    Args:
        code: candidate source.
        kind: ``"reward"`` or ``"network"``.
        limits: resource limits (:class:`Limits` defaults when ``None``).
        skip_static: do not re-run stage 1 inside the child. For tests that show the
            sandbox holds on its own; :func:`llm.validate.validate` never sets it.

    Returns:
        ``(ok, reason)``.
    """
    limits = limits or Limits()
    request = json.dumps(
        {"code": code, "kind": kind, "limits": asdict(limits), "skip_static": skip_static}
    )
    # -I (isolated mode) ignores PYTHONPATH, so the package root goes into sys.path here.
    # Limits are set by the child itself before it imports JAX (no preexec_fn: forking a
    # JAX process with a Python callback is unsafe; the candidate runs long after).
    bootstrap = (
        f"import sys; sys.path.insert(0, {_PACKAGE_ROOT!r}); "
        "from llm.validate._child import main; "
        f"main({int(limits.cpu_time_s)}, {int(limits.memory_bytes)})"
    )
    command = [*network_isolation(), sys.executable, "-I", "-c", bootstrap]
    workdir = tempfile.mkdtemp(prefix="serl-validate-")
    try:
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
        try:
            out, err = proc.communicate(request.encode(), timeout=limits.wall_time_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            proc.communicate()
            return False, f"wall-time limit of {limits.wall_time_s:g} s exceeded"
        except BaseException:
            _kill_group(proc)
            raise
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    for line in reversed(out.decode(errors="replace").splitlines()):
        if line.startswith(RESULT_MARKER):
            result = json.loads(line[len(RESULT_MARKER) :])
            return bool(result["ok"]), str(result["reason"])
    if proc.returncode is not None and proc.returncode < 0:
        return False, _signal_reason(proc.returncode, limits)
    tail = " ".join(err.decode(errors="replace").strip().splitlines()[-3:])[-400:]
    return False, f"child exited with status {proc.returncode} without a result: {tail}"


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILLs the child's process group (its own session) while the child is alive."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
