"""A peer, side by side: Stable-Baselines3 PPO (PyTorch, CPU) and this project's PPO.

Both learners train on the same training days of one dataset, in the same environment
(one :class:`~serl_jax.envs.execution.EnvParams` of the static market, the default
reward) and for the same number of env steps, in one run:

- **SB3**: ``stable_baselines3.PPO`` (``MlpPolicy``, ``device="cpu"``) on this project's
  Gymnasium vector environment (:class:`serl_jax.gym.ExecutionVectorEnv`, one jitted
  ``vmap`` step for all lanes), through :class:`SB3VecEnv` (SB3 2.9 has no wrapper for a
  ``gymnasium.vector.VectorEnv``) and SB3's ``VecNormalize`` (observations only);
- **ours**: :func:`serl_jax.experiment.train_policy` with one seed (``run.num_seeds=1``:
  no selection on validation days, as SB3 has none).

Equal env steps: the requested ``--steps`` rounded up to whole rollouts of ``num_envs x
num_steps`` (SB3's ``learn`` also finishes its last rollout), counted for SB3 by the
adapter (lanes x ``step`` calls) and for ours by :class:`~serl_jax.experiment.TrainedPolicy`.

Same settings (from the config's ``ppo`` and ``network`` sections): ``n_envs`` 128,
``n_steps`` 240, ``n_epochs`` 4, minibatches of ``128 x 240 / 8`` = 3,840, ``gamma`` 1,
``gae_lambda`` 0.99, learning rate 3e-4 annealed linearly to 0, clip 0.2, entropy 0.001,
gradient-norm clip 0.5, Adam eps 1e-5, separate actor and critic MLPs 64-64 tanh,
advantages normalized per minibatch, observations normalized by running mean and variance
clipped at 10 (SB3's ``VecNormalize``, ours ``ppo.normalize_obs``).

What differs, and why:

- **Policy.** Ours is a residual logit-normal policy around the VWAP schedule's pace
  (``network.action_prior``: the action is ``sigmoid(z)``, ``z ~ N(prior(obs) + mu,
  sigma)``, so the untrained policy already trades VWAP's schedule); SB3 has no
  equivalent and uses its Gaussian policy on the action itself (state-independent log
  std, initialized at 0), clipped to the ``Box(0, 1)`` action space; its deterministic
  action is ``clip(mean, 0, 1)``. This is the gap the comparison measures, together with:
- **Sibling lanes.** Ours runs groups of ``ppo.group_size`` (8) lanes on the same order
  and day with a leave-one-out advantage baseline (common random numbers); SB3's lanes are
  independent (its rollout buffer has no such baseline).
- **Initialization.** Ours Glorot-uniform with a near-zero policy head and sigma 0.5;
  SB3 its orthogonal init (gains sqrt 2, 0.01 for the policy head, 1 for the value).
- **Value loss.** Ours ``0.5 max((V - G)^2, (V_clip - G)^2)`` with ``vf_coef`` 0.5; SB3
  the squared error of its clipped prediction (``clip_range_vf`` 0.2) with ``vf_coef``
  0.25, the same scale.
- **Annealing.** Ours lowers the learning rate every gradient step; SB3 once per rollout,
  here to the mean of ours over that rollout (SB3's own schedule would give its last
  rollout a rate of 0).

Test: both deterministic policies and TWAP on the same orders (the test split, one
whole-day order per symbol-day, :func:`serl_jax.experiment.evaluate_policies`); SB3's
policy runs there as its weights and ``VecNormalize`` statistics ported to JAX
(:class:`SB3Policy`, equal to SB3's ``predict(deterministic=True)`` up to float32
rounding, a test). Reported: the shortfall and PA of each minus TWAP's, and SB3 minus
ours, paired per order, with 95% intervals clustered by day and minimum detectable effects
(bps; :func:`serl_jax.metrics.paired_difference`).

Speed: env steps/s of training, wall clock, for each; compilation apart (ours: the update;
SB3: the first jitted reset and step of the vector environment, done before ``learn``).
SB3's figure includes the environment on the host side (its ``step`` hands the actions to
JAX and the results back every minute), PyTorch's forward passes and SB3's updates.

Usage (from the repository root; needs ``pip install -e ".[peers]"``)::

    python benchmarks/bench_peer.py [--json] [--data sample:cn_1min] [--steps N]
        [--seed 0] [--torch-threads 1] [--config FILE] [section.key=value ...]

``--steps`` defaults to the config's ``ppo.total_timesteps`` (1,228,800: 40 rollouts of
128 x 240). The summary prints the machine, the date, a speed table with the ratio
ours/SB3 of env steps/s, the paired test table and each schedule in three numbers.
``--json`` prints one object instead: ``machine``, ``dataset``, ``env_steps``,
``rollout``, ``seed``, ``torch_threads``; ``sb3`` and ``ours`` with ``env_steps``,
``train_s``, ``compile_s`` and ``steps_per_s``; ``ratio_steps_per_s`` (ours/SB3); the
test's ``orders``, ``days`` and ``interval`` (the method that follows from them,
:class:`serl_jax.metrics.inference.Clustering`); ``twap``, TWAP's mean shortfall and PA (bps);
``paired``: for ``sb3_minus_twap``, ``ours_minus_twap`` and ``sb3_minus_ours`` the
shortfall and PA differences with ``value``, ``ci_low``, ``ci_high``, ``win_rate`` and
``mde`` (bps); ``held``: each policy's mean fraction of the order held after the
``quarters`` of the window's minutes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch
from bench_env import machine_description
from gymnasium.vector import AutoresetMode, VectorEnv
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import VecEnv, VecNormalize

from serl_jax.baselines import twap_policy
from serl_jax.config import Config, load_config
from serl_jax.envs.execution import EnvParams
from serl_jax.envs.market_data import MarketData
from serl_jax.evaluation import Rollout
from serl_jax.experiment import TWAP, evaluate_policies, load_splits, make_env, train_policy
from serl_jax.gym import ExecutionVectorEnv
from serl_jax.metrics import paired_difference, price_advantage, shortfall
from serl_jax.metrics.inference import Clustering
from serl_jax.rl.policy import make_ppo_policy

SB3, OURS = "SB3 PPO", "ours"
#: ``network.activation`` in PyTorch (SB3's ``activation_fn``) and in JAX (:class:`SB3Policy`).
ACTIVATIONS = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU, "gelu": torch.nn.GELU}
JAX_ACTIVATIONS = {
    "tanh": jnp.tanh,
    "relu": jax.nn.relu,
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
}
#: VecNormalize's clip and epsilon: ours (:class:`serl_jax.rl.normalization.RunningStats`).
CLIP_OBS, OBS_EPS = 10.0, 1e-8
QUARTERS = (0.25, 0.5, 0.75)
"""Where the report reads each schedule: the fraction of the window's minutes gone."""
TORCH_THREADS = 1
"""PyTorch's CPU threads for SB3 by default: one. On this 2-core machine, with JAX's
threads beside it (load average about 4.7), two threads made SB3's training 12x slower:
16.5 s against 1.3 s for one rollout and update of 30,720 env steps (2026-11-28)."""


