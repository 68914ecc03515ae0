"""Change hints of search prompts (llm.prompts.hints), on hand-made programs."""

from __future__ import annotations

import random
import string

import numpy as np
import pytest

from llm.prompts import search_prompt
from llm.prompts.builder import _ANSWER_FORMAT
from llm.prompts.hints import (
    ACTIVATIONS,
    CHANGES,
    EARLIER_CHANGES,
    constants_by_term,
    draw_hint,
    made_change,
    new_values,
    program_constants,
    read_change,
    state_fields_read,
    term_names,
    values_tried,
)
from serl_jax.loop.islands import Program

REWARD = """\
import jax.numpy as jnp

WEIGHT = 0.3
OFFSET = -2
TABLE = jnp.array([1.0, 2.0])
label = "not a number"


def reward(prev_state, action, next_state, params):
    local = 5.0
    pa = params.side * (next_state.last_price / next_state.benchmark_price - 1.0) * 1e4
    if_done = next_state.time >= prev_state.window_len
    return {"pa": WEIGHT * pa * local, "end": jnp.where(if_done, OFFSET, 0.0), "pa2": pa}
"""

NETWORK = """\
import flax.linen as nn


class Network(nn.Module):
    width: int = 64
    depth: int = 2
    name_: str = "x"

    @nn.compact
    def __call__(self, obs):
        h = nn.relu(nn.Dense(self.width)(obs))
        h = nn.LayerNorm()(h)
        return nn.Dense(2)(h), nn.Dense(1)(h)[..., 0]
"""


def test_constants_are_named_numbers_at_module_or_class_level():
    # function locals, arrays and strings are not constants; signs and ints are kept
    assert program_constants(REWARD) == [("WEIGHT", "0.3"), ("OFFSET", "-2")]
    assert program_constants(NETWORK) == [("width", "64"), ("depth", "2")]
    assert program_constants("def broken(:") == []


def test_terms_and_fields_read():
    assert term_names(REWARD) == ["pa", "end", "pa2"]
    assert term_names("def reward(p, a, n, q):\n    return 1.0\n") == []
    assert state_fields_read(REWARD) == {"last_price", "benchmark_price", "time", "window_len"}


def test_each_kind_draws_from_its_own_changes():
    rng = random.Random(0)
    constants = {
        "Change `WEIGHT` from 0.3 to 0.15.",
        "Change `WEIGHT` from 0.3 to 0.6.",
        "Change `OFFSET` from -2 to -1.",
        "Change `OFFSET` from -2 to -4.",
    }
    drawn = {kind: {draw_hint(kind, "reward", [REWARD], rng) for _ in range(400)} for kind in
             ("better", "form", "parameters")}  # fmt: skip
    assert drawn["parameters"] == constants
    # no change of form asks for a term on a new state field (3 of 21 valid with the 1.5B)
    # each names the entry to edit (the template's general sentence is for an entry
    # over several lines)
    end = '"end": jnp.where(if_done, OFFSET, 0.0)'
    form = {
        "Drop the term 'pa': delete `\"pa\": WEIGHT * pa * local` from the returned dict.",
        f"Drop the term 'end': delete `{end}` from the returned dict.",
        "Drop the term 'pa2': delete `\"pa2\": pa` from the returned dict.",
        "Rework the term 'pa' (its signed square root): replace `\"pa\": WEIGHT * pa * local` "
        'with `"pa": jnp.sign(WEIGHT * pa * local) * jnp.sqrt(jnp.abs(WEIGHT * pa * local))`.',
        # a term that is not a name or a call is bracketed before it is multiplied
        "Rework the term 'pa' (its signed square): replace `\"pa\": WEIGHT * pa * local` with "
        '`"pa": (WEIGHT * pa * local) * jnp.abs(WEIGHT * pa * local)`.',
        f"Rework the term 'end' (its signed square root): replace `{end}` with `\"end\": "
        "jnp.sign(jnp.where(if_done, OFFSET, 0.0)) * jnp.sqrt(jnp.abs(jnp.where(if_done, "
        "OFFSET, 0.0)))`.",
        f"Rework the term 'end' (its signed square): replace `{end}` with `\"end\": "
        "jnp.where(if_done, OFFSET, 0.0) * jnp.abs(jnp.where(if_done, OFFSET, 0.0))`.",
        "Rework the term 'pa2' (its signed square root): replace `\"pa2\": pa` with "
        '`"pa2": jnp.sign(pa) * jnp.sqrt(jnp.abs(pa))`.',
        "Rework the term 'pa2' (its signed square): replace `\"pa2\": pa` with "
        '`"pa2": pa * jnp.abs(pa)`.',
    }
    assert drawn["form"] == form
    assert drawn["better"] == form | constants
    # a crossover of two programs alike in their terms and fields names no change; nor
    # does a kind whose program allows none
    assert draw_hint("crossover", "reward", [REWARD, REWARD], rng) is None
    assert draw_hint("crossover", "reward", [REWARD], rng) is None
    assert draw_hint("parameters", "reward", ["def reward(p, a, n, q):\n    return 0.0\n"],
                     rng) is None  # fmt: skip
    assert draw_hint("form", "imagination", [REWARD], rng) is None
    assert draw_hint("better", "reward", [], rng) is None


