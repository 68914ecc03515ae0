"""Gymnasium adapters of the execution environments, for learners outside JAX (Torch, SB3).

``import serl_jax`` registers two ids (nothing is built until ``make``)::

    import gymnasium, serl_jax

    env = gymnasium.make("serl_jax/Execution-v0")         # static market, shipped sample
    env = gymnasium.make("serl_jax/DynamicExecution-v0", data="sample:us_1min", split="test")
    vec = gymnasium.make_vec("serl_jax/Execution-v0", num_envs=256)  # one jitted vmap step

:class:`ExecutionGymEnv` is one episode at a time (``gymnasium.Env``);
:class:`ExecutionVectorEnv` runs N episodes in one jitted ``vmap`` step with gymnax's
auto-reset inside it (gymnasium's ``SAME_STEP`` autoreset mode). Both have the gymnax
environment's spaces: observations ``float32[D]`` (``D = 6 + lookback * F``), actions
``float32[]`` in ``[0, 1]``, the fraction of the remaining inventory to trade this minute
(:class:`~serl_jax.envs.execution.ExecutionEnv`). Rewards, observations and ``info`` are
the gymnax environment's, moved to the host: observations float32 NumPy arrays, rewards
Python floats (float64 arrays in the vector env), ``info`` NumPy scalars (arrays).

Seeds. ``reset(seed=s)`` starts the key stream ``key = jax.random.key(s)`` (``s`` an
integer in ``[0, 2**32)``); every reset and every step then takes
``key, sub = jax.random.split(key)`` and passes ``sub`` to the gymnax ``reset(sub,
params)`` or ``step(sub, state, action, params)``. ``reset()`` without a seed continues the
stream; the first reset without any seed draws ``s`` from gymnasium's ``np_random`` (OS
entropy). Lane ``i`` of the vector env is the single env seeded ``s + i`` (``reset(seed=s)``,
as gymnasium's ``SyncVectorEnv`` seeds its copies), or ``seeds[i]`` for a list; after its
first episode it continues with gymnax's auto-reset, which draws the next episode from that
step's key.

Why not gymnax's own ``gymnax.wrappers.gym`` wrappers: they return JAX arrays (device
scalars for the reward, ``terminated`` and ``truncated``), which gymnasium's
``check_env`` and PassiveEnvChecker reject; the single-env wrapper returns the auto-reset
observation at the end of an episode instead of the final one; the vector wrapper
predates gymnasium 1.x's ``VectorEnv`` (no ``autoreset_mode``, no ``final_obs``); and
neither validates actions (the environment clips them, so a bad action would go unseen).
The adapters here keep their key derivation and use gymnax's space conversion
(:func:`gymnax.environments.spaces.gymnax_space_to_gym_space`).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space
from gymnax.environments.spaces import gymnax_space_to_gym_space

from serl_jax.config import Config, load_config
from serl_jax.envs.execution import EnvParams, ExecutionEnv
from serl_jax.envs.market_data import MarketData
from serl_jax.experiment import calibrated_market, dynamic_env_params, load_splits, make_env

MARKETS = ("static", "dynamic")
"""The ``market`` argument's values: replayed bars, or ``market.simulator``'s dynamic market."""
SEED_LIMIT = 2**32
"""Seeds are integers in ``[0, SEED_LIMIT)``: ``jax.random.key`` keeps 32 bits of larger
ones (without x64), so two seeds would give one key."""
# gymnax's step info keys that the adapters return in their own places.
_STEP_KEYS = ("final_observation", "terminated", "truncated")


def market_params(
    cfg: Config, data: str | Path | None = None, split: str = "train", market: str = "static"
) -> EnvParams:
    """The environment parameters of one split of one dataset, as the CLIs build them.

    Args:
        cfg: run configuration (its ``data``, ``env``, ``market`` and ``impact`` sections).
        data: a dataset folder or a shipped sample ``sample:<name>``, as the CLIs'
            ``--data`` (:func:`serl_jax.experiment.resolve_market_path`); None: the first
            of ``cfg.data.markets`` (by default ``sample:cn_1min``).
        split: ``"train"``, ``"val"`` or ``"test"`` (``"heldout"`` with held-out symbols).
        market: ``"static"``, or ``"dynamic"`` for the twin in ``cfg.market.simulator``'s
            market (:func:`serl_jax.experiment.dynamic_env_params`).

    Returns:
        :class:`~serl_jax.envs.execution.EnvParams`, or the dynamic market's subclass.

    Raises:
        ValueError: an unknown ``market`` or ``split``; unreadable data
            (:class:`~serl_jax.data.DataError`); a dynamic market without calibrated
            parameters (:func:`serl_jax.experiment.calibrated_market`).
    """
    if market not in MARKETS:
        raise ValueError(f"market must be one of {MARKETS}, got {market!r}")
    spec = cfg.data.markets[0] if data is None else str(data)
    splits = load_splits(cfg, spec)
    params = cfg.env_params(MarketData.from_episodes(splits.split(split)))
    if market == "dynamic":
        params = dynamic_env_params(cfg, calibrated_market(cfg, spec), params, splits.stats)
    return params


def run_config(config: str | Path | None = None, overrides: Sequence[str] = ()) -> Config:
    """The run configuration of a YAML preset (None: the built-in defaults, which
    ``configs/default.yaml`` holds, as the CLIs without ``--config``) and ``section.key=value``
    overrides (e.g. ``"env.side=-1"``, ``"market.simulator=lob"``), the CLIs' syntax.

    Raises:
        ValueError: ``overrides`` given as one string, or a bad config or override
            (:class:`~serl_jax.config.ConfigError`).
    """
    if isinstance(overrides, str):
        raise ValueError(
            f"overrides: expected a list of section.key=value, not {_shown(overrides)}"
        )
    return load_config(config, overrides)


def build_env(
    data: str | Path | None = None,
    split: str = "train",
    config: str | Path | None = None,
    overrides: Sequence[str] = (),
    market: str = "static",
) -> tuple[ExecutionEnv, EnvParams]:
    """The gymnax environment and parameters that ``gymnasium.make`` wraps.

    Args:
        data, split, market: as :func:`market_params`.
        config, overrides: as :func:`run_config`.

    Returns:
        ``(env, params)``: :func:`serl_jax.experiment.make_env` of the parameters (the
        default reward slot).

    Raises:
        ValueError: as :func:`run_config` and :func:`market_params`.
    """
    params = market_params(run_config(config, overrides), data, split, market)
    return make_env(params), params


def _shown(value: Any) -> str:
    """``repr(value)`` on one line, at most 60 characters (for one-line errors)."""
    text = " ".join(repr(value).split())
    return text if len(text) <= 60 else text[:57] + "..."


def check_seed(seed: Any) -> int:
    """``seed`` as an int; ValueError unless an integer in ``[0, SEED_LIMIT)``."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise ValueError(f"seed must be an integer in [0, 2**32), got {_shown(seed)}")
    if not 0 <= seed < SEED_LIMIT:
        raise ValueError(f"seed must be in [0, 2**32), got {seed}")
    return int(seed)


