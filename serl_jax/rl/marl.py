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

Hybrid training (``make_marl_trainer(..., static=StaticMarket(...))``): the same agents
train on the static market (:class:`~serl_jax.envs.static_multi_agent.StaticMultiAgentEnv`,
replayed bars no order moves) and the dynamic one at once, minimizing SE-RL's (Eq. 5)
``α L_static + β L_dynamic`` with the weights of :mod:`serl_jax.rl.hybrid`, one network
(+ critic, + message module) and one observation normalizer for both.
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
from serl_jax.rl.hybrid import HybridConfig, check_lanes, next_weights, weighted_loss
from serl_jax.rl.networks import network_policy
from serl_jax.rl.normalization import RunningStats
from serl_jax.rl.ppo import (
    ActionPrior,
    EpisodeSums,
    PPOConfig,
    Trainer,
    assemble_trainer,
    calculate_gae,
    episode_metrics,
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


class MALanes(NamedTuple):
    """The E parallel markets of one environment between rollouts.

    Attributes:
        env_state: the markets' states (leading axis ``[E]``).
        obs: ``float32[E, N, D]`` raw (unnormalized) current observations.
        observing: ``bool[E, N]`` the observations that are real (normalizer mask).
        senders: ``float32[E, N, D]`` the normalized observations the agents' next
            messages come from (zeros at an episode's first step).
        episode_return: ``float32[E, N]`` each agent's reward summed so far in its order.
    """

    env_state: Any
    obs: jnp.ndarray
    observing: jnp.ndarray
    senders: jnp.ndarray
    episode_return: jnp.ndarray


class MARunnerState(NamedTuple):
    """Everything carried from one update to the next.

    Attributes:
        train_state: the shared network(s) and their optimizer.
        obs_stats: the observation normalizer (fed by every market).
        lanes: the markets of ``env`` (the dynamic market).
        key: PRNG key.
        static: hybrid training only: the static markets; else None.
        alpha, beta: hybrid training only: float32 scalars, the weights the next update
            uses; else None.
    """

    train_state: TrainState
    obs_stats: RunningStats
    lanes: MALanes
    key: jax.Array
    static: MALanes | None = None
    alpha: jnp.ndarray | None = None
    beta: jnp.ndarray | None = None


class AgentEpisodeSums(NamedTuple):
    """Sums over one rollout of one market.

    Attributes:
        episodes: the agents' orders that finished (each agent's order one episode).
        active: float32 scalar, agent-steps trained on.
        steps: float32 scalar, all agent-steps.
    """

    episodes: EpisodeSums
    active: jnp.ndarray
    steps: jnp.ndarray


def agent_metrics(sums: AgentEpisodeSums) -> dict[str, jnp.ndarray]:
    """Float32 scalars ``agent_episodes``, ``episode_return`` and ``order_pa`` (bps; means
    over the finished orders, NaN if none) and ``active_share``."""
    metrics = episode_metrics(sums.episodes)
    metrics["agent_episodes"] = metrics.pop("episodes")
    metrics["active_share"] = sums.active / sums.steps
    return metrics


class StaticMarket(NamedTuple):
    """The static half of hybrid multi-agent training (:func:`make_marl_trainer`).

    Attributes:
        env: the static multi-agent environment
            (:class:`~serl_jax.envs.static_multi_agent.StaticMultiAgentEnv`), same agents
            and observation size as the dynamic one.
        params: its :class:`~serl_jax.envs.execution.EnvParams`.
        hybrid: the dynamic lane count and the loss-weight rule
            (:class:`~serl_jax.rl.hybrid.HybridConfig`).
    """

    env: Any
    params: Any
    hybrid: HybridConfig


def make_marl_trainer(
    config: PPOConfig,
    marl: MARLConfig,
    env,
    env_params,
    network: nn.Module,
    action_prior: ActionPrior = no_action_prior,
    communication: nn.Module | None = None,
    static: StaticMarket | None = None,
) -> Trainer:
    """Builds IPPO or MAPPO for a multi-agent environment, or for two at once (hybrid).

    Hybrid (``static`` given): one policy (and critic, and message module) trains on the
    static market and the dynamic one ``env`` at once, minimizing ``α L_s + β L_d`` at
    every minibatch step with ``α, β`` adapted between updates (SE-RL Eq. 5, exactly as
    single-agent :mod:`serl_jax.rl.hybrid`: :func:`~serl_jax.rl.hybrid.weighted_loss`,
    :func:`~serl_jax.rl.hybrid.next_weights`); each market is rolled out and has GAE
    and advantage normalization on its own; one observation normalizer is fed by both.

    Args:
        config: PPO hyper-parameters; ``num_envs`` is the number of parallel markets E
            (each with N agents) of ``env``, or in hybrid training of the static market
            (the dynamic one has ``static.hybrid.dynamic_envs``), ``group_size`` groups
            markets that reset and step with one key (sibling baseline across markets,
            per agent).
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
        static: the static market of hybrid training (:class:`StaticMarket`); None: train
            on ``env`` only.

    Returns:
        A :class:`~serl_jax.rl.ppo.Trainer` over :class:`MARunnerState`. Per-update
        metrics (float32 scalars): ``agent_episodes`` (agents' orders finished in the
        rollout), ``episode_return`` and ``order_pa`` (bps; means over them, NaN if
        none), the loss statistics of :func:`~serl_jax.rl.ppo.ppo_loss` and
        ``active_share`` (share of agent-steps trained on), over both markets in hybrid
        training (the loss statistics ``α x_s + β x_d``), which adds ``alpha`` and
        ``beta`` (the weights of this update), ``loss_static`` and ``loss_dynamic``
        (mean per-market losses) and ``order_pa_static`` and ``order_pa_dynamic`` (bps;
        NaN if no order of that market finished).

    Raises:
        ValueError: in hybrid training, if the static market's agent count or
            observation size differs from ``env``'s, or its lanes do not split
            (:func:`~serl_jax.rl.hybrid.check_lanes`).
    """
    n_agents = env.num_agents
    obs_size = env.observation_size(env_params)
    critic = CentralCritic(tuple(marl.critic_hidden_sizes))
    central = marl.algorithm == "mappo"
    tx = make_optimizer(config)
    dynamic_envs = config.num_envs
    if static is not None:
        check_lanes(config, static.hybrid)
        dynamic_envs = static.hybrid.dynamic_envs
        if static.env.num_agents != n_agents:
            raise ValueError(
                f"static market has {static.env.num_agents} agents, dynamic {n_agents}"
            )
        static_size = static.env.observation_size(static.params)
        if static_size != obs_size:
            raise ValueError(f"static market observation size {static_size} != dynamic {obs_size}")

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

    def reset(market_env, market_params, key, num_envs) -> MALanes:
        """``num_envs`` fresh markets (keys from :func:`~serl_jax.rl.ppo.lane_keys`)."""
        keys = lane_keys(key, num_envs, config.group_size)
        obs, env_state = jax.vmap(market_env.reset, in_axes=(0, None))(keys, market_params)
        observing = jnp.any(obs != 0, axis=-1)
        zeros = jnp.zeros((num_envs, n_agents), jnp.float32)
        senders = jnp.zeros_like(obs)  # nothing was said before the first step
        return MALanes(env_state, obs, observing, senders, zeros)

    def observe(stats, lanes: MALanes) -> RunningStats:
        return stats.update(lanes.obs.reshape(-1, obs_size), lanes.observing.reshape(-1))

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
        lanes = reset(env, env_params, key_env, dynamic_envs)
        stats = observe(RunningStats.create(obs_size), lanes)
        if static is None:
            return MARunnerState(train_state, stats, lanes, key)
        key_static = jax.random.fold_in(key_env, 1)
        static_lanes = reset(static.env, static.params, key_static, config.num_envs)
        alpha = jnp.float32(static.hybrid.alpha_init)
        return MARunnerState(
            train_state, observe(stats, static_lanes), lanes, key, static_lanes, alpha, 1.0 - alpha
        )

    def rollout(market_env, market_params, params, stats, lanes: MALanes, key):
        """``config.num_steps`` steps of every market of ``lanes``, then GAE per agent.

        Returns:
            ``(lanes, stats, key, batch, sums)``: ``batch`` an :class:`MABatch` with
            ``[num_steps, E * N]`` leading axes (the actor's inputs with the agent ids,
            so flat minibatch rows are self-contained), ``sums`` its
            :class:`AgentEpisodeSums`.
        """
        num_envs = lanes.obs.shape[0]
        step_batch = jax.vmap(market_env.step, in_axes=(0, 0, 0, None))

        def _env_step(carry, _):
            env_state, obs, observing, senders, stats, episode_return, key = carry
            key, key_act, key_step = jax.random.split(key, 3)
            x = normalize(stats, obs)
            logits, value, joint = evaluate(params, x, senders)
            prior_logit = action_prior(obs)
            dist = network_policy(network, logits, prior_logit)
            action = dist.sample(key_act)
            step_keys = lane_keys(key_step, num_envs, config.group_size)
            next_obs, env_state, reward, terminated, truncated, info = step_batch(
                step_keys, env_state, dist.action(action), market_params
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
            lanes.env_state,
            lanes.obs,
            lanes.observing,
            lanes.senders,
            stats,
            lanes.episode_return,
            key,
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
        sums = AgentEpisodeSums(
            episodes=EpisodeSums(
                count=ended.sum(),
                episode_return=(returns * ended).sum(),
                order_pa=(order_pa * ended).sum(),
            ),
            active=traj.mask.sum().astype(jnp.float32),
            steps=jnp.float32(traj.mask.size),
        )
        lanes = MALanes(env_state, obs, observing, senders, episode_return)
        # the actor's inputs with the agent ids, so flat minibatch rows are self-contained
        traj = traj._replace(obs=with_agent_ids(traj.obs))

        def flatten(x):  # [T, E, N, ...] -> [T, E * N, ...]
            return x.reshape((x.shape[0], x.shape[1] * x.shape[2]) + x.shape[3:])

        batch = jax.tree.map(flatten, MABatch(traj, advantages, targets))
        return lanes, stats, key, batch, sums

    def market_loss(params, minibatch):
        """One market's masked PPO loss of a flat minibatch."""
        t = minibatch.traj
        logits, value = evaluate_flat(params, t)
        dist = network_policy(network, logits, t.prior_logit)
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
        params = runner.train_state.params
        lanes, stats, key, batch, sums = rollout(
            env, env_params, params, runner.obs_stats, runner.lanes, runner.key
        )
        if static is None:
            train_state, key, losses = run_epochs(
                config, runner.train_state, key, (batch,), lambda p, mb: market_loss(p, mb[0])
            )
            metrics = {k: v.mean() for k, v in losses.items()}
            metrics.update(agent_metrics(sums))
            runner = MARunnerState(train_state, stats, lanes, key)
            return runner, metrics
        static_lanes, stats, key, batch_s, sums_s = rollout(
            static.env, static.params, params, stats, runner.static, key
        )
        alpha, beta = runner.alpha, runner.beta
        train_state, key, losses = run_epochs(
            config,
            runner.train_state,
            key,
            (batch_s, batch),
            weighted_loss(market_loss, alpha, beta),
        )
        metrics = {k: v.mean() for k, v in losses.items()}
        next_alpha, next_beta = next_weights(static.hybrid, alpha, beta, metrics)
        metrics.update(agent_metrics(jax.tree.map(jnp.add, sums_s, sums)))
        metrics["order_pa_static"] = agent_metrics(sums_s)["order_pa"]
        metrics["order_pa_dynamic"] = agent_metrics(sums)["order_pa"]
        metrics["alpha"], metrics["beta"] = alpha, beta
        runner = MARunnerState(train_state, stats, lanes, key, static_lanes, next_alpha, next_beta)
        return runner, metrics

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
    deterministic action (the median ``sigmoid(loc)``, or a discrete set's most probable
    multiple) of the shared network on its (normalized) observation
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
        return network_policy(network, logits, action_prior(obs)).deterministic_action(), x

    return policy