class SB3VecEnv(VecEnv):
    """A ``gymnasium.vector.VectorEnv`` with same-step autoreset as an SB3 ``VecEnv``.

    ``step`` returns the next order's first observation where an order ended (as SB3's
    ``DummyVecEnv``), the ended order's last observation in that lane's
    ``info["terminal_observation"]`` (the vector env's ``info["final_obs"]``) and
    ``info["TimeLimit.truncated"]`` (truncated and not terminated); each lane's info also
    holds the vector env's per-lane fields (``order_pa`` bps, ``exec_qty`` shares, ...).
    Rewards come back as float32. Seeds set by ``seed(s)`` (lane ``i``: ``s + i``) are
    passed to the next ``reset``; without them ``reset`` continues the lanes' streams.

    Args:
        env: the vector env (``metadata["autoreset_mode"]`` ``SAME_STEP``).

    Attributes:
        env: the wrapped vector env.
        env_steps: env steps taken (lanes x ``step`` calls).

    Raises:
        ValueError: another autoreset mode.
    """

    def __init__(self, env: VectorEnv):
        if env.metadata.get("autoreset_mode") != AutoresetMode.SAME_STEP:
            raise ValueError(
                f"SB3VecEnv: needs autoreset_mode SAME_STEP, got "
                f"{env.metadata.get('autoreset_mode')!r}"
            )
        self.env = env
        self.env_steps = 0
        self._actions = None
        super().__init__(env.num_envs, env.single_observation_space, env.single_action_space)

    def reset(self) -> np.ndarray:
        """Starts every lane (``float32[N, D]``), with the seeds of ``seed()`` if set."""
        seeds = None if self._seeds[0] is None else list(self._seeds)
        obs, _ = self.env.reset(seed=seeds)
        self._reset_seeds()
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        """Keeps ``actions`` (``[N]`` or ``[N, 1]``, in ``[0, 1]``) for ``step_wait``."""
        self._actions = np.asarray(actions, np.float32).reshape(self.num_envs)

    def step_wait(self):
        """``(obs float32[N, D], rewards float32[N], dones bool[N], infos)``."""
        obs, rewards, terminated, truncated, info = self.env.step(self._actions)
        self.env_steps += self.num_envs
        dones = terminated | truncated
        fields = {
            k: v
            for k, v in info.items()
            if not k.startswith("_") and k not in ("final_obs", "final_info")
        }
        infos = [{k: v[i] for k, v in fields.items()} for i in range(self.num_envs)]
        for i in np.flatnonzero(dones):
            infos[i]["terminal_observation"] = info["final_obs"][i]
            infos[i]["TimeLimit.truncated"] = bool(truncated[i] and not terminated[i])
        return obs, rewards.astype(np.float32), dones, infos

    def close(self) -> None:
        self.env.close()

    def get_attr(self, attr_name: str, indices=None) -> list[Any]:
        """The vector env's attribute, once per lane asked for (the lanes share it)."""
        return [getattr(self.env, attr_name) for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices=None) -> None:
        """Sets the vector env's attribute (shared by every lane)."""
        setattr(self.env, attr_name, value)

    def env_method(self, method_name: str, *method_args, indices=None, **method_kwargs):
        """Not available: the lanes are one vector env, without per-lane methods."""
        raise NotImplementedError("SB3VecEnv: the lanes share one vector env (no env_method)")

    def env_is_wrapped(self, wrapper_class, indices=None) -> list[bool]:
        """False for every lane: no gymnasium wrappers around the lanes."""
        return [False for _ in self._get_indices(indices)]


