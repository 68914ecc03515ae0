"""Training with seed selection and policy evaluation: the steps both CLIs share.

``train_policy`` trains ``run.num_seeds`` PPO policies in parallel (one ``vmap`` over
seeds, updates in jitted chunks so progress can be shown), then keeps the best seed on
the validation days by ``loop.score``. ``train_candidates`` does the same for K
candidates (rewards and priors) in one compiled program. ``evaluate_policies`` runs any
set of policies through the same vectorized rollout and scores them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from serl_jax.baselines import (
    FIXED_SIZE_POLICIES,
    PARTICIPATION_POLICIES,
    adaptive_vwap_policy,
    almgren_chriss_policy,
    immediate_policy,
    oracle_policy,
    pov_policy,
    twap_policy,
    twap_pov_policy,
    vwap_policy,
)
from serl_jax.baselines.optimal import schedule_policy
from serl_jax.components.reward import switch_reward
from serl_jax.config import Config
from serl_jax.data import MarketSplits, TrainStats, load_market, sample_path
from serl_jax.envs.dynamic import DynamicEnvParams, DynamicExecutionEnv
from serl_jax.envs.execution import (
    EnvParams,
    ExecutionEnv,
    default_reward,
    mean_variance_reward,
)
from serl_jax.envs.imagined_market import FeatureStats
from serl_jax.envs.propagator import PropagatorEnvParams, PropagatorExecutionEnv
from serl_jax.evaluation import Rollout, SwitchedPolicy, rollout
from serl_jax.lob.engine import resolve_engine
from serl_jax.market.params import MarketParams, load_market_params
from serl_jax.market.propagator import PropagatorParams
from serl_jax.metrics import ExecutionMetrics, compute_metrics, price_advantage, shortfall
from serl_jax.rl.compilation import compile_lightly
from serl_jax.rl.distillation import make_teacher
from serl_jax.rl.hybrid import HybridConfig, make_hybrid_trainer
from serl_jax.rl.mixed_sampling import Imagination, mix_imagined
from serl_jax.rl.network_switch import candidate_networks, map_candidates
from serl_jax.rl.policy import PPOPolicyParams, make_ppo_policy
from serl_jax.rl.ppo import TeacherPolicy, make_trainer
from serl_jax.rl.sharding import (
    DevicePlan,
    constrain_runner,
    plan_devices,
    shard_runner,
    to_host,
)

SAMPLE_PREFIX = "sample:"
TWAP = "TWAP"
"""The baselines' table name of TWAP, the reference of every paired comparison."""
TWAP_POV = "TWAP-POV"
"""The table name of TWAP with participation child orders
(:func:`serl_jax.baselines.twap_pov_policy`): what the order type alone gains."""
ORACLE = "oracle (not achievable)"
"""The table name of the hindsight oracle (:func:`serl_jax.baselines.oracle_policy`)."""
CALIBRATED_MARKETS = Path(__file__).resolve().parents[1] / "configs" / "market"
"""The shipped calibrated market parameters, ``configs/market/<sample>.yaml`` (a source
checkout's layout; other installs pass ``market.params=FILE``)."""


def resolve_market_path(spec: str) -> Path:
    """``sample:<name>`` to the shipped sample's folder; anything else is a path."""
    if spec.startswith(SAMPLE_PREFIX):
        return sample_path(spec[len(SAMPLE_PREFIX) :])
    return Path(spec)


def load_splits(cfg: Config, spec: str) -> MarketSplits:
    """Loads one market with the config's data settings (raises ``DataError``)."""
    d = cfg.data
    return load_market(
        resolve_market_path(spec),
        train=d.train,
        val=d.val,
        min_bars_per_day=d.min_bars_per_day,
        short_days=d.short_days,
        vol_window=d.vol_window,
        heldout_symbols=d.heldout_symbols,
        heldout_fraction=d.heldout_fraction,
        heldout_seed=d.heldout_seed,
    )


def market_params_path(cfg: Config, spec: str) -> Path:
    """The calibrated market-parameter file for a market spec (``market.params``).

    Raises:
        ValueError: ``auto`` for a market without shipped parameters, or a missing file;
            the message says how to calibrate one.
    """
    if cfg.market.params != "auto":
        path = Path(cfg.market.params)
    elif spec.startswith(SAMPLE_PREFIX):
        path = CALIBRATED_MARKETS / f"{spec[len(SAMPLE_PREFIX) :]}.yaml"
    else:
        raise ValueError(
            f"market.params=auto: no calibrated market for {spec}; run "
            f"python -m serl_jax.calibrate --data {spec} --out FILE "
            "and pass market.params=FILE"
        )
    if not path.is_file():
        raise ValueError(f"market.params: {path} not found (python -m serl_jax.calibrate)")
    return path


