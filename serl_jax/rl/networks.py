"""The network slot: actor-critic flax modules mapping observations to a policy and a value.

Contract for any network placed in the slot (the default below or validated LLM code):
``module.apply(params, obs)`` with ``obs`` float32 ``[..., D]`` returns
``(policy_outputs [..., 2], value [...])``: the mean and log-standard-deviation of the
action's logit, which :meth:`serl_jax.rl.distributions.LogitNormal.from_logits` turns into
the policy over ``a = sigmoid(z) ∈ (0, 1)``, and the state-value estimate (scaled reward
units). A module that declares the field ``action_multiples`` (K non-negative numbers,
:func:`declared_action_multiples`) returns ``policy_outputs [..., K]`` instead: the logits
of a categorical over those multiples of the action prior's child order
(:class:`serl_jax.rl.distributions.PriorMultiples`, a discrete action set).
"""

from __future__ import annotations

import ast
import dataclasses
import math
import numbers
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from serl_jax.rl.distributions import ActionDistribution, action_distribution

ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu}

#: The optional field with which a network program sets its action prior's anchor.
PRIOR_ANCHOR_FIELD = "prior_anchor_steps"
#: Largest anchor a program may declare, steps (a day has at most 390 one-minute steps).
MAX_PRIOR_ANCHOR_STEPS = 1000.0
#: The optional field with which a network declares a discrete action set.
ACTION_MULTIPLES_FIELD = "action_multiples"
#: Most multiples a discrete action set may have, and the largest multiple.
MAX_ACTION_MULTIPLES, MAX_ACTION_MULTIPLE = 64, 100.0


class ActorCritic(nn.Module):
    """Separate actor and critic MLPs (PureJaxRL's layout).

    Initialization is Glorot-uniform with a near-zero policy head, so the untrained policy
    is ``z ~ Normal(prior_logit, 0.5)``: the action prior (the VWAP schedule by default,
    :func:`serl_jax.envs.execution.vwap_action_prior`) with some exploration.

    PureJaxRL's orthogonal init is deliberately not used: it calls LAPACK (QR), and on CPU
    jaxlib's LAPACK is scipy's OpenBLAS, whose thread server deadlocked when a ``vmap``
    over seeds ran several QRs at once (seen with jax 0.10.2 on 2 cores).

    With ``action_multiples`` (a discrete action set) the policy head has one output per
    multiple, initialized so that the multiple closest to 1 (the prior's own child order)
    has probability 1/2 and the others share the rest.

    Attributes:
        hidden_sizes: widths of the hidden layers of each MLP.
        activation: one of ``"tanh"``, ``"relu"``, ``"gelu"``.
        action_multiples: K multiples of the prior action (:func:`make_network`), or None
            for the logit-normal policy.
    """

    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    action_multiples: tuple[float, ...] | None = None

    @nn.compact
    def __call__(self, obs: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
        act = ACTIVATIONS[self.activation]
        actor = obs
        critic = obs
        init = nn.initializers.glorot_uniform()
        for width in self.hidden_sizes:
            actor = act(nn.Dense(width, kernel_init=init)(actor))
            critic = act(nn.Dense(width, kernel_init=init)(critic))
        small = nn.initializers.variance_scaling(1e-4, "fan_avg", "uniform")
        if self.action_multiples:
            bias = nn.initializers.constant(unit_biased_logits(self.action_multiples))
            width = len(self.action_multiples)
        else:
            bias = nn.initializers.constant(jnp.array([0.0, jnp.log(0.5)]))
            width = 2
        logits = nn.Dense(width, kernel_init=small, bias_init=bias)(actor)
        value = nn.Dense(1, kernel_init=init)(critic)
        return logits, value[..., 0]


def unit_biased_logits(multiples: Sequence[float]) -> jnp.ndarray:
    """Initial categorical logits ``[K]`` float32 (K >= 2): probability 1/2 on the multiple
    closest to 1, the other K - 1 sharing the rest equally."""
    k = len(multiples)
    unit = min(range(k), key=lambda i: abs(multiples[i] - 1.0))
    return jnp.zeros(k, jnp.float32).at[unit].set(jnp.log(k - 1.0))


def make_network(
    hidden_sizes: Sequence[int] = (64, 64),
    activation: str = "tanh",
    action_multiples: Sequence[float] | None = None,
) -> nn.Module:
    """The default network slot.

    Args:
        hidden_sizes: widths of the actor's and the critic's hidden layers.
        activation: ``tanh``, ``relu`` or ``gelu``.
        action_multiples: a discrete action set (K >= 2 non-negative multiples of the
            prior action), or None/empty for the logit-normal policy.

    Raises:
        ValueError: unknown activation name, or a bad action set
            (:func:`check_action_multiples`).
    """
    if activation not in ACTIVATIONS:
        raise ValueError(
            f"network.activation: unknown {activation!r}; use one of {sorted(ACTIVATIONS)}"
        )
    multiples = check_action_multiples(action_multiples, "network.action_multiples")
    return ActorCritic(tuple(hidden_sizes), activation, multiples)


def check_action_multiples(values: Any, where: str) -> tuple[float, ...] | None:
    """A discrete action set as a tuple of floats, or None for none.

    Args:
        values: None or an empty sequence (no discrete set), or 2 to
            ``MAX_ACTION_MULTIPLES`` distinct real numbers in ``[0, MAX_ACTION_MULTIPLE]``.
        where: what to name in the error (e.g. the config key).

    Raises:
        ValueError: one line naming ``where`` and what is wrong.
    """
    if values is None or (isinstance(values, (tuple, list)) and not values):
        return None
    if not isinstance(values, (tuple, list)):
        raise ValueError(f"{where}: expected a list of multiples, got {values!r}")
    ok = all(
        isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)
        and 0.0 <= v <= MAX_ACTION_MULTIPLE
        for v in values
    )  # fmt: skip
    if not ok or not 2 <= len(values) <= MAX_ACTION_MULTIPLES or len(set(values)) < len(values):
        raise ValueError(
            f"{where}: expected 2 to {MAX_ACTION_MULTIPLES} distinct numbers in "
            f"[0, {MAX_ACTION_MULTIPLE:g}], got {values!r}"
        )
    return tuple(float(v) for v in values)