def run_config(
    config: str | None, overrides: Sequence[str], steps: int | None, seed: int
) -> tuple[Config, int]:
    """The run configuration (one seed, ``seed``) and the env steps both learners take:
    ``steps`` (None: the config's ``ppo.total_timesteps``) rounded up to whole rollouts of
    ``ppo.num_envs x ppo.num_steps``."""
    base = [*overrides, f"run.seed={seed}", "run.num_seeds=1"]
    cfg = load_config(config, base)
    rollout = cfg.ppo.num_envs * cfg.ppo.num_steps
    total = math.ceil((cfg.ppo.total_timesteps if steps is None else steps) / rollout) * rollout
    return load_config(config, [*base, f"ppo.total_timesteps={total}"]), total


def sb3_model(cfg: Config, venv: VecEnv, seed: int) -> PPO:
    """SB3 PPO with ``cfg``'s ``ppo`` and ``network`` settings (module docstring)."""
    p, n = cfg.ppo, cfg.network
    updates = p.num_updates
    hidden = list(n.hidden_sizes)
    return PPO(
        "MlpPolicy",
        venv,
        learning_rate=lambda remaining: p.lr * min(1.0, remaining + 0.5 / updates),
        n_steps=p.num_steps,
        batch_size=p.minibatch_size,
        n_epochs=p.update_epochs,
        gamma=p.gamma,
        gae_lambda=p.gae_lambda,
        clip_range=p.clip_eps,
        clip_range_vf=p.clip_eps,
        ent_coef=p.ent_coef,
        vf_coef=p.vf_coef / 2.0,
        max_grad_norm=p.max_grad_norm,
        policy_kwargs={
            "net_arch": {"pi": hidden, "vf": hidden},
            "activation_fn": ACTIVATIONS[n.activation],
        },
        seed=seed,
        device="cpu",
        verbose=0,
    )


