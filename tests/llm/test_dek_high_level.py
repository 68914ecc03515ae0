"""The high-level DEK's instruction buffer."""

from __future__ import annotations

import pytest

from llm.dek import BufferEntry, InstructionBuffer


def entry(cid, score, module="reward", instruction="i0"):
    return BufferEntry(cid, module, instruction, f"# {cid}", score)


def test_buffer_keeps_the_best_and_replays_them_ascending():
    buf = InstructionBuffer(3)
    for cid, pa in [("a", -20.0), ("b", -18.0), ("c", -25.0), ("d", -19.0), ("e", -18.0)]:
        buf.add(entry(cid, pa))
    assert len(buf) == 3
    # b and e tie: the earlier one ranks first.
    assert [e.candidate_id for e in buf.best(3)] == ["b", "e", "d"]
    assert [e.candidate_id for e in buf.examples(2, "reward")] == ["e", "b"]  # best last


def test_buffer_filters_by_module_and_scores_instructions():
    buf = InstructionBuffer(10)
    buf.add(entry("r1", -20.0, "reward", "A"))
    buf.add(entry("n1", -19.0, "network", "A"))
    buf.add(entry("r2", -22.0, "reward", "B"))
    assert [e.candidate_id for e in buf.examples(5, "network")] == ["n1"]
    assert buf.instruction_scores() == [("A", -19.0), ("B", -22.0)]
    assert buf.best(0) == []
    assert entry("x", 1.0).to_dict()["score"] == 1.0


def test_buffer_capacity_must_be_positive():
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        InstructionBuffer(0)
