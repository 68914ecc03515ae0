"""Stage-2 child process, started by
:func:`llm.validate.sandbox.run_runtime_stage` (not a user entry point).

Reads ``{"code", "kind", "limits", "skip_static", "bounds"}`` as JSON on stdin and writes one line
``@@SERL_VALIDATE@@ {"ok", "reason", "peak_bytes"}`` on stdout (``"setup": true`` added
when the harness itself failed). Order of work:

0. Sets its resource limits (:func:`set_limits`) and skips gymnax's package
   ``__init__`` (:func:`gymnax_base_only`: the bundled environments' plotting imports).
1. Imports JAX/flax and builds the trial inputs from the shipped real sample (US minute
   bars, validation days): a batch of ``EnvState`` transitions (including last steps of
   windows) and the matching observations, and compiles the default program's trial
   (``llm.prompts.DEFAULT_CODE``) on them. A failure up to here is the harness's
   (``"setup": true``), never the candidate's; the line ``@@SERL_VALIDATE_READY@@`` on
   stdout then tells the parent that the candidate is about to be loaded.
2. Installs the guards: a ``sys.addaudithook`` hook that, from then on, refuses (raises
   ``PermissionError``) and records file opens other than read-only opens inside the
   Python installation and the packages imported in step 1 (``llm``, ``serl_jax``, JAX,
   flax, ...: their lazy imports), directory listings outside those, file-system changes,
   sockets,
   subprocess / ``os.system`` / ``exec*`` / ``fork`` / ``kill``, ``ctypes``, new imports
   of OS-level modules, tracing/profiling hooks and setting attributes on classes the
   candidate did not define; ``socket.socket`` is replaced by a stub. Audit hooks cannot be removed.
3. Defines the candidate in restricted globals (:mod:`llm.validate.restricted`), checks it
   with ``jax.eval_shape`` on the real shapes, then runs it jitted on the real batch
   (reward: ``jit(vmap(reward))`` and a vmapped ``ExecutionEnv.step_env`` with it; network:
   ``init`` + ``apply``; imagination: ``jit(vmap(imagine))`` on the sample's training
   days, then :func:`serl_jax.components.imagination.check_imagined_days`; profiling: the
   program vmapped over agents and keys for 1 and 4 agents, then
   :func:`serl_jax.components.profiling.check_profiles`; communication: ``init`` +
   ``apply`` like a network, the message's length and finiteness) and checks
   shapes, dtypes, finiteness, the parameter count (from
   shapes, before allocating) and XLA's estimate of each compiled program's buffers
   (``Limits.max_program_bytes``, before running it).
4. Times the candidate's compiled trial program against the default program's on the
   same batch (fastest of up to :data:`TIMING_ROUNDS` alternating calls, so both see the
   same machine load) and rejects it above ``Limits.max_time_factor``. Measured on 2 CPU
   cores (64 lanes): the default reward's trial ~65 us per call, the library's rewards
   0.9-1.2x, its networks 1.0-3.5x (``apply``), a 583 k-parameter MLP 6x, 1000 trips of
   256 sines per lane ~400x; so 20x admits networks up to the parameter limit and still
   stops a reward doing hundreds of times the default's work per step. The trial sees the
   sample's shapes only: a reward whose cost grows with the market (a reduction over
   ``params.data``) costs more in training, which the loop's training budget bounds.

Any recorded guard violation rejects the candidate even if its code caught the error.
"""

from __future__ import annotations

import functools
import json
import math
import os
import sys
import time

RESULT_MARKER = "@@SERL_VALIDATE@@"
READY_MARKER = "@@SERL_VALIDATE_READY@@"
#: Alternating calls of the candidate's and the default's trial program (fastest counts).
TIMING_ROUNDS = 20
#: Seconds of candidate calls after which the timing stops early.
TIMING_BUDGET_S = 2.0