def train_sb3(
    cfg: Config, train_params: EnvParams, seed: int, torch_threads: int = TORCH_THREADS
) -> tuple[PPO, VecNormalize, dict[str, float]]:
    """Trains SB3 PPO for ``cfg.ppo.total_timesteps`` env steps on ``train_params``, with
    ``torch_threads`` PyTorch CPU threads (the process's setting is restored after).

    Returns:
        ``(model, normalizer, timing)``: ``timing`` has ``env_steps`` (counted by the
        adapter), ``compile_s`` (the vector env's first reset and step, jitted before
        ``learn``), ``train_s`` (``learn``, wall clock) and ``steps_per_s``.
    """
    vector = ExecutionVectorEnv(make_env(train_params), train_params, cfg.ppo.num_envs)
    t0 = time.perf_counter()
    vector.reset(seed=seed)
    vector.step(np.zeros(cfg.ppo.num_envs, np.float32))
    compile_s = time.perf_counter() - t0
    adapter = SB3VecEnv(vector)
    venv = VecNormalize(adapter, norm_obs=True, norm_reward=False, clip_obs=CLIP_OBS,
                        epsilon=OBS_EPS, gamma=cfg.ppo.gamma)  # fmt: skip
    previous = torch.get_num_threads()
    torch.set_num_threads(torch_threads)
    try:
        model = sb3_model(cfg, venv, seed)
        t0 = time.perf_counter()
        model.learn(total_timesteps=cfg.ppo.total_timesteps)
        train_s = time.perf_counter() - t0
    finally:
        torch.set_num_threads(previous)
    venv.training = False
    timing = {"env_steps": adapter.env_steps, "compile_s": compile_s, "train_s": train_s,
              "steps_per_s": adapter.env_steps / train_s}  # fmt: skip
    return model, venv, timing


def sb3_policy_params(model: PPO, normalizer: VecNormalize) -> dict[str, Any]:
    """SB3's deterministic actor as arrays for :class:`SB3Policy`: the ``VecNormalize``
    mean and variance, the hidden layers' ``(weight, bias)`` and the action head's."""
    policy = model.policy
    layers = [m for m in policy.mlp_extractor.policy_net if isinstance(m, torch.nn.Linear)]

    def arrays(linear: torch.nn.Linear) -> tuple[jnp.ndarray, jnp.ndarray]:
        return jnp.asarray(linear.weight.detach().numpy()), jnp.asarray(
            linear.bias.detach().numpy()
        )

    return {
        "mean": jnp.asarray(normalizer.obs_rms.mean, jnp.float32),
        "var": jnp.asarray(normalizer.obs_rms.var, jnp.float32),
        "hidden": [arrays(m) for m in layers],
        "head": arrays(policy.action_net),
    }


@dataclasses.dataclass(frozen=True)
class SB3Policy:
    """SB3's deterministic action in JAX, a policy for :func:`serl_jax.evaluation.rollout`:
    ``clip(mean, 0, 1)`` of its Gaussian at the observation normalized as
    ``VecNormalize`` does (``params`` from :func:`sb3_policy_params`). Hashable, so one
    activation compiles one rollout.

    Attributes:
        activation: the hidden layers' activation, a key of :data:`ACTIVATIONS`.
    """

    activation: str

    def __call__(self, params: dict[str, Any], key, obs, state, env_params) -> jnp.ndarray:
        del key, state, env_params
        act = JAX_ACTIVATIONS[self.activation]
        x = (obs - params["mean"]) / jnp.sqrt(params["var"] + OBS_EPS)
        x = jnp.clip(x, -CLIP_OBS, CLIP_OBS)
        for weight, bias in params["hidden"]:
            x = act(weight @ x + bias)
        weight, bias = params["head"]
        return jnp.clip(weight @ x + bias, 0.0, 1.0)[0]


