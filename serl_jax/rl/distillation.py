"""Oracle policy distillation (OPD): a teacher that sees the future guides PPO.

Fang et al. 2021 (AAAI, "Universal Trading for Order Execution with Oracle Policy
Distillation") train a *teacher* with perfect information about the day, then a
*student* on honest observations whose PPO loss gets a supervision term: the negative
log-likelihood of the teacher's action at the student's own states,
``L = L_PPO + λ L_d``, ``L_d = -E_t[log π_S(a_t^T | s_t)]``. Qlib's execution examples
implement it (they report OPDS +0.48 bps of PA over TWAP, their plain PPO −1.09).

Here the teacher is a policy trained with the diagnostic volume leak
(``EnvParams.diagnostic_volume_leak``: the current minute's true volume, which the
hindsight oracle's edge is made of), evaluated on the *same* environment states the
student visits, through the leaked observation of those states. Both policies are
Gaussian in the action logit (:class:`~serl_jax.rl.distributions.LogitNormal`), or both
categorical over the same discrete action set (``network.action_multiples``,
:class:`~serl_jax.rl.distributions.PriorMultiples`, OPD's own setting), so ``L_d`` is the
cross-entropy of the student under the teacher's distribution (``cross_entropy``): OPD's
negative log-likelihood averaged over the teacher's actions, and exactly it for a
deterministic teacher.

A teacher trained on the student's own honest observations plugs in the same way
(self-distillation; ``ppo.distill_teacher=honest``). On the samples it does as well as
the oracle teacher (docs/results/learning.md): what distillation adds there does
not come from the oracle's information.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax

from serl_jax.rl.distributions import ActionDistribution
from serl_jax.rl.normalization import RunningStats
from serl_jax.rl.ppo import ActionPrior, TeacherPolicy, policy_distribution


def make_teacher(
    env,
    teacher_env_params,
    network: nn.Module,
    params: Any,
    obs_stats: RunningStats,
    normalize_obs: bool,
    action_prior: ActionPrior,
) -> TeacherPolicy:
    """The teacher's action distribution at a batch of the student's environment states.

    Args:
        env: the student's environment; its ``get_obs(state, params)`` builds the
            teacher's observation of a state.
        teacher_env_params: the env parameters the teacher was trained with (e.g. the
            student's with ``diagnostic_volume_leak=True``); the states must come from
            the same data.
        network, params, obs_stats, normalize_obs, action_prior: the trained teacher
            (as :func:`serl_jax.rl.policy.make_ppo_policy` takes them).

    Returns:
        ``teacher(env_states) -> LogitNormal | PriorMultiples`` (the teacher network's
        policy: ``[N]`` ``loc`` and ``scale``, or ``[N, K]`` logits) for a batch of ``N``
        states (leading axis ``[N]``). The teacher is fixed: no gradient flows into it.
    """
    observe = jax.vmap(env.get_obs, in_axes=(0, None))

    def teacher(env_states) -> ActionDistribution:
        obs = observe(env_states, teacher_env_params)
        dist, _ = policy_distribution(network, params, obs_stats, obs, normalize_obs, action_prior)
        return jax.lax.stop_gradient(dist)

    return teacher