_BLOCKED_EVENT_PREFIXES = (
    "socket.", "subprocess.", "os.system", "os.exec", "os.spawn", "os.posix_spawn",
    "os.fork", "os.forkpty", "os.kill", "os.killpg", "os.remove", "os.unlink", "os.rename",
    "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.chflags", "os.truncate",
    "os.symlink", "os.link", "os.utime", "os.putenv", "os.unsetenv", "os.chdir",
    "os.startfile", "os.setxattr", "os.removexattr", "shutil.", "ctypes.", "pty.",
    "urllib.", "http.", "ftplib.", "smtplib.", "poplib.", "imaplib.", "nntplib.",
    "telnetlib.", "webbrowser.", "sys._current_frames", "sys.settrace",
    "sys.setprofile", "sys.addaudithook", "code.", "cpython.run_", "mmap.", "resource.",
    "fcntl.", "msvcrt.", "winreg.", "_winapi.", "signal.", "faulthandler.",
)  # fmt: skip
_BLOCKED_IMPORTS = frozenset(
    {
        "ctypes", "_ctypes", "socket", "_socket", "subprocess", "_posixsubprocess",
        "multiprocessing", "pty", "shutil", "urllib", "http", "ftplib", "smtplib", "ssl",
        "asyncio", "select", "selectors", "mmap", "fcntl", "resource", "signal", "pickle",
        "marshal", "webbrowser", "code", "codeop", "pdb", "importlib", "runpy", "zipimport",
    }
)  # fmt: skip


class _Guard:
    """The audit hook; inactive until :meth:`arm`."""

    def __init__(self, read_roots: tuple[str, ...]):
        self.read_roots = read_roots
        self.armed = False
        self.violations: list[str] = []

    def arm(self) -> None:
        self.armed = True

    def _deny(self, what: str) -> None:
        if len(self.violations) < 20:
            self.violations.append(what)
        raise PermissionError(f"sandbox: {what} is not allowed")

    def _readable(self, path) -> bool:
        if isinstance(path, int):  # an already open descriptor (e.g. os.fdopen)
            return False
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        real = os.path.realpath(str(path))
        return any(real == root or real.startswith(root + os.sep) for root in self.read_roots)

    def __call__(self, event: str, args: tuple) -> None:
        if not self.armed:
            return
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
            )
            if path is None or writing or not self._readable(path):
                self._deny(f"open({path!r}, {mode!r})")
        elif event in ("os.listdir", "os.scandir", "glob.glob", "os.walk"):
            path = args[0] if args else "."
            if path is None or not self._readable(path):
                self._deny(f"{event}({path!r})")
        elif event == "import":
            name = str(args[0]).split(".")[0] if args else ""
            if name in _BLOCKED_IMPORTS:
                self._deny(f"import {args[0]}")
        elif event == "object.__setattr__" or event == "object.__delattr__":
            target = args[0] if args else None
            if isinstance(target, type):
                if not str(target.__dict__.get("__module__")).startswith("serl_candidate"):
                    self._deny(f"{event}({target.__qualname__}.{args[1]})")
        elif event.startswith(_BLOCKED_EVENT_PREFIXES):
            self._deny(event)


def _read_roots() -> tuple[str, ...]:
    """Paths the armed guard still lets Python read (lazy imports of library code): the
    interpreter's and the environment's prefixes and every top-level package (its
    directory) or module (its file) imported so far, wherever ``sys.path`` found it.
    Everything else (the repository, home, /tmp, /proc, /etc) is refused."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    for name, module in list(sys.modules.items()):
        where = getattr(module, "__file__", None)
        if "." not in name and isinstance(where, str):
            roots.add(os.path.dirname(where) if hasattr(module, "__path__") else where)
    return tuple(sorted(os.path.realpath(r) for r in roots if r and os.path.exists(r)))


def _open_own_status() -> int | None:
    """A descriptor of ``/proc/self/status``, opened before the guard is armed, for
    :func:`_peak_bytes`; ``None`` without ``/proc``."""
    try:
        return os.open("/proc/self/status", os.O_RDONLY)
    except OSError:
        return None


def _peak_bytes(status_fd: int | None) -> int:
    """This process's peak resident memory (``VmHWM``), bytes; 0 when unknown."""
    if status_fd is None:
        return 0
    os.lseek(status_fd, 0, os.SEEK_SET)
    for line in os.read(status_fd, 1 << 16).decode(errors="replace").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def _socket_guard() -> None:
    """Replaces ``socket.socket`` and friends by stubs that refuse (belt and braces)."""
    import socket

    def refuse(*args, **kwargs):
        raise PermissionError("sandbox: sockets are not allowed")

    for name in ("socket", "create_connection", "create_server", "socketpair", "fromfd"):
        if hasattr(socket, name):
            setattr(socket, name, refuse)


