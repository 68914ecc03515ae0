"""Novelty figures (serl_jax.loop.novelty) on hand-made programs."""

from __future__ import annotations

import numpy as np
import pytest

from llm.prompts import design_prompt
from llm.prompts.defaults import DEFAULT_CODE
from serl_jax.loop.novelty import (
    canonical_program,
    is_copy,
    novelty,
    novelty_labels,
    probe_outputs,
    same_outputs,
    shown_programs,
    without_term,
)
from serl_jax.loop.store import Candidate

REWARD = """\
import jax.numpy as jnp


def share(num, den):
    return jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0), 0.0)


def reward(prev_state, action, next_state, params):
    fraction = share(next_state.last_qty, next_state.quantity)
    return {"fill": params.reward_scale * fraction * 2.0}
"""

# REWARD renamed (module-level helper, arguments, locals), restyled, commented, documented.
RENAMED = '''\
"""Fill share."""
import jax.numpy as np


def ratio(a, b):  # safe division
    return np.where(b > 0, a / np.where(b > 0, b, 1.0), 0.0)


def reward(s0, act, s1, p):
    """Twice the fill share."""
    f = ratio(s1.last_qty,
              s1.quantity)
    return {"fill": p.reward_scale * f * 2.0}
'''

# The same terms computed another way: a*2 as a+a.
REWRITTEN = REWARD.replace("fraction * 2.0", "(fraction + fraction)")

NETWORK = """\
import flax.linen as nn
import jax.numpy as jnp


class Network(nn.Module):
    hidden: int = 16

    @nn.compact
    def __call__(self, obs):
        h = nn.tanh(nn.Dense(self.hidden)(obs))
        mean = nn.Dense(1, kernel_init=nn.initializers.lecun_normal())(h)
        policy = jnp.concatenate([mean, jnp.full_like(mean, -0.7)], axis=-1)
        return policy, nn.Dense(1)(h)[..., 0]
"""

NETWORK_RENAMED = (
    NETWORK.replace("h =", "z =").replace("(h)", "(z)").replace("mean", "mu")
    .replace("policy", "out").replace("obs", "x")
)  # fmt: skip


def test_a_renamed_variable_is_a_copy_and_a_changed_constant_is_not():
    assert canonical_program(RENAMED) == canonical_program(REWARD)
    assert canonical_program(NETWORK_RENAMED) == canonical_program(NETWORK)
    assert canonical_program(REWARD.replace("2.0", "2.5")) != canonical_program(REWARD)
    # field names are attributes (self.hidden), kept as written
    assert canonical_program(NETWORK.replace("hidden", "width")) != canonical_program(NETWORK)
    # a different helper called is not a renaming
    assert canonical_program(REWARD.replace("share(next", "len(next")) != canonical_program(REWARD)


def test_copies_of_what_the_prompt_showed():
    prompt = design_prompt("reward", "MACRO", "Improve it.", example=REWARD)
    assert shown_programs(prompt) == [REWARD]
    assert is_copy(RENAMED, prompt)
    assert not is_copy(REWARD.replace("2.0", "3.0"), prompt)
    assert not is_copy(REWRITTEN, prompt)  # the same terms, another program


@pytest.fixture(scope="module")
def probes():
    codes = {
        "reward": REWARD, "rewritten": REWRITTEN, "constant": REWARD.replace("2.0", "2.5"),
        "network": NETWORK, "network_renamed": NETWORK_RENAMED,
        "network_constant": NETWORK.replace("-0.7", "-0.6"),
    }  # fmt: skip
    return {
        name: probe_outputs(code, "network" if name.startswith("network") else "reward")
        for name, code in codes.items()
    }


def test_functional_duplicates_of_rewards(probes):
    assert set(probes["reward"]) == {"fill", "total"}
    assert probes["reward"]["fill"].shape == (64,)
    assert np.abs(probes["reward"]["fill"]).max() > 0  # the probe sees real fills
    assert same_outputs(probes["reward"], probes["rewritten"])
    assert not same_outputs(probes["reward"], probes["constant"])


def test_functional_duplicates_of_networks(probes):
    assert probes["network"]["policy"].shape == (64, 2)
    assert same_outputs(probes["network"], probes["network_renamed"])
    assert not same_outputs(probes["network"], probes["network_constant"])


def test_outputs_agree_to_one_millionth_of_their_scale():
    a = {"t": np.array([100.0, 0.0])}
    assert same_outputs(a, {"t": np.array([100.0, 9e-5])})  # 9e-5 <= 1e-6 * 100
    assert not same_outputs(a, {"t": np.array([100.0, 2e-4])})
    assert not same_outputs(a, {"u": a["t"]})  # other term names
    assert same_outputs({"t": np.zeros(3)}, {"t": np.zeros(3)})


