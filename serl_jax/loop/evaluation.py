"""Training and scoring one candidate program (the inner loop of SE-RL).

A *program* is a pair of validated codes, one per slot (reward, network). It is defined
in restricted globals (:func:`llm.validate.load_validated`), compiled into the jitted PPO
through the reward and network slots, trained over ``run.num_seeds`` vmapped seeds on the
training days, and scored on the validation days by PA, shortfall, WR, GLR and AFI (the
seed with the best validation PA is kept, as in plain training; the loop ranks programs
by ``loop.score``).

Reward reflection (Eureka, Ma et al. 2023, Sec. 3.3): after every jitted chunk of
updates the current policies run the validation days once and the reward's named terms
(:mod:`serl_jax.components.reward`) are summed per episode; the selected seed's history
and the final per-term statistics go back into the next prompt.

:func:`evaluate_program` is a plain function of JSON-able arguments, so the outer loop
can run it in this process or in worker processes (:class:`ProgramEvaluator`). With a
wall-clock budget per program (``loop.train_budget_s``) the programs always run in worker
processes (:mod:`serl_jax.loop.workers`), and a program still running at its budget has
its process killed: one compiled chunk of updates cannot be interrupted otherwise, and a
candidate's cost per step can grow with the market (the validation trial sees only the
sample's shapes), so checking the time between chunks would not bound it.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from serl_jax.components.reward import reward_term_values
from serl_jax.config import Config, config_from_dict
from serl_jax.envs.execution import ExecutionEnv
from serl_jax.envs.market_data import MarketData
from serl_jax.evaluation import rollout
from serl_jax.experiment import train_policy
from serl_jax.loop.workers import WorkerPool
from serl_jax.metrics import compute_metrics, price_advantage, shortfall
from serl_jax.rl.checkpoint import save_policy
from serl_jax.rl.policy import make_ppo_policy

__all__ = ["ProgramEvaluator", "ProgramResult", "evaluate_program", "load_program"]


@dataclass(frozen=True)
class ProgramResult:
    """What training and scoring a program produced (JSON-able).

    Attributes:
        ok: training finished with finite parameters and metrics.
        error: one-line reason when not ok ("" otherwise).
        metrics: validation-day metrics: ``pa``, ``pa_ci`` ([low, high]), ``pa_std``,
            ``wr``, ``glr``, ``afi``, ``shortfall`` (mean spread-and-impact part of PA)
            (bps or ratios; ``None`` where not finite), ``n_orders``,
            ``validation_pa_per_seed``, ``validation_shortfall_per_seed``,
            ``selected_seed`` (chosen by ``loop.score``), ``devices`` (it trained on),
            ``prior_anchor_steps`` (the
            anchor of the action prior it trained with, steps), and per validation order
            ``pa_per_order`` and ``shortfall_per_order`` (bps) for paired comparisons of
            candidates on the same orders.
        reward_term_stats: ``{term: {episode_mean, episode_std, step_mean, step_min,
            step_max, share}}`` of the selected seed's final policy on validation days
            (``share`` = the term's mean |episode sum| over the sum of all terms'), plus
            ``"history"``: ``[{"updates": u, "episode_mean": {term: value}}]`` over training.
        timing: seconds: ``compile`` (init + update programs), ``train`` (updates),
            ``total`` (wall time of the whole evaluation).
        curves: per-update training metrics of the selected seed (``order_pa``, ...;
            ``None`` where not finite, e.g. no episode finished in that update).
    """

    ok: bool
    error: str
    metrics: dict[str, Any]
    reward_term_stats: dict[str, Any]
    timing: dict[str, float]
    curves: dict[str, list[float | None]]


def _finite(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def load_program(reward_code: str, network_code: str):
    """Defines a validated program in this process: ``(reward_fn, network_module)``.

    Raises:
        llm.validate.StaticError, TypeError: the code fails stage 1 again.
    """
    from llm.validate import load_validated

    return load_validated(reward_code, "reward"), load_validated(network_code, "network")


_MARKETS: dict[tuple[str, str], tuple[Any, Any, Any]] = {}


def _market_params(cfg: Config, market: str):
    """Env parameters of the training and validation days (cached per process)."""
    from serl_jax.experiment import load_splits

    key = (market, repr(cfg.data))
    if key not in _MARKETS:
        splits = load_splits(cfg, market)
        _MARKETS[key] = (
            splits,
            MarketData.from_episodes(splits.train),
            MarketData.from_episodes(splits.val),
        )
    splits, train_data, val_data = _MARKETS[key]
    return splits, cfg.env_params(train_data), cfg.env_params(val_data)


def evaluate_program(
    config: dict[str, Any],
    market: str,
    reward_code: str,
    network_code: str,
    artifact_dir: str | None = None,
) -> ProgramResult:
    """Trains a program and scores it on the validation days.

    Args:
        config: ``Config.to_dict()`` (the ``ppo``, ``network.action_prior``, ``run``, ``env``
            and ``eval`` sections are used).
        market: dataset spec (``sample:<name>`` or a path).
        reward_code, network_code: validated code of the two slots.
        artifact_dir: where to write ``checkpoint/`` (policy + both codes), if given.

    Returns:
        A :class:`ProgramResult`; a training error or non-finite outcome gives
        ``ok=False`` with the reason (the candidate's fault), never an exception.

    Raises:
        serl_jax.data.DataError, serl_jax.config.ConfigError: bad data or config (the
            run's fault, not the candidate's).
    """
    t_start = time.perf_counter()
    cfg = config_from_dict(config)
    splits, train_params, val_params = _market_params(cfg, market)
    try:
        reward_fn, network = load_program(reward_code, network_code)
        # A network program may declare its prior's anchor; training, scoring and the
        # checkpoint's config all use it.
        cfg = dataclasses.replace(cfg, network=cfg.network.for_network(network))
        env = ExecutionEnv(reward_fn=reward_fn)
        policy = make_ppo_policy(network, cfg.ppo.normalize_obs, action_prior=cfg.network.prior())

        def terms(prev, action, nxt, params):
            return reward_term_values(reward_fn(prev, action, nxt, params))

        @jax.jit
        def track(all_params):
            def one(p):
                out = rollout(env, policy, p, val_params, jax.random.PRNGKey(0), record=terms)
                return out, jax.tree.map(lambda x: x.sum(axis=-1), out.recorded)

            return jax.vmap(one)(all_params)

        history: list[tuple[int, dict[str, np.ndarray]]] = []
        last: dict[str, Any] = {}

        def on_chunk(updates, all_params):
            out, sums = jax.device_get(track(all_params))
            history.append((updates, {k: v.mean(axis=-1) for k, v in sums.items()}))
            last.update(rollout=out, sums=sums)

        # The last chunk's tracking rollouts are the final policies' validation rollouts:
        # the seed selection reuses them instead of rolling out again.
        trained = train_policy(
            cfg, env, train_params, val_params, network=network, progress=False,
            on_chunk=on_chunk, validation_rollouts=lambda _: last["rollout"],
        )  # fmt: skip
    except Exception as e:  # noqa: BLE001 - any failure of candidate code is its score
        return _failed(f"training failed: {type(e).__name__}: {e}", t_start)

    seed = trained.selected_seed
    final = jax.tree.map(lambda x: x[seed], last["rollout"])
    if not all(bool(jnp.isfinite(x).all()) for x in jax.tree.leaves(trained.policy_params)):
        return _failed("training diverged: non-finite network parameters", t_start)
    outcomes = final.outcomes(float(val_params.side))
    pa = price_advantage(outcomes)
    if not np.isfinite(pa).all():
        return _failed("non-finite PA on validation days", t_start)
    m = compute_metrics(
        outcomes, confidence=cfg.eval.confidence, n_bootstrap=cfg.eval.n_bootstrap, seed=0
    )
    costs = shortfall(outcomes)
    metrics = {
        "pa": _finite(m.PA.value),
        "pa_ci": [_finite(m.PA.low), _finite(m.PA.high)],
        "pa_std": _finite(m.PA_std.value),
        "wr": _finite(m.WR.value),
        "glr": _finite(m.GLR.value),
        "afi": _finite(m.AFI.value),
        "n_orders": int(m.n_orders),
        "validation_pa_per_seed": [_finite(v) for v in trained.validation_pa],
        "validation_shortfall_per_seed": [_finite(v) for v in trained.validation_shortfall],
        "selected_seed": seed,
        "devices": trained.devices,
        "shortfall": _finite(costs.mean()),
        "prior_anchor_steps": cfg.network.prior_anchor_steps,
        "pa_per_order": [float(v) for v in pa],
        "shortfall_per_order": [_finite(v) for v in costs],
    }
    stats = _term_stats(final.recorded, {k: v[seed] for k, v in last["sums"].items()})
    stats["history"] = [
        {"updates": u, "episode_mean": {k: _finite(v[seed]) for k, v in means.items()}}
        for u, means in history
    ]
    curves = {k: [_finite(x) for x in v[seed]] for k, v in trained.curves.items()}
    if artifact_dir is not None:
        save_policy(
            Path(artifact_dir) / "checkpoint",
            trained.policy_params,
            {
                "config": cfg.to_dict(),
                "obs_size": env.observation_size(train_params),
                "market": splits.name,
                "selected_seed": seed,
                "validation_pa": [float(v) for v in trained.validation_pa],
                "validation_shortfall": [float(v) for v in trained.validation_shortfall],
                "feature_names": list(splits.train.feature_names),
                "reward_code": reward_code,
                "network_code": network_code,
            },
        )
    timing = {
        "compile": trained.compile_seconds,
        "train": trained.train_seconds,
        "total": time.perf_counter() - t_start,
    }
    return ProgramResult(True, "", metrics, stats, timing, curves)


def _failed(reason: str, t_start: float) -> ProgramResult:
    reason = " ".join(reason.split())[:500]
    return ProgramResult(False, reason, {}, {}, {"total": time.perf_counter() - t_start}, {})


def _term_stats(per_step: dict[str, np.ndarray], episode: dict[str, np.ndarray]) -> dict:
    """Per-term statistics from ``[N, T]`` step values and ``[N]`` episode sums."""
    scale = sum(float(np.abs(v).mean()) for k, v in episode.items() if k != "total")
    out: dict[str, Any] = {}
    for name, steps in per_step.items():
        sums = episode[name]
        out[name] = {
            "episode_mean": _finite(sums.mean()),
            "episode_std": _finite(sums.std()),
            "step_mean": _finite(steps.mean()),
            "step_min": _finite(steps.min()),
            "step_max": _finite(steps.max()),
            "share": _finite(np.abs(sums).mean() / scale) if scale > 0 else None,
        }
    return out


@contextmanager
def compilation_cache(directory: str | Path | None) -> Iterator[None]:
    """Uses JAX's persistent compilation cache in ``directory`` while active (restoring
    the previous setting after), so a resumed run or a repeated program reloads compiled
    XLA executables instead of compiling again. ``None``: no change."""
    if directory is None:
        yield
        return
    previous = jax.config.jax_compilation_cache_dir
    jax.config.update("jax_compilation_cache_dir", str(directory))
    try:
        yield
    finally:
        jax.config.update("jax_compilation_cache_dir", previous)


def _init_worker(cache_dir: str | None) -> None:
    if cache_dir is not None:
        jax.config.update("jax_compilation_cache_dir", cache_dir)


class ProgramEvaluator:
    """Runs :func:`evaluate_program` on a batch of programs, in this process
    (``workers=1`` without a budget) or in spawned worker processes, so several candidates
    are in flight at once and each can be stopped at its budget; compiled programs go to a
    persistent cache when ``cache_dir`` is set.

    :meth:`evaluate` yields each result as soon as it is ready (in-process: lazily, one
    program at a time), so the caller can record it before the next one finishes and a
    kill loses at most the programs in flight. Each worker process keeps its loaded
    market and JAX's in-memory caches between programs. Use as a context manager.

    Args:
        workers: programs trained at once (each in its own process when > 1).
        cache_dir: JAX's persistent compilation cache, or ``None``.
        budget_s: wall-clock seconds per program (compile, training and scoring) after
            which its worker process is killed and the program scored as failed with the
            reason; 0: no budget.
    """

    def __init__(
        self, workers: int = 1, cache_dir: str | Path | None = None, budget_s: float = 0.0
    ):
        self.workers = int(workers)
        self.budget_s = float(budget_s)
        self._cache = compilation_cache(cache_dir)
        self._cache.__enter__()
        cache = None if cache_dir is None else str(cache_dir)
        self._pool = (
            WorkerPool(self.workers, _init_worker, (cache,))
            if self.workers > 1 or self.budget_s > 0
            else None
        )

    def evaluate(self, tasks: list[tuple]) -> Iterator[tuple[int, ProgramResult]]:
        """Yields ``(index, result)`` for each task (the arguments of
        :func:`evaluate_program`), in completion order. A program stopped at its budget,
        or whose worker died, gives a failed result saying so.

        Raises:
            Exception: what :func:`evaluate_program` raises (bad data or config).
            RuntimeError: a worker process could not start.
        """
        if self._pool is None:
            for i, args in enumerate(tasks):
                yield i, evaluate_program(*args)
            return
        for i, outcome in self._pool.run(evaluate_program, tasks, self.budget_s or None):
            if outcome.status == "done":
                yield i, outcome.value
                continue
            if outcome.status == "timeout":
                reason = (
                    f"training exceeded its wall-clock budget of {self.budget_s:g} s "
                    "(loop.train_budget_s) and was stopped"
                )
            else:
                reason = f"the training worker process died (exit code {outcome.exitcode})"
            yield i, _failed(reason, time.perf_counter() - outcome.seconds)

    def close(self) -> None:
        """Stops the worker processes (killing programs still running) and restores the
        compilation-cache setting."""
        if self._pool is not None:
            self._pool.close()
        self._cache.__exit__(None, None, None)

    def __enter__(self) -> ProgramEvaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