def _candidate_line(exc: BaseException) -> int | None:
    tb = exc.__traceback__
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<candidate>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    message = " ".join(text[:3])[:400] if text else ""
    where = _candidate_line(exc)
    prefix = f"line {where}: " if where else ""
    return f"{prefix}{type(exc).__name__}: {message}".rstrip(": ")


def trial_inputs(batch_size: int):
    """Real transitions and observations from the shipped US sample (validation days)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from serl_jax.data import load_market, sample_path
    from serl_jax.envs import EnvParams, ExecutionEnv, MarketData

    market = load_market(sample_path("us_1min"))
    data = MarketData.from_episodes(market.val)
    params = EnvParams(data=data)
    env = ExecutionEnv()
    rng = np.random.default_rng(0)
    n, t = data.num_episodes, data.num_slots
    episode = rng.integers(0, n, batch_size).astype(np.int32)
    window_len = rng.integers(2, t + 1, batch_size).astype(np.int32)
    start = (rng.random(batch_size) * (t - window_len + 1)).astype(np.int32)
    time = (rng.random(batch_size) * window_len).astype(np.int32)
    time[: max(1, batch_size // 4)] = window_len[: max(1, batch_size // 4)] - 1  # last steps
    left = rng.uniform(0.0, 1.0, batch_size).astype(np.float32)
    left[: max(1, batch_size // 8)] = 0.0  # nothing left (divisions by zero inventory)
    action = rng.uniform(0.0, 1.0, batch_size).astype(np.float32)

    def make(ep, st, wl, tm, lf, act):
        state = env.init_state(params, ep, st, wl)
        state = state.replace(time=tm, inventory=state.quantity * lf)
        # What was executed so far filled at the benchmark, so a reward reading the
        # average fill price (notional / executed) sees a consistent state.
        executed = state.quantity - state.inventory
        state = state.replace(executed=executed, notional=executed * state.benchmark_price)
        _, next_state, _, _, _ = env.step_env(jax.random.PRNGKey(0), state, act, params)
        return state, next_state, env.get_obs(state, params)

    prev, nxt, obs = jax.jit(jax.vmap(make))(
        jnp.asarray(episode), jnp.asarray(start), jnp.asarray(window_len),
        jnp.asarray(time), jnp.asarray(left), jnp.asarray(action),
    )  # fmt: skip
    return env, params, prev, jnp.asarray(action), nxt, obs


@functools.cache
def _trial_days():
    """Real source days for an imagination trial: the shipped US sample's training days,
    ``(keys, price [N, T], volume [N, T], mean minute volume [N])``; loaded once, in the
    harness's setup (before the guard is armed)."""
    import jax
    import jax.numpy as jnp

    from serl_jax.data import load_market, sample_path

    days = load_market(sample_path("us_1min")).train
    keys = jax.random.split(jax.random.PRNGKey(3), days.n_episodes)
    return (
        keys,
        jnp.asarray(days.price),
        jnp.asarray(days.volume),
        jnp.asarray(days.mean_minute_volume),
    )


def _imagination_trial(entry):
    """The program vmapped over source days with their ``ImagineParams``."""
    import jax

    from serl_jax.components.imagination import imagine_params

    def trial(keys, price, volume, mean_minute):
        def one(key, p, v, m):
            return entry(key, p, v, imagine_params(p, v, m, 0.0))

        return jax.vmap(one)(keys, price, volume, mean_minute)

    return trial


#: agent counts and keys a profile program is drawn for in its trial
PROFILE_TRIAL_AGENTS = (1, 4)
PROFILE_TRIAL_KEYS = 64