def test_rates_by_hand():
    """Six candidates, five valid: j0 (no prompt), a copy of the prompt's program
    renamed (also a functional duplicate of j0), an original reward, its rewrite (a
    functional duplicate of it), an original with another constant, and a rejected one.
    Rates over the four designed (c0 has no prompt): copies 1/4 (c1), duplicates 2/4
    (c1, c4); distinct 5 - 2 = 3 (c0, c2, c3)."""
    prompt = design_prompt("reward", "MACRO", "Improve it.", example=REWARD)
    outputs = {  # a stand-in probe: one term, by program
        canonical_program(REWARD): 2.0, canonical_program(REWRITTEN): 2.0,
        canonical_program(REWARD.replace("2.0", "2.5")): 2.5,
        canonical_program(NETWORK): 1.0, canonical_program(NETWORK.replace("16", "8")): 3.0,
    }  # fmt: skip

    def probe(code, kind):
        return {"t": np.array([outputs[canonical_program(code)]])}

    def cand(i, module, reward, network=NETWORK, status="evaluated", prompt_id=1):
        return Candidate(
            id=f"c{i}", iteration=1, idx=i, module=module, instruction="", completion="",
            reward_code=reward, network_code=network, status=status, prompt_id=prompt_id,
        )  # fmt: skip

    cands = [
        cand(0, "default", REWARD, prompt_id=None),
        cand(1, "reward", RENAMED),  # copy, and duplicate of c0
        cand(2, "network", REWARD, NETWORK.replace("16", "8")),  # original network
        cand(3, "reward", REWARD.replace("2.0", "2.5"), status="crashed"),  # original
        cand(4, "reward", REWRITTEN, NETWORK.replace("16", "8")),  # duplicate of c2
        cand(5, "reward", "def reward(: ", status="rejected"),
    ]
    figures = novelty(cands, {1: prompt}, ("reward", "network", "imagination"), probe)
    assert figures == {
        "copy_rate": 1 / 4, "duplicate_rate": 2 / 4, "designed_valid": 4, "distinct_valid": 3,
    }  # fmt: skip
    labels = novelty_labels(cands, {1: prompt}, ("reward", "network", "imagination"), probe)
    assert [(c.id, copy, dup) for c, copy, dup in labels] == [
        ("c0", False, False), ("c1", True, True), ("c2", False, False), ("c3", False, False),
        ("c4", False, True),
    ]  # fmt: skip
    # a library seed (no prompt) duplicating c0 is a duplicate, but not the designer's
    seed = cand(6, "reward", RENAMED, prompt_id=None)
    figures = novelty([*cands, seed], {1: prompt}, ("reward", "network", "imagination"), probe)
    assert figures == {
        "copy_rate": 1 / 4, "duplicate_rate": 2 / 4, "designed_valid": 4, "distinct_valid": 3,
    }  # fmt: skip
    assert novelty([], {}, ("reward",), probe) == {
        "copy_rate": 0.0, "duplicate_rate": 0.0, "designed_valid": 0, "distinct_valid": 0,
    }  # fmt: skip


def test_the_default_program_is_shown_and_recognized():
    prompt = design_prompt("reward", "MACRO", "Improve it.")
    assert is_copy(DEFAULT_CODE["reward"], prompt)


def test_a_dropped_terms_outputs_by_hand():
    outputs = {
        "a": np.array([1.0, 2.0], np.float32),
        "b": np.array([3.0, -4.0], np.float32),
        "c": np.array([0.5, 0.5], np.float32),
        "total": np.array([4.5, -1.5], np.float32),
    }
    out = without_term(outputs, "b")
    assert list(out) == ["a", "c", "total"]
    assert out["total"].tolist() == [1.5, 2.5] and out["a"] is outputs["a"]
    alone = without_term({"a": outputs["a"], "total": outputs["a"]}, "a")
    assert list(alone) == ["total"] and alone["total"].tolist() == [0.0, 0.0]
    for bad in ("total", "missing"):
        with pytest.raises(KeyError, match=f"'{bad}' is not a term of the outputs"):
            without_term(outputs, bad)


def test_a_dropped_term_computes_what_the_program_without_it_computes():
    """The probe's outputs of a program asked to drop a term are without_term's."""
    more = REWARD.replace("return {", "return {'extra': next_state.inventory * 1e-3, ")
    one = probe_outputs(REWARD, "reward")
    assert "extra" in probe_outputs(more, "reward")
    assert same_outputs(without_term(probe_outputs(more, "reward"), "extra"), one)
    assert not same_outputs(without_term(one, "fill"), one)