def declared_action_multiples(network: nn.Module) -> tuple[float, ...] | None:
    """The discrete action set a network declares (the dataclass field
    ``action_multiples``; reading it runs no program code), or None (logit-normal policy).

    Raises:
        ValueError: the declared value is not a valid set (:func:`check_action_multiples`).
    """
    if ACTION_MULTIPLES_FIELD not in {f.name for f in dataclasses.fields(network)}:
        return None
    value = network.__dict__.get(ACTION_MULTIPLES_FIELD)
    return check_action_multiples(value, f"network field {ACTION_MULTIPLES_FIELD}")


def network_policy(
    network: nn.Module, outputs: jnp.ndarray, prior_logit: jnp.ndarray = 0.0
) -> ActionDistribution:
    """The action distribution of a network's ``policy_outputs`` ``[..., 2 or K]`` around
    the prior logit ``[...]`` (:func:`serl_jax.rl.distributions.action_distribution`)."""
    return action_distribution(outputs, prior_logit, declared_action_multiples(network))


def declared_prior_anchor(network: nn.Module) -> float | None:
    """The anchor of the TWAP action prior that a network program declares, if any.

    A network module may declare the field ``prior_anchor_steps`` (k, in steps): the agent
    design then sets the time constant with which the prior pulls the inventory back to
    the TWAP schedule (:func:`serl_jax.envs.execution.twap_action_prior`; 0: catch up in
    one step), in place of ``network.prior_anchor_steps`` of the run configuration. Only
    a dataclass field counts (a flax module's fields), so reading it runs no program code.

    Args:
        network: a flax module (the framework's or a validated program's ``Network()``).

    Returns:
        k as a float, or None when the module declares no such field.

    Raises:
        ValueError: the declared value is not a real number in
            ``[0, MAX_PRIOR_ANCHOR_STEPS]`` (one line naming the field and the value).
    """
    if PRIOR_ANCHOR_FIELD not in {f.name for f in dataclasses.fields(network)}:
        return None
    value = network.__dict__.get(PRIOR_ANCHOR_FIELD)
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not ok or not (math.isfinite(value) and 0.0 <= value <= MAX_PRIOR_ANCHOR_STEPS):
        raise ValueError(
            f"network field {PRIOR_ANCHOR_FIELD}: expected a number of steps in "
            f"[0, {MAX_PRIOR_ANCHOR_STEPS:g}], got {value!r}"
        )
    return float(value)


def network_code_key(code: str) -> str:
    """A network program's code without the declaration of its prior anchor (an
    ``ast.dump``): programs with equal keys build the same network and differ at most in
    the anchor (declared or not), so they can train together with one shared network and
    a prior per program (:func:`serl_jax.experiment.train_candidates`).

    A program that reads the field anywhere besides declaring it (its network could then
    depend on the value), or that does not parse, keys as its whole code.

    Args:
        code: network program source.

    Returns:
        The key (a string).
    """
    tree = _parse(code)
    if tree is None:
        return code
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            node.body = [stmt for stmt in node.body if not _assigns(stmt, PRIOR_ANCHOR_FIELD)]
    key = ast.dump(tree)
    return code if PRIOR_ANCHOR_FIELD in key else key


def action_set_key(code: str) -> str:
    """What a network program declares as its discrete action set, from its code alone
    (an ``ast.dump`` of the value given to ``action_multiples`` in its classes; "" when
    none): networks with different keys have policy outputs of different shapes, so
    they cannot train behind one switch (:mod:`serl_jax.rl.network_switch`). A program
    that does not parse keys as its whole code.

    Returns the key (a string) of the program source ``code``.
    """
    tree = _parse(code)
    if tree is None:
        return code
    values = [
        ast.dump(stmt.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        for stmt in node.body
        if _assigns(stmt, ACTION_MULTIPLES_FIELD) and stmt.value is not None
    ]
    return "|".join(values)


def _parse(code: str) -> ast.Module | None:
    try:
        return ast.parse(code)
    except SyntaxError:
        return None


def _assigns(stmt: ast.stmt, name: str) -> bool:
    targets = [stmt.target] if isinstance(stmt, ast.AnnAssign) else getattr(stmt, "targets", [])
    return any(isinstance(t, ast.Name) and t.id == name for t in targets)