def _profiling_trial(entry, params):
    """The program drawn for every agent of :data:`PROFILE_TRIAL_AGENTS` on
    :data:`PROFILE_TRIAL_KEYS` keys: one function of the keys returning, per agent count,
    an ``AgentProfile`` with ``[keys, agents]`` leaves (unclipped)."""
    import jax
    import jax.numpy as jnp

    from serl_jax.components.profiling import as_profile

    def trial(keys):
        draws = []
        for n in PROFILE_TRIAL_AGENTS:

            def per_key(key, n=n):
                agents = jnp.arange(n, dtype=jnp.int32)
                return jax.vmap(lambda i: as_profile(entry(key, i, n, params)))(agents)

            draws.append(jax.vmap(per_key)(keys))
        return tuple(draws)

    return trial


@functools.cache
def _profile_param_types():
    """``(ProfileParams, ProfileData)``, made once in the harness's setup (before the guard
    is armed: creating a class sets attributes of a type, which the guard denies). Their
    fields are ``PROFILE_PARAM_FIELDS``; a test holds the two together."""
    from flax import struct

    @struct.dataclass
    class ProfileData:
        num_slots: int = struct.field(pytree_node=False)

    @struct.dataclass
    class ProfileParams:
        side: float
        quantity_low: float
        quantity_high: float
        min_window_len: int
        data: ProfileData

    return ProfileParams, ProfileData


def _profile_params(params):
    """What a profile program reads in the trial: the US sample's environment parameters,
    limited to the fields the LLM4Profiling contract lists (:data:`PROFILE_PARAM_FIELDS
    <serl_jax.components.profiling.PROFILE_PARAM_FIELDS>`). Any other field differs
    between the static and the dynamic market, or exists in one only, so a program
    reading it is refused here, with an ``AttributeError`` naming it, instead of passing
    on the static market's parameters and failing in training (2026-11-27: a profile
    branching on ``params.child_quantity`` read ``params.window_len`` in the dynamic
    market)."""
    profile_params, profile_data = _profile_param_types()
    return profile_params(
        side=params.side,
        quantity_low=params.quantity_low,
        quantity_high=params.quantity_high,
        min_window_len=params.min_window_len,
        data=profile_data(num_slots=params.data.num_slots),
    )


def _compile(fn, max_bytes: int, *args):
    """Jits and compiles ``fn`` for ``args``; refuses programs whose buffers exceed
    ``max_bytes`` (XLA's own estimate of temporaries + outputs, before anything runs)."""
    import jax

    compiled = jax.jit(fn).lower(*args).compile()
    try:
        stats = compiled.memory_analysis()
    except Exception:  # noqa: BLE001 - not every backend reports; the RSS watch still holds
        stats = None
    if stats is not None:
        needed = int(stats.temp_size_in_bytes) + int(stats.output_size_in_bytes)
        if needed > max_bytes:
            raise MemoryError(
                f"the compiled program needs {needed / 2**20:.0f} MiB of buffers, "
                f"limit {max_bytes / 2**20:.0f} MiB"
            )
    return compiled


class TooSlow(Exception):
    """The candidate's trial program runs too long next to the default program's."""


def _best_times(candidate, default) -> tuple[float, float]:
    """The fastest of up to :data:`TIMING_ROUNDS` calls of each (compiled, warm) program,
    seconds, alternating so that both see the same load; stops early once the candidate
    has used :data:`TIMING_BUDGET_S` (a very slow candidate is not timed 20 times)."""
    import jax

    best_c = best_d = math.inf
    spent = 0.0
    for _ in range(TIMING_ROUNDS):
        t0 = time.perf_counter()
        jax.block_until_ready(default())
        best_d = min(best_d, time.perf_counter() - t0)
        t0 = time.perf_counter()
        jax.block_until_ready(candidate())
        took = time.perf_counter() - t0
        best_c, spent = min(best_c, took), spent + took
        if spent > TIMING_BUDGET_S:
            break
    return best_c, best_d


