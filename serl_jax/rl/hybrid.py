"""Hybrid PPO on a static and a dynamic market: ``L = α·L_static + β·L_dynamic``.

SE-RL (Eq. 5) trains one policy on two markets at once, the static market (historical
replay, :class:`serl_jax.envs.execution.ExecutionEnv`) and a dynamic one (a simulated
market that reacts to the agent), minimizing ``L = α L_s + β L_d`` with weights adapted to
the losses::

    α ← α · L_s / (L_s + L_d),    β ← β · L_d / (L_s + L_d).

What is implemented (:func:`adapt_weights`), and why:

* **Loss magnitudes.** A PPO loss is not a positive quantity (the surrogate term and the
  entropy bonus can make it ≤ 0), so the rule is applied to ``m = |L| + 1e-8``. The
  ``1e-8`` keeps ``0/0`` defined: equal magnitudes (zeros included) leave the weights
  unchanged.
* **Renormalization.** The rule as written does not keep ``α + β = 1``
  (``α' + β' = (α m_s + β m_d) / (m_s + m_d)``), so the updated weights are divided by
  their sum; with ``α + β = 1`` this gives ``α ← α m_s / (α m_s + β m_d)``. The weight of
  the market with the larger ``|L|`` grows.
* **Clipping.** ``α`` is clipped to ``[min_weight, 1 - min_weight]`` and ``β = 1 - α``, so
  neither market drops out of training (the multiplicative rule would otherwise drive the
  smaller-loss weight to 0, where it stays forever).
* **Timing.** Adaptation happens once per PPO update, outside the gradient: update ``k``
  minimizes ``α_k L_s + β_k L_d`` at every minibatch step, where ``(α_k, β_k)`` come from
  ``(α_{k-1}, β_{k-1})`` and the mean per-market total losses of update ``k - 1``
  (means over all its minibatch steps, detached: no gradient flows through the weights).
  Update 0 uses ``(alpha_init, 1 - alpha_init)``. With ``adapt=False`` the weights stay
  at ``(alpha_init, 1 - alpha_init)``.

Each update rolls out ``ppo.num_envs`` static and ``dynamic_envs`` dynamic episodes for
``ppo.num_steps`` steps (the same :func:`serl_jax.rl.ppo.collect_rollout` as plain PPO,
GAE per market), then runs ``ppo.update_epochs`` epochs in which gradient step k takes the
k-th of ``ppo.num_minibatches`` shuffled minibatches of each market and computes
:func:`serl_jax.rl.ppo.ppo_loss` on each (advantages normalized per market). One
policy/value network and one observation normalizer (fed both markets' observations) are
shared.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax.training.train_state import TrainState

from serl_jax.rl.normalization import RunningStats
from serl_jax.rl.ppo import (
    ActionPrior,
    Lanes,
    PPOConfig,
    Trainer,
    assemble_trainer,
    collect_rollout,
    episode_metrics,
    make_optimizer,
    no_action_prior,
    ppo_loss,
    reset_lanes,
    run_epochs,
)

# Added to each |L| so that 0/0 is defined (equal magnitudes keep the weights).
LOSS_EPS = 1e-8


@dataclasses.dataclass(frozen=True)
class HybridConfig:
    """Settings of hybrid (static + dynamic market) PPO (static: changing one recompiles).

    Attributes:
        dynamic_envs: parallel episodes of the dynamic market per rollout (the static
            market uses ``ppo.num_envs``; both run ``ppo.num_steps`` steps per rollout).
            ``dynamic_envs * ppo.num_steps`` must be divisible by ``ppo.num_minibatches``.
        alpha_init: α of the first update, the weight of the static market's loss
            (β = 1 - α); must lie in ``[min_weight, 1 - min_weight]``.
        min_weight: α and β are clipped to ``[min_weight, 1 - min_weight]``; in (0, 0.5].
        adapt: adapt α, β after every update (Eq. 5, see the module docstring); False
            keeps them at ``alpha_init``, ``1 - alpha_init``.
    """

    dynamic_envs: int = 32
    alpha_init: float = 0.5
    min_weight: float = 0.1
    adapt: bool = True

    def __post_init__(self):
        if self.dynamic_envs < 1:
            raise ValueError(f"hybrid.dynamic_envs must be >= 1, got {self.dynamic_envs}")
        if not 0.0 < self.min_weight <= 0.5:
            raise ValueError(f"hybrid.min_weight must be in (0, 0.5], got {self.min_weight}")
        if not self.min_weight <= self.alpha_init <= 1.0 - self.min_weight:
            raise ValueError(
                f"hybrid.alpha_init must be in [min_weight, 1 - min_weight] = "
                f"[{self.min_weight}, {1.0 - self.min_weight}], got {self.alpha_init}"
            )


class HybridRunnerState(NamedTuple):
    """Everything carried from one hybrid update to the next.

    Attributes:
        train_state: the shared policy/value network and its optimizer.
        obs_stats: the shared observation normalizer.
        static, dynamic: the parallel episodes of each market.
        alpha, beta: float32 scalars, the weights the next update uses.
        key: PRNG key.
    """

    train_state: TrainState
    obs_stats: RunningStats
    static: Lanes
    dynamic: Lanes
    alpha: jnp.ndarray
    beta: jnp.ndarray
    key: jax.Array


def adapt_weights(
    alpha: jnp.ndarray,
    beta: jnp.ndarray,
    loss_static: jnp.ndarray,
    loss_dynamic: jnp.ndarray,
    min_weight: float,
) -> tuple[jnp.ndarray, jnp.ndarray]:
    """One step of the SE-RL loss-weight rule (Eq. 5) on loss magnitudes.

    With ``m = |L| + 1e-8``: ``α' = α m_s / (m_s + m_d)``, ``β' = β m_d / (m_s + m_d)``,
    then ``α'' = α' / (α' + β')``, clipped to ``[min_weight, 1 - min_weight]``, and
    ``β'' = 1 - α''`` (see the module docstring for why).

    Args:
        alpha, beta: float32 scalars (or same-shape arrays), the current weights (> 0).
        loss_static, loss_dynamic: float32, the markets' losses (any sign).
        min_weight: lower clip of either weight, in (0, 0.5].

    Returns:
        ``(alpha, beta)``, float32, summing to 1.
    """
    m_s = jnp.abs(loss_static) + LOSS_EPS
    m_d = jnp.abs(loss_dynamic) + LOSS_EPS
    alpha = alpha * m_s / (m_s + m_d)
    beta = beta * m_d / (m_s + m_d)
    alpha = jnp.clip(alpha / (alpha + beta), min_weight, 1.0 - min_weight)
    return alpha, 1.0 - alpha


def check_lanes(config: PPOConfig, hybrid: HybridConfig) -> None:
    """Checks that the dynamic market's lanes split into minibatches and sibling groups.

    Raises:
        ValueError: if ``hybrid.dynamic_envs * config.num_steps`` is not divisible by
            ``config.num_minibatches``, or ``hybrid.dynamic_envs`` not by
            ``config.group_size``.
    """
    if (hybrid.dynamic_envs * config.num_steps) % config.num_minibatches:
        raise ValueError(
            f"ppo.num_minibatches={config.num_minibatches} must divide "
            f"hybrid.dynamic_envs*ppo.num_steps={hybrid.dynamic_envs * config.num_steps}"
        )
    if hybrid.dynamic_envs % config.group_size:
        raise ValueError(
            f"ppo.group_size={config.group_size} must divide "
            f"market.dynamic_envs={hybrid.dynamic_envs}"
        )


def weighted_loss(loss_fn, alpha: jnp.ndarray, beta: jnp.ndarray):
    """The hybrid loss ``α L_s + β L_d`` (SE-RL Eq. 5) of one market's loss.

    Args:
        loss_fn: ``(params, minibatch) -> (L, stats)``, float32 scalars (one market's
            PPO loss, e.g. :func:`serl_jax.rl.ppo.ppo_loss`).
        alpha, beta: float32 scalars, this update's weights (constants of the gradient).

    Returns:
        ``(params, (minibatch_static, minibatch_dynamic)) -> (α L_s + β L_d, stats)``
        for :func:`serl_jax.rl.ppo.run_epochs`: each stat ``α x_s + β x_d``, plus
        ``loss_static`` ``L_s`` and ``loss_dynamic`` ``L_d``.
    """

    def loss(params, minibatches):
        mb_s, mb_d = minibatches
        loss_s, stats_s = loss_fn(params, mb_s)
        loss_d, stats_d = loss_fn(params, mb_d)
        stats = {k: alpha * stats_s[k] + beta * stats_d[k] for k in stats_s}
        stats["loss_static"], stats["loss_dynamic"] = loss_s, loss_d
        return alpha * loss_s + beta * loss_d, stats

    return loss


def next_weights(
    hybrid: HybridConfig, alpha: jnp.ndarray, beta: jnp.ndarray, metrics: dict[str, jnp.ndarray]
) -> tuple[jnp.ndarray, jnp.ndarray]:
    """The next update's ``(α, β)``: :func:`adapt_weights` of this update's mean
    ``metrics["loss_static"]`` and ``metrics["loss_dynamic"]`` with ``hybrid.adapt``,
    else unchanged."""
    if not hybrid.adapt:
        return alpha, beta
    return adapt_weights(
        alpha, beta, metrics["loss_static"], metrics["loss_dynamic"], hybrid.min_weight
    )


def make_hybrid_trainer(
    config: PPOConfig,
    hybrid: HybridConfig,
    static_env,
    static_params,
    dynamic_env,
    dynamic_params,
    network: nn.Module,
    action_prior: ActionPrior = no_action_prior,
) -> Trainer:
    """Builds the pure hybrid-PPO functions (one network trained on two markets).

    Args:
        config: PPO hyper-parameters. ``num_envs`` is the static market's lane count and
            ``total_timesteps`` counts static-market steps only: the run has
            ``config.num_updates`` updates, each of ``num_envs * num_steps`` static and
            ``hybrid.dynamic_envs * num_steps`` dynamic steps.
        hybrid: the dynamic lane count and the weight rule.
        static_env, static_params: the static market (gymnax-style env, action in [0, 1],
            ``info["order_pa"]`` in bps at episode end).
        dynamic_env, dynamic_params: the dynamic market, same contract and observation
            size.
        network: a flax module honouring the network-slot contract.
        action_prior: raw observation ``[..., D]`` -> reference action logit ``[...]``.

    Returns:
        A :class:`serl_jax.rl.ppo.Trainer` over :class:`HybridRunnerState`. Per-update
        metrics (float32 scalars): ``total_loss`` (``α L_s + β L_d``), ``actor_loss``,
        ``value_loss``, ``entropy``, ``approx_kl``, ``clip_frac`` (each ``α x_s + β x_d``,
        averaged over minibatch steps), ``episodes``, ``episode_return`` and ``order_pa``
        (over the episodes finished in both markets; NaN if none), ``alpha`` and ``beta``
        (the weights used in this update), ``loss_static`` and ``loss_dynamic`` (mean
        per-market PPO losses), ``order_pa_static`` and ``order_pa_dynamic`` (bps; NaN if
        no episode of that market finished).

    Raises:
        ValueError: if ``hybrid.dynamic_envs * config.num_steps`` is not divisible by
            ``config.num_minibatches``, ``hybrid.dynamic_envs`` not by
            ``config.group_size``, or the two markets' observation sizes differ.
    """
    check_lanes(config, hybrid)
    obs_size = static_env.observation_space(static_params).shape[0]
    dynamic_obs_size = dynamic_env.observation_space(dynamic_params).shape[0]
    if dynamic_obs_size != obs_size:
        raise ValueError(f"dynamic market observation size {dynamic_obs_size} != static {obs_size}")
    tx = make_optimizer(config)

    def init(key: jax.Array) -> HybridRunnerState:
        key, key_net, key_static, key_dynamic = jax.random.split(key, 4)
        params = network.init(key_net, jnp.zeros((obs_size,), jnp.float32))
        static = reset_lanes(
            static_env, static_params, key_static, config.num_envs, config.group_size
        )
        dynamic = reset_lanes(
            dynamic_env, dynamic_params, key_dynamic, hybrid.dynamic_envs, config.group_size
        )
        return HybridRunnerState(
            train_state=TrainState.create(apply_fn=network.apply, params=params, tx=tx),
            obs_stats=RunningStats.create(obs_size).update(static.obs).update(dynamic.obs),
            static=static,
            dynamic=dynamic,
            alpha=jnp.float32(hybrid.alpha_init),
            beta=jnp.float32(1.0 - hybrid.alpha_init),
            key=key,
        )

    def update(runner: HybridRunnerState) -> tuple[HybridRunnerState, dict[str, jnp.ndarray]]:
        alpha, beta = runner.alpha, runner.beta
        params = runner.train_state.params
        rollout = functools.partial(collect_rollout, config, network, action_prior)
        static, obs_stats, key, batch_s, episodes_s = rollout(
            static_env, static_params, params, runner.obs_stats, runner.static, runner.key
        )
        dynamic, obs_stats, key, batch_d, episodes_d = rollout(
            dynamic_env, dynamic_params, params, obs_stats, runner.dynamic, key
        )

        loss_fn = weighted_loss(functools.partial(ppo_loss, config, network), alpha, beta)
        train_state, key, losses = run_epochs(
            config, runner.train_state, key, (batch_s, batch_d), loss_fn
        )
        metrics = {k: v.mean() for k, v in losses.items()}
        next_alpha, next_beta = next_weights(hybrid, alpha, beta, metrics)
        metrics.update(episode_metrics(jax.tree.map(jnp.add, episodes_s, episodes_d)))
        metrics["order_pa_static"] = episode_metrics(episodes_s)["order_pa"]
        metrics["order_pa_dynamic"] = episode_metrics(episodes_d)["order_pa"]
        metrics["alpha"], metrics["beta"] = alpha, beta
        runner = HybridRunnerState(
            train_state, obs_stats, static, dynamic, next_alpha, next_beta, key
        )
        return runner, metrics

    return assemble_trainer(init, update, config.num_updates)