DynamicMarket = MarketParams | PropagatorParams
"""A dynamic market's parameters: the order book's background populations or the
propagator (``market.simulator``)."""


def calibrated_market(cfg: Config, spec: str) -> DynamicMarket:
    """The dynamic market of ``cfg.market.simulator`` for a dataset: the ``lob`` market's
    calibrated background parameters, or the ``propagator``'s (``cfg.impact``; it is
    scaled by each symbol's training volatility and volumes, so one setting serves every
    dataset).

    Raises:
        ValueError: as :func:`market_params_path` and
            :func:`serl_jax.market.params.load_market_params` (``lob``), or
            :meth:`~serl_jax.market.propagator.PropagatorConfig.params` (``propagator``).
    """
    if cfg.market.simulator == "propagator":
        return cfg.impact.params()
    return load_market_params(market_params_path(cfg, spec))


def dynamic_env_params(
    cfg: Config, market: DynamicMarket, static_params: EnvParams, stats: TrainStats
) -> DynamicEnvParams | PropagatorEnvParams:
    """The dynamic-market twin of ``static_params``: the propagator market for
    :class:`~serl_jax.market.propagator.PropagatorParams`, else the order book with
    ``cfg.market.child_order`` (and ``child_slices``) on the engine ``cfg.lob.engine``
    names (``auto``: by the default device's platform)."""
    if isinstance(market, PropagatorParams):
        return PropagatorEnvParams.from_static(static_params, stats, market)
    return DynamicEnvParams.from_static(
        static_params,
        stats,
        market,
        cfg.market.child_order,
        resolve_engine(cfg.lob.engine),
        cfg.market.child_slices,
    )


def make_imagination(cfg: Config, imagine_fn: Callable | None, stats: TrainStats):
    """The mixed-sampling settings of ``cfg.imagine`` for a validated imagination
    program, or ``None`` (no program, or ``imagine.ratio = 0``: training as without one).

    Args:
        cfg: run configuration (its ``imagine`` section).
        imagine_fn: the validated ``imagine`` program, or ``None``.
        stats: the training statistics the market's days were built with.
    """
    if imagine_fn is None or cfg.imagine.ratio == 0.0:
        return None
    return Imagination(
        imagine_fn=imagine_fn,
        ratio=cfg.imagine.ratio,
        stats=FeatureStats.from_train_stats(stats),
        bounds=cfg.imagine.bounds(),
        tick_size=cfg.imagine.tick_size,
    )


def score_reward(cfg: Config) -> Callable:
    """The reward of the objective ``cfg.loop.score`` ranks by: Almgren & Chriss's
    mean-variance objective (:func:`~serl_jax.envs.execution.mean_variance_reward`, risk
    aversion ``env.urgency``) for ``mean_variance``, else the default reward (fill PA with
    its penalties, :func:`~serl_jax.envs.execution.default_reward`). Plain PPO trains on it,
    and validation rollouts carry it, so that their reward sums are the objective."""
    return mean_variance_reward if cfg.loop.score == "mean_variance" else default_reward


def mean_variance_per_order(rollout: Rollout, reward_scale: float) -> np.ndarray:
    """``[N]`` each order's mean-variance objective, negated (bps; higher is better, as
    shortfall): the rollout's rewards summed over the window over ``reward_scale``. The
    rollout's environment must carry :func:`~serl_jax.envs.execution.mean_variance_reward`
    (:func:`score_reward` with ``loop.score = mean_variance``)."""
    return np.asarray(rollout.reward, np.float64).sum(axis=-1) / float(reward_scale)


def make_env(params: EnvParams, reward_fn: Callable = default_reward) -> ExecutionEnv:
    """The environment that runs ``params`` (order book for :class:`DynamicEnvParams`,
    propagator for :class:`PropagatorEnvParams`, else static) with the reward slot
    ``reward_fn``."""
    if isinstance(params, DynamicEnvParams):
        return DynamicExecutionEnv(reward_fn)
    if isinstance(params, PropagatorEnvParams):
        return PropagatorExecutionEnv(reward_fn)
    return ExecutionEnv(reward_fn)