def test_the_change_comes_from_the_best_program():
    """Shots are in prompt order (best last): constants and terms are the last one's."""
    worse = "X = 7.0\n\ndef reward(p, a, next_state, q):\n    return {'x': X * next_state.pace}\n"
    rng = random.Random(1)
    drawn = {draw_hint("better", "reward", [worse, REWARD], rng) for _ in range(400)}
    assert not any("'x'" in h or "`X`" in h for h in drawn)
    assert "Drop the term 'pa2': delete `\"pa2\": pa` from the returned dict." in drawn
    assert "Change `WEIGHT` from 0.3 to 0.6." in drawn


def test_a_constants_change_scales_it_to_a_value_not_tried():
    """Half and double, else a quarter and four times, else a tenth and ten times; ints
    stay ints and never reach 0; tried values compare as numbers."""
    assert new_values("100.0") == ["50.0", "200.0"]
    assert new_values("0.0005") == ["0.00025", "0.001"]
    assert new_values("-2") == ["-1", "-4"]
    assert new_values("1") == ["2"]  # half of 1 rounds to 0
    assert new_values("64", {"32.0", "128", "256"}) == ["16", "640"]
    assert new_values("0.3", {"0.15", "0.075", "0.03", "0.6", "1.2", "3.0"}) == []
    assert new_values("0.0") == []
    assert new_values("1e-05") == ["5e-06", "2e-05"]


def test_groups_weigh_equally_not_their_changes():
    """better on NETWORK: four groups (4 constant changes, 6 activations, 1 layer
    normalization, a skip and 2 widths; no layer line maps a name to itself, so no layer
    count); each is drawn a quarter of the time, so the layer normalization is 1/4 of the
    hints, not 1/14 as with one draw over all changes."""
    rng = random.Random(2)
    draws = [draw_hint("better", "network", [NETWORK], rng) for _ in range(2000)]
    share = draws.count("Remove layer normalization: delete the line `h = nn.LayerNorm()(h)`.")
    assert len(set(draws)) == 14
    assert share / len(draws) == pytest.approx(0.25, abs=0.03)


def test_network_changes_name_activations_it_does_not_use():
    rng = random.Random(3)
    drawn = {draw_hint("form", "network", [NETWORK], rng) for _ in range(400)}
    assert "Replace every `nn.relu` with `nn.tanh`." in drawn
    assert not any("with `nn.relu`" in h for h in drawn)
    # a network that calls no activation is asked to use one
    linear = NETWORK.replace("nn.relu(nn.Dense(self.width)(obs))", "nn.Dense(self.width)(obs)")
    drawn = {draw_hint("form", "network", [linear], rng) for _ in range(400)}
    assert "Use `nn.tanh` as the activation of the hidden layers." in drawn


LOOPED = """\
import flax.linen as nn
import jax.numpy as jnp


class Network(nn.Module):
    width: int = 64

    @nn.compact
    def __call__(self, obs):
        actor = obs
        for _ in range(2):
            actor = nn.tanh(nn.Dense(self.width)(actor))
        h = nn.tanh(nn.Dense(8)(obs))
        h = nn.tanh(nn.Dense(8)(h))
        h = nn.tanh(nn.Dense(8)(h))
        return nn.Dense(2)(actor), nn.Dense(1)(jnp.concatenate([actor, h], -1))[..., 0]
"""


