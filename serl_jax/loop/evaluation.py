"""Training and scoring one candidate program (the inner loop of SE-RL).

A *program* is the validated code of the reward and network slots, and optionally of the
imagination slot (LLM4Imagine: ``imagine.ratio`` of the training episodes are then on days
it imagines, :func:`serl_jax.rl.mixed_sampling.mix_imagined`). It is defined in
restricted globals (:func:`llm.validate.load_validated`), compiled into the jitted PPO
through the slots, trained over ``run.num_seeds`` vmapped seeds on the training days,
and scored on the validation days by PA, shortfall, WR, GLR and AFI (the seed with the
best validation PA is kept, as in plain training; the loop ranks programs by
``loop.score``).

Reward reflection (Eureka, Ma et al. 2023, Sec. 3.3): after every jitted chunk of
updates the current policies run the validation days once and the reward's named terms
(:mod:`serl_jax.components.reward`) are summed per episode; the selected seed's history
and the final per-term statistics go back into the next prompt.

Programs that build the same network (and imagine with the same program) train together
(:func:`evaluate_batch`): their K rewards and priors sit behind one index
(:func:`serl_jax.components.reward.switch_reward`), the index is data (one per vmapped
lane, candidates x seeds), so K candidates cost one compilation instead of K, and each is
scored as if it had trained alone (its lanes get the keys it would get alone). "The same
network" is the same network code up to the declared prior anchor
(:func:`serl_jax.rl.networks.network_code_key`): reward candidates with the incumbent
network, and network candidates that only move the anchor. With
``loop.switch_networks`` different networks train together too, behind a switch, the
candidates taking turns so that each runs only its own network
(:mod:`serl_jax.rl.network_switch`).

:func:`evaluate_program` is a plain function of JSON-able arguments, so the outer loop
can run it in this process or in worker processes
(:class:`serl_jax.loop.dispatch.ProgramEvaluator`). With a
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

from serl_jax.components.reward import reward_term_values, switch_reward_terms
from serl_jax.config import Config, config_from_dict
from serl_jax.envs.execution import EnvParams
from serl_jax.envs.market_data import MarketData
from serl_jax.evaluation import rollout
from serl_jax.experiment import (
    make_env,
    make_imagination,
    mean_variance_per_order,
    score_reward,
    train_candidates,
    train_policy,
)
from serl_jax.metrics import compute_metrics, price_advantage, shortfall
from serl_jax.rl.checkpoint import save_policy
from serl_jax.rl.mixed_sampling import imagined_vs_real
from serl_jax.rl.network_switch import candidate_networks, map_candidates
from serl_jax.rl.networks import network_code_key
from serl_jax.rl.policy import make_ppo_policy

__all__ = [
    "CandidateMarket",
    "ProgramResult",
    "candidate_market",
    "evaluate_batch",
    "evaluate_program",
    "load_program",
]


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
            ``imagination`` (with an imagination program:
            :func:`serl_jax.rl.mixed_sampling.imagined_vs_real` on the training days),
            ``selected_seed`` (chosen by ``loop.score``), ``devices`` (it trained on),
            ``prior_anchor_steps`` (the
            anchor of the action prior it trained with, steps), and per validation order
            ``pa_per_order`` and ``shortfall_per_order`` (bps) for paired comparisons of
            candidates on the same orders.
        reward_term_stats: ``{term: {episode_mean, episode_std, step_mean, step_min,
            step_max, share}}`` of the selected seed's final policy on validation days
            (``share`` = the term's mean |episode sum| over the sum of all terms'), plus
            ``"history"``: ``[{"updates": u, "episode_mean": {term: value}}]`` over training.
        timing: seconds: ``compile`` (init, update and reflection-rollout programs),
            ``train`` (updates and reflection rollouts), ``total`` (wall time of the whole
            evaluation); ``cache_hits``: programs loaded from the persistent compilation
            cache; for a candidate trained in a batch (:func:`evaluate_batch`) ``batch`` =
            K and each figure is the batch's divided by K.
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


def load_imagination(cfg: Config, splits, imagination_code: str):
    """The mixed sampling of a validated imagination program
    (:func:`serl_jax.experiment.make_imagination`), or ``None`` for "" (real days only).

    Raises:
        llm.validate.StaticError, TypeError: the code fails stage 1 again.
    """
    from llm.validate import load_validated

    if not imagination_code:
        return None
    return make_imagination(cfg, load_validated(imagination_code, "imagination"), splits.stats)


def _reflect_imagination(imagination, train_params) -> dict[str, Any] | None:
    if imagination is None:
        return None
    return imagined_vs_real(imagination, train_params.data, jax.random.PRNGKey(0))


_MARKETS: dict[tuple[str, ...], tuple[Any, MarketData, MarketData, Any]] = {}


@dataclass(frozen=True)
class CandidateMarket:
    """Where candidates train and are scored (``loop.env``).

    Attributes:
        splits: the dataset's splits.
        train: env parameters of the training days in the market candidates train in
            (static for ``static`` and ``hybrid``, the dynamic market for ``dynamic``).
        val: env parameters of the validation days in the market candidates are scored
            in: static for ``static``, else the dynamic market (``market.simulator``), so
            that a score pays for the candidate's own impact.
        dynamic: the dynamic market's training days for hybrid PPO (``hybrid``; else
            None).
    """

    splits: Any
    train: EnvParams
    val: EnvParams
    dynamic: EnvParams | None


def candidate_market(cfg: Config, market: str) -> CandidateMarket:
    """The market candidates train and are scored in (the dataset and the dynamic market
    are loaded once per process and kept).

    Raises:
        serl_jax.data.DataError: bad data.
        ValueError: no calibrated order book for ``market.simulator=lob``
            (:func:`serl_jax.experiment.calibrated_market`).
    """
    from serl_jax.experiment import calibrated_market, dynamic_env_params, load_splits

    mode = cfg.loop.env
    key = (market, repr(cfg.data), mode, repr(cfg.market), repr(cfg.impact))
    if key not in _MARKETS:
        splits = load_splits(cfg, market)
        _MARKETS[key] = (
            splits,
            MarketData.from_episodes(splits.train),
            MarketData.from_episodes(splits.val),
            None if mode == "static" else calibrated_market(cfg, market),
        )
    splits, train_data, val_data, dynamic_market = _MARKETS[key]
    train, val = cfg.env_params(train_data), cfg.env_params(val_data)
    if mode == "static":
        return CandidateMarket(splits, train, val, None)
    dynamic_train, dynamic_val = (
        dynamic_env_params(cfg, dynamic_market, p, splits.stats) for p in (train, val)
    )
    if mode == "dynamic":
        return CandidateMarket(splits, dynamic_train, dynamic_val, None)
    return CandidateMarket(splits, train, dynamic_val, dynamic_train)


def evaluate_program(
    config: dict[str, Any],
    market: str,
    reward_code: str,
    network_code: str,
    artifact_dir: str | None = None,
    imagination_code: str = "",
) -> ProgramResult:
    """Trains a program and scores it on the validation days.

    Args:
        config: ``Config.to_dict()`` (the ``ppo``, ``network.action_prior``, ``run``,
            ``env``, ``eval`` and ``imagine`` sections are used).
        market: dataset spec (``sample:<name>`` or a path).
        reward_code, network_code: validated code of the two slots.
        artifact_dir: where to write ``checkpoint/`` (policy + the slots' codes), if given.
        imagination_code: validated code of the imagination slot ("": real days only).

    Returns:
        A :class:`ProgramResult`; a training error or non-finite outcome gives
        ``ok=False`` with the reason (the candidate's fault), never an exception.

    Raises:
        serl_jax.data.DataError, serl_jax.config.ConfigError: bad data or config (the
            run's fault, not the candidate's).
    """
    t_start = time.perf_counter()
    cfg = config_from_dict(config)
    where = candidate_market(cfg, market)
    splits, train_params, val_params = where.splits, where.train, where.val
    with _count_cache_hits() as hits:
        try:
            reward_fn, network = load_program(reward_code, network_code)
            imagination = load_imagination(cfg, splits, imagination_code)
            # A network program may declare its prior's anchor; training, scoring and the
            # checkpoint's config all use it.
            cfg = dataclasses.replace(cfg, network=cfg.network.for_network(network))
            env = make_env(train_params, reward_fn)
            # validation rollouts carry the score's reward (their sums are the objective)
            val_env = make_env(val_params, score_reward(cfg))
            policy = make_ppo_policy(
                network, cfg.ppo.normalize_obs, action_prior=cfg.network.prior()
            )

            def terms(prev, action, nxt, params):
                return reward_term_values(reward_fn(prev, action, nxt, params))

            tracker = _Tracker(
                lambda _: val_env, lambda _: terms, lambda _: policy, val_params,
                [0] * cfg.run.num_seeds,
            )  # fmt: skip
            hybrid = None
            if where.dynamic is not None:
                hybrid = (make_env(where.dynamic, reward_fn), where.dynamic)
            # The last chunk's tracking rollouts are the final policies' validation
            # rollouts: the seed selection reuses them instead of rolling out again.
            trained = train_policy(
                cfg, env, train_params, val_params, network=network, progress=False,
                on_chunk=tracker.on_chunk, validation_rollouts=tracker.final_rollouts,
                imagination=imagination, dynamic=hybrid,
                hybrid=None if hybrid is None else cfg.market.hybrid_config(),
            )  # fmt: skip
            reflection = _reflect_imagination(imagination, train_params)
        except Exception as e:  # noqa: BLE001 - any failure of candidate code is its score
            return _failed(f"training failed: {type(e).__name__}: {e}", t_start)
    sums = jax.tree.map(np.asarray, tracker.last["sums"])
    timing = {
        "compile": trained.compile_seconds + tracker.compile_seconds,
        "train": trained.train_seconds - tracker.compile_seconds,
        "cache_hits": hits[0],
    }
    return _score(
        cfg, splits, env.observation_size(train_params), val_params, trained,
        tracker.last["rollout"], sums, tracker.history,
        (reward_code, network_code, imagination_code), reflection, artifact_dir, timing,
        t_start,
    )  # fmt: skip


def evaluate_batch(
    config: dict[str, Any],
    market: str,
    programs: list[tuple[str, str]],
    artifact_dirs: list[str | None],
    imagination_code: str = "",
) -> list[ProgramResult] | None:
    """Trains K programs in one compiled program
    (:func:`serl_jax.experiment.train_candidates`) and scores each as
    :func:`evaluate_program` would.

    Each program keeps its own reward and prior. Programs whose network code is equal up
    to the declared prior anchor (:func:`serl_jax.rl.networks.network_code_key`) share
    one network (the first such program's); programs with different networks train
    behind a switch (:class:`serl_jax.rl.network_switch.NetworkSwitch`), taking turns
    (:func:`serl_jax.rl.network_switch.map_candidates`): one compilation, each running
    only its own network.

    Args:
        config, market: as for :func:`evaluate_program`.
        programs: K ``(reward_code, network_code)`` pairs of validated code.
        artifact_dirs: K checkpoint folders (or ``None`` entries).
        imagination_code: validated code of the imagination slot, shared by the K
            programs ("": real days only).

    Returns:
        K :class:`ProgramResult` in order (a program whose own lanes diverge, or whose
        declared anchor is out of range, fails alone); their ``timing`` holds the batch's
        compile, train and total seconds divided by the programs trained and ``batch``,
        their number. ``None`` when the batch failed as a whole (a program's code raised
        while the shared program was traced or run, or the networks declare different
        action sets): train them one at a time to score each for its own fault.

    Raises:
        serl_jax.data.DataError, serl_jax.config.ConfigError: bad data or config.
    """
    t_start = time.perf_counter()
    base = config_from_dict(config)
    where = candidate_market(base, market)
    splits, train_params, val_params = where.splits, where.train, where.val
    results: list[ProgramResult | None] = [None] * len(programs)
    with _count_cache_hits() as hits:
        try:
            imagination = load_imagination(base, splits, imagination_code)
            reward_fns, cfgs, members, networks = [], [], [], []
            by_key: dict[str, Any] = {}  # network code key -> the module its programs share
            for k, (reward_code, network_code) in enumerate(programs):
                reward_fn, network = load_program(reward_code, network_code)
                try:
                    cfg_k = dataclasses.replace(base, network=base.network.for_network(network))
                except ValueError as e:  # this program's anchor: its own fault
                    results[k] = _failed(f"training failed: ValueError: {e}", t_start)
                    continue
                reward_fns.append(reward_fn)
                cfgs.append(cfg_k)
                members.append(k)
                networks.append(by_key.setdefault(network_code_key(network_code), network))
            if not members:
                return results
            priors = [c.network.prior() for c in cfgs]
            names = [_term_names(fn, val_params) for fn in reward_fns]
            network_for, member_of = candidate_networks(networks)
            groups = len(members) if max(member_of) > 0 else 1  # switched: in turns

            val_env = make_env(val_params, score_reward(base))

            def policy_for(index):
                def prior(obs):
                    return jax.lax.switch(index, priors, obs)

                return make_ppo_policy(
                    network_for(index), base.ppo.normalize_obs, action_prior=prior
                )

            def terms_for(index):
                return switch_reward_terms(reward_fns, names, index)

            lane_index = np.repeat(np.arange(len(members)), base.run.num_seeds).tolist()
            tracker = _Tracker(
                lambda _: val_env, terms_for, policy_for, val_params, lane_index, groups
            )
            batch = train_candidates(
                base, reward_fns, train_params, val_params, networks=networks,
                action_priors=priors, on_chunk=tracker.on_chunk,
                validation_rollouts=tracker.final_rollouts, imagination=imagination,
                dynamic=where.dynamic,
                hybrid=None if where.dynamic is None else base.market.hybrid_config(),
            )  # fmt: skip
            reflection = _reflect_imagination(imagination, train_params)
        except Exception:  # noqa: BLE001 - whose fault it is needs one-at-a-time runs
            return None
    n = len(members)
    total = (time.perf_counter() - t_start) / n
    obs_size = make_env(train_params).observation_size(train_params)
    seeds = base.run.num_seeds
    for j, (k, trained) in enumerate(zip(members, batch, strict=True)):
        if isinstance(trained, Exception):
            results[k] = _failed(f"training failed: {type(trained).__name__}: {trained}", t_start)
            continue
        lanes = slice(j * seeds, (j + 1) * seeds)
        rollouts = jax.tree.map(lambda x, lanes=lanes: x[lanes], tracker.last["rollout"])
        sums = {m: np.asarray(tracker.last["sums"][:, :, i][lanes]) for i, m in enumerate(names[j])}
        history = [
            (u, {m: v[:, i][lanes] for i, m in enumerate(names[j])}) for u, v in tracker.history
        ]
        timing = {
            "compile": trained.compile_seconds + tracker.compile_seconds / n,
            "train": trained.train_seconds - tracker.compile_seconds / n,
            "batch": n,
            "cache_hits": hits[0] / n,
        }
        results[k] = _score(
            cfgs[j], splits, obs_size, val_params, trained, rollouts, sums, history,
            (*programs[k], imagination_code), reflection, artifact_dirs[k], timing, t_start,
            total,
        )  # fmt: skip
    return results


class _Tracker:
    """Reward reflection during training: after each chunk, every lane's current policy
    rolls out the validation days once with its reward's named terms recorded.

    ``env_for(index)``, ``terms_for(index)`` and ``policy_for(index)`` give lane
    ``index``'s environment, term recorder and policy (``lane_index`` per lane), built
    inside the trace so that a traced index can select a reward and a prior. ``history``
    holds ``(updates, {term: [lanes]})`` episode means (or ``[lanes, M]`` vectors for a
    switched recorder) and ``last`` the latest rollouts and per-episode sums. The
    tracking program is compiled ahead of its first call; ``compile_seconds`` is that
    time (spent inside training's chunk loop, so the caller moves it from training to
    compilation). ``groups`` > 1: the lanes roll out in that many blocks in turn
    (:func:`serl_jax.rl.network_switch.map_candidates`; candidates behind a network
    switch).
    """

    def __init__(self, env_for, terms_for, policy_for, val_params, lane_index, groups=1):
        index = jnp.asarray(lane_index, jnp.int32)

        @jax.jit
        def track(all_params):
            def one(i, p):
                out = rollout(
                    env_for(i), policy_for(i), p, val_params, jax.random.PRNGKey(0),
                    record=terms_for(i),
                )  # fmt: skip
                return out, jax.tree.map(lambda x: x.sum(axis=1), out.recorded)

            return map_candidates(one, groups, index, all_params)

        self._track = track
        self._compiled = None
        self.compile_seconds = 0.0
        self.history: list[tuple[int, Any]] = []
        self.last: dict[str, Any] = {}

    def on_chunk(self, updates: int, all_params) -> None:
        if self._compiled is None:
            t0 = time.perf_counter()
            self._compiled = self._track.lower(all_params).compile()
            self.compile_seconds = time.perf_counter() - t0
        out, sums = jax.device_get(self._compiled(all_params))
        self.history.append((updates, jax.tree.map(lambda v: v.mean(axis=1), sums)))
        self.last.update(rollout=out, sums=sums)

    def final_rollouts(self, _params):
        return self.last["rollout"]


def _term_names(reward_fn, val_params) -> list[str]:
    """The names of a reward's terms (:func:`reward_term_values`; sorted, as JAX
    returns a dict), from its abstract output on one validation transition."""
    env = make_env(val_params)
    state = jax.eval_shape(lambda: env.init_state(val_params, 0, 0, val_params.data.num_slots))
    action = jax.ShapeDtypeStruct((), jnp.float32)
    out = jax.eval_shape(
        lambda s, a: reward_term_values(reward_fn(s, a, s, val_params)), state, action
    )
    return list(out)


def _score(
    cfg: Config, splits, obs_size: int, val_params, trained, rollouts, sums, history,
    codes: tuple[str, str, str], reflection: dict[str, Any] | None,
    artifact_dir: str | None, timing: dict[str, float], t_start: float,
    total: float | None = None,
) -> ProgramResult:  # fmt: skip
    """A trained program's :class:`ProgramResult` from its seeds' validation rollouts
    (``[S]`` leading axis), per-episode term sums ``{term: [S, N]}``, tracking history and
    imagination reflection (:func:`_reflect_imagination`); writes its checkpoint to
    ``artifact_dir`` if given."""
    seed = trained.selected_seed
    final = jax.tree.map(lambda x: x[seed], rollouts)
    objective = None
    if cfg.loop.score == "mean_variance":  # the rollouts carry the objective's reward
        objective = mean_variance_per_order(final, val_params.reward_scale)
    metrics = validation_metrics(
        cfg, trained, final.outcomes(float(val_params.side)), splits.val.dates, objective
    )
    if isinstance(metrics, str):
        return _failed(metrics, t_start)
    metrics["devices"] = trained.devices
    if reflection is not None:
        lanes = np.asarray(trained.curves["imagined_lane_share"])[seed]
        metrics["imagination"] = {**reflection, "lane_share": float(lanes.mean())}
    recorded = final.recorded
    if not isinstance(recorded, dict):  # a switched recorder's [N, T, M] term vectors
        recorded = {name: recorded[:, :, i] for i, name in enumerate(sums)}
    stats = _term_stats(recorded, {k: v[seed] for k, v in sums.items()})
    stats["history"] = [
        {"updates": u, "episode_mean": {k: _finite(v[seed]) for k, v in means.items()}}
        for u, means in history
    ]
    curves = {k: [_finite(x) for x in v[seed]] for k, v in trained.curves.items()}
    reward_code, network_code, imagination_code = codes
    if artifact_dir is not None:
        save_policy(
            Path(artifact_dir) / "checkpoint",
            trained.policy_params,
            {
                "config": cfg.to_dict(),
                "obs_size": obs_size,
                "market": splits.name,
                "selected_seed": seed,
                "validation_pa": [float(v) for v in trained.validation_pa],
                "validation_shortfall": [float(v) for v in trained.validation_shortfall],
                "feature_names": list(splits.train.feature_names),
                "reward_code": reward_code,
                "network_code": network_code,
                "imagination_code": imagination_code,
            },
        )
    timing = {**timing, "total": time.perf_counter() - t_start if total is None else total}
    return ProgramResult(True, "", metrics, stats, timing, curves)


def validation_metrics(
    cfg: Config, trained, outcomes, days, mean_variance: np.ndarray | None = None
) -> dict[str, Any] | str:
    """The validation-day metrics of a trained program (single- or multi-agent) on its
    kept seed's orders, or the one-line reason it fails (non-finite parameters or PA).

    Args:
        cfg: the program's config (``eval``, ``network.prior_anchor_steps``).
        trained: a :class:`~serl_jax.experiment.TrainedPolicy` or
            :class:`~serl_jax.agents_experiment.TrainedAgents` (``policy_params``,
            ``selected_seed``, ``validation_pa``, ``validation_shortfall``).
        outcomes: the validation orders (:class:`~serl_jax.metrics.OrderOutcomes`).
        days: ``[n]`` each validation order's day (the intervals cluster by day,
            :mod:`serl_jax.metrics.inference`).
        mean_variance: ``[n]`` each order's negated mean-variance objective (bps,
            :func:`serl_jax.experiment.mean_variance_per_order`), with
            ``loop.score = mean_variance``.

    Returns:
        The common keys of :class:`ProgramResult`'s ``metrics`` (``pa``, ``pa_ci``, ...,
        ``pa_per_order``, ``shortfall_per_order``, bps; ``days_per_order``, ISO dates;
        with ``mean_variance`` also ``mean_variance`` and ``mean_variance_per_order``),
        or the failure reason.
    """
    # on the host: a jitted isfinite per leaf shape would compile each network's anew
    leaves = jax.tree.leaves(jax.device_get(trained.policy_params))
    if not all(np.isfinite(np.asarray(x)).all() for x in leaves):
        return "training diverged: non-finite network parameters"
    pa = price_advantage(outcomes)
    if not np.isfinite(pa).all():
        return "non-finite PA on validation days"
    m = compute_metrics(
        outcomes,
        confidence=cfg.eval.confidence,
        n_bootstrap=cfg.eval.n_bootstrap,
        seed=0,
        days=days,
    )
    costs = shortfall(outcomes)
    objective = {}
    if mean_variance is not None:
        if not np.isfinite(mean_variance).all():
            return "non-finite mean-variance objective on validation days"
        objective = {
            "mean_variance": float(mean_variance.mean()),
            "mean_variance_per_order": [float(v) for v in mean_variance],
        }
    return {
        **objective,
        "pa": _finite(m.PA.value),
        "pa_ci": [_finite(m.PA.low), _finite(m.PA.high)],
        "pa_std": _finite(m.PA_std.value),
        "wr": _finite(m.WR.value),
        "glr": _finite(m.GLR.value),
        "afi": _finite(m.AFI.value),
        "n_orders": int(m.n_orders),
        "validation_pa_per_seed": [_finite(v) for v in trained.validation_pa],
        "validation_shortfall_per_seed": [_finite(v) for v in trained.validation_shortfall],
        "selected_seed": trained.selected_seed,
        "shortfall": _finite(costs.mean()),
        "prior_anchor_steps": cfg.network.prior_anchor_steps,
        "pa_per_order": [float(v) for v in pa],
        "shortfall_per_order": [_finite(v) for v in costs],
        "days_per_order": [str(d) for d in days],
    }


@contextmanager
def _count_cache_hits() -> Iterator[list[int]]:
    """Counts JAX persistent-compilation-cache hits while active (``[count]``)."""
    hits = [0]

    def listener(event: str, **_: Any) -> None:
        if event == "/jax/compilation_cache/cache_hits":
            hits[0] += 1

    jax.monitoring.register_event_listener(listener)
    try:
        yield hits
    finally:
        jax.monitoring.unregister_event_listener(listener)


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