def _check_time(candidate, default, max_factor: float) -> str:
    """Compares the candidate's trial run time with the default program's on the same
    batch; raises :class:`TooSlow` above ``max_factor``, else returns a note."""
    t_c, t_d = _best_times(candidate, default)
    factor = t_c / max(t_d, 1e-9)
    timing = f"{t_c * 1e6:.0f} us per call, {factor:.1f}x the default program's {t_d * 1e6:.0f} us"
    if factor > max_factor:
        raise TooSlow(f"trial program takes {timing}, limit {max_factor:g}x")
    return timing


def _reward_trial(entry, env):
    """The reward alone, vmapped, and the slot as the env uses it (a vmapped ``step_env``
    with this reward), as one function of ``(key, prev, action, nxt, params)``."""
    import jax

    from serl_jax.components.reward import total_reward

    step = jax.vmap(type(env)(reward_fn=entry).step_env, in_axes=(None, 0, 0, None))

    def trial(key, prev, action, nxt, params):
        alone = jax.vmap(entry, in_axes=(0, 0, 0, None))(prev, action, nxt, params)
        return total_reward(alone), step(key, prev, action, params)[2]

    return trial


def _default_program(kind: str, env, params, prev, action, nxt, obs):
    """The default program's trial (the loop's reference, ``llm.prompts.DEFAULT_CODE``),
    compiled and run once: a zero-argument call to time against the candidate's."""
    import jax

    from llm.prompts.defaults import DEFAULT_CODE
    from llm.validate.restricted import exec_entry_point

    entry = exec_entry_point(DEFAULT_CODE[kind], kind)
    if kind == "reward":
        args = (jax.random.PRNGKey(1), prev, action, nxt, params)
        program = jax.jit(_reward_trial(entry, env)).lower(*args).compile()
    elif kind == "imagination":
        args = _trial_days()
        program = jax.jit(_imagination_trial(entry)).lower(*args).compile()
    elif kind == "profiling":
        args = (jax.random.split(jax.random.PRNGKey(2), PROFILE_TRIAL_KEYS),)
        trial = _profiling_trial(entry, _profile_params(params))
        program = jax.jit(trial).lower(*args).compile()
    else:  # network, communication: a module's apply on the trial observations
        module = entry()  # zero parameters: the values do not change the run time
        shapes = jax.eval_shape(module.init, jax.random.PRNGKey(0), obs)
        args = (jax.tree.map(lambda x: jax.numpy.zeros(x.shape, x.dtype), shapes), obs)
        program = jax.jit(module.apply).lower(*args).compile()
    jax.block_until_ready(program(*args))
    return lambda: program(*args)


def _check_reward(entry, env, params, prev, action, nxt, max_bytes: int, max_abs: float):
    """Checks a reward; returns ``(form, run)``, ``run`` a zero-argument call of its
    compiled trial program. ``max_abs``: ``Limits.max_reward_abs``."""
    import jax
    import jax.numpy as jnp

    from serl_jax.components.reward import check_reward_output

    one = jax.tree.map(lambda x: x[0], (prev, action, nxt))
    form = check_reward_output(jax.eval_shape(entry, one[0], one[1], one[2], params))
    args = (jax.random.PRNGKey(1), prev, action, nxt, params)
    program = _compile(_reward_trial(entry, env), max_bytes, *args)
    values, in_env = program(*args)
    if values.shape != (action.shape[0],):
        raise ValueError(f"vmapped reward has shape {values.shape}, expected {action.shape}")
    finite = jnp.isfinite(values)
    if not bool(finite.all()):
        bad = int((~finite).sum())
        raise ValueError(f"reward is not finite (NaN/inf) on {bad} of {values.size} states")
    if not bool(jnp.isfinite(in_env).all()):
        raise ValueError("reward is not finite (NaN/inf) inside ExecutionEnv.step")
    largest = float(jnp.abs(values).max())
    if largest > max_abs:
        raise ValueError(
            f"reward reaches {largest:.3g} in one step on real transitions, limit {max_abs:g}: "
            "rewards are bps times params.reward_scale (the default's stay within 20), so a "
            "term is in the wrong units (shares or prices where bps are expected)"
        )
    return form, lambda: program(*args)