@dataclass
class TrainedPolicy:
    """The outcome of :func:`train_policy`.

    Attributes:
        network: the flax module (network slot) that was trained.
        policy_params: parameters of the selected seed (no seed axis; NumPy arrays).
        selected_seed: index of the selected seed: the best on validation days by
            ``cfg.loop.score`` (mean shortfall, or mean PA).
        validation_pa: ``[num_seeds]`` mean PA (bps) of each seed on validation days.
        validation_shortfall: ``[num_seeds]`` mean shortfall (bps, spread and impact
            paid; higher is better) of each seed on validation days.
        curves: per-update training metrics, each ``[num_seeds, num_updates]`` float32.
        devices: devices the seeds trained on (:mod:`serl_jax.rl.sharding`).
        device_split: what was split over them: ``none``, ``seeds`` or ``episodes``.
        compile_seconds: time to compile init and one update chunk.
        train_seconds: time spent running updates (compilation excluded).
        env_steps: environment steps taken over all seeds.
    """

    network: Any
    policy_params: PPOPolicyParams
    selected_seed: int
    validation_pa: np.ndarray
    validation_shortfall: np.ndarray
    curves: dict[str, np.ndarray]
    devices: int
    device_split: str
    compile_seconds: float
    train_seconds: float
    env_steps: int


def train_policy(
    cfg: Config,
    env: ExecutionEnv,
    train_params: EnvParams,
    val_params: EnvParams,
    *,
    network: Any = None,
    progress: bool = True,
    description: str = "PPO",
    on_chunk: Callable[[int, PPOPolicyParams], None] | None = None,
    validation_rollouts: Callable[[PPOPolicyParams], Rollout] | None = None,
    dynamic: tuple[Any, Any] | None = None,
    hybrid: HybridConfig | None = None,
    imagination: Imagination | None = None,
    teacher: TeacherPolicy | None = None,
) -> TrainedPolicy:
    """Trains ``cfg.run.num_seeds`` policies on training days and keeps the best on
    validation days by ``cfg.loop.score`` (``shortfall`` by default: a seed's PA on a few
    dozen validation orders is mostly the days' price paths, which no seed controls; see
    :mod:`serl_jax.metrics`).

    Args:
        cfg: run configuration (``ppo``, ``network``, ``run`` sections are used).
        env: the execution environment (its reward slot is used).
        train_params: env parameters over the training episodes (random windows and
            quantities as configured).
        val_params: env parameters over the validation episodes.
        network: the network slot (a flax module, e.g. validated LLM code); default
            :func:`serl_jax.rl.networks.make_network` from ``cfg.network``.
        progress: show a tqdm progress bar over updates.
        description: label of the progress bar.
        on_chunk: called after every jitted chunk of updates with the number of updates
            done and the current parameters of all seeds (leading ``[num_seeds]`` axis),
            e.g. to record statistics over training.
        validation_rollouts: maps the final parameters of all seeds to their
            deterministic validation rollouts (leading ``[num_seeds]`` axis) for the seed
            selection; default: a vmapped :func:`serl_jax.evaluation.rollout` on
            ``val_params`` (a caller that already rolled them out, e.g. in ``on_chunk``,
            passes its result instead of paying for a second rollout).
        dynamic: ``(dynamic_env, dynamic_params)``, a second (dynamic) market to train on
            together with ``env``/``train_params`` by hybrid PPO
            (:func:`serl_jax.rl.hybrid.make_hybrid_trainer`); give it with ``hybrid``.
            The curves then also hold ``alpha``, ``beta``, ``loss_static``,
            ``loss_dynamic``, ``order_pa_static`` and ``order_pa_dynamic``; seed selection
            stays on ``val_params`` with ``env``.
        hybrid: the hybrid-PPO settings (with ``dynamic``).
        imagination: mixed sampling (:func:`serl_jax.rl.mixed_sampling.mix_imagined`):
            a share of the training episodes (of both markets) is drawn from days the
            imagination program makes from the training days; validation stays real.
            The curves then also hold ``imagined_out_of_bounds``. Seeds are not split
            by episodes over devices then (only by seeds).
        teacher: a policy-distillation teacher (:func:`train_teacher`),
            weighted by ``cfg.ppo.distill_coef`` (give it iff that is > 0); static
            market on real days only. The curves then also hold ``distill_loss``.

    Returns:
        A :class:`TrainedPolicy` (``env_steps`` counts the steps of both markets).

    Raises:
        ValueError: if only one of ``dynamic`` and ``hybrid`` is given, a teacher comes
            with ``dynamic`` or ``imagination`` or without ``cfg.ppo.distill_coef > 0``,
            or ``cfg.run.devices`` cannot split the seeds or episodes
            (:func:`serl_jax.rl.sharding.plan_devices`).
    """
    if network is None:
        network = cfg.network.build()
    action_prior = cfg.network.prior()
    if (dynamic is None) != (hybrid is None):
        raise ValueError("train_policy: give dynamic and hybrid together (or neither)")
    if teacher is not None and (hybrid is not None or imagination is not None):
        raise ValueError(
            "train_policy: policy distillation trains in the static market on real "
            "days only (no dynamic market, no imagination)"
        )

    def trainer_for(data):
        static_params = train_params.replace(data=data)
        if hybrid is None:
            return make_trainer(cfg.ppo, env, static_params, network, action_prior, teacher)
        dynamic_env, dynamic_params = dynamic
        return make_hybrid_trainer(
            cfg.ppo, hybrid, env, static_params, dynamic_env,
            dynamic_params.replace(data=data), network, action_prior,
        )  # fmt: skip

    if imagination is None:
        trainer = trainer_for(train_params.data)
    else:
        trainer = mix_imagined(trainer_for, train_params.data, imagination, cfg.ppo.num_updates)
    lanes = cfg.ppo.num_envs + (0 if hybrid is None else hybrid.dynamic_envs)
    keys = jax.random.split(jax.random.PRNGKey(cfg.run.seed), cfg.run.num_seeds)
    # Seeds (or the static trainer's episodes) spread over the visible devices.
    by_episodes = hybrid is None and imagination is None
    plan = plan_devices(
        cfg.run.num_seeds, cfg.ppo.num_envs if by_episodes else None, cfg.run.devices
    )
    run = _train_lanes(
        cfg, lambda _: trainer, np.zeros(cfg.run.num_seeds, np.int32), keys, plan,
        progress=progress, description=description, on_chunk=on_chunk,
    )  # fmt: skip
    if validation_rollouts is None:
        validation_rollouts = _default_validation_rollouts(
            cfg, env, lambda _: network, val_params, lambda _: action_prior,
            np.zeros(cfg.run.num_seeds),
        )  # fmt: skip
    best, validation_pa, validation_shortfall = _select_seed(
        cfg, validation_rollouts(run.params), val_params
    )
    # Indexed on the host: indexing device arrays compiles a program per leaf shape.
    kept = jax.tree.map(lambda x: x[best], jax.device_get(run.params))
    return TrainedPolicy(
        network=network,
        policy_params=kept,
        selected_seed=best,
        validation_pa=validation_pa,
        validation_shortfall=validation_shortfall,
        curves=run.curves,
        devices=plan.n_devices,
        device_split=plan.split,
        compile_seconds=run.compile_seconds,
        train_seconds=run.train_seconds,
        env_steps=cfg.ppo.num_updates * lanes * cfg.ppo.num_steps * cfg.run.num_seeds,
    )


