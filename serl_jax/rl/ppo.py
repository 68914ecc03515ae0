"""PPO with GAE, end to end in JAX (PureJaxRL's ``ppo.py`` layout).

``make_train(config, env, env_params, network)`` returns ``train(key)``: a pure function
that jits whole and vmaps over seeds. One update = a rollout of ``num_steps`` steps in
``num_envs`` parallel episodes (``lax.scan`` over time, ``vmap`` over episodes), GAE as a
reverse scan, then ``update_epochs`` epochs of shuffled minibatch steps of the clipped
surrogate (Schulman et al. 2017, "Proximal Policy Optimization Algorithms", Eq. 7) with a
clipped value loss and an entropy bonus. GAE (Schulman et al. 2016, "High-Dimensional
Continuous Control Using Generalized Advantage Estimation", Eq. 16):
``A_t = Σ_l (γλ)^l δ_{t+l}``, ``δ_t = r_t + γ V(s_{t+1}) (1 - done_t) - V(s_t)``.

``make_trainer`` exposes the same pieces (``init``, ``update``) so the CLI can run updates
in chunks and show progress between them.
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

from serl_jax.rl.distributions import LogitNormal
from serl_jax.rl.normalization import RunningStats


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """PPO hyper-parameters (static: changing one recompiles).

    Attributes:
        num_envs: parallel episodes per rollout.
        num_steps: environment steps per episode lane per rollout.
        total_timesteps: environment steps over the whole run (all lanes).
        update_epochs: passes over each rollout.
        num_minibatches: minibatches per epoch; must divide ``num_envs * num_steps``.
        gamma: discount γ (1.0: the undiscounted return is the order's PA).
        gae_lambda: GAE λ.
        clip_eps: surrogate and value clipping ε.
        ent_coef: entropy bonus coefficient.
        vf_coef: value-loss coefficient.
        max_grad_norm: global gradient-norm clip.
        lr: Adam learning rate (linearly annealed to 0 if ``anneal_lr``).
        anneal_lr: anneal the learning rate.
        normalize_obs: normalize observations with running statistics.
    """

    num_envs: int = 128
    num_steps: int = 240
    total_timesteps: int = 1_228_800
    update_epochs: int = 4
    num_minibatches: int = 8
    gamma: float = 1.0
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    ent_coef: float = 0.001
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    lr: float = 3e-4
    anneal_lr: bool = True
    normalize_obs: bool = True

    def __post_init__(self):
        for name in ("num_envs", "num_steps", "update_epochs", "num_minibatches"):
            if getattr(self, name) < 1:
                raise ValueError(f"ppo.{name} must be >= 1, got {getattr(self, name)}")
        if (self.num_envs * self.num_steps) % self.num_minibatches:
            raise ValueError(
                f"ppo.num_minibatches={self.num_minibatches} must divide "
                f"num_envs*num_steps={self.num_envs * self.num_steps}"
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
    """One step of a rollout (leading axes ``[num_steps, num_envs]`` once stacked)."""

    done: jnp.ndarray
    action: jnp.ndarray
    value: jnp.ndarray
    reward: jnp.ndarray
    log_prob: jnp.ndarray
    obs: jnp.ndarray
    prior_logit: jnp.ndarray
    order_pa: jnp.ndarray


class RunnerState(NamedTuple):
    """Everything carried from one update to the next."""

    train_state: TrainState
    env_state: Any
    obs: jnp.ndarray
    obs_stats: RunningStats
    episode_return: jnp.ndarray
    key: jax.Array


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
) -> tuple[LogitNormal, jnp.ndarray]:
    """Applies the network slot to (optionally normalized) ``obs [..., D]``.

    ``action_prior`` maps the raw observation to a reference action logit ``[...]`` that
    the network's output is added to (see :class:`LogitNormal`).

    Returns:
        The logit-normal policy and the value estimate ``[...]``.
    """
    x = obs_stats.normalize(obs) if normalize else obs
    logits, value = network.apply(params, x)
    return LogitNormal.from_logits(logits, action_prior(obs)), value


def make_trainer(
    config: PPOConfig,
    env,
    env_params,
    network: nn.Module,
    action_prior: ActionPrior = no_action_prior,
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

    Returns:
        A :class:`Trainer`. Per-update metrics (float32 scalars): ``episode_return`` and
        ``order_pa`` (means over episodes finished in the rollout; NaN if none finished),
        ``episodes``, ``total_loss``, ``actor_loss``, ``value_loss``, ``entropy``,
        ``approx_kl``, ``clip_frac``.
    """
    obs_size = env.observation_space(env_params).shape[0]
    n_grad_steps = config.num_updates * config.update_epochs * config.num_minibatches

    def learning_rate(count):
        frac = 1.0 - jnp.minimum(count, n_grad_steps) / n_grad_steps
        return config.lr * frac

    tx = optax.chain(
        optax.clip_by_global_norm(config.max_grad_norm),
        optax.adam(learning_rate if config.anneal_lr else config.lr, eps=1e-5),
    )
    reset_batch = jax.vmap(env.reset, in_axes=(0, None))
    step_batch = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def init(key: jax.Array) -> RunnerState:
        key, key_net, key_env = jax.random.split(key, 3)
        params = network.init(key_net, jnp.zeros((obs_size,), jnp.float32))
        train_state = TrainState.create(apply_fn=network.apply, params=params, tx=tx)
        obs, env_state = reset_batch(jax.random.split(key_env, config.num_envs), env_params)
        obs_stats = RunningStats.create(obs_size).update(obs)
        return RunnerState(train_state, env_state, obs, obs_stats, jnp.zeros(config.num_envs), key)

    def update(runner: RunnerState) -> tuple[RunnerState, dict[str, jnp.ndarray]]:
        def _env_step(carry, _):
            train_state, env_state, obs, obs_stats, episode_return, key = carry
            key, key_act, key_step = jax.random.split(key, 3)
            x = obs_stats.normalize(obs) if config.normalize_obs else obs
            logits, value = network.apply(train_state.params, x)
            prior_logit = action_prior(obs)
            dist = LogitNormal.from_logits(logits, prior_logit)
            action = dist.sample(key_act)  # the logit z; the env trades sigmoid(z)
            log_prob = dist.log_prob(action)
            step_keys = jax.random.split(key_step, config.num_envs)
            next_obs, env_state, reward, terminated, truncated, info = step_batch(
                step_keys, env_state, LogitNormal.action(action), env_params
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
            )
            ret = (episode_return, done)
            episode_return = jnp.where(done, 0.0, episode_return)
            carry = RunnerState(train_state, env_state, next_obs, obs_stats, episode_return, key)
            return carry, (transition, ret)

        runner, (traj, (returns, dones)) = jax.lax.scan(_env_step, runner, None, config.num_steps)
        train_state, env_state, last_obs, obs_stats, episode_return, key = runner
        x_last = obs_stats.normalize(last_obs) if config.normalize_obs else last_obs
        _, last_value = network.apply(train_state.params, x_last)

        advantages = calculate_gae(
            traj.reward, traj.value, traj.done, last_value, config.gamma, config.gae_lambda
        )
        targets = advantages + traj.value

        def _update_epoch(carry, _):
            train_state, key = carry
            key, key_perm = jax.random.split(key)
            batch_size = config.num_envs * config.num_steps
            perm = jax.random.permutation(key_perm, batch_size)
            batch = (traj, advantages, targets)
            batch = jax.tree.map(lambda x: x.reshape((batch_size,) + x.shape[2:])[perm], batch)
            minibatches = jax.tree.map(
                lambda x: x.reshape((config.num_minibatches, -1) + x.shape[1:]), batch
            )

            def _update_minibatch(train_state, minibatch):
                t, adv, tgt = minibatch

                def _loss_fn(params):
                    logits, value = network.apply(params, t.obs)
                    dist = LogitNormal.from_logits(logits, t.prior_logit)
                    log_prob = dist.log_prob(t.action)
                    value_clipped = t.value + jnp.clip(
                        value - t.value, -config.clip_eps, config.clip_eps
                    )
                    value_loss = (
                        0.5 * jnp.maximum((value - tgt) ** 2, (value_clipped - tgt) ** 2).mean()
                    )
                    ratio = jnp.exp(log_prob - t.log_prob)
                    adv_n = (adv - adv.mean()) / (adv.std() + 1e-8)
                    surrogate = jnp.minimum(
                        ratio * adv_n,
                        jnp.clip(ratio, 1.0 - config.clip_eps, 1.0 + config.clip_eps) * adv_n,
                    )
                    actor_loss = -surrogate.mean()
                    entropy = dist.entropy().mean()
                    total = actor_loss + config.vf_coef * value_loss - config.ent_coef * entropy
                    stats = {
                        "actor_loss": actor_loss,
                        "value_loss": value_loss,
                        "entropy": entropy,
                        "approx_kl": ((ratio - 1.0) - jnp.log(ratio)).mean(),
                        "clip_frac": (jnp.abs(ratio - 1.0) > config.clip_eps).mean(),
                    }
                    return total, stats

                (total, stats), grads = jax.value_and_grad(_loss_fn, has_aux=True)(
                    train_state.params
                )
                train_state = train_state.apply_gradients(grads=grads)
                return train_state, {"total_loss": total, **stats}

            train_state, losses = jax.lax.scan(_update_minibatch, train_state, minibatches)
            return (train_state, key), losses

        (train_state, key), losses = jax.lax.scan(
            _update_epoch, (train_state, key), None, config.update_epochs
        )
        n_done = dones.sum()
        metrics = {k: v.mean() for k, v in losses.items()}
        metrics["episodes"] = n_done.astype(jnp.float32)
        metrics["episode_return"] = jnp.where(n_done > 0, (returns * dones).sum() / n_done, jnp.nan)
        metrics["order_pa"] = jnp.where(n_done > 0, (traj.order_pa * dones).sum() / n_done, jnp.nan)
        runner = RunnerState(train_state, env_state, last_obs, obs_stats, episode_return, key)
        return runner, metrics

    def train(key: jax.Array) -> dict[str, Any]:
        runner = init(key)
        runner, metrics = jax.lax.scan(lambda r, _: update(r), runner, None, config.num_updates)
        return {"runner_state": runner, "metrics": metrics}

    return Trainer(init=init, update=update, train=train)


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
