"""K networks behind one index: each lane runs, initializes and trains its own member as
that member alone would, and another member's non-finite gradient cannot leak in."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from serl_jax.config import load_config
from serl_jax.rl.network_switch import (
    NetworkSwitch,
    candidate_networks,
    map_candidates,
    switches_networks,
)
from serl_jax.rl.networks import action_set_key, make_network


class SqrtHead(nn.Module):
    """A member whose gradient is non-finite everywhere: d sqrt(u)/du at u = 0 is inf,
    and its parameters reach the output only through it."""

    @nn.compact
    def __call__(self, obs):
        u = nn.Dense(2)(obs) * 0.0
        root = jnp.sqrt(u)
        return root, root[..., 0]


OBS = jnp.linspace(-1.0, 1.0, 12, dtype=jnp.float32).reshape(3, 4)


def test_each_member_initializes_and_runs_as_alone():
    a, b = make_network((8,), "tanh"), make_network((4, 4), "relu")
    key = jax.random.PRNGKey(3)
    variables = NetworkSwitch((a, b), 0).init(key, OBS[0])
    for j, member in enumerate((a, b)):
        alone = member.init(key, OBS[0])
        for x, y in zip(jax.tree.leaves(alone), jax.tree.leaves(variables[j]), strict=True):
            np.testing.assert_array_equal(x, y)
        logits, value = NetworkSwitch((a, b), jnp.int32(j)).apply(variables, OBS)
        want_logits, want_value = member.apply(alone, OBS)
        np.testing.assert_allclose(logits, want_logits, rtol=1e-6)
        np.testing.assert_allclose(value, want_value, rtol=1e-6)


def test_gradients_reach_only_the_lanes_own_member_and_stay_finite_under_vmap():
    a, poison = make_network((8,), "tanh"), SqrtHead()
    key = jax.random.PRNGKey(0)
    variables = NetworkSwitch((a, poison), 0).init(key, OBS[0])

    def loss(v, index):
        logits, value = NetworkSwitch((a, poison), index).apply(v, OBS)
        return (logits**2).sum() + (value**2).sum()

    # Lane 0 runs member 0, lane 1 the poisoned member: vmap evaluates both branches.
    grads = jax.vmap(jax.grad(loss), in_axes=(None, 0))(variables, jnp.array([0, 1]))
    lane0 = jax.tree.map(lambda g: g[0], grads)
    want = jax.grad(lambda p: sum((x**2).sum() for x in a.apply(p, OBS)))(variables[0])
    for x, y in zip(jax.tree.leaves(want), jax.tree.leaves(lane0[0]), strict=True):
        np.testing.assert_allclose(y, x, rtol=1e-5, atol=1e-7)
    assert all(np.all(g == 0.0) for g in jax.tree.leaves(lane0[1]))  # not 0 * inf = NaN
    lane1 = jax.tree.map(lambda g: g[1], grads)
    assert all(np.all(g == 0.0) for g in jax.tree.leaves(lane1[0]))
    # The poisoned member's own lane gets its NaN, as it would alone.
    assert not all(np.isfinite(g).all() for g in jax.tree.leaves(lane1[1]))


def test_members_must_share_their_action_set():
    discrete = make_network((8,), "tanh", (0.0, 1.0, 2.0))
    with pytest.raises(ValueError, match="different action sets"):
        NetworkSwitch((make_network((8,)), discrete), 0)
    with pytest.raises(ValueError, match="no member networks"):
        NetworkSwitch((), 0)
    assert NetworkSwitch((discrete, discrete), 0).action_multiples == (0.0, 1.0, 2.0)


def test_candidates_sharing_a_module_share_a_member():
    a, b = make_network((8,)), make_network((4,))
    network_for, member_of = candidate_networks([a, b, a])
    assert member_of == [0, 1, 0]
    switch = network_for(jnp.int32(2))
    assert switch.members == (a, b) and int(switch.index) == 0
    alone_for, member_of = candidate_networks([a, a])
    assert alone_for(jnp.int32(1)) is a and member_of == [0, 0]


def test_action_set_key_reads_the_declaration_only():
    plain = "class Network:\n    width: int = 64\n"
    discrete = "class Network:\n    action_multiples: tuple = (0.0, 1.0)\n    width: int = 8\n"
    assert action_set_key(plain) == "" == action_set_key(plain.replace("64", "32"))
    assert action_set_key(discrete) == action_set_key(discrete.replace("8", "16")) != ""
    assert action_set_key(discrete) != action_set_key(discrete.replace("1.0", "2.0"))
    assert action_set_key("def (") == "def ("


def test_candidates_take_turns_with_a_scalar_index():
    """Blocks of lanes in turn give what one vmap gives, and inside a block a switch on
    the index stays a branch (``cond``: only the block's own runs), where one vmap over
    lanes with different indices turns it into a select over every branch's output."""

    def fn(index, x, y):
        branches = [lambda v, k=k: v.sum() * (k + 1) for k in range(3)]
        return {"sum": jax.lax.switch(index, branches, x), "y": y * 2.0}

    index = jnp.array([0, 0, 1, 1, 2, 2], jnp.int32)
    x = jnp.arange(18.0).reshape(6, 3)
    y = jnp.arange(6.0)
    got = jax.jit(lambda i, a, b: map_candidates(fn, 3, i, a, b))(index, x, y)
    want = jax.vmap(fn)(index, x, y)
    for name in ("sum", "y"):
        np.testing.assert_array_equal(got[name], want[name])
    in_turns = str(jax.make_jaxpr(lambda i, a, b: map_candidates(fn, 3, i, a, b))(index, x, y))
    assert " cond[" in in_turns
    assert " cond[" not in str(jax.make_jaxpr(jax.vmap(fn))(index, x, y))
    with pytest.raises(ValueError, match="4 blocks do not divide 6 lanes"):
        map_candidates(fn, 4, index, x, y)


def test_the_setting_is_checked_and_auto_follows_the_backend():
    assert switches_networks("always") and not switches_networks("never")
    assert switches_networks("auto") == (jax.default_backend() != "cpu")
    with pytest.raises(ValueError, match="loop.switch_networks: expected one of"):
        switches_networks("true")
    with pytest.raises(ValueError, match="loop.switch_networks: expected one of"):
        load_config(None, ["loop.switch_networks=sometimes"])
