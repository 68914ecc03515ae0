"""High-level DEK: the instruction buffer and its in-context replay.

Entries are ``(instruction, code, score)`` triples of evaluated candidates (the score is
the run's ``loop.score``: validation shortfall or PA, bps). The buffer keeps the
``capacity`` best by score (ties: the earlier entry stays first). Prompts replay the
best ``k`` of a module as in-context examples sorted by ascending score, so the best
sits closest to the request, as OPRO does (Yang et al., 2023, "Large Language Models as
Optimizers", Sec. 2.2: "solutions ... sorted in the ascending order" of score).
Instructions are scored by the best score of the candidates written under them; the
refinement prompt shows them the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["BufferEntry", "InstructionBuffer"]


@dataclass(frozen=True)
class BufferEntry:
    """One evaluated candidate in the buffer.

    Attributes:
        candidate_id: the candidate's id (e.g. ``j2-c1``).
        module: the slot kind (``reward``, ``network``).
        instruction: the instruction text it was written under.
        code: the candidate's code.
        score: the validation score (``loop.score``), bps (higher is better).
        metrics: other validation metrics shown with it (``wr``, ``glr``, ``afi``).
    """

    candidate_id: str
    module: str
    instruction: str
    code: str
    score: float
    metrics: Mapping[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable form."""
        out = asdict(self)
        out["metrics"] = dict(self.metrics)
        return out


class InstructionBuffer:
    """The best ``capacity`` evaluated candidates, for in-context replay.

    Args:
        capacity: most entries kept (>= 1).
        entries: initial entries (e.g. restored from a run store).

    Raises:
        ValueError: ``capacity < 1``.
    """

    def __init__(self, capacity: int, entries: Iterable[BufferEntry] = ()):
        if capacity < 1:
            raise ValueError(f"instruction buffer capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self._entries: list[BufferEntry] = []
        for e in entries:
            self.add(e)

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, entry: BufferEntry) -> None:
        """Inserts an entry; drops the worst when over capacity (a stable sort keeps the
        earlier of equal scores)."""
        self._entries.append(entry)
        self._entries.sort(key=lambda e: -e.score)
        del self._entries[self.capacity :]

    def best(self, k: int, module: str | None = None) -> list[BufferEntry]:
        """The ``k`` best entries (of ``module`` if given), best first."""
        pool = [e for e in self._entries if module is None or e.module == module]
        return pool[: max(int(k), 0)]

    def examples(self, k: int, module: str) -> list[BufferEntry]:
        """In-context examples for a prompt: the ``k`` best of ``module``, ascending by score
        (best last, as in OPRO)."""
        return list(reversed(self.best(k, module)))

    def instruction_scores(self) -> list[tuple[str, float]]:
        """Distinct instructions with the best score obtained under each, best first."""
        scores: dict[str, float] = {}
        for e in self._entries:
            scores[e.instruction] = max(scores.get(e.instruction, e.score), e.score)
        return sorted(scores.items(), key=lambda item: -item[1])