def test_network_changes_name_the_line_to_edit():
    """A layer is added by writing a line that maps a name to itself twice (not the one
    that reads obs), removed where its name has another line; layer normalization goes
    between nn.Dense and the activation; a width is doubled or halved (a literal as a
    number, an expression with ``2 *`` and ``// 2``)."""
    rng = random.Random(6)
    drawn = {draw_hint("form", "network", [LOOPED], rng) for _ in range(1500)}
    lines = {
        "a": "actor = nn.tanh(nn.Dense(self.width)(actor))",
        "h0": "h = nn.tanh(nn.Dense(8)(obs))",
        "h": "h = nn.tanh(nn.Dense(8)(h))",
    }
    expected = {
        f"Add a hidden layer: write the line `{lines['a']}` twice, one after the other.",
        f"Add a hidden layer: write the line `{lines['h']}` twice, one after the other.",
        f"Remove a hidden layer: delete the line `{lines['h']}`.",
        "Add layer normalization: replace `actor = nn.tanh(nn.Dense(self.width)(actor))` with "
        "`actor = nn.tanh(nn.LayerNorm()(nn.Dense(self.width)(actor)))`.",
        "Add layer normalization: replace `h = nn.tanh(nn.Dense(8)(obs))` with "
        "`h = nn.tanh(nn.LayerNorm()(nn.Dense(8)(obs)))`.",
        "Add layer normalization: replace `h = nn.tanh(nn.Dense(8)(h))` with "
        "`h = nn.tanh(nn.LayerNorm()(nn.Dense(8)(h)))`.",
        "Add a skip connection: add a hidden layer's input to its output.",
        "Change one layer's width: replace `actor = nn.tanh(nn.Dense(self.width)(actor))` with "
        "`actor = nn.tanh(nn.Dense(2 * self.width)(actor))`.",
        "Change one layer's width: replace `actor = nn.tanh(nn.Dense(self.width)(actor))` with "
        "`actor = nn.tanh(nn.Dense(max(self.width // 2, 1))(actor))`.",
        "Change one layer's width: replace `h = nn.tanh(nn.Dense(8)(obs))` with "
        "`h = nn.tanh(nn.Dense(16)(obs))`.",
        "Change one layer's width: replace `h = nn.tanh(nn.Dense(8)(obs))` with "
        "`h = nn.tanh(nn.Dense(4)(obs))`.",
        "Change one layer's width: replace `h = nn.tanh(nn.Dense(8)(h))` with "
        "`h = nn.tanh(nn.Dense(16)(h))`.",
        "Change one layer's width: replace `h = nn.tanh(nn.Dense(8)(h))` with "
        "`h = nn.tanh(nn.Dense(4)(h))`.",
    } | {f"Replace every `nn.tanh` with `nn.{a}`." for a in ACTIVATIONS if a != "tanh"}
    assert drawn == expected
    # layer normalization applied inside a line is taken out of it
    normed = LOOPED.replace("nn.tanh(nn.Dense(8)(h))", "nn.LayerNorm()(nn.tanh(nn.Dense(8)(h)))")
    drawn = {draw_hint("form", "network", [normed], rng) for _ in range(1500)}
    assert {h for h in drawn if "layer normalization" in h} == {
        "Remove layer normalization: replace `h = nn.LayerNorm()(nn.tanh(nn.Dense(8)(h)))` "
        "with `h = nn.tanh(nn.Dense(8)(h))`."
    }


def test_every_named_edit_applies_to_the_code_and_builds_a_network():
    """Each edit a hint names, made by plain text replacement on the program, gives a
    network that passes validation and returns the contract's outputs on the novelty
    probe: the hints never ask for code that cannot run."""
    from serl_jax.loop.novelty import probe_outputs

    rng = random.Random(9)
    hints = {draw_hint("form", "network", [LOOPED], rng) for _ in range(1500)}
    edited = []
    for hint in hints:
        kind, fields = read_change(hint)
        if kind == "activation":
            edited.append(LOOPED.replace(f"nn.{fields['old']}(", f"nn.{fields['name']}("))
        elif "new" in fields:
            assert fields["old"] in LOOPED
            edited.append(LOOPED.replace(fields["old"], fields["new"], 1))
        elif "line" in fields:
            lines = LOOPED.splitlines(keepends=True)
            at = next(i for i, line in enumerate(lines) if line.strip() == fields["line"])
            if hint.startswith("Add"):
                lines.insert(at, lines[at])
            else:
                del lines[at]
            edited.append("".join(lines))
    assert len(set(edited)) == len(hints) - 1  # all but the skip connection, all different
    for code in edited:
        out = probe_outputs(code, "network")
        assert out["policy"].shape[-1] == 2 and out["value"].ndim == 1, code
        assert np.all(np.isfinite(out["policy"])) and np.all(np.isfinite(out["value"]))


