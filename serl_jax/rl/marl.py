"""IPPO and MAPPO for N execution agents, in the PureJaxRL layout of :mod:`serl_jax.rl.ppo`.

Both train one policy with parameters shared by the agents (the network slot), each agent
seeing its own observation with its one-hot agent index appended (so a shared policy can
still act differently per agent), on the leading agent axis of
:class:`~serl_jax.envs.multi_agent.MultiAgentExecutionEnv` (``obs [E, N, D]`` for E
parallel markets):

- **IPPO** (de Witt et al. 2020, "Is Independent Learning All You Need in the StarCraft
  Multi-Agent Challenge?"): every agent's value is the network slot's own critic on its
  own observation.
- **MAPPO** (Yu et al. 2022, "The Surprising Effectiveness of PPO in Cooperative
  Multi-Agent Games"): a centralized critic (:class:`CentralCritic`) reads the joint
  observation, all agents' observations concatenated, with the agent's one-hot index, and
  gives each agent's value; the actor stays decentralized (its own observation only), so
  the trained policy runs without the others' observations.

Communication (LLM4Communication's slot): with a ``communication`` module
``message(obs [..., D]) -> m [..., M]``, each agent sends the message of its
(normalized) observation, and at the next step every agent's policy input gets the mean
of the other agents' messages appended (zeros at an episode's first step). The
transition keeps the senders' observations, so the loss recomputes the messages and the
policy gradient trains the message module through the receivers (one step of
differentiable communication, as DIAL: Foerster et al. 2016, "Learning to Communicate
with Deep Multi-Agent Reinforcement Learning").

GAE (:func:`~serl_jax.rl.ppo.calculate_gae`) runs per agent. Steps an agent did not take
(``info["active"]`` false: outside its window) are masked out of the loss, and their
``done`` is set so no advantage leaks across them. With ``MARLConfig.team_reward`` every
agent is trained on the team reward (``info["team_reward"]``, the cooperative setting of
the ``team`` scenario).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax.training.train_state import TrainState

from serl_jax.components.communication import message_size
from serl_jax.rl.distributions import LogitNormal
from serl_jax.rl.normalization import RunningStats
from serl_jax.rl.ppo import (
    ActionPrior,
    PPOConfig,
    Trainer,
    assemble_trainer,
    calculate_gae,
    lane_keys,
    make_optimizer,
    no_action_prior,
    ppo_objective,
    run_epochs,
    sibling_baseline,
)

ALGORITHMS = ("ippo", "mappo")


@dataclasses.dataclass(frozen=True)
class MARLConfig:
    """What makes the multi-agent trainer IPPO or MAPPO (static).

    Attributes:
        algorithm: ``"ippo"`` (each agent's critic on its own observation) or ``"mappo"``
            (a centralized critic on the joint observation).
        team_reward: train every agent on ``info["team_reward"]`` instead of its own.
        critic_hidden_sizes: hidden widths of MAPPO's centralized critic.

    Raises:
        ValueError: for an unknown algorithm or an empty critic.
    """

    algorithm: str = "ippo"
    team_reward: bool = False
    critic_hidden_sizes: tuple[int, ...] = (128, 128)

    def __post_init__(self):
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"marl.algorithm must be one of {ALGORITHMS}, got {self.algorithm!r}")
        if not self.critic_hidden_sizes or min(self.critic_hidden_sizes) < 1:
            raise ValueError(
                f"marl.critic_hidden_sizes must be positive widths, got {self.critic_hidden_sizes}"
            )


class CentralCritic(nn.Module):
    """MAPPO's centralized value: ``[..., N * D + N]`` joint inputs -> ``[...]`` values.

    Attributes:
        hidden_sizes: widths of the tanh MLP's hidden layers.
    """

    hidden_sizes: Sequence[int] = (128, 128)

    @nn.compact
    def __call__(self, joint: jnp.ndarray) -> jnp.ndarray:
        x = joint
        for width in self.hidden_sizes:
            x = nn.tanh(nn.Dense(width, kernel_init=nn.initializers.glorot_uniform())(x))
        return nn.Dense(1)(x)[..., 0]


def with_agent_ids(obs: jnp.ndarray) -> jnp.ndarray:
    """``[..., N, D]`` -> ``[..., N, D + N]``: each agent's observation and its one-hot
    index (the input of a policy shared by the agents)."""
    n_agents = obs.shape[-2]
    ids = jnp.broadcast_to(jnp.eye(n_agents, dtype=obs.dtype), obs.shape[:-1] + (n_agents,))
    return jnp.concatenate([obs, ids], axis=-1)


def joint_observation(obs: jnp.ndarray) -> jnp.ndarray:
    """``[..., N, D]`` -> ``[..., N, N * D + N]``: for each agent, every agent's
    observation (in agent order) and its own one-hot index (MAPPO's critic input)."""
    n_agents = obs.shape[-2]
    joint = obs.reshape(obs.shape[:-2] + (1, -1))
    joint = jnp.broadcast_to(joint, obs.shape[:-2] + (n_agents, joint.shape[-1]))
    ids = jnp.broadcast_to(jnp.eye(n_agents, dtype=obs.dtype), obs.shape[:-1] + (n_agents,))
    return jnp.concatenate([joint, ids], axis=-1)


def received_messages(communication: nn.Module, params, senders: jnp.ndarray) -> jnp.ndarray:
    """``[..., N, D]`` senders' observations -> ``[..., N, M]``: for each agent the mean
    of the other agents' messages (0 for a single agent)."""
    messages = communication.apply(params, senders)
    n_agents = senders.shape[-2]
    total = messages.sum(axis=-2, keepdims=True)
    return (total - messages) / max(n_agents - 1, 1)


class MATransition(NamedTuple):
    """One step of a multi-agent rollout (``[num_steps, E, N]`` leading axes once
    stacked; flattened to ``[num_steps, E * N]`` for the minibatches). ``senders`` holds,
    per agent, every agent's observation of the step before (the messages it receives;
    one zero column without communication)."""

    done: jnp.ndarray
    mask: jnp.ndarray
    action: jnp.ndarray
    value: jnp.ndarray
    reward: jnp.ndarray
    log_prob: jnp.ndarray
    obs: jnp.ndarray
    joint: jnp.ndarray
    senders: jnp.ndarray
    prior_logit: jnp.ndarray


class MABatch(NamedTuple):
    traj: MATransition
    advantages: jnp.ndarray
    targets: jnp.ndarray


class MARunnerState(NamedTuple):
    """Everything carried from one update to the next (``obs`` raw ``[E, N, D]``)."""

    train_state: TrainState
    env_state: Any
    obs: jnp.ndarray
    observing: jnp.ndarray
    senders: jnp.ndarray
    obs_stats: RunningStats
    episode_return: jnp.ndarray
    key: jax.Array


def make_marl_trainer(
    config: PPOConfig,
    marl: MARLConfig,
    env,
    env_params,
    network: nn.Module,
    action_prior: ActionPrior = no_action_prior,
    communication: nn.Module | None = None,
) -> Trainer:
    """Builds IPPO or MAPPO for a multi-agent environment.

    Args:
        config: PPO hyper-parameters; ``num_envs`` is the number of parallel markets E
            (each with N agents), ``group_size`` groups markets that reset and step with
            one key (sibling baseline across markets, per agent).
        marl: the algorithm (:class:`MARLConfig`).
        env: a multi-agent environment with ``num_agents``, ``observation_size(params)``,
            ``reset(key, params) -> (obs [N, D], state)`` and ``step(key, state,
            actions [N], params) -> (obs [N, D], state, reward [N], terminated [N],
            truncated [N], info)``; ``info`` may have ``active`` ``bool[N]`` (steps to
            learn from; all if absent), ``observing`` ``bool[N]`` (observations to
            normalize with), ``order_pa`` ``float32[N]`` (bps, for the metrics),
            ``episode_done`` ``bool`` (the episode reset; else when every agent is
            done) and, with ``marl.team_reward``, ``team_reward`` ``float32``.
        env_params: its parameters.
        network: the network slot (shared by the agents; its input is an agent's
            observation, its one-hot index and the received messages, ``D + N + M``).
        action_prior: raw agent observation ``[..., D]`` -> reference action logit.
        communication: the communication slot, a flax module ``[..., D] -> [..., M]``
            (module docstring), trained with the policy; None: no messages.

    Returns:
        A :class:`~serl_jax.rl.ppo.Trainer`. Per-update metrics (float32 scalars):
        ``agent_episodes`` (agents' orders finished in the rollout), ``episode_return``
        and ``order_pa`` (bps; means over them, NaN if none), the loss statistics of
        :func:`~serl_jax.rl.ppo.ppo_loss` and ``active_share`` (share of agent-steps
        trained on).
    """
    n_agents = env.num_agents
    obs_size = env.observation_size(env_params)
    critic = CentralCritic(tuple(marl.critic_hidden_sizes))
    central = marl.algorithm == "mappo"
    tx = make_optimizer(config)
    step_batch = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    reset_batch = jax.vmap(env.reset, in_axes=(0, None))

    n_message = 0 if communication is None else message_size(communication, obs_size)

    def actor_inputs(params, x, senders):
        """``[..., N, D + N (+ M)]``: observations, agent ids and received messages."""
        inputs = with_agent_ids(x)
        if communication is None:
            return inputs
        received = received_messages(communication, params["communication"], senders)
        return jnp.concatenate([inputs, received], axis=-1)

    def evaluate(params, x, senders):
        """Policy outputs, value and the critic's input for normalized obs ``[..., N, D]``
        and the senders' observations of the step before."""
        logits, local_value = network.apply(params["actor"], actor_inputs(params, x, senders))
        if not central:  # no critic input to keep (one zero column: shapes stay non-empty)
            return logits, local_value, jnp.zeros(x.shape[:-1] + (1,), x.dtype)
        joint = joint_observation(x)
        return logits, critic.apply(params["critic"], joint), joint

    def normalize(stats, obs):
        return stats.normalize(obs) if config.normalize_obs else obs

    def init(key: jax.Array) -> MARunnerState:
        key, key_actor, key_critic, key_comm, key_env = jax.random.split(key, 5)
        actor_size = obs_size + n_agents + n_message
        params = {"actor": network.init(key_actor, jnp.zeros((actor_size,), jnp.float32))}
        if communication is not None:
            probe = jnp.zeros((obs_size,), jnp.float32)
            params["communication"] = communication.init(key_comm, probe)
        if central:
            joint_size = n_agents * obs_size + n_agents
            params["critic"] = critic.init(key_critic, jnp.zeros((joint_size,), jnp.float32))
        train_state = TrainState.create(apply_fn=network.apply, params=params, tx=tx)
        keys = lane_keys(key_env, config.num_envs, config.group_size)
        obs, env_state = reset_batch(keys, env_params)
        observing = jnp.any(obs != 0, axis=-1)
        stats = RunningStats.create(obs_size).update(
            obs.reshape(-1, obs_size), observing.reshape(-1)
        )
        zeros = jnp.zeros((config.num_envs, n_agents), jnp.float32)
        senders = jnp.zeros_like(obs)  # nothing was said before the first step
        return MARunnerState(train_state, env_state, obs, observing, senders, stats, zeros, key)

    def rollout(runner: MARunnerState):
        params = runner.train_state.params

        def _env_step(carry, _):
            env_state, obs, observing, senders, stats, episode_return, key = carry
            key, key_act, key_step = jax.random.split(key, 3)
            x = normalize(stats, obs)
            logits, value, joint = evaluate(params, x, senders)
            prior_logit = action_prior(obs)
            dist = LogitNormal.from_logits(logits, prior_logit)
            action = dist.sample(key_act)
            step_keys = lane_keys(key_step, config.num_envs, config.group_size)
            next_obs, env_state, reward, terminated, truncated, info = step_batch(
                step_keys, env_state, LogitNormal.action(action), env_params
            )
            active = info.get("active", jnp.ones_like(terminated))
            next_observing = info.get("observing", jnp.ones_like(terminated))
            if marl.team_reward:
                reward = jnp.broadcast_to(info["team_reward"][:, None], reward.shape)
            ended = jnp.logical_and(jnp.logical_or(terminated, truncated), active)
            episode_done = info.get("episode_done", jnp.logical_or(terminated, truncated).all(-1))
            # an inactive step ends the chain: no advantage flows across it
            done = jnp.logical_or(ended, ~active)
            if config.normalize_obs:
                stats = stats.update(next_obs.reshape(-1, obs_size), next_observing.reshape(-1))
            episode_return = episode_return + jnp.where(active, reward, 0.0)
            order_pa = info.get("order_pa", jnp.zeros_like(reward))
            if communication is None:
                kept_senders = jnp.zeros(x.shape[:-1] + (1,), x.dtype)
            else:  # every agent's row keeps all senders: [E, N, N, D]
                kept_senders = jnp.broadcast_to(
                    senders[:, None], (*x.shape[:2], *senders.shape[1:])
                )
            transition = MATransition(
                done=done,
                mask=active,
                action=action,
                value=value,
                reward=reward,
                log_prob=dist.log_prob(action),
                obs=x,
                joint=joint,
                senders=kept_senders,
                prior_logit=prior_logit,
            )
            finished = (ended, episode_return, order_pa)
            episode_return = jnp.where(ended, 0.0, episode_return)
            # what was observed now is said at the next step, unless the episode reset
            next_senders = jnp.where(episode_done[:, None, None], 0.0, x)
            carry = (
                env_state, next_obs, next_observing, next_senders, stats, episode_return, key
            )  # fmt: skip
            return carry, (transition, finished)

        carry = (
            runner.env_state,
            runner.obs,
            runner.observing,
            runner.senders,
            runner.obs_stats,
            runner.episode_return,
            runner.key,
        )
        carry, (traj, (ended, returns, order_pa)) = jax.lax.scan(
            _env_step, carry, None, config.num_steps
        )
        env_state, obs, observing, senders, stats, episode_return, key = carry
        _, last_value, _ = evaluate(params, normalize(stats, obs), senders)
        advantages = calculate_gae(
            traj.reward, traj.value, traj.done, last_value, config.gamma, config.gae_lambda
        )
        targets = advantages + traj.value
        # the sibling baseline runs across markets ([..., E] last), per agent
        advantages = jnp.moveaxis(
            sibling_baseline(jnp.moveaxis(advantages, 1, -1), config.group_size), -1, 1
        )
        count = ended.sum()

        def mean_or_nan(total):
            return jnp.where(count > 0, total / count, jnp.nan)

        episode_stats = {
            "agent_episodes": count.astype(jnp.float32),
            "episode_return": mean_or_nan((returns * ended).sum()),
            "order_pa": mean_or_nan((order_pa * ended).sum()),
            "active_share": traj.mask.mean(),
        }
        runner = runner._replace(
            env_state=env_state,
            obs=obs,
            observing=observing,
            senders=senders,
            obs_stats=stats,
            episode_return=episode_return,
            key=key,
        )
        return runner, MABatch(traj, advantages, targets), episode_stats

    def loss_fn(params, minibatches):
        (minibatch,) = minibatches
        t = minibatch.traj
        logits, value = evaluate_flat(params, t)
        dist = LogitNormal.from_logits(logits, t.prior_logit)
        return ppo_objective(config, dist, value, minibatch, mask=t.mask)

    def evaluate_flat(params, t: MATransition):
        """Policy outputs and values of flat minibatch rows (``t.obs`` ``[B, D + N]``, the
        normalized observations with the agent ids appended; ``t.senders`` ``[B, N, D]``
        the messages' sources; ``t.joint`` the critic's input)."""
        inputs = t.obs
        if communication is not None:
            own = t.obs[..., -n_agents:]  # the row's one-hot agent index
            every = received_messages(communication, params["communication"], t.senders)
            received = (own[..., None] * every).sum(axis=-2)  # [B, M]: this row's agent's
            inputs = jnp.concatenate([inputs, received], axis=-1)
        logits, local_value = network.apply(params["actor"], inputs)
        if not central:
            return logits, local_value
        return logits, critic.apply(params["critic"], t.joint)

    def update(runner: MARunnerState):
        runner, batch, episode_stats = rollout(runner)
        # the actor's inputs with the agent ids, so flat minibatch rows are self-contained
        traj = batch.traj._replace(obs=with_agent_ids(batch.traj.obs))

        def flatten(x):  # [T, E, N, ...] -> [T, E * N, ...]
            return x.reshape((x.shape[0], x.shape[1] * x.shape[2]) + x.shape[3:])

        flat = jax.tree.map(flatten, MABatch(traj, batch.advantages, batch.targets))
        train_state, key, losses = run_epochs(
            config, runner.train_state, runner.key, (flat,), loss_fn
        )
        metrics = {k: v.mean() for k, v in losses.items()}
        metrics.update(episode_stats)
        return runner._replace(train_state=train_state, key=key), metrics

    return assemble_trainer(init, update, config.num_updates)


def make_marl_policy(
    network: nn.Module,
    normalize_obs: bool = True,
    action_prior: ActionPrior = no_action_prior,
    communication: nn.Module | None = None,
):
    """The trained agents as a multi-agent policy of
    :func:`~serl_jax.evaluation.multi_agent_rollout`: ``policy(PPOPolicyParams, key,
    obs [N, D], state, params, memory) -> (actions float32[N], memory)``, each agent's
    median action ``sigmoid(loc)`` of the shared network on its (normalized) observation
    with its one-hot index and, with ``communication``, the mean of the other agents'
    messages of the minute before (``memory``: their normalized observations then).

    ``PPOPolicyParams.params`` holds the trainer's parameters (``{"actor": ...}``, and
    ``"critic"`` for MAPPO, which acting does not use, ``"communication"``).
    """

    def policy(policy_params, key: jax.Array, obs, state, env_params, memory):
        del key, state, env_params
        x = policy_params.obs_stats.normalize(obs) if normalize_obs else obs
        inputs = with_agent_ids(x)
        if communication is not None:
            params = policy_params.params["communication"]
            received = received_messages(communication, params, memory)
            inputs = jnp.concatenate([inputs, received], axis=-1)
        logits, _ = network.apply(policy_params.params["actor"], inputs)
        return LogitNormal.from_logits(logits, action_prior(obs)).median_action(), x

    return policy