def _module_shapes(module, obs, max_params: int, what: str):
    """``(key, variable shapes, parameter count)`` of a flax module on ``obs``, traced
    (nothing allocated); refuses more than ``max_params`` parameters."""
    import jax

    key = jax.random.PRNGKey(0)
    shapes = jax.eval_shape(module.init, key, obs)
    n_params = sum(math.prod(x.shape) for x in jax.tree.leaves(shapes))
    if n_params > max_params:
        raise ValueError(f"{what} has {n_params} parameters, limit {max_params}")
    return key, shapes, n_params


def _compiled_module(module, key, obs, max_bytes: int, what: str):
    """``(variables, apply)``: the module initialized and its ``apply`` compiled on
    ``obs``; refuses variables other than ``params`` (state the loop would not carry)."""
    variables = _compile(module.init, max_bytes, key, obs)(key, obs)
    if set(variables) != {"params"}:
        raise ValueError(f"{what} must have only 'params' variables, got {sorted(variables)}")
    return variables, _compile(module.apply, max_bytes, variables, obs)


def _check_network(entry, obs, max_params: int, max_bytes: int):
    """Checks a network; returns ``(note, run)``, ``run`` a zero-argument call of its
    compiled ``apply`` on the trial observations."""
    import jax
    import jax.numpy as jnp

    from serl_jax.rl.networks import declared_action_multiples, declared_prior_anchor

    module = entry()
    anchor = declared_prior_anchor(module)
    multiples = declared_action_multiples(module)
    width = len(multiples) if multiples else 2  # policy outputs: (loc, log σ) or K logits
    key, shapes, n_params = _module_shapes(module, obs, max_params, "network")
    dim = obs.shape[-1]
    for batch in [(obs.shape[0],), (), (2, 3)]:
        probe = jax.ShapeDtypeStruct((*batch, dim), jnp.float32)
        out = jax.eval_shape(module.apply, shapes, probe)
        if not (isinstance(out, tuple) and len(out) == 2):
            raise ValueError("network must return a tuple (policy_outputs, value)")
        policy, value = out
        if tuple(policy.shape) != (*batch, width) or tuple(value.shape) != batch:
            raise ValueError(
                f"on obs {(*batch, dim)} the network returned policy {tuple(policy.shape)} "
                f"and value {tuple(value.shape)}; expected {(*batch, width)} and {batch}"
            )
        if policy.dtype != jnp.float32 or value.dtype != jnp.float32:
            raise ValueError(f"network outputs must be float32, got {policy.dtype}, {value.dtype}")
    variables, apply = _compiled_module(module, key, obs, max_bytes, "network")
    policy, value = apply(variables, obs)
    if not (bool(jnp.isfinite(policy).all()) and bool(jnp.isfinite(value).all())):
        raise ValueError("network outputs are not finite (NaN/inf) on real observations")
    note = f"{n_params} parameters, outputs finite on {obs.shape[0]} real observations"
    if anchor is not None:
        note += f", prior anchor {anchor:g} steps"
    if multiples:
        note += f", discrete action set {list(multiples)}"
    return note, lambda: apply(variables, obs)


def _check_communication(entry, obs, max_params: int, max_bytes: int):
    """Checks a communication module; returns ``(note, run)``, ``run`` a zero-argument call
    of its compiled ``apply`` on the trial observations."""
    import jax
    import jax.numpy as jnp

    from serl_jax.components.communication import message_size

    what = "communication module"
    module = entry()
    key, shapes, n_params = _module_shapes(module, obs, max_params, what)
    dim = obs.shape[-1]
    size = message_size(module, dim)
    for batch in [(obs.shape[0],), (), (2, 3)]:
        probe = jax.ShapeDtypeStruct((*batch, dim), jnp.float32)
        out = jax.eval_shape(module.apply, shapes, probe)
        if not isinstance(out, jax.ShapeDtypeStruct) or tuple(out.shape) != (*batch, size):
            raise ValueError(
                f"on obs {(*batch, dim)} the message has shape {getattr(out, 'shape', out)}, "
                f"expected {(*batch, size)}"
            )
    variables, apply = _compiled_module(module, key, obs, max_bytes, what)
    if not bool(jnp.isfinite(apply(variables, obs)).all()):
        raise ValueError("messages are not finite (NaN/inf) on real observations")
    note = f"{n_params} parameters, {size}-number messages finite on {obs.shape[0]} observations"
    return note, lambda: apply(variables, obs)