def train_teacher(
    cfg: Config,
    env: ExecutionEnv,
    train_params: EnvParams,
    val_params: EnvParams,
    *,
    oracle: bool = True,
    progress: bool = True,
) -> tuple[TeacherPolicy, TrainedPolicy]:
    """Trains a teacher for policy distillation: :func:`train_policy` with the run's
    settings (no distillation of its own), by default on observations that hold the
    diagnostic volume leak, the current minute's true volume: oracle policy
    distillation's teacher (Fang et al. 2021's sees the whole day; the leak is the part
    of it the hindsight oracle's edge is made of).

    Args:
        cfg: the student's run configuration.
        env: the student's (static) execution environment.
        train_params, val_params: the student's env parameters; the teacher's are the
            same with ``diagnostic_volume_leak=oracle``.
        oracle: train on the leaked observation; False trains the teacher on the
            student's own honest observations (a control: what distillation does without
            the oracle's information).
        progress: show a progress bar.

    Returns:
        ``(teacher, trained)``: the teacher's distribution at a batch of the student's
        environment states (:func:`serl_jax.rl.distillation.make_teacher`, for
        :func:`train_policy`'s ``teacher``) and the trained teacher itself.
    """
    teacher_train = train_params.replace(diagnostic_volume_leak=oracle)
    teacher_val = val_params.replace(diagnostic_volume_leak=oracle)
    teacher_cfg = replace(cfg, ppo=replace(cfg.ppo, distill_coef=0.0))
    description = "OPD teacher" if oracle else "teacher"
    trained = train_policy(
        teacher_cfg, env, teacher_train, teacher_val, progress=progress, description=description
    )
    teacher = make_teacher(
        env,
        teacher_train,
        trained.network,
        trained.policy_params.params,
        trained.policy_params.obs_stats,
        cfg.ppo.normalize_obs,
        cfg.network.prior(),
    )
    return teacher, trained