def check_actions(action: Any, shape: tuple[int, ...], name: str = "action") -> np.ndarray:
    """``action`` as ``float32[shape]``, each a fraction in ``[0, 1]``.

    Args:
        action: a number or array-like.
        shape: the expected shape (``()`` for one agent, ``(N,)`` for N lanes).
        name: what the message calls it.

    Raises:
        ValueError: not numeric, another shape, a NaN, or an entry outside ``[0, 1]`` (one
            line naming the first bad entry).
    """
    try:
        values = np.asarray(action, dtype=np.float32)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected numbers in [0, 1], got {_shown(action)}") from None
    if values.shape != shape:
        raise ValueError(f"{name}: expected shape {shape}, got {values.shape}")
    bad = np.flatnonzero(~((values >= 0.0) & (values <= 1.0)))  # NaN fails both
    if bad.size:
        where = f"{name}[{bad[0]}]" if shape else name
        value = values.reshape(-1)[bad[0]]
        what = "is NaN" if np.isnan(value) else "is outside [0, 1]"
        raise ValueError(f"{where} = {value:.6g} {what} (the fraction of the inventory to trade)")
    return values


@partial(jax.jit, static_argnums=0)
def split_reset(env: Any, key: jax.Array, params: EnvParams):
    """``key, sub = split(key)`` and the gymnax ``env.reset(sub, params)``, jitted.

    Returns:
        ``(key, state, obs)``: the stream's next key, the new state and its observation.
    """
    key, sub = jax.random.split(key)
    obs, state = env.reset(sub, params)
    return key, state, obs