def train_ours(
    cfg: Config, train_params: EnvParams, val_params: EnvParams
) -> tuple[Any, Any, dict[str, float]]:
    """Trains this project's PPO (one seed) for ``cfg.ppo.total_timesteps`` env steps.

    Returns:
        ``(policy, policy_params, timing)``: the deterministic policy and its parameters,
        and ``timing`` with ``env_steps``, ``compile_s`` (init and the update chunk),
        ``train_s`` (the updates, wall clock) and ``steps_per_s``.
    """
    env = make_env(train_params)
    trained = train_policy(cfg, env, train_params, val_params, progress=False)
    policy = make_ppo_policy(
        trained.network, cfg.ppo.normalize_obs, action_prior=cfg.network.prior()
    )
    timing = {"env_steps": trained.env_steps, "compile_s": trained.compile_seconds,
              "train_s": trained.train_seconds,
              "steps_per_s": trained.env_steps / trained.train_seconds}  # fmt: skip
    return policy, trained.policy_params, timing


def evaluate_on_test(
    cfg: Config, test_params: EnvParams, policies: dict[str, tuple[Any, Any]]
) -> dict[str, Rollout]:
    """Each policy's and TWAP's deterministic rollout on every test order (one evaluation:
    TWAP is rolled out once, on the orders the policies execute): ``{name: Rollout}``
    with ``TWAP`` among the names."""
    env = make_env(test_params)
    results = evaluate_policies(cfg, env, test_params, {TWAP: (twap_policy, None), **policies})
    return {name: rollout for name, (_, rollout) in results.items()}


def held(rollout: Rollout) -> list[float]:
    """The mean fraction of the order still held after each :data:`QUARTERS` of the
    window's minutes (the schedule in three numbers)."""
    remaining = np.asarray(rollout.remaining, np.float64).mean(axis=0)  # [T + 1]
    slots = remaining.shape[0] - 1
    return [float(remaining[round(q * slots)]) for q in QUARTERS]


def paired(cfg: Config, outcomes, name: str, reference: str, days) -> dict[str, dict]:
    """``name`` minus ``reference`` on the same orders, for shortfall and PA (bps): the
    mean, interval (``cfg.eval.confidence``, clustered by day), win rate and minimum
    detectable effect."""
    out = {}
    for metric, fn in (("shortfall", shortfall), ("pa", price_advantage)):
        diff = paired_difference(
            fn(outcomes[name]), fn(outcomes[reference]), confidence=cfg.eval.confidence,
            n_bootstrap=cfg.eval.n_bootstrap, seed=cfg.run.seed, days=days,
        )  # fmt: skip
        out[metric] = diff.to_dict()
    return out


def compare(
    data: str,
    steps: int | None,
    seed: int,
    config: str | None = None,
    overrides: Sequence[str] = (),
    torch_threads: int = TORCH_THREADS,
) -> tuple[dict[str, Any], dict[str, Rollout]]:
    """Trains both learners for equal env steps on ``data``'s training days and scores them
    on its test orders.

    Args:
        data: a dataset folder or ``sample:<name>``.
        steps: env steps requested (rounded up to whole rollouts, :func:`run_config`);
            None: the config's ``ppo.total_timesteps``.
        seed: both learners' seed.
        config, overrides: the run configuration, as the CLIs' ``--config`` and overrides.
        torch_threads: PyTorch's CPU threads for SB3 (``torch.set_num_threads``).

    Returns:
        ``(result, rollouts)``: the JSON object (module docstring) and each policy's and
        TWAP's :class:`~serl_jax.evaluation.Rollout` on the test orders.
    """
    cfg, total = run_config(config, overrides, steps, seed)
    splits = load_splits(cfg, data)
    params = {name: cfg.env_params(MarketData.from_episodes(splits.split(name)))
              for name in ("train", "val", "test")}  # fmt: skip
    model, normalizer, sb3 = train_sb3(cfg, params["train"], seed, torch_threads)
    policy, policy_params, ours = train_ours(cfg, params["train"], params["val"])
    rollouts = evaluate_on_test(cfg, params["test"], {
        SB3: (SB3Policy(cfg.network.activation), sb3_policy_params(model, normalizer)),
        OURS: (policy, policy_params),
    })  # fmt: skip
    outcomes = {name: r.outcomes(float(params["test"].side)) for name, r in rollouts.items()}
    days = splits.test.dates
    twap = outcomes[TWAP]
    result = {
        "machine": machine_description(),
        "dataset": splits.name,
        "env_steps": total,
        "rollout": f"{cfg.ppo.num_envs} x {cfg.ppo.num_steps}",
        "seed": seed,
        "torch_threads": torch_threads,
        "sb3": sb3,
        "ours": ours,
        "ratio_steps_per_s": ours["steps_per_s"] / sb3["steps_per_s"],
        "orders": len(days),
        "days": len(set(days)),
        "interval": Clustering.from_days(days, len(days)).method,
        "twap": {"shortfall": float(shortfall(twap).mean()),
                 "pa": float(price_advantage(twap).mean())},
        "held": {"quarters": list(QUARTERS), "twap": held(rollouts[TWAP]),
                 "sb3": held(rollouts[SB3]), "ours": held(rollouts[OURS])},
        "paired": {
            "sb3_minus_twap": paired(cfg, outcomes, SB3, TWAP, days),
            "ours_minus_twap": paired(cfg, outcomes, OURS, TWAP, days),
            "sb3_minus_ours": paired(cfg, outcomes, SB3, OURS, days),
        },
    }  # fmt: skip
    return result, rollouts


