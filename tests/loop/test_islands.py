"""The island program database (serl_jax.loop.islands)."""

from __future__ import annotations

import json
import math
import random

import pytest

from serl_jax.loop.islands import Program, ProgramDatabase

REWARD = """\
import jax.numpy as jnp

WEIGHT = {weight}


def reward(prev_state, action, next_state, params):
    {name} = next_state.last_qty / jnp.maximum(next_state.quantity, 1e-9)
    return {{"fill": params.reward_scale * WEIGHT * {name}}}
"""


def reward(weight: float = 2.0, name: str = "fraction") -> str:
    """A one-term reward whose constant and local name vary."""
    return REWARD.format(weight=weight, name=name)


def program(cid: str, score: float, module: str = "reward", code: str | None = None) -> Program:
    """A program whose constant depends on its id (distinct ids, distinct canonical
    programs) unless ``code`` is given."""
    if code is None:
        code = reward(weight=float(sum(map(ord, cid))) + 0.5)
    return Program(cid, module, code, score)


def ids(programs) -> list[str]:
    return [p.candidate_id for p in programs]


def test_capacity_keeps_the_best_in_ascending_order():
    db = ProgramDatabase(num_islands=2, capacity=3)
    kept = [db.add(0, program(c, s)) for c, s in [("a", 1.0), ("b", 5.0), ("c", -2.0)]]
    assert kept == [True, True, True]
    assert ids(db.programs(0, "reward")) == ["c", "a", "b"]
    assert db.add(0, program("d", 3.0))  # evicts the worst, c
    assert ids(db.programs(0, "reward")) == ["a", "d", "b"]
    assert not db.add(0, program("e", 0.5))  # worse than every kept program
    assert ids(db.programs(0, "reward")) == ["a", "d", "b"]
    assert db.programs(1, "reward") == [] and db.programs(0, "network") == []
    assert db.best(0).candidate_id == "b" and db.best_score(0) == 5.0
    assert db.best(1) is None and db.best_score(1) == -math.inf


def test_ties_rank_in_insertion_order_and_modules_compete_separately():
    db = ProgramDatabase(num_islands=1, capacity=2)
    for c, s in [("a", 1.0), ("b", 1.0), ("c", 1.0)]:
        assert db.add(0, program(c, s))
    assert ids(db.programs(0, "reward")) == ["b", "c"]  # the earliest of the worst left
    assert db.add(0, program("n", 0.0, module="network"))
    assert ids(db.programs(0, "network")) == ["n"]
    assert db.modules(0) == ["reward", "network"]
    assert db.best(0).candidate_id == "c"


def test_non_finite_scores_are_not_added():
    db = ProgramDatabase(num_islands=1, capacity=4)
    for score in (math.nan, math.inf, -math.inf):
        assert not db.add(0, program("x", score))
    assert db.programs(0, "reward") == [] and db.best(0) is None


def test_canonical_duplicates_are_kept_once():
    db = ProgramDatabase(num_islands=2, capacity=5)
    assert db.add(0, program("a", 1.0, code=reward(2.0, "fraction")))
    # a renamed local variable and a comment: the same program
    renamed = "# a comment\n" + reward(2.0, "share")
    assert not db.add(0, program("b", 1.0, code=renamed))  # a tie keeps the earlier
    assert not db.add(0, program("c", 0.5, code=renamed))
    assert ids(db.programs(0, "reward")) == ["a"]
    assert db.add(0, program("d", 2.0, code=renamed))  # a higher score replaces it
    assert ids(db.programs(0, "reward")) == ["d"]
    # a changed constant is another program; another island or module is separate
    assert db.add(0, program("e", 0.0, code=reward(3.0, "fraction")))
    assert db.add(1, program("f", 1.0, code=reward(2.0, "fraction")))
    assert db.add(0, program("g", 1.0, module="other", code=reward(2.0, "fraction")))
    assert ids(db.programs(0, "reward")) == ["e", "d"]


def test_shots_are_distinct_and_ascending():
    db = ProgramDatabase(num_islands=1, capacity=10)
    for i in range(6):
        db.add(0, program(f"p{i}", float(i * i - 3 * i)))
    rng = random.Random(0)
    for k in range(8):
        drawn = db.shots(0, "reward", k, rng)
        assert len(drawn) == min(k, 6)
        assert len(set(ids(drawn))) == len(drawn)
        scores = [p.score for p in drawn]
        assert scores == sorted(scores)
    assert db.shots(0, "network", 3, rng) == []
    with pytest.raises(ValueError, match=r"^k: "):
        db.shots(0, "reward", -1, rng)


def test_shots_unlike_a_program_leave_out_its_canonical_twins():
    """``unlike``: programs equal to the given code up to the names they bind are never
    drawn (a renamed local is the same program; another constant is not)."""
    db = ProgramDatabase(num_islands=1, capacity=10)
    db.add(0, program("same", 5.0, code=reward(2.0)))
    db.add(0, program("other", 1.0, code=reward(3.0)))
    rng = random.Random(0)
    for _ in range(50):
        assert ids(db.shots(0, "reward", 2, rng, unlike=reward(2.0, name="share"))) == ["other"]
    assert db.shots(0, "reward", 1, rng, unlike=reward(3.0)) == [db.programs(0, "reward")[1]]
    db2 = ProgramDatabase(num_islands=1, capacity=10)
    db2.add(0, program("only", 1.0, code=reward(2.0)))
    assert db2.shots(0, "reward", 3, rng, unlike=reward(2.0)) == []