def train_candidates(
    cfg: Config,
    reward_fns: Sequence[Callable],
    train_params: EnvParams,
    val_params: EnvParams,
    *,
    network: Any = None,
    networks: Sequence[Any] | None = None,
    action_priors: Sequence[Callable] | None = None,
    progress: bool = False,
    on_chunk: Callable[[int, PPOPolicyParams], None] | None = None,
    validation_rollouts: Callable[[PPOPolicyParams], Rollout] | None = None,
    imagination: Imagination | None = None,
    dynamic: EnvParams | None = None,
    hybrid: HybridConfig | None = None,
) -> list[TrainedPolicy | ValueError]:
    """Trains K candidates in one compiled program, each as :func:`train_policy` would (in
    the market of ``train_params``: static, order book or propagator, :func:`make_env`;
    with ``dynamic`` and ``hybrid`` in two markets at once); candidate ``k`` has its own
    reward, action prior and (with ``networks``) network.

    The slots are data: ``K * num_seeds`` lanes are vmapped, lane ``k * S + s`` runs
    candidate ``k``'s reward and prior (``lax.switch`` on the lane's index,
    :func:`serl_jax.components.reward.switch_reward`) with seed ``s``'s key, so K
    candidates cost one compilation instead of K, and each candidate's lanes get the
    keys it would get alone (the results equal K :func:`train_policy` runs up to
    floating-point differences of the larger program). Under ``vmap`` a switch evaluates
    every branch, which costs little for a reward or a prior (a few arithmetic operations
    per step) but would cost every lane M networks' compute for M distinct networks
    (:class:`serl_jax.rl.network_switch.NetworkSwitch`): candidates with different
    networks take turns instead (:func:`serl_jax.rl.network_switch.map_candidates`, on
    one device; with several, lanes stay vmapped over the mesh and compute all M).

    Args:
        cfg: run configuration, as for :func:`train_policy`.
        reward_fns: K reward slots (validated code).
        train_params, val_params: env parameters of the training and validation days.
        network: the network slot shared by all candidates (default as in
            :func:`train_policy`).
        networks: K network slots instead, one per candidate (candidates given the same
            module object share it; :func:`serl_jax.rl.network_switch.candidate_networks`).
        action_priors: K action priors (raw observation ``[..., D]`` -> logit), e.g. of
            network programs that differ only in their declared anchor; default
            ``cfg.network.prior()`` for every candidate.
        progress: show a tqdm progress bar over updates.
        on_chunk: as for :func:`train_policy`, with a leading ``[K * num_seeds]`` axis
            (candidate-major).
        validation_rollouts: maps the final parameters ``[K * num_seeds, ...]`` to their
            deterministic validation rollouts; default: a vmapped rollout with each
            lane's prior and :func:`score_reward`'s reward (a rollout's outcomes do not
            depend on the reward; its reward sums are then the objective).
        imagination: mixed sampling of imagined training days, one program for every
            candidate (as for :func:`train_policy`).
        dynamic: the dynamic market's training parameters, trained on together with
            ``train_params`` by hybrid PPO (:func:`serl_jax.rl.hybrid.make_hybrid_trainer`;
            give it with ``hybrid``).
        hybrid: the hybrid-PPO settings (with ``dynamic``).

    Returns:
        K entries in ``reward_fns``' order: a :class:`TrainedPolicy` with its own selected
        seed, network and that network's parameters (``compile_seconds`` and
        ``train_seconds`` are the batch's, divided equally among the K), or the
        ``ValueError`` its seed selection raised (non-finite
        validation outcomes: that candidate's lanes diverged; lanes are independent, so
        the other candidates are unaffected).

    Raises:
        ValueError: ``cfg.run.devices`` cannot split the ``K * num_seeds`` lanes,
            ``action_priors`` or ``networks`` is not K long, both ``network`` and
            ``networks`` are given, the networks declare different action sets, or only
            one of ``dynamic`` and ``hybrid`` is given.
        Exception: whatever a candidate's code raises when traced (the whole batch fails;
            train the candidates one at a time to tell whose fault it is).
    """
    n_candidates, n_seeds = len(reward_fns), cfg.run.num_seeds
    if networks is None:
        networks = [cfg.network.build() if network is None else network] * n_candidates
    elif network is not None:
        raise ValueError("train_candidates: give network or networks, not both")
    if action_priors is None:
        action_priors = [cfg.network.prior()] * n_candidates
    for name, given in (("action priors", action_priors), ("networks", networks)):
        if len(given) != n_candidates:
            raise ValueError(f"train_candidates: {len(given)} {name} for {n_candidates} rewards")
    network_for, member_of = candidate_networks(networks)

    def prior_for(index):
        return lambda obs: jax.lax.switch(index, list(action_priors), obs)

    if (dynamic is None) != (hybrid is None):
        raise ValueError("train_candidates: give dynamic and hybrid together (or neither)")

    def trainer_for(index):
        reward_fn = switch_reward(reward_fns, index)
        env = make_env(train_params, reward_fn)

        def on(data):
            params = train_params.replace(data=data)
            network = network_for(index)
            if hybrid is None:
                return make_trainer(cfg.ppo, env, params, network, prior_for(index))
            return make_hybrid_trainer(
                cfg.ppo, hybrid, env, params, make_env(dynamic, reward_fn),
                dynamic.replace(data=data), network, prior_for(index),
            )  # fmt: skip

        if imagination is None:
            return on(train_params.data)
        return mix_imagined(on, train_params.data, imagination, cfg.ppo.num_updates)

    lanes_per_seed = cfg.ppo.num_envs + (0 if hybrid is None else hybrid.dynamic_envs)
    seed_keys = jax.random.split(jax.random.PRNGKey(cfg.run.seed), n_seeds)
    keys = jnp.tile(seed_keys, (n_candidates, 1))
    lane_index = np.repeat(np.arange(n_candidates, dtype=np.int32), n_seeds)
    plan = plan_devices(n_candidates * n_seeds, None, cfg.run.devices)
    # Behind a network switch, candidates take turns (each lane then computes only its
    # own network); one device only, as the turns do not follow a mesh's lane split.
    groups = n_candidates if max(member_of) > 0 and plan.n_devices == 1 else 1
    run = _train_lanes(
        cfg, trainer_for, lane_index, keys, plan,
        progress=progress, description=f"PPO x {n_candidates} candidates", on_chunk=on_chunk,
        groups=groups,
    )  # fmt: skip
    if validation_rollouts is None:
        validation_rollouts = _default_validation_rollouts(
            cfg, make_env(val_params, score_reward(cfg)), network_for, val_params, prior_for,
            lane_index, groups,
        )  # fmt: skip
    rollouts = validation_rollouts(run.params)
    # Selected on the host: indexing device arrays compiles a program per leaf shape.
    all_params = jax.device_get(run.params)
    out = []
    for k in range(n_candidates):
        lanes = slice(k * n_seeds, (k + 1) * n_seeds)
        params = jax.tree.map(lambda x, lanes=lanes: x[lanes], all_params)
        mine = jax.tree.map(lambda x, lanes=lanes: x[lanes], rollouts)
        try:
            best, validation_pa, validation_shortfall = _select_seed(cfg, mine, val_params)
        except ValueError as e:  # this candidate's lanes diverged; the others stand
            out.append(e)
            continue
        kept = jax.tree.map(lambda x, best=best: x[best], params)
        if max(member_of) > 0:  # trained behind a switch: keep its own member's
            kept = kept.replace(params=kept.params[member_of[k]])
        out.append(
            TrainedPolicy(
                network=networks[k],
                policy_params=kept,
                selected_seed=best,
                validation_pa=validation_pa,
                validation_shortfall=validation_shortfall,
                curves={name: v[lanes] for name, v in run.curves.items()},
                devices=plan.n_devices,
                device_split=plan.split,
                compile_seconds=run.compile_seconds / n_candidates,
                train_seconds=run.train_seconds / n_candidates,
                env_steps=cfg.ppo.num_updates * lanes_per_seed * cfg.ppo.num_steps * n_seeds,
            )
        )
    return out