@partial(jax.jit, static_argnums=0)
def split_step(env: Any, key: jax.Array, state: Any, action: jax.Array, params: EnvParams):
    """``key, sub = split(key)`` and the gymnax ``env.step(sub, state, action, params)``
    (with its auto-reset), jitted.

    Returns:
        ``(key, state, (obs, reward, terminated, truncated, info))``: ``obs`` the step's
        own observation (gymnax's ``info["final_observation"]``, not the auto-reset one)
        and ``info`` without the keys returned in their own places.
    """
    key, sub = jax.random.split(key)
    _, state, reward, terminated, truncated, info = env.step(sub, state, action, params)
    obs = info["final_observation"]
    info = {k: v for k, v in info.items() if k not in _STEP_KEYS}
    return key, state, (obs, reward, terminated, truncated, info)


class ExecutionGymEnv(gymnasium.Env):
    """One execution environment as a ``gymnasium.Env`` (module docstring).

    An episode is one parent order (``T`` steps, one a minute; the whole day by default).
    ``step`` after the episode ended raises: call ``reset()`` (gymnasium leaves it
    undefined; the gymnax state has already been auto-reset by then).

    Args:
        env: a gymnax execution environment (static, propagator or order book).
        params: its parameters.

    Attributes:
        gymnax_env, env_params: the wrapped environment and parameters.
        observation_space: ``Box(-inf, inf, (D,), float32)``.
        action_space: ``Box(0, 1, (), float32)``.
    """

    metadata = {"render_modes": []}

    def __init__(self, env: ExecutionEnv, params: EnvParams):
        self.gymnax_env = env
        self.env_params = params
        self.observation_space = gymnax_space_to_gym_space(env.observation_space(params))
        self.action_space = gymnax_space_to_gym_space(env.action_space(params))
        self._key = None
        self._state = None
        self._done = True

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Starts an order.

        Args:
            seed: restarts the key stream at ``jax.random.key(seed)`` (module docstring);
                None continues it.
            options: not used.

        Returns:
            ``(obs float32[D], {})``.

        Raises:
            ValueError: a seed that is not an integer in ``[0, 2**32)``.
        """
        if seed is not None:
            seed = check_seed(seed)
        super().reset(seed=seed)
        if seed is None and self._key is None:
            seed = int(self.np_random.integers(SEED_LIMIT))
        if seed is not None:
            self._key = jax.random.key(seed)
        self._key, self._state, obs = split_reset(self.gymnax_env, self._key, self.env_params)
        self._done = False
        return np.asarray(obs), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Sends one child order (one minute).

        Args:
            action: ``float32[]`` in ``[0, 1]`` (a number or a 0-d array), the fraction of
                the remaining inventory to trade.

        Returns:
            ``(obs float32[D], reward, terminated, truncated, info)``: the reward a Python
            float (the reward slot's, scaled by ``env.reward_scale``), ``terminated`` at
            the window's end, ``truncated`` always False, ``info`` the gymnax step's
            (``exec_qty`` shares, ``exec_price``, ``market_price``, ``benchmark_price``
            currency per share, ``order_pa`` bps, ...) as NumPy scalars.

        Raises:
            ValueError: a bad action (:func:`check_actions`).
            RuntimeError: no ``reset()`` since the last episode ended.
        """
        if self._done:
            raise RuntimeError("step() without a running episode: call reset()")
        action = check_actions(action, ())
        self._key, self._state, out = split_step(
            self.gymnax_env, self._key, self._state, action, self.env_params
        )
        obs, reward, terminated, truncated, info = jax.device_get(out)
        self._done = bool(terminated or truncated)
        info = {k: v[()] for k, v in info.items()}
        return obs, float(reward), bool(terminated), bool(truncated), info