def test_a_terms_named_edit_computes_what_it_says():
    """On the novelty probe, a reworked term is the signed square root or signed square
    of the term it replaces, the others unchanged; a dropped term is gone."""
    from serl_jax.loop.novelty import probe_outputs

    rng = random.Random(10)
    hints = {draw_hint("form", "reward", [REWARD], rng) for _ in range(300)}
    before = probe_outputs(REWARD, "reward")
    assert len(hints) == 9
    for hint in hints:
        kind, fields = read_change(hint)
        term = fields["term"]
        if kind == "drop a term":  # the entry and its comma
            old = next(e for e in (fields["old"] + ", ", ", " + fields["old"]) if e in REWARD)
            after = probe_outputs(REWARD.replace(old, ""), "reward")
        else:
            after = probe_outputs(REWARD.replace(fields["old"], fields["new"]), "reward")
        if kind == "drop a term":
            assert set(after) == set(before) - {term}
            continue
        x = before[term].astype(np.float64)
        want = np.sign(x) * np.sqrt(np.abs(x)) if "square root" in hint else x * np.abs(x)
        np.testing.assert_allclose(after[term], want, rtol=1e-5, atol=1e-6)
        for other in set(before) - {term, "total"}:
            np.testing.assert_array_equal(after[other], before[other])


def test_the_prompt_ends_with_the_hint_naming_the_best_program():
    shots = [Program("j1-c0", "reward", REWARD, -3.0), Program("j1-c1", "reward", REWARD, -9.0)]
    hint = "Change `WEIGHT` from 0.3 to 0.6."
    plain = search_prompt("better", "reward", shots)
    hinted = search_prompt("better", "reward", shots, hint=hint)
    assert "Make this change" not in plain
    assert plain.endswith(f"{_ANSWER_FORMAT['reward']}\n")
    assert (
        hinted == plain + f"Make this change to candidate j1-c0 (the last program above): {hint}\n"
    )


TRACED = """\
import jax.numpy as jnp

A = 1.0
B = 2.0
C = 3.0
D = 4.0
E = 5.0


def scaled(x):
    return E * x


def reward(prev_state, action, next_state, params):
    base = A * next_state.last_qty
    if_big = base > 1.0
    mixed = base
    mixed += B
    other = jnp.where(if_big, C, 0.0)
    return {"one": base, "two": mixed + other, "three": scaled(D), "four": 0.0}
"""


def test_constants_are_traced_to_the_terms_they_feed():
    # locals follow their assignments (+= keeps what it had); helpers count whole
    assert constants_by_term(TRACED) == {
        "one": {"A"},
        "two": {"A", "B", "C"},
        "three": {"D", "E"},
        "four": set(),
    }
    assert constants_by_term("def not_reward():\n    return {'x': 1}\n") == {}


def test_inert_terms_are_not_named():
    """A constant that feeds only inert terms is left out, one that also feeds a live
    term is kept; an inert term is neither dropped nor reworked."""
    rng = random.Random(4)
    inert = frozenset({"two", "three"})
    params = {draw_hint("parameters", "reward", [TRACED], rng, inert_terms=inert)
              for _ in range(300)}  # fmt: skip
    # A feeds 'one' (live) and 'two'; B and C only 'two', D and E only 'three'
    assert params == {"Change `A` from 1.0 to 0.5.", "Change `A` from 1.0 to 2.0."}
    drawn = {draw_hint("form", "reward", [TRACED], rng, inert_terms=inert) for _ in range(600)}
    assert not any("'two'" in h or "'three'" in h for h in drawn)
    assert "Drop the term 'one': delete `\"one\": base` from the returned dict." in drawn
    assert "Drop the term 'four': delete `\"four\": 0.0` from the returned dict." in drawn


def test_the_probe_names_the_fields_it_cannot_tell_apart():
    from serl_jax.loop.novelty import _probe_inputs, probe_constant_fields

    _, _, prev, _, nxt, _ = _probe_inputs()
    fields = probe_constant_fields()
    assert "pace" in fields  # one-minute steps: the child order's pace is 0
    for name in ("time", "inventory", "last_price"):
        assert name not in fields
    for name in fields:
        values = {float(v) for state in (prev, nxt) for v in getattr(state, name).ravel()}
        assert len(values) == 1