@dataclass(frozen=True)
class _LaneRun:
    params: PPOPolicyParams  # leading [lanes] axis
    curves: dict[str, np.ndarray]  # [lanes, num_updates]
    compile_seconds: float
    train_seconds: float


def _train_lanes(
    cfg: Config,
    trainer_for: Callable[[jax.Array], Any],
    lane_index: np.ndarray,
    keys: jax.Array,
    plan: DevicePlan,
    *,
    progress: bool,
    description: str,
    on_chunk: Callable[[int, PPOPolicyParams], None] | None,
    groups: int = 1,
) -> _LaneRun:
    """Runs ``cfg.ppo.num_updates`` updates on vmapped lanes in jitted chunks; lane ``i``
    uses ``trainer_for(lane_index[i])`` (built inside the trace, so the index may select
    traced data such as a reward) and ``keys[i]``. ``groups`` > 1: the lanes' updates run
    in that many blocks in turn (:func:`serl_jax.rl.network_switch.map_candidates`)."""
    n_updates = cfg.ppo.num_updates
    chunk = max(1, min(cfg.run.progress_chunk, n_updates))
    lane_index = jnp.asarray(lane_index)

    def run_chunk(length):
        def lane_chunk(index, runner):
            trainer = trainer_for(index)
            return jax.lax.scan(lambda r, _: trainer.update(r), runner, None, length)

        def chunk_fn(runners):
            runners, metrics = map_candidates(lane_chunk, groups, lane_index, runners)
            return constrain_runner(runners, plan), metrics

        return jax.jit(chunk_fn)

    def init_lanes(index, key):
        return trainer_for(index).init(key)

    t0 = time.perf_counter()
    # Run once: compiled with less backend optimization (serl_jax.rl.compilation).
    init = compile_lightly(jax.jit(jax.vmap(init_lanes)).lower(lane_index, keys))
    runner = shard_runner(init(lane_index, keys), plan)
    step_chunk = run_chunk(chunk).lower(runner).compile()
    remainder = n_updates % chunk
    step_rest = run_chunk(remainder).lower(runner).compile() if remainder else None
    compile_seconds = time.perf_counter() - t0

    history: list[dict[str, np.ndarray]] = []
    t0 = time.perf_counter()
    with tqdm(total=n_updates, desc=description, unit="upd", disable=not progress) as bar:
        done = 0
        while done < n_updates:
            fn, length = (
                (step_chunk, chunk) if n_updates - done >= chunk else (step_rest, remainder)
            )
            runner, metrics = fn(runner)
            metrics = to_host(metrics)
            history.append(metrics)
            done += length
            bar.update(length)
            if on_chunk is not None:
                on_chunk(done, _whole(_policy_params(runner)))
            last_pa = metrics["order_pa"][:, -1]
            if np.isfinite(last_pa).any():  # NaN when no episode finished in the rollout
                bar.set_postfix(order_pa=f"{np.nanmean(last_pa):.2f}bps")
    jax.block_until_ready(runner)
    train_seconds = time.perf_counter() - t0
    curves = {k: np.concatenate([h[k] for h in history], axis=1) for k in history[0]}
    return _LaneRun(_whole(_policy_params(runner)), curves, compile_seconds, train_seconds)