def _split_lanes(keys: jax.Array) -> tuple[jax.Array, jax.Array]:
    keys = jax.vmap(jax.random.split)(keys)
    return keys[:, 0], keys[:, 1]


_lane_keys = jax.jit(jax.vmap(jax.random.key))  # uint32[N] seeds -> N keys


@partial(jax.jit, static_argnums=0)
def _vector_reset(env: ExecutionEnv, keys: jax.Array, params: EnvParams):
    keys, subs = _split_lanes(keys)
    obs, states = jax.vmap(env.reset, in_axes=(0, None))(subs, params)
    return keys, states, obs


@partial(jax.jit, static_argnums=0)
def _vector_step(env: ExecutionEnv, keys: jax.Array, states, actions: jax.Array, params):
    keys, subs = _split_lanes(keys)
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    obs, states, reward, terminated, truncated, info = step(subs, states, actions, params)
    final = info["final_observation"]
    info = {k: v for k, v in info.items() if k not in _STEP_KEYS}
    return keys, states, (obs, reward, terminated, truncated, final, info)


class ExecutionVectorEnv(VectorEnv):
    """N execution episodes in one jitted ``vmap`` step, a ``gymnasium.vector.VectorEnv``.

    Every step is one XLA program over all lanes: key split, step, gymnax's auto-reset of
    the lanes whose order ended (``metadata["autoreset_mode"]`` is ``SAME_STEP``: the
    returned observation of such a lane is its next order's first, and the final one is in
    ``info["final_obs"]``). Lane ``i`` equals :class:`ExecutionGymEnv` seeded ``s + i``
    (module docstring).

    Args:
        env: a gymnax execution environment (static, propagator or order book).
        params: its parameters, shared by every lane.
        num_envs: N >= 1 lanes.

    Attributes:
        gymnax_env, env_params: the wrapped environment and parameters.
        single_observation_space, single_action_space: one lane's spaces (as
            :class:`ExecutionGymEnv`'s); ``observation_space`` and ``action_space`` are
            them batched: ``float32[N, D]`` and ``float32[N]``.

    Raises:
        ValueError: ``num_envs < 1``.
    """

    metadata = {"render_modes": [], "autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, env: ExecutionEnv, params: EnvParams, num_envs: int):
        if isinstance(num_envs, bool) or not isinstance(num_envs, int | np.integer) or num_envs < 1:
            raise ValueError(f"num_envs must be an integer >= 1, got {num_envs!r}")
        self.gymnax_env = env
        self.env_params = params
        self.num_envs = int(num_envs)
        self.single_observation_space = gymnax_space_to_gym_space(env.observation_space(params))
        self.single_action_space = gymnax_space_to_gym_space(env.action_space(params))
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._keys = None
        self._states = None

    def reset(
        self, *, seed: int | Sequence[int] | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Starts a new order in every lane.

        Args:
            seed: an int ``s`` (lane ``i`` restarts at ``jax.random.key(s + i)``) or N ints
                (lane ``i`` at ``jax.random.key(seed[i])``); None continues every lane's
                key stream.
            options: not used.

        Returns:
            ``(obs float32[N, D], {})``.

        Raises:
            ValueError: a seed outside ``[0, 2**32)`` (``s + N - 1`` included), or a list
                of seeds whose length is not N.
        """
        if seed is None and self._keys is None:
            seed = int(self.np_random.integers(SEED_LIMIT - self.num_envs + 1))
        if isinstance(seed, int | np.integer):
            first = check_seed(seed)
            seeds = [check_seed(first + i) for i in range(self.num_envs)]
        elif seed is not None:
            seeds = [check_seed(s) for s in np.atleast_1d(np.asarray(seed, dtype=object))]
            if len(seeds) != self.num_envs:
                raise ValueError(f"seed: expected {self.num_envs} seeds, got {len(seeds)}")
        if seed is not None:
            super().reset(seed=seeds[0])
            self._keys = _lane_keys(jnp.asarray(seeds, jnp.uint32))
        self._keys, self._states, obs = _vector_reset(self.gymnax_env, self._keys, self.env_params)
        return np.asarray(obs), {}

    def step(
        self, actions: Any
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """One minute in every lane, then the auto-reset of the lanes whose order ended.

        Args:
            actions: ``float32[N]`` in ``[0, 1]``, each lane's fraction of its remaining
                inventory.

        Returns:
            ``(obs float32[N, D], rewards float64[N], terminations bool[N],
            truncations bool[N], info)``: ``info`` holds the gymnax step's fields as
            ``[N]`` arrays, each ``key`` with its mask ``_key`` (all True), and where
            some order ended ``final_obs`` (an object array: the ended lanes' last
            ``float32[D]`` observation, None elsewhere), ``final_info`` (the same fields,
            masked to the ended lanes) and their masks ``_final_obs``, ``_final_info``.

        Raises:
            ValueError: a bad action (:func:`check_actions`; the message names the lane).
            RuntimeError: ``step()`` before the first ``reset()``.
        """
        if self._states is None:
            raise RuntimeError("step() before reset(): call reset() first")
        actions = check_actions(actions, (self.num_envs,), "actions")
        self._keys, self._states, out = _vector_step(
            self.gymnax_env, self._keys, self._states, actions, self.env_params
        )
        obs, reward, terminated, truncated, final, fields = jax.device_get(out)
        everywhere = np.ones(self.num_envs, np.bool_)
        info = {**fields, **{f"_{k}": everywhere for k in fields}}
        ended = terminated | truncated
        if ended.any():
            final_obs = np.full(self.num_envs, None, dtype=object)
            for i in np.flatnonzero(ended):
                final_obs[i] = final[i]
            info["final_obs"], info["_final_obs"] = final_obs, ended
            info["final_info"] = {**fields, **{f"_{k}": ended for k in fields}}
            info["_final_info"] = ended
        return obs, reward.astype(np.float64), terminated, truncated, info


def gym_env(
    data: str | Path | None = None,
    split: str = "train",
    config: str | Path | None = None,
    overrides: Sequence[str] = (),
    market: str = "static",
) -> ExecutionGymEnv:
    """The entry point of ``gymnasium.make("serl_jax/Execution-v0", ...)`` (``market``
    ``"static"``) and ``"serl_jax/DynamicExecution-v0"`` (``"dynamic"``): arguments as
    :func:`build_env`. Raises ValueError as :func:`build_env`."""
    return ExecutionGymEnv(*build_env(data, split, config, overrides, market))


def vector_env(
    num_envs: int,
    data: str | Path | None = None,
    split: str = "train",
    config: str | Path | None = None,
    overrides: Sequence[str] = (),
    market: str = "static",
) -> ExecutionVectorEnv:
    """The vector entry point of ``gymnasium.make_vec`` for both ids: N lanes
    (:class:`ExecutionVectorEnv`), other arguments as :func:`build_env`. Raises
    ValueError as :func:`build_env`, or for ``num_envs < 1``."""
    return ExecutionVectorEnv(*build_env(data, split, config, overrides, market), num_envs)