def test_a_crossover_carries_a_part_of_the_first_program_into_the_best():
    """The donor (shown first) has terms 'pa' (the best has it too), 'carry' (live) and
    'flat' (inert on the probe), and reads inventory and pace (pace inert): the hints
    carry 'carry' or inventory over, nothing else; a network donor with tanh and layer
    normalization gives its activation only to a best that has the normalization."""
    donor = (
        "def reward(prev_state, action, next_state, params):\n"
        "    held = next_state.inventory + next_state.pace\n"
        "    return {'pa': 1.0, 'carry': 2.0 * held, 'flat': 0.0 * held}\n"
    )
    rng = random.Random(5)
    drawn = {
        draw_hint("crossover", "reward", [donor, REWARD], rng, inert_fields=frozenset({"pace"}),
                  donor_inert_terms=frozenset({"flat"}))
        for _ in range(300)
    }  # fmt: skip
    assert drawn == {
        "Add the term 'carry' of the first program above (computed as there) and keep the others.",
        "Return one more term computed from `next_state.inventory` or "
        "`prev_state.inventory`, as the first program above reads it.",
    }
    tanh = NETWORK.replace("nn.relu", "nn.tanh")
    drawn = {draw_hint("crossover", "network", [tanh, NETWORK], rng) for _ in range(100)}
    assert drawn == {
        "Replace every `nn.relu` with `nn.tanh`, the activation of the first program above."
    }
    bare = NETWORK.replace("        h = nn.LayerNorm()(h)\n", "")
    drawn = {draw_hint("crossover", "network", [tanh, bare], rng) for _ in range(200)}
    assert drawn == {
        "Replace every `nn.relu` with `nn.tanh`, the activation of the first program above.",
        "Add the layer normalization of the first program above (`nn.LayerNorm`).",
    }
    # nothing the donor has that the best lacks: no change
    assert draw_hint("crossover", "network", [bare, NETWORK], rng) is None


def test_every_change_drawn_reads_back_to_its_kind_and_fields():
    """read_change inverts draw_hint: every sentence drawn from the hand-made programs, of
    every kind of change, reads back to one kind and fields that write it again."""
    donor = (
        "def reward(prev_state, action, next_state, params):\n"
        "    return {'pa': 1.0, 'carry': 2.0 * next_state.inventory}\n"
    )
    tanh = NETWORK.replace("nn.relu", "nn.tanh")
    bare = NETWORK.replace("        h = nn.LayerNorm()(h)\n", "")
    rng = random.Random(7)
    drawn = {
        draw_hint(kind, module, shots, rng)
        for kind in ("better", "form", "parameters", "crossover")
        for module, shots in (("reward", [donor, REWARD]), ("network", [tanh, bare]),
                              ("network", [NETWORK]), ("network", [LOOPED]))
        for _ in range(200)
    } - {None}  # fmt: skip
    read = {hint: read_change(hint) for hint in drawn}
    assert {kind for kind, _ in read.values()} == set(CHANGES)
    for hint, (kind, fields) in read.items():
        assert hint in {
            template.format(**fields)
            for template in CHANGES[kind]
            if {f for _, f, _, _ in string.Formatter().parse(template) if f} == set(fields)
        }
    assert read["Change `WEIGHT` from 0.3 to 0.15."] == (
        "constant", {"name": "WEIGHT", "value": "0.3", "new": "0.15"},
    )  # fmt: skip
    assert read["Drop the term 'pa2': delete `\"pa2\": pa` from the returned dict."] == (
        "drop a term", {"term": "pa2", "old": '"pa2": pa'},
    )  # fmt: skip
    # the general sentences, and those of runs stored before the edits were named
    assert read_change("Drop the term 'end' and keep the others.") == (
        "drop a term", {"term": "end"},
    )  # fmt: skip
    for kind, sentences in EARLIER_CHANGES.items():
        assert [read_change(s) for s in sentences] == [(kind, {})] * len(sentences)
    # a field named twice must be the same field; other text names no change
    assert read_change(
        "Return one more term computed from `next_state.cash` or `prev_state.time`, as the "
        "first program above reads it."
    ) is None  # fmt: skip
    assert read_change("Write a better program.") is None


def test_a_drop_the_run_has_is_not_named():
    """known_drops: dropping 'pa2' would return a program the run has, so it is not
    asked for; its other changes still are."""
    rng = random.Random(8)
    drawn = {
        draw_hint("form", "reward", [REWARD], rng, known_drops=frozenset({"pa2"}))
        for _ in range(300)
    }
    assert not any(h.startswith("Drop the term 'pa2'") for h in drawn)
    assert any(h.startswith("Drop the term 'pa'") for h in drawn)
    assert any(h.startswith("Rework the term 'pa2'") for h in drawn)