def _whole(params: Any) -> Any:
    """Parameters sharded over several processes, gathered whole on every process (which
    then selects, evaluates and writes alone); device arrays unchanged otherwise."""
    return to_host(params) if jax.process_count() > 1 else params


def _default_validation_rollouts(
    cfg: Config, env, network_for: Callable, val_params: EnvParams, prior_for: Callable,
    lane_index, groups: int = 1,
) -> Callable:  # fmt: skip
    """Maps lane parameters ``[L, ...]`` to their deterministic validation rollouts; lane
    ``i`` acts with the network ``network_for(lane_index[i])`` and the prior
    ``prior_for(lane_index[i])`` (in ``groups`` blocks in turn when > 1,
    :func:`serl_jax.rl.network_switch.map_candidates`)."""

    def validation_rollouts(params):
        def one(index, p):
            policy = make_ppo_policy(
                network_for(index), cfg.ppo.normalize_obs, action_prior=prior_for(index)
            )
            return rollout(env, policy, p, val_params, jax.random.PRNGKey(0))

        return map_candidates(one, groups, jnp.asarray(lane_index, jnp.int32), params)

    return validation_rollouts


def _select_seed(cfg: Config, seed_rollouts: Rollout, val_params: EnvParams):
    """``(best seed, validation PA [S], validation shortfall [S])`` by ``cfg.loop.score``
    (``mean_variance``: the rollouts' reward sums, :func:`mean_variance_per_order`)."""
    n_seeds = jax.tree.leaves(seed_rollouts)[0].shape[0]
    side = float(val_params.side)
    seed_outcomes = [_seed_rollout(seed_rollouts, i).outcomes(side) for i in range(n_seeds)]
    validation_pa = np.array([price_advantage(o).mean() for o in seed_outcomes])
    validation_shortfall = np.array([shortfall(o).mean() for o in seed_outcomes])
    score = {"pa": validation_pa, "shortfall": validation_shortfall}.get(cfg.loop.score)
    if score is None:
        score = mean_variance_per_order(seed_rollouts, val_params.reward_scale).mean(axis=-1)
    return int(np.argmax(score)), validation_pa, validation_shortfall


def selection_entry(cfg: Config, trained: Any) -> dict[str, Any]:
    """The ``selection`` entry of ``metrics.json``: the kept seed, the score it was kept
    by (``loop.score``) and every seed's validation PA and shortfall (bps), for a
    :class:`TrainedPolicy` or a :class:`~serl_jax.agents_experiment.TrainedAgents`."""
    return {
        "selected_seed": trained.selected_seed,
        "selected_by": cfg.loop.score,
        "validation_pa_per_seed": trained.validation_pa.tolist(),
        "validation_shortfall_per_seed": trained.validation_shortfall.tolist(),
    }


def _policy_params(runner) -> PPOPolicyParams:
    return PPOPolicyParams(params=runner.train_state.params, obs_stats=runner.obs_stats)


def _seed_rollout(batched: Rollout, seed: int) -> Rollout:
    return jax.tree.map(lambda x: x[seed], batched)


def baseline_policies(cfg: Config) -> dict[str, tuple[Any, Any]]:
    """The baselines as ``{name: (policy_fn, policy_params)}``: TWAP, TWAP-POV (TWAP with
    participation child orders), VWAP, adaptive VWAP, POV, Almgren–Chriss, Immediate and
    the hindsight oracle (:data:`ORACLE`), which bounds the static market's execution
    shortfall only (leave it out in the dynamic market, whose volumes are simulated)."""
    return {
        TWAP: (twap_policy, None),
        TWAP_POV: (twap_pov_policy, None),
        "VWAP": (vwap_policy, None),
        "adaptive VWAP": (adaptive_vwap_policy, None),
        "POV": (pov_policy, None),
        "AC": (almgren_chriss_policy, jnp.float32(cfg.eval.ac_risk_aversion)),
        "Immediate": (immediate_policy, None),
        ORACLE: (oracle_policy, None),
    }