def _cell(d: dict[str, float]) -> str:
    return f"{d['value']:+.2f} [{d['ci_low']:+.2f}, {d['ci_high']:+.2f}] (MDE {d['mde']:.2f})"


def summary(result: dict[str, Any]) -> str:
    """The readable report: machine, speed table, test table (markdown)."""
    sb3, ours = result["sb3"], result["ours"]
    lines = [
        result["machine"],
        f"data:    {result['dataset']}, seed {result['seed']}, {result['env_steps']:,} env "
        f"steps each (whole rollouts of {result['rollout']}), PyTorch threads "
        f"{result['torch_threads']}",
        "",
        "| learner | env steps | train s | env steps/s | compile s |",
        "|---|---:|---:|---:|---:|",
        f"| SB3 PPO (PyTorch, CPU) | {sb3['env_steps']:,} | {sb3['train_s']:.1f} | "
        f"{sb3['steps_per_s']:,.0f} | {sb3['compile_s']:.1f} (env) |",
        f"| ours (JAX) | {ours['env_steps']:,} | {ours['train_s']:.1f} | "
        f"{ours['steps_per_s']:,.0f} | {ours['compile_s']:.1f} |",
        "",
        f"ours/SB3 env steps/s: {result['ratio_steps_per_s']:.1f}x",
        "",
        f"Test: {result['orders']} orders on {result['days']} days; TWAP's mean shortfall "
        f"{result['twap']['shortfall']:+.2f} bps, PA {result['twap']['pa']:+.2f} bps. Paired "
        f"differences, bps: mean [95% interval: {result['interval']}] (minimum detectable "
        "effect, 80% power):",
        "",
        "| paired | shortfall | PA |",
        "|---|---|---|",
    ]
    names = {"sb3_minus_twap": "SB3 − TWAP", "ours_minus_twap": "ours − TWAP",
             "sb3_minus_ours": "SB3 − ours"}  # fmt: skip
    for key, label in names.items():
        row = result["paired"][key]
        lines.append(f"| {label} | {_cell(row['shortfall'])} | {_cell(row['pa'])} |")
    quarters = ", ".join(f"{q:.0%}" for q in result["held"]["quarters"])
    lines += ["", f"Mean fraction of the order held after {quarters} of the minutes:"]
    for key, label in (("twap", "TWAP"), ("sb3", "SB3 PPO"), ("ours", "ours")):
        fractions = ", ".join(f"{h:.2f}" for h in result["held"][key])
        lines.append(f"- {label}: {fractions}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="sample:cn_1min", help="dataset (default the cn sample)")
    parser.add_argument(
        "--steps",
        type=int,
        help="env steps for each learner, rounded up to whole rollouts (default: the "
        "config's ppo.total_timesteps, 1,228,800 in the default preset)",
    )
    parser.add_argument("--seed", type=int, default=0, help="both learners' seed")
    parser.add_argument("--config", help="YAML preset (PPO settings of both learners)")
    parser.add_argument(
        "--torch-threads", type=int, default=TORCH_THREADS, help="PyTorch CPU threads for SB3"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("overrides", nargs="*", metavar="section.key=value")
    args = parser.parse_args()
    result, _ = compare(
        args.data, args.steps, args.seed, args.config, args.overrides, args.torch_threads
    )
    print(json.dumps(result) if args.json else summary(result), flush=True)


if __name__ == "__main__":
    main()
