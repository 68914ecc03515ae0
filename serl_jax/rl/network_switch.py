"""K network slots behind one index: candidates with different network programs trained
in one compiled program (:func:`serl_jax.experiment.train_candidates`).

The search's short stage trains many network candidates for a few updates each. Alone,
each compiles its own program, and on a GPU that compilation is most of the candidate's
time (10-12 s to compile, under 1 s to train 10 updates on an H200; see
``docs/performance.md``). Behind a switch, K networks compile once with the shared
environment, PPO and optimizer, like K rewards do
(:func:`serl_jax.components.reward.switch_reward`).

Under one ``vmap`` over lanes whose indices differ, ``lax.switch`` evaluates every branch
and selects, so each lane would compute all K networks. The candidates therefore take
turns (:func:`map_candidates`: ``lax.map`` over candidates, ``vmap`` over a candidate's
seeds), and inside a turn the index is a scalar, so the switch runs only that
candidate's network. On 2 CPU cores (default preset, 6 library networks, 10 updates)
that cuts compile seconds per candidate 1.9x and costs 1.4x the training seconds
(``benchmarks/bench_loop.py --slot network``): about even on the CPU, a gain where
compiling dominates; the setting is ``loop.switch_networks`` (``auto``: on a GPU or TPU).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from serl_jax.rl.networks import declared_action_multiples

#: ``loop.switch_networks``'s settings (:func:`switches_networks`).
SWITCH_NETWORKS = ("auto", "always", "never")


def switches_networks(setting: str) -> bool:
    """Whether candidates with different networks train together behind a
    :class:`NetworkSwitch`: ``always``, ``never``, or ``auto``: when JAX's default
    backend is not the CPU (where compiling, not training, is most of a short-stage
    candidate's time). ``auto`` initializes JAX's backend.

    Raises:
        ValueError: ``setting`` not in :data:`SWITCH_NETWORKS`.
    """
    if setting not in SWITCH_NETWORKS:
        raise ValueError(
            f"loop.switch_networks: expected one of {list(SWITCH_NETWORKS)}, got {setting!r}"
        )
    return setting == "always" or (setting == "auto" and jax.default_backend() != "cpu")


@dataclasses.dataclass(frozen=True, eq=False)
class NetworkSwitch:
    """The network slot of a lane that runs member ``index`` of K networks.

    Duck-types the two methods the PPO trainers and policies call on a flax module:

    * ``init(key, obs)`` returns the tuple of the K members' variables, each initialized
      with the same ``key`` as the member alone would be, so member ``index`` starts, and
      (its gradients being its own, below) trains, exactly as alone;
    * ``apply(variables, obs)`` runs member ``index`` (``lax.switch``). Gradients reach
      only that member's parameters, also under ``vmap`` where every member runs: JAX
      selects among the branches' own gradients, so a member this lane does not use gets
      exact zeros even where its own gradient is not finite (a one-hot weighted sum of
      the members' outputs would give it ``0 * inf = NaN``); an optimizer with zero
      gradients (Adam from zero moments) leaves its parameters unchanged.

    ``eq=False``: the instance (holding a traced index) sits in a ``TrainState``'s static
    ``apply_fn``, which JAX hashes; identity is the right equality there.

    Attributes:
        members: K flax modules honouring the network-slot contract
            (:mod:`serl_jax.rl.networks`) with the same declared action set, so their
            outputs have the same shapes.
        index: int32 scalar (may be traced), the member this lane runs.
        action_multiples: the members' common declared action set (read by
            :func:`serl_jax.rl.networks.declared_action_multiples`), or None.

    Raises:
        ValueError: no members, or members that declare different action sets.
    """

    members: tuple[nn.Module, ...]
    index: Any
    action_multiples: tuple[float, ...] | None = dataclasses.field(init=False)

    def __post_init__(self):
        if not self.members:
            raise ValueError("NetworkSwitch: no member networks")
        sets = {declared_action_multiples(m) for m in self.members}
        if len(sets) > 1:
            raise ValueError(
                "NetworkSwitch: the member networks declare different action sets "
                f"{sorted(sets, key=str)}"
            )
        object.__setattr__(self, "action_multiples", sets.pop())

    def init(self, key: jax.Array, obs: jnp.ndarray) -> tuple[Any, ...]:
        """The K members' variables, each ``member.init(key, obs)``."""
        return tuple(member.init(key, obs) for member in self.members)

    def apply(self, variables: Sequence[Any], obs: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
        """Member ``index``'s ``(policy_outputs [..., 2 or K], value [...])`` for
        ``obs [..., D]`` float32."""

        def branch(j: int) -> Callable:
            return lambda all_variables, x: self.members[j].apply(all_variables[j], x)

        branches = [branch(j) for j in range(len(self.members))]
        return jax.lax.switch(self.index, branches, tuple(variables), obs)


def candidate_networks(
    networks: Sequence[nn.Module],
) -> tuple[Callable[[jax.Array], Any], list[int]]:
    """Candidate ``k``'s network slot from a (traced) candidate index.

    Args:
        networks: K network slots, one per candidate; candidates given the same module
            object share it.

    Returns:
        ``(network_for, member_of)``: ``network_for(index)`` is the module itself when all
        candidates share one, else a :class:`NetworkSwitch` over the distinct modules
        (in first-appearance order) running candidate ``index``'s; ``member_of[k]`` is
        candidate ``k``'s position among the distinct modules.

    Raises:
        ValueError: the distinct networks declare different action sets.
    """
    distinct: list[nn.Module] = []
    member_of = []
    for network in networks:
        position = next((i for i, d in enumerate(distinct) if d is network), None)
        if position is None:
            position = len(distinct)
            distinct.append(network)
        member_of.append(position)
    if len(distinct) == 1:
        return (lambda _index: distinct[0]), member_of
    members = tuple(distinct)
    NetworkSwitch(members, 0)  # the action sets are checked here, before any trace
    table = jnp.asarray(member_of, jnp.int32)
    return (lambda index: NetworkSwitch(members, table[index])), member_of


def map_candidates(fn: Callable, groups: int, lane_index: jax.Array, *lanes: Any) -> Any:
    """``fn(lane_index[i], *lane_i)`` for every lane, where the lanes come in ``groups``
    consecutive blocks of equal size with one index each (candidate-major lanes):
    ``lax.map`` over the blocks, ``vmap`` over the lanes of a block (``groups == 1``:
    one ``vmap`` over all lanes, whatever their indices).

    Inside a block the index is a scalar, not a batched value, so a ``lax.switch`` on
    it (a :class:`NetworkSwitch`, a switched reward) runs only the block's branch: K
    candidates with different networks cost their own networks' compute, in turn,
    instead of every lane computing all K as under one ``vmap``; they still compile as
    one program.

    Args:
        fn: ``(index, *lane) -> out`` for one lane (``index`` an int32 scalar).
        groups: the number of blocks (>= 1, dividing the number of lanes).
        lane_index: ``[L]`` int32, constant within each block (any, for one block).
        *lanes: pytrees with a leading ``[L]`` axis.

    Returns:
        ``fn``'s outputs stacked over the ``[L]`` lanes, in lane order.

    Raises:
        ValueError: ``groups`` does not divide the lanes.
    """
    n_lanes = lane_index.shape[0]
    if groups < 1 or n_lanes % groups:
        raise ValueError(f"map_candidates: {groups} blocks do not divide {n_lanes} lanes")
    if groups == 1:
        return jax.vmap(fn)(lane_index, *lanes)
    size = n_lanes // groups

    def block(x):
        return x.reshape(groups, size, *x.shape[1:])

    def one_block(args):
        index, block_lanes = args
        return jax.vmap(lambda *lane: fn(index[0], *lane))(*block_lanes)

    out = jax.lax.map(one_block, jax.tree.map(block, (lane_index, lanes)))
    return jax.tree.map(lambda x: x.reshape(n_lanes, *x.shape[2:]), out)