def _check_imagination(entry, bounds: dict, max_bytes: int):
    """Checks an imagination program on real training days; returns ``(note, run)``."""
    import jax

    from serl_jax.components.imagination import ImaginationBounds, check_imagined_days

    keys, price, volume, mean_minute = _trial_days()
    trial = _imagination_trial(entry)
    out = jax.eval_shape(trial, keys, price, volume, mean_minute)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise ValueError("imagine must return a tuple (price, volume)")
    program = _compile(trial, max_bytes, keys, price, volume, mean_minute)
    new_price, new_volume = program(keys, price, volume, mean_minute)
    reason = check_imagined_days(price, volume, new_price, new_volume, ImaginationBounds(**bounds))
    if reason is not None:
        raise ValueError(reason)
    note = f"imagined {price.shape[0]} real days of {price.shape[1]} minutes within the bounds"
    return note, lambda: program(keys, price, volume, mean_minute)


def _check_profiling(entry, params, max_bytes: int):
    """Checks a profile program; returns ``(note, run)``."""
    import jax

    from serl_jax.components.profiling import check_profiles

    params = _profile_params(params)
    keys = jax.random.split(jax.random.PRNGKey(2), PROFILE_TRIAL_KEYS)
    trial = _profiling_trial(entry, params)
    jax.eval_shape(trial, keys)  # shapes and dict keys before anything runs
    program = _compile(trial, max_bytes, keys)
    n_slots = params.data.num_slots
    for n, draws in zip(PROFILE_TRIAL_AGENTS, program(keys), strict=True):
        reason = check_profiles(jax.device_get(draws), n_slots)
        if reason is not None:
            raise ValueError(f"with {n} agent(s): {reason}")
    agents = " and ".join(str(n) for n in PROFILE_TRIAL_AGENTS)
    note = f"usable profiles for {agents} agents on {PROFILE_TRIAL_KEYS} keys"
    return note, lambda: program(keys)


def run(request: dict, ready=lambda: None) -> dict:
    """Runs stage 2 in this (already resource-limited) process.

    Args:
        request: ``{"code", "kind", "limits", "skip_static", "bounds"}``.
        ready: called once the harness is set up, just before the candidate is loaded.

    Returns:
        ``{"ok", "reason"}``, with ``"setup": True`` when the harness itself failed.
    """
    code, kind = request["code"], request["kind"]
    limits = request.get("limits", {})
    guard = _Guard(())
    sys.addaudithook(guard)
    try:
        # serl_jax.rl.networks (for _check_network) is imported before the guard is armed,
        # which would deny its file-system access.
        import serl_jax.rl.networks  # noqa: F401
        from llm.validate import restricted
        from llm.validate.static import StaticError, check_static

        env, params, prev, action, nxt, obs = trial_inputs(int(limits.get("batch_size", 64)))
        default = _default_program(kind, env, params, prev, action, nxt, obs)
        guard.read_roots = _read_roots()
    except Exception as e:  # the harness itself failed: not the candidate's fault
        return {"ok": False, "reason": _describe(e), "setup": True}
    _socket_guard()
    ready()
    guard.arm()
    try:
        if not request.get("skip_static"):
            check_static(code, kind)
        entry = restricted.exec_entry_point(code, kind)
        max_bytes = int(limits.get("max_program_bytes", 2**30))
        if kind == "reward":
            max_abs = float(limits.get("max_reward_abs", 1e4))
            form, program = _check_reward(entry, env, params, prev, action, nxt, max_bytes, max_abs)
            detail = f"{form}, jit+vmap, finite on {action.shape[0]} real transitions"
        elif kind == "imagination":
            detail, program = _check_imagination(entry, request.get("bounds", {}), max_bytes)
        elif kind == "profiling":
            detail, program = _check_profiling(entry, params, max_bytes)
        elif kind == "communication":
            max_params = int(limits.get("max_params", 1_000_000))
            detail, program = _check_communication(entry, obs, max_params, max_bytes)
        else:
            max_params = int(limits.get("max_params", 1_000_000))
            detail, program = _check_network(entry, obs, max_params, max_bytes)
        timing = _check_time(program, default, float(limits["max_time_factor"]))
    except StaticError as e:
        return {"ok": False, "reason": f"static: {e}"}
    except TooSlow as e:
        return {"ok": False, "reason": f"run time: {e}"}
    except RecursionError:
        return {"ok": False, "reason": "RecursionError: maximum recursion depth exceeded"}
    except MemoryError as e:
        return {"ok": False, "reason": f"MemoryError: {e or 'memory limit exceeded'}"}
    except BaseException as e:  # noqa: BLE001 - anything the candidate raises rejects it
        if guard.violations:
            return {"ok": False, "reason": f"sandbox violation: {guard.violations[0]}"}
        return {"ok": False, "reason": _describe(e)}
    if guard.violations:
        return {"ok": False, "reason": f"sandbox violation: {guard.violations[0]}"}
    return {"ok": True, "reason": f"{detail}; {timing}"}


