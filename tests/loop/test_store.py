"""The SQLite run store: atomic proposals, status updates, reopening."""

from __future__ import annotations

import sqlite3

import pytest

from serl_jax.loop import Candidate, IterationSummary, RunStore, StoreError


def test_create_record_and_reopen(tmp_path):
    root = tmp_path / "run"
    store = RunStore.create(root, {"loop": {"iterations": 2}}, "loop: {}\n")
    assert store.meta("config") == {"loop": {"iterations": 2}}
    assert store.meta("status") == "running"
    c0 = Candidate("j1-c0", 1, 0, "reward", code="x = 1\n", parent_ids=["j0-default"])
    c1 = Candidate("j1-c1", 1, 1, "network", status="rejected", error="no code")
    ids = store.add_proposals(
        1,
        [
            ("reward", "design", "prompt R", ["c0"], None),
            ("network", "design", "prompt N", ["c1"], None),
        ],
        [(0, c0), (1, c1)],
    )
    assert (c0.prompt_id, c1.prompt_id) == tuple(ids)
    c0.status, c0.score, c0.metrics = "evaluated", -18.5, {"pa": -18.5, "glr": None}
    store.update(c0)
    store.finish_iteration(IterationSummary(1, -18.5, -19.0, "j1-c0", False))
    store.close()

    again = RunStore.open(root)
    got = again.candidates(1)
    assert [c.id for c in got] == ["j1-c0", "j1-c1"]
    assert got[0].status == "evaluated" and got[0].metrics == {"pa": -18.5, "glr": None}
    assert got[0].parent_ids == ["j0-default"] and got[1].error == "no code"
    assert [p["prompt"] for p in again.prompts(1)] == ["prompt R", "prompt N"]
    assert again.prompts(1)[0]["completions"] == ["c0"]
    assert again.iterations() == [IterationSummary(1, -18.5, -19.0, "j1-c0", False)]
    assert (root / "config.yaml").read_text() == "loop: {}\n"


def test_proposals_are_all_or_nothing(tmp_path):
    store = RunStore.create(tmp_path / "run", {}, "")
    good = Candidate("j1-c0", 1, 0, "reward")
    bad = Candidate("j1-c1", 1, 1, "reward", status="nonsense")
    with pytest.raises(ValueError, match="unknown status 'nonsense'"):
        store.add_proposals(1, [("reward", "design", "p", ["a", "b"], None)], [(0, good), (0, bad)])
    assert store.candidates() == [] and store.prompts() == []
    store.add_proposals(1, [("reward", "design", "p", ["a"], None)], [(0, good)])
    with pytest.raises(sqlite3.IntegrityError):  # the same candidate id twice
        store.add_proposals(1, [], [(None, Candidate("j1-c0", 1, 0, "reward"))])
    assert len(store.candidates()) == 1


def test_non_finite_metrics_are_refused(tmp_path):
    store = RunStore.create(tmp_path / "run", {}, "")
    cand = Candidate("j1-c0", 1, 0, "reward")
    store.add_proposals(1, [], [(None, cand)])
    cand.metrics = {"pa": float("nan")}
    with pytest.raises(ValueError):
        store.update(cand)


def test_bad_folders_are_one_line_errors(tmp_path):
    RunStore.create(tmp_path / "run", {}, "")
    with pytest.raises(StoreError, match="already exists"):
        RunStore.create(tmp_path / "run", {}, "")
    with pytest.raises(StoreError, match="not an SE-RL run folder"):
        RunStore.open(tmp_path / "missing")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "run.sqlite").write_text("not a database")
    with pytest.raises(StoreError, match="cannot be read"):
        RunStore.open(tmp_path / "junk")