#: The fixed-size baselines behind one index: each rolls out through this one policy, so
#: the baselines of an evaluation share one compiled rollout instead of one each.
_FIXED_SIZE = SwitchedPolicy(FIXED_SIZE_POLICIES)


def _switched_params(policy: Any, policy_params: Any) -> tuple:
    """``(index, params)`` of a fixed-size baseline for :data:`_FIXED_SIZE`: its own
    parameters in its slot, a placeholder of the same structure in the others (every
    branch is traced; Almgren–Chriss's risk aversion is a float32 scalar)."""
    index = FIXED_SIZE_POLICIES.index(policy)
    slots = tuple(
        jnp.float32(0.0) if p is almgren_chriss_policy else None for p in FIXED_SIZE_POLICIES
    )
    params = slots[:index] + (policy_params,) + slots[index + 1 :]
    return jnp.int32(index), params


def rollout_policy(
    env: ExecutionEnv, env_params: EnvParams, policy: Any, policy_params: Any = None
) -> Rollout:
    """One deterministic evaluation rollout (key 0) of a policy on every episode of
    ``env_params``, as host arrays. A baseline keeps the child order and the
    minute-by-minute decisions it is defined with
    (:data:`serl_jax.baselines.FIXED_SIZE_POLICIES`, ``PARTICIPATION_POLICIES``; a
    precomputed schedule, :func:`~serl_jax.baselines.optimal.schedule_policy`, trades
    fixed sizes), whatever the learned policies' ``env.child_quantity`` and
    ``env.step_minutes``. The fixed-size baselines all roll out through one compiled
    program (:class:`~serl_jax.evaluation.SwitchedPolicy`, the baseline chosen by a traced
    index): evaluating the seven compiles one rollout, not seven (the dynamic market's
    takes about 3 s to compile on 2 CPU cores), and a baseline's orders are the same
    whichever others are evaluated with it."""
    order_params = env_params
    if policy in FIXED_SIZE_POLICIES:
        order_params = env_params.replace(child_quantity="fixed", step_minutes=1)
        policy, policy_params = _FIXED_SIZE, _switched_params(policy, policy_params)
    elif policy in PARTICIPATION_POLICIES:
        order_params = env_params.replace(child_quantity="participation", step_minutes=1)
    elif policy is schedule_policy:  # a precomputed schedule: its sizes exactly
        order_params = env_params.replace(child_quantity="fixed", step_minutes=1)
    return jax.device_get(rollout(env, policy, policy_params, order_params, jax.random.PRNGKey(0)))


def evaluate_policies(
    cfg: Config,
    env: ExecutionEnv,
    env_params: EnvParams,
    policies: dict[str, tuple[Any, Any]],
    days: Sequence[Any] | None = None,
) -> dict[str, tuple[ExecutionMetrics, Rollout]]:
    """Runs each policy on every episode of ``env_params`` and scores it.

    Every policy but TWAP is also compared with TWAP on the same orders (``vs_TWAP`` and
    ``shortfall_vs_TWAP`` of its metrics); TWAP is rolled out for that even when it is not
    among ``policies``.

    Args:
        cfg: run configuration (``eval`` section: confidence level, bootstrap size).
        env: the execution environment.
        env_params: parameters over the evaluation episodes (one whole-day order each).
        policies: ``{name: (policy_fn, policy_params)}``.
        days: ``[N]`` each episode's day (e.g. ``EpisodeSet.dates``): the intervals
            cluster orders by day (:mod:`serl_jax.metrics.inference`); None treats the
            orders as independent.

    Returns:
        ``{name: (metrics, rollout)}`` in the order given.
    """
    side = float(env_params.side)
    rollouts = {
        name: rollout_policy(env, env_params, policy, params)
        for name, (policy, params) in policies.items()
    }
    twap = rollouts[TWAP] if TWAP in rollouts else rollout_policy(env, env_params, twap_policy)
    twap_outcomes = twap.outcomes(side)
    boot = {
        "confidence": cfg.eval.confidence,
        "n_bootstrap": cfg.eval.n_bootstrap,
        "seed": cfg.run.seed,
        "days": days,
    }
    return {
        name: (
            compute_metrics(
                result.outcomes(side), twap=None if name == TWAP else twap_outcomes, **boot
            ),
            result,
        )
        for name, result in rollouts.items()
    }