def test_shot_frequencies_follow_one_over_rank():
    n, draws = 5, 20_000
    db = ProgramDatabase(num_islands=1, capacity=n)
    for i in range(n):
        db.add(0, program(f"p{i}", float(i)))  # p4 is rank 0
    rng = random.Random(7)
    counts = {f"p{i}": 0 for i in range(n)}
    for _ in range(draws):
        [shot] = db.shots(0, "reward", 1, rng)
        counts[shot.candidate_id] += 1
    total = sum(1.0 / (r + 1) for r in range(n))
    for i in range(n):
        p = (1.0 / (n - i)) / total  # rank n - 1 - i
        sd = math.sqrt(draws * p * (1 - p))
        assert abs(counts[f"p{i}"] - draws * p) < 4 * sd, (i, counts)
    # k = 2: the best is in most pairs, the worst in fewest
    pairs = [ids(db.shots(0, "reward", 2, rng)) for _ in range(4_000)]
    seen = [sum(f"p{i}" in pair for pair in pairs) for i in range(n)]
    assert seen == sorted(seen) and seen[-1] > 2 * seen[0]


def test_shots_and_resets_are_deterministic_given_the_rng():
    def run(seed):
        db = ProgramDatabase(num_islands=4, capacity=3)
        for i in range(12):
            db.add(i % 4, program(f"p{i}", float((7 * i) % 11)))
        rng = random.Random(seed)
        shots = [ids(db.shots(i, "reward", 2, rng)) for i in range(4)]
        return shots, db.reset(rng), db.to_dict()

    assert run(3) == run(3)


def test_reset_empties_the_worst_islands_and_copies_a_survivors_best():
    db = ProgramDatabase(num_islands=5, capacity=3)
    best_scores = [4.0, -1.0, 9.0, 2.0, 2.0]
    for i, top in enumerate(best_scores):
        db.add(i, program(f"r{i}-lo", top - 5.0))
        db.add(i, program(f"r{i}-hi", top))
        db.add(i, program(f"n{i}", top - 1.0, module="network"))
    db.add(2, program("n2-hi", 50.0, module="network"))
    before = {i: (db.programs(i, "reward"), db.programs(i, "network")) for i in range(5)}
    rng = random.Random(1)
    reset = db.reset(rng, fraction=0.5)
    # floor(5 * 0.5) = 2 worst: island 1 (-1.0), then of the tie at 2.0 the higher index, 4
    assert reset == [1, 4]
    for i in (0, 2, 3):
        assert (db.programs(i, "reward"), db.programs(i, "network")) == before[i]
    for i in reset:
        [r], [n] = db.programs(i, "reward"), db.programs(i, "network")
        source = next(s for s in (0, 2, 3) if before[s][0][-1] == r)
        assert before[source][1][-1] == n  # the same survivor's best per module
    # the survivor is drawn uniformly: over many resets every survivor is drawn
    drawn = set()
    for seed in range(40):
        db2 = ProgramDatabase(num_islands=3, capacity=1)
        for i in range(3):
            db2.add(i, program(f"s{i}", float(i)))
        assert db2.reset(random.Random(seed)) == [0]
        drawn.add(db2.programs(0, "reward")[0].candidate_id)
    assert drawn == {"s1", "s2"}


def test_reset_edge_cases():
    single = ProgramDatabase(num_islands=1, capacity=2)
    single.add(0, program("a", 1.0))
    assert single.reset(random.Random(0), fraction=1.0) == []
    assert ids(single.programs(0, "reward")) == ["a"]
    db = ProgramDatabase(num_islands=3, capacity=2)
    db.add(2, program("a", 1.0))
    assert db.reset(random.Random(0), fraction=0.0) == []
    # fraction 1 keeps one survivor; empty islands rank worst and copy nothing from empty
    assert db.reset(random.Random(0), fraction=1.0) == [0, 1]
    assert all(ids(db.programs(i, "reward")) == ["a"] for i in range(3))
    with pytest.raises(ValueError, match=r"^fraction: "):
        db.reset(random.Random(0), fraction=1.5)


def test_to_dict_is_json():
    db = ProgramDatabase(num_islands=2, capacity=2)
    db.add(0, program("a", 1.5))
    db.add(0, program("b", -0.5))
    db.add(1, program("n", 3.0, module="network"))
    snapshot = json.loads(json.dumps(db.to_dict()))
    assert snapshot == {
        "num_islands": 2,
        "capacity": 2,
        "islands": [
            {"reward": [{"candidate_id": "b", "score": -0.5}, {"candidate_id": "a", "score": 1.5}]},
            {"network": [{"candidate_id": "n", "score": 3.0}]},
        ],
    }


@pytest.mark.parametrize(
    "kwargs,name",
    [
        ({"num_islands": 0, "capacity": 1}, "num_islands"),
        ({"num_islands": 2, "capacity": 0}, "capacity"),
        ({"num_islands": 1.5, "capacity": 1}, "num_islands"),
    ],
)
def test_bad_construction_arguments_raise(kwargs, name):
    with pytest.raises(ValueError, match=rf"^{name}: ") as err:
        ProgramDatabase(**kwargs)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("island", [-1, 2, True, "0"])
def test_bad_island_index_raises(island):
    db = ProgramDatabase(num_islands=2, capacity=1)
    for call in (
        lambda: db.add(island, program("a", 1.0)),
        lambda: db.programs(island, "reward"),
        lambda: db.best(island),
        lambda: db.best_score(island),
        lambda: db.shots(island, "reward", 1, random.Random(0)),
    ):
        with pytest.raises(ValueError, match=r"^island: "):
            call()