def test_a_change_asked_of_the_program_before_is_not_drawn_again():
    """The network's form changes but one were asked of it already: that one is drawn
    every time; with all asked, a form prompt names none."""
    rng = random.Random(4)
    everything = {draw_hint("form", "network", [NETWORK], rng) for _ in range(400)}
    left = "Add a skip connection: add a hidden layer's input to its output."
    assert left in everything and len(everything) == 10  # 6 activations, 1 + 1 + 2
    asked = everything - {left}
    assert {draw_hint("form", "network", [NETWORK], rng, asked=asked) for _ in range(50)} == {left}
    assert draw_hint("form", "network", [NETWORK], rng, asked=everything) is None


def test_a_constants_change_sets_no_value_tried():
    """The run's values of a constant (numerically: 32.0 is 32) are not set; with every
    value asked of the program, a parameters prompt names no change."""
    rng = random.Random(5)
    tried = {"width": {"64", "32.0", "128"}, "other": {"7"}}
    drawn = {draw_hint("parameters", "network", [NETWORK], rng, tried=tried) for _ in range(200)}
    assert drawn == {
        "Change `width` from 64 to 16.",
        "Change `width` from 64 to 256.",
        "Change `depth` from 2 to 1.",
        "Change `depth` from 2 to 4.",
    }
    deep = {**tried, "depth": {"1", "4.0", "8"}}
    hint = draw_hint("parameters", "network", [NETWORK], rng, tried=deep, asked=drawn)
    assert hint == "Change `depth` from 2 to 20."
    assert draw_hint("parameters", "network", [NETWORK], rng, tried=deep,
                     asked=drawn | {hint}) is None  # fmt: skip


def test_values_tried_collects_every_programs_constants():
    wide = NETWORK.replace("width: int = 64", "width: int = 256")
    assert values_tried([NETWORK, wide, REWARD, "def broken(:"]) == {
        "width": {"64", "256"},
        "depth": {"2"},
        "WEIGHT": {"0.3"},
        "OFFSET": {"-2"},
    }


def test_made_change_checks_the_edit_a_hint_names():
    """An answer made the change when its code holds the edit, however it is spaced or
    quoted; a copy of the shown program did not; a change named in words is not checked."""
    line = "h = nn.tanh(nn.Dense(8)(h))"
    add = f"Add a hidden layer: write the line `{line}` twice, one after the other."
    deeper = LOOPED.replace(f"{line}\n", f"{line}\n" * 2, 1)
    assert made_change(add, deeper, LOOPED) is True
    assert made_change(add, LOOPED, LOOPED) is False
    delete = "Remove a hidden layer: delete the line `h = nn.tanh(nn.Dense(8)(h))`."
    assert made_change(delete, deeper, LOOPED) is False
    assert made_change(delete, LOOPED, deeper) is True
    gelu = "Replace every `nn.tanh` with `nn.gelu`."
    assert made_change(gelu, LOOPED.replace("nn.tanh(", "nn.gelu("), LOOPED) is True
    # one tanh left, or gelu only named in a comment
    assert made_change(gelu, LOOPED.replace("nn.tanh(", "nn.gelu(", 1), LOOPED) is False
    assert made_change(gelu, "# use nn.gelu\n" + LOOPED, LOOPED) is False
    rework = (
        "Rework the term 'pa2' (its signed square): replace `\"pa2\": pa` with "
        '`"pa2": pa * jnp.abs(pa)`.'
    )
    assert made_change(rework, REWARD.replace('"pa2": pa', "'pa2':pa*jnp.abs( pa )"), REWARD)
    assert made_change(rework, REWARD, REWARD) is False
    drop = "Drop the term 'end' and keep the others."
    assert made_change(drop, REWARD.replace('"end"', '"finish"'), REWARD) is True
    assert made_change(drop, REWARD, REWARD) is False
    assert made_change("Change `WEIGHT` from 0.3 to 0.6.", REWARD.replace("0.3", "0.60"), REWARD)
    assert made_change("Change `WEIGHT` from 0.3 to 0.6.", REWARD, REWARD) is False
    skip = "Add a skip connection: add a hidden layer's input to its output."
    assert made_change(skip, LOOPED, LOOPED) is None
    assert made_change("Write a better program.", LOOPED, LOOPED) is None