def set_limits(cpu_time_s: int) -> None:
    """Resource limits of this process, set first thing (before JAX is imported).

    ``RLIMIT_CPU`` (soft; hard one second later), ``RLIMIT_FSIZE = 0`` (no regular file
    can grow) and ``RLIMIT_CORE = 0``. Limits can only be lowered afterwards (the
    candidate cannot reach ``resource`` anyway: the audit hook refuses it). Memory is
    watched by the parent (resident memory; :mod:`llm.validate.sandbox` says why not
    ``RLIMIT_AS``).
    """
    import resource

    cpu = max(1, int(cpu_time_s))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def gymnax_base_only() -> bool:
    """Registers ``gymnax`` and ``gymnax.environments`` as bare packages (their
    ``__init__`` not run), so that ``from gymnax.environments import environment, spaces``
    (what :mod:`serl_jax.envs` imports) loads those two modules only.

    gymnax's package ``__init__`` imports every bundled environment, and with them
    matplotlib, seaborn and scipy.stats: about 2 s of the child's 4-5 s start-up on 2 CPU
    cores, for modules the trial never uses. Only for this single-purpose child: in any
    other process the stubs would hide ``gymnax.make`` and the bundled environments.

    Returns:
        True when the stubs were installed; False (nothing changed) when gymnax is
        already imported or cannot be found (its import then fails as usual).
    """
    import importlib.util

    if "gymnax" in sys.modules:
        return False
    try:
        spec = importlib.util.find_spec("gymnax")
        if spec is None or spec.submodule_search_locations is None:
            return False
        root = importlib.util.module_from_spec(spec)  # not executed
        sys.modules["gymnax"] = root
        sub_spec = importlib.util.find_spec("gymnax.environments")
        if sub_spec is None:
            raise ImportError("gymnax.environments")
        sub = importlib.util.module_from_spec(sub_spec)
    except Exception:  # noqa: BLE001 - fall back to the ordinary import
        sys.modules.pop("gymnax", None)
        return False
    sys.modules["gymnax.environments"] = sub
    root.environments = sub
    return True


def main(cpu_time_s: int) -> None:
    """Entry point of the child: request on stdin; the ready line and the result line
    (with this process's peak resident memory) on stdout."""
    set_limits(cpu_time_s)
    gymnax_base_only()
    status_fd = _open_own_status()
    request = json.loads(sys.stdin.read())
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing but the marker lines go to the real stdout

    def ready() -> None:
        out.write(f"{READY_MARKER}\n")
        out.flush()

    result = run(request, ready)
    result["peak_bytes"] = _peak_bytes(status_fd)
    out.write(f"{RESULT_MARKER} {json.dumps(result)}\n")
    out.flush()
    os._exit(0)  # skip interpreter teardown (candidate objects, XLA threads)
