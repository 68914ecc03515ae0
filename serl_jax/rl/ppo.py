"""PPO with GAE, end to end in JAX (PureJaxRL's ``ppo.py`` layout).

``make_train(config, env, env_params, network)`` returns ``train(key)``: a pure function
that jits whole and vmaps over seeds. One update = a rollout of ``num_steps`` steps in
``num_envs`` parallel episodes (``lax.scan`` over time, ``vmap`` over episodes), GAE as a
reverse scan, then ``update_epochs`` epochs of shuffled minibatch steps of the clipped
surrogate (Schulman et al. 2017, "Proximal Policy Optimization Algorithms", Eq. 7) with a
clipped value loss and an entropy bonus. GAE (Schulman et al. 2016, "High-Dimensional
Continuous Control Using Generalized Advantage Estimation", Eq. 16):
``A_t = Σ_l (γλ)^l δ_{t+l}``, ``δ_t = r_t + γ V(s_{t+1}) (1 - done_t) - V(s_t)``.

Sibling lanes (``group_size > 1``): lanes run in groups that reset with one key, so in a
replayed market the siblings face the same prices, volumes and parent order and differ
only by their exploration; each lane's advantage is taken relative to the leave-one-out
mean of its siblings' advantages at the same step. This is common random numbers
(Glasserman 2004, "Monte Carlo Methods in Financial Engineering", Sec. 4.2) used as a
control variate, in the spirit of the group baselines of RLOO (Kool et al. 2019) and GRPO
(Shao et al. 2024) but per step: everything the siblings share, the market path and the
value function's error on it, cancels. On the A-share sample's training days it cut the
advantage's standard deviation 36-fold (groups of 8), and the volume signal that was lost
in it became visible (docs/results/learning.md, "Why PPO did not learn").

``make_trainer`` exposes the same pieces (``init``, ``update``) so the CLI can run updates
in chunks and show progress between them. Its building blocks are module-level so that
other trainers (:mod:`serl_jax.rl.hybrid`, :mod:`serl_jax.rl.marl`) share them:
:func:`collect_rollout` (rollout and GAE), :func:`ppo_loss` (the minibatch loss;
:func:`ppo_objective` its part after the network, optionally over masked rows) and
:func:`run_epochs` (shuffled minibatch gradient steps over one or more rollouts).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax.training.train_state import TrainState

from serl_jax.rl.distributions import ActionDistribution
from serl_jax.rl.networks import network_policy
from serl_jax.rl.normalization import RunningStats

DISTILL_TEACHERS = ("oracle", "honest")


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """PPO hyper-parameters (static: changing one recompiles).

    Attributes:
        num_envs: parallel episodes per rollout.
        num_steps: environment steps per episode lane per rollout.
        total_timesteps: environment steps over the whole run (all lanes).
        update_epochs: passes over each rollout.
        num_minibatches: minibatches per epoch; must divide ``num_envs * num_steps``.
        gamma: discount γ (1.0: the undiscounted return is the reward summed over the order).
        gae_lambda: GAE λ (0.99: a long horizon, so the value function's errors bias the
            advantage little; sibling lanes cancel most of the variance that adds;
            docs/results/learning.md, "Why PPO did not learn").
        clip_eps: surrogate and value clipping ε.
        ent_coef: entropy bonus coefficient.
        vf_coef: value-loss coefficient.
        max_grad_norm: global gradient-norm clip.
        lr: Adam learning rate (linearly annealed to 0 if ``anneal_lr``).
        anneal_lr: anneal the learning rate.
        normalize_obs: normalize observations with running statistics.
        group_size: sibling lanes per group (common random numbers): each run of
            ``group_size`` consecutive lanes resets with one key, so the siblings execute
            the same parent order on the same symbol-day and window (in the dynamic
            market with the same background-agent randomness) and differ only by their own
            actions; each lane's advantage then has its siblings' mean advantage at the
            same step subtracted (:func:`sibling_baseline`). 1 turns it off; must divide
            ``num_envs`` (and the hybrid trainer's dynamic lanes).
        distill_coef: weight λ of policy distillation's supervision term, the
            cross-entropy of the policy under a teacher's action distribution at the
            same states (:mod:`serl_jax.rl.distillation`); 0 (default) trains without a
            teacher, > 0 needs one (:func:`make_trainer`'s ``teacher``).
        distill_teacher: the teacher ``python -m serl_jax.train`` trains first when
            ``distill_coef > 0``, one of :data:`DISTILL_TEACHERS`: ``oracle`` (on
            observations with the diagnostic volume leak: oracle policy distillation) or
            ``honest`` (on the student's own observations: self-distillation). Measured
            on the samples' validation and test days, both add about 0.1 bps of shortfall
            and the oracle's information nothing (docs/results/learning.md).
    """

    num_envs: int = 128
    num_steps: int = 240
    total_timesteps: int = 1_228_800
    update_epochs: int = 4
    num_minibatches: int = 8
    gamma: float = 1.0
    gae_lambda: float = 0.99
    clip_eps: float = 0.2
    ent_coef: float = 0.001
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    lr: float = 3e-4
    anneal_lr: bool = True
    normalize_obs: bool = True
    group_size: int = 8
    distill_coef: float = 0.0
    distill_teacher: str = "oracle"

    def __post_init__(self):
        for name in ("num_envs", "num_steps", "update_epochs", "num_minibatches"):
            if getattr(self, name) < 1:
                raise ValueError(f"ppo.{name} must be >= 1, got {getattr(self, name)}")
        if (self.num_envs * self.num_steps) % self.num_minibatches:
            raise ValueError(
                f"ppo.num_minibatches={self.num_minibatches} must divide "
                f"num_envs*num_steps={self.num_envs * self.num_steps}"
            )
        if self.group_size < 1 or self.num_envs % self.group_size:
            raise ValueError(
                f"ppo.group_size={self.group_size} must be >= 1 and divide "
                f"ppo.num_envs={self.num_envs}"
            )
        if not self.distill_coef >= 0.0:
            raise ValueError(f"ppo.distill_coef must be >= 0, got {self.distill_coef}")
        if self.distill_teacher not in DISTILL_TEACHERS:
            raise ValueError(
                f"ppo.distill_teacher: expected one of {DISTILL_TEACHERS}, "
                f"got {self.distill_teacher!r}"
            )
        if self.num_updates < 1:
            raise ValueError(
                f"ppo.total_timesteps={self.total_timesteps} is below one rollout "
                f"(num_envs*num_steps={self.num_envs * self.num_steps})"
            )

    @property
    def num_updates(self) -> int:
        """Number of PPO updates: ``total_timesteps // (num_envs * num_steps)``."""
        return self.total_timesteps // (self.num_envs * self.num_steps)

    @property
    def minibatch_size(self) -> int:
        """Transitions per minibatch."""
        return self.num_envs * self.num_steps // self.num_minibatches


class Transition(NamedTuple):
    """One step of a rollout (leading axes ``[num_steps, num_envs]`` once stacked);
    ``teacher`` is the teacher's action distribution at the step's state when training
    with policy distillation, else None; ``acted`` (bool) marks the steps that read
    their action when the environment decides only every few steps
    (``EnvParams.step_minutes``; ``info["acted"]``), else None."""

    done: jnp.ndarray
    action: jnp.ndarray
    value: jnp.ndarray
    reward: jnp.ndarray
    log_prob: jnp.ndarray
    obs: jnp.ndarray
    prior_logit: jnp.ndarray
    order_pa: jnp.ndarray
    teacher: ActionDistribution | None = None
    acted: jnp.ndarray | None = None


class RunnerState(NamedTuple):
    """Everything carried from one update to the next."""

    train_state: TrainState
    env_state: Any
    obs: jnp.ndarray
    obs_stats: RunningStats
    episode_return: jnp.ndarray
    key: jax.Array


class Lanes(NamedTuple):
    """The parallel episodes of one environment between rollouts.

    Attributes:
        env_state: the environments' states (leading axis ``[N]``).
        obs: ``[N, D]`` float32 raw (unnormalized) current observations.
        episode_return: ``[N]`` float32 reward summed so far in each running episode.
    """

    env_state: Any
    obs: jnp.ndarray
    episode_return: jnp.ndarray


class Batch(NamedTuple):
    """A rollout ready for training: leaves ``[num_steps, N, ...]`` (flattened and split
    into minibatches by :func:`run_epochs`)."""

    traj: Transition
    advantages: jnp.ndarray
    targets: jnp.ndarray


class EpisodeSums(NamedTuple):
    """Sums over the episodes that finished during one rollout.

    Attributes:
        count: int32 scalar, number of finished episodes.
        episode_return: float32 scalar, the sum of their returns (scaled reward units).
        order_pa: float32 scalar, the sum of their orders' price advantage, bps.
    """

    count: jnp.ndarray
    episode_return: jnp.ndarray
    order_pa: jnp.ndarray


class Trainer(NamedTuple):
    """``init(key) -> RunnerState``, ``update(RunnerState) -> (RunnerState, metrics)``,
    and ``train(key) -> {"runner_state", "metrics"}`` running all ``num_updates``."""

    init: Callable[[jax.Array], RunnerState]
    update: Callable[[RunnerState], tuple[RunnerState, dict[str, jnp.ndarray]]]
    train: Callable[[jax.Array], dict[str, Any]]


def calculate_gae(
    rewards: jnp.ndarray,
    values: jnp.ndarray,
    dones: jnp.ndarray,
    last_value: jnp.ndarray,
    gamma: float,
    gae_lambda: float,
) -> jnp.ndarray:
    """Generalized advantage estimates by a reverse ``lax.scan`` over time.

    ``A_t = δ_t + γλ (1 - done_t) A_{t+1}``, ``δ_t = r_t + γ (1 - done_t) V_{t+1} - V_t``
    (Schulman et al. 2016, Eq. 16), where ``done_t`` marks that step t ended its episode
    (the next observation belongs to a new one) and ``V_T = last_value``.

    Args:
        rewards, values, dones: ``[num_steps, ...]`` float32 (dones as 0/1 or bool).
        last_value: ``[...]`` value of the observation after the last step.
        gamma: discount γ.
        gae_lambda: λ.

    Returns:
        ``[num_steps, ...]`` float32 advantages.
    """

    def _gae_step(carry, step):
        gae, next_value = carry
        reward, value, done = step
        not_done = 1.0 - done
        delta = reward + gamma * next_value * not_done - value
        gae = delta + gamma * gae_lambda * not_done * gae
        return (gae, value), gae

    _, advantages = jax.lax.scan(
        _gae_step,
        (jnp.zeros_like(last_value), last_value),
        (rewards, values, dones.astype(rewards.dtype)),
        reverse=True,
    )
    return advantages


ActionPrior = Callable[[jnp.ndarray], jnp.ndarray]
# Environment states [N] -> the teacher's action distribution [N] at them
# (serl_jax.rl.distillation.make_teacher).
TeacherPolicy = Callable[[Any], ActionDistribution]


def no_action_prior(obs: jnp.ndarray) -> jnp.ndarray:
    """The zero prior: the network's ``loc`` is the action logit itself."""
    return jnp.zeros(obs.shape[:-1], obs.dtype)


def policy_distribution(
    network: nn.Module,
    params: Any,
    obs_stats: RunningStats,
    obs: jnp.ndarray,
    normalize: bool,
    action_prior: ActionPrior = no_action_prior,
) -> tuple[ActionDistribution, jnp.ndarray]:
    """Applies the network slot to (optionally normalized) ``obs [..., D]``.

    ``action_prior`` maps the raw observation to a reference action logit ``[...]`` that
    the network's output is added to (:class:`~serl_jax.rl.distributions.LogitNormal`),
    or whose action a discrete action set multiplies
    (:class:`~serl_jax.rl.distributions.PriorMultiples`).

    Returns:
        The policy (:func:`serl_jax.rl.networks.network_policy`) and the value estimate
        ``[...]``.
    """
    x = obs_stats.normalize(obs) if normalize else obs
    logits, value = network.apply(params, x)
    return network_policy(network, logits, action_prior(obs)), value


def make_optimizer(config: PPOConfig) -> optax.GradientTransformation:
    """Global-norm gradient clipping, then Adam (eps 1e-5) with the learning rate linearly
    annealed from ``config.lr`` to 0 over ``num_updates * update_epochs * num_minibatches``
    gradient steps (constant if not ``config.anneal_lr``)."""
    n_grad_steps = config.num_updates * config.update_epochs * config.num_minibatches

    def learning_rate(count):
        frac = 1.0 - jnp.minimum(count, n_grad_steps) / n_grad_steps
        return config.lr * frac

    return optax.chain(
        optax.clip_by_global_norm(config.max_grad_norm),
        optax.adam(learning_rate if config.anneal_lr else config.lr, eps=1e-5),
    )


def lane_keys(key: jax.Array, num_lanes: int, group_size: int = 1) -> jax.Array:
    """``num_lanes`` keys in which each run of ``group_size`` consecutive lanes shares one.

    Sibling lanes that share their environment keys reset to the same symbol-day, window
    and parent order and, in a replayed market, see the same prices and volumes: they
    differ only by their own actions (common random numbers).

    Args:
        key: PRNG key.
        num_lanes: N, a multiple of ``group_size``.
        group_size: G, lanes per group.

    Returns:
        ``[N]`` keys; lanes ``g*G .. g*G + G - 1`` hold the same key.
    """
    keys = jax.random.split(key, num_lanes // group_size)
    return jnp.repeat(keys, group_size, axis=0)


def reset_lanes(env, env_params, key: jax.Array, num_envs: int, group_size: int = 1) -> Lanes:
    """Resets ``num_envs`` parallel episodes (``vmap`` of ``env.reset``) with keys from
    :func:`lane_keys`; episode returns start at 0."""
    obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(
        lane_keys(key, num_envs, group_size), env_params
    )
    return Lanes(env_state, obs, jnp.zeros(num_envs))


def sibling_baseline(advantages: jnp.ndarray, group_size: int) -> jnp.ndarray:
    """Subtracts from each lane's advantage the mean advantage of its siblings.

    ``A'_{i,t} = A_{i,t} - mean_{j in group(i), j != i} A_{j,t}`` over lanes ``[..., N]``
    grouped in consecutive runs of ``group_size`` (a leave-one-out baseline). The siblings'
    exploration noise is independent of lane i's action, so the baseline leaves the policy
    gradient unbiased, while everything the siblings share (the market path, the parent
    order, the value function's errors on them) cancels. It adds the siblings' own
    exploration noise, ``1/(G - 1)`` of a lane's, which is why groups of 8 learned faster
    than groups of 2 or 4 on the synthetic trend, where the siblings share little
    (docs/results/learning.md, "Why PPO did not learn"). Identity for ``group_size = 1``.

    Args:
        advantages: float32 ``[..., N]``, N a multiple of ``group_size``.
        group_size: G >= 1.

    Returns:
        float32 ``[..., N]``.
    """
    if group_size == 1:
        return advantages
    shape = advantages.shape
    grouped = advantages.reshape(shape[:-1] + (shape[-1] // group_size, group_size))
    others = (grouped.sum(-1, keepdims=True) - grouped) / (group_size - 1)
    return (grouped - others).reshape(shape)


def collect_rollout(
    config: PPOConfig,
    network: nn.Module,
    action_prior: ActionPrior,
    env,
    env_params,
    params: Any,
    obs_stats: RunningStats,
    lanes: Lanes,
    key: jax.Array,
    teacher: TeacherPolicy | None = None,
) -> tuple[Lanes, RunningStats, jax.Array, Batch, EpisodeSums]:
    """Rolls the policy out for ``config.num_steps`` steps in every lane, then GAE.

    A ``lax.scan`` over time of ``vmap(env.step)`` over the ``N = lanes.obs.shape[0]``
    lanes; each step samples the action logit z from the policy (the env trades
    ``sigmoid(z)``), merges the next observations into ``obs_stats`` (if
    ``config.normalize_obs``) and resets a lane's return when its episode ends.
    Advantages are :func:`calculate_gae` with ``V_T`` the value of the last observation,
    then relative to the sibling lanes' (:func:`sibling_baseline`, ``config.group_size``);
    the value targets are the GAE returns before that.

    Args:
        config: PPO hyper-parameters (``num_steps``, ``normalize_obs``, ``gamma``,
            ``gae_lambda``).
        network: the network slot; ``params`` its parameters.
        action_prior: raw observation ``[..., D]`` -> reference action logit ``[...]``.
        env, env_params: a gymnax-style environment whose ``info`` has ``order_pa``.
        obs_stats: the observation normalizer before the rollout (the updated one is
            returned).
        lanes: the lanes' state before the rollout.
        key: PRNG key (split once per step; the last one is returned).
        teacher: if given, the teacher's action distribution at every step's state is
            recorded in the batch (``Transition.teacher``) for oracle policy
            distillation; it does not change the rollout.

    Returns:
        ``(lanes, obs_stats, key, batch, episodes)``: the lanes after the rollout, the
        updated normalizer, the next key, the ``[num_steps, N]`` training batch and the
        sums over the episodes that finished in the rollout.
    """
    step_batch = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def _env_step(carry, _):
        lanes, obs_stats, key = carry
        env_state, obs, episode_return = lanes
        key, key_act, key_step = jax.random.split(key, 3)
        x = obs_stats.normalize(obs) if config.normalize_obs else obs
        logits, value = network.apply(params, x)
        prior_logit = action_prior(obs)
        dist = network_policy(network, logits, prior_logit)
        action = dist.sample(key_act)  # the logit z (the env trades sigmoid(z)) or an index
        log_prob = dist.log_prob(action)
        step_keys = lane_keys(key_step, obs.shape[0], config.group_size)
        next_obs, env_state, reward, terminated, truncated, info = step_batch(
            step_keys, env_state, dist.action(action), env_params
        )
        done = jnp.logical_or(terminated, truncated)
        obs_stats = obs_stats.update(next_obs) if config.normalize_obs else obs_stats
        episode_return = episode_return + reward
        transition = Transition(
            done=done,
            action=action,
            value=value,
            reward=reward,
            log_prob=log_prob,
            obs=x,
            prior_logit=prior_logit,
            order_pa=info["order_pa"],
            teacher=None if teacher is None else teacher(env_state),
            acted=info.get("acted"),
        )
        finished_return = episode_return
        episode_return = jnp.where(done, 0.0, episode_return)
        carry = (Lanes(env_state, next_obs, episode_return), obs_stats, key)
        return carry, (transition, finished_return)

    (lanes, obs_stats, key), (traj, returns) = jax.lax.scan(
        _env_step, (lanes, obs_stats, key), None, config.num_steps
    )
    x_last = obs_stats.normalize(lanes.obs) if config.normalize_obs else lanes.obs
    _, last_value = network.apply(params, x_last)
    advantages = calculate_gae(
        traj.reward, traj.value, traj.done, last_value, config.gamma, config.gae_lambda
    )
    episodes = EpisodeSums(
        count=traj.done.sum(),
        episode_return=(returns * traj.done).sum(),
        order_pa=(traj.order_pa * traj.done).sum(),
    )
    targets = advantages + traj.value
    advantages = sibling_baseline(advantages, config.group_size)
    return lanes, obs_stats, key, Batch(traj, advantages, targets), episodes


def ppo_loss(
    config: PPOConfig, network: nn.Module, params: Any, minibatch: Batch
) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
    """The PPO loss of one minibatch (flat leading axis ``[B]``).

    ``L = -mean(min(r Â, clip(r, 1-ε, 1+ε) Â)) + c_v L_V - c_e H (+ λ L_d)`` with the probability
    ratio ``r = π(z|s) / π_old(z|s)``, advantages ``Â`` normalized over the minibatch
    (Schulman et al. 2017, Eq. 7 and 9), the clipped value loss
    ``L_V = ½ mean(max((V - G)², (V_old + clip(V - V_old, -ε, ε) - G)²))`` and the mean
    policy entropy H. Steps whose action the environment did not read (``traj.acted``
    false: inside a decision interval) are left out of every mean, since their action
    changed nothing. With a teacher in the minibatch (``traj.teacher``), oracle policy
    distillation's supervision term ``L_d`` is added with weight ``λ =
    config.distill_coef``: the mean cross-entropy of the policy under the teacher's
    distribution (Fang et al. 2021, AAAI, "Universal Trading for Order Execution with
    Oracle Policy Distillation"; :mod:`serl_jax.rl.distillation`).

    Returns:
        ``(L, stats)``: the float32 scalar loss and ``actor_loss``, ``value_loss``,
        ``entropy``, ``approx_kl`` (``mean((r - 1) - log r)``) and ``clip_frac`` (share of
        ``|r - 1| > ε``), float32 scalars; with a teacher also ``distill_loss`` (``L_d``).
    """
    t = minibatch.traj
    logits, value = network.apply(params, t.obs)
    dist = network_policy(network, logits, t.prior_logit)
    total, stats = ppo_objective(config, dist, value, minibatch, t.acted)
    if t.teacher is not None:
        cross_entropy = dist.cross_entropy(t.teacher)
        distill = cross_entropy.mean() if t.acted is None else masked_mean(cross_entropy, t.acted)
        total = total + config.distill_coef * distill
        stats = {**stats, "distill_loss": distill}
    return total, stats


def masked_mean(x: jnp.ndarray, mask: jnp.ndarray) -> jnp.ndarray:
    """Mean of ``x`` over the entries where ``mask`` is set (0 if none)."""
    weight = mask.astype(x.dtype)
    return (weight * x).sum() / jnp.maximum(weight.sum(), 1.0)


def ppo_objective(
    config: PPOConfig,
    dist: ActionDistribution,
    value: jnp.ndarray,
    minibatch: Any,
    mask: jnp.ndarray | None = None,
) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
    """:func:`ppo_loss` from the policy ``dist`` and values ``value [B]`` the current
    parameters give on a minibatch ``(traj, advantages, targets)`` whose ``traj`` has
    ``action``, ``value`` and ``log_prob``.

    With ``mask`` (``bool[B]``, e.g. the steps each agent took, :mod:`serl_jax.rl.marl`)
    every mean, and the advantages' normalization, runs over the masked rows only.
    """
    t, adv, tgt = minibatch

    def mean(x):
        return x.mean() if mask is None else masked_mean(x, mask)

    log_prob = dist.log_prob(t.action)
    value_clipped = t.value + jnp.clip(value - t.value, -config.clip_eps, config.clip_eps)
    value_loss = 0.5 * mean(jnp.maximum((value - tgt) ** 2, (value_clipped - tgt) ** 2))
    ratio = jnp.exp(log_prob - t.log_prob)
    if mask is None:
        adv_n = (adv - adv.mean()) / (adv.std() + 1e-8)
    else:
        adv_mean = masked_mean(adv, mask)
        adv_n = (adv - adv_mean) / (jnp.sqrt(masked_mean((adv - adv_mean) ** 2, mask)) + 1e-8)
    surrogate = jnp.minimum(
        ratio * adv_n,
        jnp.clip(ratio, 1.0 - config.clip_eps, 1.0 + config.clip_eps) * adv_n,
    )
    actor_loss = -mean(surrogate)
    entropy = mean(dist.entropy())
    total = actor_loss + config.vf_coef * value_loss - config.ent_coef * entropy
    stats = {
        "actor_loss": actor_loss,
        "value_loss": value_loss,
        "entropy": entropy,
        "approx_kl": mean((ratio - 1.0) - jnp.log(ratio)),
        "clip_frac": mean(jnp.abs(ratio - 1.0) > config.clip_eps),
    }
    return total, stats


LossFn = Callable[[Any, tuple[Batch, ...]], tuple[jnp.ndarray, dict[str, jnp.ndarray]]]


def run_epochs(
    config: PPOConfig,
    train_state: TrainState,
    key: jax.Array,
    batches: tuple[Batch, ...],
    loss_fn: LossFn,
) -> tuple[TrainState, jax.Array, dict[str, jnp.ndarray]]:
    """``config.update_epochs`` epochs of minibatch gradient steps over one or more batches.

    Each epoch shuffles every ``[num_steps, N]`` batch on its own (flattened to
    ``[num_steps * N]``) and splits it into ``config.num_minibatches``; gradient step k
    minimizes ``loss_fn(params, (minibatch k of batch 0, minibatch k of batch 1, ...))``.

    Args:
        loss_fn: ``(params, minibatches) -> (loss, stats)``, float32 scalars.

    Returns:
        ``(train_state, key, losses)``: ``losses`` holds ``total_loss`` (the loss) and
        every stat, each ``[update_epochs, num_minibatches]``.
    """

    def _update_minibatch(train_state, minibatches):
        (total, stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(
            train_state.params, minibatches
        )
        train_state = train_state.apply_gradients(grads=grads)
        return train_state, {"total_loss": total, **stats}

    def _update_epoch(carry, _):
        train_state, key = carry
        key, *perm_keys = jax.random.split(key, 1 + len(batches))
        minibatches = tuple(
            _shuffled_minibatches(k, batch, config.num_minibatches)
            for k, batch in zip(perm_keys, batches, strict=True)
        )
        train_state, losses = jax.lax.scan(_update_minibatch, train_state, minibatches)
        return (train_state, key), losses

    (train_state, key), losses = jax.lax.scan(
        _update_epoch, (train_state, key), None, config.update_epochs
    )
    return train_state, key, losses


def _shuffled_minibatches(key: jax.Array, batch: Batch, num_minibatches: int) -> Batch:
    """``[T, N, ...]`` leaves -> shuffled ``[num_minibatches, T * N / num_minibatches, ...]``."""
    batch_size = batch.advantages.shape[0] * batch.advantages.shape[1]
    perm = jax.random.permutation(key, batch_size)
    batch = jax.tree.map(lambda x: x.reshape((batch_size,) + x.shape[2:])[perm], batch)
    return jax.tree.map(lambda x: x.reshape((num_minibatches, -1) + x.shape[1:]), batch)


def episode_metrics(episodes: EpisodeSums) -> dict[str, jnp.ndarray]:
    """Float32 scalars ``episodes`` (count), ``episode_return`` and ``order_pa`` (bps): the
    means over the finished episodes, NaN when none finished."""
    count = episodes.count

    def mean_or_nan(total):
        return jnp.where(count > 0, total / count, jnp.nan)

    return {
        "episodes": count.astype(jnp.float32),
        "episode_return": mean_or_nan(episodes.episode_return),
        "order_pa": mean_or_nan(episodes.order_pa),
    }


def assemble_trainer(init: Callable, update: Callable, num_updates: int) -> Trainer:
    """A :class:`Trainer` from ``init`` and ``update``; ``train(key)`` runs ``init`` then
    ``num_updates`` updates in one ``lax.scan`` and returns ``{"runner_state", "metrics"}``
    (metrics with a leading ``[num_updates]`` axis)."""

    def train(key: jax.Array) -> dict[str, Any]:
        runner = init(key)
        runner, metrics = jax.lax.scan(lambda r, _: update(r), runner, None, num_updates)
        return {"runner_state": runner, "metrics": metrics}

    return Trainer(init=init, update=update, train=train)


def make_trainer(
    config: PPOConfig,
    env,
    env_params,
    network: nn.Module,
    action_prior: ActionPrior = no_action_prior,
    teacher: TeacherPolicy | None = None,
) -> Trainer:
    """Builds the pure PPO functions for one environment and network slot.

    Args:
        config: PPO hyper-parameters.
        env: a gymnax-style environment with a continuous action in [0, 1].
        env_params: its parameters (passed through, not baked in as constants).
        network: a flax module honouring the network-slot contract
            (:mod:`serl_jax.rl.networks`).
        action_prior: raw observation ``[..., D]`` -> reference action logit ``[...]``
            added to the network's output (a residual policy); zero by default.
        teacher: a policy-distillation teacher
            (:func:`serl_jax.rl.distillation.make_teacher`), weighted by
            ``config.distill_coef``; give it iff that weight is > 0.

    Returns:
        A :class:`Trainer`. Per-update metrics (float32 scalars): ``episode_return`` and
        ``order_pa`` (means over episodes finished in the rollout; NaN if none finished),
        ``episodes``, ``total_loss``, ``actor_loss``, ``value_loss``, ``entropy``,
        ``approx_kl``, ``clip_frac`` (and ``distill_loss`` with a teacher).

    Raises:
        ValueError: a teacher without ``config.distill_coef > 0``, or the reverse.
    """
    if (teacher is None) != (config.distill_coef == 0.0):
        raise ValueError(
            f"ppo.distill_coef={config.distill_coef}: policy distillation needs a teacher "
            "exactly when the coefficient is > 0"
        )
    obs_size = env.observation_space(env_params).shape[0]
    tx = make_optimizer(config)

    def loss_fn(params, minibatches):
        (minibatch,) = minibatches
        return ppo_loss(config, network, params, minibatch)

    def init(key: jax.Array) -> RunnerState:
        key, key_net, key_env = jax.random.split(key, 3)
        params = network.init(key_net, jnp.zeros((obs_size,), jnp.float32))
        train_state = TrainState.create(apply_fn=network.apply, params=params, tx=tx)
        env_state, obs, episode_return = reset_lanes(
            env, env_params, key_env, config.num_envs, config.group_size
        )
        obs_stats = RunningStats.create(obs_size).update(obs)
        return RunnerState(train_state, env_state, obs, obs_stats, episode_return, key)

    def update(runner: RunnerState) -> tuple[RunnerState, dict[str, jnp.ndarray]]:
        lanes = Lanes(runner.env_state, runner.obs, runner.episode_return)
        lanes, obs_stats, key, batch, episodes = collect_rollout(
            config,
            network,
            action_prior,
            env,
            env_params,
            runner.train_state.params,
            runner.obs_stats,
            lanes,
            runner.key,
            teacher,
        )
        train_state, key, losses = run_epochs(config, runner.train_state, key, (batch,), loss_fn)
        metrics = {k: v.mean() for k, v in losses.items()}
        metrics.update(episode_metrics(episodes))
        runner = RunnerState(
            train_state, lanes.env_state, lanes.obs, obs_stats, lanes.episode_return, key
        )
        return runner, metrics

    return assemble_trainer(init, update, config.num_updates)


def make_train(
    config: PPOConfig,
    env,
    env_params,
    network: nn.Module,
    action_prior: ActionPrior = no_action_prior,
) -> Callable:
    """PureJaxRL entry point: ``train(key) -> {"runner_state", "metrics"}``.

    ``jax.jit(make_train(...))(key)`` runs the whole training as one program;
    ``jax.jit(jax.vmap(make_train(...)))(keys)`` trains one policy per seed in parallel.
    Metrics have a leading ``[num_updates]`` axis (see :func:`make_trainer`).
    """
    return make_trainer(config, env, env_params, network, action_prior).train
