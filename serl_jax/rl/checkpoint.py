"""Saving and loading trained policies (flax msgpack serialization + JSON metadata).

A checkpoint folder holds ``policy.msgpack`` (network parameters and observation
statistics) and ``policy.json`` (the resolved run config, observation size and how the
policy was selected), enough for ``python -m serl_jax.evaluate --policy DIR`` to rebuild
the network and the environment settings it was trained with.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from flax import serialization

from serl_jax.rl.networks import make_network
from serl_jax.rl.normalization import RunningStats
from serl_jax.rl.policy import PPOPolicyParams

PARAMS_FILE = "policy.msgpack"
META_FILE = "policy.json"


class CheckpointError(ValueError):
    """A missing or unreadable checkpoint folder (one-line message naming the file)."""


def save_policy(
    directory: str | Path, policy_params: PPOPolicyParams, meta: dict[str, Any]
) -> Path:
    """Writes a policy checkpoint.

    Args:
        directory: folder to create (parents too).
        policy_params: network parameters and observation statistics (one seed, no
            leading seed axis).
        meta: JSON-serializable dict; must hold ``config`` (``Config.to_dict()``) and
            ``obs_size`` (int).

    Returns:
        The folder path.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / PARAMS_FILE).write_bytes(serialization.to_bytes(jax.device_get(policy_params)))
    (directory / META_FILE).write_text(json.dumps(meta, indent=2))
    return directory


def _checkpoint_files(directory: str | Path) -> tuple[Path, Path]:
    """``(policy.json, policy.msgpack)`` of a checkpoint folder.

    Raises:
        CheckpointError: either file is missing.
    """
    directory = Path(directory)
    meta_path, params_path = directory / META_FILE, directory / PARAMS_FILE
    for path in (meta_path, params_path):
        if not path.is_file():
            raise CheckpointError(f"{path}: missing (not a serl_jax policy checkpoint)")
    return meta_path, params_path


DefineFn = Callable[[str, str], Any]
"""Defines designed code of a kind (``"network"``, ``"communication"``) and returns the
module, raising ``ValueError`` or ``TypeError`` for code it refuses: the validator's
:func:`llm.validate.load_validated`, passed in by the loop and the CLIs, so that this
module (below the SE-RL layer) never imports ``llm``."""


def load_policy(
    directory: str | Path, define: DefineFn | None = None
) -> tuple[Any, PPOPolicyParams, dict[str, Any]]:
    """Reads a checkpoint written by :func:`save_policy`.

    Args:
        directory: the checkpoint folder.
        define: how to define an SE-RL candidate's ``network_code``
            (:func:`llm.validate.load_validated`: that code passed both validation
            stages in its run and stage 1 checks it again); None for checkpoints of the
            config's own network.

    Returns:
        ``(network, policy_params, meta)``: the flax module (rebuilt from the saved
        network config, or defined from the metadata's ``network_code``), the restored
        parameters, and the metadata dict.

    Raises:
        CheckpointError: the folder or one of its files is missing or unreadable, the
            code is refused, or the checkpoint holds code and ``define`` is None.
    """
    meta_path, params_path = _checkpoint_files(directory)
    try:
        meta = json.loads(meta_path.read_text())
        net_cfg = meta["config"]["network"]
        obs_size = int(meta["obs_size"])
    except (ValueError, KeyError, TypeError) as err:
        raise CheckpointError(f"{meta_path}: unreadable metadata ({err})") from None
    if meta.get("network_code"):
        if define is None:
            raise CheckpointError(
                f"{meta_path}: holds a designed network_code; load it with "
                "define=llm.validate.load_validated"
            )
        try:
            network = define(meta["network_code"], "network")
        except (ValueError, TypeError) as err:
            raise CheckpointError(f"{meta_path}: network_code refused ({err})") from None
    else:
        network = make_network(
            tuple(net_cfg["hidden_sizes"]),
            net_cfg["activation"],
            net_cfg.get("action_multiples"),  # absent in checkpoints before 2026-11-24
        )
    template = PPOPolicyParams(
        params=network.init(jax.random.PRNGKey(0), jnp.zeros((obs_size,), jnp.float32)),
        obs_stats=RunningStats.create(obs_size),
    )
    try:
        restored = serialization.from_bytes(template, params_path.read_bytes())
    except (ValueError, KeyError, TypeError) as err:
        raise CheckpointError(f"{params_path}: does not match its metadata ({err})") from None
    return network, restored, meta


def load_agents_policy(
    directory: str | Path, define: DefineFn
) -> tuple[Any, Any, PPOPolicyParams, dict[str, Any]]:
    """Reads the checkpoint of N agents trained by :func:`serl_jax.rl.marl.make_marl_trainer`
    (an SE-RL multi-agent candidate's: its metadata holds the validated ``network_code``
    and ``communication_code``, defined again through ``define``, the validator's
    :func:`llm.validate.load_validated`).

    Returns:
        ``(network, communication, policy_params, meta)``: the shared network, the
        communication module (None without messages), the parameters
        (``params``: ``{"actor", "critic"?, "communication"?}`` as trained; observation
        statistics over the single-agent observation) and the metadata dict.

    Raises:
        CheckpointError: the folder or a file is missing or unreadable, or a code refused.
    """
    meta_path, params_path = _checkpoint_files(directory)
    try:
        meta = json.loads(meta_path.read_text())
        network = define(meta["network_code"], "network")
        comm_code = meta.get("communication_code", "")
        communication = define(comm_code, "communication") if comm_code else None
    except (ValueError, KeyError, TypeError) as err:
        raise CheckpointError(f"{meta_path}: unreadable metadata or refused code ({err})") from None
    try:
        raw = serialization.msgpack_restore(params_path.read_bytes())
        stats = raw["obs_stats"]
        params = PPOPolicyParams(
            params=jax.tree.map(jnp.asarray, raw["params"]),
            obs_stats=RunningStats(
                jnp.asarray(stats["mean"]), jnp.asarray(stats["var"]), jnp.asarray(stats["count"])
            ),
        )
    except (ValueError, KeyError, TypeError) as err:
        raise CheckpointError(f"{params_path}: unreadable parameters ({err})") from None
    return network, communication, params, meta
